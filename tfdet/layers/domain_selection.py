"""Keeping the detection losses on the source images of a domain-adaptation batch.

A DA batch mixes source images (with ground truth) and target images (without); `is_source` (B,)
bool says which is which, in any order. As the DA fork: the RPN is trained on the source images'
anchors only (`rpn/loss.py` skips target images), and the box head's losses count the source
images' sampled RoIs only (`box_head/loss.py` indexes them by `domain_masks`).
"""

import keras
import tensorflow as tf


class SelectSourceImages(keras.layers.Layer):
    """Called on `[is_source (B,), t_1, ..., t_n]` (each t_i images first): the source rows of each t_i."""

    def call(self, inputs):
        is_source, *tensors = inputs
        rows = tf.reshape(tf.where(is_source), [-1])
        return [tf.gather(t, rows) for t in tensors]

    def compute_output_spec(self, inputs):
        return [keras.KerasTensor((None, *t.shape[1:]), t.dtype) for t in inputs[1:]]


class SourceRoILabels(keras.layers.Layer):
    """Called on `[labels (B, R) of the sampled RoIs, is_source (B,)]`: the target images' labels set
    to -1, the padding label that the Fast R-CNN losses count nowhere (nor in their normalisers)."""

    def call(self, inputs):
        labels, is_source = inputs
        return tf.where(is_source[:, None], labels, tf.constant(-1, labels.dtype))

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(inputs[0].shape, inputs[0].dtype)
