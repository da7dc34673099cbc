"""GroupNormalization: Keras' layer of that name (same variables, same arithmetic) built from fewer graph ops.

Keras' layer reads the input's dynamic shape twice through `keras.ops.shape` (a Shape op and one slice per
unknown dimension each time), reshapes the affine parameters and casts at every call: about 30 ops per layer.
A GN R-50-FPN has some 70 of them, and their ops made a third of the tiny model's tracing time. Here the
channel count is static (it always is in our models), the groups are split off the last axis with one
reshape, and gamma/beta are shaped (groups, channels per group) once: the same statistics
(`tf.nn.moments` over every axis but the batch and the group), the same `x * inv + (beta - mean * inv)`
with `inv = gamma / sqrt(var + eps)`, computed in float32 for float16/bfloat16 inputs as Keras does.

The class keeps Keras' name on purpose: a `.weights.h5` file keys each layer's variables by the snake-case
name of its class, so the files written with Keras' layer load into ours and the other way round.
"""

import keras
import tensorflow as tf


class GroupNormalization(keras.layers.GroupNormalization):
    """GroupNormalization over the last axis (Detectron's GroupNorm on NHWC maps and on fc outputs)."""

    def call(self, inputs):
        channels = inputs.shape[-1]
        if self.axis not in (-1, len(inputs.shape) - 1) or channels is None:
            return super().call(inputs)
        compute_dtype = tf.float32 if inputs.dtype in (tf.float16, tf.bfloat16) else inputs.dtype
        x = tf.cast(inputs, compute_dtype)
        shape = tf.shape(x)
        groups, per_group = self.groups, channels // self.groups
        grouped = tf.reshape(x, tf.concat([shape[:-1], [groups, per_group]], axis=0))
        rank = len(inputs.shape) + 1
        mean, variance = tf.nn.moments(grouped, axes=[*range(1, rank - 2), rank - 1], keepdims=True)
        inv = tf.math.rsqrt(variance + self.epsilon)
        if self.scale:
            inv = inv * tf.cast(tf.reshape(self.gamma, [groups, per_group]), compute_dtype)
        offset = -mean * inv
        if self.center:
            offset = offset + tf.cast(tf.reshape(self.beta, [groups, per_group]), compute_dtype)
        normalized = grouped * inv + offset
        return tf.cast(tf.reshape(normalized, shape), self.compute_dtype)
