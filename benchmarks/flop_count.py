"""Multiply-accumulates of one forward pass, counted from the real tensor shapes of every conv and FC.

Each Conv (CaffeConv2D), transposed conv and dense layer call is counted at the shapes it actually
sees for the given inputs (shared layers once per call, e.g. the FPN RPN head on every level).
Element-wise work, RoIAlign, NMS and mask pasting are not counted: GFLOP/s figures built on
this count are therefore conservative. FLOPs = 2 x MACs.
"""

import keras
import numpy as np

from tfdet.layers import CaffeConv2D
from tfdet.layers.flatten_dense import FlattenDense


def _layer_macs(layer, input_shape, output_shape):
    """MACs of one call of a weight layer given its input and output shapes."""
    if isinstance(layer, CaffeConv2D):
        k = layer.kernel.shape
        return np.prod(output_shape) * k[0] * k[1] * k[2]
    if isinstance(layer, keras.layers.Conv2DTranspose):
        k = layer.kernel.shape
        return np.prod(input_shape) * k[0] * k[1] * k[2]
    if isinstance(layer, (keras.layers.Dense, FlattenDense)):
        return np.prod(output_shape[:-1]) * layer.kernel.shape[0] * layer.kernel.shape[1]
    return 0


def count_macs(model, inputs):
    """Total MACs of `model(inputs)`, running a probe model that exposes every weight layer's call."""
    calls = []
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            raise ValueError("nested models are counted through their outer call; flatten them first")
        if layer.weights:
            for node in layer._inbound_nodes:
                calls.append((layer, node.input_tensors[0], node.output_tensors[0]))
    probe = keras.Model(model.inputs, [t for _, i, o in calls for t in (i, o)])
    values = probe(inputs)
    total = 0
    for index, (layer, _, _) in enumerate(calls):
        total += _layer_macs(layer, values[2 * index].shape, values[2 * index + 1].shape)
    return int(total)
