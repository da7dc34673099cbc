"""Skipping random initialisation for models whose every weight is about to be loaded.

Drawing ~100 M random values costs seconds on a CPU (a third of porting an X-101 file); weights
that a file overwrites anyway can start as zeros. Only the big weight-carrying layers of tfdet
(CaffeConv2D, FlattenDense) consult this; small Keras layers keep their own initialisers.
"""

import contextlib
import contextvars

_PLACEHOLDER = contextvars.ContextVar("tfdet_placeholder_initialization", default=False)


@contextlib.contextmanager
def placeholder_initialization():
    """Within this block tfdet layers fill their kernels with zeros instead of random draws."""
    token = _PLACEHOLDER.set(True)
    try:
        yield
    finally:
        _PLACEHOLDER.reset(token)


def initializer_for(initializer):
    """`initializer`, or 'zeros' inside `placeholder_initialization()`."""
    return "zeros" if _PLACEHOLDER.get() else initializer
