"""One domain-adaptation training step of the tiny DA Faster R-CNN under `default` and `mirrored` (two logical
CPUs, in a child process) gives the same update on the same global batch, and the mirrored pipeline gives every
replica a source and a target image."""

import pathlib

import numpy as np
import tensorflow as tf
from child_processes import run_in_children
from strategy_equivalence import assert_same_step, default_and_mirrored, load_steps
from training_fixtures import AFFINE_BODY, REPO_ROOT, shapes_images, shapes_roidb, zeroed_rpn_step

from tfdet.config import load_config
from tfdet.data import shapes
from tfdet.data.domain_pipeline import build_domain_dataset, target_image_records
from tfdet.data.roidb import Roidb

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


def da_cfg(*overrides):
    return load_config(DA_CONFIG, list(overrides))


def domain_roidbs(data_dir):
    data_dir = pathlib.Path(data_dir)
    source = shapes_roidb(data_dir / "source", min_objects=2, generate=False)
    target_json, target_images = shapes.split_paths(data_dir / "target", "train")
    target = Roidb(target_image_records(target_json, target_images), (), ("__background__",), None, (), 0)
    return source, target


def step_child_main(data_dir, out_dir):
    """Child: one DA step on the 2 + 2 image global batch of `data_dir` under each strategy (`default`: one
    device; `mirrored`: 2 logical CPUs), in one process (one TensorFlow start-up); writes weights, outputs and
    the domain flags each replica's batch from the real pipeline holds to out_dir/<strategy>.npz."""
    from tfdet.engine.strategy import build_strategy, make_logical_cpus
    from tfdet.engine.trainer import Trainer

    make_logical_cpus(2)
    source, target = domain_roidbs(data_dir)
    batch = next(iter(build_domain_dataset(da_cfg("TRAIN.IMS_PER_BATCH", "4"), source, target, flip=False)))
    batch = {name: tf.gather(value, REPLICA_ORDER) for name, value in batch.items()}
    for strategy_name, split, dataset in default_and_mirrored(batch):
        cfg = da_cfg(*AFFINE_BODY, *ALL_PROPOSALS, *split)
        trainer = Trainer(cfg, pathlib.Path(out_dir) / strategy_name, strategy=build_strategy(cfg),
                          roidb=source, target_roidb=target, progress=False)
        pipeline_batch = next(iter(trainer.distributed_dataset(0)))
        replica_flags = [t.numpy() for t in trainer.strategy.experimental_local_results(pipeline_batch["is_source"])]
        np.savez(pathlib.Path(out_dir) / f"{strategy_name}.npz", **zeroed_rpn_step(trainer, dataset),
                 replica_flags=np.stack(replica_flags))


def test_one_da_step_mirrored_over_two_cpus_equals_one_device_on_the_global_batch(tmp_path):
    shapes_images(tmp_path / "data" / "source", num_images=8)
    shapes.generate(tmp_path / "data" / "target", 4, seed=11, image_size=96, split_name="train", style="foggy")
    run_in_children("test_domain_adaptation_strategy", "step_child_main", [(str(tmp_path / "data"), str(tmp_path))])
    single, mirrored = load_steps(tmp_path)
    np.testing.assert_array_equal(single["replica_flags"], [[True, True, False, False]])
    np.testing.assert_array_equal(mirrored["replica_flags"], [[True, False], [True, False]])

    outputs = {"output/loss_rpn_cls", "output/loss_cls", "output/loss_da_image", "output/loss_da_instance",
               "output/loss_da_consistency"}
    updates = assert_same_step(single, mirrored, outputs, PER_WEIGHT_TOLERANCE, ALL_WEIGHTS_TOLERANCE)
    assert {"conv1_da_w", "fc3_da_w"} <= set(updates)
    assert min(np.abs(updates[blob][0]).max() for blob in ("conv1_da_w", "fc1_da_w", "fc3_da_w")) > 0
