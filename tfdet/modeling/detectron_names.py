"""Keras variables <-> Detectron blobs: names, Caffe2 shapes and array layouts.

Layer names are Detectron's blob names without their parameter suffix (docs/design.md decision 3),
so one rule per layer type maps a variable onto its blob:

| layer | variable -> blob | Caffe2 layout from ours |
|---|---|---|
| CaffeConv2D | kernel -> `<name>_w`, bias -> `<name>_b` | HWIO -> OIHW: transpose(3, 2, 0, 1) |
| Conv2DTranspose | kernel -> `<name>_w`, bias -> `<name>_b` | (kh, kw, O, I) -> (I, O, kh, kw): transpose(3, 2, 0, 1) |
| Dense | kernel -> `<name>_w`, bias -> `<name>_b` | (in, out) -> (out, in): .T |
| FlattenDense (fc6) | as Dense | columns reordered from NHWC to NCHW flatten order |
| AffineChannel (`*_bn`) | scale -> `<name>_s`, bias -> `<name>_b` | same |
| GroupNormalization (`*_gn`) | gamma -> `<name>_s`, beta -> `<name>_b` | same |

Keras cannot carry Detectron's bracketed names: the mask head's `_[mask]_fcn<i>` (and the GN
head's `_mask_fcn<i>`) are the Keras layers `mask_fcn<i>`; `detectron_prefix` restores them.
"""

import re

import numpy as np

_MASK_FCN = re.compile(r"^mask_fcn(\d+.*)$")
GN_MASK_HEADS = ("mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs_gn", "mask_rcnn_heads.mask_rcnn_fcn_head_v1upXconvs_gn")


def detectron_prefix(layer_name, mask_head=""):
    """The Detectron blob prefix of a Keras layer name (`mask_fcn1` -> `_[mask]_fcn1` or `_mask_fcn1`)."""
    match = _MASK_FCN.match(layer_name)
    if not match:
        return layer_name
    return ("_mask_fcn" if mask_head in GN_MASK_HEADS else "_[mask]_fcn") + match.group(1)


def _flatten_dense_to_caffe2(kernel, input_hwc):
    height, width, channels = input_hwc
    units = kernel.shape[1]
    return kernel.reshape(height, width, channels, units).transpose(3, 2, 0, 1).reshape(units, -1)


def _flatten_dense_to_keras(blob, input_hwc):
    height, width, channels = input_hwc
    units = blob.shape[0]
    return blob.reshape(units, channels, height, width).transpose(2, 3, 1, 0).reshape(-1, units)


def _layout_rules(layer):
    """(suffix by variable name, to_caffe2, to_keras) for a layer; None for layers without blobs."""
    kind = type(layer).__name__
    kernel_ops = {
        "CaffeConv2D": (lambda a: a.transpose(3, 2, 0, 1), lambda b: b.transpose(2, 3, 1, 0)),
        "Conv2DTranspose": (lambda a: a.transpose(3, 2, 0, 1), lambda b: b.transpose(2, 3, 1, 0)),
        "Dense": (lambda a: a.T, lambda b: b.T),
        "FlattenDense": (
            lambda a: _flatten_dense_to_caffe2(a, layer.input_hwc),
            lambda b: _flatten_dense_to_keras(b, layer.input_hwc),
        ),
    }
    same = (lambda a: a, lambda b: b)
    if kind in kernel_ops:
        return {"kernel": ("_w", *kernel_ops[kind]), "bias": ("_b", *same)}
    if kind == "AffineChannel":
        return {"scale": ("_s", *same), "bias": ("_b", *same)}
    if kind == "GroupNormalization":
        return {"gamma": ("_s", *same), "beta": ("_b", *same)}
    return None


def model_blobs(model, mask_head=""):
    """[(blob name, variable, to_caffe2, to_keras)] for every Detectron-named variable of `model`.

    Raises ValueError on a variable of a layer type with no rule, so nothing is silently skipped.
    """
    entries = []
    for layer in _leaf_layers(model):
        if not layer.weights:
            continue
        rules = _layout_rules(layer)
        if rules is None:
            raise ValueError(f"No Detectron naming rule for layer {layer.name!r} of type {type(layer).__name__}")
        prefix = detectron_prefix(layer.name, mask_head)
        for variable in layer.weights:
            suffix, to_caffe2, to_keras = rules[variable.name]
            entries.append((prefix + suffix, variable, to_caffe2, to_keras))
    return entries


def detectron_inventory(model, mask_head=""):
    """{Detectron blob name: Caffe2 shape} of a built model's variables."""
    inventory = {}
    for name, variable, to_caffe2, _ in model_blobs(model, mask_head):
        inventory[name] = tuple(to_caffe2(np.broadcast_to(np.float32(0), variable.shape)).shape)
    return inventory


def _leaf_layers(model):
    """Every weight-carrying layer, looking inside nested models; each layer once."""
    seen, stack, leaves = set(), list(model.layers), []
    while stack:
        layer = stack.pop(0)
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        if hasattr(layer, "layers") and layer.layers:
            stack[0:0] = list(layer.layers)
        else:
            leaves.append(layer)
    return leaves
