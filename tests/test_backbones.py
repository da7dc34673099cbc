"""ResNet/ResNeXt/FPN bodies: numerics against float64 numpy written from Caffe2's op definitions,
Detectron blob inventories, output strides and freezing.

Numeric tests draw Caffe2-layout weights (OIHW, AffineChannel scales in [0.5, 1.5]), load them
with detectron_names' `to_keras` (the porting rule) and compare the float32 Keras output with a
float64 NCHW reference (support/numpy_backbones.py). Error measure: max |keras - reference| / max |reference|.
The blob inventories' rules are support/detectron_fixtures.py's.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from support.detectron_fixtures import expected_fpn_blobs, expected_resnet_blobs
from support.numpy_backbones import (
    FPN_STAGES,
    np_affine,
    np_bottleneck_block,
    np_conv,
    np_conv_norm,
    np_fpn,
    np_max_pool,
    np_relu,
    relative_error,
)
from support.paths import shared_path
from tfdet.config import load_config
from tfdet.layers import AffineChannel, CaffeConv2D, placeholder_initialization
from tfdet.modeling.backbones import add_fpn, add_residual_block
from tfdet.modeling.backbones.conv_norm import conv_affine
from tfdet.modeling.backbones.resnet import SHORTCUTS, STEMS, TRANSFORMATIONS, StageOutput
from tfdet.modeling.detectron_names import detectron_inventory, model_blobs
from tfdet.modeling.registry import BODIES, UnknownNameError

TOLERANCE = 1e-4
BATCH = 2

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def load_random_caffe2_weights(model, rng):
    """Random Caffe2-layout blobs loaded through `to_keras`; returns them (float64, same values)."""
    blobs = {}
    for name, variable, to_caffe2, to_keras in model_blobs(model):
        shape = to_caffe2(np.zeros(variable.shape)).shape
        if name.endswith(("_bn_s", "_gn_s")):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("_w"):
            value = rng.normal(0.0, 1.0 / np.sqrt(np.prod(shape[1:])), shape)
        else:
            value = rng.normal(0.0, 0.5, shape)
        value = value.astype(np.float32)
        variable.assign(to_keras(value))
        blobs[name] = value.astype(np.float64)
    return blobs


def to_nchw(x):
    return np.transpose(x, (0, 3, 1, 2)).astype(np.float64)


def run_nchw(model, inputs):
    """Run a Keras model on NCHW float64 arrays (fed as NHWC float32); outputs back in NCHW."""
    nhwc = [np.transpose(x, (0, 2, 3, 1)).astype(np.float32) for x in inputs]
    outputs = model(nhwc if len(nhwc) > 1 else nhwc[0])
    if isinstance(outputs, dict):
        return {key: to_nchw(np.asarray(value)) for key, value in outputs.items()}
    return to_nchw(np.asarray(outputs))


def config(*overrides):
    return load_config(overrides=list(overrides))


def zoo_config(name):
    return load_config(shared_path("detectron", "configs", name))


# ---------------------------------------------------------------------------------------------
# numerics: blocks, stems, FPN
# ---------------------------------------------------------------------------------------------

BN_ON_1X1 = ()
BN_ON_3X3 = ("RESNETS.STRIDE_1X1", "False")
GN_VARIANT = (
    "RESNETS.TRANS_FUNC", "bottleneck_gn_transformation",
    "RESNETS.SHORTCUT_FUNC", "basic_gn_shortcut",
    "GROUP_NORM.DIM_PER_GP", "4",
    "GROUP_NORM.NUM_GROUPS", "-1",
)  # fmt: skip

# id, config overrides, (dim_in, dim_out, dim_inner), stride_init, dilation, expected stride, groups
BLOCK_CASES = [
    ("stride_on_1x1", BN_ON_1X1, (16, 32, 8), 2, 1, 2, 1),
    ("stride_on_3x3", BN_ON_3X3, (16, 32, 8), 2, 1, 2, 1),
    ("resnext_grouped", BN_ON_3X3 + ("RESNETS.NUM_GROUPS", "4"), (16, 32, 16), 2, 1, 2, 4),
    ("identity_shortcut", BN_ON_1X1, (32, 32, 8), 2, 1, 1, 1),
    ("after_stem_no_stride", BN_ON_1X1, (64, 128, 16), 2, 1, 1, 1),
    ("dilated_no_stride", BN_ON_3X3, (16, 32, 8), 2, 2, 1, 1),
    ("group_norm", BN_ON_3X3 + GN_VARIANT + ("RESNETS.NUM_GROUPS", "2"), (16, 32, 16), 2, 1, 2, 2),
]


@pytest.mark.parametrize(
    "overrides, dims, stride_init, dilation, stride, groups",
    [case[1:] for case in BLOCK_CASES],
    ids=[case[0] for case in BLOCK_CASES],
)
def test_residual_block_matches_caffe2_reference(rng, overrides, dims, stride_init, dilation, stride, groups):
    cfg = config(*overrides)
    dim_in, dim_out, dim_inner = dims
    inputs = keras.Input((None, None, dim_in))
    model = keras.Model(
        inputs, add_residual_block(inputs, "res3_0", dim_in, dim_out, dim_inner, stride_init, dilation, cfg)
    )
    blobs = load_random_caffe2_weights(model, rng)
    x = rng.normal(size=(BATCH, dim_in, 9, 11))
    norm = "gn" if cfg.RESNETS.TRANS_FUNC == "bottleneck_gn_transformation" else "bn"
    expected = np_bottleneck_block(
        x, blobs, "res3_0", stride, cfg.RESNETS.STRIDE_1X1, groups, dilation, norm, gn_groups=lambda c: c // 4
    )
    actual = run_nchw(model, [x])
    assert actual.shape == expected.shape
    assert relative_error(actual, expected) < TOLERANCE


@pytest.mark.parametrize("stem", ["basic_bn_stem", "basic_gn_stem"])
def test_stem_matches_caffe2_reference(rng, stem):
    cfg = config("RESNETS.STEM_FUNC", stem)
    images = keras.Input((None, None, 3))
    model = keras.Model(images, STEMS.get(stem)(cfg, images))
    blobs = load_random_caffe2_weights(model, rng)
    x = rng.normal(0.0, 50.0, size=(BATCH, 3, 37, 45))  # odd sizes: floor output sizes matter
    norm, gn_groups = ("bn", None) if stem == "basic_bn_stem" else ("gn", lambda c: 32)
    if norm == "bn":
        y = np_affine(np_conv(x, blobs["conv1_w"], stride=2, pad=3), blobs["res_conv1_bn_s"], blobs["res_conv1_bn_b"])
    else:
        y = np_conv_norm(x, blobs, "conv1", "gn", gn_groups, stride=2, pad=3)
    expected = np_max_pool(np_relu(y), kernel=3, stride=2, pad=1)
    actual = run_nchw(model, [x])
    assert actual.shape == expected.shape == (BATCH, 64, 10, 12)
    assert relative_error(actual, expected) < TOLERANCE


FPN_BOTH_MULTILEVEL = ("FPN.DIM", "8", "FPN.MULTILEVEL_RPN", "True", "FPN.MULTILEVEL_ROIS", "True")
FPN_CASES = {
    "p6_subsampled": FPN_BOTH_MULTILEVEL,
    "group_norm": FPN_BOTH_MULTILEVEL + ("FPN.USE_GN", "True", "GROUP_NORM.NUM_GROUPS", "2"),
    "extra_conv_levels": (
        "FPN.DIM", "8", "FPN.MULTILEVEL_RPN", "True", "FPN.EXTRA_CONV_LEVELS", "True",
        "FPN.RPN_MIN_LEVEL", "3", "FPN.RPN_MAX_LEVEL", "7",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(FPN_CASES))
def test_fpn_matches_caffe2_reference(rng, case):
    cfg = config(*FPN_CASES[case])
    inputs = {level: keras.Input((None, None, dim)) for level, (_, dim, _) in FPN_STAGES.items()}
    backbone = {level: StageOutput(FPN_STAGES[level][0], tensor) for level, tensor in inputs.items()}
    ordered_levels = sorted(inputs)
    model = keras.Model([inputs[level] for level in ordered_levels], add_fpn(cfg, backbone))
    blobs = load_random_caffe2_weights(model, rng)
    stages = {level: rng.normal(size=(BATCH, dim, *size)) for level, (_, dim, size) in FPN_STAGES.items()}
    expected = np_fpn(stages, blobs, cfg)
    actual = run_nchw(model, [stages[level] for level in ordered_levels])
    assert sorted(actual) == sorted(expected)
    for level in expected:
        assert actual[level].shape == expected[level].shape, level
        assert relative_error(actual[level], expected[level]) < TOLERANCE, level


# ---------------------------------------------------------------------------------------------
# Detectron blob inventories of whole bodies (reference §2.1, §2.3)
# ---------------------------------------------------------------------------------------------

# name: (zoo config, block counts, groups, width per group, norm, FPN stage sums coarse -> fine)
BODIES_UNDER_TEST = {
    "R-50-C4": ("12_2017_baselines/e2e_mask_rcnn_R-50-C4_1x.yaml", (3, 4, 6), 1, 64, "bn", ()),
    "R-50-FPN": (
        "12_2017_baselines/e2e_mask_rcnn_R-50-FPN_1x.yaml", (3, 4, 6, 3), 1, 64, "bn",
        ("res5_2_sum", "res4_5_sum", "res3_3_sum", "res2_2_sum"),
    ),
    "R-101-FPN": (
        "12_2017_baselines/e2e_mask_rcnn_R-101-FPN_1x.yaml", (3, 4, 23, 3), 1, 64, "bn",
        ("res5_2_sum", "res4_22_sum", "res3_3_sum", "res2_2_sum"),
    ),
    "X-101-32x8d-FPN": (
        "12_2017_baselines/e2e_mask_rcnn_X-101-32x8d-FPN_1x.yaml", (3, 4, 23, 3), 32, 8, "bn",
        ("res5_2_sum", "res4_22_sum", "res3_3_sum", "res2_2_sum"),
    ),
    "X-101-64x4d-FPN": (
        "12_2017_baselines/e2e_mask_rcnn_X-101-64x4d-FPN_1x.yaml", (3, 4, 23, 3), 64, 4, "bn",
        ("res5_2_sum", "res4_22_sum", "res3_3_sum", "res2_2_sum"),
    ),
    "X-152-32x8d-FPN": (
        "12_2017_baselines/e2e_mask_rcnn_X-152-32x8d-FPN-IN5k_1.44x.yaml", (3, 8, 36, 3), 32, 8, "bn",
        ("res5_2_sum", "res4_35_sum", "res3_7_sum", "res2_2_sum"),
    ),
    "R-50-GN-FPN": (
        "04_2018_gn_baselines/e2e_mask_rcnn_R-50-FPN_2x_gn.yaml", (3, 4, 6, 3), 1, 64, "gn",
        ("res5_2_sum", "res4_5_sum", "res3_3_sum", "res2_2_sum"),
    ),
}  # fmt: skip

# Reference §2.1: body blobs and parameters (millions), stem included, FPN excluded.
DOCUMENTED_BODY_COUNTS = {
    "R-50-FPN": (159, 23.51),
    "R-101-FPN": (312, 42.50),
    "X-101-32x8d-FPN": (312, 86.74),
    "X-101-64x4d-FPN": (312, 81.41),
    "X-152-32x8d-FPN": (465, 120.32),
}


@pytest.fixture(scope="module")
def r50_fpn_model():
    cfg = zoo_config(BODIES_UNDER_TEST["R-50-FPN"][0])
    images = keras.Input((None, None, 3))
    return keras.Model(images, BODIES.get(cfg.MODEL.CONV_BODY)(cfg, images).features)


@pytest.fixture(scope="module")
def inventories(r50_fpn_model):
    """{body name: Detectron inventory}; each model is built once and then dropped (memory)."""
    result = {"R-50-FPN": detectron_inventory(r50_fpn_model)}
    for name, (config_name, *_) in BODIES_UNDER_TEST.items():
        if name not in result:
            cfg = zoo_config(config_name)
            images = keras.Input((None, None, 3))
            with placeholder_initialization():  # names and shapes only
                model = keras.Model(images, BODIES.get(cfg.MODEL.CONV_BODY)(cfg, images).features)
            result[name] = detectron_inventory(model)
    return result


@pytest.mark.parametrize("name", list(BODIES_UNDER_TEST))
def test_body_inventory_follows_documented_rules(inventories, name):
    _, block_counts, groups, width, norm, stage_sums = BODIES_UNDER_TEST[name]
    expected = expected_resnet_blobs(block_counts, groups, width, norm)
    expected.update(expected_fpn_blobs(stage_sums, norm) if stage_sums else {})
    assert inventories[name] == expected


@pytest.mark.parametrize("name", list(DOCUMENTED_BODY_COUNTS))
def test_body_blob_and_parameter_counts_match_reference(inventories, name):
    body = {blob: shape for blob, shape in inventories[name].items() if not blob.startswith("fpn_")}
    blob_count, millions = DOCUMENTED_BODY_COUNTS[name]
    assert len(body) == blob_count
    assert sum(int(np.prod(shape)) for shape in body.values()) / 1e6 == pytest.approx(millions, abs=0.01)


def test_fpn_blob_names_r50_and_r101(inventories):
    r50 = [
        "fpn_inner_res5_2_sum", "fpn_inner_res4_5_sum_lateral", "fpn_inner_res3_3_sum_lateral",
        "fpn_inner_res2_2_sum_lateral", "fpn_res5_2_sum", "fpn_res4_5_sum", "fpn_res3_3_sum", "fpn_res2_2_sum",
    ]  # fmt: skip
    expected_r50 = {f"{name}{suffix}" for name in r50 for suffix in ("_w", "_b")}
    assert {blob for blob in inventories["R-50-FPN"] if blob.startswith("fpn_")} == expected_r50
    assert len(expected_r50) == 16
    expected_r101 = {blob.replace("res4_5_sum", "res4_22_sum") for blob in expected_r50}
    assert {blob for blob in inventories["R-101-FPN"] if blob.startswith("fpn_")} == expected_r101


# ---------------------------------------------------------------------------------------------
# shapes, names, freezing, variant names
# ---------------------------------------------------------------------------------------------


def test_fpn_output_strides(r50_fpn_model):
    outputs = r50_fpn_model(np.zeros((BATCH, 128, 160, 3), np.float32))
    shapes = {level: tuple(value.shape) for level, value in outputs.items()}
    assert shapes == {
        2: (BATCH, 32, 40, 256),
        3: (BATCH, 16, 20, 256),
        4: (BATCH, 8, 10, 256),
        5: (BATCH, 4, 5, 256),
        6: (BATCH, 2, 3, 256),
    }


def test_layers_named_after_detectron_blobs(r50_fpn_model):
    names = {layer.name for layer in r50_fpn_model.layers}
    expected = {
        "conv1", "res_conv1_bn", "pool1", "res2_0_branch1", "res2_0_branch1_bn", "res2_2_sum", "res4_5_sum",
        "res5_2_sum", "fpn_inner_res4_5_sum_topdown", "fpn_inner_res4_5_sum", "fpn_res5_2_sum_subsampled_2x",
    }  # fmt: skip
    assert expected <= names


@pytest.mark.parametrize(
    "body, overrides, level, dim",
    [
        ("ResNet.add_ResNet50_conv4_body", (), 4, 1024),
        ("ResNet.add_ResNet50_conv5_body", (), 5, 2048),
        ("ResNet.add_ResNet50_conv5_body", ("RESNETS.RES5_DILATION", "2"), 4, 2048),
        ("FPN.add_fpn_ResNet50_conv5_P2only_body", ("FPN.MULTILEVEL_RPN", "True"), 2, 256),
    ],
)
def test_resnet_body_output_level_and_shape(body, overrides, level, dim):
    cfg = config(*overrides)
    images = keras.Input((None, None, 3))
    output = BODIES.get(body)(cfg, images)
    assert list(output.features) == [level] and output.dim == dim
    value = keras.Model(images, output.features[level])(np.zeros((BATCH, 64, 96, 3), np.float32))
    stride = 2**level
    assert tuple(value.shape) == (BATCH, 64 // stride, 96 // stride, dim)


def _trainable_kernels(model):
    return {layer.name for layer in model.layers if layer.trainable_weights}


@pytest.mark.parametrize(
    "freeze_at, frozen, trainable",
    [
        (2, {"conv1", "res2_0_branch2a", "res2_2_branch2c", "res2_0_branch1"}, {"res3_0_branch2a", "res4_5_branch2c"}),
        (0, set(), {"conv1", "res2_0_branch2a", "res3_0_branch2a"}),
        (4, {"conv1", "res3_3_branch2b", "res4_5_branch2c"}, set()),
    ],
)
def test_freeze_at_freezes_stem_and_stages_up_to_it(freeze_at, frozen, trainable):
    cfg = config("TRAIN.FREEZE_AT", str(freeze_at))
    images = keras.Input((None, None, 3))
    model = keras.Model(images, BODIES.get("ResNet.add_ResNet50_conv4_body")(cfg, images).features)
    trainable_layers = _trainable_kernels(model)
    assert not frozen & trainable_layers
    assert trainable <= trainable_layers
    assert all(not variable.trainable for layer in model.layers if layer.name in frozen for variable in layer.weights)


def test_invalid_freeze_at_is_refused():
    with pytest.raises(ValueError, match="FREEZE_AT"):
        BODIES.get("ResNet.add_ResNet50_conv4_body")(config("TRAIN.FREEZE_AT", "6"), keras.Input((None, None, 3)))


@pytest.mark.parametrize("registry", [STEMS, TRANSFORMATIONS, SHORTCUTS])
def test_unknown_variant_name_is_a_clear_error(registry):
    with pytest.raises(UnknownNameError, match="Known:"):
        registry.get("bottleneck_transformation_v2")


def test_conv_affine_is_computed_by_the_convolution_with_its_own_weights(rng):
    """ConvAffine's convolution applies the frozen affine (one Conv2D + BiasAdd); the result is
    conv(x, w) * s + b in float64, the two layers keep their own Detectron-named weights, and the
    convolution's weights still get their gradient."""
    inputs = keras.Input((None, None, 3))
    model = keras.Model(inputs, conv_affine(inputs, None, "res2_0_branch2b", 4, 3, padding=1))
    conv, affine = model.get_layer("res2_0_branch2b"), model.get_layer("res2_0_branch2b_bn")
    affine.set_weights([rng.uniform(0.5, 2.0, 4), rng.standard_normal(4)])
    assert [v.path for v in conv.weights] == ["res2_0_branch2b/kernel"]
    assert [v.path for v in affine.weights] == ["res2_0_branch2b_bn/scale", "res2_0_branch2b_bn/bias"]
    image = rng.standard_normal((1, 6, 5, 3))
    kernel, (scale, bias) = conv.kernel.numpy().astype(np.float64), (w.numpy() for w in affine.weights)
    padded = np.pad(image, [(0, 0), (1, 1), (1, 1), (0, 0)])
    direct = sum(padded[:, dy : dy + 6, dx : dx + 5] @ kernel[dy, dx] for dy in range(3) for dx in range(3))
    np.testing.assert_allclose(model(image.astype(np.float32)).numpy(), direct * scale + bias, rtol=1e-5, atol=1e-5)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(image.astype(np.float32)) ** 2)
    assert float(tf.reduce_max(tf.abs(tape.gradient(loss, conv.kernel)))) > 0
    assert not affine.trainable_weights


def test_a_folded_kernel_is_made_once_the_inputs_exist():
    """The fold (kernel * scale) waits for the convolution's inputs: in a recomputed segment's backward pass,
    whose inputs wait for the upstream gradient, the kernels would otherwise all be folded when the step starts
    and held until their turn."""
    inputs = keras.Input((None, None, 3))
    model = keras.Model(inputs, conv_affine(inputs, None, "res2_0_branch2b", 4, 3, padding=1))
    graph = tf.function(model).get_concrete_function(tf.TensorSpec([1, 6, 5, 3], tf.float32)).graph
    (conv,) = [op for op in graph.get_operations() if op.type == "Conv2D"]
    (fold,) = [op for op in graph.get_operations() if op.type == "Mul" and op.outputs[0].shape == (3, 3, 3, 4)]
    assert conv.inputs[1].name == fold.outputs[0].name
    # TensorFlow puts the control input on the first ops made in the block (the kernel and scale reads)
    waiting = [fold, *(tensor.op for tensor in fold.inputs)]
    assert any(conv.inputs[0].op in op.control_inputs for op in waiting)


def test_only_a_convolution_without_bias_takes_an_affine():
    with pytest.raises(ValueError, match="without bias"):
        CaffeConv2D(4, 1, use_bias=True, name="fpn_inner").fold_affine(AffineChannel(name="fpn_inner_bn"))


@pytest.mark.parametrize("kernel, stride, padding, dilation, expected", [
    (3, 1, 1, 1, "SAME"), (3, 1, 2, 2, "SAME"), (1, 1, 0, 1, "VALID"), (3, 2, 1, 1, "explicit"),
    (7, 2, 3, 1, "explicit"), (3, 1, 2, 1, "explicit"),
])
def test_caffe_padding_is_tensorflows_same_where_that_is_symmetric(rng, kernel, stride, padding, dilation, expected):
    """'SAME' where it pads as Caffe2 does (its gradients then get oneDNN's kernels), explicit padding otherwise:
    outputs and gradients equal an explicitly padded undilated convolution's with the kernel's taps spread out
    (TensorFlow's CPU gradient of a dilated convolution with explicit padding is not implemented)."""
    layer = CaffeConv2D(5, kernel, strides=stride, padding=padding, dilation_rate=dilation, use_bias=False)
    inputs = tf.constant(rng.normal(size=(2, 13, 11, 3)), tf.float32)
    layer.build(inputs.shape)
    chosen = layer._tf_padding()
    assert (chosen if isinstance(chosen, str) else "explicit") == expected
    explicit = [[0, 0], [padding, padding], [padding, padding], [0, 0]]
    span = dilation * (kernel - 1) + 1
    taps = np.zeros((span, span, kernel, kernel), np.float32)
    for row in range(kernel):
        for col in range(kernel):
            taps[row * dilation, col * dilation, row, col] = 1.0
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(inputs)
        ours = layer(inputs)
        spread = tf.einsum("yxij,ijco->yxco", taps, layer.kernel)
        reference = tf.nn.conv2d(inputs, spread, stride, explicit)
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)
    for ours_gradient, reference_gradient in zip(tape.gradient(ours, [inputs, layer.kernel]),
                                                 tape.gradient(reference, [inputs, layer.kernel])):
        np.testing.assert_allclose(ours_gradient, reference_gradient, rtol=1e-4, atol=1e-4)
