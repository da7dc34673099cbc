"""Start-up of the command lines' processes: once TensorFlow is imported, what the imports left alive is
moved out of Python's garbage collector."""

import functools
import gc


@functools.cache
def freeze_imports():
    """`gc.freeze()` once per process, after importing TensorFlow, before a model is built or traced.

    Tracing allocates enough to trigger full collections, each of which would walk TensorFlow's and Keras' module
    objects (hundreds of thousands) again (the time it saves: benchmarks/README.md). Only command lines call it,
    once: a frozen object is never collected, which a library must not decide for its caller's objects. A process
    that froze its own start-up already (a test runner calling a command line's `main`) is left as it is.
    """
    if gc.get_freeze_count():
        return
    import tensorflow  # noqa: F401  (its objects are the ones worth freezing)

    gc.collect()
    gc.freeze()
