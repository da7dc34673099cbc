"""tfdet.ops.custom_gradient: the custom gradient, not automatic differentiation's, on every path TensorFlow
differentiates by (eager tape, a tape in a tf.function, tf.gradients, a while loop's body), and a traced graph
that used it is freed with its function (tf.custom_gradient keeps every such graph for the process's life)."""

import gc
import weakref

import numpy as np
import pytest
import tensorflow as tf

from tfdet.ops.custom_gradient import custom_gradient


@custom_gradient
def square_with_gradient_three(x, y):
    """x * x forward; backward 3 * dy to x and None to y (automatic differentiation would give 2x and 0)."""
    return x * x, lambda dy: (3.0 * dy, None)


@custom_gradient
def two_outputs(x):
    """(x, 2x) forward; backward 5 * (d0 + d1)."""
    return (tf.identity(x), 2.0 * x), lambda d0, d1: 5.0 * (d0 + d1)


X = tf.constant([1.0, -2.0, 4.0])


def tape_gradient(x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(square_with_gradient_three(x, tf.ones_like(x)))
    return tape.gradient(loss, x)


def test_eager_tape():
    np.testing.assert_array_equal(tape_gradient(X), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(square_with_gradient_three(X, X), X * X)


def test_tape_in_a_tf_function_and_several_outputs():
    np.testing.assert_array_equal(tf.function(tape_gradient)(X), [3.0, 3.0, 3.0])

    @tf.function
    def gradient_of_two_outputs(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            first, second = two_outputs(x)
            loss = tf.reduce_sum(first) + tf.reduce_sum(second)
        return first, second, tape.gradient(loss, x)

    first, second, gradient = gradient_of_two_outputs(X)
    np.testing.assert_array_equal(first, X)
    np.testing.assert_array_equal(second, 2 * X)
    np.testing.assert_array_equal(gradient, [10.0, 10.0, 10.0])


def test_symbolic_gradients_in_a_graph():
    @tf.function
    def symbolic(x, y):
        value = square_with_gradient_three(x, y)
        return tf.gradients(tf.reduce_sum(value), [x, y])

    gradient_x, gradient_y = symbolic(X, X)
    np.testing.assert_array_equal(gradient_x, [3.0, 3.0, 3.0])
    assert gradient_y is None


def test_inside_a_while_loop_body():
    @tf.function
    def mapped(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            rows = tf.map_fn(lambda row: square_with_gradient_three(row, row), x)
            loss = tf.reduce_sum(rows)
        return tape.gradient(loss, x)

    np.testing.assert_array_equal(mapped(tf.reshape(tf.range(6.0), [2, 3])), np.full([2, 3], 3.0))


def test_a_traced_graph_goes_with_its_function():
    function = tf.function(tape_gradient)
    graph = weakref.ref(function.get_concrete_function(X).graph)
    del function
    gc.collect()
    assert graph() is None


def test_a_function_reading_a_variable_is_refused_in_a_graph():
    variable = tf.Variable(2.0)

    @custom_gradient
    def scaled(x):
        return x * variable, lambda dy: dy * variable

    with pytest.raises(ValueError, match="scaled reads variables; pass their values as arguments"):
        tf.function(scaled).get_concrete_function(X)


def test_a_saved_model_keeps_the_custom_gradient(tmp_path):
    """tf.saved_model.save with its default options saves each call's gradient function (found through the
    registry under the call's own name); the loaded function, differentiated after the original is gone, gives
    the custom gradient."""
    module = tf.Module()
    module.square = tf.function(lambda x: square_with_gradient_three(x, x), input_signature=[tf.TensorSpec([3])])
    tf.saved_model.save(module, str(tmp_path))
    del module
    gc.collect()
    loaded = tf.saved_model.load(str(tmp_path))
    with tf.GradientTape() as tape:
        tape.watch(X)
        loss = tf.reduce_sum(loaded.square(X))
    np.testing.assert_array_equal(loaded.square(X), X * X)
    np.testing.assert_array_equal(tape.gradient(loss, X), [3.0, 3.0, 3.0])
