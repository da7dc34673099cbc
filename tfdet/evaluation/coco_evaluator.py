"""COCO metrics of results entries with pycocotools' COCOeval, the way Detectron runs it.

Each iou type (bbox, segm, keypoints) is evaluated on its own results list (see
`results.split_by_iou_type`) over the ground truth's sorted image ids; COCOeval's standard table
(12 numbers, 10 for keypoints) is printed and returned with Detectron's per-category AP (IoU 0.5:0.95,
all areas, most detections). OKS sigmas: COCO's person sigmas for 17 keypoints; for any other count,
`DEFAULT_OKS_SIGMA` for every keypoint. That is the choice for the shapes dataset, whose 5
geometric keypoints (extreme points and centre) are exact: 0.05 sits between COCO's sigmas for
precise face points (0.025-0.035) and for joints (0.062-0.107), so a keypoint within about 6 px
of a 50 px shape's keypoint scores OKS 0.5.
"""

import contextlib
import io
import json
import math
import pathlib

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from tfdet.data.coco_json import coco_of, load_json
from tfdet.evaluation.results import IOU_TYPES, split_by_iou_type

COCO_PERSON_OKS_SIGMAS = (
    np.array([0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07, 0.87, 0.87, 0.89, 0.89])
    / 10.0
)
DEFAULT_OKS_SIGMA = 0.05
DETECTION_STATS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")
KEYPOINT_STATS = ("AP", "AP50", "AP75", "APm", "APl", "AR", "AR50", "AR75", "ARm", "ARl")


def load_coco(annotation_file):
    """pycocotools COCO of an annotation file read as UTF-8 whatever the locale (`coco_json.load_json`, as training
    reads it; pycocotools' own reader uses the locale's encoding), quietly, with a one-line error for a missing or
    bad file."""
    data = load_json(annotation_file)
    try:
        return coco_of(data)
    except (KeyError, TypeError) as error:
        raise ValueError(f"{annotation_file} is not a COCO annotation file: {error!r}") from None


def keypoint_names(coco_gt):
    """The keypoint names of the ground truth's categories (they must agree), or None without keypoints."""
    schemas = {tuple(c["keypoints"]) for c in coco_gt.loadCats(coco_gt.getCatIds()) if c.get("keypoints")}
    if len(schemas) > 1:
        raise ValueError("categories have different keypoint schemas; one keypoint head cannot serve them")
    return list(schemas.pop()) if schemas else None


def oks_sigmas(num_keypoints):
    """COCOeval's keypoint sigmas: COCO's person sigmas for 17 keypoints, DEFAULT_OKS_SIGMA otherwise."""
    if num_keypoints == len(COCO_PERSON_OKS_SIGMAS):
        return COCO_PERSON_OKS_SIGMAS.copy()
    return np.full(num_keypoints, DEFAULT_OKS_SIGMA)


def iou_types_of(results):
    """The iou types present in results entries, in the order bbox, segm, keypoints."""
    return list(split_by_iou_type(results))


def evaluate_results(coco_gt, results, iou_types=None, image_ids=None, keypoint_oks_sigmas=None):
    """{iou_type: {stat: value}} for results entries (`detections_to_coco`'s) against `coco_gt`.

    `iou_types`: the types to evaluate (default: those the results carry; a type with no entries
    scores 0, as a model that found nothing). `image_ids`: evaluate on these images only (default:
    all). `keypoint_oks_sigmas`: overrides `oks_sigmas`.
    """
    split = split_by_iou_type(results)
    iou_types = list(iou_types) if iou_types is not None else list(split) or ["bbox"]
    unknown = [t for t in iou_types if t not in IOU_TYPES]
    if unknown:
        raise ValueError(f"unknown iou types {unknown}; known: {', '.join(IOU_TYPES)}")
    _check_results(coco_gt, results)
    image_ids = sorted(coco_gt.getImgIds() if image_ids is None else image_ids)
    metrics = {}
    for iou_type in iou_types:
        print(f"Evaluating {iou_type} on {len(image_ids)} images:")
        coco_eval = _run_cocoeval(coco_gt, split.get(iou_type, []), iou_type, image_ids, keypoint_oks_sigmas)
        coco_eval.summarize()
        names = KEYPOINT_STATS if iou_type == "keypoints" else DETECTION_STATS
        metrics[iou_type] = {name: float(value) for name, value in zip(names, coco_eval.stats)}
        metrics[iou_type].update(_per_category_ap(coco_gt, coco_eval))
    print(summary_line(metrics))
    return metrics


def _check_results(coco_gt, results):
    image_ids = {r["image_id"] for r in results} - set(coco_gt.getImgIds())
    if image_ids:
        raise ValueError(f"results name images not in the annotations: {sorted(image_ids)[:10]}")
    category_ids = {r["category_id"] for r in results} - set(coco_gt.getCatIds())
    if category_ids:
        raise ValueError(f"results name categories not in the annotations: {sorted(category_ids)}")


def _run_cocoeval(coco_gt, entries, iou_type, image_ids, keypoint_oks_sigmas):
    if iou_type == "keypoints":
        names = keypoint_names(coco_gt)
        if names is None:
            raise ValueError("keypoint results given, but the annotations' categories have no keypoints")
        bad = [len(e["keypoints"]) for e in entries if len(e["keypoints"]) != 3 * len(names)]
        if bad:
            raise ValueError(f"results have {bad[0] // 3} keypoints per instance, the annotations {len(names)}")
    with contextlib.redirect_stdout(io.StringIO()):
        coco_dt = coco_gt.loadRes([dict(e) for e in entries]) if entries else _empty_results(coco_gt)
        coco_eval = COCOeval(coco_gt, coco_dt, iou_type)
        coco_eval.params.imgIds = image_ids
        if iou_type == "keypoints":
            sigmas = keypoint_oks_sigmas if keypoint_oks_sigmas is not None else oks_sigmas(len(names))
            coco_eval.params.kpt_oks_sigmas = np.asarray(sigmas, np.float64)
        coco_eval.evaluate()
        coco_eval.accumulate()
    return coco_eval


def _empty_results(coco_gt):
    coco_dt = COCO()
    coco_dt.dataset = {
        "images": coco_gt.dataset["images"],
        "categories": coco_gt.dataset["categories"],
        "annotations": [],
    }
    coco_dt.createIndex()
    return coco_dt


def _per_category_ap(coco_gt, coco_eval):
    """{'AP-<name>': AP} over IoU 0.5:0.95, all areas, the largest maxDets (Detectron's per-class log)."""
    precision = coco_eval.eval["precision"]  # (iou, recall, category, area, max detections)
    result = {}
    for k, category_id in enumerate(coco_eval.params.catIds):
        values = precision[:, :, k, 0, -1]
        values = values[values > -1]
        if values.size:
            result[f"AP-{coco_gt.cats[category_id]['name']}"] = float(np.mean(values))
    return result


def summary_line(metrics):
    """One line: AP (and AP50) of every evaluated type."""
    parts = [
        f"{iou_type} AP {_fmt(stats['AP'])} AP50 {_fmt(stats['AP50'])}" for iou_type, stats in metrics.items()
    ]
    return "COCO " + " | ".join(parts)


def _fmt(value):
    return "n/a" if value < 0 or math.isnan(value) else f"{value:.4f}"


def write_metrics(path, metrics):
    """Write metrics as json (creates the folder)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
