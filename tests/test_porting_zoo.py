"""Porting whole Detectron zoo models: files with the zoo models' exact blob names and shapes.

The blob inventory of each model comes from reference/detectron.md §2's naming rules through a
small generator written here (stage counts, widths, groups, FPN / RPN / head names), checked
against the counts §2 documents, never from tfdet's own `model_blobs`. Values are random; each
file is ported into the model built from Detectron's own zoo config, every Keras variable is
compared with its blob under §1.5's layout rules (written here too), and the blobs the model
exports (`model_to_blobs`; for one model the file `python -m porting export-detectron` writes)
must be the file's arrays. Files carry the junk real files carry (momentum, zero conv biases,
ImageNet classifiers, `lr`, `weight_order`) and are Python-2-style pickles like the zoo's:
trained files `{'blobs', 'cfg'}` with the Python-tagged YAML cfg, ImageNet files flat dicts.
The X-101-64x4d model is the full Faster R-CNN (100 M parameters); each model is built (without
random draws: every value checked is drawn here), and its trained file drawn and written (on tmpfs
when there is one), once.
"""

import dataclasses
import pickle

import keras
import numpy as np
import pytest

from conftest import shared_path
from detectron_fixtures import (
    RES5_DIM,
    detectron_cfg_yaml,
    momentum_junk,
    msra_imagenet_junk,
    py2_detectron_file,
    random_blobs,
    resnext_imagenet_junk,
    write_py2_detectron_file,
    write_py2_pickle,
)
from porting import load_detectron_weights, parse_embedded_cfg, read_weight_file
from porting.__main__ import main as porting_main
from porting.detectron_writer import model_to_blobs
from porting_fixtures import assert_same, held, module_scratch_path, scratch_path  # noqa: F401 (fixtures)
from test_backbones import expected_fpn_blobs, expected_resnet_blobs
from tfdet.config import load_config
from tfdet.layers import placeholder_initialization
from tfdet.modeling import build_model

FPN_DIM = 256
MLP_HEAD_DIM = 1024
IOHW_DECONVS = ("conv5_mask", "kps_score_lowres", "kps_score")  # Caffe2 ConvTranspose blobs: (I, O, kh, kw)
PIXEL_MEANS = np.array([[[102.9801, 115.9465, 122.7717]]])
FILE_BBOX_REG_WEIGHTS = (10.0, 10.0, 5.0, 5.0)

# ---------------------------------------------------------------------------------------------
# Blob inventories from reference §2 (independent of tfdet)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ZooArch:
    """What decides a Detectron model's blobs: body (§2.1), FPN or C4, box / mask / keypoint heads."""

    block_counts: tuple = (3, 4, 6, 3)
    groups: int = 1
    width_per_group: int = 64
    norm: str = "bn"  # "gn": GN stem, blocks and FPN (04_2018_gn_baselines)
    fpn: bool = True
    box_head: str = "2mlp"  # "2mlp" (fc6, fc7), "4conv1fc_gn" (head_conv1..4 + GN, fc6), "res5" (C4)
    mask_head: str = ""  # "", "fcn" (_[mask]_fcn1..4), "fcn_gn" (_mask_fcn1..4 + GN), "v0upshare" (C4)
    keypoints: bool = False
    num_classes: int = 81


def _conv(name, shape):
    """A Caffe2 Conv / FC / ConvTranspose `<name>_w` and its bias `<name>_b` (output channels)."""
    out_channels = shape[1] if name in IOHW_DECONVS else shape[0]
    return {f"{name}_w": shape, f"{name}_b": (out_channels,)}


def _conv_gn(name, shape):
    """Detectron's ConvGN: a bias-free conv `<name>_w`, then `<name>_gn_s`, `<name>_gn_b`."""
    return {f"{name}_w": shape, f"{name}_gn_s": shape[:1], f"{name}_gn_b": shape[:1]}


def stage_sums(block_counts):
    """Last-block sums of res5..res2 (`res4_5_sum` for R-50), coarse to fine as FPN lists them."""
    return tuple(f"res{stage}_{count - 1}_sum" for stage, count in reversed(list(enumerate(block_counts, start=2))))


def body_blob_shapes(arch):
    """Stem and res2..res5 (§2.1); in C4 models res5 belongs to the box head, under the same names."""
    return expected_resnet_blobs(arch.block_counts, arch.groups, arch.width_per_group, arch.norm)


def zoo_blob_shapes(arch):
    """{blob: Caffe2 shape} of every parameter of a Detectron model, by §2's rules (no junk)."""
    blobs = body_blob_shapes(arch)
    if arch.fpn:
        blobs.update(expected_fpn_blobs(stage_sums(arch.block_counts), arch.norm, FPN_DIM))
    # RPN (§2.4): FPN shares one head stored under the lowest level's names; C4 has 15 anchors on res4.
    dim, anchors, tag = (FPN_DIM, 3, "_fpn2") if arch.fpn else (1024, 15, "")
    blobs.update(_conv(f"conv_rpn{tag}", (dim, dim, 3, 3)))
    blobs.update(_conv(f"rpn_cls_logits{tag}", (anchors, dim, 1, 1)))
    blobs.update(_conv(f"rpn_bbox_pred{tag}", (4 * anchors, dim, 1, 1)))
    # Box head and outputs (§2.5); fc6 takes the NCHW-flattened 7x7 RoI feature.
    head_dim = MLP_HEAD_DIM
    if arch.box_head == "2mlp":
        blobs.update(_conv("fc6", (MLP_HEAD_DIM, FPN_DIM * 7 * 7)))
        blobs.update(_conv("fc7", (MLP_HEAD_DIM, MLP_HEAD_DIM)))
    elif arch.box_head == "4conv1fc_gn":
        for i in range(1, 5):
            blobs.update(_conv_gn(f"head_conv{i}", (256, FPN_DIM, 3, 3)))
        blobs.update(_conv("fc6", (MLP_HEAD_DIM, 256 * 7 * 7)))
    elif arch.box_head == "res5":
        head_dim = RES5_DIM  # the res5_* blobs are already among the body's
    else:
        raise ValueError(f"unknown box head {arch.box_head!r}")
    classes = arch.num_classes
    blobs.update(_conv("cls_score", (classes, head_dim)))
    blobs.update(_conv("bbox_pred", (4 * classes, head_dim)))
    # Mask heads (§2.6): the C4 head's `_[mask]_res5_*` are not in files (']_' rule: from res5_*).
    if arch.mask_head in ("fcn", "fcn_gn"):
        for i in range(1, 5):
            if arch.mask_head == "fcn":
                blobs.update(_conv(f"_[mask]_fcn{i}", (256, FPN_DIM, 3, 3)))
            else:
                blobs.update(_conv_gn(f"_mask_fcn{i}", (256, FPN_DIM, 3, 3)))
        blobs.update(_conv("conv5_mask", (256, 256, 2, 2)))
    elif arch.mask_head == "v0upshare":
        blobs.update(_conv("conv5_mask", (RES5_DIM, 256, 2, 2)))
    elif arch.mask_head:
        raise ValueError(f"unknown mask head {arch.mask_head!r}")
    if arch.mask_head:
        blobs.update(_conv("mask_fcn_logits", (classes, 256, 1, 1)))
    # Keypoint head (§2.7): 8 convs of 512, the learned 4x4 deconv to 17 maps, the fixed 2x upsampling.
    if arch.keypoints:
        for i in range(1, 9):
            blobs.update(_conv(f"conv_fcn{i}", (512, FPN_DIM if i == 1 else 512, 3, 3)))
        blobs.update(_conv("kps_score_lowres", (512, 17, 4, 4)))
        blobs.update(_conv("kps_score", (17, 17, 4, 4)))
    return blobs


R50_MASK_FPN = ZooArch(mask_head="fcn")
R50_KEYPOINT_FPN = ZooArch(keypoints=True, num_classes=2)
R50_MASK_C4 = ZooArch(fpn=False, box_head="res5", mask_head="v0upshare")
X101_64X4D_FASTER_FPN = ZooArch(block_counts=(3, 4, 23, 3), groups=64, width_per_group=4)
R50_GN_MASK_FPN = ZooArch(norm="gn", box_head="4conv1fc_gn", mask_head="fcn_gn")

# Reference §2.9 (whole models) and §2.1 (bodies): blobs and parameters in millions.
DOCUMENTED_MODEL_COUNTS = {
    "Mask R-50-FPN": (R50_MASK_FPN, 201, 44.40),
    "Keypoint R-50-FPN": (R50_KEYPOINT_FPN, 209, 59.20),
    "Mask R-50-C4": (R50_MASK_C4, 173, 35.97),
}
DOCUMENTED_BODY_COUNTS = {"R-50": (ZooArch(), 159, 23.51), "X-101-64x4d": (X101_64X4D_FASTER_FPN, 312, 81.41)}


@pytest.mark.parametrize("name", list(DOCUMENTED_MODEL_COUNTS))
def test_generator_matches_documented_model_counts(name):
    arch, count, millions = DOCUMENTED_MODEL_COUNTS[name]
    shapes = zoo_blob_shapes(arch)
    assert len(shapes) == count
    assert sum(int(np.prod(s)) for s in shapes.values()) / 1e6 == pytest.approx(millions, abs=0.005)


@pytest.mark.parametrize("name", list(DOCUMENTED_BODY_COUNTS))
def test_generator_matches_documented_body_counts(name):
    arch, count, millions = DOCUMENTED_BODY_COUNTS[name]
    shapes = body_blob_shapes(arch)
    assert len(shapes) == count
    assert sum(int(np.prod(s)) for s in shapes.values()) / 1e6 == pytest.approx(millions, abs=0.005)


# ---------------------------------------------------------------------------------------------
# Keras layout of a blob (reference §1.5, README conventions), independent of tfdet's rules
# ---------------------------------------------------------------------------------------------

_NORM_SUFFIXES = {
    "_bn_s": ("_bn", "scale"),
    "_bn_b": ("_bn", "bias"),
    "_gn_s": ("_gn", "gamma"),
    "_gn_b": ("_gn", "beta"),
}


def keras_location(blob):
    """(Keras layer name, variable name) holding a blob: layer = blob without its parameter suffix,
    `_[mask]_fcn<i>` / `_mask_fcn<i>` -> `mask_fcn<i>`."""
    for suffix, (layer_suffix, variable) in _NORM_SUFFIXES.items():
        if blob.endswith(suffix):
            layer = blob[: -len(suffix)] + layer_suffix
            break
    else:
        layer, variable = blob[:-2], {"_w": "kernel", "_b": "bias"}[blob[-2:]]
    for prefix in ("_[mask]_fcn", "_mask_fcn"):
        if layer.startswith(prefix):
            layer = "mask_fcn" + layer[len(prefix) :]
    return layer, variable


def keras_layout(blob, value):
    """A Caffe2 array in Keras layout: conv OIHW and deconv IOHW -> transpose(2, 3, 1, 0); FC (out, in)
    -> (in, out); fc6's columns from NCHW-flatten (c, y, x) to NHWC-flatten (y, x, c) order."""
    if value.ndim == 4:
        return value.transpose(2, 3, 1, 0)
    if blob == "fc6_w":
        units, size = value.shape
        return value.reshape(units, size // 49, 7, 7).transpose(2, 3, 1, 0).reshape(size, units)
    return value.T if value.ndim == 2 else value


def weighted_layers(model):
    """{layer name: {variable name: variable}} of every layer with weights, inside nested models too."""
    layers, stack = {}, list(model.layers)
    while stack:
        layer = stack.pop()
        if isinstance(layer, keras.Model):
            stack.extend(layer.layers)
        elif layer.weights:
            layers[layer.name] = {variable.name: variable for variable in layer.weights}
    return layers


def blob_variables(model, blobs):
    """{blob: the Keras variable holding it}, by `keras_location`; fails on a blob without a layer."""
    layers = weighted_layers(model)
    variables = {}
    for blob in blobs:
        layer, variable_name = keras_location(blob)
        assert layer in layers, f"{blob}: no Keras layer {layer!r}"
        variables[blob] = layers[layer][variable_name]
    return variables


def assert_variables_hold(model, blobs, every_variable=True):
    """Each blob sits in its Keras variable in Keras layout; with `every_variable`, nothing else is left."""
    filled = set()
    for blob, variable in blob_variables(model, blobs).items():
        assert_same(held(variable), keras_layout(blob, blobs[blob]), blob)
        filled.add(id(variable))
    if every_variable:
        left = [v.path for v in model.weights if id(v) not in filled]
        assert not left, f"variables no blob filled: {left}"
    return filled


# ---------------------------------------------------------------------------------------------
# The zoo models: config, blobs, the ImageNet file its TRAIN.WEIGHTS names
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ZooCase:
    """A zoo model: its config under shared/detectron/configs, its blobs, its ImageNet initialisation."""

    config: str
    arch: ZooArch
    imagenet: str  # the TRAIN.WEIGHTS file it starts from: decides the junk in its files


ZOO = {
    "keypoint_R-50-FPN": ZooCase("12_2017_baselines/e2e_keypoint_rcnn_R-50-FPN_1x.yaml", R50_KEYPOINT_FPN, "R-50.pkl"),
    "mask_R-50-C4": ZooCase("12_2017_baselines/e2e_mask_rcnn_R-50-C4_1x.yaml", R50_MASK_C4, "R-50.pkl"),
    "faster_X-101-64x4d-FPN": ZooCase(
        "12_2017_baselines/e2e_faster_rcnn_X-101-64x4d-FPN_1x.yaml", X101_64X4D_FASTER_FPN, "X-101-64x4d.pkl"
    ),
    "mask_R-50-FPN_gn": ZooCase(
        "04_2018_gn_baselines/e2e_mask_rcnn_R-50-FPN_2x_gn.yaml", R50_GN_MASK_FPN, "R-50-GN.pkl"
    ),
}


def imagenet_junk(case):
    """Non-parameter blobs of the ImageNet file (§2.1); trained files keep them (Detectron preserves them)."""
    if case.imagenet == "R-50.pkl":
        return msra_imagenet_junk(body_blob_shapes(case.arch))
    junk = resnext_imagenet_junk()
    if case.imagenet == "X-101-64x4d.pkl":
        junk["lr"] = np.array([0.1], np.float32)  # a Caffe2 workspace blob: shape (1,)
        junk["weight_order"] = [b"conv1_w", b"res_conv1_bn_s", b"res_conv1_bn_b"]  # names; not an array
    return junk


def embedded_cfg(cfg):
    """The cfg dict a trained file embeds for this config (a few of Detectron's keys, as Detectron types them)."""
    return {
        "MODEL": {
            "TYPE": "generalized_rcnn",
            "CONV_BODY": cfg.MODEL.CONV_BODY,
            "NUM_CLASSES": cfg.MODEL.NUM_CLASSES,
            "MASK_ON": cfg.MODEL.MASK_ON,
            "KEYPOINTS_ON": cfg.MODEL.KEYPOINTS_ON,
            "BBOX_REG_WEIGHTS": FILE_BBOX_REG_WEIGHTS,
        },
        "RESNETS": {"NUM_GROUPS": cfg.RESNETS.NUM_GROUPS, "STRIDE_1X1": cfg.RESNETS.STRIDE_1X1},
        "FPN": {"FPN_ON": cfg.FPN.FPN_ON, "RPN_ASPECT_RATIOS": (0.5, 1, 2)},
        "TEST": {"SCALE": 800, "MAX_SIZE": 1333, "NMS": 0.5},
        "PIXEL_MEANS": PIXEL_MEANS,
    }


def write_trained_file(path, case, cfg, blobs):
    """model_final.pkl as Detectron (Python 2) saved it: parameters, momentum, preserved ImageNet junk, cfg."""
    junk = {**momentum_junk(blobs), **imagenet_junk(case)}
    write_py2_detectron_file(path, {**blobs, **junk}, detectron_cfg_yaml(embedded_cfg(cfg)))
    return junk


def zoo_config(case):
    return load_config(shared_path("detectron", "configs", *case.config.split("/")))


@pytest.fixture(scope="module", params=list(ZOO))
def zoo(request):
    """(case, cfg, model) of one zoo model, built once for the module from Detectron's own YAML (zero
    kernels: the tests assign every value they check)."""
    case = ZOO[request.param]
    cfg = zoo_config(case)
    with placeholder_initialization():
        return case, cfg, build_model(cfg)


@pytest.fixture(scope="module")
def trained(zoo, module_scratch_path):
    """(blob shapes, random blobs, junk blobs, path) of the zoo model's trained file, drawn and written
    once for the module; the file is removed with the model's other fixtures."""
    case, cfg, _ = zoo
    shapes = zoo_blob_shapes(case.arch)
    blobs = random_blobs(shapes, np.random.default_rng(0))
    path = module_scratch_path / f"{case.config.replace('/', '_')}.model_final.pkl"
    junk = write_trained_file(path, case, cfg, blobs)
    yield shapes, blobs, junk, path
    path.unlink()


def test_trained_file_ports_into_detectron_layout_and_exports_identical_arrays(zoo, trained):
    case, cfg, model = zoo
    shapes, blobs, junk, path = trained

    report = load_detectron_weights(model, cfg, path)
    assert report.ok, report.format()
    assert {name: shape for name, shape, _ in report.loaded} == shapes
    assert report.bbox_reg_weights == FILE_BBOX_REG_WEIGHTS  # read from the Python-tagged cfg
    assert_variables_hold(model, blobs)

    exported = model_to_blobs(model, cfg.MRCNN.ROI_MASK_HEAD)  # the writer's blobs (file: CLI test below)
    assert set(exported) == set(shapes)
    for name, value in blobs.items():
        assert_same(exported[name], value, name)
    # Every junk blob is ignored on purpose (reference §3.4 rule 1 names lr and weight_order too).
    assert {name for name, _ in report.ignored} == set(junk) and report.unused == [], report.format()


def distinct_values(shape, index):
    """float32 `index`, `index` + 1, ... in `shape`: no two elements of an array equal, and no two arrays
    of different `index` (a move, transpose or swap of them shows); exact below 2**24 elements."""
    return np.arange(index, index + int(np.prod(shape)), dtype=np.float32).reshape(shape)


@pytest.mark.parametrize("zoo", ["keypoint_R-50-FPN", "faster_X-101-64x4d-FPN", "mask_R-50-FPN_gn"], indirect=True)
def test_imagenet_file_loads_body_and_reports_missing_heads(zoo, trained, scratch_path):
    case, cfg, model = zoo
    shapes, blobs, _, _ = trained
    # The trained file's body values negated: the model holds the trained file when the test above ran
    # first, and the body check below must fail unless this file's body is loaded.
    body = {name: -blobs[name] for name in body_blob_shapes(case.arch)}
    junk = imagenet_junk(case)
    path = scratch_path / case.imagenet
    write_py2_pickle(path, {name.encode(): value for name, value in {**body, **junk}.items()})
    body_variables = {id(variable) for variable in blob_variables(model, body).values()}
    heads = [variable for variable in model.weights if id(variable) not in body_variables]
    heads = [(variable, distinct_values(variable.shape, index)) for index, variable in enumerate(heads)]
    for variable, value in heads:  # values of their own, as after a random initialisation
        variable.assign(value)

    report = load_detectron_weights(model, cfg, path, allow_missing=True)
    assert sorted(name for name, _, _ in report.loaded) == sorted(body)
    assert dict(report.missing) == {name: shape for name, shape in shapes.items() if name not in body}
    assert_variables_hold(model, body, every_variable=False)
    for variable, value in heads:  # heads keep what they had
        assert_same(held(variable), value, variable.path)
    assert {name for name, _ in report.ignored} == set(junk) and report.unused == [], report.format()


def test_python2_file_needs_latin1_and_carries_python_tagged_cfg(rng):
    cfg = zoo_config(ZOO["keypoint_R-50-FPN"])
    text = detectron_cfg_yaml(embedded_cfg(cfg))
    for tag in ("!!python/object/new:detectron.utils.collections.AttrDict", "!!python/tuple",
                "!!python/object/apply:numpy.core.multiarray._reconstruct", "!!python/unicode"):  # fmt: skip
        assert tag in text
    data = py2_detectron_file(random_blobs({"conv1_w": (64, 3, 7, 7)}, rng), text)
    with pytest.raises(UnicodeDecodeError):
        pickle.loads(data)  # what Python 3 does without Detectron's encoding='latin1'
    parsed = parse_embedded_cfg(text)
    assert parsed["MODEL"]["NUM_CLASSES"] == 2 and parsed["MODEL"]["KEYPOINTS_ON"] is True
    assert parsed["MODEL"]["BBOX_REG_WEIGHTS"] == FILE_BBOX_REG_WEIGHTS
    assert parsed["MODEL"]["CONV_BODY"] == "FPN.add_fpn_ResNet50_conv5_body"
    assert parsed["PIXEL_MEANS"] == PIXEL_MEANS.tolist()


@pytest.mark.parametrize("zoo", ["mask_R-50-C4"], indirect=True)  # the smallest zoo file; res5 shared by ']_'
def test_export_detectron_cli_writes_back_the_ported_file_blobs(zoo, trained, scratch_path):
    case, cfg, model = zoo
    shapes, blobs, junk, source = trained
    load_detectron_weights(model, cfg, source)
    weights = scratch_path / "ported.weights.h5"
    model.save_weights(weights)

    exported = scratch_path / "exported.pkl"
    config = shared_path("detectron", "configs", *case.config.split("/"))
    # `python -m porting export-detectron`'s main, in this process (test_porting_cli.py runs `python -m
    # porting` in a fresh interpreter).
    export = ["export-detectron", "--cfg", str(config), "--weights", str(weights), "--out", str(exported)]
    assert porting_main(export) == 0
    back = read_weight_file(exported)
    assert set(shapes) <= set(back.blobs) and set(back.blobs) - set(shapes) <= set(junk)  # junk may be preserved
    for name, value in blobs.items():
        assert_same(back.blobs[name], value, name)
    assert parse_embedded_cfg(back.cfg_text)["MODEL"]["NUM_CLASSES"] == 81
