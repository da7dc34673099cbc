"""Detectron's soft-NMS (utils/cython_nms.pyx `soft_nms`), batched over rows and in pure TensorFlow.

The Cython loop, step i: the highest score among positions i..N-1 (first position on ties) swaps into
position i; every later box's score is multiplied by a weight of its IoU with box i (linear:
1 - IoU above the threshold; gaussian: exp(-IoU^2 / sigma) for any overlap; hard: 0 above the
threshold); a box whose score falls below `score_threshold` is dropped by copying the last box
into its place and shrinking N. Each step is vectorised here: all decays at once, then the drops
as the same permutation the copy-from-the-end produces (kept boxes stay; the holes, lowest first,
take the kept boxes from the end, last first). Positions, and so tie-breaking, match Detectron's.
IoUs use its +1 areas and its float32 order of operations.
"""

import tensorflow as tf

METHODS = ("hard", "linear", "gaussian")


def _iou_with(box, boxes):
    """IoU of `box` (B, 4) with each of `boxes` (B, N, 4), in soft_nms' float32 order, and whether
    they overlap at all (its `iw > 0 and ih > 0`)."""
    tx1, ty1, tx2, ty2 = (box[:, None, k] for k in range(4))
    x1, y1, x2, y2 = (boxes[..., k] for k in range(4))
    area = (x2 - x1 + 1.0) * (y2 - y1 + 1.0)
    iw = tf.minimum(tx2, x2) - tf.maximum(tx1, x1) + 1.0
    ih = tf.minimum(ty2, y2) - tf.maximum(ty1, y1) + 1.0
    overlapping = (iw > 0.0) & (ih > 0.0)
    union = (tx2 - tx1 + 1.0) * (ty2 - ty1 + 1.0) + area - iw * ih
    return tf.where(overlapping, iw * ih / tf.where(overlapping, union, 1.0), 0.0), overlapping


def _weights(iou, overlapping, method, sigma, iou_threshold):
    """Score factors of the boxes after the selected one (1 where they do not overlap it)."""
    if method == "linear":
        weight = tf.where(iou > iou_threshold, 1.0 - iou, 1.0)
    elif method == "gaussian":
        # Cython computes -(ov * ov) / sigma in float32, then np.exp in float64, stored as float32.
        exponent = tf.cast(-(iou * iou) / sigma, tf.float64)
        weight = tf.cast(tf.exp(exponent), tf.float32)
    else:  # hard (batched_soft_nms has checked the name)
        weight = tf.where(iou > iou_threshold, 0.0, 1.0)
    return tf.where(overlapping, weight, 1.0)


def _take(values, permutation):
    """values (B, N, ...) reordered along N by permutation (B, N)."""
    return tf.gather(values, permutation, batch_dims=1)


def _selection_permutation(scores, positions, start, count):
    """Swap of position `start` with the first position of the highest score in [start, count)."""
    active = (positions >= start) & (positions < count[:, None])
    masked = tf.where(active, scores, -float("inf"))
    best = tf.reduce_max(masked, axis=1, keepdims=True)
    size = tf.shape(scores)[1]
    best_position = tf.reduce_min(tf.where(active & (masked == best), positions, size), axis=1)
    best_position = tf.where(count > start, best_position, start)  # finished rows: identity
    return tf.where(
        positions == start, best_position[:, None], tf.where(positions == best_position[:, None], start, positions)
    )


def _drop_permutation(dropped, positions, start, count):
    """The order after Cython's drops among positions (start, count): (permutation, new count)."""
    after = (positions > start) & (positions < count[:, None])
    kept = after & ~dropped
    new_count = start + 1 + tf.reduce_sum(tf.cast(kept, tf.int32), axis=1)
    new_count = tf.where(count > start, new_count, count)  # a row already done keeps its count
    holes = after & dropped & (positions < new_count[:, None])
    refills = kept & (positions >= new_count[:, None])  # fill the holes, from the end backwards
    hole_rank = tf.cumsum(tf.cast(holes, tf.int32), axis=1) - 1
    refill_rank = tf.cumsum(tf.cast(refills, tf.int32), axis=1, reverse=True) - 1
    rows = tf.broadcast_to(tf.range(tf.shape(dropped)[0])[:, None], tf.shape(dropped))
    sources = tf.scatter_nd(
        tf.stack([tf.boolean_mask(rows, refills), tf.boolean_mask(refill_rank, refills)], axis=1),
        tf.boolean_mask(positions, refills),
        tf.shape(dropped),
    )
    filled = tf.gather(sources, tf.maximum(hole_rank, 0), batch_dims=1)
    return tf.where(holes, filled, positions), new_count


def batched_soft_nms(boxes, scores, valid, iou_threshold, sigma=0.5, score_threshold=0.001, method="linear"):
    """Soft-NMS of each row, as Detectron's `soft_nms(dets, sigma, overlap_thresh, score_thresh, method)`.

    Args:
      boxes: (B, N, 4) float32 x1, y1, x2, y2. scores: (B, N) float32. valid: (B, N) bool; the valid
        entries of a row, in their order, are that row's `dets` (Detectron keeps the input order).
    Returns:
      boxes (B, N, 4), scores (B, N) (the decayed ones), indices (B, N) int32 into N, count (B,) int32:
      the first `count` entries of each row are Detectron's output rows, in its order (descending
      score at selection); the rest is padding (zero scores).
    """
    if method not in METHODS:
        raise ValueError(f"soft-NMS method {method!r} is not one of {', '.join(METHODS)}")
    boxes = tf.convert_to_tensor(boxes, tf.float32)
    scores = tf.convert_to_tensor(scores, tf.float32)
    valid = tf.convert_to_tensor(valid, tf.bool)
    size = tf.shape(scores)[1]
    positions = tf.broadcast_to(tf.range(size)[None, :], tf.shape(scores))
    # Detectron's dets are the valid entries in order: move them to the front, keeping their order.
    order = tf.argsort(tf.cast(~valid, tf.int32), axis=1, stable=True)
    boxes, scores, indices = _take(boxes, order), _take(scores, order), order
    count = tf.reduce_sum(tf.cast(valid, tf.int32), axis=1)
    iou_threshold = tf.constant(iou_threshold, tf.float32)
    sigma = tf.constant(sigma, tf.float32)
    score_threshold = tf.constant(score_threshold, tf.float32)

    def body(start, boxes, scores, indices, count):
        swap = _selection_permutation(scores, positions, start, count)
        boxes, scores, indices = _take(boxes, swap), _take(scores, swap), _take(indices, swap)
        iou, overlapping = _iou_with(boxes[:, start], boxes)
        after = (positions > start) & (positions < count[:, None])
        decayed = tf.where(after, scores * _weights(iou, overlapping, method, sigma, iou_threshold), scores)
        dropped = after & (decayed < score_threshold)
        drop, count = _drop_permutation(dropped, positions, start, count)
        return start + 1, _take(boxes, drop), _take(decayed, drop), _take(indices, drop), count

    def not_done(start, boxes, scores, indices, count):
        return tf.reduce_any(start < count)

    _, boxes, scores, indices, count = tf.while_loop(
        not_done, body, (tf.constant(0), boxes, scores, indices, count)
    )
    real = positions < count[:, None]
    return (
        tf.where(real[..., None], boxes, 0.0),
        tf.where(real, scores, 0.0),
        tf.where(real, indices, 0),
        count,
    )
