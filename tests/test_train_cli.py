"""python -m tfdet.train end to end on the tiny config (checkpoints, metrics.json, final weights, evaluation) and a
run resumed from its iteration-2 checkpoint reaching the uninterrupted run's state; (slow) the same with a real
SIGKILL after that checkpoint, in child processes, bit for bit."""

import dataclasses
import json
import logging
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
import tensorflow as tf

from support.training_fixtures import AFFINE_BODY, ONE_SAMPLE_ROI_ALIGN, TINY_CONFIG, functions_run_eagerly, tiny_cfg
from tfdet.data import shapes
from tfdet.data.model_labels import read_model_categories
from tfdet.engine.lr_schedule import lr_at_iter
from tfdet.train import main, parse_args

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# 4 iterations: warm-up over the first 2, checkpoints at 2 and 4, an LR step (and momentum correction) at 3,
# after a resume from the checkpoint at 2. Faster R-CNN only, with one RoIAlign sample per bin and the
# AffineChannel body (no GroupNorm: a third less of the CPU of each run), to keep the runs of this
# test short; resuming does not depend on the layers. From random weights that body's losses start near 175:
# a base LR of 1e-4 keeps the 4 iterations finite.
OVERRIDES = [
    "SOLVER.MAX_ITER", "4", "TRAIN.SNAPSHOT_ITERS", "2", "SOLVER.WARM_UP_ITERS", "2", "SOLVER.STEPS", "[0, 3]",
    "SOLVER.BASE_LR", "0.0001", "MODEL.MASK_ON", "False", "MODEL.KEYPOINTS_ON", "False", *ONE_SAMPLE_ROI_ALIGN,
    *AFFINE_BODY,
]
# The shapes splits of the config's TRAIN.DATASETS and TEST.DATASETS, cut down (from 512 and 64 images): the
# final evaluation predicts 4 images, one by one.
SMALL_SPLITS = {"shapes_train": 16, "shapes_val": 4}


def small_data_root(root, monkeypatch):
    """`root` as a data root ($TFDET_DATA_DIR) holding the SMALL_SPLITS shapes splits, generated here."""
    for name, count in SMALL_SPLITS.items():
        with monkeypatch.context() as patch:
            patch.setitem(shapes.SPLITS, name, dataclasses.replace(shapes.SPLITS[name], num_images=count))
            shapes.ensure_split(name, root / "shapes")
    return root


def start_training(output_dir, data_root, *flags):
    """`python -m tfdet.train` of the tiny config with OVERRIDES into `output_dir`, deterministic kernels (a
    resumed run repeats the uninterrupted one bit for bit), datasets from `data_root`; its log beside it."""
    env = dict(os.environ, TF_DETERMINISTIC_OPS="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO_ROOT),
               TFDET_DATA_DIR=str(data_root))
    log = open(output_dir.with_suffix(".log"), "w")
    command = [sys.executable, "-m", "tfdet.train", "--cfg", str(TINY_CONFIG), *flags, "OUTPUT_DIR", str(output_dir),
               *OVERRIDES]
    return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def finish(process, output_dir, timeout=300):
    process.wait(timeout=timeout)
    log = output_dir.with_suffix(".log").read_text()
    assert process.returncode == 0, log[-4000:]
    return log


def checkpoint_written(output_dir):
    """Whether a checkpoint is complete: TF's `checkpoint` index names it (written after its files)."""
    state = output_dir / "checkpoint"
    return state.exists() and "model_iter-" in state.read_text()


def checkpoint_values(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def h5_values(path):
    values = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: values.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None)
    return values


def metrics_records(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.json").read_text().splitlines()]


def assert_full_run(full_dir, printed):
    """The uninterrupted run's outputs: checkpoints, json_stats, final weights with their config, evaluation."""
    for name in ("model_iter-2.index", "model_iter-4.index", "model_final.weights.h5",
                 "config.yaml", "results_shapes_val.json", "metrics_shapes_val.json"):
        assert (full_dir / name).is_file(), name
    assert any((full_dir / "tensorboard").iterdir())
    cfg = tiny_cfg(*OVERRIDES)
    records = metrics_records(full_dir)
    assert [r["iter"] for r in records] == [0, 3]
    assert [r["lr"] for r in records] == [float(lr_at_iter(cfg, 0)), float(lr_at_iter(cfg, 3))]
    assert {"loss", "loss_rpn_cls", "loss_rpn_bbox", "loss_cls", "loss_bbox", "accuracy_cls", "time", "eta"} <= set(
        records[0])
    assert printed.count("json_stats: ") == 2
    assert set(json.loads((full_dir / "metrics_shapes_val.json").read_text())) == {"bbox"}
    # the training set's classes travel in the final weights (inference, evaluation and export read them)
    assert read_model_categories(full_dir / "model_final.weights.h5").names == ("__background__", *shapes.CATEGORY_NAMES)


def assert_resumed_to_the_full_run(full_dir, resumed_dir, exact):
    """The resumed run reached the uninterrupted run's iteration, LR, optimizer state (its iteration counter and
    momentum slots) and weights: bit for bit when `exact` (deterministic kernels in both processes), else within
    float32 rounding (the resumed steps run op by op in the test process, the full run's traced)."""
    assert metrics_records(resumed_dir)[-1]["iter"] == 3
    assert metrics_records(resumed_dir)[-1]["lr"] == metrics_records(full_dir)[-1]["lr"]
    full_state = checkpoint_values(full_dir / "model_iter-4")
    resumed_state = checkpoint_values(resumed_dir / "model_iter-4")
    assert full_state.keys() == resumed_state.keys()
    # The optimizer's iteration counter and its momentum slots (Keras keys them by index: optimizer/_variables/N).
    counters = [name for name in full_state if name.startswith("optimizer/_iterations")]
    assert counters and all(full_state[name] == resumed_state[name] == 4 for name in counters)
    assert sum(name.startswith("optimizer/_variables/") for name in full_state) > 80  # 85 trainable weights
    full_weights = h5_values(full_dir / "model_final.weights.h5")
    resumed_weights = h5_values(resumed_dir / "model_final.weights.h5")
    assert full_weights.keys() == resumed_weights.keys() and len(full_weights) > 100
    for values, resumed in ((full_state, resumed_state), (full_weights, resumed_weights)):
        for name, value in values.items():
            if exact or not np.issubdtype(np.asarray(value).dtype, np.floating):
                np.testing.assert_array_equal(resumed[name], value, err_msg=name)
            else:
                np.testing.assert_allclose(resumed[name], value, rtol=1e-5, atol=1e-7, err_msg=name)


def test_train_end_to_end_then_resume_from_a_checkpoint(tmp_path, monkeypatch, capsys, caplog):
    """`main` in this process: the whole run, then a folder holding only its iteration-2 checkpoint (what a run
    killed after that checkpoint leaves; the kill itself: the slow test below) trains on to the same state."""
    monkeypatch.setenv("TFDET_DATA_DIR", str(small_data_root(tmp_path / "data", monkeypatch)))
    full_dir, resumed_dir = tmp_path / "full", tmp_path / "resumed"
    assert main(["--cfg", str(TINY_CONFIG), "OUTPUT_DIR", str(full_dir), *OVERRIDES]) == 0
    assert_full_run(full_dir, capsys.readouterr().out)

    resumed_dir.mkdir()
    for path in full_dir.glob("model_iter-2.*"):
        shutil.copy(path, resumed_dir)
    (resumed_dir / "checkpoint").write_text('model_checkpoint_path: "model_iter-2"\n')
    caplog.clear()
    # The resumed run's two steps op by op (restoring, the LR schedule and checkpointing are the same Python; the
    # traced step is the full run's): ~4 s less than tracing it again.
    with caplog.at_level(logging.INFO, logger="tfdet"), functions_run_eagerly():
        assert main(["--cfg", str(TINY_CONFIG), "--skip-test", "OUTPUT_DIR", str(resumed_dir), *OVERRIDES]) == 0
    assert "Resumed from" in caplog.text and "at iteration 2" in caplog.text, caplog.text[-3000:]
    assert_resumed_to_the_full_run(full_dir, resumed_dir, exact=False)


# Slow (three training processes, ~30 s of both cores): a real SIGKILL after the checkpoint at 2, and a resumed
# process that repeats the uninterrupted one bit for bit. By default the test above resumes in this process.
@pytest.mark.slow
def test_train_resumes_after_sigkill_to_exactly_the_uninterrupted_state(tmp_path, monkeypatch):
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    data_root = small_data_root(tmp_path / "data", monkeypatch)
    full = start_training(full_dir, data_root)
    killed = start_training(killed_dir, data_root, "--skip-test")
    deadline = time.monotonic() + 300
    while not checkpoint_written(killed_dir) and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL, killed_dir.with_suffix(".log").read_text()[-4000:]
    assert not (killed_dir / "model_final.weights.h5").exists()
    resumed_log = finish(start_training(killed_dir, data_root, "--skip-test"), killed_dir)
    full_log = finish(full, full_dir)
    assert_full_run(full_dir, full_log)
    assert "absl" not in full_log and "absl" not in resumed_log  # checkpoint saves log nothing from TF
    assert "Resumed from" in resumed_log, resumed_log[-3000:]
    assert_resumed_to_the_full_run(full_dir, killed_dir, exact=True)


def test_bad_command_lines_are_one_line_errors(tmp_path, capsys):
    assert main(["--cfg", str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"error: config file not found: {tmp_path / 'missing.yaml'}"
    assert main(["--cfg", str(TINY_CONFIG), "SOLVER.MAX_ITERS", "5"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and "SOLVER.MAX_ITER" in error and len(error.splitlines()) == 1
    assert main(["--cfg", str(TINY_CONFIG), "SOLVER.MAX_ITER", "5", "--no-such-flag"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.endswith("'--no-such-flag' in a KEY's place looks like a flag: give flags before the KEY VALUE pairs")


def test_flags_may_follow_the_overrides():
    args = parse_args(["--cfg", "x.yaml", "OUTPUT_DIR", "out", "SOLVER.MAX_ITER", "5", "--skip-test", "--verbose"])
    assert args.skip_test and args.verbose and args.opts == ["OUTPUT_DIR", "out", "SOLVER.MAX_ITER", "5"]


def test_more_gpus_than_the_machine_has_is_refused_with_the_overrides_that_train_here(tmp_path, capsys):
    """A zoo config's NUM_GPUS 8 on a CPU machine: the one-line error is command-line advice, the overrides of
    Detectron's linear rule (1/8 of the images per iteration: LR / 8, 8x the iterations), which then load."""
    argv = ["--cfg", str(TINY_CONFIG), "OUTPUT_DIR", str(tmp_path / "run"), "NUM_GPUS", "8", "--skip-test"]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    advice = 'NUM_GPUS 1 SOLVER.BASE_LR 0.0025 SOLVER.MAX_ITER 16000 SOLVER.STEPS "[0, 12000, 14400]"'
    assert error.startswith(f"error: NUM_GPUS is 8 but this machine has no GPU: to train on its CPU, end the command "
                            f"line with {advice} (Detectron's linear rule")  # fmt: skip
    assert len(error.splitlines()) == 1 and "make_logical_cpus" not in error
    cfg = tiny_cfg("NUM_GPUS", "8", *shlex.split(advice))
    schedule = cfg.NUM_GPUS, cfg.SOLVER.BASE_LR, cfg.SOLVER.MAX_ITER, cfg.SOLVER.STEPS
    assert schedule == (1, 0.0025, 16000, [0, 12000, 14400])
