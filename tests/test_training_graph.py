"""The training graph: its contract on a real shapes batch, Detectron names shared with the inference model,
the final-weights round trip through Predictor, freezing, per-image sampling and the FPN proposal collect."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from support.training_fixtures import C4_MASK_RCNN, first_batch, model_inputs, shapes_roidb, tiny_cfg
from tfdet.config import load_config
from tfdet.engine.weights import export_final_weights
from tfdet.inference import Predictor
from tfdet.layers.training_targets import (
    CollectProposals,
    KeypointLoss,
    MaskLoss,
    RPNLosses,
    SampleRoIs,
    SelectedRoIs,
    mask_boxes,
)
from tfdet.modeling import build_model
from tfdet.modeling.detectron_names import model_blobs
from tfdet.modeling.rpn import rpn_levels
from tfdet.modeling.blob_transfer import copy_weights_by_blob_name
from tfdet.modeling.training_graph import loss_terms
from tfdet.ops.losses import keypoint_loss, mask_loss
from tfdet.ops.mask_targets import mask_rcnn_targets, match_masks_to_rois

MASK_HEAD = "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs_gn"
EXPECTED_OUTPUTS = {"loss_rpn_cls", "loss_rpn_bbox", "loss_cls", "loss_bbox", "accuracy_cls", "loss_mask", "loss_kps"}


@pytest.fixture(scope="module")
def cfg():
    return tiny_cfg()


@pytest.fixture(scope="module")
def training_model(cfg):
    keras.utils.set_random_seed(0)  # the initial-loss checks below hold for typical draws, not every one
    return build_model(cfg, training=True)


@pytest.fixture(scope="module")
def batch(cfg, tmp_path_factory):
    roidb = shapes_roidb(tmp_path_factory.mktemp("shapes"), num_images=8, min_objects=2)
    return first_batch(cfg, roidb)


def test_losses_are_detectrons_terms_and_every_trainable_weight_gets_a_gradient(cfg, training_model, batch):
    with tf.GradientTape() as tape:
        outputs = training_model(model_inputs(training_model, batch), training=True)
        total = tf.add_n(list(loss_terms(outputs).values()))
    assert set(outputs) == EXPECTED_OUTPUTS
    assert set(loss_terms(outputs)) == EXPECTED_OUTPUTS - {"accuracy_cls"}
    values = {name: float(value) for name, value in outputs.items()}
    assert all(math.isfinite(v) and v >= 0 for v in values.values()), values
    # Fresh classifier (cls_score ~ N(0, 0.01)): softmax over NUM_CLASSES is nearly uniform.
    assert values["loss_cls"] == pytest.approx(math.log(cfg.MODEL.NUM_CLASSES), abs=0.05)
    # Every image has ground truth, so there are foreground anchors, RoIs, masks and keypoints to learn.
    assert values["loss_rpn_bbox"] > 0 and values["loss_bbox"] > 0 and values["loss_mask"] > 0
    assert values["loss_kps"] > 0

    variables = training_model.trainable_variables
    gradients = tape.gradient(total, variables)
    missing = [v.path for v, g in zip(variables, gradients) if g is None]
    assert not missing
    assert all(bool(tf.reduce_all(tf.math.is_finite(g))) for g in gradients)
    # The fixed bilinear upsampling of the keypoint heatmaps is not trained.
    frozen = {v.path.split("/")[0] for v in training_model.non_trainable_variables}
    assert frozen == {"kps_score"}


def test_training_and_inference_models_carry_the_same_detectron_blobs(cfg, training_model):
    inference_model = build_model(cfg)
    training_blobs = {name: tuple(v.shape) for name, v, _, _ in model_blobs(training_model, MASK_HEAD)}
    inference_blobs = {name: tuple(v.shape) for name, v, _, _ in model_blobs(inference_model, MASK_HEAD)}
    assert training_blobs == inference_blobs
    assert {"conv1_w", "res5_2_branch2c_gn_s", "conv_rpn_fpn2_w", "fc6_w", "_mask_fcn4_w", "kps_score_lowres_w"} <= set(
        training_blobs
    )


def test_final_weights_load_into_predictor(cfg, training_model, tmp_path):
    path = export_final_weights(cfg, training_model, tmp_path)
    assert path == str(tmp_path / "model_final.weights.h5")
    saved_cfg = load_config(tmp_path / "config.yaml")
    assert saved_cfg.to_dict() == cfg.to_dict()
    predictor = Predictor(saved_cfg, path)
    expected = {name: v.numpy() for name, v, _, _ in model_blobs(training_model, MASK_HEAD)}
    loaded = {name: v.numpy() for name, v, _, _ in model_blobs(predictor.model, MASK_HEAD)}
    assert loaded.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)


def test_copy_by_blob_name_refuses_a_different_model(cfg, training_model):
    other = build_model(tiny_cfg("MODEL.NUM_CLASSES", "7"))
    before = [v.numpy() for v in other.weights]
    with pytest.raises(ValueError, match=r"shape mismatch: cls_score_w \(64, 4\) vs \(64, 7\)"):
        copy_weights_by_blob_name(training_model, other, MASK_HEAD)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, other.weights))  # nothing changed


def layer_trainable(model):
    return {layer.name: layer.trainable for layer in model.layers if layer.weights}


def test_freeze_at_and_freeze_conv_body():
    frozen_at_2 = layer_trainable(build_model(tiny_cfg("TRAIN.FREEZE_AT", "2"), training=True))
    assert not frozen_at_2["conv1"] and not frozen_at_2["conv1_gn"] and not frozen_at_2["res2_2_branch2c_gn"]
    assert frozen_at_2["res3_0_branch1"] and frozen_at_2["fpn_inner_res5_2_sum"] and frozen_at_2["fc6"]

    body_frozen = layer_trainable(build_model(tiny_cfg("TRAIN.FREEZE_CONV_BODY", "True"), training=True))
    body = [name for name in body_frozen if name.startswith(("conv1", "res", "fpn_"))]
    heads = [name for name in body_frozen if name not in body and name != "kps_score"]
    assert len(body) > 100 and not any(body_frozen[name] for name in body)
    assert {"conv_rpn_fpn2", "fc6", "cls_score", "mask_fcn1", "conv5_mask", "conv_fcn1"} <= set(heads)
    assert all(body_frozen[name] for name in heads)


def synthetic_proposals(batch, count, rng):
    """`count` random boxes inside each image (input pixels), all valid."""
    height, width = batch["images"].shape[1:3]
    xy = rng.uniform(0, [width - 8, height - 8], size=(2, count, 2))
    size = rng.uniform(8, 60, size=(2, count, 2))
    boxes = np.concatenate([xy, np.minimum(xy + size, [width - 1, height - 1])], axis=-1).astype(np.float32)
    return tf.constant(boxes), tf.ones([2, count], tf.bool)


def gt_valid(batch):
    return tf.range(batch["gt_classes"].shape[1])[None, :] < batch["num_gt"][:, None]


def one_image(values, index):
    return [v[index : index + 1] for v in values]


def test_sampling_depends_on_each_images_seed_only(cfg, batch, rng):
    """An image's RoI and keypoint samples are the same alone or in a batch with another image."""
    proposals, valid = synthetic_proposals(batch, 300, rng)
    seeds = tf.constant([[3, 10], [3, 11]], tf.int64)
    sampler = SampleRoIs(cfg.MODEL.NUM_CLASSES, 64, 0.25, 0.5, 0.5, 0.0, 0.5, (10.0, 10.0, 5.0, 5.0),
                         heatmap_size=cfg.KRCNN.HEATMAP_SIZE)
    inputs = [proposals, valid, batch["gt_boxes"], batch["gt_classes"], batch["gt_is_crowd"], gt_valid(batch),
              batch["image_info"], seeds, batch["gt_keypoints"]]
    together = sampler(inputs)
    assert together["rois"].shape == (2, 64, 4) and together["keypoint_indices"].shape == (2, 16, 5)
    for index in range(2):
        alone = sampler(one_image(inputs, index))
        for name, value in together.items():
            np.testing.assert_array_equal(alone[name][0], value[index], err_msg=name)
    assert (together["labels"].numpy() > 0).sum(axis=1).min() >= 2  # ground truth boxes are foreground
    other_seeds = sampler(inputs[:7] + [seeds + 1] + inputs[8:])
    assert not np.array_equal(other_seeds["rois"], together["rois"])


def test_rpn_losses_of_a_batch_are_the_mean_of_its_images(cfg, batch, rng):
    """FPN normalisation (per image) and per-image seeds: two images together give the mean of their losses."""
    levels = rpn_levels(cfg)
    height, width = batch["images"].shape[1:3]
    level_outputs = []
    for _, stride, cell in levels:
        shape = (2, height // stride, width // stride, len(cell))
        level_outputs.append(tf.constant(rng.normal(size=shape), tf.float32))
        level_outputs.append(tf.constant(rng.normal(scale=0.1, size=shape[:3] + (4 * len(cell),)), tf.float32))
    cells, strides = [cell for *_, cell in levels], [stride for _, stride, _ in levels]
    layer = RPNLosses(cells, strides, 0.7, 0.3, 0, 64, 0.5, fpn=True)
    inputs = level_outputs + [batch["gt_boxes"], batch["gt_is_crowd"], gt_valid(batch), batch["image_info"],
                              tf.constant([[3, 0], [3, 1]], tf.int64)]
    together = [float(v) for v in layer(inputs)]
    alone = [[float(v) for v in layer(one_image(inputs, index))] for index in range(2)]
    np.testing.assert_allclose(together, np.mean(alone, axis=0), rtol=1e-5)
    assert alone[0] != alone[1]


def collect_reference(scores, num_valid, top_n):
    """Numpy: the top_n valid scores of the batch; each image's selected positions in order."""
    entries = [(-scores[b, i], b, i) for b in range(scores.shape[0]) for i in range(num_valid[b])]
    chosen = sorted(entries)[:top_n]
    return [sorted(i for _, image, i in chosen if image == b) for b in range(scores.shape[0])]


def test_fpn_collect_keeps_the_batch_top_n_and_c4_keeps_each_images_own(rng):
    scores = -np.sort(-rng.uniform(size=(3, 8)), axis=1).astype(np.float32)
    scores[1, :3] += 1.0  # image 1 holds most of the best scores
    num_valid = np.array([8, 6, 2], np.int32)
    boxes = np.tile(np.arange(8, dtype=np.float32)[None, :, None], (3, 1, 4)) + 100 * np.arange(3)[:, None, None]
    inputs = [tf.constant(boxes), tf.constant(scores), tf.constant(num_valid)]

    kept_boxes, kept = CollectProposals(across_batch=True)(inputs)
    for image, positions in enumerate(collect_reference(scores, num_valid, top_n=8)):
        assert kept.numpy()[image].tolist() == [i < len(positions) for i in range(8)]
        np.testing.assert_array_equal(kept_boxes.numpy()[image, : len(positions)], boxes[image, positions])
    assert kept.numpy().sum() == 8

    own_boxes, own = CollectProposals(across_batch=False)(inputs)
    assert own.numpy().sum(axis=1).tolist() == num_valid.tolist()
    np.testing.assert_array_equal(own_boxes, boxes)


def test_mask_boxes_are_the_outer_pixel_edges():
    masks = np.zeros((1, 3, 10, 12), np.uint8)
    masks[0, 0, 2:5, 3:9] = 1
    masks[0, 1, 7, 0] = 1
    boxes = mask_boxes(tf.constant(masks)).numpy()
    np.testing.assert_array_equal(boxes[0], [[3, 2, 9, 5], [0, 7, 1, 8], [0, 0, 0, 0]])



@pytest.mark.parametrize("overrides, expected", [
    (C4_MASK_RCNN, EXPECTED_OUTPUTS - {"loss_kps"}),
    (("MODEL.FASTER_RCNN", "False", "MODEL.RPN_ONLY", "True", "MODEL.MASK_ON", "False", "MODEL.KEYPOINTS_ON", "False"),
     {"loss_rpn_cls", "loss_rpn_bbox"}),
], ids=["C4 Mask R-CNN (res5 head shared with the mask head)", "FPN RPN only"])
def test_c4_and_rpn_only_training_graphs(batch, overrides, expected):
    cfg = tiny_cfg(*overrides)
    model = build_model(cfg, training=True)
    outputs = model(model_inputs(model, batch), training=True)
    assert set(outputs) == expected
    assert all(math.isfinite(float(v)) for v in outputs.values())
    if "loss_mask" in expected:  # the mask head runs the box head's res5 layers: no second copy
        assert sum(layer.name == "res5" for layer in model.layers) == 1


def test_selected_rois_keep_the_selected_slots_in_order_with_their_images():
    rois = tf.reshape(tf.range(2 * 4 * 4, dtype=tf.float32), [2, 4, 4])
    selected = tf.constant([[True, False, True, False], [False, False, False, True]])
    boxes, images, slots = SelectedRoIs()([rois, selected])
    assert slots.numpy().tolist() == [0, 2, 7] and images.numpy().tolist() == [0, 0, 1]
    np.testing.assert_array_equal(boxes, tf.reshape(rois, [-1, 4]).numpy()[[0, 2, 7]])
    boxes, images, slots = SelectedRoIs()([rois, tf.zeros([2, 4], tf.bool)])  # Detectron's one ignored RoI
    assert slots.numpy().tolist() == [0] and images.numpy().tolist() == [0]


def test_head_losses_on_the_selected_slots_equal_the_losses_over_every_padded_slot(rng):
    """Mask and keypoint losses of the heads run on the foreground (weighted) slots alone equal the padded
    layout's, whatever the logits of the other slots: those have no target and add nothing."""
    batch, slots, side, classes = 2, 6, 4, 3
    labels = tf.constant([[2, 1, 0, -1, -1, -1], [1, 0, 0, 0, -1, -1]], tf.int32)
    rois = tf.constant(np.sort(rng.uniform(0, 30, size=(batch, slots, 2, 2)), axis=2).reshape(batch, slots, 4)
                       [..., [0, 2, 1, 3]], tf.float32)
    masks = tf.constant(rng.uniform(size=(batch, 2, 32, 32)) > 0.5, tf.uint8)
    crowd, valid = tf.zeros([batch, 2], tf.bool), tf.ones([batch, 2], tf.bool)
    image_info = tf.constant([[32, 32, 1.0]] * batch)
    padded_logits = tf.constant(rng.normal(size=(batch * slots, side, side, classes)), tf.float32)
    gt_index = match_masks_to_rois(rois, mask_boxes(masks), crowd, valid, image_info[:, 2])
    targets = mask_rcnn_targets(rois, labels, masks, gt_index, image_info[:, 2], side)
    padded = mask_loss(padded_logits, tf.reshape(targets, [-1, side, side]), tf.reshape(labels, [-1]))
    _, _, fg = SelectedRoIs()([rois, labels > 0])
    assert fg.numpy().tolist() == [0, 1, 6]
    compact = MaskLoss(side)([tf.gather(padded_logits, fg), fg, rois, labels, masks, crowd, valid, image_info])
    np.testing.assert_allclose(float(compact), float(padded), rtol=1e-6)
    assert float(padded) > 0

    keypoints, heatmap = 3, 5
    weights = tf.constant(rng.uniform(size=(batch, slots, keypoints)) > 0.4, tf.float32) * tf.constant(
        [[1, 1, 0, 0, 1, 0], [0, 1, 0, 0, 0, 0]], tf.float32)[..., None]
    indices = tf.constant(rng.integers(0, heatmap * heatmap, size=(batch, slots, keypoints)), tf.int32)
    heatmaps = tf.constant(rng.normal(size=(batch * slots, heatmap, heatmap, keypoints)), tf.float32)
    _, _, weighted = SelectedRoIs()([rois, tf.reduce_any(weights > 0, axis=-1)])
    for normalize in (True, False):
        options = dict(normalize_by_visible=normalize, ims_per_batch=batch, batch_size_per_im=8, fg_fraction=0.25)
        padded = keypoint_loss(heatmaps, tf.reshape(indices, [-1, keypoints]), tf.reshape(weights, [-1, keypoints]),
                               **options)
        compact = KeypointLoss(**options)([tf.gather(heatmaps, weighted), weighted, indices, weights])
        np.testing.assert_allclose(float(compact), float(padded), rtol=1e-6)


def test_mask_and_keypoint_heads_run_on_the_foreground_rois_only(cfg, training_model, batch):
    """The mask head's RoIs are the sampled foreground RoIs (label > 0 in the leading slots); without ground
    truth there are none: the heads run on one ignored slot (Detectron's rule), and both losses are 0 with
    finite gradients."""
    mask_rois, keypoint_rois = training_model.get_layer("mask_rois"), training_model.get_layer("keypoint_rois")
    probe = keras.Model(training_model.input, {
        "mask_rois": mask_rois.output[0], "foreground": mask_rois.input[1],
        "keypoint_rois": keypoint_rois.output[0], "weighted": keypoint_rois.input[1],
    })
    seen = probe(model_inputs(training_model, batch), training=True)
    foreground = int(np.sum(seen["foreground"]))
    assert 0 < seen["mask_rois"].shape[0] == foreground < seen["foreground"].shape[0] * seen["foreground"].shape[1]
    assert 0 < seen["keypoint_rois"].shape[0] == int(np.sum(seen["weighted"])) <= foreground

    empty = dict(model_inputs(training_model, batch), num_gt=tf.zeros_like(batch["num_gt"]))
    with tf.GradientTape() as tape:
        outputs = training_model(empty, training=True)
        total = tf.add_n(list(loss_terms(outputs).values()))
    assert float(outputs["loss_mask"]) == 0.0 and float(outputs["loss_kps"]) == 0.0
    gradients = tape.gradient(total, training_model.trainable_variables)
    assert all(g is not None and bool(tf.reduce_all(tf.math.is_finite(g))) for g in gradients)
