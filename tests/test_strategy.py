"""Strategies: `mirrored` over 2 logical CPUs and `multi_worker` over 2 local processes apply the same
update as `default` on the same global batch (the workers are child processes running this module's functions)."""

import json
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from support.child_processes import free_ports, run_in_children
from tfdet.config import Config, get_default_config
from tfdet.engine.checkpoint import TrainingCheckpointer
from tfdet.engine.optimizer import build_optimizer
from tfdet.engine.strategy import (
    build_strategy,
    global_batch_size,
    is_chief,
    make_logical_cpus,
    replica_mean,
    scale_replica_loss,
    strategy_name,
)

GLOBAL_BATCH = 4
STEPS = 3
# Mirrored and single-device sums differ only in float32 rounding order.
TOLERANCE = dict(rtol=1e-5, atol=1e-6)


def strategy_cfg(num_gpus, strategy=None):
    """Defaults + a 3-iteration schedule with warm-up and an LR step (momentum correction), 2 images per replica."""
    tree = get_default_config().to_dict()
    tree["NUM_GPUS"] = num_gpus
    tree["TRAIN"]["IMS_PER_BATCH"] = GLOBAL_BATCH // num_gpus
    tree["SOLVER"].update(LR_POLICY="steps_with_decay", BASE_LR=0.1, STEPS=[0, 2], MAX_ITER=STEPS, WARM_UP_ITERS=2,
                          WARM_UP_FACTOR=0.5, WEIGHT_DECAY=0.01)
    if strategy is not None:
        tree["TFDET"]["STRATEGY"] = strategy  # the key tfdet.engine.strategy reads; not in the defaults yet
    return Config(tree)


def global_batches():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(STEPS * GLOBAL_BATCH, 3)).astype(np.float32)
    y = rng.normal(size=(STEPS * GLOBAL_BATCH, 2)).astype(np.float32)
    return x, y


def replica_dataset(input_context):
    """This input pipeline's share of each global batch, as per-replica batches in replica order."""
    per_replica = input_context.get_per_replica_batch_size(GLOBAL_BATCH)
    local_rows = input_context.num_replicas_in_sync // input_context.num_input_pipelines * per_replica
    first = input_context.input_pipeline_id * local_rows
    dataset = tf.data.Dataset.from_tensor_slices(global_batches()).batch(GLOBAL_BATCH)
    dataset = dataset.map(lambda x, y: (x[first:first + local_rows], y[first:first + local_rows]))
    return dataset.unbatch().batch(per_replica)


def train_tiny_model(strategy, cfg):
    """STEPS iterations of Detectron's SGD on a 2-layer model.

    Returns (weights, mean loss of each step, rows per local replica, model, optimizer).
    """
    with strategy.scope():
        inputs = keras.Input((3,))
        hidden = keras.layers.Dense(4, activation="relu", name="fc6")(inputs)
        model = keras.Model(inputs, keras.layers.Dense(2, name="cls_score")(hidden))
        rng = np.random.default_rng(0)
        model.set_weights([rng.normal(size=w.shape).astype(np.float32) for w in model.weights])
        optimizer = build_optimizer(cfg, model)
    iterator = iter(strategy.distribute_datasets_from_function(replica_dataset))

    @tf.function
    def train_step(batch):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
                scaled = scale_replica_loss(loss)
            gradients = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            return loss, tf.shape(x)[0]

        return strategy.run(replica_step, args=batch)

    losses = []
    for _ in range(STEPS):
        loss, rows = train_step(next(iterator))
        losses.append(replica_mean(strategy, {"loss": loss})["loss"])
    rows = [int(r) for r in strategy.experimental_local_results(rows)]
    return [w.numpy() for w in model.weights], losses, rows, model, optimizer


def multi_worker_child_main(out_dir):
    """Child: one worker of a 2-worker cluster (TF_CONFIG in the environment); weights and checkpoint to out_dir."""
    cfg = strategy_cfg(2, strategy="multi_worker")
    strategy = build_strategy(cfg)
    weights, losses, rows, model, optimizer = train_tiny_model(strategy, cfg)
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    TrainingCheckpointer(os.path.join(out_dir, "checkpoints"), model, optimizer, strategy=strategy).save()
    np.savez(os.path.join(out_dir, f"worker{task}.npz"), *weights, losses=np.array(losses), rows=np.array(rows),
             chief=np.array(is_chief(strategy)),
             multi_worker=np.array(isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)))


def test_mirrored_over_two_logical_cpus_applies_the_single_device_update():
    """default on 1 device, then mirrored over 2 logical CPUs, on the same batches."""
    single, single_losses, single_rows, _, _ = train_tiny_model(build_strategy(strategy_cfg(1)), strategy_cfg(1))
    strategy = build_strategy(strategy_cfg(2))
    mirrored, mirrored_losses, mirrored_rows, _, _ = train_tiny_model(strategy, strategy_cfg(2))
    assert type(strategy).__name__ == "MirroredStrategy"
    assert [d.split("/")[-1] for d in strategy.extended.worker_devices] == ["device:CPU:0", "device:CPU:1"]
    assert single_rows + mirrored_rows == [4, 2, 2]  # the global batch: 4 rows on one device, 2 + 2 on two replicas
    for one, two in zip(single, mirrored):
        assert not np.array_equal(one, np.random.default_rng(0).normal(size=one.shape))  # trained
        np.testing.assert_allclose(two, one, **TOLERANCE)
    np.testing.assert_allclose(mirrored_losses, single_losses, **TOLERANCE)


def test_multi_worker_two_processes_end_with_identical_weights(tmp_path):
    """2 worker processes on 127.0.0.1 (MultiWorkerMirroredStrategy), 3 steps: same weights, equal to one device."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    envs = [{"TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})}
            for i in range(2)]
    run_in_children("test_strategy", "multi_worker_child_main", [(str(tmp_path),)] * 2, envs, timeout=150)
    results = [np.load(tmp_path / f"worker{i}.npz") for i in range(2)]
    assert [bool(r["multi_worker"]) for r in results] == [True, True]
    assert [bool(r["chief"]) for r in results] == [True, False]
    assert [r["rows"].tolist() for r in results] == [[2], [2]]
    for i in range(4):
        np.testing.assert_array_equal(results[0][f"arr_{i}"], results[1][f"arr_{i}"])

    single, single_losses, _, _, _ = train_tiny_model(tf.distribute.get_strategy(), strategy_cfg(1))
    for i, expected in enumerate(single):
        np.testing.assert_allclose(results[0][f"arr_{i}"], expected, **TOLERANCE)
    np.testing.assert_allclose(results[0]["losses"], single_losses, **TOLERANCE)
    # only the chief wrote a checkpoint
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "checkpoint", f"model_iter-{STEPS}.data-00000-of-00001", f"model_iter-{STEPS}.index"]


def test_strategy_name_defaults_by_num_gpus_and_rejects_unknown_names():
    assert strategy_name(strategy_cfg(1)) == "default"
    assert strategy_name(strategy_cfg(2)) == "mirrored"
    assert strategy_name(strategy_cfg(4, strategy="multi_worker")) == "multi_worker"
    with pytest.raises(ValueError, match="Unknown TFDET.STRATEGY 'horovod'; expected one of default, mirrored"):
        strategy_name(strategy_cfg(1, strategy="horovod"))


def test_build_strategy_checks_replicas_and_environment(monkeypatch):
    strategy = build_strategy(strategy_cfg(1))
    assert strategy.num_replicas_in_sync == 1 and is_chief(strategy)
    assert global_batch_size(strategy_cfg(1), strategy) == GLOBAL_BATCH
    with pytest.raises(ValueError, match="NUM_GPUS is 2 but the default strategy has 1 replica"):
        build_strategy(strategy_cfg(2, strategy="default"))
    if not tf.config.list_logical_devices("GPU"):
        cpus = len(tf.config.list_logical_devices("CPU"))  # the test processes' split (conftest.py)
        # the command-line overrides for 1 device: the learning rate / (cpus + 1), the iterations x (cpus + 1)
        n = cpus + 1
        advice = f'NUM_GPUS 1 SOLVER.BASE_LR {0.1 / n:g} SOLVER.MAX_ITER {3 * n} SOLVER.STEPS "[0, {2 * n}]"'
        with pytest.raises(ValueError, match=rf"^NUM_GPUS is {n} but this machine has no GPU: .* {re.escape(advice)} "):
            build_strategy(strategy_cfg(n))
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="reads the cluster from TF_CONFIG, which is not set"):
        build_strategy(strategy_cfg(2, strategy="multi_worker"))


def test_make_logical_cpus_after_initialisation_is_a_clear_error():
    tf.config.list_logical_devices()  # initialises the devices of this process
    with pytest.raises(RuntimeError, match=r"make_logical_cpus\(2\) must run before TensorFlow initialises"):
        make_logical_cpus(2)
