"""`custom_gradient`: `tf.custom_gradient` for functions of tensors, without its leak in graph mode.

In graph mode (every tf.function trace) `tf.custom_gradient` registers each call's gradient function in
TensorFlow's process-wide gradient registry under a new name and never removes it. That function holds tensors
of the graph being traced, so every graph that used it (a whole detector's) stayed alive for the life of the
process, and every full garbage collection walked it again. Here each call's gradient function is kept by the
graph it belongs to (and goes with it); the registry keeps, under the call's own name as TensorFlow's does (which
`tf.gradients` and SavedModel's saving of custom gradients look up), only a small function holding a weak
reference to that graph.
"""

import functools
import itertools
import threading
import weakref

import tensorflow as tf
from tensorflow.python.eager import record

_GRAPH_ATTRIBUTE = "_tfdet_custom_gradients"
_CALL_NUMBERS = itertools.count()
_GRAPH_ATTRIBUTE_LOCK = threading.Lock()


def _gradient_kept_by_the_graph(graph_ref, name, unused_op, *output_gradients):
    """The gradient function of call `name`, found on its graph (TensorFlow passes no op when saving it)."""
    graph = graph_ref()
    if graph is None:
        raise LookupError(f"the graph that traced custom gradient {name} no longer exists")
    return getattr(graph, _GRAPH_ATTRIBUTE)[name](*output_gradients)


def _gradients_of(graph):
    """{call name: gradient function} kept by `graph`, made once even when the replica threads of a tf.distribute
    strategy trace into it side by side."""
    with _GRAPH_ATTRIBUTE_LOCK:
        if not hasattr(graph, _GRAPH_ATTRIBUTE):
            setattr(graph, _GRAPH_ATTRIBUTE, {})
        return getattr(graph, _GRAPH_ATTRIBUTE)


def custom_gradient(f):
    """Decorator like `tf.custom_gradient`: `f(*tensors)` returns (result, gradient) where `gradient(*dy)` gives
    one gradient (or None) per argument. `f` takes tensors only and reads no variable itself."""

    def call(*args):
        if tf.executing_eagerly():  # the eager tape keeps the gradient function only as long as it needs it
            return tf.custom_gradient(f)(*args)
        args = [tf.convert_to_tensor(arg) for arg in args]
        with record.VariableWatcher() as watcher:
            result, gradient = f(*args)
        if watcher.watched_variables():  # their gradient would silently be nothing
            raise ValueError(f"custom_gradient: {f.__name__} reads variables; pass their values as arguments")
        flat_result = tf.nest.flatten(result)
        count = len(flat_result)

        def gradient_of_the_inputs(*output_gradients):
            input_gradients = gradient(*output_gradients[:count])
            if not isinstance(input_gradients, (list, tuple)):
                input_gradients = [input_gradients]
            return [None] * count + list(input_gradients)  # nothing flows back into the forward computation

        graph = tf.compat.v1.get_default_graph()
        name = f"TfdetCustomGradient-{next(_CALL_NUMBERS)}"
        _gradients_of(graph)[name] = gradient_of_the_inputs
        tf.RegisterGradient(name)(functools.partial(_gradient_kept_by_the_graph, weakref.ref(graph), name))
        inputs = flat_result + args
        with graph.gradient_override_map({"IdentityN": name}):
            outputs = tf.identity_n(inputs)
        record.record_operation(f.__name__, outputs, inputs, gradient_of_the_inputs)  # what a GradientTape uses
        return tf.nest.pack_sequence_as(result, outputs[:count])

    return call
