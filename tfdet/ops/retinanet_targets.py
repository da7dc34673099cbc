"""RetinaNet training targets as Detectron's `roi_data/retinanet.py` (`add_retinanet_blobs`,
`_get_retinanet_blobs`) and `roi_data/data_utils.py` (`get_field_of_anchors`) make them.

Detectron labels a fixed FIELD of anchors, not the image: every level's anchors cover a square of
`field_size(stride, TRAIN.MAX_SIZE, FPN.COARSEST_STRIDE)` cells whatever the image size, and only the
labels are cropped to the feature map afterwards. The counts that normalise the losses (`num_fg`,
`num_bg`) are taken over the whole field. Every anchor is used (`inds_inside` is all of them: RetinaNet
reads no TRAIN.RPN_STRADDLE_THRESH). Crowd boxes are dropped before labelling (`gt_classes > 0 &
is_crowd == 0`). Boxes are x1, y1, x2, y2 in input pixels with the +1 convention.
"""

import collections
import math

import tensorflow as tf

from tfdet.ops.boxes import encode_boxes, pairwise_iou
from tfdet.ops.roi_sampling import best_match, check_gt_slots

FieldLevel = collections.namedtuple("FieldLevel", ["stride", "cell_anchors", "field_size"])
FieldLevel.__doc__ = """One pyramid level's field: stride (int), cell_anchors (A, 4) in Detectron's
octave-major order, field_size (int, cells per side)."""

RetinaNetTargets = collections.namedtuple("RetinaNetTargets", ["labels", "bbox_targets", "num_fg", "num_bg"])
RetinaNetTargets.__doc__ = """Over the concatenated field anchors: labels (B, N) int32 (class >= 1, 0 background,
-1 ignored); bbox_targets (B, N, 4) float32 (non-zero on the anchors counted in num_fg); num_fg, num_bg (B,)
int32, `_get_retinanet_blobs`' counts before its `+ 1`."""

LevelTargets = collections.namedtuple("LevelTargets", ["labels", "bbox_targets"])
LevelTargets.__doc__ = """One level's targets cropped to its feature map, NHWC like the head outputs: labels
(B, h, w, A) int32 and bbox_targets (B, h, w, A, 4) float32."""


def field_size(stride, max_size, coarsest_stride):
    """Cells per side of a level's field: ceil(COARSEST_STRIDE * ceil(MAX_SIZE / COARSEST_STRIDE) / stride)."""
    fpn_max_size = coarsest_stride * math.ceil(max_size / float(coarsest_stride))
    return int(math.ceil(fpn_max_size / float(stride)))


def field_anchors(levels):
    """(N, 4) float32 anchors of every level's field, concatenated as Detectron's `all_anchors`.

    Level by level (finest first), then cell anchor by cell anchor (one field per octave and aspect, the
    "foa" order), then row-major over the field cells (y, x); each anchor is its cell anchor plus the
    shift (x * stride, y * stride), summed in float64 and stored in float32 as `get_field_of_anchors`.
    """
    fields = []
    for level in levels:
        shifts = tf.cast(tf.range(level.field_size), tf.float64) * float(level.stride)
        shift_y, shift_x = tf.meshgrid(shifts, shifts, indexing="ij")
        shift = tf.reshape(tf.stack([shift_x, shift_y, shift_x, shift_y], axis=-1), [1, -1, 4])
        cells = tf.constant(level.cell_anchors, tf.float64)[:, None, :]
        fields.append(tf.reshape(tf.cast(cells + shift, tf.float32), [-1, 4]))
    return tf.concat(fields, axis=0)


def retinanet_anchor_targets(anchors, gt_boxes, gt_classes, gt_is_crowd, gt_valid, positive_overlap=0.5,
                             negative_overlap=0.4):
    """Label anchors and compute their box targets, per image, as `_get_retinanet_blobs`.

    Args:
      anchors: (N, 4) anchors (the field, `field_anchors`; any anchors work).
      gt_boxes: (B, G, 4) input pixels; gt_classes (B, G) int (1..NUM_CLASSES-1); gt_is_crowd, gt_valid (B, G).
      positive_overlap, negative_overlap: RETINANET.POSITIVE_OVERLAP, RETINANET.NEGATIVE_OVERLAP.
    Returns:
      RetinaNetTargets, in Detectron's order of steps:
      1. labels start at -1; every anchor that ties for some ground truth's best IoU gets the class of the
         ground truth IT overlaps most (`anchor_to_gt_argmax`, first on ties); so does every anchor of best
         IoU >= positive_overlap;
      2. num_fg counts the anchors labelled so far and they get box targets (`encode_boxes`, weights 1);
      3. anchors of best IoU < negative_overlap are then labelled 0 (num_bg counts them), overriding a
         best-anchor label of low IoU: such an anchor stays in num_fg and keeps its box target.
      An image without usable ground truth (none or only crowd; Detectron asserts) has all anchors labelled
      0: num_fg 0, num_bg N.
    """
    anchors = tf.cast(anchors, tf.float32)
    gt_boxes = tf.cast(gt_boxes, tf.float32)
    check_gt_slots(gt_boxes, "gt_boxes")
    usable = tf.cast(gt_valid, tf.bool) & ~tf.cast(gt_is_crowd, tf.bool)

    overlaps = pairwise_iou(anchors[None], gt_boxes)
    allowed = usable[:, None, :]
    anchor_best, anchor_gt = best_match(overlaps, allowed)
    gt_best = tf.reduce_max(tf.where(allowed, overlaps, -1.0), axis=1)
    ties = tf.reduce_any(allowed & (overlaps == gt_best[:, None, :]), axis=2)
    foreground = ties | (anchor_best >= positive_overlap)
    background = anchor_best < negative_overlap  # -1 without usable ground truth: every anchor

    matched_gt = tf.maximum(anchor_gt, 0)
    matched_class = tf.gather(tf.cast(gt_classes, tf.int32), matched_gt, batch_dims=1)
    labels = tf.where(background, 0, tf.where(foreground, matched_class, -1))
    matched_boxes = tf.gather(gt_boxes, matched_gt, batch_dims=1)
    targets = tf.where(foreground[..., None], encode_boxes(anchors[None], matched_boxes), 0.0)
    return RetinaNetTargets(labels, targets, _count(foreground), _count(background))


def _count(mask):
    """(B,) int32: the true entries of each row of a (B, N) mask."""
    return tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)


def crop_to_feature_maps(targets, levels, blob_height, blob_width):
    """Split field targets by level and crop each to its feature map: h = int(blob_height / stride) rows,
    w = int(blob_width / stride) columns of the padded input blob (`retnet_cls_labels_fpn<k>`, NHWC).

    Only the top-left h x w cells of the field are kept; the anchors of the field outside the blob leave
    the labels (they still counted in num_fg / num_bg). Returns one LevelTargets per level.
    """
    batch = tf.shape(targets.labels)[0]
    per_level = []
    start = 0
    for level in levels:
        num_cells = len(level.cell_anchors)
        size = level.field_size
        end = start + num_cells * size * size
        height = tf.cast(blob_height, tf.int32) // level.stride
        width = tf.cast(blob_width, tf.int32) // level.stride
        labels = tf.reshape(targets.labels[:, start:end], [batch, num_cells, size, size])
        boxes = tf.reshape(targets.bbox_targets[:, start:end], [batch, num_cells, size, size, 4])
        per_level.append(
            LevelTargets(
                tf.transpose(labels[:, :, :height, :width], [0, 2, 3, 1]),
                tf.transpose(boxes[:, :, :height, :width], [0, 2, 3, 1, 4]),
            )
        )
        start = end
    return per_level


def retinanet_normalizers(num_fg, num_bg, num_classes):
    """`retnet_fg_num` and `retnet_bg_num` of one replica's batch, float32 scalars.

    fg_num = sum over images of (num_fg + 1), the focal and box losses' normaliser; bg_num = sum over
    images of (num_bg + 1) * (NUM_CLASSES - 1) + (num_fg + 1) * (NUM_CLASSES - 2), a logged metric.
    Summed exactly (float64), then rounded to float32 as Detectron's `astype(np.float32)`.
    """
    fg = tf.cast(num_fg, tf.float64) + 1.0
    bg = (tf.cast(num_bg, tf.float64) + 1.0) * (num_classes - 1) + fg * (num_classes - 2)
    return tf.cast(tf.reduce_sum(fg), tf.float32), tf.cast(tf.reduce_sum(bg), tf.float32)
