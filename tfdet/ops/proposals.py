"""RPN proposal generation as Detectron's `GenerateProposalsOp` + FPN `CollectAndDistribute` do it.

Per image and per level: take the top `pre_nms_top_n` anchors by objectness, decode them with
weights (1, 1, 1, 1), clip to the (padded) input size, drop boxes smaller than `min_size` in the
original image or whose centre lies outside the input, run NMS, keep `post_nms_top_n`. With
several (FPN) levels the survivors of all levels are merged and the best `final_top_n` kept.
All images and levels go through one batched NMS call.
"""

import tensorflow as tf

from tfdet.ops.boxes import DEFAULT_SCALE_CLIP, clip_boxes, coordinates, decode_boxes
from tfdet.ops.nms import batched_nms, is_candidate, mark_missing


def proposal_keep_mask(boxes, min_size, image_info):
    """Detectron's `_filter_boxes`: both sides >= max(min_size, 1) original-image pixels, centre inside.

    `image_info` (B, 3) is (input height, input width, scale) broadcast against boxes (B, N, 4).
    """
    height = image_info[:, 0:1]
    width = image_info[:, 1:2]
    scale = image_info[:, 2:3]
    min_size = tf.maximum(tf.cast(min_size, boxes.dtype), 1.0)
    x1, y1, x2, y2 = coordinates(boxes)
    spans_x, spans_y = x2 - x1, y2 - y1
    widths_original = spans_x / scale + 1.0
    heights_original = spans_y / scale + 1.0
    centre_x = x1 + (spans_x + 1.0) / 2.0
    centre_y = y1 + (spans_y + 1.0) / 2.0
    return (
        (widths_original >= min_size)
        & (heights_original >= min_size)
        & (centre_x < width)
        & (centre_y < height)
    )


def _top_level_candidates(scores, deltas, anchors, pre_nms_top_n):
    """One level: the anchors and deltas (B, P, 4) of the best `pre_nms_top_n` scores (B, P), best first.

    `scores` (B, H, W, A) objectness probabilities, `deltas` (B, H, W, 4A), `anchors` (H*W*A, 4)
    in the same (H, W, A) order. P = min(pre_nms_top_n, H*W*A) (all of them when <= 0).
    """
    batch = tf.shape(scores)[0]
    flat_scores = tf.reshape(scores, [batch, -1])
    flat_deltas = tf.reshape(deltas, [batch, -1, 4])
    count = tf.shape(flat_scores)[1]
    k = count if pre_nms_top_n <= 0 else tf.minimum(pre_nms_top_n, count)
    top = tf.math.top_k(flat_scores, k=k, sorted=True)
    top_deltas = tf.gather(flat_deltas, top.indices, batch_dims=1)
    top_anchors = tf.gather(tf.cast(anchors, top_deltas.dtype), top.indices)
    return top_anchors, top_deltas, top.values


def generate_proposals(
    level_outputs,
    image_info,
    pre_nms_top_n,
    post_nms_top_n,
    nms_threshold,
    min_size=0.0,
    final_top_n=None,
    scale_clip=DEFAULT_SCALE_CLIP,
):
    """Proposals of every image from one or more RPN levels.

    Args:
      level_outputs: list of (scores (B,H,W,A) probabilities, deltas (B,H,W,4A), anchors (HWA,4)).
      image_info: (B, 3) input height, width (padded, as Detectron's im_info) and image scale.
      pre_nms_top_n, post_nms_top_n: per level (Detectron's RPN_PRE/POST_NMS_TOP_N).
      final_top_n: after merging levels keep this many best (FPN's collect step); None: post_nms_top_n.
    Returns:
      boxes (B, final_top_n, 4), scores (B, final_top_n), num_valid (B,) int32; rows sorted by
      descending score, padding zeros after num_valid.
    """
    final_top_n = post_nms_top_n if final_top_n is None else final_top_n
    image_info = tf.cast(image_info, tf.float32)
    batch = tf.shape(image_info)[0]
    num_levels = len(level_outputs)
    candidates = [_top_level_candidates(s, d, a, pre_nms_top_n) for s, d, a in level_outputs]
    # Rows: level-major, then image, each padded to the widest level's candidate count; the boxes of all
    # levels are decoded, clipped and filtered at once (the same arithmetic per box, fewer graph ops).
    counts = tf.stack([tf.shape(c[2])[1] for c in candidates])
    width = tf.reduce_max(counts)

    def padded_row(level_anchors, level_deltas, level_scores):
        """The level's (B, P, 9) anchors, deltas and scores, zero-padded to `width` candidates."""
        # expand_dims, not [..., None]: LiteRT's converter lowers a new-axis slice of at most one unknown dimension.
        level_scores = tf.expand_dims(tf.cast(level_scores, level_deltas.dtype), -1)
        columns = tf.concat([level_anchors, level_deltas, level_scores], -1)
        return tf.pad(columns, [[0, 0], [0, width - tf.shape(columns)[1]], [0, 0]])

    rows = tf.concat([padded_row(*c) for c in candidates], axis=0)
    anchors, deltas, scores = tf.split(rows, [4, 4, 1], axis=-1)
    scores = tf.squeeze(scores, -1)
    real = tf.sequence_mask(tf.repeat(counts, batch), width)
    row_info = tf.tile(image_info, [num_levels, 1])
    boxes = clip_boxes(decode_boxes(anchors, deltas, scale_clip=scale_clip), row_info[:, 0], row_info[:, 1])
    valid = real & proposal_keep_mask(boxes, min_size, row_info)
    # One NMS call for every (level, image) row.
    indices, num_kept = batched_nms(boxes, scores, nms_threshold, post_nms_top_n, valid=valid)
    kept_valid = tf.range(post_nms_top_n)[None, :] < num_kept[:, None]
    kept_boxes = tf.gather(boxes, indices, batch_dims=1)
    kept_scores = mark_missing(kept_valid, tf.gather(scores, indices, batch_dims=1))
    # (L*B, K) -> (B, L*K): all levels' survivors of one image side by side.
    per_image_boxes = tf.reshape(
        tf.transpose(tf.reshape(kept_boxes, [num_levels, batch, post_nms_top_n, 4]), [1, 0, 2, 3]),
        [batch, num_levels * post_nms_top_n, 4],
    )
    per_image_scores = tf.reshape(
        tf.transpose(tf.reshape(kept_scores, [num_levels, batch, post_nms_top_n]), [1, 0, 2]),
        [batch, num_levels * post_nms_top_n],
    )
    k = min(final_top_n, num_levels * post_nms_top_n)
    best = tf.math.top_k(per_image_scores, k=k, sorted=True)
    found = is_candidate(best.values)
    num_valid = tf.reduce_sum(tf.cast(found, tf.int32), axis=1)
    out_boxes = tf.where(found[..., None], tf.gather(per_image_boxes, best.indices, batch_dims=1), 0.0)
    out_scores = tf.where(found, best.values, 0.0)
    pad = final_top_n - k
    return (
        tf.pad(out_boxes, [[0, 0], [0, pad], [0, 0]]),
        tf.pad(out_scores, [[0, 0], [0, pad]]),
        num_valid,
    )
