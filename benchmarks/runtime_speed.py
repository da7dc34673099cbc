"""Speed of each runtime export and precision against TensorFlow float32, alternated in one process.

Every variant is timed on the whole `predict` of one image (preparation, the model, mask pasting, keypoint
decoding), the variants taken in turn within each round so that a machine's drift falls on all of them alike;
median and min over the rounds, and each one's ratio to `tf:float32` (the `Predictor`). Models:
- `maskrcnn`: Detectron's e2e_mask_rcnn_R-50-FPN_1x at TEST.SCALE 800 / MAX_SIZE 1333 on an 800 x 1344 image
  (a demo photo resized), random weights (Detectron's initialisation, seeded) with TEST.SCORE_THRESH 0 so
  every call carries TEST.DETECTIONS_PER_IM (100) detections and masks, the load of a trained model; int8 is
  calibrated on the demo photos.
- `shapes_tiny`: the demo's model (configs/shapes_tiny_mask_keypoint.yaml) with --weights (the demo's
  model_final.weights.h5) on a shapes validation image; int8 calibrated on shapes_train.
TF Model Garden's time is not taken here (its own venv: ../shared/peers/tfmg_maskrcnn_bench.py); compare
it with `tf:float32` alternately, and multiply.

    python benchmarks/runtime_speed.py --model maskrcnn --out DIR [--rounds 7]
        [--variants tf:float32,tf:bfloat16,onnx:float32,onnx:int8,openvino:float32,openvino:bfloat16]
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import json
import pathlib
import statistics
import sys
import time

import cv2
import keras

from savedmodel.export import main as export_main
from savedmodel.runtime_export import FORMATS
from savedmodel.runtimes import ExportedModel
from tfdet.config import load_config
from tfdet.imaging.image_io import read_image
from tfdet.inference import Predictor

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO = ROOT.parent / "shared" / "data" / "detectron_demo"
MASK_RCNN = ROOT.parent / "shared" / "detectron" / "configs" / "12_2017_baselines" / "e2e_mask_rcnn_R-50-FPN_1x.yaml"
TINY = ROOT / "configs" / "shapes_tiny_mask_keypoint.yaml"
DEFAULT_VARIANTS = "tf:float32,tf:bfloat16,onnx:float32,onnx:int8,openvino:float32,openvino:bfloat16"


def model_setup(args, out):
    """(config path, overrides, weights path, image, int8 calibration images) of `args.model`."""
    if args.model == "maskrcnn":
        overrides = ["TEST.SCORE_THRESH", "0.0"]
        weights = out / "maskrcnn_random.weights.h5"
        if not weights.is_file():
            keras.utils.set_random_seed(0)
            Predictor(load_config(MASK_RCNN, overrides)).model.save_weights(str(weights))
        photo = read_image(sorted(DEMO.glob("*.jpg"))[0])
        return MASK_RCNN, overrides, weights, cv2.resize(photo, (1344, 800)), str(DEMO)
    if args.weights is None:
        raise SystemExit("--model shapes_tiny needs --weights (the demo's model_final.weights.h5)")
    from tfdet.data.catalog import get_dataset

    val = get_dataset("shapes_val")
    image = read_image(sorted(pathlib.Path(val.image_dir).glob("*.jpg"))[0])
    return TINY, [], pathlib.Path(args.weights), image, "shapes_train"


def make_variant(variant, cfg_path, overrides, weights, calibrate, out):
    """An object with `predict(image)` for RUNTIME:PRECISION."""
    runtime, precision = variant.split(":")
    if runtime == "tf":
        mixed = {"float32": [], "bfloat16": ["TFDET.MIXED_PRECISION", "mixed_bfloat16"]}[precision]
        return Predictor(load_config(cfg_path, [*overrides, *mixed]), weights)
    path = out / f"{pathlib.Path(cfg_path).stem}_{runtime}_{precision}{FORMATS[runtime]}"
    if not path.is_file():
        command = ["--cfg", str(cfg_path), "--weights", str(weights), "--format", runtime, "--precision", precision,
                   "--out", str(path), *(["--calibrate", calibrate] if precision == "int8" else []), *overrides]  # fmt: skip
        if export_main(command) != 0:
            raise SystemExit(f"export of {variant} failed")
    return ExportedModel(path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("maskrcnn", "shapes_tiny"), default="maskrcnn")
    parser.add_argument("--weights", help="shapes_tiny: the trained weights")
    parser.add_argument("--out", required=True, help="folder for the exports (reused when there) and speed.json")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg_path, overrides, weights, image, calibrate = model_setup(args, out)
    variants = args.variants.split(",")
    models = {v: make_variant(v, cfg_path, overrides, weights, calibrate, out) for v in variants}
    detections = {}
    for variant, model in models.items():
        for _ in range(args.warmup):
            detections[variant] = len(model.predict(image)["scores"])
    times = {variant: [] for variant in variants}
    for _ in range(args.rounds):
        for variant, model in models.items():
            start = time.perf_counter()
            model.predict(image)
            times[variant].append(time.perf_counter() - start)
    base = times[variants[0]]
    print(f"{args.model} on {image.shape[0]}x{image.shape[1]}, {args.rounds} rounds; ratios to {variants[0]}")
    rows = {}
    for variant in variants:
        median, fastest = statistics.median(times[variant]), min(times[variant])
        rows[variant] = {"median_s": median, "min_s": fastest, "median_ratio": median / statistics.median(base),
                         "min_ratio": fastest / min(base), "detections": detections[variant]}  # fmt: skip
        print(f"{variant:18s} median {median:.3f} s  min {fastest:.3f} s  ratio {rows[variant]['median_ratio']:.2f} / "
              f"{rows[variant]['min_ratio']:.2f}  ({detections[variant]} detections)")
    (out / f"speed_{args.model}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
