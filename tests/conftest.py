"""Shared test fixtures: locating ../shared from the repository root; the longest modules first; the
collected session moved out of Python's garbage collector."""

import pathlib

import pytest

from tfdet.startup import freeze_imports

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"

# Test modules by their duration on the 2-core CI machine, longest first (the others take under 4 s; measured
# with --durations=0 on the full suite).
# pytest-xdist (`-n 2 --dist loadfile --no-loadscope-reorder`, pyproject.toml) hands whole modules to its
# two workers in collection order; starting with the longest keeps both busy until the end instead of one
# waiting while the other finishes a long module collected last. Only the order changes.
LONGEST_FIRST = (
    "test_savedmodel.py", "test_train_cli.py", "test_predictor.py", "test_trainer.py", "test_mixed_precision.py",
    "test_domain_adaptation_strategy.py", "test_device_map.py", "test_savedmodel_client.py",
    "test_domain_adaptation.py", "test_generalized_rcnn.py", "test_infer.py", "test_porting_zoo.py",
    "test_porting.py", "test_retinanet_training.py", "test_roi_align.py", "test_evaluate_cli.py",
    "test_training_graph.py", "test_retinanet.py", "test_maskrcnn_benchmark_port.py", "test_soft_nms_and_voting.py",
    "test_savedmodel_postprocessing.py", "test_strategy.py", "test_porting_cli.py",
    "test_test_time_augmentation.py", "test_retinanet_port.py", "test_fork_config.py", "test_porting_numerics.py",
    "test_backbones.py", "test_data_pipeline.py", "test_porting_fields.py", "test_fpn_levels.py",
    "test_config_support.py", "test_nms.py", "test_videopose3d.py", "test_checkpoint.py", "test_proposals.py",
    "test_console.py", "test_fork_pth.py",
)  # fmt: skip


def pytest_collection_modifyitems(items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module's own order stays


def pytest_collection_finish(session):
    """Freeze what collection leaves alive (TensorFlow's and Keras' modules, the test items): Python's
    full collections then stop walking those ~350,000 objects each time tracing allocates more (measured
    on four model-building modules: 9.7 s of 93 s in the collector, 2.9 s with the freeze), as the command
    lines do (`tfdet.startup`)."""
    freeze_imports()


def shared_path(*parts: str) -> pathlib.Path:
    """Path under ../shared; fails (never skips) with a clear message when it is absent."""
    path = SHARED_DIR.joinpath(*parts)
    if not path.exists():
        pytest.fail(
            f"{path} is missing: tests expect the project's shared/ folder beside the repository "
            f"root ({SHARED_DIR}); CI always provides it."
        )
    return path


@pytest.fixture
def rng():
    """A fresh, seeded numpy generator for each test."""
    import numpy as np

    return np.random.default_rng(0)
