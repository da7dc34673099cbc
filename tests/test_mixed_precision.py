"""TFDET.MIXED_PRECISION: the policy a config selects, a scoped Keras policy, box math / NMS / losses / RoIAlign
positions in float32, bfloat16 inference against float32 (tolerances below), a bfloat16 training step against
a float32 one, and Keras' loss scaling around Detectron's SGD (float16)."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from support.training_fixtures import SMALL_GRAPH, first_batch, functions_run_eagerly, shapes_roidb, tiny_cfg
from tfdet.config import load_config
from tfdet.config.errors import ConfigWarning
from tfdet.engine.optimizer import DetectronSGD, update_rules, variable_roles
from tfdet.engine.trainer import Trainer
from tfdet.evaluation.agreement import detection_agreement
from tfdet.modeling import build_model
from tfdet.modeling.detectron_names import model_blobs
from tfdet.modeling.mixed_precision import (
    bfloat16_cpu_notice,
    cpu_flags,
    cpu_vendor,
    dtype_policy_scope,
    policy_name,
)

BF16 = ("TFDET.MIXED_PRECISION", "mixed_bfloat16")
# Zeroed RPN output layers make every proposal an anchor ranked by index in both precisions, so the two
# models' heads see the same RoIs (tests/test_trainer.py uses the same trick).
ZEROED_LAYERS = ("rpn_cls_logits_fpn2", "rpn_bbox_pred_fpn2")
# Stated tolerances of bfloat16 inference against float32, per image, on the top 10 detections of the
# float32 model (random weights, 128-px shapes images): at least 8 found again (same class, box IoU >= 0.5),
# their scores 0.02 apart on average (bfloat16 keeps 8 bits of mantissa: ~0.4% per value, amplified
# through the body), median box shift 0.5 px, mean mask IoU (probabilities > 0.5) 0.9. Measured: 10/10,
# 0.0013, 0.05 px, 0.97 where bfloat16 is emulated in float32; on a CPU with native bfloat16 (AMX), where
# oneDNN computes in bfloat16 itself, mean score differences of 0.009-0.012 over three random initialisations.
MIN_MATCHED, MEAN_SCORE_DIFFERENCE, MEDIAN_BOX_SHIFT, MEAN_MASK_IOU = 8, 0.02, 0.5, 0.9
# One training step: loss terms within 2% (measured 0.7%), the bfloat16 update within 10% (relative L2;
# measured 4%) of float32's.
# bfloat16 keeps 8 mantissa bits (a relative step of 0.4 %). On CPUs with native bfloat16 (AVX512-BF16, AMX) oneDNN
# computes the convolutions in bfloat16 itself: the random-start losses (10 to 120) then move by up to 3.5 % (measured),
# against under 2 % where bfloat16 is emulated in float32.
LOSS_RTOL, UPDATE_TOLERANCE = 0.05, 0.1
# A term near zero (a loss over one or two sampled foreground RoIs) rests on which RoIs the sampling keeps, which
# rounding can flip: with one intra-op thread instead of two, a term was 0 in bfloat16 against 0.012 in float32.
LOSS_ATOL = 0.05


@pytest.mark.parametrize("value, expected", [
    ("", "float32"), ("false", "float32"), ("float32", "float32"), ("mixed_float16", "mixed_float16"),
    ("mixed_bfloat16", "mixed_bfloat16"), ("true", "mixed_bfloat16"),  # no GPU here: the CPU's own is bfloat16
])
def test_policy_names(value, expected):
    assert policy_name(load_config(None, ["TFDET.MIXED_PRECISION", value])) == expected


def test_yaml_true_and_bad_values(tmp_path):
    path = tmp_path / "mp.yaml"
    path.write_text("TFDET:\n  MIXED_PRECISION: true\n")
    assert load_config(path).TFDET.MIXED_PRECISION == "true"
    with pytest.raises(ValueError, match="TFDET.MIXED_PRECISION 'float8': expected '' or false, true, mixed_float16"):
        policy_name(load_config(None, ["TFDET.MIXED_PRECISION", "float8"]))


def test_policy_scope_restores_the_global_policy_even_on_errors():
    with pytest.raises(RuntimeError):
        with dtype_policy_scope(load_config(None, list(BF16))):
            assert keras.config.dtype_policy().name == "mixed_bfloat16"
            raise RuntimeError("build failed")
    assert keras.config.dtype_policy().name == "float32"


def test_bfloat16_on_a_cpu_where_it_would_be_slower_says_so(tmp_path):
    assert bfloat16_cpu_notice(None) is None  # nothing known (no /proc/cpuinfo): nothing said
    assert bfloat16_cpu_notice({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}) is None
    emulated, measured = bfloat16_cpu_notice({"avx2", "fma"}), bfloat16_cpu_notice({"avx512f", "avx512_bf16"})
    assert emulated.startswith("TFDET.MIXED_PRECISION mixed_bfloat16: ") and "emulates" in emulated
    assert "no AMX" in measured and "1.48x" in measured and "\n" not in emulated + measured
    assert bfloat16_cpu_notice({"avx512f", "avx512_bf16"}, "GenuineIntel") == measured
    assert bfloat16_cpu_notice({"avx512f", "avx512_bf16"}, "AuthenticAMD") is None  # measured 0.57x on Zen 4
    assert "emulates" in bfloat16_cpu_notice({"avx2"}, "AuthenticAMD")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512_bf16\n\n"
                       "processor\t: 1\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16"} and cpu_flags(tmp_path / "absent") is None
    assert cpu_vendor(cpuinfo) == "AuthenticAMD" and cpu_vendor(tmp_path / "absent") is None
    # Building under the policy on this machine says what its own flags call for, once per build; float32 nothing.
    expected = bfloat16_cpu_notice(cpu_flags(), cpu_vendor()) if not tf.config.list_logical_devices("GPU") else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with dtype_policy_scope(load_config(None, list(BF16))):
            pass
        with dtype_policy_scope(load_config(None)):
            pass
    assert [str(w.message) for w in caught if w.category is ConfigWarning] == ([expected] if expected else [])


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return first_batch(tiny_cfg(*SMALL_GRAPH), shapes_roidb(tmp_path_factory.mktemp("mp") / "shapes", num_images=4,
                                                      min_objects=2))


@pytest.fixture(scope="module")
def inference_outputs(batch):
    """(float32 outputs, bfloat16 outputs, bfloat16 model) of the same weights on two shapes images."""
    keras.utils.set_random_seed(0)
    models = [build_model(tiny_cfg(*SMALL_GRAPH, "TEST.SCORE_THRESH", "0.0", *extra)) for extra in ((), BF16)]
    models[1].set_weights(models[0].get_weights())
    for model in models:
        for name in ZEROED_LAYERS:
            for variable in model.get_layer(name).weights:
                variable.assign(tf.zeros_like(variable))
    images = {"images": batch["images"], "image_info": batch["image_info"]}
    float32 = {k: v.numpy() for k, v in models[0](images).items()}  # the reference op by op
    bfloat16 = {k: v.numpy() for k, v in tf.function(models[1], autograph=False)(images).items()}  # traced, as served
    return float32, bfloat16, models[1]


def test_build_keeps_box_math_and_predictions_float32_and_restores_the_policy(inference_outputs):
    _, outputs, model = inference_outputs
    assert keras.config.dtype_policy().name == "float32"
    compute = {layer: model.get_layer(layer).compute_dtype for layer in (
        "conv1", "res2_0_branch2a", "res2_0_branch2a_bn", "fpn_res2_2_sum", "conv_rpn_fpn2", "fc6", "mask_fcn1",
        "roi_feat", "mask_roi_feat", "im_info", "rpn_rois", "rois", "detections", "detection_rois",
        "rpn_cls_logits_fpn2", "rpn_bbox_pred_fpn2", "cls_score", "cls_prob", "bbox_pred", "mask_fcn_logits",
        "mask_fcn_probs", "mask_probs")}
    assert {layer for layer, dtype in compute.items() if dtype == "bfloat16"} == {
        "conv1", "res2_0_branch2a", "res2_0_branch2a_bn", "fpn_res2_2_sum", "conv_rpn_fpn2", "fc6", "mask_fcn1",
        "roi_feat", "mask_roi_feat"}
    assert not model.get_layer("roi_feat").autocast  # RoIs reach RoIAlign in float32
    assert all(variable.dtype == "float32" for variable in model.weights)
    assert {name: str(value.dtype) for name, value in outputs.items()} == {
        "boxes": "float32", "scores": "float32", "classes": "int32", "num_detections": "int32",
        "mask_probs": "float32"}


def _detections(outputs, image):
    count = int(outputs["num_detections"][image])
    return {"boxes": outputs["boxes"][image, :count], "scores": outputs["scores"][image, :count],
            "classes": outputs["classes"][image, :count], "masks": outputs["mask_probs"][image, :count] > 0.5}


def test_bfloat16_detections_agree_with_float32_within_the_stated_tolerance(inference_outputs):
    float32, bfloat16, _ = inference_outputs
    for image in range(2):
        agreement = detection_agreement(_detections(float32, image), _detections(bfloat16, image), top_k=10)
        assert agreement["compared"] == 10, agreement
        assert agreement["matched"] >= MIN_MATCHED, agreement
        assert agreement["mean_score_difference"] <= MEAN_SCORE_DIFFERENCE, agreement
        assert agreement["median_box_shift"] <= MEDIAN_BOX_SHIFT, agreement
        assert agreement["mean_mask_iou"] >= MEAN_MASK_IOU, agreement


def _step(cfg, batch, directory):
    trainer = Trainer(cfg, directory, progress=False)
    initial = {name: variable.numpy() for name, variable, _, _ in model_blobs(trainer.model)}
    losses = trainer.train_step(batch)
    updated = {name: variable.numpy() for name, variable, _, _ in model_blobs(trainer.model)}
    return losses, {name: updated[name] - initial[name] for name in initial}


def test_bfloat16_training_step_follows_the_float32_step(batch, tmp_path):
    with functions_run_eagerly():  # the float32 reference op by op; the bfloat16 step traced, as training runs it
        losses32, updates32 = _step(tiny_cfg(*SMALL_GRAPH), batch, tmp_path / "float32")
    losses16, updates16 = _step(tiny_cfg(*SMALL_GRAPH, *BF16), batch, tmp_path / "bfloat16")
    assert keras.config.dtype_policy().name == "float32"
    assert losses16.keys() == losses32.keys()
    np.testing.assert_allclose(list(losses16.values()), list(losses32.values()), rtol=LOSS_RTOL, atol=LOSS_ATOL)
    difference = np.sqrt(sum(np.sum((updates16[n] - updates32[n]) ** 2) for n in updates32))
    assert difference / np.sqrt(sum(np.sum(u**2) for u in updates32.values())) < UPDATE_TOLERANCE


def _fc_model():
    inputs = keras.Input((3,))
    return keras.Model(inputs, keras.layers.Dense(2, name="fc")(inputs))


def test_loss_scale_optimizer_around_detectron_sgd_unscales_and_skips_non_finite_steps():
    cfg = load_config(None, ["SOLVER.WEIGHT_DECAY", "0.01"])
    keras.utils.set_random_seed(0)
    plain, scaled = _fc_model(), _fc_model()
    scaled.set_weights(plain.get_weights())
    sgd = DetectronSGD(0.1, update_rules(cfg, variable_roles(plain)))
    wrapped = keras.optimizers.LossScaleOptimizer(DetectronSGD(0.1, update_rules(cfg, variable_roles(scaled))))
    wrapped.build(scaled.trainable_variables)
    x = tf.constant([[1.0, -2.0, 0.5], [0.3, 0.1, -1.0]])
    with tf.GradientTape(persistent=True) as tape:
        loss_plain = tf.reduce_sum(plain(x) ** 2)
        loss_scaled = wrapped.scale_loss(tf.reduce_sum(scaled(x) ** 2))
    sgd.apply_gradients(zip(tape.gradient(loss_plain, plain.trainable_variables), plain.trainable_variables))
    wrapped.apply_gradients(zip(tape.gradient(loss_scaled, scaled.trainable_variables), scaled.trainable_variables))
    for mine, reference in zip(scaled.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(mine, reference, rtol=1e-6)
    assert int(wrapped.iterations) == 1

    before, scale = scaled.get_weights(), float(wrapped.dynamic_scale)
    infinite = [tf.fill(v.shape, np.inf) for v in scaled.trainable_variables]
    wrapped.apply_gradients(zip(infinite, scaled.trainable_variables))
    for after, previous in zip(scaled.get_weights(), before):
        np.testing.assert_array_equal(after, previous)
    assert float(wrapped.dynamic_scale) == scale / 2 and int(wrapped.iterations) == 1


def test_trainer_scales_the_loss_for_float16_only(tmp_path):
    for policy, scaled in (("mixed_float16", True), ("mixed_bfloat16", False)):
        trainer = Trainer(tiny_cfg(*SMALL_GRAPH, "TFDET.MIXED_PRECISION", policy), tmp_path / policy, progress=False)
        assert isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer) == scaled
        inner = trainer.optimizer.inner_optimizer if scaled else trainer.optimizer
        assert isinstance(inner, DetectronSGD) and trainer.optimizer.built
