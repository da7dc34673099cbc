"""Domain-adaptive Faster R-CNN: the gradient reversal, the domain classifiers and their losses against numpy,
the DA training graph on C4 and FPN (detection losses from the source images only, domain losses from both,
nothing of it in the inference model), the source + target pipeline and the foggy shapes rendering."""

import json
import math
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from support.paths import REPO_ROOT
from support.training_fixtures import shapes_roidb
from tfdet.config import load_config
from tfdet.data import catalog, shapes
from tfdet.data.domain_pipeline import build_domain_dataset, target_image_records, target_roidb
from tfdet.data.roidb import Roidb
from tfdet.engine.weights import load_initial_weights
from tfdet.layers.domain_classifiers import (
    DomainConsistencyLoss,
    ImageDomainAccuracy,
    ImageDomainLoss,
    InstanceDomainAccuracy,
    InstanceDomainLoss,
    SeededDropout,
    image_domain_classifier,
    instance_domain_classifier,
)
from tfdet.layers.gradient_reversal import GradientReversal, GradientScale
from tfdet.modeling import build_model
from tfdet.modeling.detectron_names import model_blobs
from tfdet.modeling.domain_adaptation import is_domain_classifier_blob
from tfdet.modeling.blob_transfer import copy_weights_by_blob_name
from tfdet.modeling.training_graph import loss_terms

DA_CONFIG = REPO_ROOT / "configs" / "shapes_tiny_da_faster.yaml"
DETECTION_LOSSES = ("loss_rpn_cls", "loss_rpn_bbox", "loss_cls", "loss_bbox")
DOMAIN_LOSSES = ("loss_da_image", "loss_da_instance", "loss_da_consistency")
DA_BLOBS = {"conv1_da_w", "conv1_da_b", "conv2_da_w", "conv2_da_b", "fc1_da_w", "fc2_da_w", "fc3_da_w", "fc3_da_b"}
# Every proposal of the batch survives the FPN collect (at most 4 x 200 + 12 per image), so that the source
# image's proposals do not depend on the target image's in the source-only comparison.
ALL_PROPOSALS = ("TRAIN.RPN_POST_NMS_TOP_N", "4000")
# The fork's initialisation of the DA heads (the shapes config starts them from HeNormal): tiny weights, domain
# probabilities near 1/2 from the start.
FORK_HEADS = ("TFDET.DA_HEAD_INIT", "fork")
C4 = (
    "MODEL.CONV_BODY", "ResNet.add_ResNet50_conv4_body", "FPN.FPN_ON", "False", "FPN.MULTILEVEL_ROIS", "False",
    "FPN.MULTILEVEL_RPN", "False", "FAST_RCNN.ROI_BOX_HEAD", "ResNet.add_ResNet_roi_conv5_head",
    "FAST_RCNN.ROI_XFORM_RESOLUTION", "14", "FAST_RCNN.ROI_XFORM_SAMPLING_RATIO", "0",
    "TRAIN.RPN_PRE_NMS_TOP_N", "400", "TRAIN.RPN_POST_NMS_TOP_N", "200",
)


def da_cfg(*overrides):
    """The shapes DA config with the fork's image-level layout (one classifier on every body output); the
    tests of the shipped layout on ResNet stages (TFDET.DA_IMG_FEATURES) override it."""
    return load_config(DA_CONFIG, ["TFDET.DA_IMG_FEATURES", "[]", *overrides])


def sigmoid_bce(logits, labels):
    """Binary cross-entropy of sigmoid(logits), written from its definition."""
    p = 1.0 / (1.0 + np.exp(-np.asarray(logits, np.float64)))
    return -(labels * np.log(p) + (1 - labels) * np.log(1 - p))


# ---- gradient reversal ------------------------------------------------------------------------------------


@pytest.mark.parametrize("layer, factor", [(GradientReversal(0.1), -0.1), (GradientReversal(2.5), -2.5),
                                           (GradientScale(0.1), 0.1)])
def test_gradient_scaling_is_identity_forward_and_scales_the_gradient(layer, factor):
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 3, 4)), tf.float32)
    upstream = tf.constant(np.random.default_rng(1).normal(size=(2, 3, 4)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(y * upstream)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_allclose(tape.gradient(loss, x), factor * upstream.numpy(), rtol=1e-6)


def test_gradient_reversal_config_round_trip():
    layer = GradientReversal.from_config(GradientReversal(0.3, name="grl").get_config())
    assert (layer.weight, layer.scale, layer.name) == (0.3, -0.3, "grl")


# ---- classifiers and losses ---------------------------------------------------------------------------------


def test_classifier_heads_shapes_names_and_initialisation():
    image_head = image_domain_classifier(32)
    logits = image_head(tf.zeros([2, 16, 12, 32]))
    assert logits.shape == (2, 16, 12, 1)
    instance_head = instance_domain_classifier(64)
    assert instance_head([tf.zeros([2 * 8, 64]), tf.zeros([2, 2], tf.int64)]).shape == (16, 1)
    blobs = {name: variable.numpy() for name, variable, _, _ in model_blobs(image_head) + model_blobs(instance_head)}
    assert set(blobs) == DA_BLOBS | {"fc1_da_b", "fc2_da_b"}
    assert blobs["conv1_da_w"].shape == (1, 1, 32, 512) and blobs["fc2_da_w"].shape == (1024, 1024)
    for name, std in (("conv1_da_w", 0.001), ("fc2_da_w", 0.01), ("fc1_da_w", 0.01)):
        assert np.std(blobs[name]) == pytest.approx(std, rel=0.1), name
    assert not any(blobs[name].any() for name in blobs if name.endswith("_b"))

    # TFDET.DA_HEAD_INIT he_normal: Keras' HeNormal, std sqrt(2 / fan_in) after truncating a normal of std
    # sqrt(2 / fan_in) / 0.8796 at 2 of its stds
    heads = [image_domain_classifier(32, "he_normal"), instance_domain_classifier(64, "he_normal")]
    he = {name: variable.numpy() for head in heads for name, variable, _, _ in model_blobs(head)}
    for name, fan_in in (("conv1_da_w", 32), ("conv2_da_w", 512), ("fc1_da_w", 64), ("fc2_da_w", 1024)):
        assert np.std(he[name]) == pytest.approx(np.sqrt(2 / fan_in), rel=0.15), name
        assert np.abs(he[name]).max() <= 2 * np.sqrt(2 / fan_in) / 0.8796 + 1e-6, name
    assert not any(he[name].any() for name in he if name.endswith("_b"))
    with pytest.raises(ValueError, match="TFDET.DA_HEAD_INIT must be one of fork, he_normal, got 'xavier'"):
        build_model(da_cfg("TFDET.DA_HEAD_INIT", "xavier"), training=True)


def test_seeded_dropout_masks_follow_each_images_seed():
    x = tf.ones([3 * 50, 40])
    seeds = tf.constant([[1, 0], [1, 1], [1, 2]], tf.int64)
    layer = SeededDropout(0.5)
    out = layer([x, seeds], training=True).numpy()
    assert set(np.unique(out)) == {0.0, 2.0}
    assert abs((out == 0).mean() - 0.5) < 0.03
    alone = layer([x[50:100], seeds[1:2]], training=True).numpy()  # the second image on its own
    np.testing.assert_array_equal(alone, out[50:100])
    np.testing.assert_array_equal(layer([x, seeds], training=False), x)
    assert (SeededDropout(0.5, stream=1)([x, seeds], training=True).numpy() != out).any()


def test_image_domain_loss_is_the_mean_bce_of_every_location_of_every_level(rng):
    levels = [rng.normal(size=(2, 4, 4, 1)), rng.normal(size=(2, 2, 2, 1))]
    is_source = np.array([True, False])
    got = ImageDomainLoss(loss_weight=0.5)([*(tf.constant(v, tf.float32) for v in levels), tf.constant(is_source)])
    per_location = [sigmoid_bce(v, is_source[:, None, None, None].astype(float)).ravel() for v in levels]
    assert float(got) == pytest.approx(0.5 * np.concatenate(per_location).mean(), rel=1e-5)


def test_instance_domain_loss_counts_real_rois_only(rng):
    logits = rng.normal(size=(2 * 3, 1))
    labels = np.array([[2, 0, -1], [0, 0, 0]])
    got = InstanceDomainLoss()([tf.constant(logits, tf.float32), tf.constant(labels), tf.constant([True, False])])
    domains = np.array([1, 1, 1, 0, 0, 0], float)
    expected = sigmoid_bce(logits[:, 0], domains)[labels.ravel() >= 0].mean()
    assert float(got) == pytest.approx(expected, rel=1e-5)


def test_image_domain_accuracy_counts_locations_on_their_images_side():
    # image 0 is source (logit > 0 is right), image 1 target (logit <= 0 is right)
    level1 = np.array([1.0, -2.0, -0.5, 0.0]).reshape(2, 2, 1, 1)
    level2 = np.array([3.0, 0.5]).reshape(2, 1, 1, 1)
    got = ImageDomainAccuracy()([tf.constant(level1, tf.float32), tf.constant(level2, tf.float32),
                                 tf.constant([True, False])])
    # right: 1.0 (src), -0.5 and 0.0 (tgt), 3.0 (src); wrong: -2.0 (src), 0.5 (tgt)
    assert float(got) == pytest.approx(4 / 6)


def test_instance_domain_accuracy_counts_real_rois_only():
    logits = np.array([[2.0], [-1.0], [5.0], [-3.0], [1.0], [-9.0]])
    labels = np.array([[2, 0, -1], [0, 0, -1]])
    got = InstanceDomainAccuracy()([tf.constant(logits, tf.float32), tf.constant(labels), tf.constant([True, False])])
    # real RoIs: 2.0 (src, right), -1.0 (src, wrong), -3.0 (tgt, right), 1.0 (tgt, wrong)
    assert float(got) == pytest.approx(2 / 4)


def test_consistency_loss_compares_each_roi_with_its_own_images_mean(rng):
    levels = [rng.uniform(size=(2, 4, 4, 1)), rng.uniform(size=(2, 2, 2, 1))]
    instance = rng.uniform(size=(2 * 3, 1))
    labels = np.array([[1, 0, 0], [0, -1, -1]])
    got = DomainConsistencyLoss(loss_weight=0.1)(
        [*(tf.constant(v, tf.float32) for v in levels), tf.constant(instance, tf.float32), tf.constant(labels)]
    )
    differences = []
    for level in levels:
        for roi in range(6):
            image = roi // 3
            if labels[image, roi % 3] >= 0:
                differences.append(abs(level[image].mean() - instance[roi, 0]))
    assert float(got) == pytest.approx(0.1 * np.mean(differences), rel=1e-5)


# ---- the DA training graph ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def domain_data(tmp_path_factory):
    """(source roidb, target roidb): 4 plain shapes images with >= 2 objects, 4 foggy ones read as images only."""
    root = tmp_path_factory.mktemp("da")
    source = shapes_roidb(root / "source", num_images=8, min_objects=2)
    target_json = shapes.generate(root / "target", 4, seed=11, image_size=96, split_name="train", style="foggy")
    target = Roidb(target_image_records(target_json, root / "target" / "train"), (), ("__background__",), None, (), 0)
    return source, target


def first_domain_batch(cfg, data):
    return next(iter(build_domain_dataset(cfg, *data, flip=False)))


def model_inputs(model, batch, first_seed=0):
    inputs = {name: batch[name] for name in model.input if name != "seeds"}
    count = int(batch["images"].shape[0])
    inputs["seeds"] = tf.constant([[5, first_seed + i] for i in range(count)], tf.int64)
    return inputs


@pytest.fixture(scope="module")
def fpn_model():
    """The tiny DA model; its RPN output layers start at zero, so that the proposals are the anchors ranked by
    index whatever else is in the batch (from random weights, float rounding that differs between a batch of
    one and of two images can swap near-tied proposal scores)."""
    model = build_model(da_cfg(*ALL_PROPOSALS, *FORK_HEADS), training=True)
    for name in ("rpn_cls_logits_fpn2", "rpn_bbox_pred_fpn2"):
        for variable in model.get_layer(name).weights:
            variable.assign(tf.zeros_like(variable))
    return model


def test_detection_losses_come_from_the_source_half_only(fpn_model, domain_data):
    """Gradients of the detection losses reach the source image only; the domain losses reach both; the
    detection losses equal those of the non-DA model on the source image alone (same weights, same seed)."""
    batch = first_domain_batch(da_cfg(), domain_data)
    np.testing.assert_array_equal(batch["is_source"], [True, False])
    inputs = model_inputs(fpn_model, batch)
    images = tf.Variable(inputs["images"])
    with tf.GradientTape(persistent=True) as tape:
        outputs = fpn_model({**inputs, "images": images.read_value()}, training=True)
        detection = tf.add_n([outputs[name] for name in DETECTION_LOSSES])
        domain = tf.add_n([outputs[name] for name in DOMAIN_LOSSES])
    assert set(loss_terms(outputs)) == set(DETECTION_LOSSES + DOMAIN_LOSSES)
    assert {"da_img_acc", "da_ins_acc"} <= set(outputs)
    values = {name: float(value) for name, value in outputs.items()}
    assert 0 <= values["da_img_acc"] <= 1 and 0 <= values["da_ins_acc"] <= 1
    # Fresh classifiers (weights ~ N(0, 0.001..0.05)): both domain probabilities start near 1/2.
    assert values["loss_da_image"] == pytest.approx(math.log(2), abs=0.01)
    assert values["loss_da_instance"] == pytest.approx(math.log(2), abs=0.05)
    assert 0 <= values["loss_da_consistency"] < 0.01
    detection_grad, domain_grad = tape.gradient(detection, images).numpy(), tape.gradient(domain, images).numpy()
    assert np.abs(detection_grad[0]).max() > 0 and not detection_grad[1].any()
    assert np.abs(domain_grad[0]).max() > 0 and np.abs(domain_grad[1]).max() > 0

    plain_cfg = da_cfg(*ALL_PROPOSALS, "MODEL.DOMAIN_ADAPTATION_ON", "False", "TRAIN.IMS_PER_BATCH", "1")
    plain = build_model(plain_cfg, training=True)
    copy_weights_by_blob_name(fpn_model, plain)
    source_only = {name: value[:1] for name, value in batch.items()}
    plain_outputs = plain(model_inputs(plain, source_only), training=True)
    for name in DETECTION_LOSSES + ("accuracy_cls",):
        assert float(plain_outputs[name]) == pytest.approx(values[name], rel=1e-4, abs=1e-6), name


# A mixed-precision DA step against float32 from the same weights: loss terms within 5% (bfloat16 keeps 8 mantissa
# bits; the tolerance of tests/test_mixed_precision.py's detection step), float32 domain losses and reversal.
MIXED_LOSS_RTOL = 0.05


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_da_step_follows_float32(policy, fpn_model, domain_data):
    inputs = model_inputs(fpn_model, first_domain_batch(da_cfg(), domain_data))
    want = {name: float(value) for name, value in fpn_model(inputs, training=True).items()}
    mixed = build_model(da_cfg(*ALL_PROPOSALS, "TFDET.MIXED_PRECISION", policy), training=True)
    assert copy_weights_by_blob_name(fpn_model, mixed) == len(list(model_blobs(mixed)))
    for name in ("da_img_grl", "da_ins_grl", "da_image_loss", "da_instance_loss", "da_consistency_loss"):
        assert mixed.get_layer(name).compute_dtype == "float32", name
    assert mixed.get_layer("da_img_head").get_layer("conv1_da").compute_dtype == policy.split("_")[1]
    images = tf.Variable(inputs["images"])
    with tf.GradientTape() as tape:
        outputs = mixed({**inputs, "images": images.read_value()}, training=True)
        domain = tf.add_n([outputs[name] for name in DOMAIN_LOSSES])
    for name in DETECTION_LOSSES + DOMAIN_LOSSES:
        assert outputs[name].dtype == tf.float32
        assert float(outputs[name]) == pytest.approx(want[name], rel=MIXED_LOSS_RTOL, abs=1e-4), name
    heads = [v for name, v, _, _ in model_blobs(mixed) if name in ("conv1_da_w", "fc1_da_w")]
    gradients = tape.gradient(domain, [images, *heads])
    for gradient in gradients:
        assert np.isfinite(gradient.numpy()).all() and np.abs(gradient.numpy()).max() > 0
    assert keras.config.dtype_policy().name == "float32"


def is_domain_layer(layer):
    return layer.name.startswith("da_") or type(layer).__module__.startswith(
        ("tfdet.layers.domain_", "tfdet.layers.gradient_reversal")
    )


def test_inference_model_has_no_domain_layers_and_takes_the_trained_weights(fpn_model):
    cfg = da_cfg()
    inference = build_model(cfg)
    training_blobs = {name for name, _, _, _ in model_blobs(fpn_model)}
    inference_blobs = {name for name, _, _, _ in model_blobs(inference)}
    assert DA_BLOBS <= training_blobs and not DA_BLOBS & inference_blobs
    assert all("_da_" in name for name in training_blobs - inference_blobs)
    assert len([layer for layer in fpn_model.layers if is_domain_layer(layer)]) >= 10
    assert not [layer.name for layer in inference.layers if is_domain_layer(layer)]
    assert copy_weights_by_blob_name(fpn_model, inference) == len(inference_blobs)


def test_da_training_starts_from_our_final_weights_keeping_its_fresh_domain_heads(fpn_model, tmp_path):
    cfg = da_cfg()
    trained = build_model(cfg)
    trained.get_layer("cls_score").weights[0].assign(tf.ones_like(trained.get_layer("cls_score").weights[0]))
    trained.save_weights(tmp_path / "model_final.weights.h5")
    da_heads = {name: variable.numpy() for name, variable, _, _ in model_blobs(fpn_model) if name in DA_BLOBS}
    load_initial_weights(fpn_model, cfg, str(tmp_path / "model_final.weights.h5"))
    assert (fpn_model.get_layer("cls_score").weights[0].numpy() == 1).all()
    for name, variable, _, _ in model_blobs(fpn_model):
        if name in DA_BLOBS:
            np.testing.assert_array_equal(variable.numpy(), da_heads[name], err_msg=name)


def probe(model, names):
    """A model from the training inputs to the named layers' outputs."""
    return keras.Model(model.input, {name: model.get_layer(name).output for name in names})


@pytest.mark.parametrize("body", ["FPN", "C4"])
def test_domain_classifiers_see_every_body_level_and_the_box_head_features(body, fpn_model, domain_data):
    cfg = da_cfg(*ALL_PROPOSALS) if body == "FPN" else da_cfg(*C4)
    model = fpn_model if body == "FPN" else build_model(cfg, training=True)
    levels = (2, 3, 4, 5, 6) if body == "FPN" else (4,)
    batch = first_domain_batch(cfg, domain_data)
    outputs = probe(model, [f"da_img_prob_{level}" for level in levels] + ["da_ins_prob"])(
        model_inputs(model, batch), training=True
    )
    height, width = batch["images"].shape[1:3]
    for level in levels:
        expected = (2, math.ceil(height / 2**level), math.ceil(width / 2**level), 1)
        assert outputs[f"da_img_prob_{level}"].shape == expected
    assert outputs["da_ins_prob"].shape == (2 * cfg.TRAIN.BATCH_SIZE_PER_IM, 1)
    head_inputs = {"FPN": (cfg.FPN.DIM, cfg.FAST_RCNN.MLP_HEAD_DIM), "C4": (1024, 2048)}[body]
    assert model.get_layer("da_img_head").get_layer("conv1_da").kernel.shape[2] == head_inputs[0]
    assert model.get_layer("da_ins_head").get_layer("fc1_da").kernel.shape[0] == head_inputs[1]


STAGES = ("TFDET.DA_IMG_FEATURES", "[res2, res3]")


def test_image_level_classifiers_on_resnet_stages(fpn_model, domain_data):
    """TFDET.DA_IMG_FEATURES: one classifier per named ResNet stage (checked against numpy), the image loss the
    mean BCE of their locations on those stages' outputs, and the reversed gradient reaches the backbone but not
    the FPN above it (the fork's P-level classifiers reach both)."""
    cfg = da_cfg(*ALL_PROPOSALS, *STAGES, "MODEL.DA_HEADS.DA_CST_LOSS_WEIGHT", "0")
    model = build_model(cfg, training=True)
    blobs = {name for name, _, _, _ in model_blobs(model)}
    stage_blobs = {f"{stage}_conv{i}_da_{kind}" for stage in ("res2", "res3") for i in (1, 2) for kind in "wb"}
    assert stage_blobs <= blobs and "conv1_da_w" not in blobs
    inference_blobs = {name for name, _, _, _ in model_blobs(build_model(cfg))}
    assert stage_blobs <= blobs - inference_blobs and all(map(is_domain_classifier_blob, blobs - inference_blobs))

    batch = first_domain_batch(cfg, domain_data)
    inputs = model_inputs(model, batch)
    outputs = probe(model, ["res2_2_sum", "res3_3_sum", "da_image_loss"])(inputs, training=True)
    height, width = batch["images"].shape[1:3]
    logits = []
    for stage, blob, stride in (("res2", "res2_2_sum", 4), ("res3", "res3_3_sum", 8)):
        head = model.get_layer(f"da_img_head_{stage}")
        w1, b1 = (v.numpy() for v in head.get_layer(f"{stage}_conv1_da").weights)
        w2, b2 = (v.numpy() for v in head.get_layer(f"{stage}_conv2_da").weights)
        features = outputs[blob].numpy().astype(np.float64)
        assert w1.shape[2] == features.shape[-1]
        expected = np.maximum(features @ w1[0, 0] + b1, 0) @ w2[0, 0] + b2
        got = head(outputs[blob]).numpy()
        assert got.shape == (2, math.ceil(height / stride), math.ceil(width / stride), 1)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
        logits.append(got)
    domains = [np.broadcast_to(np.array([1.0, 0.0])[:, None, None, None], v.shape) for v in logits]
    bce = np.concatenate([sigmoid_bce(v, d).ravel() for v, d in zip(logits, domains)])
    assert float(outputs["da_image_loss"]) == pytest.approx(bce.mean(), rel=1e-5)

    def image_loss_gradients(network):
        variables = [network.get_layer(name).kernel for name in ("res2_0_branch2a", "fpn_inner_res2_2_sum_lateral")]
        with tf.GradientTape() as tape:
            loss = network(model_inputs(network, batch), training=True)["loss_da_image"]
        return [0.0 if g is None else np.abs(g.numpy()).max() for g in tape.gradient(loss, variables)]

    backbone, fpn = image_loss_gradients(model)
    assert backbone > 0 and fpn == 0
    assert all(g > 0 for g in image_loss_gradients(fpn_model))


@pytest.mark.parametrize("overrides, message", [
    (("TFDET.DA_IMG_FEATURES", "[res2, p3]"), "'p3' is not a ResNet stage; use some of res2, res3, res4, res5"),
    (("TFDET.DA_IMG_FEATURES", "[res3, res3]"), "names a stage twice"),
    (("TFDET.DA_IMG_FEATURES", "[res2]", "TRAIN.FREEZE_AT", "2"), "res2 is frozen"),
    ((*C4, "TFDET.DA_IMG_FEATURES", "[res5]"), "ResNet.add_ResNet50_conv4_body has no stage res5"),
])
def test_image_level_stage_errors_name_the_key(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_model(da_cfg(*overrides), training=True)


def test_loss_weights_switch_the_domain_losses_off():
    cfg = da_cfg("MODEL.DA_HEADS.DA_INS_LOSS_WEIGHT", "0", "MODEL.DA_HEADS.DA_CST_LOSS_WEIGHT", "0")
    model = build_model(cfg, training=True)
    assert {name for name in model.output if name.startswith(("loss_da", "da_"))} == {"loss_da_image", "da_img_acc"}
    assert "fc1_da_w" not in {name for name, _, _, _ in model_blobs(model)}


@pytest.mark.parametrize("overrides, error, message", [
    (("MODEL.MASK_ON", "True"), NotImplementedError, "box detection only"),
    (("TRAIN.IMS_PER_BATCH", "3"), ValueError, "must be even"),
    (("MODEL.DA_HEADS.DA_IMG_GRL_WEIGHT", "-0.1"), ValueError, "DA_IMG_GRL_WEIGHT must be >= 0"),
])
def test_unsupported_da_configs_are_clear_errors(overrides, error, message):
    with pytest.raises(error, match=message):
        build_model(da_cfg(*overrides), training=True)


# ---- data ------------------------------------------------------------------------------------------------------


def test_domain_batch_is_source_half_then_target_half_padded_to_one_size(tmp_path, domain_data):
    """Target images of another size (96 x 160 -> 77 x 128 -> padded to 96 x 128) join 128 x 128 source images."""
    json_path = shapes.generate(tmp_path, 4, seed=3, image_size=(96, 160), split_name="wide", style="foggy")
    records = target_image_records(json_path, tmp_path / "wide")
    target = Roidb(records, (), ("__background__",), None, (), 0)
    cfg = da_cfg("TRAIN.IMS_PER_BATCH", "4", "TRAIN.ASPECT_GROUPING", "False")
    batch = next(iter(build_domain_dataset(cfg, domain_data[0], target, flip=False)))
    np.testing.assert_array_equal(batch["is_source"], [True, True, False, False])
    assert batch["images"].shape == (4, 128, 128, 3)
    assert (batch["num_gt"].numpy()[:2] >= 2).all() and not batch["num_gt"].numpy()[2:].any()
    assert not batch["gt_classes"].numpy()[2:].any()
    assert not batch["images"].numpy()[2:, 96:].any() and batch["images"].numpy()[2:, :77].any()
    assert set(batch["image_id"].numpy()[2:]) <= {r.image_id for r in records}


def test_target_images_need_no_annotations(tmp_path):
    json_path = shapes.generate(tmp_path, 2, seed=0, image_size=64, split_name="t")
    data = json.loads(json_path.read_text())
    images_only = tmp_path / "images_only.json"
    images_only.write_text(json.dumps({"images": data["images"]}))
    records = target_image_records(images_only, tmp_path / "t")
    assert [(r.image_id, r.height, len(r.boxes)) for r in records] == [(1, 64, 0), (2, 64, 0)]
    with pytest.raises(ValueError, match="t_000000.jpg: not valid JSON"):
        target_image_records(tmp_path / "t" / "t_000000.jpg", tmp_path)
    with pytest.raises(ValueError, match="set TRAIN.TARGET_DATASETS"):
        target_roidb(da_cfg("TRAIN.TARGET_DATASETS", "()"))


def test_foggy_style_renders_the_same_scene_with_less_contrast():
    plain, plain_annotations = shapes.render_image(4, 2, 96)
    foggy, foggy_annotations = shapes.render_image(4, 2, 96, style="foggy")
    assert foggy_annotations == plain_annotations
    assert foggy.std() < 0.8 * plain.std() and np.abs(foggy.astype(int) - plain).mean() > 20
    with pytest.raises(ValueError, match="unknown shapes style 'snowy'"):
        shapes.render_image(4, 2, 96, style="snowy")
    assert shapes.SPLITS["shapes_target_train"].style == "foggy" and shapes.SPLITS["shapes_target_val"].style == "foggy"
    assert {"shapes_target_train", "shapes_target_val"} <= set(catalog.dataset_names())
