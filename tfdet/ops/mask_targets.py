"""Mask R-CNN training targets (Detectron's `roi_data/mask_rcnn.py::add_mask_rcnn_blobs`) from full-image masks.

Detectron rasterises each ground-truth polygon into the M x M grid of a foreground RoI
(`segms.polys_to_mask_wrt_box`: polygon shifted by the box corner, scaled by M / max(x2 - x1, 1) and
rasterised by pycocotools, which fills the pixels whose centre lies inside). Target cell (i, j) is thus the
polygon tested at the box-relative point ((j + 0.5) w / M, (i + 0.5) h / M).

In the graph the ground truth is a full-image binary mask per instance at the network input scale
(`tfdet.data.pipeline`: pycocotools at the original size, resized by nearest neighbour). Each target cell
samples that mask bilinearly at the same point, with mask pixel (r, c) standing for its centre
(c + 0.5, r + 0.5), and thresholds at 0.5. The two differ only for cells whose centre lies within about
0.75 pixel of the polygon boundary (a binary mask knows an edge to half a pixel per axis, in the pixels
it was rasterised at) or a fifth of a grid cell (pycocotools' own vertex rounding). On the test shapes
the IoU with Detectron's target averages 0.99; a whole row can flip when a row of cell centres runs
within half a pixel of an axis-aligned edge (worst seen 0.92). Grid-aligned rectangles are exact.
"""

import tensorflow as tf

from tfdet.ops.boxes import pairwise_iou
from tfdet.ops.roi_sampling import best_match, check_gt_slots


def match_masks_to_rois(rois, gt_mask_boxes, gt_is_crowd, gt_valid, image_scale):
    """Index (B, R) of the non-crowd ground truth whose segmentation box best overlaps each RoI (-1 none).

    Detectron matches foreground RoIs to `polys_to_boxes` (the tight box of the polygon coordinates), not
    to the annotation boxes, with IoU in original pixels (input pixels / `image_scale` (B,)).
    """
    scale = tf.cast(image_scale, tf.float32)[:, None, None]
    overlaps = pairwise_iou(tf.cast(rois, tf.float32) / scale, tf.cast(gt_mask_boxes, tf.float32) / scale)
    usable = tf.cast(gt_valid, tf.bool) & ~tf.cast(gt_is_crowd, tf.bool)
    return best_match(overlaps, usable[:, None, :])[1]


def _axis_samples(start, end, min_size, resolution, size):
    """Bilinear taps along one axis for the cell centres of boxes [start, end] (…,): lower pixel (…, M),
    upper pixel, weight of the upper pixel, and whether the sample point lies on the mask at all."""
    extent = tf.maximum(end - start, min_size)
    cells = tf.range(resolution, dtype=tf.float32) + 0.5
    points = start[..., None] + cells * extent[..., None] / resolution
    on_mask = (points >= 0.0) & (points < tf.cast(size, tf.float32))
    coords = tf.clip_by_value(points - 0.5, 0.0, tf.cast(size - 1, tf.float32))
    low = tf.floor(coords)
    high = tf.minimum(low + 1.0, tf.cast(size - 1, tf.float32))
    return tf.cast(low, tf.int32), tf.cast(high, tf.int32), coords - low, on_mask


def mask_rcnn_targets(rois, roi_labels, gt_masks, gt_index, image_scale, resolution):
    """M x M binary targets of each RoI from its ground-truth mask; -1 (ignored) for non-foreground RoIs.

    Args:
      rois: (B, R, 4) input pixels (e.g. the first round(FG_FRACTION * BATCH_SIZE_PER_IM) slots of
        `sample_rois`, which hold every foreground RoI).
      roi_labels: (B, R) int class labels; a RoI gets a target only when its label is > 0.
      gt_masks: (B, G, H, W) binary (bool/uint8/float) full-image masks at the input scale (the data
        pipeline's `gt_masks`; pixel (r, c) stands for the point (c + 0.5, r + 0.5)).
      gt_index: (B, R) int32 ground truth of each RoI (`match_masks_to_rois`), -1 for none.
      image_scale: (B,) input pixels per original pixel; the RoI extent is at least one original pixel,
        Detectron's `max(x2 - x1, 1)`.
      resolution: MRCNN.RESOLUTION (M).
    Returns:
      (B, R, M, M) int32 targets in {-1, 0, 1}. Class-specific targets (MRCNN.CLS_SPECIFIC_MASK) are these
      on the channel of the RoI's label and -1 elsewhere; `losses.mask_loss` picks that channel instead of
      materialising the other channels. A foreground RoI without a usable ground truth (Detectron would
      fail there) is ignored.
    """
    rois = tf.stop_gradient(tf.cast(rois, tf.float32))
    gt_index = tf.cast(gt_index, tf.int32)
    gt_masks = tf.convert_to_tensor(gt_masks)
    check_gt_slots(gt_masks, "gt_masks")
    shape = tf.shape(gt_masks)
    num_gt, height, width = shape[1], shape[2], shape[3]
    min_size = tf.cast(image_scale, tf.float32)[:, None]
    y0, y1, wy, on_y = _axis_samples(rois[..., 1], rois[..., 3], min_size, resolution, height)
    x0, x1, wx, on_x = _axis_samples(rois[..., 0], rois[..., 2], min_size, resolution, width)

    # Flat int64 pixel indices: B * G * H * W may exceed 2**31 for large batches of large images.
    images = tf.range(tf.cast(shape[0], tf.int64))[:, None]
    instance = images * tf.cast(num_gt, tf.int64) + tf.cast(tf.maximum(gt_index, 0), tf.int64)
    mask_base = (instance * tf.cast(height, tf.int64))[..., None, None]
    flat_masks = tf.reshape(gt_masks, [-1])  # gathered in their own dtype: no float copy of every mask
    width64 = tf.cast(width, tf.int64)

    def tap(rows, cols):
        rows = tf.cast(rows, tf.int64)[..., :, None]
        cols = tf.cast(cols, tf.int64)[..., None, :]
        return tf.cast(tf.gather(flat_masks, (mask_base + rows) * width64 + cols), tf.float32)

    wy = wy[..., :, None]
    wx = wx[..., None, :]
    values = (
        (1.0 - wy) * ((1.0 - wx) * tap(y0, x0) + wx * tap(y0, x1))
        + wy * ((1.0 - wx) * tap(y1, x0) + wx * tap(y1, x1))
    )
    values = tf.where(on_y[..., :, None] & on_x[..., None, :], values, 0.0)
    targets = tf.cast(values >= 0.5, tf.int32)
    has_target = (tf.cast(roi_labels, tf.int32) > 0) & (gt_index >= 0)
    return tf.where(has_target[..., None, None], targets, -1)
