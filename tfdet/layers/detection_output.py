"""Detection post-processing layers: Detectron's im_detect_bbox + box_results_with_nms_and_limit,
and the per-detection selection of mask and keypoint outputs."""

import keras
import tensorflow as tf

from tfdet.ops.boxes import clip_boxes, decode_boxes
from tfdet.ops.keypoints import heatmaps_to_keypoints
from tfdet.ops.map_fn import map_fn
from tfdet.ops.nms import BoxVoting, SoftNMS, per_class_nms


def detections_spec(batch, size):
    """The KerasTensors of padded detections: boxes (B, D, 4), scores (B, D), classes (B, D), counts (B,)."""
    return (
        keras.KerasTensor((batch, size, 4), "float32"),
        keras.KerasTensor((batch, size), "float32"),
        keras.KerasTensor((batch, size), "int32"),
        keras.KerasTensor((batch,), "int32"),
    )


class ScaleBoxes(keras.layers.Layer):
    """Boxes (B, N, 4) in original pixels -> input pixels: times each image's scale (image_info[:, 2]).

    Detectron's `_get_rois_blob(boxes, im_scale)`, for mask/keypoint RoIs and given proposals.
    """

    def call(self, boxes, image_info):
        return boxes * tf.cast(image_info, boxes.dtype)[:, 2, None, None]

    def compute_output_shape(self, boxes_shape, image_info_shape):
        return boxes_shape


class FlattenRoIs(keras.layers.Layer):
    """Per-image boxes (B, N, 4) -> RoIs (B*N, 4) and their image indices (B*N,)."""

    def call(self, boxes):
        batch, num = tf.shape(boxes)[0], tf.shape(boxes)[1]
        indices = tf.repeat(tf.range(batch, dtype=tf.int32), num)
        return tf.reshape(boxes, [-1, 4]), indices

    def compute_output_spec(self, boxes):
        return keras.KerasTensor((None, 4), "float32"), keras.KerasTensor((None,), "int32")


class ClassBoxes(keras.layers.Layer):
    """Box head outputs -> every proposal's class scores and class boxes, in original-image pixels.

    Detectron's im_detect_bbox: proposals are divided by the image scale *before* decoding (the +1
    widths make that differ from decoding first), class-agnostic models use the last 4 deltas, boxes
    are clipped to the original image. Called on `[rois (B, N, 4) input pixels, num_rois (B,), cls_prob
    (B*N, C), bbox_pred (B*N, 4K), image_info (B, 3) = (original height, width, scale)]`; returns
    scores (B, N, C) (zero past num_rois) and boxes (B, N, K, 4), K = C or 1 (class-agnostic).
    """

    def __init__(self, bbox_reg_weights, apply_regression, class_agnostic=False, **kwargs):
        super().__init__(**kwargs)
        self.bbox_reg_weights = tuple(float(w) for w in bbox_reg_weights)
        self.apply_regression = bool(apply_regression)
        self.class_agnostic = bool(class_agnostic)

    def call(self, inputs):
        rois, num_rois, cls_prob, bbox_pred, image_info = inputs
        batch, num = tf.shape(rois)[0], tf.shape(rois)[1]
        num_classes = tf.shape(cls_prob)[-1]
        cls_prob = tf.reshape(tf.cast(cls_prob, tf.float32), [batch, num, num_classes])
        real = tf.range(num)[None, :] < num_rois[:, None]
        cls_prob = tf.where(real[..., None], cls_prob, 0.0)
        image_info = tf.cast(image_info, tf.float32)
        boxes = tf.cast(rois, tf.float32) / image_info[:, 2, None, None]
        if not self.apply_regression:
            return cls_prob, boxes[:, :, None, :]
        deltas = tf.reshape(tf.cast(bbox_pred, tf.float32), [batch, num, -1, 4])
        if self.class_agnostic:  # (bg, fg) regressors: keep the foreground one (Detectron's [:, -4:])
            deltas = deltas[:, :, -1:, :]
        boxes = decode_boxes(boxes[:, :, None, :], deltas, self.bbox_reg_weights)
        return cls_prob, clip_boxes(boxes, image_info[:, 0], image_info[:, 1])

    def compute_output_spec(self, inputs):
        batch = inputs[0].shape[0]
        return keras.KerasTensor((batch, None, None), "float32"), keras.KerasTensor((batch, None, None, 4), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            bbox_reg_weights=self.bbox_reg_weights,
            apply_regression=self.apply_regression,
            class_agnostic=self.class_agnostic,
        )
        return config


class DetectionOutput(ClassBoxes):
    """Box head outputs -> final detections of each image, in original-image pixels.

    ClassBoxes, then Detectron's box_results_with_nms_and_limit per image: per-class NMS (or soft-NMS
    when `soft_nms` = (method, sigma)), box voting when `voting` = (VOTE_TH, scoring method), and the
    DETECTIONS_PER_IM limit (`tfdet.ops.nms.per_class_nms`). Called as ClassBoxes; returns boxes
    (B, D, 4), scores (B, D), classes (B, D), num_detections (B,).
    """

    def __init__(self, bbox_reg_weights, apply_regression, score_threshold, nms_threshold, detections_per_image,
                 class_agnostic=False, soft_nms=None, voting=None, **kwargs):  # fmt: skip
        super().__init__(bbox_reg_weights, apply_regression, class_agnostic, **kwargs)
        self.score_threshold = float(score_threshold)
        self.nms_threshold = float(nms_threshold)
        self.detections_per_image = int(detections_per_image)
        self.soft_nms = None if soft_nms is None else (str(soft_nms[0]), float(soft_nms[1]))
        self.voting = None if voting is None else (float(voting[0]), str(voting[1]))

    def call(self, inputs):
        scores, boxes = super().call(inputs)
        return map_fn(
            lambda args: self.select(*args),
            (scores, boxes),
            fn_output_signature=(
                tf.TensorSpec([self.detections_per_image, 4], tf.float32),
                tf.TensorSpec([self.detections_per_image], tf.float32),
                tf.TensorSpec([self.detections_per_image], tf.int32),
                tf.TensorSpec([], tf.int32),
            ),
        )

    def select(self, scores, boxes):
        """One image's detections from its class scores (N, C) and class boxes (N, K, 4)."""
        return per_class_nms(
            boxes,
            scores,
            self.score_threshold,
            self.nms_threshold,
            self.detections_per_image,
            soft_nms=None if self.soft_nms is None else SoftNMS(*self.soft_nms),
            voting=None if self.voting is None else BoxVoting(*self.voting),
        )

    def compute_output_spec(self, inputs):
        return detections_spec(inputs[0].shape[0], self.detections_per_image)

    def get_config(self):
        config = super().get_config()
        config.update(
            score_threshold=self.score_threshold,
            nms_threshold=self.nms_threshold,
            detections_per_image=self.detections_per_image,
            soft_nms=self.soft_nms,
            voting=self.voting,
        )
        return config


class AtLeastOneRoI(keras.layers.Layer):
    """RoIs (R, 4) and their image indices (R,), with one dummy RoI appended when R is 0.

    TF 2.21's oneDNN Conv2D returns the input's channel count on an empty batch (a 256 -> 512 conv of
    a (0, 14, 14, 256) batch gives (0, 14, 14, 256)), which breaks heads that change width (Keypoint
    R-CNN's 512-channel convs) on images without detections; the heads' outputs are cut back to R
    rows by `FirstRows`.
    """

    def call(self, rois, indices):
        missing = tf.maximum(1 - tf.shape(rois)[0], 0)
        return tf.pad(rois, [[0, missing], [0, 0]], constant_values=1.0), tf.pad(indices, [[0, missing]])

    def compute_output_spec(self, rois, indices):
        return keras.KerasTensor((None, 4), "float32"), keras.KerasTensor((None,), "int32")


class FirstRows(keras.layers.Layer):
    """values (R', ...) cut to the first R rows of `reference` (R,): undoes AtLeastOneRoI's padding."""

    def call(self, values, reference):
        return values[: tf.shape(reference)[0]]

    def compute_output_spec(self, values, reference):
        return keras.KerasTensor((None, *values.shape[1:]), values.dtype)


class RealDetectionRoIs(keras.layers.Layer):
    """The real (unpadded) detections as RoIs for the mask and keypoint heads.

    Called on `[boxes (B, D, 4) original pixels, num_detections (B,), image_info (B, 3)]`; returns
    rois (R, 4) in input pixels (Detectron's boxes * im_scale), their image indices (R,), their
    flat positions (R,) in B*D, and the original-pixel boxes (R, 4). Heads then run on R <= B*D
    RoIs, as Detectron runs them on the kept detections only.
    """

    def call(self, inputs):
        boxes, num_detections, image_info = inputs
        num = tf.shape(boxes)[1]
        real = tf.range(num)[None, :] < num_detections[:, None]
        positions = tf.cast(tf.where(tf.reshape(real, [-1]))[:, 0], tf.int32)
        image_indices = positions // num
        original = tf.gather(tf.reshape(boxes, [-1, 4]), positions)
        scale = tf.gather(tf.cast(image_info[:, 2], original.dtype), image_indices)
        return original * scale[:, None], image_indices, positions, original

    def compute_output_spec(self, inputs):
        return (
            keras.KerasTensor((None, 4), "float32"),
            keras.KerasTensor((None,), "int32"),
            keras.KerasTensor((None,), "int32"),
            keras.KerasTensor((None, 4), "float32"),
        )


class ScatterToDetections(keras.layers.Layer):
    """Per-RoI values (R, ...) back into the padded detection layout (B, D, ...), zeros elsewhere."""

    def call(self, inputs):
        values, positions, classes = inputs
        batch, num = tf.shape(classes)[0], tf.shape(classes)[1]
        flat_shape = tf.concat([[batch * num], tf.shape(values)[1:]], 0)
        scattered = tf.scatter_nd(positions[:, None], tf.cast(values, tf.float32), flat_shape)
        return tf.reshape(scattered, tf.concat([[batch, num], tf.shape(values)[1:]], 0))

    def compute_output_spec(self, inputs):
        values, _, classes = inputs
        return keras.KerasTensor((classes.shape[0], classes.shape[1], *values.shape[1:]), "float32")


class SelectClassMasks(keras.layers.Layer):
    """Mask probabilities (R, M, M, C) -> each RoI's own class channel (R, M, M).

    Called on `[probs, classes (B, D), positions (R,)]`; class-agnostic heads have C = 1.
    """

    def call(self, inputs):
        probs, classes, positions = inputs
        if probs.shape[-1] == 1:
            return probs[..., 0]
        roi_classes = tf.gather(tf.reshape(classes, [-1]), positions)
        # the class axis gathered in place (a transpose first trips OpenVINO's transpose sinking)
        return tf.gather(probs, roi_classes, axis=3, batch_dims=1)

    def compute_output_spec(self, inputs):
        probs = inputs[0]
        return keras.KerasTensor(probs.shape[:3], "float32")


class HeatmapsToKeypoints(keras.layers.Layer):
    """Keypoint heatmaps (R, S, S, K) and original-pixel boxes (R, 4) -> (R, K, 4) x, y, logit, prob."""

    def __init__(self, min_size=0, **kwargs):
        super().__init__(**kwargs)
        self.min_size = int(min_size)

    def call(self, inputs):
        heatmaps, boxes = inputs
        return heatmaps_to_keypoints(tf.cast(heatmaps, tf.float32), boxes, self.min_size)

    def compute_output_spec(self, inputs):
        heatmaps, boxes = inputs
        return keras.KerasTensor((boxes.shape[0], heatmaps.shape[-1], 4), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(min_size=self.min_size)
        return config
