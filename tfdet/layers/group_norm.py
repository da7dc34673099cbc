"""GroupNormalization: Keras' layer of that name (same variables, same arithmetic) built from fewer graph ops.

Keras' layer reads the input's dynamic shape twice through `keras.ops.shape`, reshapes the affine parameters
and casts at every call (about 30 ops per layer), and TensorFlow differentiates `tf.nn.moments` into some 60
more. A GN R-50-FPN has about 70 of them: in the tiny model's training step they were a third of the ops to
trace. Here the channel count is static (it always is in our models) and the arithmetic is
`tfdet.ops.group_norm`, whose hand-written gradient holds about 20 ops: the same statistics, the same
output, computed in float32 for float16/bfloat16 inputs as Keras does. The statistics are compensated
(`group_norm`): within float32 rounding of Keras' and of the exact ones, in TensorFlow and in the runtimes
that sum in other orders.

The class keeps Keras' name on purpose: a `.weights.h5` file keys each layer's variables by the snake-case
name of its class, so the files written with Keras' layer load into ours and the other way round.
"""

import keras
import tensorflow as tf

from tfdet.ops.group_norm import group_norm


class GroupNormalization(keras.layers.GroupNormalization):
    """GroupNormalization over the last axis (Detectron's GroupNorm on NHWC maps and on fc outputs)."""

    def call(self, inputs):
        channels = inputs.shape[-1]
        if self.axis not in (-1, len(inputs.shape) - 1) or channels is None:
            return super().call(inputs)
        compute_dtype = tf.float32 if inputs.dtype in (tf.float16, tf.bfloat16) else inputs.dtype
        x = tf.cast(inputs, compute_dtype)
        gamma = tf.cast(self.gamma, compute_dtype) if self.scale else tf.ones([channels], compute_dtype)
        beta = tf.cast(self.beta, compute_dtype) if self.center else tf.zeros([channels], compute_dtype)
        normalized = group_norm(x, gamma, beta, self.groups, self.epsilon)
        return tf.cast(normalized, self.compute_dtype)
