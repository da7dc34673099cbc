"""GenerateProposals: RPN outputs of one or more levels -> the best proposals of each image."""

import keras
import numpy as np
import tensorflow as tf

from tfdet.ops.anchors import shifted_anchors
from tfdet.ops.proposals import generate_proposals


class GenerateProposals(keras.layers.Layer):
    """Detectron's GenerateProposals (+ FPN collect) as a layer with fixed-size outputs.

    Called on `[probs_1, deltas_1, ..., probs_L, deltas_L, im_info]` with NHWC level outputs
    (B, H, W, A) / (B, H, W, 4A) and `im_info` (B, 3) = (input height, width, scale) as Detectron's.
    Returns boxes (B, final_top_n, 4) in input pixels, scores (B, final_top_n), num_valid (B,).
    """

    def __init__(
        self,
        cell_anchors,
        strides,
        pre_nms_top_n,
        post_nms_top_n,
        nms_threshold,
        min_size,
        final_top_n,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.cell_anchors = [np.asarray(a, np.float32) for a in cell_anchors]
        self.strides = [int(s) for s in strides]
        self.pre_nms_top_n = int(pre_nms_top_n)
        self.post_nms_top_n = int(post_nms_top_n)
        self.nms_threshold = float(nms_threshold)
        self.min_size = float(min_size)
        self.final_top_n = int(final_top_n)

    def call(self, inputs):
        *level_inputs, im_info = inputs
        levels = []
        for i, (cell, stride) in enumerate(zip(self.cell_anchors, self.strides)):
            probs = tf.cast(level_inputs[2 * i], tf.float32)
            deltas = tf.cast(level_inputs[2 * i + 1], tf.float32)
            anchors = shifted_anchors(cell, stride, tf.shape(probs)[1], tf.shape(probs)[2])
            levels.append((probs, deltas, anchors))
        return generate_proposals(
            levels,
            im_info,
            self.pre_nms_top_n,
            self.post_nms_top_n,
            self.nms_threshold,
            min_size=self.min_size,
            final_top_n=self.final_top_n,
        )

    def compute_output_spec(self, inputs):
        batch = inputs[-1].shape[0]
        return (
            keras.KerasTensor((batch, self.final_top_n, 4), "float32"),
            keras.KerasTensor((batch, self.final_top_n), "float32"),
            keras.KerasTensor((batch,), "int32"),
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            cell_anchors=[a.tolist() for a in self.cell_anchors],
            strides=self.strides,
            pre_nms_top_n=self.pre_nms_top_n,
            post_nms_top_n=self.post_nms_top_n,
            nms_threshold=self.nms_threshold,
            min_size=self.min_size,
            final_top_n=self.final_top_n,
        )
        return config
