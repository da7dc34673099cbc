"""Keras layers of the training graph: Detectron's target assignment (tfdet.ops) and its losses.

Random draws (anchor and RoI sampling) are seeded per image: every layer that samples takes `seeds`
(B, 2) int64, one stateless seed per image, and runs its target op on each image alone. An image's
samples therefore depend on its seed only, not on the batch it shares a replica with, which makes
one device on a global batch and several replicas on its parts draw the same samples. Targets carry
no gradient (Detectron computes them in numpy); the losses are differentiable in the head outputs.

Ground-truth slots: `gt_boxes` (B, G, 4) input pixels, `gt_classes` (B, G) int32, `gt_is_crowd`
(B, G) bool, `gt_valid` (B, G) bool (see `GroundTruthValid`).
"""

import keras
import tensorflow as tf

from tfdet.ops.anchors import shifted_anchors
from tfdet.ops.keypoint_targets import keypoint_heatmap_targets, sample_keypoint_rois
from tfdet.ops.losses import (
    fast_rcnn_box_loss,
    fast_rcnn_class_loss,
    keypoint_loss,
    mask_loss,
    rpn_box_loss,
    rpn_objectness_loss,
)
from tfdet.ops.map_fn import map_fn
from tfdet.ops.mask_targets import mask_rcnn_targets, match_masks_to_rois
from tfdet.ops.roi_sampling import label_proposals, sample_rois, sub_seed
from tfdet.ops.rpn_targets import rpn_anchor_targets, scaled_image_size

# Distinct stateless streams for the draws of one image.
RPN_STREAM, ROI_STREAM, KEYPOINT_STREAM = 0, 1, 2


def _scalar_spec():
    return keras.KerasTensor((), "float32")


def _per_image(function, inputs, output_signature):
    """`function` on each image alone (every input and output with a batch axis of 1), restacked."""

    def one_image(sliced):
        outputs = function(*(tf.expand_dims(t, 0) for t in sliced))
        return tf.nest.map_structure(lambda t: tf.squeeze(t, 0), outputs)

    return map_fn(one_image, tuple(inputs), fn_output_signature=output_signature)


def _image_seed(seeds, stream):
    """The (2,) seed of draw `stream` for the single image of a (1, 2) `seeds` slice."""
    return sub_seed(seeds[0], stream)


class GroundTruthValid(keras.layers.Layer):
    """(B, G) bool: the filled ground-truth slots, the first `num_gt` of each image with a class > 0."""

    def call(self, gt_classes, num_gt):
        slots = tf.range(tf.shape(gt_classes)[1])[None, :]
        return (slots < tf.cast(num_gt, tf.int32)[:, None]) & (tf.cast(gt_classes, tf.int32) > 0)

    def compute_output_spec(self, gt_classes, num_gt):
        return keras.KerasTensor(gt_classes.shape, "bool")


class TrainingImInfo(keras.layers.Layer):
    """Detectron's training `im_info` (B, 3): the resized image's unpadded height and width,
    round(original size * scale), and the scale (`roi_data/rpn.py::add_rpn_blobs`); test time uses
    the padded size instead (`tfdet.layers.image_info.ImInfo`)."""

    def call(self, image_info):
        height, width = scaled_image_size(image_info)
        return tf.stack([height, width, tf.cast(image_info[:, 2], tf.float32)], axis=1)

    def compute_output_shape(self, image_info_shape):
        return (image_info_shape[0], 3)


class RPNLosses(keras.layers.Layer):
    """Anchor targets (`rpn_anchor_targets`, per image) and the RPN losses `loss_rpn_cls`, `loss_rpn_bbox`.

    Called on `[logits_1, deltas_1, ..., logits_L, deltas_L, gt_boxes, gt_is_crowd, gt_valid,
    image_info, seeds]` with the NHWC RPN outputs of each level, (B, H, W, A) and (B, H, W, 4A).
    The levels are labelled together, as Detectron's `add_rpn_blobs` does, and their losses summed:
    `fpn` True normalises the objectness loss by RPN_BATCH_SIZE_PER_IM per image
    (`add_fpn_rpn_losses`), False by the labelled anchors (`add_single_scale_rpn_losses`); the sum of
    Detectron's per-level FPN losses equals these losses on the concatenated levels.
    """

    def __init__(self, cell_anchors, strides, positive_overlap, negative_overlap, straddle_thresh,
                 batch_size_per_im, fg_fraction, fpn, **kwargs):
        super().__init__(**kwargs)
        self.cell_anchors = [[list(map(float, anchor)) for anchor in cell] for cell in cell_anchors]
        self.strides = [int(s) for s in strides]
        self.positive_overlap = float(positive_overlap)
        self.negative_overlap = float(negative_overlap)
        self.straddle_thresh = float(straddle_thresh)
        self.batch_size_per_im = int(batch_size_per_im)
        self.fg_fraction = float(fg_fraction)
        self.fpn = bool(fpn)

    def call(self, inputs):
        *level_outputs, gt_boxes, gt_is_crowd, gt_valid, image_info, seeds = inputs
        logits, deltas, anchors = [], [], []
        for level, (cell, stride) in enumerate(zip(self.cell_anchors, self.strides)):
            level_logits, level_deltas = level_outputs[2 * level], level_outputs[2 * level + 1]
            batch, height, width = tf.unstack(tf.shape(level_logits)[:3])
            anchors.append(shifted_anchors(cell, stride, height, width))
            logits.append(tf.reshape(level_logits, [batch, -1]))
            deltas.append(tf.reshape(level_deltas, [batch, -1, 4]))
        anchors = tf.concat(anchors, axis=0)

        def targets(boxes, crowd, valid, info, seed):
            return tuple(rpn_anchor_targets(
                anchors, boxes, crowd, valid, info,
                positive_overlap=self.positive_overlap,
                negative_overlap=self.negative_overlap,
                straddle_thresh=self.straddle_thresh,
                batch_size_per_im=self.batch_size_per_im,
                fg_fraction=self.fg_fraction,
                seed=_image_seed(seed, RPN_STREAM),
            ))

        box_spec = tf.TensorSpec([None, 4], tf.float32)
        with tf.name_scope("targets"):
            labels, box_targets, inside, outside = _per_image(
                targets,
                (tf.stop_gradient(gt_boxes), gt_is_crowd, gt_valid, image_info, seeds),
                (tf.TensorSpec([None], tf.int32), box_spec, box_spec, box_spec),
            )
        normalizer = self.batch_size_per_im if self.fpn else None
        loss_cls = rpn_objectness_loss(tf.concat(logits, axis=1), labels, per_image_normalizer=normalizer)
        loss_bbox = rpn_box_loss(tf.concat(deltas, axis=1), box_targets, inside, outside)
        return loss_cls, loss_bbox

    def compute_output_spec(self, inputs):
        return _scalar_spec(), _scalar_spec()

    def get_config(self):
        config = super().get_config()
        config.update(
            cell_anchors=self.cell_anchors, strides=self.strides, positive_overlap=self.positive_overlap,
            negative_overlap=self.negative_overlap, straddle_thresh=self.straddle_thresh,
            batch_size_per_im=self.batch_size_per_im, fg_fraction=self.fg_fraction, fpn=self.fpn,
        )
        return config


class CollectProposals(keras.layers.Layer):
    """Training proposals of each image and their validity (B, N): the first `num_proposals` of each
    image, or (`across_batch`) the N best-scoring proposals of the whole batch.

    Called on `[boxes (B, N, 4), scores (B, N), num_proposals (B,)]`, each image's proposals sorted
    by descending score (GenerateProposals). `across_batch` is Detectron's FPN training collect
    (`collect_and_distribute_fpn_rpn_proposals.py::collect`: the top TRAIN.RPN_POST_NMS_TOP_N over
    every level and image of one GPU's batch); since an entry of the batch's top N is also among its
    own image's top N, collecting from each image's best N is exact. Each image keeps its selected
    proposals in score order, first; C4 (`across_batch` False) keeps every image's own.
    """

    def __init__(self, across_batch, **kwargs):
        super().__init__(**kwargs)
        self.across_batch = bool(across_batch)

    def call(self, inputs):
        boxes, scores, num_proposals = inputs
        boxes = tf.stop_gradient(boxes)
        batch, width = tf.shape(scores)[0], tf.shape(scores)[1]
        positions = tf.range(width)[None, :]
        valid = positions < tf.cast(num_proposals, tf.int32)[:, None]
        if not self.across_batch:
            return boxes, valid
        flat_scores = tf.reshape(tf.where(valid, tf.stop_gradient(scores), -float("inf")), [-1])
        best = tf.math.top_k(flat_scores, k=tf.minimum(width, batch * width), sorted=False)
        hits = tf.scatter_nd(best.indices[:, None], tf.cast(tf.math.is_finite(best.values), tf.int32),
                             tf.shape(flat_scores))
        selected = tf.reshape(hits > 0, [batch, width])
        order = tf.argsort(tf.where(selected, positions, width + positions), axis=1, stable=True)
        kept = tf.reduce_sum(tf.cast(selected, tf.int32), axis=1)
        return tf.gather(boxes, order, batch_dims=1), positions < kept[:, None]

    def compute_output_spec(self, inputs):
        boxes = inputs[0]
        return keras.KerasTensor(boxes.shape, "float32"), keras.KerasTensor(boxes.shape[:2], "bool")

    def get_config(self):
        config = super().get_config()
        config.update(across_batch=self.across_batch)
        return config


class SampleRoIs(keras.layers.Layer):
    """Detectron's Fast R-CNN (and keypoint) training RoIs of each image with their targets.

    Called on `[proposals (B, P, 4), proposal_valid (B, P), gt_boxes, gt_classes, gt_is_crowd,
    gt_valid, image_info (B, 3), seeds (B, 2)]` plus `gt_keypoints (B, G, K, 3)` when
    `heatmap_size` is set. Per image: `label_proposals` (ground truth added to the proposals),
    `sample_rois` (R = batch_size_per_im slots, foreground first) and, for keypoints,
    `sample_keypoint_rois` (F = round(fg_fraction * R) slots) and `keypoint_heatmap_targets`.
    Returns a dict: `rois` (B, R, 4) input pixels, `labels` (B, R) int32 (-1 padding),
    `bbox_targets`, `bbox_inside_weights`, `bbox_outside_weights` (B, R, 4 * C'); with keypoints
    also `keypoint_rois` (B, F, 4), `keypoint_indices` (B, F, K) int32, `keypoint_weights` (B, F, K).
    """

    def __init__(self, num_classes, batch_size_per_im, fg_fraction, fg_thresh, bg_thresh_hi, bg_thresh_lo,
                 bbox_thresh, box_coder_weights, cls_agnostic_bbox_reg=False, heatmap_size=None, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = int(num_classes)
        self.batch_size_per_im = int(batch_size_per_im)
        self.fg_fraction = float(fg_fraction)
        self.fg_thresh = float(fg_thresh)
        self.bg_thresh_hi = float(bg_thresh_hi)
        self.bg_thresh_lo = float(bg_thresh_lo)
        self.bbox_thresh = float(bbox_thresh)
        self.box_coder_weights = tuple(float(w) for w in box_coder_weights)
        self.cls_agnostic_bbox_reg = bool(cls_agnostic_bbox_reg)
        self.heatmap_size = None if heatmap_size is None else int(heatmap_size)

    @property
    def num_bbox_reg_classes(self):
        return 2 if self.cls_agnostic_bbox_reg else self.num_classes

    def call(self, inputs):
        proposals, proposal_valid, gt_boxes, gt_classes, gt_is_crowd, gt_valid, image_info, seeds, *keypoints = inputs
        with_keypoints = self.heatmap_size is not None

        def targets(proposals, proposal_valid, gt_boxes, gt_classes, gt_is_crowd, gt_valid, image_info, seeds,
                    *gt_keypoints):
            scale = image_info[:, 2]
            candidates = label_proposals(
                proposals, proposal_valid, gt_boxes, gt_classes, gt_is_crowd, gt_valid, scale,
                bbox_thresh=self.bbox_thresh, bbox_reg_weights=self.box_coder_weights,
                cls_agnostic_bbox_reg=self.cls_agnostic_bbox_reg,
            )
            samples = sample_rois(
                candidates, self.num_classes, batch_size_per_im=self.batch_size_per_im,
                fg_fraction=self.fg_fraction, fg_thresh=self.fg_thresh, bg_thresh_hi=self.bg_thresh_hi,
                bg_thresh_lo=self.bg_thresh_lo, cls_agnostic_bbox_reg=self.cls_agnostic_bbox_reg,
                seed=_image_seed(seeds, ROI_STREAM),
            )
            outputs = {
                "rois": samples.rois,
                "labels": samples.labels,
                "bbox_targets": samples.bbox_targets,
                "bbox_inside_weights": samples.bbox_inside_weights,
                "bbox_outside_weights": samples.bbox_outside_weights,
            }
            if with_keypoints:
                keypoint_rois = sample_keypoint_rois(
                    candidates, gt_keypoints[0], scale, batch_size_per_im=self.batch_size_per_im,
                    fg_fraction=self.fg_fraction, fg_thresh=self.fg_thresh,
                    seed=_image_seed(seeds, KEYPOINT_STREAM),
                )
                indices, weights = keypoint_heatmap_targets(
                    keypoint_rois.rois, keypoint_rois.keypoints, scale, self.heatmap_size
                )
                outputs.update(keypoint_rois=keypoint_rois.rois, keypoint_indices=indices, keypoint_weights=weights)
            return outputs

        per_image_inputs = (tf.stop_gradient(proposals), proposal_valid, tf.stop_gradient(gt_boxes), gt_classes,
                            gt_is_crowd, gt_valid, image_info, seeds, *keypoints)
        return _per_image(targets, per_image_inputs, self._signature(with_keypoints))

    def _signature(self, with_keypoints):
        targets = tf.TensorSpec([None, 4 * self.num_bbox_reg_classes], tf.float32)
        signature = {
            "rois": tf.TensorSpec([None, 4], tf.float32),
            "labels": tf.TensorSpec([None], tf.int32),
            "bbox_targets": targets,
            "bbox_inside_weights": targets,
            "bbox_outside_weights": targets,
        }
        if with_keypoints:
            signature.update(
                keypoint_rois=tf.TensorSpec([None, 4], tf.float32),
                keypoint_indices=tf.TensorSpec([None, None], tf.int32),
                keypoint_weights=tf.TensorSpec([None, None], tf.float32),
            )
        return signature

    def compute_output_spec(self, inputs):
        batch, rois = inputs[0].shape[0], self.batch_size_per_im
        width = 4 * self.num_bbox_reg_classes
        specs = {
            "rois": keras.KerasTensor((batch, rois, 4), "float32"),
            "labels": keras.KerasTensor((batch, rois), "int32"),
            "bbox_targets": keras.KerasTensor((batch, rois, width), "float32"),
            "bbox_inside_weights": keras.KerasTensor((batch, rois, width), "float32"),
            "bbox_outside_weights": keras.KerasTensor((batch, rois, width), "float32"),
        }
        if self.heatmap_size is not None:
            keypoint_slots, num_keypoints = self.foreground_slots, inputs[-1].shape[2]
            specs.update(
                keypoint_rois=keras.KerasTensor((batch, keypoint_slots, 4), "float32"),
                keypoint_indices=keras.KerasTensor((batch, keypoint_slots, num_keypoints), "int32"),
                keypoint_weights=keras.KerasTensor((batch, keypoint_slots, num_keypoints), "float32"),
            )
        return specs

    @property
    def foreground_slots(self):
        """F = round(FG_FRACTION * BATCH_SIZE_PER_IM): the leading RoI slots that hold every foreground RoI,
        and the keypoint RoI slots."""
        return int(round(self.fg_fraction * self.batch_size_per_im))

    def get_config(self):
        config = super().get_config()
        config.update(
            num_classes=self.num_classes, batch_size_per_im=self.batch_size_per_im, fg_fraction=self.fg_fraction,
            fg_thresh=self.fg_thresh, bg_thresh_hi=self.bg_thresh_hi, bg_thresh_lo=self.bg_thresh_lo,
            bbox_thresh=self.bbox_thresh, box_coder_weights=self.box_coder_weights,
            cls_agnostic_bbox_reg=self.cls_agnostic_bbox_reg, heatmap_size=self.heatmap_size,
        )
        return config


class SelectedRoIs(keras.layers.Layer):
    """The RoIs of the selected slots only: `[rois (B, S, 4), selected (B, S) bool]` -> rois (N, 4),
    their image indices (N,) and their flat slot indices (N,) into B * S, N = the selected count.

    The mask and keypoint heads run on these, as Detectron runs them on its foreground (keypoint) RoIs
    alone: a slot that holds no such RoI has no target, so it adds nothing to the loss, and the heads'
    convolutions skip it instead of computing on padding. With nothing selected the first slot is taken,
    as Detectron takes one background RoI with an all-ignored target ("the network cannot handle empty
    blobs", `roi_data/mask_rcnn.py`): it adds nothing to the loss either.
    """

    def call(self, inputs):
        rois, selected = inputs
        selected = tf.reshape(selected, [-1])
        selected = selected | (~tf.reduce_any(selected) & tf.equal(tf.range(tf.size(selected)), 0))
        slots = tf.cast(tf.where(selected)[:, 0], tf.int32)
        image_indices = slots // tf.shape(rois)[1]
        return tf.gather(tf.reshape(tf.stop_gradient(rois), [-1, 4]), slots), image_indices, slots

    def compute_output_spec(self, inputs):
        return (keras.KerasTensor((None, 4), "float32"), keras.KerasTensor((None,), "int32"),
                keras.KerasTensor((None,), "int32"))


def gather_slots(values, slots):
    """Entries (N, ...) of the flat slot indices `slots` (N,) from per-image values (B, S, ...)."""
    shape = tf.shape(values)
    return tf.gather(tf.reshape(values, tf.concat([[shape[0] * shape[1]], shape[2:]], 0)), slots)


class FastRCNNLosses(keras.layers.Layer):
    """`loss_cls`, `loss_bbox` and `accuracy_cls` of the box head on the sampled RoIs.

    Called on `[cls_score (B*R, C), bbox_pred (B*R, 4C'), labels, bbox_targets, bbox_inside_weights,
    bbox_outside_weights]` (the last four from `SampleRoIs`, any leading shape of B*R entries);
    padding slots (label -1) count nowhere. accuracy_cls is the fraction of sampled RoIs whose
    highest-scoring class is their label (Detectron's `Accuracy` on cls_prob).
    """

    def call(self, inputs):
        cls_score, bbox_pred, labels, targets, inside, outside = inputs
        labels = tf.reshape(labels, [-1])
        width = tf.shape(bbox_pred)[-1]
        targets, inside, outside = (tf.reshape(t, [-1, width]) for t in (targets, inside, outside))
        real = labels >= 0
        correct = tf.cast(tf.argmax(cls_score, axis=-1, output_type=tf.int32) == labels, tf.float32)
        accuracy = tf.math.divide_no_nan(tf.reduce_sum(tf.where(real, correct, 0.0)),
                                         tf.reduce_sum(tf.cast(real, tf.float32)))
        return (
            fast_rcnn_class_loss(cls_score, labels),
            fast_rcnn_box_loss(bbox_pred, targets, inside, outside, labels),
            accuracy,
        )

    def compute_output_spec(self, inputs):
        return _scalar_spec(), _scalar_spec(), _scalar_spec()


def mask_boxes(gt_masks):
    """Tight boxes (B, G, 4) of binary masks (B, G, H, W), as Detectron's `polys_to_boxes` gives them
    for the polygons rasterised into those masks: the pixels' outer edges, (min col, min row,
    max col + 1, max row + 1). An empty mask gets (0, 0, 0, 0)."""
    filled = tf.cast(gt_masks, tf.bool)
    rows = tf.reduce_any(filled, axis=3)
    cols = tf.reduce_any(filled, axis=2)

    def extent(occupied):
        size = tf.shape(occupied)[-1]
        first = tf.argmax(tf.cast(occupied, tf.int32), axis=-1, output_type=tf.int32)
        last = size - 1 - tf.argmax(tf.cast(tf.reverse(occupied, [-1]), tf.int32), axis=-1, output_type=tf.int32)
        return tf.cast(first, tf.float32), tf.cast(last + 1, tf.float32)

    x1, x2 = extent(cols)
    y1, y2 = extent(rows)
    boxes = tf.stack([x1, y1, x2, y2], axis=-1)
    return tf.where(tf.reduce_any(rows, axis=-1)[..., None], boxes, 0.0)


class MaskLoss(keras.layers.Layer):
    """`loss_mask`: Detectron's mask targets (`add_mask_rcnn_blobs`) and sigmoid loss on the mask RoIs.

    Called on `[mask_logits (N, M, M, C), slots (N,), rois (B, F, 4), labels (B, F), gt_masks (B, G, H, W),
    gt_is_crowd, gt_valid, image_info]`: `rois` and `labels` are the first F slots of `SampleRoIs` (every
    foreground RoI), `slots` the flat indices of the N slots the mask head ran on (`SelectedRoIs`), every
    foreground slot among them. Each RoI is matched to the non-crowd ground truth whose mask box overlaps it
    best (`match_masks_to_rois`), its target is that mask cropped to the RoI (`mask_rcnn_targets`);
    non-foreground slots are ignored.
    """

    def __init__(self, resolution, class_specific=True, loss_weight=1.0, **kwargs):
        super().__init__(**kwargs)
        self.resolution = int(resolution)
        self.class_specific = bool(class_specific)
        self.loss_weight = float(loss_weight)

    def call(self, inputs):
        mask_logits, slots, rois, labels, gt_masks, gt_is_crowd, gt_valid, image_info = inputs
        rois = tf.stop_gradient(rois)
        scale = image_info[:, 2]
        with tf.name_scope("targets"):
            gt_index = match_masks_to_rois(rois, mask_boxes(gt_masks), gt_is_crowd, gt_valid, scale)
            targets = mask_rcnn_targets(rois, labels, gt_masks, gt_index, scale, self.resolution)
        return mask_loss(
            mask_logits,
            gather_slots(targets, slots),
            gather_slots(labels, slots),
            class_specific=self.class_specific,
            loss_weight=self.loss_weight,
        )

    def compute_output_spec(self, inputs):
        return _scalar_spec()

    def get_config(self):
        config = super().get_config()
        config.update(resolution=self.resolution, class_specific=self.class_specific, loss_weight=self.loss_weight)
        return config


class KeypointLoss(keras.layers.Layer):
    """`loss_kps`: the spatial softmax loss of the keypoint heatmaps (N, S, S, K) on their targets.

    Called on `[heatmap_logits, slots (N,), keypoint_indices (B, F, K), keypoint_weights (B, F, K)]`:
    the targets of `SampleRoIs`, `slots` the flat indices of the N keypoint slots the head ran on
    (`SelectedRoIs`), every slot with a weight among them. normalize_by_visible False uses Detectron's
    normaliser with this replica's ims_per_batch (TRAIN.IMS_PER_BATCH), batch_size_per_im and fg_fraction.
    """

    def __init__(self, normalize_by_visible=True, loss_weight=1.0, ims_per_batch=None, batch_size_per_im=None,
                 fg_fraction=None, **kwargs):
        super().__init__(**kwargs)
        self.normalize_by_visible = bool(normalize_by_visible)
        self.loss_weight = float(loss_weight)
        self.ims_per_batch = ims_per_batch
        self.batch_size_per_im = batch_size_per_im
        self.fg_fraction = fg_fraction

    def call(self, inputs):
        heatmaps, slots, indices, weights = inputs
        return keypoint_loss(
            heatmaps,
            gather_slots(indices, slots),
            gather_slots(weights, slots),
            normalize_by_visible=self.normalize_by_visible,
            loss_weight=self.loss_weight,
            ims_per_batch=self.ims_per_batch,
            batch_size_per_im=self.batch_size_per_im,
            fg_fraction=self.fg_fraction,
        )

    def compute_output_spec(self, inputs):
        return _scalar_spec()

    def get_config(self):
        config = super().get_config()
        config.update(
            normalize_by_visible=self.normalize_by_visible, loss_weight=self.loss_weight,
            ims_per_batch=self.ims_per_batch, batch_size_per_im=self.batch_size_per_im, fg_fraction=self.fg_fraction,
        )
        return config
