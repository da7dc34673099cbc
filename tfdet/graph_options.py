"""Graph optimisation of our tf.functions: TensorFlow's Grappler off when they run on CPUs only.

Grappler rewrites a function's graph when it is first run. On CPUs it costs much of a first call and
gains little or nothing later, measured on 2 cores (AVX-512):
- training step: the tiny shapes model's first step 8.0 s with it, 4.0 s without, later steps 0.30 s and
  0.26 s; the R-50-FPN shapes model at 192 px 11.2 s and 6.6 s, later steps 3.0 s either way;
- Predictor: the tiny model's first image 5.1 s and 4.1 s, later 0.06 s either way; Mask R-CNN R-50-FPN at
  800 px 5.6-5.8 s and 5.2 s, later 2.37-2.45 s and 2.50 s (3 % slower without).
On GPUs its layout optimiser matters, so it stays on there. TF Serving applies its own.
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
