"""Accuracy of each runtime export and precision against TensorFlow float32, on a dataset with ground truth.

For a trained model (config + weights) and a COCO-format validation set: the TF `Predictor` in float32 (the
reference) and, when asked, in TFDET.MIXED_PRECISION mixed_bfloat16; then each `--variants` entry
RUNTIME:PRECISION exported with `python -m savedmodel.export --format RUNTIME --precision PRECISION` (int8
calibrated on `--calibrate`, a dataset name) and run by `savedmodel.runtimes.ExportedModel`, the runner's model.
For each: box / mask / keypoint AP (pycocotools COCOeval through tfdet's evaluation) and agreement with the
reference (`tfdet.evaluation.agreement`: of the reference's detections scoring >= --agree-score, the share
matched by a detection of the same class with box IoU >= 0.9, and the mean mask IoU of the matched ones).

    python benchmarks/runtime_precision.py --cfg CFG --weights W --dataset coco:VAL.json:DIR \
        --calibrate coco:TRAIN.json:DIR --out DIR [--variants onnx:float32,onnx:int8,openvino:float32,...]
        [--tf-bfloat16] [TEST overrides KEY VALUE ...]

Writes DIR/<variant>.<ext> (the exports) and DIR/precision.json, and prints the table.
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import contextlib
import io
import json
import pathlib
import sys
import time
import types

import numpy as np

from savedmodel.export import main as export_main
from savedmodel.runtime_export import FORMATS
from savedmodel.runtimes import ExportedModel
from tfdet.config import load_config
from tfdet.data.catalog import get_dataset
from tfdet.data.coco_classes import model_categories
from tfdet.evaluate import dataset_predictions
from tfdet.evaluation import evaluate_results, load_coco
from tfdet.evaluation.agreement import detection_agreement
from tfdet.inference import Predictor

DEFAULT_VARIANTS = "onnx:float32,onnx:int8,openvino:float32,openvino:bfloat16"
AGREE_IOU = 0.9


class _Recorder:
    """A predictor that keeps every image's detections (for the agreement) while the evaluation runs it."""

    def __init__(self, model, keypoint_confidence):
        self.model = model
        self.cfg = types.SimpleNamespace(KRCNN=types.SimpleNamespace(KEYPOINT_CONFIDENCE=keypoint_confidence))
        self.detections = []

    def predict(self, images):
        results = self.model.predict(images)
        self.detections += results
        return results


def evaluate(model, keypoint_confidence, coco_gt, image_dir, category_ids):
    """(metrics, per-image detections, seconds) of `model` (anything with Predictor's predict) on the dataset."""
    recorder = _Recorder(model, keypoint_confidence)
    start = time.perf_counter()
    results, unreadable = dataset_predictions(recorder, category_ids, coco_gt, image_dir)
    seconds = time.perf_counter() - start
    if unreadable:
        raise SystemExit(f"unreadable images: {unreadable[:3]}")
    with contextlib.redirect_stdout(io.StringIO()):  # COCOeval's tables: the summary line is printed below
        metrics = evaluate_results(coco_gt, results)
    return metrics, recorder.detections, seconds


def agreement(reference, candidate, min_score):
    """(share of the reference's detections >= min_score matched at box IoU >= AGREE_IOU, mean mask IoU)."""
    compared = matched = 0
    mask_ious = []
    for ref, cand in zip(reference, candidate):
        keep = ref["scores"] >= min_score
        top = {key: value[keep] for key, value in ref.items() if key in ("boxes", "scores", "classes", "masks")}
        row = detection_agreement(top, cand, top_k=int(keep.sum()), iou_threshold=AGREE_IOU)
        compared, matched = compared + row["compared"], matched + row["matched"]
        if row["matched"]:
            mask_ious.append(row["mean_mask_iou"])
    return matched / max(compared, 1), float(np.mean(mask_ious)) if mask_ious else float("nan")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cfg", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--dataset", required=True, help="validation dataset name (coco:JSON:DIR, shapes_val, ...)")
    parser.add_argument("--calibrate", help="int8 calibration dataset name")
    parser.add_argument("--out", required=True)
    parser.add_argument("--variants", default=DEFAULT_VARIANTS)
    parser.add_argument("--tf-bfloat16", action="store_true", help="also TF with TFDET.MIXED_PRECISION mixed_bfloat16")
    parser.add_argument("--agree-score", type=float, default=0.5)
    parser.add_argument("opts", nargs="*")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(args.cfg, args.opts)
    spec = get_dataset(args.dataset)
    coco_gt = load_coco(spec.annotation_file)
    predictor = Predictor(cfg, args.weights)
    category_ids = model_categories(
        cfg.MODEL.NUM_CLASSES, cfg.MODEL.KEYPOINTS_ON, coco_gt.dataset, predictor.categories
    ).json_ids
    confidence = cfg.KRCNN.KEYPOINT_CONFIDENCE
    rows = {}
    reference = None
    runs = [("tf:float32", lambda: predictor)]
    if args.tf_bfloat16:
        runs.append(("tf:bfloat16", lambda: Predictor(load_config(
            args.cfg, [*args.opts, "TFDET.MIXED_PRECISION", "mixed_bfloat16"]), args.weights)))  # fmt: skip
    for variant in filter(None, args.variants.split(",")):
        runtime, precision = variant.split(":")
        runs.append((variant, lambda runtime=runtime, precision=precision: _export(args, out, runtime, precision)))
    for name, make in runs:
        model = make()
        metrics, detections, seconds = evaluate(model, confidence, coco_gt, spec.image_dir, category_ids)
        row = {t: round(100 * m["AP"], 2) for t, m in metrics.items()}
        if reference is None:
            reference = detections
            row.update(agree=1.0, mask_iou=1.0)
        else:
            share, mask_iou = agreement(reference, detections, args.agree_score)
            row.update(agree=round(share, 4), mask_iou=round(mask_iou, 4))
        row["seconds"] = round(seconds, 1)
        rows[name] = row
        print(f"{name:18s} " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    (out / "precision.json").write_text(json.dumps({"dataset": args.dataset, "weights": args.weights, "rows": rows},
                                                   indent=1))  # fmt: skip
    return 0


def _export(args, out, runtime, precision):
    path = out / f"{runtime}_{precision}{FORMATS[runtime]}"
    command = ["--cfg", args.cfg, "--weights", args.weights, "--format", runtime, "--precision", precision,
               "--out", str(path), "--overwrite", *args.opts]  # fmt: skip
    if precision == "int8":
        command += ["--calibrate", args.calibrate]
    if export_main(command) != 0:
        raise SystemExit(f"export {runtime}:{precision} failed")
    return ExportedModel(path)


if __name__ == "__main__":
    sys.exit(main())
