"""The mirrored DA pipeline gives every replica a source and a target image; (slow) one domain-adaptation training
step of the tiny DA Faster R-CNN under `default` and `mirrored` (two logical CPUs) gives the same update on the
same global batch, and the same under `multi_worker`, two worker processes."""

import json
import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from support.child_processes import free_ports, run_in_children
from support.paths import REPO_ROOT
from support.strategy_equivalence import assert_same_step, default_and_mirrored
from support.training_fixtures import AFFINE_BODY, shapes_images, shapes_roidb, zeroed_rpn_step
from tfdet.config import load_config
from tfdet.data import shapes
from tfdet.data.domain_pipeline import build_domain_dataset, target_image_records
from tfdet.data.roidb import Roidb
from tfdet.engine.strategy import build_strategy
from tfdet.engine.trainer import Trainer

DA_CONFIG = REPO_ROOT / "configs" / "shapes_tiny_da_faster.yaml"
# AFFINE_BODY (Detectron's AffineChannel body, plain-conv heads): at random initialisation GN's backward pass
# amplifies the float rounding that differs between convolving 4 images and 2 into visible update differences
# (see tests/test_trainer.py); with AffineChannel the two agree to ~1e-6.
# Every proposal survives the FPN collect (at most 4 x 200 + 12 per image, 4 images on one device), and the
# RPN output layers start at zero (proposals = anchors ranked by index on any split of the batch); every
# image fills its 64 RoI slots, so each replica's loss normalisers are half the single device's.
ALL_PROPOSALS = ("TRAIN.RPN_POST_NMS_TOP_N", "4000")
ALL_WEIGHTS_TOLERANCE = 1e-5
PER_WEIGHT_TOLERANCE = 2e-3
# One device's batch [s0, t0, s1, t1]: replica k of two gets [s_k, t_k] with the same per-image seeds (the
# pipeline's batch of 4 is [s0, s1, t0, t1]).
REPLICA_ORDER = [0, 2, 1, 3]
DA_CLASSIFIER_WEIGHTS = ("res2_conv1_da_w", "res3_conv1_da_w", "fc1_da_w", "fc3_da_w")


def da_cfg(*overrides):
    return load_config(DA_CONFIG, list(overrides))


def domain_roidbs(data_dir):
    data_dir = pathlib.Path(data_dir)
    source = shapes_roidb(data_dir / "source", min_objects=2, generate=False)
    target_json, target_images = shapes.split_paths(data_dir / "target", "train")
    target = Roidb(target_image_records(target_json, target_images), (), ("__background__",), None, (), 0)
    return source, target


def global_batch(data_dir):
    """(source roidb, target roidb, the pipeline's 2 + 2 image batch of `data_dir` in REPLICA_ORDER)."""
    source, target = domain_roidbs(data_dir)
    batch = next(iter(build_domain_dataset(da_cfg("TRAIN.IMS_PER_BATCH", "4"), source, target, flip=False)))
    return source, target, {name: tf.gather(value, REPLICA_ORDER) for name, value in batch.items()}


def da_data(root):
    """Source (8 shapes images) and foggy target (4) folders under `root`/data, generated."""
    shapes_images(root / "data" / "source", num_images=8)
    shapes.generate(root / "data" / "target", 4, seed=11, image_size=96, split_name="train", style="foggy")
    return root / "data"


def test_mirrored_pipeline_gives_each_replica_a_source_and_a_target_image(tmp_path):
    """The DA pipeline under `mirrored` (two logical CPUs): each replica's batch is [source, target], as the
    one-device batch is [s0, s1, t0, t1] (the step's equivalence on such batches: the slow test below)."""
    source, target = domain_roidbs(da_data(tmp_path))
    for split, expected in ((("TRAIN.IMS_PER_BATCH", "4"), [[True, True, False, False]]),
                            (("TRAIN.IMS_PER_BATCH", "2", "NUM_GPUS", "2"), [[True, False], [True, False]])):
        cfg = da_cfg(*AFFINE_BODY, *split)
        trainer = Trainer(cfg, tmp_path / f"replicas{len(expected)}", strategy=build_strategy(cfg), roidb=source,
                          target_roidb=target, progress=False)
        batch = next(iter(trainer.distributed_dataset(0)))
        flags = [t.numpy() for t in trainer.strategy.experimental_local_results(batch["is_source"])]
        assert trainer.strategy.num_replicas_in_sync == len(expected)
        np.testing.assert_array_equal(np.stack(flags), expected)


# Slow (the DA step traced for one device and for two replicas, ~22 s of a core). By default the mirrored step of the
# detector is tests/test_trainer.py's (the same Trainer, strategy and loss normalisation), and the pipeline's
# replica batches are the test above.
@pytest.mark.slow
def test_one_da_step_mirrored_over_two_cpus_equals_one_device_on_the_global_batch(tmp_path):
    """One DA step on the 2 + 2 image global batch under each strategy (`default`: one device; `mirrored`: two
    logical CPUs), with the domain flags each replica's batch from the real pipeline holds."""
    source, target, batch = global_batch(da_data(tmp_path))
    steps = {}
    for strategy_name, split, dataset in default_and_mirrored(batch):
        cfg = da_cfg(*AFFINE_BODY, *ALL_PROPOSALS, *split)
        trainer = Trainer(cfg, tmp_path / strategy_name, strategy=build_strategy(cfg), roidb=source,
                          target_roidb=target, progress=False)
        pipeline_batch = next(iter(trainer.distributed_dataset(0)))
        replica_flags = [t.numpy() for t in trainer.strategy.experimental_local_results(pipeline_batch["is_source"])]
        steps[strategy_name] = dict(zeroed_rpn_step(trainer, dataset), replica_flags=np.stack(replica_flags))
    single, mirrored = steps["default"], steps["mirrored"]
    np.testing.assert_array_equal(single["replica_flags"], [[True, True, False, False]])
    np.testing.assert_array_equal(mirrored["replica_flags"], [[True, False], [True, False]])

    outputs = {"output/loss_rpn_cls", "output/loss_cls", "output/loss_da_image", "output/loss_da_instance",
               "output/loss_da_consistency"}
    updates = assert_same_step(single, mirrored, outputs, PER_WEIGHT_TOLERANCE, ALL_WEIGHTS_TOLERANCE)
    # The shipped config's image-level classifiers sit on res2 and res3 (TFDET.DA_IMG_FEATURES).
    assert {"res2_conv1_da_w", "res3_conv2_da_w", "fc3_da_w"} <= set(updates)
    assert min(np.abs(updates[blob][0]).max() for blob in DA_CLASSIFIER_WEIGHTS) > 0


def multi_worker_child_main(data_dir, out_dir):
    """Child: one worker of a 2-worker cluster (TF_CONFIG in the environment), or the one-device step when there
    is no TF_CONFIG: one DA step from the zeroed-RPN start on its share of the 2 + 2 image global batch (worker k:
    [s_k, t_k]); the record and the domain flags of its batch from the real pipeline go to out_dir/<name>.npz."""
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"] if "TF_CONFIG" in os.environ else None
    if task is None:
        name, split = "default", ("TRAIN.IMS_PER_BATCH", "4")
    else:
        name, split = f"worker{task}", ("TFDET.STRATEGY", "multi_worker", "NUM_GPUS", "2", "TRAIN.IMS_PER_BATCH", "2")
    cfg = da_cfg(*AFFINE_BODY, *ALL_PROPOSALS, *split)
    strategy = build_strategy(cfg)  # before any other TensorFlow op: collectives are configured at start-up
    source, target, batch = global_batch(data_dir)
    share = batch if task is None else {key: value[2 * task:2 * task + 2] for key, value in batch.items()}
    trainer = Trainer(cfg, pathlib.Path(out_dir) / name, strategy=strategy, roidb=source, target_roidb=target,
                      progress=False)
    pipeline_batch = next(iter(trainer.distributed_dataset(0)))
    flags = [t.numpy() for t in trainer.strategy.experimental_local_results(pipeline_batch["is_source"])]
    np.savez(pathlib.Path(out_dir) / f"{name}.npz", **zeroed_rpn_step(trainer, tf.data.Dataset.from_tensors(share)),
             replica_flags=np.stack(flags))


# Slow (three processes tracing the DA step side by side, as the detector's multi-worker test of test_trainer.py).
@pytest.mark.slow
def test_one_da_step_on_two_workers_equals_one_device_on_the_global_batch(tmp_path):
    data_dir = da_data(tmp_path)
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    envs = [{"TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})}
            for i in range(2)] + [{}]
    run_in_children("test_domain_adaptation_strategy", "multi_worker_child_main",
                    [(str(data_dir), str(tmp_path))] * 3, envs)
    single, first, second = (np.load(tmp_path / f"{name}.npz") for name in ("default", "worker0", "worker1"))
    np.testing.assert_array_equal(single["replica_flags"], [[True, True, False, False]])
    for worker in (first, second):  # each worker's pipeline: one source and one target image
        np.testing.assert_array_equal(worker["replica_flags"], [[True, False]])
    for name in first.files:
        if name.startswith(("initial/", "updated/", "output/")):
            np.testing.assert_array_equal(first[name], second[name], err_msg=name)  # all-reduced: one model
    outputs = {"output/loss_rpn_cls", "output/loss_cls", "output/loss_da_image", "output/loss_da_instance",
               "output/loss_da_consistency", "output/da_img_acc", "output/da_ins_acc"}
    updates = assert_same_step(single, first, outputs, PER_WEIGHT_TOLERANCE, ALL_WEIGHTS_TOLERANCE)
    assert min(np.abs(updates[blob][0]).max() for blob in DA_CLASSIFIER_WEIGHTS) > 0
