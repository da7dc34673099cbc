"""Helpers of the porting tests, whose weight files reach 1 GB and whose checks cover ~10^8 values.

`scratch_path` / `module_scratch_path` are folders on tmpfs when the machine has one with room to
spare (a weight file written and read back there costs no disk I/O), else under pytest's temporary
directory; both are removed after use. `held` reads a Keras variable without copying it and
`assert_same` is `np.testing.assert_array_equal` with a one-pass fast path for the (usual) equal case.
"""

import os
import pathlib
import re
import shutil
import tempfile

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
