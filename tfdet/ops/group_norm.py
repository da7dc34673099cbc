"""Group normalisation over the last axis with a hand-written gradient: Caffe2's GroupNorm arithmetic in
a quarter of the graph ops that automatic differentiation of it creates.

Per sample and group, the statistics run over every axis but the batch and the channels outside the group
(Detectron's GroupNorm on NHWC maps; on (N, C) fc outputs, over the group's channels); eps is added to the
variance inside the square root; y = (x - mean) / sqrt(var + eps) * gamma + beta.
The gradient is the standard one of that formula (x_hat the normalised input, d_hat = dy * gamma, means
over the statistics' axes):
    dx = (d_hat - mean(d_hat) - x_hat * mean(d_hat * x_hat)) / sqrt(var + eps),
    dgamma = sum(dy * x_hat), dbeta = sum(dy) over the batch and spatial axes.
Differentiating `tf.nn.moments` instead creates some 60 ops per layer (Tile, RealDiv, RsqrtGrad, the
broadcasting Sums and Reshapes); a GroupNorm R-50-FPN has about 70 layers, so in its training step they
were a third of the ops to trace. Here the backward pass holds about 20 per layer.
"""

import tensorflow as tf

from tfdet.ops.custom_gradient import custom_gradient


def group_norm(x, gamma, beta, groups, epsilon, statistics_dtype=None):
    """Group-normalise `x` (N, ..., C) over `groups` groups of its last axis; gamma, beta (C,); same dtype as x.

    C (the static last dimension) must be a multiple of `groups`. `statistics_dtype` tf.float64: the mean,
    variance and 1/std are accumulated in float64 and rounded to x's dtype, the rest as before. A float32
    mean over a group's thousands of values is off by a few ulps in an order that each runtime's reduction
    kernel decides, and normalisation divides that error by the group's spread: ONNX Runtime's GroupNorm R-CNN
    moved boxes by 0.1-0.3 px against TensorFlow's on flat images. In float64 the rounded statistics are
    the exact ones in every runtime (the inference path; training keeps float32).
    """
    channels = x.shape[-1]
    if channels is None or channels % groups:
        raise ValueError(f"group_norm needs a static channel count divisible by {groups} groups, got {x.shape}")
    per_group = channels // groups
    rank = x.shape.rank
    statistics_axes = [*range(1, rank - 1), rank]  # in the (N, ..., groups, per_group) layout
    sum_axes = list(range(rank - 1))  # batch and spatial axes of that layout: what gamma and beta see

    @custom_gradient
    def normalize(x, gamma, beta):
        # Each constant is made once and reused (every Python literal handed to an op becomes a Const op).
        group_dims = tf.constant([groups, per_group])
        statistics, sums = tf.constant(statistics_axes), tf.constant(sum_axes)
        shape = tf.shape(x)
        grouped_shape = tf.concat([shape[:-1], group_dims], axis=0)
        grouped = tf.reshape(x, grouped_shape)
        # tf.nn.moments' arithmetic (mean, then the mean squared difference from it) without its StopGradient.
        accumulated = grouped if statistics_dtype is None else tf.cast(grouped, statistics_dtype)
        mean = tf.reduce_mean(accumulated, statistics, keepdims=True)
        variance = tf.reduce_mean(tf.math.squared_difference(accumulated, mean), statistics, keepdims=True)
        inv_std = tf.math.rsqrt(variance + epsilon)
        if statistics_dtype is not None:
            mean, inv_std = tf.cast(mean, x.dtype), tf.cast(inv_std, x.dtype)
        grouped_gamma = tf.reshape(gamma, group_dims)
        scale = inv_std * grouped_gamma
        y = grouped * scale + (tf.reshape(beta, group_dims) - mean * scale)

        def gradient(dy):
            dy = tf.reshape(dy, grouped_shape)
            x_hat = (grouped - mean) * inv_std
            d_hat = dy * grouped_gamma
            dx = inv_std * (
                d_hat
                - tf.reduce_mean(d_hat, statistics, keepdims=True)
                - x_hat * tf.reduce_mean(d_hat * x_hat, statistics, keepdims=True)
            )
            dgamma = tf.reshape(tf.reduce_sum(dy * x_hat, sums), [channels])
            dbeta = tf.reshape(tf.reduce_sum(dy, sums), [channels])
            return tf.reshape(dx, shape), dgamma, dbeta

        return tf.reshape(y, shape), gradient

    return normalize(x, gamma, beta)
