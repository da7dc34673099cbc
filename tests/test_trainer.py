"""The training loop: one step of the tiny Mask + Keypoint R-CNN under `default` and `mirrored` (two logical
CPUs) gives the same update on the same global batch; TRAIN.WEIGHTS initialisation;
(slow) two multi_worker processes train to identical weights; the tiny model overfits 8 shapes images."""

import json
import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from support.child_processes import free_ports, run_in_children
from support.strategy_equivalence import assert_same_step, default_and_mirrored
from support.training_fixtures import (
    AFFINE_BODY,
    ONE_SAMPLE_ROI_ALIGN,
    first_batch,
    functions_run_eagerly,
    shapes_images,
    shapes_roidb,
    tiny_cfg,
    weights_by_blob,
    zeroed_rpn_step,
)
from tfdet.data.roidb import load_coco_roidb
from tfdet.engine.checkpoint import TrainingCheckpointer
from tfdet.engine.optimizer import build_optimizer
from tfdet.engine.strategy import build_strategy
from tfdet.engine.trainer import Trainer, image_seeds
from tfdet.engine.weights import export_final_weights, load_initial_weights
from tfdet.evaluate import predict_dataset
from tfdet.evaluation import evaluate_results, load_coco
from tfdet.modeling import build_model

MASK_HEAD = "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs_gn"

# The mirrored-vs-one-device comparison needs the AffineChannel body: at random initialisation GroupNorm's
# backward pass amplifies the float32 rounding that differs between convolving 2 images and 1 (~1e-7) to ~4%
# of the body's update (measured), which would hide real differences; with AffineChannel one device and two
# replicas agree to ~1e-6.
# Settings under which Detectron's per-replica normalisers add up to the single-device ones, so that the
# mean of the two replicas' losses is the loss of one device on both images (tfdet.engine.strategy):
# every proposal survives the FPN collect (at most 4 x 200 + 12 per image, 2000 kept per batch), every
# image fills its 64 RoI slots and its 2 foreground slots (each image has >= 2 objects), and the keypoint
# loss uses Detectron's fixed normaliser instead of the count of visible keypoints.
EQUIVALENT_NORMALISERS = (
    "TRAIN.RPN_POST_NMS_TOP_N", "2000", "TRAIN.FG_FRACTION", "0.03125",
    "KRCNN.NORMALIZE_BY_VISIBLE_KEYPOINTS", "False",
)
# Tolerances on the updates (two replicas - one device), relative L2 norms: of all weights together, and
# of each weight tensor (small biases with tiny updates reach a few 1e-4).
ALL_WEIGHTS_TOLERANCE = 1e-5
PER_WEIGHT_TOLERANCE = 2e-3


# The tiny config without its mask and keypoint heads and with one RoIAlign sample per bin (a Faster R-CNN:
# each worker traces a smaller step), 2 workers x 1 image, 2 iterations. (GroupNorm kept: from random weights
# the AffineChannel body's losses grow too fast for several iterations.)
MULTI_WORKER_MODEL = ("MODEL.MASK_ON", "False", "MODEL.KEYPOINTS_ON", "False", *ONE_SAMPLE_ROI_ALIGN)
MULTI_WORKER = (*MULTI_WORKER_MODEL, "TFDET.STRATEGY", "multi_worker", "NUM_GPUS", "2", "TRAIN.IMS_PER_BATCH", "1",
                "SOLVER.MAX_ITER", "2", "TRAIN.SNAPSHOT_ITERS", "100000")


def multi_worker_child_main(data_dir, out_dir):
    """Child: one worker of a 2-worker cluster (TF_CONFIG in the environment) trains the tiny Faster R-CNN for
    2 iterations with `Trainer`, 1 image per worker; its final weights by blob name go to out_dir/worker<i>.npz."""
    from tfdet.engine.strategy import is_chief

    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    cfg = tiny_cfg(*MULTI_WORKER)
    roidb = shapes_roidb(data_dir, generate=False)
    trainer = Trainer(cfg, pathlib.Path(out_dir) / f"run{task}", roidb=roidb, progress=False)
    trainer.initialize()
    result = trainer.train()
    np.savez(pathlib.Path(out_dir) / f"worker{task}.npz", **weights_by_blob(trainer.model, cfg.MRCNN.ROI_MASK_HEAD),
             end_iter=result.end_iter, chief=is_chief(trainer.strategy),
             replicas=trainer.strategy.num_replicas_in_sync)


def test_one_step_mirrored_over_two_cpus_equals_one_device_on_the_global_batch(tmp_path):
    """One step of the tiny model on a 2-image global batch under each strategy, each from the weights RNG_SEED
    draws: `default`, one device, TRAIN.IMS_PER_BATCH 2; `mirrored`, two logical CPUs, image k on replica k."""
    shapes_images(tmp_path / "shapes", num_images=8)
    batch = first_batch(tiny_cfg(), shapes_roidb(tmp_path / "shapes", min_objects=2, generate=False))
    steps = {}
    for strategy_name, split, dataset in default_and_mirrored(batch):
        cfg = tiny_cfg(*AFFINE_BODY, *EQUIVALENT_NORMALISERS, *split)
        trainer = Trainer(cfg, tmp_path / strategy_name, strategy=build_strategy(cfg), progress=False)
        # The one-device reference runs op by op; the mirrored step is traced, as training runs it.
        with functions_run_eagerly(strategy_name == "default"):
            steps[strategy_name] = dict(zeroed_rpn_step(trainer, dataset, cfg.MRCNN.ROI_MASK_HEAD),
                                        iteration=trainer.iteration)
    single, mirrored = steps["default"], steps["mirrored"]
    assert int(single["iteration"]) == int(mirrored["iteration"]) == 1
    outputs = {"output/loss_rpn_cls", "output/loss_cls", "output/loss_mask", "output/loss_kps"}
    assert_same_step(single, mirrored, outputs, PER_WEIGHT_TOLERANCE, ALL_WEIGHTS_TOLERANCE)


# Slow (two worker processes tracing the detector's step side by side, ~45 s of both cores). By default
# multi_worker is covered by tests/test_strategy.py (two worker processes: identical weights equal to one
# device's, only the chief checkpoints) and Trainer under a distribution strategy by the mirrored test above.
@pytest.mark.slow
def test_multi_worker_two_processes_train_the_tiny_model_to_identical_weights(tmp_path):
    shapes_images(tmp_path / "shapes", num_images=8)
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    envs = [{"TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})}
            for i in range(2)]
    run_in_children("test_trainer", "multi_worker_child_main", [(str(tmp_path / "shapes"), str(tmp_path))] * 2, envs)
    first, second = (np.load(tmp_path / f"worker{i}.npz") for i in range(2))
    assert [int(first["replicas"]), int(second["replicas"])] == [2, 2]
    assert [int(first["end_iter"]), int(second["end_iter"])] == [2, 2]
    assert [bool(first["chief"]), bool(second["chief"])] == [True, False]
    blobs = [name for name in first.files if name not in ("end_iter", "chief", "replicas")]
    assert len(blobs) > 100
    for name in blobs:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    initial = Trainer(tiny_cfg(*MULTI_WORKER_MODEL), tmp_path / "initial", roidb=[], progress=False).model
    initial_weights = weights_by_blob(initial, MASK_HEAD)
    moved = [name for name, value in initial_weights.items() if not np.array_equal(value, first[name])]
    assert len(moved) > len(blobs) // 2  # the workers really trained (from the same RNG_SEED start)
    assert (tmp_path / "run0" / "model_final.weights.h5").is_file()
    assert not (tmp_path / "run1" / "model_final.weights.h5").exists()  # only the chief writes


def test_image_seeds_number_images_across_replicas():
    seeds = tf.distribute.get_strategy().run(lambda: image_seeds(7, tf.constant(5), 4, 4))
    np.testing.assert_array_equal(seeds, [[7, 20], [7, 21], [7, 22], [7, 23]])


@pytest.fixture(scope="module")
def trained_like_model():
    """A tiny training model whose weights differ from a fresh model's (a fixed random perturbation)."""
    model = build_model(tiny_cfg(), training=True)
    rng = np.random.default_rng(0)
    for variable in model.trainable_variables:
        variable.assign(variable.numpy() + rng.normal(scale=0.01, size=variable.shape).astype(np.float32))
    return model


def assert_same_weights(model, expected):
    got, want = weights_by_blob(model, MASK_HEAD), weights_by_blob(expected, MASK_HEAD)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_train_weights_from_our_final_weights_file(trained_like_model, tmp_path):
    cfg = tiny_cfg()
    path = export_final_weights(cfg, trained_like_model, tmp_path)
    model = build_model(cfg, training=True)
    load_initial_weights(model, cfg, path)
    assert_same_weights(model, trained_like_model)


def test_train_weights_from_a_detectron_pkl_backbone(trained_like_model, tmp_path):
    """An ImageNet-style .pkl (backbone blobs only): the body is loaded, the heads keep their initialisation."""
    from porting.detectron_writer import model_to_blobs, write_detectron_pkl

    cfg = tiny_cfg()
    blobs = {n: b for n, b in model_to_blobs(trained_like_model, MASK_HEAD).items() if n.startswith(("conv1", "res"))}
    write_detectron_pkl(tmp_path / "R-50-tiny.pkl", blobs, None)
    model = build_model(cfg, training=True)
    fresh_heads = {n: v for n, v in weights_by_blob(model, MASK_HEAD).items() if n.startswith(("fc6", "conv_rpn"))}
    load_initial_weights(model, cfg, str(tmp_path / "R-50-tiny.pkl"))
    loaded, expected = weights_by_blob(model, MASK_HEAD), weights_by_blob(trained_like_model, MASK_HEAD)
    for name in ("conv1_w", "conv1_gn_s", "res4_5_branch2b_w", "res5_2_branch2c_gn_b"):
        np.testing.assert_array_equal(loaded[name], expected[name], err_msg=name)
    for name, value in fresh_heads.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)


def test_train_weights_from_a_training_checkpoint(trained_like_model, tmp_path):
    """A checkpoint of TrainingCheckpointer (model + optimizer): the model part, from its prefix or its folder."""
    saved = TrainingCheckpointer(tmp_path, trained_like_model, build_optimizer(tiny_cfg(), trained_like_model)).save()
    for path in (saved, tmp_path):
        model = build_model(tiny_cfg(), training=True)
        load_initial_weights(model, tiny_cfg(), str(path))
        assert_same_weights(model, trained_like_model)


def test_unknown_train_weights_is_a_clear_error(tmp_path):
    model = build_model(tiny_cfg("MODEL.MASK_ON", "False", "MODEL.KEYPOINTS_ON", "False"), training=True)
    with pytest.raises(FileNotFoundError, match="neither a Detectron .pkl, a .weights.h5 file nor a tfdet training"):
        load_initial_weights(model, tiny_cfg(), str(tmp_path / "nothing.bin"))


# Overfitting 8 shapes images (no flips): constant LR 0.04 after a short warm-up, then two decays, at
# the images' own size (192 px, not the config's 128) with Detectron's default RoI geometry (14x14 RoIs:
# 28x28 masks, 56x56 keypoint heatmaps), fine enough for IoU 0.95 on these small objects (the config's
# 14x14 masks on 128-px images cap segm AP at 0.88). 2500 iterations: 42 min on 2 cores shared with other
# jobs, hence `slow`.
OVERFIT = (
    "SOLVER.MAX_ITER", "2500", "SOLVER.STEPS", "[0, 1800, 2300]", "SOLVER.BASE_LR", "0.04",
    "SOLVER.WARM_UP_ITERS", "50", "TRAIN.USE_FLIPPED", "False", "TRAIN.SNAPSHOT_ITERS", "100000",
    "TRAIN.SCALES", "(192,)", "TRAIN.MAX_SIZE", "192", "TEST.SCALE", "192", "TEST.MAX_SIZE", "192",
    "MRCNN.ROI_XFORM_RESOLUTION", "14", "MRCNN.RESOLUTION", "28", "KRCNN.ROI_XFORM_RESOLUTION", "14",
    "KRCNN.HEATMAP_SIZE", "56",
)


@pytest.mark.slow
def test_tiny_mask_keypoint_model_overfits_eight_shapes_images(tmp_path):
    json_path, image_dir = shapes_images(tmp_path / "shapes", num_images=8)
    cfg = tiny_cfg(*OVERFIT, "OUTPUT_DIR", str(tmp_path / "run"))
    roidb = load_coco_roidb(json_path, image_dir, with_masks=True, keypoints_required=True)
    trainer = Trainer(cfg, roidb=roidb, progress=False)
    trainer.initialize()
    result = trainer.train()
    assert result.end_iter == 2500

    last = [json.loads(line) for line in (tmp_path / "run" / "metrics.json").read_text().splitlines()][-1]
    # Measured at the end: loss 0.62 (keypoints 0.53 of it: a 56x56 spatial softmax), mask 0.052.
    assert last["loss"] < 1.0 and last["loss_kps"] < 0.9 and last["loss_mask"] < 0.08
    assert max(last[name] for name in ("loss_rpn_cls", "loss_rpn_bbox", "loss_cls", "loss_bbox")) < 0.05

    coco = load_coco(json_path)
    results, unreadable = predict_dataset(cfg, result.final_weights, coco, image_dir)
    assert not unreadable
    metrics = evaluate_results(coco, results, ["bbox", "segm", "keypoints"])
    # AP moves in steps here: the 8 images hold 26 objects (9 squares, 11 circles, 6 triangles), and COCO's AP50
    # is the mean over the 3 classes of 101-point precision. One triangle never found caps its class at 84/101:
    # AP50 0.944; found after a false triangle, 0.9345 (what a 2-core AVX-512 machine measured, its losses within
    # their limits); two triangles missed: 0.888. Which single object of the 26 lands just under IoU 0.5 differs
    # between machines (2500 iterations of SGD amplify each CPU's rounding), so the test allows one and no more.
    # Measured AP50 1.0 for all three types on two machines; AP bbox 0.952 / 0.947, segm 0.909 / 0.879 (2-core
    # AVX2, 2026-11-29), keypoints 0.717 / 0.747 (OKS 0.5:0.95 with sigma 0.05 asks sub-pixel keypoints of
    # 20-60 px objects at its top thresholds): the AP limits sit a missed triangle (0.05) and that spread (0.03)
    # below the lower value.
    assert min(metrics[iou_type]["AP50"] for iou_type in ("bbox", "segm", "keypoints")) >= 0.9
    assert metrics["bbox"]["AP"] >= 0.85 and metrics["segm"]["AP"] >= 0.8 and metrics["keypoints"]["AP"] >= 0.6
