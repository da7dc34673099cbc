"""Detectron's anchors: quantized, ratio-major cell anchors and their shifts over a feature map."""

import numpy as np
import tensorflow as tf


def generate_anchors(stride=16, sizes=(32, 64, 128, 256, 512), aspect_ratios=(0.5, 1, 2)):
    """Cell anchors (A, 4) x1,y1,x2,y2 exactly as Detectron's `generate_anchors` makes them.

    Anchors are centred on the reference window (0, 0, stride-1, stride-1); for each aspect ratio
    (outer loop) the window's width is rounded (numpy's round-half-to-even, as Detectron) and then
    scaled by each size/stride (inner loop). The result is quantized, not of exact area.
    """
    base = float(stride)
    scales = np.asarray(sizes, dtype=np.float64) / base
    ratios = np.asarray(aspect_ratios, dtype=np.float64)
    centre = 0.5 * (base - 1.0)
    ratio_widths = np.round(np.sqrt(base * base / ratios))
    ratio_heights = np.round(ratio_widths * ratios)
    widths = (ratio_widths[:, None] * scales[None, :]).reshape(-1)
    heights = (ratio_heights[:, None] * scales[None, :]).reshape(-1)
    return np.stack(
        [
            centre - 0.5 * (widths - 1.0),
            centre - 0.5 * (heights - 1.0),
            centre + 0.5 * (widths - 1.0),
            centre + 0.5 * (heights - 1.0),
        ],
        axis=1,
    )


def fpn_level_anchors(level, min_level, anchor_start_size, aspect_ratios):
    """Cell anchors of FPN level `level`: stride 2**level, one size start_size * 2**(level-min_level)."""
    size = anchor_start_size * 2.0 ** (level - min_level)
    return generate_anchors(stride=2**level, sizes=(size,), aspect_ratios=aspect_ratios)


def shifted_anchors(cell_anchors, stride, height, width):
    """All anchors of an (height, width) feature map as (height*width*A, 4) in (H, W, A) order.

    The order matches the RPN outputs reshaped from NHWC (position-major, anchor fastest) and
    Detectron's `GenerateProposalsOp`, whose shifts are `arange(W) * stride` (no half-cell offset).
    """
    cell_anchors = tf.convert_to_tensor(cell_anchors, dtype=tf.float32)
    shift_x = tf.cast(tf.range(width), tf.float32) * float(stride)
    shift_y = tf.cast(tf.range(height), tf.float32) * float(stride)
    grid_y, grid_x = tf.meshgrid(shift_y, shift_x, indexing="ij")
    shifts = tf.stack([grid_x, grid_y, grid_x, grid_y], axis=-1)
    # expand_dims, not [:, :, None]: LiteRT's converter lowers a new-axis slice of at most one unknown dimension.
    anchors = tf.expand_dims(shifts, 2) + cell_anchors[None, None, :, :]
    return tf.reshape(anchors, [-1, 4])


def retinanet_level_anchors(level, scales_per_octave, aspect_ratios, anchor_scale):
    """RetinaNet's cell anchors (A, 4) of FPN level `level`, octave-major as test_retinanet makes them.

    For each octave o (outer loop) and each aspect ratio in config order (inner loop), one anchor of
    size stride * 2**(o / scales_per_octave) * anchor_scale, stride = 2**level, quantized as
    `generate_anchors` quantizes it; A = scales_per_octave * len(aspect_ratios).
    """
    stride = 2.0**level
    return np.concatenate(
        [
            generate_anchors(
                stride=stride,
                sizes=(stride * 2.0 ** (octave / float(scales_per_octave)) * anchor_scale,),
                aspect_ratios=(aspect,),
            )
            for octave in range(scales_per_octave)
            for aspect in aspect_ratios
        ],
        axis=0,
    )
