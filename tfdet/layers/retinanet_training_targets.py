"""The Keras layer of RetinaNet's training graph: Detectron's anchor targets and losses on the head outputs.

Targets (`tfdet.ops.retinanet_targets`) are data, as Detectron computes them in numpy: no gradient reaches
the ground truth; the losses (`tfdet.ops.focal_loss`) are differentiable in the head outputs.
"""

import keras
import tensorflow as tf

from tfdet.ops.focal_loss import select_smooth_l1_loss, sigmoid_focal_loss, softmax_focal_loss
from tfdet.ops.map_fn import map_fn
from tfdet.ops.retinanet_targets import (
    FieldLevel,
    RetinaNetTargets,
    crop_to_feature_maps,
    field_anchors,
    retinanet_anchor_targets,
    retinanet_normalizers,
)


class RetinaNetLosses(keras.layers.Layer):
    """`loss_retnet_cls`, `loss_retnet_bbox` and the metrics `retnet_fg_num`, `retnet_bg_num` of one batch.

    Called on `[cls_1, bbox_1, ..., cls_L, bbox_L, images, gt_boxes, gt_classes, gt_is_crowd, gt_valid]`
    with the NHWC head outputs of each level, finest first (`add_retinanet_heads`), and the padded input
    `images` (B, H, W, 3), whose size crops the labels. Each image's field is labelled alone; fg_num over
    the batch normalises every level's losses, whose sums over the levels are returned (Detectron logs
    them per level: `fl_fpn<k>`, `retnet_loss_bbox_fpn<k>`).

    Args:
      strides, cell_anchors, field_sizes: per level, finest first (`FieldLevel`).
      num_classes: MODEL.NUM_CLASSES (background included); softmax: RETINANET.SOFTMAX.
      positive_overlap, negative_overlap, gamma, alpha, bbox_reg_beta, bbox_reg_weight,
      class_specific_bbox: RETINANET.POSITIVE_OVERLAP, NEGATIVE_OVERLAP, LOSS_GAMMA, LOSS_ALPHA,
        BBOX_REG_BETA, BBOX_REG_WEIGHT, CLASS_SPECIFIC_BBOX.
    """

    def __init__(self, strides, cell_anchors, field_sizes, num_classes, positive_overlap, negative_overlap, gamma,
                 alpha, softmax, bbox_reg_beta, bbox_reg_weight, class_specific_bbox, **kwargs):
        super().__init__(**kwargs)
        self.strides = [int(s) for s in strides]
        self.cell_anchors = [[list(map(float, anchor)) for anchor in cell] for cell in cell_anchors]
        self.field_sizes = [int(s) for s in field_sizes]
        self.num_classes = int(num_classes)
        self.positive_overlap = float(positive_overlap)
        self.negative_overlap = float(negative_overlap)
        self.gamma = float(gamma)
        self.alpha = float(alpha)
        self.softmax = bool(softmax)
        self.bbox_reg_beta = float(bbox_reg_beta)
        self.bbox_reg_weight = float(bbox_reg_weight)
        self.class_specific_bbox = bool(class_specific_bbox)

    def _levels(self):
        return [FieldLevel(*level) for level in zip(self.strides, self.cell_anchors, self.field_sizes)]

    def call(self, inputs):
        *head_outputs, images, gt_boxes, gt_classes, gt_is_crowd, gt_valid = inputs
        levels = self._levels()
        anchors = field_anchors(levels)
        blob_height, blob_width = tf.shape(images)[1], tf.shape(images)[2]
        field_extent = self.field_sizes[0] * self.strides[0]
        checks = [
            tf.debugging.assert_less_equal(
                tf.maximum(blob_height, blob_width), field_extent,
                message=f"RetinaNet training input larger than its {field_extent} px field of anchors "
                        "(FPN.COARSEST_STRIDE * ceil(TRAIN.MAX_SIZE / FPN.COARSEST_STRIDE))",
            )
        ]

        def image_targets(per_image):
            boxes, classes, crowd, valid = (t[None] for t in per_image)
            targets = retinanet_anchor_targets(
                anchors, boxes, classes, crowd, valid, self.positive_overlap, self.negative_overlap
            )
            return tuple(t[0] for t in targets)

        with tf.control_dependencies(checks):
            targets = map_fn(
                image_targets,
                (tf.stop_gradient(gt_boxes), gt_classes, gt_is_crowd, gt_valid),
                fn_output_signature=(
                    tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 4], tf.float32),
                    tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int32),
                ),
            )
        targets = RetinaNetTargets(*targets)
        fg_num, bg_num = retinanet_normalizers(targets.num_fg, targets.num_bg, self.num_classes)
        class_loss = softmax_focal_loss if self.softmax else sigmoid_focal_loss
        loss_cls, loss_bbox = 0.0, 0.0
        per_level = crop_to_feature_maps(targets, levels, blob_height, blob_width)
        for level, level_targets in enumerate(per_level):
            logits, deltas = head_outputs[2 * level], head_outputs[2 * level + 1]
            loss_cls += class_loss(logits, level_targets.labels, fg_num, self.gamma, self.alpha)
            loss_bbox += select_smooth_l1_loss(
                deltas, level_targets.bbox_targets, level_targets.labels, fg_num, self.bbox_reg_beta,
                self.class_specific_bbox, self.bbox_reg_weight,
            )
        return loss_cls, loss_bbox, fg_num, bg_num

    def compute_output_spec(self, inputs):
        return tuple(keras.KerasTensor((), "float32") for _ in range(4))

    def get_config(self):
        config = super().get_config()
        config.update(
            strides=self.strides, cell_anchors=self.cell_anchors, field_sizes=self.field_sizes,
            num_classes=self.num_classes, positive_overlap=self.positive_overlap,
            negative_overlap=self.negative_overlap, gamma=self.gamma, alpha=self.alpha, softmax=self.softmax,
            bbox_reg_beta=self.bbox_reg_beta, bbox_reg_weight=self.bbox_reg_weight,
            class_specific_bbox=self.class_specific_bbox,
        )
        return config
