"""FPN RoI level assignment (Detectron's ``FPN.map_rois_to_fpn_levels``) and RoIAlign over a pyramid.

Detectron distributes RoIs to levels k_min..k_max by Eqn. (1) of the FPN paper, pools each level's RoIs
from that level (spatial scale 1 / 2**k) and restores the original RoI order; the same is done here with
``tf.dynamic_partition`` / ``tf.dynamic_stitch``, so it is vectorised and shape-agnostic in R.
"""

import math

import tensorflow as tf

from tfdet.ops.roi_align import crop_lattices, pool_crop_lattices, roi_align, uses_crop_and_resize


def map_rois_to_fpn_levels(boxes, k_min, k_max, canonical_scale=224, canonical_level=4):
    """FPN level (R,) int32 of each box (x1, y1, x2, y2):
    ``floor(canonical_level + log2(sqrt(area) / canonical_scale + 1e-6))`` clipped to [k_min, k_max],
    with Detectron's ``boxes_area`` (+1 widths); a negative area counts as 0 (level k_min)."""
    boxes = tf.convert_to_tensor(boxes)
    widths = boxes[:, 2] - boxes[:, 0] + 1.0
    heights = boxes[:, 3] - boxes[:, 1] + 1.0
    scales = tf.sqrt(tf.maximum(widths * heights, 0.0))
    log2_ratio = tf.math.log(scales / canonical_scale + 1e-6) / math.log(2.0)
    levels = tf.floor(canonical_level + log2_ratio)
    return tf.cast(tf.clip_by_value(levels, k_min, k_max), tf.int32)


def multilevel_roi_align(features_by_level, boxes, box_indices, output_size, sampling_ratio, k_min, k_max,
                         canonical_scale=224, canonical_level=4, aligned=False, xla=False):
    """RoIAlign of every box from its FPN level, returned in the input order of `boxes`.

    `features_by_level` lists the N x H x W x C maps of levels k_min..k_max (stride 2**k); the other
    arguments are those of `roi_align` and `map_rois_to_fpn_levels`. Returns (R, out_h, out_w, C).
    """
    num_levels = k_max - k_min + 1
    if len(features_by_level) != num_levels:
        raise ValueError(f"features_by_level has {len(features_by_level)} maps, levels {k_min}..{k_max} "
                         f"need {num_levels}")
    boxes = tf.stop_gradient(tf.convert_to_tensor(boxes))
    box_indices = tf.cast(box_indices, tf.int32)
    partitions = map_rois_to_fpn_levels(boxes, k_min, k_max, canonical_scale, canonical_level) - k_min
    features_by_level = [tf.convert_to_tensor(features) for features in features_by_level]
    if uses_crop_and_resize(features_by_level[0].dtype, sampling_ratio, xla):
        # Every box's sample lattice at its own level's scale and map size in one computation, and one
        # gradient for all levels (per level, they would repeat the same few dozen ops: graph-building time).
        shapes = tf.stack([tf.shape(features)[1:3] for features in features_by_level])
        box_shapes = tf.gather(shapes, partitions)
        scales = tf.gather([0.5 ** level for level in range(k_min, k_max + 1)], partitions)
        lattices = crop_lattices(boxes, scales, box_shapes[:, 0], box_shapes[:, 1], output_size, sampling_ratio,
                                 aligned)
        return pool_crop_lattices(features_by_level, lattices, box_indices, partitions, output_size, sampling_ratio)
    positions = tf.dynamic_partition(tf.range(tf.shape(boxes)[0]), partitions, num_levels)
    level_boxes = tf.dynamic_partition(boxes, partitions, num_levels)
    level_images = tf.dynamic_partition(box_indices, partitions, num_levels)
    pooled = [
        roi_align(features, level_boxes[i], level_images[i], output_size, 0.5 ** (k_min + i),
                  sampling_ratio, aligned, xla)
        for i, features in enumerate(features_by_level)
    ]
    return tf.dynamic_stitch(positions, pooled)
