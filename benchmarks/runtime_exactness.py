"""How exactly each runtime export gives the Predictor's detections, for Detectron's full-size families.

For each config (Detectron's R-50 baselines: Faster / Mask R-CNN C4 and FPN, Keypoint R-CNN FPN, RetinaNet FPN)
with seeded random weights whose classifier kernel is scaled (--classifier-scale) so that scores spread instead
of all sitting at ~1/81 (the order of detections would otherwise rest on 1e-6 differences): the float32 exports
of each --runtimes entry against `Predictor.predict` on demo photos and on a flat image of the pixel means. Per
family and runtime it prints the detections matched (same class, box within --box-atol px, score within
--score-atol) out of the Predictor's, those matched within 1 px and 1e-2, the largest box and score differences
of the matched ones, the smallest and mean mask IoU, and the largest keypoint distance. The first row of each
family, `tf+1ulp`, is TensorFlow itself with every input value moved by one float32 step: how far float32
rounding alone moves these random models' detections, the floor the runtimes are measured against.

    python benchmarks/runtime_exactness.py --out DIR [--runtimes onnx,openvino,litert] [--configs a.yaml,b.yaml]
        [--images 2]
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import json
import pathlib
import sys

import cv2
import keras
import numpy as np

from savedmodel.export import main as export_main
from savedmodel.runtime_export import FORMATS
from savedmodel.runtimes import ExportedModel
from tfdet.config import load_config
from tfdet.evaluation.agreement import mask_iou
from tfdet.imaging.image_io import read_image
from tfdet.inference import Predictor

ROOT = pathlib.Path(__file__).resolve().parents[1]
BASELINES = ROOT.parent / "shared" / "detectron" / "configs" / "12_2017_baselines"
DEMO = ROOT.parent / "shared" / "data" / "detectron_demo"
CONFIGS = ("e2e_faster_rcnn_R-50-C4_1x.yaml", "e2e_mask_rcnn_R-50-C4_1x.yaml", "e2e_faster_rcnn_R-50-FPN_1x.yaml",
           "e2e_mask_rcnn_R-50-FPN_1x.yaml", "e2e_keypoint_rcnn_R-50-FPN_1x.yaml", "retinanet_R-50-FPN_1x.yaml")
CLASSIFIERS = ("cls_score", "retnet_cls_pred_fpn3")


def seeded_weights(config, out, scale):
    """A .weights.h5 of `config`'s model: Detectron's initialisation (seed 0), classifier kernel x `scale`."""
    path = out / f"{pathlib.Path(config).stem}.weights.h5"
    if not path.is_file():
        keras.utils.set_random_seed(0)
        model = Predictor(load_config(config)).model
        for name in CLASSIFIERS:
            try:
                layer = model.get_layer(name)
            except ValueError:
                continue
            layer.kernel.assign(layer.kernel.numpy() * scale)
        model.save_weights(str(path))
    return path


class OneStepFromPredictor:
    """The Predictor with every value of its input blob moved one float32 step up."""

    def __init__(self, predictor):
        self.predictor = predictor

    def predict(self, image):
        inputs = self.predictor.model_inputs([image])
        inputs["images"] = np.nextafter(inputs["images"], np.float32(np.inf))
        outputs = {key: value.numpy() for key, value in self.predictor._run(inputs).items()}
        return self.predictor._image_results(outputs, 0, image.shape[:2])


def compare(got, want, box_atol, score_atol):
    """{matched, loose, expected, served, max_box, max_score, min_mask_iou, mask_ious, max_keypoint} of two
    detection dicts."""
    free = list(range(len(got["scores"])))
    row = {"expected": len(want["scores"]), "served": len(got["scores"]), "matched": 0, "loose": 0, "max_box": 0.0,
           "max_score": 0.0, "min_mask_iou": 1.0, "mask_ious": [], "max_keypoint": 0.0}  # fmt: skip
    for j in range(len(want["scores"])):
        candidates = [i for i in free if got["classes"][i] == want["classes"][j]]
        if not candidates:
            continue
        i = min(candidates, key=lambda i: np.abs(got["boxes"][i] - want["boxes"][j]).max())
        box = float(np.abs(got["boxes"][i] - want["boxes"][j]).max())
        score = abs(float(got["scores"][i]) - float(want["scores"][j]))
        row["loose"] += int(box <= 1.0 and score <= 1e-2)
        if box > box_atol or score > score_atol:
            continue
        free.remove(i)
        row["matched"] += 1
        row["max_box"], row["max_score"] = max(row["max_box"], box), max(row["max_score"], score)
        if "masks" in want:
            row["mask_ious"].append(mask_iou(got["masks"][i], want["masks"][j]))
            row["min_mask_iou"] = min(row["min_mask_iou"], row["mask_ious"][-1])
        if "keypoints" in want:
            distance = float(np.abs(got["keypoints"][i][:, :2] - want["keypoints"][j][:, :2]).max())
            row["max_keypoint"] = max(row["max_keypoint"], distance)
    return row


def export(config, weights, runtime, out):
    """The ExportedModel of `config` for `runtime` (written once under `out`), or None where it does not export."""
    path = out / f"{config.stem}{FORMATS[runtime]}"
    if not path.is_file():
        command = ["--cfg", str(config), "--weights", str(weights), "--format", runtime, "--out", str(path)]
        if export_main(command) != 0:  # its one-line reason is printed above
            return None
    return ExportedModel(path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--runtimes", default="onnx,openvino,litert")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--images", type=int, default=2, help="demo photos (a flat image is added)")
    parser.add_argument("--classifier-scale", type=float, default=10.0)
    parser.add_argument("--box-atol", type=float, default=0.05)
    parser.add_argument("--score-atol", type=float, default=1e-4)
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    images = [read_image(p) for p in sorted(DEMO.glob("*.jpg"))[: args.images]]
    images.append(np.ascontiguousarray(np.broadcast_to(np.array([102, 116, 123], np.uint8), (480, 640, 3))))
    table = {}
    for name in args.configs.split(","):
        config = BASELINES / name if not pathlib.Path(name).is_file() else pathlib.Path(name)
        weights = seeded_weights(config, out, args.classifier_scale)
        predictor = Predictor(load_config(config), weights)
        wanted = [predictor.predict(image) for image in images]
        for runtime in ["tf+1ulp", *args.runtimes.split(",")]:
            model = OneStepFromPredictor(predictor) if runtime == "tf+1ulp" else export(config, weights, runtime, out)
            if model is None:
                table[f"{config.stem} {runtime}"] = "not exported"
                print(f"{config.stem:36s} {runtime:9s} not exported", flush=True)
                continue
            rows = [compare(model.predict(image), want, args.box_atol, args.score_atol)
                    for image, want in zip(images, wanted)]  # fmt: skip
            total = {key: sum(row[key] for row in rows) for key in ("expected", "served", "matched", "loose")}
            total.update(max_box=max(r["max_box"] for r in rows), max_score=max(r["max_score"] for r in rows),
                         min_mask_iou=min(r["min_mask_iou"] for r in rows),
                         mean_mask_iou=float(np.mean([v for r in rows for v in r["mask_ious"]] or [1.0])),
                         max_keypoint=max(r["max_keypoint"] for r in rows),
                         flat_image_detections=rows[-1]["expected"])  # fmt: skip
            table[f"{config.stem} {runtime}"] = total
            print(f"{config.stem:36s} {runtime:9s} matched {total['matched']}/{total['expected']} (within 1 px: "
                  f"{total['loose']}; served {total['served']}), box <= {total['max_box']:.4f} px, score <= "
                  f"{total['max_score']:.2e}, mask IoU min {total['min_mask_iou']:.3f} mean {total['mean_mask_iou']:.4f}, "
                  f"keypoints <= {total['max_keypoint']:.4f} px", flush=True)
    (out / "exactness.json").write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
