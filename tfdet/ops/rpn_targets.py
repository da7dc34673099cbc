"""RPN training targets as Detectron's `roi_data/rpn.py` (`add_rpn_blobs`, `_get_rpn_blobs`) makes them.

Anchors of every RPN level are labelled together (FPN: the levels' anchors concatenated, finest first) and
split back per level afterwards. Ground truth is in input pixels like the anchors; crowd boxes are dropped
before labelling (`add_rpn_blobs` keeps `gt_classes > 0 & is_crowd == 0`), so they make no anchor positive
and no anchor ignored.
"""

import collections

import tensorflow as tf

from tfdet.ops.boxes import encode_boxes, pairwise_iou
from tfdet.ops.roi_sampling import best_match, check_gt_slots, random_subset, sub_seed, uniform_noise

RpnTargets = collections.namedtuple(
    "RpnTargets", ["labels", "bbox_targets", "bbox_inside_weights", "bbox_outside_weights"]
)
RpnTargets.__doc__ = """labels (B, N) int32 (1 foreground, 0 background, -1 ignored); bbox_targets,
bbox_inside_weights, bbox_outside_weights (B, N, 4) float32, N anchors in the order given."""


def scaled_image_size(image_info):
    """(height, width) (B,) of the resized, unpadded image: round(original size * scale), Detectron's
    `np.round(entry['height'] * scale)`; `image_info` (B, 3) is (original height, width, scale)."""
    info = tf.cast(image_info, tf.float64)
    size = tf.cast(tf.round(info[:, :2] * info[:, 2:3]), tf.float32)
    return size[:, 0], size[:, 1]


def _inside_image(anchors, image_info, straddle_thresh):
    """(B, N) anchors inside the image by the straddle margin (all of them when the margin is negative)."""
    if straddle_thresh < 0:
        return tf.ones([tf.shape(image_info)[0], tf.shape(anchors)[0]], tf.bool)
    height, width = scaled_image_size(image_info)
    t = float(straddle_thresh)
    return (
        (anchors[None, :, 0] >= -t)
        & (anchors[None, :, 1] >= -t)
        & (anchors[None, :, 2] < width[:, None] + t)
        & (anchors[None, :, 3] < height[:, None] + t)
    )


def _draw_with_replacement(eligible, count, max_count, seed):
    """(B, N) mask of the entries hit by `count` (B,) <= `max_count` uniform draws, with replacement, among
    the eligible entries of each row (numpy: `inds[npr.randint(len(inds), size=count)]`)."""
    num_eligible = tf.reduce_sum(tf.cast(eligible, tf.int32), axis=1)
    noise = uniform_noise([tf.shape(eligible)[0], max_count], seed)
    ranks = tf.cast(tf.floor(noise * tf.cast(num_eligible, tf.float64)[:, None]), tf.int32)
    ranks = tf.minimum(ranks, num_eligible[:, None] - 1)
    # The (rank + 1)-th eligible entry is the first whose running count reaches rank + 1.
    running = tf.cumsum(tf.cast(eligible, tf.int32), axis=1)
    positions = tf.searchsorted(running, ranks + 1, side="left", out_type=tf.int32)
    used = tf.range(max_count)[None, :] < count[:, None]
    rows = tf.broadcast_to(tf.range(tf.shape(eligible)[0])[:, None], tf.shape(positions))
    hits = tf.scatter_nd(
        tf.stack([rows, tf.minimum(positions, tf.shape(eligible)[1] - 1)], axis=-1),
        tf.cast(used, tf.int32),
        tf.shape(eligible),
    )
    return hits > 0


def rpn_anchor_targets(
    anchors,
    gt_boxes,
    gt_is_crowd,
    gt_valid,
    image_info,
    positive_overlap=0.7,
    negative_overlap=0.3,
    straddle_thresh=0,
    batch_size_per_im=256,
    fg_fraction=0.5,
    seed=None,
):
    """Label anchors and compute their regression targets and loss weights, per image.

    Args:
      anchors: (N, 4) anchors of every RPN level in input pixels, concatenated in the order of the RPN
        outputs (levels finest first, each in (H, W, A) order as `shifted_anchors` makes them).
      gt_boxes: (B, G, 4) input pixels; gt_is_crowd, gt_valid (B, G) bool (padding invalid).
      image_info: (B, 3) original height, width and scale (the model input); anchors are judged against
        the resized unpadded image, round(original size * scale).
      positive_overlap: TRAIN.RPN_POSITIVE_OVERLAP; negative_overlap: TRAIN.RPN_NEGATIVE_OVERLAP;
      straddle_thresh: TRAIN.RPN_STRADDLE_THRESH (anchors crossing the border by more are ignored; -1
        keeps all); batch_size_per_im: TRAIN.RPN_BATCH_SIZE_PER_IM; fg_fraction: TRAIN.RPN_FG_FRACTION.
      seed: optional (2,) integer tensor for stateless sampling; None draws from TF's global generator.
    Returns:
      RpnTargets, exactly as `_get_rpn_blobs`:
      * positive: every anchor that ties for some ground truth's best IoU (all ties; a ground truth that
        overlaps no inside anchor thus makes every inside anchor of IoU 0 with it positive, as Detectron),
        and every anchor of IoU >= positive_overlap;
      * at most int(fg_fraction * batch_size_per_im) positives are kept, drawn without replacement;
      * num_bg = batch_size_per_im - #positives draws *with replacement* among inside anchors of best
        IoU < negative_overlap (positives included: a drawn positive becomes background) are labelled 0,
        and only when there are more such anchors than num_bg (otherwise none is, as in Detectron);
      * targets `encode_boxes(anchor, best gt)` with weights (1, 1, 1, 1) for the positives before the
        background draw; inside weights 1 on final positives; outside weights 1 / #labelled anchors of the
        image on every labelled anchor.
      An image without usable ground truth (none, or only crowd; Detectron filters such images out of
      its roidb) gets background labels only.
    """
    anchors = tf.cast(anchors, tf.float32)
    gt_boxes = tf.cast(gt_boxes, tf.float32)
    check_gt_slots(gt_boxes, "gt_boxes")
    usable = tf.cast(gt_valid, tf.bool) & ~tf.cast(gt_is_crowd, tf.bool)
    inside = _inside_image(anchors, image_info, straddle_thresh)

    overlaps = pairwise_iou(anchors[None], gt_boxes)
    allowed = inside[:, :, None] & usable[:, None, :]
    anchor_best, anchor_gt = best_match(overlaps, allowed)
    anchor_best = tf.maximum(anchor_best, 0.0)  # no usable ground truth: overlap 0, a background candidate
    gt_best = tf.reduce_max(tf.where(allowed, overlaps, -1.0), axis=1)
    ties = tf.reduce_any(allowed & (overlaps == gt_best[:, None, :]), axis=2)
    candidates_fg = inside & (ties | (anchor_best >= positive_overlap))

    num_fg_max = int(fg_fraction * batch_size_per_im)
    fg_index, fg_found = random_subset(candidates_fg, max(num_fg_max, 1), sub_seed(seed, 0))
    fg_found &= tf.range(max(num_fg_max, 1))[None, :] < num_fg_max
    rows = tf.broadcast_to(tf.range(tf.shape(fg_index)[0])[:, None], tf.shape(fg_index))
    fg = tf.scatter_nd(tf.stack([rows, fg_index], -1), tf.cast(fg_found, tf.int32), tf.shape(candidates_fg)) > 0

    num_bg = batch_size_per_im - tf.reduce_sum(tf.cast(fg, tf.int32), axis=1)
    candidates_bg = inside & (anchor_best < negative_overlap)
    enough_bg = tf.reduce_sum(tf.cast(candidates_bg, tf.int32), axis=1) > num_bg
    bg = _draw_with_replacement(candidates_bg, tf.where(enough_bg, num_bg, 0), batch_size_per_im, sub_seed(seed, 1))
    labels = tf.where(bg, 0, tf.where(fg, 1, -1))

    matched = tf.gather(gt_boxes, tf.maximum(anchor_gt, 0), batch_dims=1)
    targets = tf.where(fg[..., None], encode_boxes(anchors[None], matched), 0.0)
    inside_weights = tf.broadcast_to(tf.cast(labels == 1, tf.float32)[..., None], tf.shape(targets))
    labelled = tf.cast(labels >= 0, tf.float32)
    per_example = tf.math.divide_no_nan(1.0, tf.reduce_sum(labelled, axis=1, keepdims=True))
    outside_weights = tf.broadcast_to((labelled * per_example)[..., None], tf.shape(targets))
    return RpnTargets(labels, targets, inside_weights, outside_weights)


def split_rpn_targets(targets, level_shapes):
    """RpnTargets over concatenated anchors -> one RpnTargets per level, shaped like the NHWC RPN outputs:
    labels (B, H, W, A), the others (B, H, W, 4A) (Detectron's per-level `..._wide_fpn<k>` blobs, in NHWC).

    `level_shapes` lists (H, W, A) per level in the concatenation order (H, W may be tensors).
    """
    batch = tf.shape(targets.labels)[0]
    per_level = []
    start = 0
    for height, width, num_anchors in level_shapes:
        end = start + height * width * num_anchors
        per_level.append(
            RpnTargets(
                tf.reshape(targets.labels[:, start:end], [batch, height, width, num_anchors]),
                *(
                    tf.reshape(t[:, start:end], [batch, height, width, 4 * num_anchors])
                    for t in targets[1:]
                ),
            )
        )
        start = end
    return per_level
