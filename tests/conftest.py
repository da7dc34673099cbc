"""pytest's hooks and shared fixtures: the longest modules first; the CPU split into logical devices for the
strategy and device-map tests; the collected session moved out of Python's garbage collector; each test's own
collective keys and seeded `rng`. Functions and constants the tests import live in tests/support/ (no test
imports this module)."""

import gc
import itertools
import os

import pytest

from tfdet.startup import freeze_imports

# Test modules by their duration on the 2-core CI machine, longest first (the others take under 4 s; measured
# with --durations=0 on the full suite, the runtime exports' modules and issue 43's changes placed by their runs).
# pytest-xdist (`-n 2 --dist loadfile --no-loadscope-reorder`, pyproject.toml) hands whole modules to its
# two workers in collection order; starting with the longest keeps both busy until the end instead of one
# waiting while the other finishes a long module collected last. Only the order changes.
LONGEST_FIRST = (
    "test_runtime_export.py", "test_savedmodel.py", "test_litert_export.py", "test_train_cli.py", "test_predictor.py",
    "test_trainer.py",
    "test_mixed_precision.py", "test_domain_adaptation.py", "test_porting_zoo.py", "test_infer.py", "test_finetune.py",
    "test_class_names.py", "test_rematerialization.py", "test_zoo.py", "test_generalized_rcnn.py",
    "test_checked_once.py", "test_onnx_ops.py",
    "test_console.py", "test_savedmodel_preprocessing.py", "test_keypoints.py", "test_custom_gradient.py",
    "test_roi_align.py", "test_porting.py", "test_savedmodel_client.py", "test_retinanet_training.py",
    "test_device_map.py", "test_retinanet_port.py", "test_retinanet.py", "test_maskrcnn_benchmark_port.py",
    "test_import_structure.py",
    "test_porting_cli.py", "test_evaluate_cli.py", "test_training_graph.py", "test_soft_nms_and_voting.py",
    "test_backbones.py", "test_porting_fields.py", "test_fork_config.py", "test_data_pipeline.py",
    "test_savedmodel_postprocessing.py", "test_porting_numerics.py", "test_test_time_augmentation.py",
    "test_strategy.py", "test_fpn_levels.py", "test_nms.py", "test_domain_adaptation_strategy.py",
    "test_config_support.py", "test_download.py", "test_checkpoint.py", "test_videopose3d.py", "test_proposals.py",
    "test_fork_pth.py",
)  # fmt: skip


# tf2onnx deep-copies the whole graph before each of its optimizers, to fall back on it when one fails: a third to
# half of each conversion's time (the tiny model's export: 63 s of CPU, 44 s without; test_onnx_ops: 12 s, 7 s).
# TF2ONNX_CATCH_ERRORS (any value, in tf2onnx 1.17) turns that off in the test processes and in the tf2onnx
# processes the exports start: the same ONNX model (same operators, same weights), and an error instead of a
# quietly less optimised model where an optimizer fails, which the tests would then report.
os.environ.setdefault("TF2ONNX_CATCH_ERRORS", "FALSE")


# Logical CPUs of every process that runs tests (/CPU:0 .. /CPU:3): `mirrored` takes the first two, the device-map
# tests use four. TensorFlow can split its CPU only before it initialises its devices, so this happens when the
# session starts; every other test places nothing and runs on /CPU:0 as in a process without the split
# (TensorFlow's logical CPUs share its one intra-op thread pool).
LOGICAL_CPUS = 4


def pytest_sessionstart(session):
    """Split the CPU of a process that runs tests into LOGICAL_CPUS devices, before anything initialises them."""
    if session.config.getoption("numprocesses", None) and not hasattr(session.config, "workerinput"):
        return  # pytest-xdist's controller: it runs no test and never imports TensorFlow
    from tfdet.engine.strategy import make_logical_cpus

    make_logical_cpus(LOGICAL_CPUS)


# TensorFlow's runtime keeps what a collective key (group, instance) carried for the life of the process, and each
# new MirroredStrategy numbers its all-reduces from the same keys: a second strategy's all-reduce of other shapes
# fails ("Shape mismatch in the collective instance 100"). Each test's strategies start from keys of their own,
# through the class attribute TensorFlow provides for its own tests.
_COLLECTIVE_KEY_BASES = itertools.count(start=0, step=1000)


@pytest.fixture(autouse=True)
def collective_keys_of_its_own():
    import tensorflow as tf

    tf.distribute.MirroredStrategy._collective_key_base = next(_COLLECTIVE_KEY_BASES)


# TensorFlow's own tf.custom_gradient (in ReplicaContext.all_reduce, which Keras' optimizer calls on every
# training step it traces) registers each trace's gradient function in TensorFlow's global gradient registry and
# never removes it: each traced training step, the whole graph, stayed alive in the test process. Our own
# registrations hold only a weak reference to their graph (tfdet.ops.custom_gradient); TensorFlow's registrations
# of a module are dropped when it ends, so that its graphs go with it (and later full collections do not walk them).
@pytest.fixture(autouse=True, scope="module")
def tensorflow_drops_the_modules_custom_gradients():
    yield
    from tensorflow.python.framework import ops

    registry = ops._gradient_registry._registry
    for name in [name for name in registry if name.startswith("CustomGradient-")]:
        del registry[name]


def pytest_collection_modifyitems(items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module's own order stays


# Python's collection thresholds in the test processes: a young collection per 5,000 net allocations, a middle one
# per 20 of those, a full one per 100 middle ones (at most; Python also waits for 25 % more long-lived objects).
GC_THRESHOLDS = (5000, 20, 100)


def pytest_collection_finish(session):
    """Freeze what collection leaves alive (TensorFlow's and Keras' modules, the test items): Python's
    full collections then stop walking those ~350,000 objects each time tracing allocates more (measured
    on four model-building modules: 9.7 s of 93 s in the collector, 2.9 s with the freeze), as the command
    lines do (`tfdet.startup`). Then collect less often: a test process keeps hundreds of thousands of graph
    objects alive between modules, and each full collection walked them all (0.1-0.4 s, 45-66 of them per
    process and 42 CPU-seconds of the suite's ~690 with Python's thresholds (700, 10, 10))."""
    freeze_imports()
    gc.set_threshold(*GC_THRESHOLDS)


@pytest.fixture
def rng():
    """A fresh, seeded numpy generator for each test."""
    import numpy as np

    return np.random.default_rng(0)
