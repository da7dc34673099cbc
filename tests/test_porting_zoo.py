"""Porting whole Detectron zoo models: files with the zoo models' exact blob names and shapes.

The blob inventory of each model comes from reference/detectron.md §2's naming rules through a
small generator (support/detectron_fixtures.py: stage counts, widths, groups, FPN / RPN / head names), checked
here against the counts §2 documents, never from tfdet's own `model_blobs`. Values are random; each
file is ported into the model built from Detectron's own zoo config, every Keras variable is
compared with its blob under §1.5's layout rules (support/porting_fixtures.py), and the blobs the model
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

import numpy as np
import pytest

from porting import load_detectron_weights, parse_embedded_cfg, read_weight_file
from porting.__main__ import main as porting_main
from porting.detectron_writer import model_to_blobs
from support.detectron_fixtures import (
    R50_GN_MASK_FPN,
    R50_KEYPOINT_FPN,
    R50_MASK_C4,
    R50_MASK_FPN,
    X101_64X4D_FASTER_FPN,
    ZooArch,
    body_blob_shapes,
    detectron_cfg_yaml,
    momentum_junk,
    msra_imagenet_junk,
    py2_detectron_file,
    random_blobs,
    resnext_imagenet_junk,
    write_py2_detectron_file,
    write_py2_pickle,
    zoo_blob_shapes,
)
from support.numpy_reference import PIXEL_MEANS
from support.paths import shared_path
from support.porting_fixtures import (  # noqa: F401 (fixtures)
    assert_same,
    assert_variables_hold,
    blob_variables,
    held,
    module_scratch_path,
    scratch_path,
)
from tfdet.config import load_config
from tfdet.layers import placeholder_initialization
from tfdet.modeling import build_model

FILE_BBOX_REG_WEIGHTS = (10.0, 10.0, 5.0, 5.0)

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
