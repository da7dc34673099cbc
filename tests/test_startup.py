"""A command line's start-up: TensorFlow's import frozen out of the garbage collector once, and never in a process
that froze its own (this test process did, in conftest)."""

import gc
import sys

from tfdet.startup import freeze_imports


def test_freezes_after_importing_tensorflow_and_leaves_a_frozen_process_alone():
    frozen = gc.get_freeze_count()
    assert frozen > 0  # conftest froze what collection left alive
    freeze_imports.__wrapped__()
    assert gc.get_freeze_count() == frozen  # a runner's own freeze is kept as it is
    gc.unfreeze()
    try:
        freeze_imports.__wrapped__()
        assert "tensorflow" in sys.modules and gc.get_freeze_count() >= frozen
    finally:
        gc.freeze()  # as conftest left it, whatever the assertions said
