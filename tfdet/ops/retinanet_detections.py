"""Detectron's RetinaNet post-processing (core/test_retinanet.py `im_detect_bbox`) in pure TensorFlow.

Per level, every (position, anchor, class) probability above RETINANET.INFERENCE_TH (0.0 on the
coarsest level, as Detectron guarantees candidates there) is a candidate; the PRE_NMS_TOP_N best
are kept, their anchors decoded with Detectron's bbox_transform (weights 1, +1 widths), divided by
the image scale and clipped to the original image. Then per-class NMS (or soft-NMS with score
threshold 0.0001) over the candidates of all levels and the DETECTIONS_PER_IM best over classes.
No TEST.SCORE_THRESH and no box voting: test_retinanet applies neither. Shapes stay static per
level (the top-N is padded), so the graph exports as it is.
"""

import tensorflow as tf

from tfdet.ops.anchors import shifted_anchors
from tfdet.ops.boxes import clip_boxes, decode_boxes
from tfdet.ops.map_fn import map_fn
from tfdet.ops.nms import grouped_nms, per_class_nms


def level_candidates(probs, deltas, cell_anchors, stride, threshold, top_n, apply_regression=True):
    """The `top_n` best candidates of one level, in input pixels.

    Args:
      probs: (B, H, W, A*C) foreground class probabilities, channel a*C + c.
      deltas: (B, H, W, A*4) box deltas (dx, dy, dw, dh), channel a*4 + k.
      cell_anchors: (A, 4) numpy cell anchors; stride: the level's stride.
      threshold: a candidate's probability must exceed it.
    Returns:
      boxes (B, top_n, 4) decoded (or the anchors without `apply_regression`), scores (B, top_n),
      classes (B, top_n) int32 in 0..C-1, valid (B, top_n) bool: the real candidates.
    """
    num_anchors = len(cell_anchors)
    batch, height, width = tf.shape(probs)[0], tf.shape(probs)[1], tf.shape(probs)[2]
    num_classes = tf.shape(probs)[3] // num_anchors
    flat = tf.reshape(probs, [batch, -1])
    # Non-candidates score -1, and padding keeps top_k's k static on levels smaller than top_n.
    flat = tf.where(flat > threshold, flat, -1.0)
    flat = tf.pad(flat, [[0, 0], [0, tf.maximum(top_n - tf.shape(flat)[1], 0)]], constant_values=-1.0)
    best = tf.math.top_k(flat, k=top_n, sorted=False)
    valid = best.values > threshold
    indices = tf.where(valid, best.indices, 0)
    anchor_positions = indices // num_classes  # (y * W + x) * A + a
    anchors = tf.gather(shifted_anchors(cell_anchors, stride, height, width), anchor_positions)
    if apply_regression:
        level_deltas = tf.gather(tf.reshape(deltas, [batch, -1, 4]), anchor_positions, batch_dims=1)
        anchors = decode_boxes(anchors, level_deltas)
    scores = tf.where(valid, best.values, 0.0)
    return anchors, scores, indices % num_classes, valid


def retinanet_detections(
    level_probs, level_deltas, cell_anchors, strides, image_info, inference_threshold, pre_nms_top_n,
    nms_threshold, detections_per_image, num_classes, apply_regression=True, soft_nms=None,
):  # fmt: skip
    """Detections of a batch from RetinaNet's per-level outputs, finest level first.

    `level_probs`, `level_deltas`, `cell_anchors`, `strides`: per level, as `level_candidates`
    takes them (the last one is the coarsest level, which uses threshold 0.0); image_info (B, 3) =
    (original height, width, scale); num_classes: MODEL.NUM_CLASSES (background included);
    soft_nms: a tfdet.ops.nms.SoftNMS or None. Returns boxes (B, D, 4) in original pixels, scores
    (B, D), classes (B, D) int32 in 1..NUM_CLASSES-1 and num_detections (B,), D = detections_per_image,
    sorted by descending score and zero-padded.
    """
    last = len(level_probs) - 1
    candidates = [
        level_candidates(
            tf.cast(probs, tf.float32), tf.cast(deltas, tf.float32), anchors, stride,
            inference_threshold if i < last else 0.0, pre_nms_top_n, apply_regression,
        )
        for i, (probs, deltas, anchors, stride) in enumerate(zip(level_probs, level_deltas, cell_anchors, strides))
    ]  # fmt: skip
    boxes, scores, classes, valid = (tf.concat(parts, axis=1) for parts in zip(*candidates))
    image_info = tf.cast(image_info, tf.float32)
    boxes = clip_boxes(boxes / image_info[:, 2, None, None], image_info[:, 0], image_info[:, 1])

    def select(args):
        image_boxes, image_scores, image_classes, image_valid = args
        if soft_nms is None:  # greedy NMS per class, every class in one pass
            indices, count = grouped_nms(
                image_boxes, image_scores, image_classes, image_valid, nms_threshold, detections_per_image
            )
            real = tf.range(detections_per_image) < count
            return (
                tf.where(real[:, None], tf.gather(image_boxes, indices), 0.0),
                tf.where(real, tf.gather(image_scores, indices), 0.0),
                tf.where(real, tf.gather(image_classes, indices) + 1, 0),
                count,
            )
        # One column per class (background column 0 stays empty): a candidate scores in its own class only;
        # everything else scores -1, below any probability, and per_class_nms drops it (threshold -1).
        in_class = tf.logical_and(tf.one_hot(image_classes + 1, num_classes, on_value=True, off_value=False),
                                  image_valid[:, None])
        class_scores = tf.where(in_class, image_scores[:, None], -1.0)
        return per_class_nms(image_boxes[:, None, :], class_scores, -1.0, nms_threshold, detections_per_image, soft_nms)

    return map_fn(
        select,
        (boxes, scores, classes, valid),
        fn_output_signature=(
            tf.TensorSpec([detections_per_image, 4], tf.float32),
            tf.TensorSpec([detections_per_image], tf.float32),
            tf.TensorSpec([detections_per_image], tf.int32),
            tf.TensorSpec([], tf.int32),
        ),
    )
