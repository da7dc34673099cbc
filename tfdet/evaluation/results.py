"""COCO results entries from Predictor detections, with Detectron's conventions.

Facts from Detectron's `datasets/json_dataset_evaluator.py` and `utils/boxes.py`:
- bbox is `xyxy_to_xywh`: [x1, y1, x2 - x1 + 1, y2 - y1 + 1] (legacy "+1" widths);
- segmentation is a compressed RLE of the full-image mask with `counts` decoded to an ASCII str;
- keypoints are flat [x, y, 1] * K (Detectron writes visibility 1 for every predicted keypoint);
  their score follows `KRCNN.KEYPOINT_CONFIDENCE`: 'bbox' (Detectron's default) is the box score,
  'logit' the mean of the K heatmap logits, 'prob' the mean of their probabilities;
- category ids: contiguous id c in 1..C-1 is the json id `coco.getCatIds()[c - 1]`, the categories in the
  order the json lists them (json_dataset's `json_category_id_to_contiguous_id`; not sorted).

One entry per detection carries everything known about it (`bbox`, `score`, and `segmentation`,
`keypoints` when predicted). A keypoint score that differs from the box score is kept as
`keypoints_score`. `split_by_iou_type` turns such entries into Detectron's three separate result
lists, so pycocotools computes each result's area from the field being evaluated, as it does
for Detectron's separate files.
"""

import json
import pathlib

import numpy as np

KEYPOINT_CONFIDENCES = ("bbox", "logit", "prob")
IOU_TYPES = ("bbox", "segm", "keypoints")
_IOU_TYPE_FIELD = {"bbox": "bbox", "segm": "segmentation", "keypoints": "keypoints"}


def contiguous_to_json_ids(coco):
    """[0 (background), json id of contiguous class 1, ...]: Detectron's category mapping."""
    return [0] + list(coco.getCatIds())


def xyxy_to_xywh(boxes):
    """(N, 4) x1, y1, x2, y2 -> x, y, w, h with w = x2 - x1 + 1 (Detectron's `xyxy_to_xywh`)."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    return np.hstack([boxes[:, :2], boxes[:, 2:] - boxes[:, :2] + 1.0])


def xywh_to_xyxy(boxes):
    """(N, 4) x, y, w, h -> x1, y1, x2, y2 with x2 = x + max(w - 1, 0) (Detectron's `xywh_to_xyxy`)."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    return np.hstack([boxes[:, :2], boxes[:, :2] + np.maximum(boxes[:, 2:] - 1.0, 0.0)])


def encode_mask(mask):
    """Compressed RLE of one (H, W) binary mask, as `pycocotools.mask.encode` gives it (`counts` as str, so
    that it is json-serialisable), in NumPy: writing results needs no pycocotools (the TF-free runner)."""
    mask = np.asarray(mask)
    height, width = mask.shape
    flat = mask.astype(bool).ravel(order="F")  # COCO's RLE runs down the columns
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    edges = np.concatenate([[0], changes, [flat.size]])
    counts = np.diff(edges)
    if flat.size and flat[0]:  # runs alternate starting with background: a leading empty run
        counts = np.concatenate([[0], counts])
    return {"size": [int(height), int(width)], "counts": _rle_string(counts.tolist())}


def _rle_string(counts):
    """pycocotools' `rleToString`: each run (after the second, as the difference to the run two before) in
    5-bit groups, least significant first, offset by 48; bit 5 marks that more groups follow."""
    characters = []
    for i, value in enumerate(counts):
        value = value - counts[i - 2] if i > 2 else value
        more = True
        while more:
            group = value & 0x1F
            value >>= 5
            more = value != -1 if group & 0x10 else value != 0
            characters.append(chr(group + 48 + (0x20 if more else 0)))
    return "".join(characters)


def detections_to_coco(detections, image_id, category_ids, keypoint_confidence="bbox"):
    """COCO results entries for one image's `Predictor.predict` output.

    `detections`: `boxes` (N, 4) x1, y1, x2, y2, `scores` (N,), `classes` (N,) contiguous ids
    1..C-1, optional `masks` (N, H, W) bool, `keypoints` (N, K, 3) x, y, logit and
    `keypoint_probs` (N, K) (needed for keypoint_confidence 'prob').
    `category_ids`: contiguous id -> json category id (index 0, background, unused), e.g.
    `contiguous_to_json_ids(coco)`. `keypoint_confidence`: cfg.KRCNN.KEYPOINT_CONFIDENCE.
    """
    if keypoint_confidence not in KEYPOINT_CONFIDENCES:
        raise ValueError(
            f"keypoint_confidence must be one of {KEYPOINT_CONFIDENCES}, got {keypoint_confidence!r}"
        )
    boxes = xyxy_to_xywh(detections["boxes"])
    scores = np.asarray(detections["scores"], np.float64).reshape(-1)
    classes = np.asarray(detections["classes"]).reshape(-1)
    masks = detections.get("masks")
    keypoints = detections.get("keypoints")
    if not len(boxes) == len(scores) == len(classes):
        raise ValueError(f"boxes, scores and classes differ in length: {len(boxes)}, {len(scores)}, {len(classes)}")
    entries = []
    for i in range(len(scores)):
        class_id = int(classes[i])
        if not 1 <= class_id < len(category_ids):
            raise ValueError(f"class {class_id} is outside 1..{len(category_ids) - 1} (the dataset's categories)")
        entry = {
            "image_id": int(image_id),
            "category_id": int(category_ids[class_id]),
            "bbox": [float(v) for v in boxes[i]],
            "score": float(scores[i]),
        }
        if masks is not None:
            entry["segmentation"] = encode_mask(masks[i])
        if keypoints is not None:
            points = np.asarray(keypoints[i], np.float64)
            entry["keypoints"] = [float(v) for x, y in points[:, :2] for v in (x, y, 1.0)]
            if keypoint_confidence == "logit":
                entry["keypoints_score"] = float(points[:, 2].mean())
            elif keypoint_confidence == "prob":
                entry["keypoints_score"] = float(np.mean(detections["keypoint_probs"][i]))
        entries.append(entry)
    return entries


def split_by_iou_type(results):
    """{iou_type: entries} in Detectron's per-type form ({image_id, category_id, <field>, score}).

    Only the types some entry carries appear; a keypoint entry's score is its `keypoints_score`
    when present.
    """
    split = {}
    for iou_type in IOU_TYPES:
        field = _IOU_TYPE_FIELD[iou_type]
        entries = [
            {
                "image_id": r["image_id"],
                "category_id": r["category_id"],
                field: r[field],
                "score": r.get("keypoints_score", r["score"]) if iou_type == "keypoints" else r["score"],
            }
            for r in results
            if field in r
        ]
        if entries:
            split[iou_type] = entries
    return split


def write_results(path, results):
    """Write results entries as a COCO results json file (a list of objects); creates the folder."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(list(results), f)


def read_results(path):
    """Results entries from a COCO results json file, with a one-line error when it is not one."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"results file not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            results = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not a json file: {error}") from None
    if not isinstance(results, list) or not all(
        isinstance(r, dict) and {"image_id", "category_id", "score"} <= r.keys() for r in results
    ):
        raise ValueError(f"{path} is not a COCO results file (a list of objects with image_id, category_id, score)")
    return results
