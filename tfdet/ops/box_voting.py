"""Detectron's bounding-box voting (utils/boxes.py `box_voting`), batched and in pure TensorFlow.

Each kept box becomes the score-weighted mean of every candidate of its class that overlaps it by
IoU >= the threshold (itself included); its score stays or becomes a mean of the voters' scores.
Detectron's pipeline never passes `beta`, so the methods that take it run with beta = 1.
"""

import tensorflow as tf

from tfdet.ops.boxes import pairwise_iou

SCORING_METHODS = ("ID", "TEMP_AVG", "AVG", "IOU_AVG", "GENERALIZED_AVG", "QUASI_SUM")
_BETA = 1.0


def _voted_scores(method, scores, votes, overlaps):
    """The new score of each kept box (B, K) from its voters' scores (B, 1, N) under `votes` (B, K, N)."""
    weights = tf.cast(votes, tf.float32)
    count = tf.reduce_sum(weights, axis=-1)
    if method in ("AVG", "GENERALIZED_AVG", "QUASI_SUM"):
        # ws.mean(); mean(ws ** beta) ** (1 / beta); ws.sum() / len(ws) ** beta: all the mean for beta 1.
        return tf.reduce_sum(scores * weights, axis=-1) / count
    if method == "TEMP_AVG":
        # P = [ws; 1 - ws] smoothed with temperature beta, then the mean of the first row.
        p = tf.stack([scores, 1.0 - scores], axis=0)
        x = tf.exp(tf.math.log(p / tf.reduce_max(p, axis=0)) / _BETA)
        tempered = x[0] / tf.reduce_sum(x, axis=0)
        return tf.reduce_sum(tempered * weights, axis=-1) / count
    # IOU_AVG (batched_box_voting has checked the name): the voters' scores weighted by their IoU.
    iou_weights = overlaps * weights
    return tf.reduce_sum(scores * iou_weights, axis=-1) / tf.reduce_sum(iou_weights, axis=-1)


def batched_box_voting(top_boxes, top_scores, all_boxes, all_scores, all_valid, threshold, scoring_method="ID"):
    """Detectron's `box_voting(top_dets, all_dets, thresh, scoring_method)` on each row.

    Args:
      top_boxes (B, K, 4), top_scores (B, K): the boxes NMS kept (padding rows are returned unchanged
        in effect: callers mask them). all_boxes (B, N, 4), all_scores (B, N), all_valid (B, N): every
        candidate of the row's class (Detectron's `dets_j`).
    Returns:
      the voted boxes (B, K, 4) and scores (B, K).
    """
    if scoring_method not in SCORING_METHODS:
        raise ValueError(f"box voting scoring method {scoring_method!r} is not one of {', '.join(SCORING_METHODS)}")
    overlaps = pairwise_iou(top_boxes, all_boxes)  # (B, K, N), cython_bbox's +1 areas and order
    votes = (overlaps >= tf.constant(threshold, tf.float32)) & all_valid[:, None, :]
    weights = tf.where(votes, all_scores[:, None, :], 0.0)
    total = tf.reduce_sum(weights, axis=-1, keepdims=True)
    safe_total = tf.where(total > 0.0, total, 1.0)
    voted = tf.reduce_sum(weights[..., None] * all_boxes[:, None, :, :], axis=2) / safe_total
    voted = tf.where(total > 0.0, voted, top_boxes)
    if scoring_method == "ID":
        return voted, top_scores
    scores = _voted_scores(scoring_method, all_scores[:, None, :], votes, overlaps)
    return voted, tf.where(tf.reduce_any(votes, axis=-1), scores, top_scores)
