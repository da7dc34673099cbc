"""Graph optimisation of the training step: TensorFlow's Grappler off when the step runs on CPUs only.

Grappler rewrites a function's graph when it is first run. On a training step it gains nothing on CPU
and costs half of the first iteration, measured on 2 cores: the tiny shapes model's first step 8.0 s with it,
4.0 s without, later steps 0.30 s and 0.26 s; the R-50-FPN shapes model at 192 px 11.2 s and 6.6 s, later
steps 3.0 s either way. On GPUs its layout optimiser matters, so it stays on there.
"""

import contextlib

import tensorflow as tf

_OPTION = "disable_meta_optimizer"


@contextlib.contextmanager
def training_graph_options():
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
