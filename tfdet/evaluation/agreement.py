"""How far two detectors' outputs on one image agree: the top detections of a reference (float32) matched
to a candidate's (a mixed precision run), with box shifts, score and mask-IoU differences.

Matching, in the reference's score order: each of its top-k detections takes the unmatched candidate
detection of the same class with the highest box IoU, if that IoU is at least `iou_threshold`.
"""

import numpy as np


def box_iou(box, boxes):
    """IoU of one x1,y1,x2,y2 box with each of `boxes`, Detectron's +1 widths."""
    widths = np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]) + 1
    heights = np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]) + 1
    inter = np.clip(widths, 0, None) * np.clip(heights, 0, None)
    area = (box[2] - box[0] + 1) * (box[3] - box[1] + 1)
    areas = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    return inter / (area + areas - inter)


def mask_iou(first, second):
    """IoU of two boolean masks (1.0 when both are empty)."""
    union = np.logical_or(first, second).sum()
    return float(np.logical_and(first, second).sum() / union) if union else 1.0


def detection_agreement(reference, candidate, top_k=10, iou_threshold=0.5):
    """{compared, matched, median_box_shift, max_box_shift (pixels), max_score_difference,
    mean_score_difference, min_mask_iou, mean_mask_iou} for one image. `reference` and `candidate`:
    dicts of numpy arrays `boxes` (N, 4), `scores` (N,), `classes` (N,), optionally `masks` (N, ...)
    boolean, sorted by score."""
    count = min(top_k, len(reference["scores"]))
    taken = np.zeros(len(candidate["scores"]), bool)
    shifts, score_differences, mask_ious = [], [], []
    for index in range(count):
        ious = box_iou(reference["boxes"][index], candidate["boxes"]) if len(candidate["scores"]) else np.zeros(0)
        ious[(candidate["classes"] != reference["classes"][index]) | taken] = -1.0
        if not len(ious) or ious.max() < iou_threshold:
            continue
        match = int(ious.argmax())
        taken[match] = True
        shifts.append(np.abs(reference["boxes"][index] - candidate["boxes"][match]).max())
        score_differences.append(abs(float(reference["scores"][index]) - float(candidate["scores"][match])))
        if "masks" in reference:
            mask_ious.append(mask_iou(reference["masks"][index], candidate["masks"][match]))
    return {
        "compared": count,
        "matched": len(shifts),
        "median_box_shift": float(np.median(shifts)) if shifts else 0.0,
        "max_box_shift": float(max(shifts, default=0.0)),
        "max_score_difference": float(max(score_differences, default=0.0)),
        "mean_score_difference": float(np.mean(score_differences)) if score_differences else 0.0,
        "min_mask_iou": float(min(mask_ious, default=1.0)),
        "mean_mask_iou": float(np.mean(mask_ious)) if mask_ious else 1.0,
    }
