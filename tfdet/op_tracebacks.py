"""Op tracebacks without TensorFlow's and Keras's own frames, for the large graphs we trace.

TensorFlow records the Python stack of every op a tf.function traces and keeps it, frame by frame, as long as
the function lives (for the "defined at" lines of a runtime error). A Mask R-CNN training step's ops are made
some 50-80 frames deep, mostly inside TensorFlow and Keras, whose frames those error messages hide anyway;
recorded, they held about 0.1 GB of the training process (benchmarks/README.md). Ops traced within
`user_frames_only()` record the frames of every other file (tfdet's and the caller's, the ones an error should
point to) and the 3 innermost ones of TensorFlow's op creation, which TensorFlow drops itself.
"""

import contextlib
import functools
import os
import sys

import keras
import tensorflow as tf

try:  # TensorFlow's own filter of recorded frames (not public API): without it, tracebacks stay whole
    from tensorflow.python.util.tf_stack import StackTraceFilter
except ImportError:
    StackTraceFilter = None

_LIBRARY_ROOTS = tuple(os.path.dirname(module.__file__) + os.sep for module in (tf, keras))
# TensorFlow drops an op's 3 innermost recorded frames (its op-creation calls, in these files) after filtering:
# these files stay recorded, so that the 3 dropped are still theirs and not the caller's.
OP_CREATION_FILES = tuple(os.path.join(os.path.dirname(tf.__file__), "python", *parts) for parts in (
    ("framework", "ops.py"), ("util", "tf_stack.py"), ("util", "traceback_utils.py")))


def library_files():
    """The source files of the loaded TensorFlow and Keras modules but `OP_CREATION_FILES` (recomputed when
    modules were added)."""
    return _library_files_among(len(sys.modules))


@functools.lru_cache(maxsize=1)
def _library_files_among(module_count):
    del module_count  # the cache key: the set is made again once modules were added
    files = (getattr(module, "__file__", None) for module in list(sys.modules.values()))
    return frozenset(f for f in files if f and f.startswith(_LIBRARY_ROOTS) and f not in OP_CREATION_FILES)


if StackTraceFilter is not None:
    class _LibraryFramesFilter(StackTraceFilter):
        """Leaves out the frames of `library_files()` from the tracebacks of ops made on this thread."""

        def get_filtered_filenames(self):
            return library_files()


def user_frames_only():
    """A context in which the ops traced on this thread record no TensorFlow or Keras frame (a null context
    where this TensorFlow has no frame filter)."""
    if StackTraceFilter is None:
        return contextlib.nullcontext()
    return _LibraryFramesFilter()
