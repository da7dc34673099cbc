"""Fast R-CNN training RoIs as Detectron's end-to-end training makes them, batched and in the graph.

Detectron's CollectAndDistributeFpnRpnProposals (and GenerateProposalLabels for C4) rebuild a roidb entry per
image from the RPN proposals (`json_dataset.add_proposals(..., crowd_thresh=0)`), compute regression targets
(`roidb.add_bbox_regression_targets`) and sample (`roi_data/fast_rcnn.py::_sample_rois`). `label_proposals`
is the first two steps, `sample_rois` the last. Overlaps and targets are computed in original-image pixels
(input pixels / image scale), as Detectron does on its roidb.

The draw and match helpers (`random_subset`, `best_match`) serve the RPN and keypoint samplers too.
Conventions of every function here: B images, ground truth padded to G per image with a validity mask;
boxes x1, y1, x2, y2 in input (network) pixels with the +1 convention; crowd boxes flagged.
"""

import collections

import tensorflow as tf

from tfdet.ops.boxes import encode_boxes, pairwise_iou

RoiCandidates = collections.namedtuple(
    "RoiCandidates",
    ["boxes", "valid", "max_overlaps", "classes", "gt_index", "target_classes", "target_deltas"],
)
RoiCandidates.__doc__ = """Every RoI Detectron may sample for one batch: the G ground-truth boxes, then the P proposals.

boxes (B, G+P, 4) input pixels; valid (B, G+P) bool; max_overlaps (B, G+P) float32 (Detectron's
`max_overlaps`: 1 for a ground-truth box, -1 for a crowd or padded box, else the best IoU with any
ground truth, crowd included, 0 without overlap); classes (B, G+P) int32 (`max_classes`); gt_index
(B, G+P) int32 (`box_to_gt_ind_map`: the ground truth of best IoU, -1 without overlap); target_classes
(B, G+P) int32 and target_deltas (B, G+P, 4) (`bbox_targets`: class 0 means no regression)."""

RoiSamples = collections.namedtuple(
    "RoiSamples",
    [
        "rois",
        "labels",
        "bbox_targets",
        "bbox_inside_weights",
        "bbox_outside_weights",
        "gt_index",
        "candidate_index",
        "num_fg",
    ],
)
RoiSamples.__doc__ = """The sampled RoIs of each image, foreground first, then background, then padding.

rois (B, R, 4) input pixels (zeros in padding); labels (B, R) int32 (class, 0 background, -1 padding);
bbox_targets, bbox_inside_weights, bbox_outside_weights (B, R, 4 * C) with C = NUM_CLASSES, or 2 when
class-agnostic; gt_index (B, R) int32 (matched ground truth, -1 none); candidate_index (B, R) int32 (row
of RoiCandidates, -1 in padding); num_fg (B,) int32. Foreground RoIs fill slots [0, num_fg)."""


def uniform_noise(shape, seed=None):
    """Uniform [0, 1) float64 noise (fine enough to rank or index hundreds of thousands of anchors without
    ties or bias): stateless when `seed` (a shape (2,) integer tensor) is given, else stateful."""
    if seed is None:
        return tf.random.uniform(shape, dtype=tf.float64)
    return tf.random.stateless_uniform(shape, seed, dtype=tf.float64)


def sub_seed(seed, index):
    """A distinct stateless seed for the `index`-th draw of one call (None stays None)."""
    if seed is None:
        return None
    return tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64), index)


def random_subset(eligible, size, seed=None):
    """Up to `size` indices per row of `eligible` (B, N), drawn uniformly without replacement in random
    order, as `numpy.random.choice(..., replace=False)`. Returns indices (B, size) int32 and found (B, size)
    bool; the found entries come first, min(size, count) of them."""
    keys = tf.where(eligible, uniform_noise(tf.shape(eligible), seed), -1.0)
    k = tf.minimum(size, tf.shape(eligible)[1])
    top = tf.math.top_k(keys, k=k, sorted=True)
    padding = [[0, 0], [0, size - k]]
    indices = tf.reshape(tf.pad(top.indices, padding), [-1, size])
    found = tf.reshape(tf.pad(top.values >= 0.0, padding), [-1, size])
    return indices, found


def best_match(overlaps, allowed):
    """Best value of `overlaps` (..., N, G) over allowed columns and its first index (numpy's argmax tie rule).

    `allowed` broadcasts against `overlaps`; rows without an allowed column give (-1, -1).
    """
    masked = tf.where(allowed, overlaps, -1.0)
    best = tf.maximum(tf.reduce_max(masked, axis=-1), -1.0)
    columns = tf.range(tf.shape(overlaps)[-1])
    index = tf.reduce_min(tf.where(masked == best[..., None], columns, tf.int32.max), axis=-1)
    return best, tf.where(best >= 0.0, index, -1)


def check_gt_slots(gt_values, name):
    """Refuse ground truth padded to zero slots (G = 0): matched-row gathers need one slot, even invalid."""
    if gt_values.shape.rank is not None and gt_values.shape[1] == 0:
        raise ValueError(f"{name} has no ground-truth slot (G = 0); pad to at least one slot and mark it invalid")


def _to_original_pixels(boxes, image_scale):
    """Input-pixel boxes (B, N, 4) divided by each image's scale (B,)."""
    return boxes / tf.cast(image_scale, boxes.dtype)[:, None, None]


def label_proposals(
    proposals,
    proposal_valid,
    gt_boxes,
    gt_classes,
    gt_is_crowd,
    gt_valid,
    image_scale,
    bbox_thresh=0.5,
    bbox_reg_weights=(10.0, 10.0, 5.0, 5.0),
    cls_agnostic_bbox_reg=False,
):
    """Detectron's roidb of one batch: ground truth + proposals with overlaps, classes and box targets.

    Args:
      proposals: (B, P, 4) RPN proposals in input pixels; proposal_valid (B, P) bool.
      gt_boxes: (B, G, 4) input pixels; gt_classes (B, G) int (1..NUM_CLASSES-1); gt_is_crowd, gt_valid
        (B, G) bool.
      image_scale: (B,) input pixels per original pixel (image_info[:, 2]).
      bbox_thresh: TRAIN.BBOX_THRESH; bbox_reg_weights: MODEL.BBOX_REG_WEIGHTS;
        cls_agnostic_bbox_reg: MODEL.CLS_AGNOSTIC_BBOX_REG (regression class 1 for every RoI).
    Returns:
      RoiCandidates. As in Detectron (`_merge_proposal_boxes_into_roidb`, crowd_thresh 0): a proposal's
      class and overlap come from the best ground truth *including crowd* boxes (so a proposal on a crowd
      region can be foreground), while its regression target is the best non-crowd ground truth
      (`roidb._compute_targets`); crowd ground-truth boxes themselves are never sampled.
    """
    # Detectron labels proposals in numpy: no gradient reaches the RPN through the sampled RoIs or targets.
    proposals = tf.stop_gradient(tf.cast(proposals, tf.float32))
    gt_boxes = tf.cast(gt_boxes, tf.float32)
    check_gt_slots(gt_boxes, "gt_boxes")
    gt_classes = tf.cast(gt_classes, tf.int32)
    gt_valid = tf.cast(gt_valid, tf.bool)
    usable = gt_valid & ~tf.cast(gt_is_crowd, tf.bool)
    num_gt = tf.shape(gt_boxes)[1]

    boxes = tf.concat([gt_boxes, proposals], axis=1)
    boxes_original = _to_original_pixels(boxes, image_scale)
    gt_original = _to_original_pixels(gt_boxes, image_scale)
    overlaps = pairwise_iou(boxes_original, gt_original)

    best, best_index = best_match(overlaps, gt_valid[:, None, :])
    overlapping = best > 0.0
    proposal_overlap = tf.where(overlapping, best, 0.0)
    proposal_class = tf.where(overlapping, tf.gather(gt_classes, tf.maximum(best_index, 0), batch_dims=1), 0)
    proposal_gt = tf.where(overlapping, best_index, -1)

    is_gt_row = tf.range(tf.shape(boxes)[1]) < num_gt
    pad = [[0, 0], [0, tf.shape(proposals)[1]]]
    gt_row_overlap = tf.pad(tf.where(usable, 1.0, -1.0), pad)
    gt_row_class = tf.pad(tf.where(usable, gt_classes, 0), pad)
    gt_row_index = tf.pad(tf.where(gt_valid, tf.broadcast_to(tf.range(num_gt), tf.shape(gt_classes)), -1), pad)

    valid = tf.concat([gt_valid, tf.cast(proposal_valid, tf.bool)], axis=1)
    max_overlaps = tf.where(valid, tf.where(is_gt_row, gt_row_overlap, proposal_overlap), -1.0)
    classes = tf.where(valid, tf.where(is_gt_row, gt_row_class, proposal_class), 0)
    gt_index = tf.where(valid, tf.where(is_gt_row, gt_row_index, proposal_gt), -1)

    _, target_gt = best_match(overlaps, usable[:, None, :])
    has_target = (max_overlaps >= bbox_thresh) & (target_gt >= 0)
    matched = tf.gather(gt_original, tf.maximum(target_gt, 0), batch_dims=1)
    deltas = encode_boxes(boxes_original, matched, bbox_reg_weights)
    regression_class = tf.ones_like(classes) if cls_agnostic_bbox_reg else classes
    return RoiCandidates(
        boxes=boxes,
        valid=valid,
        max_overlaps=max_overlaps,
        classes=classes,
        gt_index=gt_index,
        target_classes=tf.where(has_target, regression_class, 0),
        target_deltas=tf.where(has_target[..., None], deltas, 0.0),
    )


def expand_bbox_targets(target_classes, target_deltas, num_bbox_reg_classes):
    """Detectron's `_expand_bbox_targets`: (…, 4) deltas into the 4-of-4*C layout with inside weights.

    Returns targets and inside weights (…, 4 * num_bbox_reg_classes); class 0 gets no target.
    """
    weights = tf.one_hot(target_classes, num_bbox_reg_classes) * tf.cast(target_classes > 0, tf.float32)[..., None]
    targets = weights[..., None] * target_deltas[..., None, :]
    inside = tf.broadcast_to(weights[..., None], tf.shape(targets))
    shape = tf.concat([tf.shape(target_classes), [4 * num_bbox_reg_classes]], axis=0)
    return tf.reshape(targets, shape), tf.reshape(inside, shape)


def sample_rois(
    candidates,
    num_classes,
    batch_size_per_im=512,
    fg_fraction=0.25,
    fg_thresh=0.5,
    bg_thresh_hi=0.5,
    bg_thresh_lo=0.0,
    cls_agnostic_bbox_reg=False,
    seed=None,
):
    """Detectron's `_sample_rois` for every image: foreground and background RoIs with their targets.

    Args:
      candidates: RoiCandidates from `label_proposals`.
      num_classes: MODEL.NUM_CLASSES (background included).
      batch_size_per_im: TRAIN.BATCH_SIZE_PER_IM (R, the number of output slots); fg_fraction:
        TRAIN.FG_FRACTION (at most round(fg_fraction * R) foreground); fg_thresh: TRAIN.FG_THRESH
        (foreground when max_overlaps >= it); bg_thresh_hi / bg_thresh_lo: TRAIN.BG_THRESH_HI / _LO
        (background when lo <= max_overlaps < hi); cls_agnostic_bbox_reg: MODEL.CLS_AGNOSTIC_BBOX_REG.
      seed: optional (2,) integer tensor for stateless sampling; None draws from TF's global generator.
    Returns:
      RoiSamples. Both sets are drawn uniformly without replacement (numpy.random.choice); background
      fills the R - num_fg remaining slots as far as there are candidates, the rest is padding (label -1).
      Outside weights equal inside weights (Detectron: `bbox_inside_weights > 0`).
    """
    fg_per_image = int(round(fg_fraction * batch_size_per_im))
    eligible_fg = candidates.valid & (candidates.max_overlaps >= fg_thresh)
    eligible_bg = (
        candidates.valid & (candidates.max_overlaps < bg_thresh_hi) & (candidates.max_overlaps >= bg_thresh_lo)
    )
    fg_draws = max(fg_per_image, 1)  # one draw even for FG_FRACTION 0 keeps every shape non-empty
    fg_index, fg_found = random_subset(eligible_fg, fg_draws, sub_seed(seed, 0))
    bg_index, bg_found = random_subset(eligible_bg, batch_size_per_im, sub_seed(seed, 1))
    num_fg = tf.minimum(tf.reduce_sum(tf.cast(fg_found, tf.int32), axis=1), fg_per_image)
    num_bg = tf.minimum(batch_size_per_im - num_fg, tf.reduce_sum(tf.cast(bg_found, tf.int32), axis=1))

    slots = tf.range(batch_size_per_im)[None, :]
    from_fg = slots < num_fg[:, None]
    from_bg = ~from_fg & (slots < (num_fg + num_bg)[:, None])
    fg_slot = tf.broadcast_to(tf.minimum(slots, fg_draws - 1), tf.shape(from_fg))
    fg_pick = tf.gather(fg_index, fg_slot, batch_dims=1)
    bg_pick = tf.gather(bg_index, tf.maximum(slots - num_fg[:, None], 0), batch_dims=1)
    real = from_fg | from_bg
    index = tf.where(from_fg, fg_pick, tf.where(from_bg, bg_pick, 0))

    def pick(values):
        return tf.gather(values, index, batch_dims=1)

    labels = tf.where(from_fg, pick(candidates.classes), tf.where(from_bg, 0, -1))
    num_bbox_reg_classes = 2 if cls_agnostic_bbox_reg else num_classes
    target_classes = tf.where(real, pick(candidates.target_classes), 0)
    targets, inside = expand_bbox_targets(target_classes, pick(candidates.target_deltas), num_bbox_reg_classes)
    return RoiSamples(
        rois=tf.where(real[..., None], pick(candidates.boxes), 0.0),
        labels=labels,
        bbox_targets=targets,
        bbox_inside_weights=inside,
        bbox_outside_weights=inside,
        gt_index=tf.where(real, pick(candidates.gt_index), -1),
        candidate_index=tf.where(real, index, -1),
        num_fg=num_fg,
    )
