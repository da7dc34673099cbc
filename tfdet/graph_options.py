"""Graph optimisation of our tf.functions: TensorFlow's Grappler off when they run on CPUs only.

Grappler rewrites a function's graph when it is first run: on CPUs that lengthens the first call of a
training step or a Predictor and speeds up no later one (docs/design.md decision 7; the figures are in
benchmarks/README.md). On GPUs its layout optimiser matters, so it stays on there; TF Serving applies its own.
"""

import contextlib

import tensorflow as tf

_OPTION = "disable_meta_optimizer"


@contextlib.contextmanager
def cpu_graph_options():
    """Run the block's tf.function calls without Grappler when no GPU is visible, then restore the option."""
    if tf.config.list_logical_devices("GPU"):
        yield
        return
    previous = tf.config.optimizer.get_experimental_options().get(_OPTION, False)
    tf.config.optimizer.set_experimental_options({_OPTION: True})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({_OPTION: previous})
