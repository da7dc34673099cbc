"""Box arithmetic with Detectron's legacy "+1" convention (a box x1 == x2 is one pixel wide).

Boxes are x1, y1, x2, y2 in the last axis; every function broadcasts over leading axes.
"""

import math

import tensorflow as tf

# Detectron's cfg.BBOX_XFORM_CLIP: the largest log-scale change a box delta may ask for.
DEFAULT_SCALE_CLIP = math.log(1000.0 / 16.0)


def coordinates(boxes):
    """x1, y1, x2, y2 of (..., 4) boxes: one Split and four Squeezes (indexing each costs a StridedSlice and 3
    Consts; LiteRT's Unpack refuses an empty tensor, which an image without boxes gives)."""
    return [tf.squeeze(column, -1) for column in tf.split(boxes, 4, axis=-1)]


def box_widths_heights(boxes):
    """Widths and heights with the +1 convention."""
    x1, y1, x2, y2 = coordinates(boxes)
    return x2 - x1 + 1.0, y2 - y1 + 1.0


def sizes_and_centres(boxes):
    """Widths, heights (+1 convention) and centres x, y: the frame `decode_boxes` and `encode_boxes` work in."""
    x1, y1, x2, y2 = coordinates(boxes)
    widths, heights = x2 - x1 + 1.0, y2 - y1 + 1.0
    return widths, heights, x1 + 0.5 * widths, y1 + 0.5 * heights


def box_areas(boxes):
    """Areas with the +1 convention (Detectron's `boxes_area`)."""
    widths, heights = box_widths_heights(boxes)
    return widths * heights


def decode_boxes(boxes, deltas, weights=(1.0, 1.0, 1.0, 1.0), scale_clip=DEFAULT_SCALE_CLIP):
    """Apply regression deltas (dx, dy, dw, dh) to boxes: Detectron's `bbox_transform`.

    dw, dh are divided by their weights and clipped from above at `scale_clip` before exp();
    x2 = ctr + w/2 - 1 (Detectron's asymmetric "-1"). `boxes` broadcasts against `deltas`.
    """
    widths, heights, ctr_x, ctr_y = sizes_and_centres(tf.cast(boxes, deltas.dtype))
    wx, wy, ww, wh = (float(w) for w in weights)
    delta_x, delta_y, delta_w, delta_h = coordinates(deltas)
    dx = delta_x / wx
    dy = delta_y / wy
    dw = tf.minimum(delta_w / ww, scale_clip)
    dh = tf.minimum(delta_h / wh, scale_clip)
    pred_ctr_x = dx * widths + ctr_x
    pred_ctr_y = dy * heights + ctr_y
    pred_w = tf.exp(dw) * widths
    pred_h = tf.exp(dh) * heights
    return tf.stack(
        [
            pred_ctr_x - 0.5 * pred_w,
            pred_ctr_y - 0.5 * pred_h,
            pred_ctr_x + 0.5 * pred_w - 1.0,
            pred_ctr_y + 0.5 * pred_h - 1.0,
        ],
        axis=-1,
    )


def encode_boxes(boxes, target_boxes, weights=(1.0, 1.0, 1.0, 1.0)):
    """Regression targets mapping `boxes` onto `target_boxes`: Detectron's `bbox_transform_inv`."""
    widths, heights, ctr_x, ctr_y = sizes_and_centres(boxes)
    target_widths, target_heights, target_ctr_x, target_ctr_y = sizes_and_centres(target_boxes)
    wx, wy, ww, wh = (float(w) for w in weights)
    return tf.stack(
        [
            wx * (target_ctr_x - ctr_x) / widths,
            wy * (target_ctr_y - ctr_y) / heights,
            ww * tf.math.log(target_widths / widths),
            wh * tf.math.log(target_heights / heights),
        ],
        axis=-1,
    )


def clip_boxes(boxes, height, width):
    """Clip coordinates to [0, width-1] x [0, height-1] (Detectron's `clip_tiled_boxes`)."""
    height = tf.cast(height, boxes.dtype)
    width = tf.cast(width, boxes.dtype)
    # Broadcast per-image sizes (shape (B,)) against boxes (B, ..., 4).
    while height.shape.rank is not None and height.shape.rank < boxes.shape.rank - 1:
        height = height[..., None]
        width = width[..., None]
    x_max = width - 1.0
    y_max = height - 1.0
    x1, y1, x2, y2 = coordinates(boxes)
    return tf.stack(
        [
            tf.maximum(tf.minimum(x1, x_max), 0.0),
            tf.maximum(tf.minimum(y1, y_max), 0.0),
            tf.maximum(tf.minimum(x2, x_max), 0.0),
            tf.maximum(tf.minimum(y2, y_max), 0.0),
        ],
        axis=-1,
    )


def large_boxes_mask(boxes, min_size):
    """Detectron's `filter_small_boxes` as a mask: width and height (+1) both greater than min_size."""
    widths, heights = box_widths_heights(boxes)
    return (widths > min_size) & (heights > min_size)


def pairwise_iou(boxes_a, boxes_b):
    """IoU matrix (..., N, M) with +1 areas, computed in the same order as Detectron's NMS."""
    a_x1, a_y1, a_x2, a_y2 = (tf.expand_dims(c, -1) for c in coordinates(boxes_a))
    b_x1, b_y1, b_x2, b_y2 = (tf.expand_dims(c, -2) for c in coordinates(boxes_b))
    inter_w = tf.maximum(0.0, tf.minimum(a_x2, b_x2) - tf.maximum(a_x1, b_x1) + 1.0)
    inter_h = tf.maximum(0.0, tf.minimum(a_y2, b_y2) - tf.maximum(a_y1, b_y1) + 1.0)
    inter = inter_w * inter_h
    # expand_dims, not [..., :, None]: tf2onnx converts an ellipsis slice only where it knows the input's rank,
    # which it loses inside nested loops (RetinaNet's per-image grouped NMS)
    union = tf.expand_dims(box_areas(boxes_a), -1) + tf.expand_dims(box_areas(boxes_b), -2) - inter
    return inter / union


def xyxy_to_xywh(boxes):
    """x1,y1,x2,y2 -> x,y,w,h with w = x2 - x1 + 1 (COCO results as Detectron writes them)."""
    x1, y1, x2, y2 = coordinates(boxes)
    return tf.stack([x1, y1, x2 - x1 + 1.0, y2 - y1 + 1.0], axis=-1)


def xywh_to_xyxy(boxes):
    """x,y,w,h -> x1,y1,x2,y2 with x2 = x + max(w - 1, 0) (Detectron's `xywh_to_xyxy`)."""
    x, y, w, h = coordinates(boxes)
    return tf.stack([x, y, x + tf.maximum(0.0, w - 1.0), y + tf.maximum(0.0, h - 1.0)], axis=-1)
