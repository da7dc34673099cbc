"""Training checkpoints: round trip (weights, momentum, iteration, data position), a save killed with
SIGKILL, damaged checkpoints, final weights, the snapshot period and the non-finite loss guard."""

import os
import pathlib
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdet.config import load_config
from tfdet.engine.checkpoint import (
    NonFiniteLossError,
    TrainingCheckpointer,
    check_finite_losses,
    is_snapshot_iteration,
    snapshot_period,
)
from tfdet.engine.optimizer import build_optimizer

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

# An LR step at iteration 2 (momentum correction) after a 2-iteration warm-up.
SOLVER = [
    "SOLVER.LR_POLICY", "steps_with_decay", "SOLVER.BASE_LR", "0.1", "SOLVER.STEPS", "[0, 2]",
    "SOLVER.MAX_ITER", "10", "SOLVER.WARM_UP_ITERS", "2", "SOLVER.WEIGHT_DECAY", "0.01",
]


def make_model_and_optimizer(seed, hidden=4, inputs=3):
    """fc6 -> cls_score with seeded random weights, and Detectron's SGD for it."""
    x = keras.Input((inputs,))
    y = keras.layers.Dense(2, name="cls_score")(keras.layers.Dense(hidden, activation="relu", name="fc6")(x))
    model = keras.Model(x, y)
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(size=w.shape).astype(np.float32) for w in model.weights])
    return model, build_optimizer(load_config(overrides=SOLVER), model)


def train_step(model, optimizer, step):
    """One SGD step on a batch fixed by `step`."""
    rng = np.random.default_rng(100 + step)
    x = rng.normal(size=(4, model.input_shape[-1])).astype(np.float32)
    y = rng.normal(size=(4, 2)).astype(np.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)


def test_round_trip_restores_weights_momentum_iteration_and_data_position(tmp_path):
    dataset = tf.data.Dataset.range(100)
    model, optimizer = make_model_and_optimizer(seed=0)
    iterator, position = iter(dataset), tf.Variable(0, dtype=tf.int64)
    saver = TrainingCheckpointer(tmp_path, model, optimizer,
                                 data_state={"data_iterator": iterator, "data_position": position})
    for step in range(2):
        train_step(model, optimizer, step)
        next(iterator)
        position.assign_add(1)
    saved = saver.save()
    assert os.path.basename(saved) == "model_iter-2"
    momenta = [optimizer.momentum_slot(v).numpy() for v in model.trainable_variables]
    train_step(model, optimizer, 2)  # the uninterrupted run's third step (an LR step: momentum is rescaled)
    expected_weights, expected_next = [w.numpy() for w in model.weights], int(next(iterator))

    model2, optimizer2 = make_model_and_optimizer(seed=1)
    iterator2, position2 = iter(dataset), tf.Variable(0, dtype=tf.int64)
    restorer = TrainingCheckpointer(tmp_path, model2, optimizer2,
                                    data_state={"data_iterator": iterator2, "data_position": position2})
    assert restorer.restore_latest() == saved
    assert restorer.iteration == 2 and int(position2.numpy()) == 2
    for variable, momentum in zip(model2.trainable_variables, momenta):
        np.testing.assert_array_equal(optimizer2.momentum_slot(variable).numpy(), momentum)
    train_step(model2, optimizer2, 2)
    for got, want in zip(model2.weights, expected_weights):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-7)
    assert int(next(iterator2)) == expected_next == 2


def test_resumes_from_a_relative_output_folder(tmp_path, monkeypatch):
    """`python -m tfdet.train ... OUTPUT_DIR outputs/x` resumes: checkpoints found under a relative folder."""
    monkeypatch.chdir(tmp_path)
    model, optimizer = make_model_and_optimizer(seed=0)
    set_state(model, optimizer, 2)
    TrainingCheckpointer(os.path.join("outputs", "x"), model, optimizer).save()
    model2, optimizer2 = make_model_and_optimizer(seed=1)
    restored = TrainingCheckpointer(os.path.join("outputs", "x"), model2, optimizer2).restore_latest()
    assert os.path.samefile(restored + ".index", tmp_path / "outputs" / "x" / "model_iter-2.index")
    assert_state(model2, optimizer2, 2)


def test_restore_latest_without_checkpoint_returns_none(tmp_path):
    model, optimizer = make_model_and_optimizer(seed=0)
    before = [w.numpy() for w in model.weights]
    assert TrainingCheckpointer(tmp_path, model, optimizer).restore_latest() is None
    for got, want in zip(model.weights, before):
        np.testing.assert_array_equal(got.numpy(), want)


def set_state(model, optimizer, value):
    """Every weight and momentum to `value`, the iteration counter to `value`."""
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    for variable in model.weights + [optimizer.momentum_slot(v) for v in model.trainable_variables]:
        variable.assign(np.full(variable.shape, value, np.float32))
    optimizer.iterations.assign(value)


def assert_state(model, optimizer, value):
    assert int(optimizer.iterations.numpy()) == value
    for variable in model.weights + [optimizer.momentum_slot(v) for v in model.trainable_variables]:
        assert np.all(variable.numpy() == value), variable.path


def killed_child_main(directory):
    """Child process: save checkpoints 1 and 2, then SIGKILL itself while checkpoint 3 is being written."""
    import threading
    import time

    model, optimizer = make_model_and_optimizer(seed=0, hidden=4096, inputs=1024)  # 4M weights: a ~50 ms write
    saver = TrainingCheckpointer(directory, model, optimizer)
    for value in (1, 2):
        set_state(model, optimizer, value)
        saver.save()
        print(f"saved {value}", flush=True)
    set_state(model, optimizer, 3)
    partial = os.path.join(directory, "model_iter-3_temp")

    def kill_once_writing():
        while not os.path.exists(partial):
            time.sleep(0.0005)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=kill_once_writing, daemon=True).start()
    saver.save()
    print("saved 3", flush=True)


def test_save_killed_midway_leaves_the_previous_checkpoint_restorable(tmp_path):
    code = f"import sys; sys.path.insert(0, {str(REPO_ROOT / 'tests')!r}); import test_checkpoint as t; " \
           f"t.killed_child_main({str(tmp_path)!r})"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), CUDA_VISIBLE_DEVICES="")
    child = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                           timeout=180)
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
    assert child.stdout.split() == ["saved", "1", "saved", "2"]
    assert (tmp_path / "model_iter-3_temp").is_dir()  # killed while TF was writing checkpoint 3
    assert "model_iter-3" not in (tmp_path / "checkpoint").read_text()

    model, optimizer = make_model_and_optimizer(seed=5, hidden=4096, inputs=1024)
    saver = TrainingCheckpointer(tmp_path, model, optimizer)
    assert saver.restore_latest() == str(tmp_path / "model_iter-2")
    assert_state(model, optimizer, 2)
    assert not (tmp_path / "model_iter-3_temp").exists()  # the interrupted write is cleaned up
    set_state(model, optimizer, 3)
    assert saver.save() == str(tmp_path / "model_iter-3")  # and saving goes on


def test_damaged_latest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    model, optimizer = make_model_and_optimizer(seed=0)
    saver = TrainingCheckpointer(tmp_path, model, optimizer)
    for value in (1, 2):
        set_state(model, optimizer, value)
        saver.save()
    data = tmp_path / "model_iter-2.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])

    model2, optimizer2 = make_model_and_optimizer(seed=1)
    assert TrainingCheckpointer(tmp_path, model2, optimizer2).restore_latest() == str(tmp_path / "model_iter-1")
    assert_state(model2, optimizer2, 1)

    (tmp_path / "model_iter-1.index").write_bytes(b"not an index")
    with pytest.raises(RuntimeError, match="No readable checkpoint"):
        TrainingCheckpointer(tmp_path, *make_model_and_optimizer(seed=1)).restore_latest()


def test_keeps_the_last_n_checkpoints(tmp_path):
    model, optimizer = make_model_and_optimizer(seed=0)
    saver = TrainingCheckpointer(tmp_path, model, optimizer, max_to_keep=2)
    for value in (1, 2, 3):
        set_state(model, optimizer, value)
        saver.save()
    assert sorted(p.name for p in tmp_path.glob("*.index")) == ["model_iter-2.index", "model_iter-3.index"]


def test_non_finite_losses_raise_naming_iteration_and_terms():
    check_finite_losses({"loss_cls": 0.5, "loss_bbox": np.float32(0.1)}, 7)
    with pytest.raises(NonFiniteLossError) as error:
        check_finite_losses({"loss_cls": 0.5, "loss_bbox": float("nan"), "loss_rpn_cls": np.float32("inf")}, 123)
    message = str(error.value)
    assert message == ("Loss is not finite at iteration 123: loss_bbox=nan, loss_rpn_cls=inf; "
                       "no checkpoint written for it")


def test_no_checkpoint_of_non_finite_weights(tmp_path):
    model, optimizer = make_model_and_optimizer(seed=0)
    saver = TrainingCheckpointer(tmp_path, model, optimizer)
    set_state(model, optimizer, 1)
    saver.save()
    files = sorted(p.name for p in tmp_path.iterdir())
    model.get_layer("fc6").kernel.assign(np.full((3, 4), np.nan, np.float32))
    optimizer.iterations.assign(2)
    with pytest.raises(NonFiniteLossError, match="Not saving at iteration 2: non-finite values in fc6/kernel"):
        saver.save()
    assert sorted(p.name for p in tmp_path.iterdir()) == files
    assert saver.manager.latest_checkpoint == str(tmp_path / "model_iter-1")


def test_snapshot_period_is_detectrons():
    cfg = load_config(overrides=["TRAIN.SNAPSHOT_ITERS", "20", "NUM_GPUS", "2"])
    assert snapshot_period(cfg) == 10
    assert [it for it in range(30) if is_snapshot_iteration(cfg, it, start_iter=0)] == [9, 19, 29]
    assert not is_snapshot_iteration(cfg, 9, start_iter=9)  # not right after resuming there
