"""`tf.map_fn` without AutoGraph: our per-element functions use TensorFlow control flow explicitly, and
`tf.map_fn` would otherwise transpile each of them with AutoGraph on its first eager call (a model called
outside a tf.function) or inside a tf.function traced with AutoGraph on."""

import tensorflow as tf


def map_fn(fn, elems, **kwargs):
    """`tf.map_fn(fn, elems, **kwargs)` with `fn` marked not to be converted by AutoGraph."""
    return tf.map_fn(tf.autograph.experimental.do_not_convert(fn), elems, **kwargs)
