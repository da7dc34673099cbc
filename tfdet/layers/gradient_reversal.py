"""Gradient scaling layers: identity forward, the incoming gradient times a constant backward.

`GradientReversal(weight)` multiplies the gradient by -weight: what sits before it learns to
*increase* the loss of what sits after it (the adversarial domain classifiers of DA Faster R-CNN,
Ganin & Lempitsky's GRL). `GradientScale(scale)` is the general form; the DA fork's consistency
branch uses it with +weight (`maskrcnn_benchmark/layers/gradient_scalar_layer.py`).
"""

import keras
import tensorflow as tf

from tfdet.ops.custom_gradient import custom_gradient


def _scale_gradient(x, scale):
    @custom_gradient
    def identity(value):
        def grad(upstream):
            return upstream * tf.cast(scale, upstream.dtype)

        return tf.identity(value), grad

    return identity(x)


class GradientScale(keras.layers.Layer):
    """y = x; dL/dx = scale * dL/dy."""

    def __init__(self, scale, **kwargs):
        super().__init__(**kwargs)
        self.scale = float(scale)

    def call(self, inputs):
        return _scale_gradient(inputs, self.scale)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(scale=self.scale)
        return config


class GradientReversal(GradientScale):
    """y = x; dL/dx = -weight * dL/dy (weight > 0 reverses the gradient)."""

    def __init__(self, weight, **kwargs):
        super().__init__(-float(weight), **kwargs)
        self.weight = float(weight)

    def get_config(self):
        config = super().get_config()
        del config["scale"]
        config.update(weight=self.weight)
        return config
