"""RetinaNet's inference outputs as Keras layers: class probabilities and the detections of
core/test_retinanet.py (`tfdet.ops.retinanet_detections`)."""

import keras
import numpy as np
import tensorflow as tf

from tfdet.layers.detection_output import detections_spec
from tfdet.ops.nms import SoftNMS
from tfdet.ops.retinanet_detections import retinanet_detections


class RetinaNetClassProbs(keras.layers.Layer):
    """Class logits (B, H, W, A*C) -> probabilities, Detectron's `retnet_cls_prob_fpn<l>` blob.

    Sigmoid per channel; with `num_softmax_classes` C (RETINANET.SOFTMAX) a softmax over each anchor's
    C channels (Caffe2's GroupSpatialSoftmax), background channel included.
    """

    def __init__(self, num_softmax_classes=None, **kwargs):
        super().__init__(**kwargs)
        self.num_softmax_classes = None if num_softmax_classes is None else int(num_softmax_classes)

    def call(self, logits):
        logits = tf.cast(logits, tf.float32)
        if self.num_softmax_classes is None:
            return tf.sigmoid(logits)
        shape = tf.shape(logits)
        groups = tf.reshape(logits, tf.concat([shape[:3], [-1, self.num_softmax_classes]], axis=0))
        return tf.reshape(tf.nn.softmax(groups, axis=-1), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(num_softmax_classes=self.num_softmax_classes)
        return config


class RetinaNetDetections(keras.layers.Layer):
    """Per-level class probabilities and box deltas -> detections, as Detectron's im_detect_bbox.

    Called on `[probs_l for each level] + [deltas_l for each level] + [image_info]`, finest level
    first (probabilities as RetinaNetClassProbs gives them: with `softmax` the background channel of
    each anchor is dropped here, as test_retinanet drops it); returns boxes (B, D, 4) in original
    pixels, scores (B, D), classes (B, D) in 1..num_classes-1, num_detections (B,).
    `soft_nms`: (method, sigma) or None.
    """

    def __init__(self, cell_anchors, strides, num_classes, inference_threshold, pre_nms_top_n, nms_threshold,
                 detections_per_image, softmax=False, apply_regression=True, soft_nms=None, **kwargs):  # fmt: skip
        super().__init__(**kwargs)
        self.cell_anchors = [np.asarray(anchors, dtype=np.float64) for anchors in cell_anchors]
        self.strides = [int(stride) for stride in strides]
        self.num_classes = int(num_classes)
        self.inference_threshold = float(inference_threshold)
        self.pre_nms_top_n = int(pre_nms_top_n)
        self.nms_threshold = float(nms_threshold)
        self.detections_per_image = int(detections_per_image)
        self.softmax = bool(softmax)
        self.apply_regression = bool(apply_regression)
        self.soft_nms = None if soft_nms is None else (str(soft_nms[0]), float(soft_nms[1]))

    def call(self, inputs):
        num_levels = len(self.strides)
        probs, deltas, image_info = inputs[:num_levels], inputs[num_levels : 2 * num_levels], inputs[-1]
        if self.softmax:
            probs = [self._foreground(level_probs) for level_probs in probs]
        return retinanet_detections(
            probs, deltas, self.cell_anchors, self.strides, image_info, self.inference_threshold, self.pre_nms_top_n,
            self.nms_threshold, self.detections_per_image, self.num_classes, self.apply_regression,
            None if self.soft_nms is None else SoftNMS(*self.soft_nms),
        )  # fmt: skip

    def _foreground(self, probs):
        """(B, H, W, A*C) softmax probabilities -> (B, H, W, A*(C-1)) without each anchor's background."""
        shape = tf.shape(probs)
        groups = tf.reshape(probs, tf.concat([shape[:3], [-1, self.num_classes]], axis=0))
        return tf.reshape(groups[..., 1:], tf.concat([shape[:3], [-1]], axis=0))

    def compute_output_spec(self, inputs):
        return detections_spec(inputs[-1].shape[0], self.detections_per_image)

    def get_config(self):
        config = super().get_config()
        config.update(
            cell_anchors=[anchors.tolist() for anchors in self.cell_anchors],
            strides=self.strides,
            num_classes=self.num_classes,
            inference_threshold=self.inference_threshold,
            pre_nms_top_n=self.pre_nms_top_n,
            nms_threshold=self.nms_threshold,
            detections_per_image=self.detections_per_image,
            softmax=self.softmax,
            apply_regression=self.apply_regression,
            soft_nms=self.soft_nms,
        )
        return config
