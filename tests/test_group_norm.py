"""GroupNormalization (tfdet.layers) and its hand-written gradient (tfdet.ops.group_norm): outputs and the
gradients of input, gamma and beta equal Keras' GroupNormalization differentiated by TensorFlow, and a
NumPy restatement of the gradient formula; float16 inputs compute in float32."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdet.layers import GroupNormalization
from tfdet.ops.group_norm import group_moments, group_norm


def numpy_group_norm_gradients(x, gamma, dy, groups, eps):
    """(y without beta, dx, dgamma, dbeta) of Caffe2's GroupNorm over the last axis, written out in NumPy."""
    n, channels = x.shape[0], x.shape[-1]
    grouped = x.reshape(n, -1, groups, channels // groups).astype(np.float64)
    d = dy.reshape(grouped.shape).astype(np.float64) * gamma.reshape(groups, -1)
    mean = grouped.mean(axis=(1, 3), keepdims=True)
    inv_std = 1.0 / np.sqrt(grouped.var(axis=(1, 3), keepdims=True) + eps)
    x_hat = (grouped - mean) * inv_std
    dx = inv_std * (d - d.mean(axis=(1, 3), keepdims=True) - x_hat * (d * x_hat).mean(axis=(1, 3), keepdims=True))
    dgamma = (dy.reshape(grouped.shape) * x_hat).sum(axis=(0, 1)).reshape(-1)
    dbeta = dy.reshape(n, -1, channels).sum(axis=(0, 1))
    y = (x_hat * gamma.reshape(groups, -1)).reshape(x.shape)
    return y, dx.reshape(x.shape), dgamma, dbeta


@pytest.mark.parametrize("shape, groups", [((2, 5, 7, 16), 4), ((3, 12), 3), ((1, 4, 4, 8), 8), ((2, 3, 6), 1)])
def test_outputs_and_gradients_equal_keras_layer_and_numpy(shape, groups, rng):
    x = rng.normal(2.0, 3.0, size=shape).astype(np.float32)
    gamma = rng.normal(1.0, 0.5, size=shape[-1]).astype(np.float32)
    beta = rng.normal(size=shape[-1]).astype(np.float32)
    dy = rng.normal(size=shape).astype(np.float32)
    results = []
    for layer_class in (GroupNormalization, keras.layers.GroupNormalization):
        layer = layer_class(groups=groups, epsilon=1e-5)
        layer.build(shape)
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
        inputs = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            y = layer(inputs)
            loss = tf.reduce_sum(y * dy)
        gradients = tape.gradient(loss, [inputs, layer.gamma, layer.beta])
        results.append([y.numpy(), *(g.numpy() for g in gradients)])
    ours, keras_reference = results
    for got, want, name in zip(ours, keras_reference, ("y", "dx", "dgamma", "dbeta")):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5, err_msg=name)
    y, dx, dgamma, dbeta = numpy_group_norm_gradients(x, gamma, dy, groups, 1e-5)
    np.testing.assert_allclose(ours[0], y + beta, rtol=1e-5, atol=2e-5)
    for got, want in zip(ours[1:], (dx, dgamma, dbeta)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


def test_float16_inputs_compute_in_float32_and_return_the_layer_dtype(rng):
    layer = GroupNormalization(groups=2, epsilon=1e-5, dtype="mixed_float16")
    x = rng.normal(size=(2, 3, 3, 4)).astype(np.float16)
    inputs = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        y = layer(inputs)
        loss = tf.reduce_sum(tf.cast(y, tf.float32))
    dx = tape.gradient(loss, inputs)
    assert y.dtype == tf.float16 and dx.dtype == tf.float16
    want = group_norm(tf.constant(x, tf.float32), tf.ones([4]), tf.zeros([4]), 2, 1e-5)
    np.testing.assert_allclose(y.numpy().astype(np.float32), want.numpy(), atol=5e-3)


def test_channels_not_divisible_by_groups_is_a_clear_error():
    with pytest.raises(ValueError, match="divisible by 4 groups"):
        group_norm(tf.zeros([1, 6]), tf.ones([6]), tf.zeros([6]), 4, 1e-5)


@pytest.mark.parametrize("offset", [0.0, 1.0, 300.0, 1e4])
@pytest.mark.parametrize("spread", [1e-3, 0.5, 100.0])
@pytest.mark.parametrize("shape", [(2, 40, 40, 16, 8), (2, 7, 5, 16, 1), (3, 16, 4)])
def test_moments_are_the_exact_ones_rounded(offset, spread, shape, rng):
    """The compensated mean is float64's rounded to float32, or within a small fraction of the spread's float32
    epsilon of it; the variance within a few epsilons. Plain float32 sums miss the mean by many ulps of the
    offset, which normalisation divides by the spread."""
    signs = rng.choice([-1.0, 1.0], size=shape[-2:-1] + (1,))
    x = (rng.normal(offset, spread, size=shape) * signs).astype(np.float32)
    mean, variance = (t.numpy() for t in group_moments(tf.constant(x)))
    axes = tuple(i for i in range(1, x.ndim) if i != x.ndim - 2)
    exact = x.astype(np.float64)
    want_mean = exact.mean(axis=axes, keepdims=True)
    want_variance = exact.var(axis=axes, keepdims=True)
    eps = np.finfo(np.float32).eps
    excess = np.abs(mean - want_mean) - np.abs(want_mean.astype(np.float32) - want_mean)
    assert (excess <= 0.5 * eps * np.sqrt(want_variance)).all()
    np.testing.assert_allclose(variance, want_variance, rtol=4 * eps, atol=0)


def test_flat_maps_normalise_exactly(rng):
    """A flat map far from 0 (a flat image's, with its borders): the output is the formula on the exact
    statistics, in training and outside it, and equals the normalisation with float64 statistics; Keras'
    float32 moments are off by far more."""
    x = np.full((1, 40, 40, 16), 300.0, np.float32) + rng.normal(0.0, 0.5, size=(1, 1, 1, 16)).astype(np.float32)
    x[:, [0, -1]] += rng.normal(0.0, 0.5, size=(1, 2, 40, 16)).astype(np.float32)
    gamma = rng.normal(1.0, 0.5, size=16).astype(np.float32)
    beta = rng.normal(size=16).astype(np.float32)
    layers = [GroupNormalization(groups=4, epsilon=1e-5), keras.layers.GroupNormalization(groups=4, epsilon=1e-5)]
    for layer in layers:
        layer.build(x.shape)
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
    inference, training = layers[0](x).numpy(), layers[0](x, training=True).numpy()
    np.testing.assert_array_equal(inference, training)
    grouped = x.reshape(1, -1, 4, 4)
    exact = grouped.astype(np.float64)
    mean = exact.mean(axis=(1, 3), keepdims=True)
    inv_std = (1.0 / np.sqrt(((exact - mean) ** 2).mean(axis=(1, 3), keepdims=True) + 1e-5)).astype(np.float32)
    scale = inv_std * gamma.reshape(4, 4)
    want = (grouped * scale + (beta.reshape(4, 4) - mean.astype(np.float32) * scale)).reshape(x.shape)
    tolerance = np.spacing(np.float32(np.abs(x).max() * np.abs(scale).max()))
    np.testing.assert_allclose(inference, want, rtol=0, atol=tolerance)
    assert np.abs(layers[1](x).numpy() - want).max() > 4 * tolerance
