"""Ops traced within `user_frames_only()` record no TensorFlow or Keras frame and keep the caller's, so that a
runtime error still points at the line that made the op."""

import contextlib
import inspect
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdet.op_tracebacks import OP_CREATION_FILES, library_files, user_frames_only


def traced_matmul(context):
    """The MatMul op of a Keras Dense layer called in a tf.function traced within `context`."""
    layer = keras.layers.Dense(3)

    @tf.function(autograph=False)
    def dense(x):
        return layer(x)

    with context:
        graph = dense.get_concrete_function(tf.TensorSpec([2, 4], tf.float32)).graph
    (matmul,) = [op for op in graph.get_operations() if op.type == "MatMul"]
    return matmul


def frame_files(op):
    return [frame.filename for frame in op.traceback]


def is_library_file(path):
    return any(os.sep + package + os.sep in path for package in ("tensorflow", "keras"))


def test_library_frames_are_left_out_and_the_callers_kept():
    files = frame_files(traced_matmul(user_frames_only()))
    assert __file__ in files
    library_frames = [path for path in files if is_library_file(path)]
    # the 3 innermost frames of TensorFlow's op creation, kept so that TensorFlow drops them and not the caller's
    assert len(library_frames) <= 3 and set(library_frames) <= set(OP_CREATION_FILES)


def test_without_it_the_library_frames_are_recorded():
    files = frame_files(traced_matmul(contextlib.nullcontext()))
    assert __file__ in files
    assert len([path for path in files if is_library_file(path)]) > 10


def test_library_files_are_tensorflows_and_keras_own():
    files = library_files()
    assert keras.layers.Dense.__call__.__code__.co_filename in files
    assert inspect.unwrap(tf.nn.conv2d).__code__.co_filename in files
    assert __file__ not in files and not [path for path in files if not is_library_file(path)]
    assert not set(OP_CREATION_FILES) & files


def test_a_runtime_error_still_names_the_line_that_made_the_op():
    @tf.function(autograph=False)
    def checked(x):
        return tf.debugging.check_numerics(x, "the input has a NaN")  # the line the error must name

    with user_frames_only(), pytest.raises(tf.errors.InvalidArgumentError) as error:
        checked(tf.constant([np.nan], tf.float32))
    assert "the input has a NaN" in str(error.value)
    assert "test_op_tracebacks.py" in str(error.value)
