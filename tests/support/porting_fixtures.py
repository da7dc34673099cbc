"""Helpers of the porting tests, whose weight files reach 1 GB and whose checks cover ~10^8 values.

`scratch_path` / `module_scratch_path` are folders on tmpfs when the machine has one with room to
spare (a weight file written and read back there costs no disk I/O), else under pytest's temporary
directory; both are removed after use. `held` reads a Keras variable without copying it and
`assert_same` is `np.testing.assert_array_equal` with a one-pass fast path for the (usual) equal case.
`assert_variables_hold` checks that each Detectron blob sits in its Keras variable, by reference/detectron.md
§1.5's layout rules written here independently of tfdet's (`keras_location`, `keras_layout`).
"""

import os
import pathlib
import re
import shutil
import tempfile

import keras
import numpy as np
import pytest

TMPFS = pathlib.Path("/dev/shm")
TMPFS_ROOM = 4 * 2**30  # a zoo module holds up to ~1.2 GB of files there; two test processes run at once


def _new_scratch_folder(tmp_path_factory, name):
    """A new empty folder: on tmpfs when it is writable and has room (its files live in memory), else a
    pytest temporary one."""
    name = re.sub(r"[^\w-]", "_", name)[:40]
    if TMPFS.is_dir() and os.access(TMPFS, os.W_OK) and shutil.disk_usage(TMPFS).free > TMPFS_ROOM:
        return pathlib.Path(tempfile.mkdtemp(prefix=f"tfdet-{name}-", dir=TMPFS))
    return tmp_path_factory.mktemp(name)


@pytest.fixture
def scratch_path(request, tmp_path_factory):
    """A test's folder for large files (tmpfs when there is one), removed after the test."""
    path = _new_scratch_folder(tmp_path_factory, request.node.name)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def module_scratch_path(request, tmp_path_factory):
    """A test module's folder for large files shared by its tests, removed after the module."""
    path = _new_scratch_folder(tmp_path_factory, request.module.__name__)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def held(variable):
    """The value of a Keras (TensorFlow) variable as a read-only array, without a copy.

    A read tensor keeps its buffer: a later assignment to the variable writes a new one.
    """
    return np.asarray(variable.value.read_value())


def snapshot(model):
    """Copies of every variable's value, to check later that something left the model unchanged."""
    return [np.array(held(variable)) for variable in model.weights]


def unchanged(model, values):
    """Whether every variable of `model` still holds its value of `snapshot`."""
    return len(values) == len(model.weights) and all(
        np.array_equal(held(variable), value) for variable, value in zip(model.weights, values)
    )


def assert_same(actual, expected, name=""):
    """`np.testing.assert_array_equal(actual, expected, err_msg=name)`, as strict: when `np.array_equal`
    (same shape, every element equal) says so it passes without its slower element-wise diagnostics,
    otherwise assert_array_equal itself decides and reports the mismatch."""
    if not np.array_equal(actual, expected):
        np.testing.assert_array_equal(actual, expected, err_msg=name)


# ---------------------------------------------------------------------------------------------
# Keras layout of a blob (reference §1.5, README conventions), independent of tfdet's rules
# ---------------------------------------------------------------------------------------------

_NORM_SUFFIXES = {
    "_bn_s": ("_bn", "scale"),
    "_bn_b": ("_bn", "bias"),
    "_gn_s": ("_gn", "gamma"),
    "_gn_b": ("_gn", "beta"),
}


def keras_location(blob):
    """(Keras layer name, variable name) holding a blob: layer = blob without its parameter suffix,
    `_[mask]_fcn<i>` / `_mask_fcn<i>` -> `mask_fcn<i>`."""
    for suffix, (layer_suffix, variable) in _NORM_SUFFIXES.items():
        if blob.endswith(suffix):
            layer = blob[: -len(suffix)] + layer_suffix
            break
    else:
        layer, variable = blob[:-2], {"_w": "kernel", "_b": "bias"}[blob[-2:]]
    for prefix in ("_[mask]_fcn", "_mask_fcn"):
        if layer.startswith(prefix):
            layer = "mask_fcn" + layer[len(prefix) :]
    return layer, variable


def keras_layout(blob, value):
    """A Caffe2 array in Keras layout: conv OIHW and deconv IOHW -> transpose(2, 3, 1, 0); FC (out, in)
    -> (in, out); fc6's columns from NCHW-flatten (c, y, x) to NHWC-flatten (y, x, c) order."""
    if value.ndim == 4:
        return value.transpose(2, 3, 1, 0)
    if blob == "fc6_w":
        units, size = value.shape
        return value.reshape(units, size // 49, 7, 7).transpose(2, 3, 1, 0).reshape(size, units)
    return value.T if value.ndim == 2 else value


def weighted_layers(model):
    """{layer name: {variable name: variable}} of every layer with weights, inside nested models too."""
    layers, stack = {}, list(model.layers)
    while stack:
        layer = stack.pop()
        if isinstance(layer, keras.Model):
            stack.extend(layer.layers)
        elif layer.weights:
            layers[layer.name] = {variable.name: variable for variable in layer.weights}
    return layers


def blob_variables(model, blobs):
    """{blob: the Keras variable holding it}, by `keras_location`; fails on a blob without a layer."""
    layers = weighted_layers(model)
    variables = {}
    for blob in blobs:
        layer, variable_name = keras_location(blob)
        assert layer in layers, f"{blob}: no Keras layer {layer!r}"
        variables[blob] = layers[layer][variable_name]
    return variables


def assert_variables_hold(model, blobs, every_variable=True):
    """Each blob sits in its Keras variable in Keras layout; with `every_variable`, nothing else is left."""
    filled = set()
    for blob, variable in blob_variables(model, blobs).items():
        assert_same(held(variable), keras_layout(blob, blobs[blob]), blob)
        filled.add(id(variable))
    if every_variable:
        left = [v.path for v in model.weights if id(v) not in filled]
        assert not left, f"variables no blob filled: {left}"
    return filled
