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


def group_norm(x, gamma, beta, groups, epsilon):
    """Group-normalise `x` (N, ..., C) over `groups` groups of its last axis; gamma, beta (C,); same dtype as x.

    C (the static last dimension) must be a multiple of `groups`. The statistics are `group_moments`'.
    """
    channels = x.shape[-1]
    if channels is None or channels % groups:
        raise ValueError(f"group_norm needs a static channel count divisible by {groups} groups, got {x.shape}")
    per_group = channels // groups
    sum_axes = list(range(x.shape.rank - 1))  # batch and spatial axes of the grouped layout: what gamma and beta see

    @custom_gradient
    def normalize(x, gamma, beta):
        # Each constant is made once and reused (every Python literal handed to an op becomes a Const op).
        group_dims, sums = tf.constant([groups, per_group]), tf.constant(sum_axes)
        shape = tf.shape(x)
        grouped_shape = tf.concat([shape[:-1], group_dims], axis=0)
        grouped = tf.reshape(x, grouped_shape)
        mean, variance = group_moments(grouped)
        inv_std = tf.math.rsqrt(variance + epsilon)
        grouped_gamma = tf.reshape(gamma, group_dims)
        scale = inv_std * grouped_gamma
        y = grouped * scale + (tf.reshape(beta, group_dims) - mean * scale)

        def gradient(dy):
            dy = tf.reshape(dy, grouped_shape)
            x_hat = (grouped - mean) * inv_std
            d_hat = dy * grouped_gamma
            lengths = _axis_lengths(grouped)
            dx = inv_std * (d_hat - _group_mean(d_hat, lengths) - x_hat * _group_mean(d_hat * x_hat, lengths))
            dgamma = tf.reshape(tf.reduce_sum(dy * x_hat, sums), [channels])
            dbeta = tf.reshape(tf.reduce_sum(dy, sums), [channels])
            return tf.reshape(dx, shape), dgamma, dbeta

        return tf.reshape(y, shape), gradient

    return normalize(x, gamma, beta)


def group_moments(grouped):
    """Mean and variance of `grouped` (N, ..., groups, per_group) over each sample's group (kept dims), in its
    dtype, compensated: the deviations from a first mean are exact for the values near it, so their mean
    corrects the first mean to within a small fraction of its rounding, and the variance is their mean square
    less the square of that correction (the variance about the corrected mean).

    A plain float32 mean over a group's thousands of values is off by a few ulps of the values' offset, in an
    order that each runtime's reduction kernel decides, and normalisation divides that error by the group's
    spread (on flat images, boxes of another runtime moved by tenths of a pixel). The compensated mean is the
    exact one rounded, to a small fraction of an ulp of the spread, in any summation order and with float32
    arithmetic only (OpenVINO and LiteRT have no float64).
    """
    lengths = _axis_lengths(grouped)
    first = _group_mean(grouped, lengths)
    deviations = grouped - first
    correction = _group_mean(deviations, lengths)
    return first + correction, _group_mean(tf.square(deviations), lengths) - tf.square(correction)


def _axis_lengths(grouped):
    """The length of each axis of `grouped`, in its dtype."""
    return tf.unstack(tf.cast(tf.shape(grouped), grouped.dtype), num=grouped.shape.rank)


def _group_mean(values, lengths):
    """Mean of (N, ..., groups, per_group) `values` over each sample's group (kept dims), given the `lengths`
    of its axes: a sum over the group's channels, then over one spatial axis at a time, the last first, each
    divided by its length. Sums over one axis each are more exact in float32 than one over all (TensorFlow's
    over axes that are not adjacent also runs several times slower); the divisions between them keep OpenVINO
    from merging them back into one."""
    for axis in [-1, *range(values.shape.rank - 3, 0, -1)]:
        values = tf.reduce_sum(values, axis, keepdims=True) / lengths[axis]
    return values
