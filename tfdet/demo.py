"""python -m tfdet.demo: the main job end to end on the built-in shapes dataset, on CPU.

    python -m tfdet.demo [--out outputs/demo] [--cfg configs/shapes_tiny_mask_keypoint.yaml] [KEY VALUE ...]

1. generates `shapes_train` / `shapes_val` on first use (`tfdet.data.shapes`, into $TFDET_DATA_DIR);
2. trains the tiny Mask + Keypoint R-CNN with `python -m tfdet.train` (resumes when run again);
3. evaluates it on shapes_val with COCOeval (bbox, segm, keypoints);
4. draws its detections on a shapes_val image and on a demo photo (`python -m tfdet.infer`);
5. exports a TF Serving SavedModel (`python -m savedmodel.export`).

Every step is the project's own command line, called in this process; OUT receives `train/` (checkpoints,
metrics.json, model_final.weights.h5, results and metrics of shapes_val), `pictures/shapes_val/` and
`pictures/photo/` (each picture with its detections json) and `savedmodel/shapes_tiny/1/`. The summary at the end gives the APs and each step's time. Exit status:
0 done, else the status of the step that failed.
"""

import argparse
import json
import pathlib
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO_ROOT / "configs" / "shapes_tiny_mask_keypoint.yaml"
DEMO_PHOTO = REPO_ROOT / "demo" / "24274813513_0cfd2ce6d0_k.jpg"
VAL_DATASET = "shapes_val"
SAVEDMODEL_NAME = "shapes_tiny"
IOU_TYPES = ("bbox", "segm", "keypoints")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tfdet.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="outputs/demo", help="output folder (outputs/demo)")
    parser.add_argument("--cfg", default=str(DEFAULT_CONFIG), help="training config (the tiny shapes model)")
    parser.add_argument("--photo", default=str(DEMO_PHOTO), help="a photo to draw the detections on")
    parser.add_argument("--thresh", type=float, default=0.5, help="score threshold of the pictures (0.5)")
    parser.add_argument("opts", nargs=argparse.REMAINDER, help="config overrides: KEY VALUE ...")
    return parser.parse_args(argv)


def first_val_image():
    """The path of shapes_val's first image (the dataset is generated if needed)."""
    from tfdet.data.catalog import get_dataset

    spec = get_dataset(VAL_DATASET)
    with open(spec.annotation_file, encoding="utf-8") as annotation_file:
        first = min(json.load(annotation_file)["images"], key=lambda image: image["id"])
    return spec.image_dir / first["file_name"], spec.annotation_file


def read_metrics(train_dir):
    """{iou type: AP} of the evaluation `tfdet.train` wrote for shapes_val."""
    metrics = json.loads((train_dir / f"metrics_{VAL_DATASET}.json").read_text())
    return {iou_type: metrics[iou_type]["AP"] for iou_type in IOU_TYPES if iou_type in metrics}


class Steps:
    """Runs the steps in order and times each."""

    def __init__(self):
        self.seconds = {}

    def run(self, name, function, *args):
        """`function(*args)`, timed under `name`; returns its value."""
        print(f"\n=== {name}", flush=True)
        tic = time.perf_counter()
        value = function(*args)
        self.seconds[name] = time.perf_counter() - tic
        return value


def main(argv=None):
    args = parse_args(argv)
    from savedmodel import export
    from tfdet import infer, train
    from tfdet.engine.checkpoint import FINAL_WEIGHTS
    from tfdet.engine.trainer import CONFIG_FILE

    out = pathlib.Path(args.out)
    train_dir, pictures_dir = out / "train", out / "pictures"
    savedmodel_dir = out / "savedmodel" / SAVEDMODEL_NAME / "1"
    weights, config = str(train_dir / FINAL_WEIGHTS), str(train_dir / CONFIG_FILE)
    steps = Steps()
    val_image, val_json = steps.run("generate shapes", first_val_image)
    commands = [("train + evaluate", train.main, ["--cfg", args.cfg, *args.opts, "OUTPUT_DIR", str(train_dir)])]
    for folder, picture_input in (("shapes_val", val_image), ("photo", pathlib.Path(args.photo))):
        commands.append((f"draw {picture_input.name}", infer.main, [
            "--cfg", config, "--weights", weights, "--input", str(picture_input), "--output", str(pictures_dir / folder),
            "--dataset-json", str(val_json), "--thresh", str(args.thresh), "--always-out",
        ]))
    commands.append(("export SavedModel", export.main,
                     ["--cfg", config, "--weights", weights, "--out", str(savedmodel_dir), "--overwrite"]))
    for name, command, command_args in commands:
        status = steps.run(name, command, command_args)
        if status:
            print(f"error: step '{name}' failed (status {status})", file=sys.stderr)
            return status
    print("\n=== summary")
    for iou_type, average_precision in read_metrics(train_dir).items():
        print(f"{VAL_DATASET} {iou_type:9s} AP {average_precision:.3f}")
    for name, seconds in steps.seconds.items():
        print(f"{name:32s} {seconds:7.1f} s")
    print(f"pictures: {pictures_dir}\nSavedModel: {savedmodel_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
