"""python -m tfdet.demo: the main job end to end on the built-in shapes dataset, on CPU.

    python -m tfdet.demo [--out outputs/demo] [--cfg configs/shapes_tiny_mask_keypoint.yaml] [--photo P] [KEY VALUE ...]

1. generates `shapes_train` / `shapes_val` on first use (`tfdet.data.shapes`, into $TFDET_DATA_DIR);
2. paints shapes with known ground truth on a real photo (`tfdet.data.photo_shapes`): a shapes model
   knows no street-photo object, so on the bare photo it would rightly detect nothing;
3. trains the tiny Mask + Keypoint R-CNN with `python -m tfdet.train` (resumes when run again) and
   evaluates it on shapes_val with COCOeval (bbox, segm, keypoints);
4. draws its detections on a shapes_val image and on the painted photo (`python -m tfdet.infer`) and
   counts the shapes it found there;
5. exports a TF Serving SavedModel (`python -m savedmodel.export`).

Every command is the project's own command line, called in this process. Each stage prints a line
as it starts and one summary line with its time as it ends; what a command prints to stdout goes to
OUT/logs/<stage>.log, while its progress bars stay on the terminal. OUT receives `train/`
(checkpoints, metrics.json, model_final.weights.h5, config.yaml, results and metrics of shapes_val),
`photo_shapes/` (the painted photo and its COCO ground truth), `pictures/shapes_val/` and
`pictures/photo/` (each picture with its detections json), `savedmodel/shapes_tiny/1/` and `logs/`.
The last lines say where each output is and what the APs mean. Exit status: 0 done, 2 a bad
argument, config or photo, else the status of the command that failed.
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import contextlib
import io
import json
import logging
import pathlib
import sys
import time

import numpy as np
import pycocotools.mask as mask_util

from tfdet.console import add_verbose_flag, parse_args_with_overrides

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO_ROOT / "configs" / "shapes_tiny_mask_keypoint.yaml"
DEMO_PHOTO = REPO_ROOT / "demo" / "24274813513_0cfd2ce6d0_k.jpg"
TRAIN_DATASET, VAL_DATASET = "shapes_train", "shapes_val"
SAVEDMODEL_NAME = "shapes_tiny"
IOU_TYPES = ("bbox", "segm", "keypoints")
MATCH_IOU = 0.5  # a detection finds a shape when its box overlaps the shape's box this much (and the class is right)
STAGES = 6
INDENT = " " * 6


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tfdet.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="outputs/demo", help="output folder (outputs/demo)")
    parser.add_argument("--cfg", default=str(DEFAULT_CONFIG), help="training config (the tiny shapes model)")
    parser.add_argument("--photo", default=str(DEMO_PHOTO), help="a photo to paint shapes on and detect them")
    parser.add_argument("--seed", type=int, default=0, help="seed of the shapes painted on the photo (0)")
    parser.add_argument("--thresh", type=float, default=0.5, help="score threshold of the pictures (0.5)")
    add_verbose_flag(parser)
    parser.add_argument(
        "opts", nargs=argparse.REMAINDER, help="config overrides: KEY VALUE ... (flags may also follow them)"
    )
    return parse_args_with_overrides(parser, argv)


class StageFailed(Exception):
    """A stage that cannot go on: its one-line reason and the demo's exit status."""

    def __init__(self, reason, status):
        super().__init__(reason)
        self.status = status


class StdoutLog(io.TextIOBase):
    """A command's stdout written to its log file; isatty() answers for the terminal, so the command
    still shows the progress bars it shows on a terminal."""

    def __init__(self, file, terminal):
        self.file, self.terminal = file, terminal

    def write(self, text):
        return self.file.write(text)

    def flush(self):
        self.file.flush()

    def isatty(self):
        return self.terminal.isatty()


class Progress:
    """The demo's own output: a numbered line as each stage starts, one summary line with its time as it ends."""

    def __init__(self, log_dir):
        self.log_dir, self.number, self.started = log_dir, 0, None

    def start(self, title):
        self.number += 1
        self.started = time.perf_counter()
        print(f"[{self.number}/{STAGES}] {title}", flush=True)

    def end(self, summary):
        print(f"{INDENT}{summary} ({time.perf_counter() - self.started:.1f} s)", flush=True)

    def command(self, name, main, args):
        """`main(args)` of a command line, its stdout in logs/<name>.log; raises StageFailed on a non-zero status."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "w", encoding="utf-8") as log, contextlib.redirect_stdout(StdoutLog(log, sys.stdout)):
            status = main(args)
        if status:
            raise StageFailed(f"'{name}' failed (status {status}); its output is in {log_path}", status)


def load_coco(path):
    with open(path, encoding="utf-8") as coco_file:
        return json.load(coco_file)


def first_image(coco):
    """(image entry, its annotations) of the image with the smallest id."""
    image = min(coco["images"], key=lambda entry: entry["id"])
    return image, [a for a in coco["annotations"] if a["image_id"] == image["id"]]


def found_shapes(annotations, detections, thresh):
    """(shapes found, false detections) among the detections scoring >= thresh: each, best score first,
    finds the unfound shape of its class whose box overlaps its box most, if by IoU >= MATCH_IOU."""
    unfound = list(annotations)
    shown = sorted((d for d in detections if d["score"] >= thresh), key=lambda d: -d["score"])
    found = 0
    for detection in shown:
        candidates = [a for a in unfound if a["category_id"] == detection["category_id"]]
        if not candidates:
            continue
        boxes = np.array([a["bbox"] for a in candidates], np.float64)
        ious = mask_util.iou(np.array([detection["bbox"]], np.float64), boxes, [0] * len(candidates))[0]
        best = int(np.argmax(ious))
        if ious[best] >= MATCH_IOU:
            unfound.remove(candidates[best])
            found += 1
    return found, len(shown) - found


def read_metrics(train_dir):
    """{iou type: {"AP": .., "AP50": ..}} of the evaluation `tfdet.train` wrote for shapes_val."""
    metrics = load_coco(train_dir / f"metrics_{VAL_DATASET}.json")
    return {iou_type: metrics[iou_type] for iou_type in IOU_TYPES if iou_type in metrics}


def ap_meaning(metrics, num_images):
    """Two lines: the APs on shapes_val and how to read them."""
    bbox = metrics["bbox"]
    others = {iou_type: stats["AP"] for iou_type, stats in metrics.items() if iou_type != "bbox"}
    scored = {"segm": "the masks", "keypoints": "the keypoints (by OKS)"}
    rest = "".join(f", {iou_type} AP {ap:.3f} scores {scored[iou_type]}" for iou_type, ap in others.items())
    return (
        f"bbox AP {bbox['AP']:.3f}: COCO's mean average precision over box IoU thresholds 0.50:0.95 on the "
        f"{num_images} {VAL_DATASET} images (1.0 would be perfect);\nAP50 {bbox['AP50']:.3f}: the same at IoU 0.5 "
        f"alone{rest}."
    )


def quiet_libraries():
    """Python-side warnings and errors only from TensorFlow and absl, whose info lines would fill screens;
    tfdet's own info lines stay (the native side is quieted by tfdet.console). Set before the commands run,
    whose logging setup then keeps it."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("tfdet").setLevel(logging.INFO)


def main(argv=None):
    args = parse_args(argv)
    quiet_libraries()
    from tfdet.config import load_config
    from tfdet.config.errors import ConfigError
    from tfdet.train import check_uses

    photo = pathlib.Path(args.photo)
    if not photo.is_file():
        print(f"error: photo not found: {photo}", file=sys.stderr)
        return 2
    try:
        cfg = load_config(args.cfg, args.opts)
        check_uses(cfg, export=True)  # what any stage would refuse, before the first
    except (ConfigError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    try:
        return run_stages(args, cfg, out)
    except StageFailed as failure:
        print(f"error: {failure}", file=sys.stderr)
        return failure.status


def run_stages(args, cfg, out):
    """The demo's stages in order; returns 0 (a stage that cannot go on raises StageFailed)."""
    from savedmodel import export
    from tfdet import infer, train
    from tfdet.data.catalog import get_dataset
    from tfdet.data.photo_shapes import write_photo_shapes
    from tfdet.engine.checkpoint import FINAL_WEIGHTS
    from tfdet.engine.weights import CONFIG_FILE

    train_dir, pictures_dir = out / "train", out / "pictures"
    savedmodel_dir = out / "savedmodel" / SAVEDMODEL_NAME / "1"
    weights, config = str(train_dir / FINAL_WEIGHTS), str(train_dir / CONFIG_FILE)
    progress = Progress(out / "logs")
    began = time.perf_counter()
    print(f"tfdet demo: a tiny Mask + Keypoint R-CNN on synthetic shapes, into {out}", flush=True)

    progress.start("shapes datasets")
    specs = [get_dataset(name) for name in (TRAIN_DATASET, VAL_DATASET)]
    train_coco, val_coco = (load_coco(spec.annotation_file) for spec in specs)
    shapes_root = specs[1].annotation_file.parent.parent
    progress.end(f"{TRAIN_DATASET} ({len(train_coco['images'])} images) and {VAL_DATASET} "
                 f"({len(val_coco['images'])} images) in {shapes_root}")

    progress.start(f"shapes on the photo {pathlib.Path(args.photo).name}")
    try:
        photo_image, photo_json = write_photo_shapes(args.photo, out / "photo_shapes", args.seed)
    except ValueError as error:  # a photo that cannot be read or cannot hold the shapes
        raise StageFailed(str(error), 2) from error
    photo_coco = load_coco(photo_json)
    progress.end(f"{len(photo_coco['annotations'])} shapes painted (seed {args.seed}): {photo_image}")

    progress.start(f"train {cfg.SOLVER.MAX_ITER} iterations, then evaluate on {VAL_DATASET} (resumes from {train_dir})")
    progress.command("train", train.main, ["--cfg", args.cfg, *args.opts, "OUTPUT_DIR", str(train_dir)])
    metrics = read_metrics(train_dir)
    progress.end(", ".join(f"{iou_type} AP {stats['AP']:.3f}" for iou_type, stats in metrics.items()))

    val_image, val_annotations = first_image(val_coco)
    _, photo_annotations = first_image(photo_coco)
    pictures = []
    for folder, image_path, annotations, dataset_json in (
        ("shapes_val", specs[1].image_dir / val_image["file_name"], val_annotations, specs[1].annotation_file),
        ("photo", photo_image, photo_annotations, photo_json),
    ):
        progress.start(f"detect on {image_path.name}")
        output = pictures_dir / folder
        progress.command(f"infer_{folder}", infer.main, [
            "--cfg", config, "--weights", weights, "--input", str(image_path), "--output", str(output),
            "--dataset-json", str(dataset_json), "--thresh", str(args.thresh), "--always-out",
        ])
        found, false = found_shapes(annotations, load_coco(output / "detections.json"), args.thresh)
        pictures.append(output / f"{image_path.name}.png")
        progress.end(f"{found} of {len(annotations)} shapes found, {false} false detections: {pictures[-1]}")

    progress.start("export the SavedModel")
    progress.command("export", export.main,
                     ["--cfg", config, "--weights", weights, "--out", str(savedmodel_dir), "--overwrite"])
    progress.end(f"{savedmodel_dir} (signatures serving_default, image_tensor)")

    served = savedmodel_dir.parent.resolve()
    minutes, seconds = divmod(round(time.perf_counter() - began), 60)
    print(f"\nDone in {minutes} min {seconds} s. Outputs:")
    for label, value in (
        ("training", f"{train_dir} (checkpoints, model_final.weights.h5, config.yaml, metrics.json)"),
        ("metrics", train_dir / f"metrics_{VAL_DATASET}.json"),
        ("pictures", pictures[0]),
        ("", pictures[1]),
        ("its truth", f"{photo_json} (the painted shapes, COCO json)"),
        ("SavedModel", savedmodel_dir),
        ("serve it", f'docker run --rm -p 8501:8501 -v "{served}:/models/{SAVEDMODEL_NAME}" '
                     f"-e MODEL_NAME={SAVEDMODEL_NAME} tensorflow/serving"),
        ("ask it", f"python -m savedmodel.client --url http://localhost:8501/v1/models/{SAVEDMODEL_NAME} "
                   f"--image {photo_image}"),
        ("logs", progress.log_dir),
    ):
        print(f"  {label:10s} {value}")
    print(f"A shape is found by a detection of its class scoring >= {args.thresh} with box IoU >= {MATCH_IOU}.")
    print(ap_meaning(metrics, len(val_coco["images"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
