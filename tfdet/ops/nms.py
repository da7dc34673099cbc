"""Greedy non-maximum suppression with Detectron's rule, batched and in pure TensorFlow.

Detectron's (Cython) NMS suppresses box j by a kept, higher-scoring box i when
IoU(i, j) >= threshold, with +1 areas computed in float32 and the comparison made in float64.
TensorFlow's NMS kernels suppress only when IoU > threshold and use areas without +1, so
they differ on real cases; this module reproduces Detectron's rule exactly.

The greedy pass is exact but tiled: boxes are visited in tiles of `tile_size`; inside a tile the
greedy result is the unique fixed point of "keep j unless a kept i < j overlaps it", reached by
iteration, and each tile's kept boxes then suppress all later boxes in one vectorised step.
Ties in score are broken by the lower input index first (Detectron's numpy argsort order for
ties is unspecified).
"""

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfdet.ops.box_voting import batched_box_voting
from tfdet.ops.boxes import pairwise_iou
from tfdet.ops.soft_nms import batched_soft_nms

DEFAULT_TILE_SIZE = 256


def _suppresses(iou, iou_threshold):
    """Detectron's test `ovr >= thresh`, with float32 IoU compared in float64 as in Cython.

    For a Python threshold the comparison stays in float32, exactly: a float32 IoU is >= the float64
    threshold iff it is >= the smallest float32 not below it (no float64 copy of every IoU)."""
    if isinstance(iou_threshold, (int, float)) and iou.dtype == tf.float32:
        return iou >= _float32_at_least(iou_threshold)
    return tf.cast(iou, tf.float64) >= tf.constant(iou_threshold, tf.float64)


def _float32_at_least(value):
    """The smallest float32 that is >= `value` (a Python float, i.e. float64)."""
    rounded = np.float32(value)
    if float(rounded) < value:
        rounded = np.nextafter(rounded, np.float32(np.inf))
    return float(rounded)


def _self_suppress(tile_boxes, tile_keep, iou_threshold, same_group=None):
    """Greedy NMS inside one tile: (B, T) keep mask given the boxes not yet suppressed (and, with
    `same_group` (B, T, T), only boxes of one group suppressing each other)."""
    size = tf.shape(tile_boxes)[1]
    earlier = tf.range(size)[:, None] < tf.range(size)[None, :]  # row i before column j (comparisons export anywhere)
    overlaps = tf.logical_and(_suppresses(pairwise_iou(tile_boxes, tile_boxes), iou_threshold), earlier)
    if same_group is not None:
        overlaps = tf.logical_and(overlaps, same_group)

    # expand_dims, not [:, :, None]: LiteRT's converter lowers a new-axis slice of at most one unknown dimension.
    def step(current):
        suppressed = tf.reduce_any(tf.logical_and(overlaps, tf.expand_dims(current, -1)), axis=1)
        return tf.logical_and(tile_keep, tf.logical_not(suppressed))

    def body(current, _):
        following = step(current)
        return following, tf.reduce_any(tf.not_equal(following, current))

    # Iterated until a step changes nothing, starting from the all-False mask (which the first step changes
    # unless it keeps nothing). The loop carries that flag, not the previous mask: tf2onnx 1.17 builds the
    # condition of a loop whose body hands one loop variable on as another from the wrong tensors (it compared
    # the new mask with itself and stopped after one step, keeping boxes that a kept box suppresses).
    first = step(tile_keep)
    result, _ = tf.while_loop(lambda _, changed: changed, body, (first, tf.reduce_any(first)))
    return result


def greedy_nms_mask(sorted_boxes, valid, iou_threshold, tile_size=DEFAULT_TILE_SIZE):
    """Keep mask (B, N) of greedy NMS over boxes (B, N, 4) already sorted by descending score.

    `valid` (B, N) marks real candidates; invalid ones are never kept and suppress nothing.
    """
    batch = tf.shape(sorted_boxes)[0]
    num = tf.shape(sorted_boxes)[1]
    num_tiles = (num + tile_size - 1) // tile_size
    padded = num_tiles * tile_size
    boxes = tf.pad(sorted_boxes, [[0, 0], [0, padded - num], [0, 0]])
    keep = tf.pad(tf.cast(valid, tf.bool), [[0, 0], [0, padded - num]])

    def body(tile, keep):
        start = tile * tile_size
        end = start + tile_size
        tile_boxes = boxes[:, start:end]
        tile_keep = _self_suppress(tile_boxes, keep[:, start:end], iou_threshold)
        # Only the boxes after the tile can still be suppressed: the IoUs with them alone.
        overlaps = _suppresses(pairwise_iou(tile_boxes, boxes[:, end:]), iou_threshold)
        suppressed = tf.reduce_any(tf.logical_and(overlaps, tf.expand_dims(tile_keep, -1)), axis=1)
        keep = tf.concat([keep[:, :start], tile_keep, tf.logical_and(keep[:, end:], tf.logical_not(suppressed))], 1)
        return tile + 1, keep

    _, keep = tf.while_loop(
        lambda tile, _: tile < num_tiles,
        body,
        (tf.constant(0), keep),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None])),
    )
    keep = keep[:, :num]
    return tf.ensure_shape(tf.reshape(keep, [batch, num]), sorted_boxes.shape[:2])


def batched_nms(boxes, scores, iou_threshold, max_output_size, valid=None, tile_size=DEFAULT_TILE_SIZE):
    """Detectron-rule NMS on each row of a batch.

    Args:
      boxes: (B, N, 4) x1,y1,x2,y2. scores: (B, N). valid: optional (B, N) bool of real candidates.
      max_output_size: int, how many survivors to return per row (Detectron's post-NMS top-N).
    Returns:
      indices (B, max_output_size) int32 into N of the kept boxes, by descending score, padded
      with 0; num_kept (B,) int32, how many of each row are real.
    """
    scores = tf.convert_to_tensor(scores)
    if valid is None:
        valid = tf.ones_like(scores, dtype=tf.bool)
    num = tf.shape(scores)[1]
    masked_scores = mark_missing(valid, scores)
    order = tf.math.top_k(masked_scores, k=num, sorted=True).indices
    sorted_valid = tf.gather(valid, order, batch_dims=1)
    # Only the real candidates take part; trim the columns no row needs.
    width = tf.reduce_max(tf.reduce_sum(tf.cast(sorted_valid, tf.int32), axis=1))
    order = order[:, :width]
    sorted_valid = sorted_valid[:, :width]
    sorted_boxes = tf.gather(boxes, order, batch_dims=1)
    keep = greedy_nms_mask(sorted_boxes, sorted_valid, iou_threshold, tile_size)
    return _first_kept(order, keep, max_output_size)


def grouped_nms(boxes, scores, groups, valid, iou_threshold, max_output_size, tile_size=DEFAULT_TILE_SIZE):
    """Detectron-rule NMS of one image's candidates within each group (class), all groups in one pass.

    The same result as `batched_nms` on one row per group, whose cost is (groups x the largest group's
    size**2): with one dominant class (RetinaNet's 5000 candidates, mostly one class) that is 80 times the
    work. Here the candidates are sorted by group, then score (ties: lower index), and each tile of
    `tile_size` is compared only with the later candidates of its own groups.

    Args:
      boxes: (N, 4); scores: (N,); groups: (N,) int32 >= 0; valid: (N,) bool, the real candidates.
    Returns:
      indices (max_output_size,) int32 of the kept candidates by descending score (ties: lower group,
      then the group's own order), padded with 0; num_kept () int32.
    """
    num = tf.shape(scores)[0]
    by_score = tf.math.top_k(mark_missing(valid, scores), k=num, sorted=True).indices
    last_group = tf.reduce_max(tf.concat([groups, [0]], axis=0)) + 1  # invalid candidates go after every group
    order = tf.gather(by_score, tf.argsort(tf.gather(tf.where(valid, groups, last_group), by_score), stable=True))
    width = tf.reduce_sum(tf.cast(valid, tf.int32))
    order = order[:width]
    sorted_boxes = tf.gather(boxes, order)
    sorted_groups = tf.gather(groups, order)
    # One past each candidate's group: tf.searchsorted(sorted_groups, sorted_groups, side="right"), counted
    # (UpperBound has no ONNX equivalent): the end of group g is the number of candidates in groups 0..g.
    in_group = tf.equal(sorted_groups[:, None], tf.range(last_group)[None, :])  # (width, groups); not an int OneHot
    group_sizes = tf.reduce_sum(tf.cast(in_group, tf.int32), axis=0)
    group_ends = tf.gather(tf.cumsum(group_sizes), sorted_groups)

    num_tiles = (width + tile_size - 1) // tile_size
    padded = num_tiles * tile_size
    boxes_padded = tf.pad(sorted_boxes, [[0, padded - width], [0, 0]])
    groups_padded = tf.pad(sorted_groups, [[0, padded - width]], constant_values=-1)
    keep = tf.range(padded) < width

    def body(tile, keep):
        start = tile * tile_size
        end = start + tile_size
        tile_groups = groups_padded[start:end]
        same_group = tf.equal(tile_groups[:, None], tile_groups[None, :])[None]
        tile_keep = _self_suppress(boxes_padded[None, start:end], keep[None, start:end], iou_threshold, same_group)[0]
        # Later candidates of the tile's groups: they end where the group of the tile's last real one ends.
        reach = tf.maximum(tf.gather(group_ends, tf.minimum(end, width) - 1), end)
        overlaps = _suppresses(pairwise_iou(boxes_padded[start:end], boxes_padded[end:reach]), iou_threshold)
        overlaps = tf.logical_and(overlaps, tf.equal(tile_groups[:, None], groups_padded[None, end:reach]))
        suppressed = tf.reduce_any(tf.logical_and(overlaps, tile_keep[:, None]), axis=0)
        keep = tf.concat(
            [keep[:start], tile_keep, tf.logical_and(keep[end:reach], tf.logical_not(suppressed)), keep[reach:]], 0
        )
        return tile + 1, keep

    _, keep = tf.while_loop(
        lambda tile, _: tile < num_tiles,
        body,
        (tf.constant(0), keep),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None])),
    )
    kept_scores = mark_missing(keep[:width], tf.gather(scores, order))
    best = tf.math.top_k(kept_scores, k=tf.minimum(max_output_size, width), sorted=True)
    num_kept = tf.reduce_sum(tf.cast(is_candidate(best.values), tf.int32))
    indices = tf.where(tf.range(tf.size(best.indices)) < num_kept, tf.gather(order, best.indices), 0)
    return tf.pad(indices, [[0, max_output_size - tf.size(indices)]]), num_kept


def mark_missing(real, scores):
    """`scores` where `real`, elsewhere the lowest finite value of their dtype: this module's mark of "no
    candidate", below every score. Not -inf: LiteRT's converter stores an infinite constant as that finite
    value, and tf2onnx lowers a float select to `real * values + (1 - real) * fill`, where 0 * -inf is NaN."""
    return tf.where(real, scores, scores.dtype.min)


def is_candidate(scores):
    """Where `scores` (marked by `mark_missing`) hold a candidate's score."""
    return scores > scores.dtype.min


def _first_kept(order, keep, max_output_size):
    """The first `max_output_size` kept entries of each row (in sorted order), padded with 0."""
    width = tf.shape(keep)[1]
    ranks = tf.cumsum(tf.cast(keep, tf.int32), axis=1) - 1
    slots = tf.where(keep, ranks, max_output_size)
    batch = tf.shape(keep)[0]
    rows = tf.broadcast_to(tf.range(batch)[:, None], [batch, width])
    targets = tf.stack([rows, slots], axis=-1)
    in_range = slots < max_output_size
    indices = tf.scatter_nd(
        tf.boolean_mask(targets, in_range),
        tf.boolean_mask(order, in_range),
        [batch, max_output_size],
    )
    num_kept = tf.minimum(tf.reduce_sum(tf.cast(keep, tf.int32), axis=1), max_output_size)
    return indices, num_kept


class SoftNMS(NamedTuple):
    """Detectron's TEST.SOFT_NMS: `method` (linear, gaussian or hard) and gaussian `sigma`."""

    method: str = "linear"
    sigma: float = 0.5


class BoxVoting(NamedTuple):
    """Detectron's TEST.BBOX_VOTE: IoU `threshold` (VOTE_TH) and `scoring_method`."""

    threshold: float = 0.8
    scoring_method: str = "ID"


# The score below which Detectron's box_results_with_nms_and_limit lets soft-NMS drop a box.
SOFT_NMS_SCORE_THRESHOLD = 0.0001


def per_class_nms(boxes, scores, score_threshold, iou_threshold, max_detections, soft_nms=None, voting=None):
    """Detectron's `box_results_with_nms_and_limit` for one image, as fixed-size tensors.

    Args:
      boxes: (R, C, 4) class-specific boxes, or (R, 1, 4) class-agnostic ones.
      scores: (R, C) class probabilities; column 0 is the background and is skipped.
      score_threshold: candidates need score > threshold (compared in float32, as numpy does).
      soft_nms: a SoftNMS to use instead of greedy NMS (its overlap threshold is `iou_threshold`).
      voting: a BoxVoting applied to each class's survivors, voting with all its candidates.
    Returns:
      boxes (D, 4), scores (D,), classes (D,) int32 in 1..C-1, num_detections () int32, with
      D = max_detections, sorted by descending score and zero-padded. Detectron keeps every
      detection scoring at least the D-th best, so exact ties at the cut may give it more than D.
    """
    num_classes = tf.shape(scores)[1]
    boxes = tf.broadcast_to(boxes, tf.stack([tf.shape(scores)[0], num_classes, 4]))
    class_boxes = tf.transpose(boxes[:, 1:, :], [1, 0, 2])
    class_scores = tf.transpose(scores[:, 1:])
    valid = class_scores > tf.cast(score_threshold, class_scores.dtype)
    # Voting that changes scores can reorder a class's survivors: keep them all until after the vote.
    per_class = max_detections if voting is None or voting.scoring_method == "ID" else tf.shape(scores)[0]
    if soft_nms is None:
        indices, num_kept = batched_nms(class_boxes, class_scores, iou_threshold, per_class, valid=valid)
        kept_boxes = tf.gather(class_boxes, indices, batch_dims=1)
        kept_scores = tf.gather(class_scores, indices, batch_dims=1)
    else:
        kept_boxes, kept_scores, num_kept = _first_soft_nms_survivors(
            class_boxes, class_scores, valid, iou_threshold, soft_nms, per_class
        )
    if voting is not None:
        kept_boxes, kept_scores = batched_box_voting(
            kept_boxes, kept_scores, class_boxes, class_scores, valid, voting.threshold, voting.scoring_method
        )
    slot_valid = tf.range(tf.shape(kept_scores)[1])[None, :] < num_kept[:, None]
    return _best_over_classes(kept_boxes, mark_missing(slot_valid, kept_scores), max_detections)


def _first_soft_nms_survivors(class_boxes, class_scores, valid, iou_threshold, soft_nms, limit):
    """Boxes (B, L, 4), decayed scores (B, L) and counts (B,) of each row's first `limit` soft-NMS survivors."""
    boxes, scores, _, count = batched_soft_nms(
        class_boxes, class_scores, valid, iou_threshold, soft_nms.sigma, SOFT_NMS_SCORE_THRESHOLD, soft_nms.method
    )
    pad = tf.maximum(limit - tf.shape(scores)[1], 0)
    boxes = tf.pad(boxes, [[0, 0], [0, pad], [0, 0]])[:, :limit]
    scores = tf.pad(scores, [[0, 0], [0, pad]])[:, :limit]
    return boxes, scores, tf.minimum(count, limit)


def _best_over_classes(kept_boxes, kept_scores, max_detections):
    """The `max_detections` best of every class's survivors ((C-1, L, 4) boxes, (C-1, L) scores marked
    by `mark_missing` where there is none): boxes, scores, classes, count, zero-padded to max_detections."""
    per_class = tf.shape(kept_scores)[1]
    num_candidates = tf.size(kept_scores)
    best = tf.math.top_k(tf.reshape(kept_scores, [-1]), k=tf.minimum(max_detections, num_candidates))
    num_detections = tf.reduce_sum(tf.cast(is_candidate(best.values), tf.int32))
    real = tf.range(tf.size(best.values)) < num_detections
    pad = max_detections - tf.size(best.values)
    out_boxes = tf.where(real[:, None], tf.gather(tf.reshape(kept_boxes, [-1, 4]), best.indices), 0.0)
    out_scores = tf.where(real, best.values, 0.0)
    out_classes = tf.where(real, best.indices // per_class + 1, 0)
    return (
        tf.pad(out_boxes, [[0, pad], [0, 0]]),
        tf.pad(out_scores, [[0, pad]]),
        tf.pad(tf.cast(out_classes, tf.int32), [[0, pad]]),
        num_detections,
    )
