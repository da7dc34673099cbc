"""ResNet/ResNeXt/FPN bodies: numerics against float64 numpy written from Caffe2's op definitions,
Detectron blob inventories, output strides and freezing.

Numeric tests draw Caffe2-layout weights (OIHW, AffineChannel scales in [0.5, 1.5]), load them
with detectron_names' `to_keras` (the porting rule) and compare the float32 Keras output with a
float64 NCHW reference. Error measure: max |keras - reference| / max |reference|.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import shared_path

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
# float64 NCHW reference, from the Caffe2 op definitions
# ---------------------------------------------------------------------------------------------


def strided_window(x, top, left, stride, out_h, out_w):
    """The (out_h, out_w) samples of x[..., top + stride * i, left + stride * j]."""
    return x[:, :, top : top + stride * (out_h - 1) + 1 : stride, left : left + stride * (out_w - 1) + 1 : stride]


def np_conv(x, w, b=None, stride=1, pad=0, dilation=1, groups=1):
    """Caffe2 Conv: zero padding `pad` on every side, floor output size, weights (O, I/groups, kh, kw)."""
    height, width = x.shape[2:]
    out_channels, group_in, kh, kw = w.shape
    group_out = out_channels // groups
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out_h = (height + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    out_w = (width + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((x.shape[0], out_channels, out_h, out_w))
    for g in range(groups):
        x_g = padded[:, g * group_in : (g + 1) * group_in]
        w_g = w[g * group_out : (g + 1) * group_out]
        for i in range(kh):
            for j in range(kw):
                patch = strided_window(x_g, i * dilation, j * dilation, stride, out_h, out_w)
                out[:, g * group_out : (g + 1) * group_out] += np.einsum(
                    "nchw,oc->nohw", patch, w_g[:, :, i, j], optimize=True
                )
    return out if b is None else out + b[None, :, None, None]


def np_affine(x, scale, bias):
    """Caffe2 AffineChannel: x * scale + bias per channel."""
    return x * scale[None, :, None, None] + bias[None, :, None, None]


def np_group_norm(x, gamma, beta, groups, eps):
    """Caffe2 GroupNorm: per sample and group, statistics over (C/G, H, W); eps inside the sqrt."""
    n, c, h, w = x.shape
    grouped = x.reshape(n, groups, c // groups, h, w)
    mean = grouped.mean(axis=(2, 3, 4), keepdims=True)
    var = ((grouped - mean) ** 2).mean(axis=(2, 3, 4), keepdims=True)
    return np_affine(((grouped - mean) / np.sqrt(var + eps)).reshape(n, c, h, w), gamma, beta)


def np_max_pool(x, kernel, stride, pad):
    """Caffe2 MaxPool: -inf padding, floor output size."""
    height, width = x.shape[2:]
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    out_h = (height + 2 * pad - kernel) // stride + 1
    out_w = (width + 2 * pad - kernel) // stride + 1
    out = np.full(x.shape[:2] + (out_h, out_w), -np.inf)
    for i in range(kernel):
        for j in range(kernel):
            out = np.maximum(out, strided_window(padded, i, j, stride, out_h, out_w))
    return out


def np_upsample_nearest_2x(x):
    """Caffe2 UpsampleNearest(scale=2): every pixel repeated 2x2."""
    return x.repeat(2, axis=2).repeat(2, axis=3)


def np_relu(x):
    return np.maximum(x, 0.0)


def np_conv_norm(x, blobs, name, norm, gn_groups=None, eps=1e-5, **conv_args):
    """Detectron's ConvAffine (`_bn`) or ConvGN (`_gn`): a bias-free conv and its normalisation."""
    y = np_conv(x, blobs[f"{name}_w"], **conv_args)
    if norm == "bn":
        return np_affine(y, blobs[f"{name}_bn_s"], blobs[f"{name}_bn_b"])
    return np_group_norm(y, blobs[f"{name}_gn_s"], blobs[f"{name}_gn_b"], gn_groups(y.shape[1]), eps)


def np_bottleneck_block(x, blobs, prefix, stride, stride_1x1, groups, dilation, norm, gn_groups=None):
    """Detectron's residual block: 1x1, 3x3 (grouped, dilated), 1x1 + shortcut, ReLU after the sum."""

    def branch(x, name, **conv_args):
        return np_conv_norm(x, blobs, f"{prefix}_{name}", norm, gn_groups, **conv_args)

    stride_a, stride_b = (stride, 1) if stride_1x1 else (1, stride)
    y = np_relu(branch(x, "branch2a", stride=stride_a))
    y = np_relu(branch(y, "branch2b", stride=stride_b, pad=dilation, dilation=dilation, groups=groups))
    y = branch(y, "branch2c")
    shortcut = branch(x, "branch1", stride=stride) if f"{prefix}_branch1_w" in blobs else x
    return np_relu(y + shortcut)


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


def relative_error(actual, expected):
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


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


# level: (stage blob, channels, (height, width)) of small stand-ins for C2..C5
FPN_STAGES = {
    5: ("res5_2_sum", 14, (2, 3)),
    4: ("res4_5_sum", 12, (4, 6)),
    3: ("res3_3_sum", 10, (8, 12)),
    2: ("res2_2_sum", 6, (16, 24)),
}
FPN_BOTH_MULTILEVEL = ("FPN.DIM", "8", "FPN.MULTILEVEL_RPN", "True", "FPN.MULTILEVEL_ROIS", "True")
FPN_CASES = {
    "p6_subsampled": FPN_BOTH_MULTILEVEL,
    "group_norm": FPN_BOTH_MULTILEVEL + ("FPN.USE_GN", "True", "GROUP_NORM.NUM_GROUPS", "2"),
    "extra_conv_levels": (
        "FPN.DIM", "8", "FPN.MULTILEVEL_RPN", "True", "FPN.EXTRA_CONV_LEVELS", "True",
        "FPN.RPN_MIN_LEVEL", "3", "FPN.RPN_MAX_LEVEL", "7",
    ),
}  # fmt: skip


def np_fpn(stages, blobs, cfg):
    """Detectron's add_fpn on NCHW stage outputs {level: array}: top-down, 3x3 outputs, P6 / P6-P7."""
    gn = cfg.FPN.USE_GN
    min_level = 3 if cfg.FPN.EXTRA_CONV_LEVELS else 2

    def fpn_conv(x, name, pad=0):
        if gn:
            return np_conv_norm(x, blobs, name, "gn", lambda c: 2, pad=pad)
        return np_conv(x, blobs[f"{name}_w"], blobs[f"{name}_b"], pad=pad)

    inner = {5: fpn_conv(stages[5], "fpn_inner_res5_2_sum")}
    for level in range(4, min_level - 1, -1):
        blob = FPN_STAGES[level][0]
        inner[level] = fpn_conv(stages[level], f"fpn_inner_{blob}_lateral") + np_upsample_nearest_2x(inner[level + 1])
    outputs = {level: fpn_conv(inner[level], f"fpn_{FPN_STAGES[level][0]}", pad=1) for level in inner}
    if cfg.FPN.EXTRA_CONV_LEVELS:
        outputs[6] = np_conv(stages[5], blobs["fpn_6_w"], blobs["fpn_6_b"], stride=2, pad=1)
        outputs[7] = np_conv(np_relu(outputs[6]), blobs["fpn_7_w"], blobs["fpn_7_b"], stride=2, pad=1)
    else:
        outputs[6] = np_max_pool(outputs[5], kernel=1, stride=2, pad=0)
    return outputs


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


def expected_resnet_blobs(block_counts, groups, width, norm):
    """Blob -> shape from §2.1's rules: stem, then per block branch2a/2b/2c (+ branch1 when dims change)."""
    stem_norm = "res_conv1_bn" if norm == "bn" else "conv1_gn"
    blobs = {"conv1_w": (64, 3, 7, 7), f"{stem_norm}_s": (64,), f"{stem_norm}_b": (64,)}
    dim_in = 64
    for stage, num_blocks in enumerate(block_counts, start=2):
        inner, out = groups * width * 2 ** (stage - 2), 256 * 2 ** (stage - 2)
        for index in range(num_blocks):
            convs = {
                "branch2a": (inner, dim_in, 1, 1),
                "branch2b": (inner, inner // groups, 3, 3),
                "branch2c": (out, inner, 1, 1),
            }
            if dim_in != out:
                convs["branch1"] = (out, dim_in, 1, 1)
            for branch, shape in convs.items():
                prefix = f"res{stage}_{index}_{branch}"
                blobs.update({f"{prefix}_w": shape, f"{prefix}_{norm}_s": shape[:1], f"{prefix}_{norm}_b": shape[:1]})
            dim_in = out
    return blobs


def expected_fpn_blobs(stage_sums, norm, dim=256):
    """Blob -> shape from §2.3: inner 1x1 (top) / lateral 1x1, 3x3 outputs; biases, or `_gn` when GN."""
    lateral_dims = dict(zip(stage_sums, (2048, 1024, 512, 256)))
    convs = {}
    for index, blob in enumerate(stage_sums):
        inner = f"fpn_inner_{blob}" if index == 0 else f"fpn_inner_{blob}_lateral"
        convs[inner] = (dim, lateral_dims[blob], 1, 1)
        convs[f"fpn_{blob}"] = (dim, dim, 3, 3)
    blobs = {}
    for name, shape in convs.items():
        blobs[f"{name}_w"] = shape
        extra = ("_gn_s", "_gn_b") if norm == "gn" else ("_b",)
        blobs.update({f"{name}{suffix}": (dim,) for suffix in extra})
    return blobs


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


def test_only_a_convolution_without_bias_takes_an_affine():
    with pytest.raises(ValueError, match="without bias"):
        CaffeConv2D(4, 1, use_bias=True, name="fpn_inner").fold_affine(AffineChannel(name="fpn_inner_bn"))
