"""How our tf.functions run on CPUs only: TensorFlow's Grappler off, and a training step's ops one at a time.

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


def one_op_at_a_time_on_cpu():
    """Give TensorFlow's runtime one inter-op thread when no GPU is visible, before the runtime starts; True if set.

    Each op of a training step already spreads over every core (intra-op threads); ops run side by side only
    hold more buffers at once (the same step time, a few hundred MB less at its peak: benchmarks/README.md). A
    value the user set (`tf.config.threading.set_inter_op_parallelism_threads`) is kept, and once the runtime has
    started its thread pools are fixed: nothing changes then. Only for one replica per process: replicas of one
    process wait on each other's collectives, which needs their ops side by side.
    """
    if tf.config.threading.get_inter_op_parallelism_threads() or tf.config.list_physical_devices("GPU"):
        return False
    try:
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # the runtime has started
        return False
    return True
