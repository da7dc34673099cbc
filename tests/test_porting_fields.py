"""Weight-file fields that fill no variable but decide what the weights compute, checked against the config.

maskrcnn-benchmark's `rpn.anchor_generator.cell_anchors.*` buffers and the `cfg` a trained Detectron `.pkl`
saves are compared with the config the model is built from (`porting.config_checks`): equal ones are
reported as checked, a contradiction refuses the port in one line and changes nothing. The file anchors
are made by a numpy replica of maskrcnn-benchmark's own `generate_anchors` (`modeling/rpn/anchor_generator.py`;
support/benchmark_checkpoints.py), not by tfdet's generator. Models are RPN-only R-50 bodies with placeholder
initialisation (built in about a second).
"""

import pickle

import numpy as np
import pytest

from porting.__main__ import main as porting_main
from porting.config_checks import ANCHORS_EQUAL, check_cell_anchors, check_saved_cfg
from porting.detectron_loader import load_detectron_weights
from porting.embedded_cfg import parse_embedded_cfg
from porting.maskrcnn_benchmark_loader import benchmark_blobs, load_maskrcnn_benchmark_weights
from porting.maskrcnn_benchmark_names import detectron_blob_names
from support.benchmark_checkpoints import (
    FIRST,
    benchmark_generate_anchors,
    benchmark_state,
    c4_anchor_state,
    fpn_anchor_state,
    random_blobs,
    torch_writer,
)
from support.detectron_fixtures import detectron_cfg_yaml
from support.paths import shared_path
from tfdet.config import load_config
from tfdet.layers import placeholder_initialization
from tfdet.modeling import build_model

BASELINES = ("detectron", "configs", "12_2017_baselines")
FPN_CONFIG = (*BASELINES, "e2e_faster_rcnn_R-50-FPN_1x.yaml")
C4_CONFIG = (*BASELINES, "e2e_faster_rcnn_R-50-C4_1x.yaml")
RPN_ONLY = ["MODEL.RPN_ONLY", "True"]


def built(config, overrides=()):
    cfg = load_config(shared_path(*config), [*RPN_ONLY, *overrides])
    with placeholder_initialization():
        model = build_model(cfg)
    return cfg, model, random_blobs(model, "")


@pytest.fixture(scope="module")
def fpn():
    return built(FPN_CONFIG)


@pytest.fixture(scope="module")
def c4():
    return built(C4_CONFIG)


@pytest.fixture(scope="module")
def small_anchors(fpn, tmp_path_factory):
    """An FPN checkpoint whose anchors have sizes 16..256 (the config's: 32..512)."""
    path = tmp_path_factory.mktemp("pth") / "small.pth"
    return write_pth(path, fpn[2], fpn_anchor_state(sizes=(16, 32, 64, 128, 256)))


def values(model):
    return [v.numpy().copy() for v in model.weights]


def error_lines(err):
    """The lines of stderr besides the progress bar's (`porting: 45%|...`)."""
    return [line for line in err.splitlines() if line.strip() and not line.startswith("porting:")]


def write_pth(path, blobs, anchors, c4=False):
    """A checkpoint of `blobs` in maskrcnn-benchmark's module names, holding `anchors` as its anchor buffers."""
    state = {k: v for k, v in benchmark_state(blobs, c4).items() if not k.startswith("rpn.anchor_generator.")}
    torch_writer.write_zip(path, {"model": {**state, **anchors}, "iteration": np.int64(100)})
    return path


# --------------------------------------------------------------------------- maskrcnn-benchmark anchors


def test_replica_gives_maskrcnn_benchmarks_published_p2_anchors():
    """The P2 anchors of maskrcnn-benchmark's FPN generator (size 32, stride 4), as its own test lists them."""
    expected = [[-22, -10, 25, 13], [-14, -14, 17, 17], [-10, -22, 13, 25]]
    np.testing.assert_array_equal(benchmark_generate_anchors(4, (32,), (0.5, 1.0, 2.0)), expected)


def test_matching_fpn_anchors_port_and_are_reported_checked(fpn, tmp_path):
    cfg, model, blobs = fpn
    report = load_maskrcnn_benchmark_weights(model, cfg, write_pth(tmp_path / "fpn.pth", blobs, fpn_anchor_state()))
    assert report.ok and len(report.loaded) == len(blobs)
    assert report.checked == [(f"rpn.anchor_generator.cell_anchors.{i}", ANCHORS_EQUAL) for i in range(5)]
    assert not any("anchor" in name for name, _ in report.ignored)
    assert "checked 5 fields against the config" in report.format() and "5 x equal to the config's anchors" in report.format()


def test_fpn_anchors_of_sizes_16_to_256_are_refused_and_change_nothing(fpn, small_anchors):
    cfg, model, _ = fpn
    before = values(model)
    with pytest.raises(ValueError) as refused:
        load_maskrcnn_benchmark_weights(model, cfg, small_anchors)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{small_anchors}: {FIRST} holds 3 anchors")
    assert "24x12 16x16 12x24" in message and "48x24 32x32 24x48" in message  # the file's and the config's
    assert "FPN.RPN_ANCHOR_START_SIZE 32" in message and "cell_anchors.4" in message
    assert message.endswith("set the config's anchor keys to the ones the model was trained with")
    assert all(np.array_equal(a, b) for a, b in zip(before, values(model)))


def test_reordered_aspect_ratios_are_refused(fpn, tmp_path):
    """The same boxes in another order pair the RPN's outputs with the wrong anchors."""
    cfg, model, blobs = fpn
    path = write_pth(tmp_path / "ratios.pth", blobs, fpn_anchor_state(aspect_ratios=(2.0, 1.0, 0.5)))
    with pytest.raises(ValueError, match=r"cell_anchors\.0 holds 3 anchors \(w x h\) 24x48 32x32 48x24 .*FPN\.RPN_ASPECT_RATIOS \(0\.5, 1, 2\)\): 48x24 32x32 24x48"):
        load_maskrcnn_benchmark_weights(model, cfg, path)


def test_c4_checkpoint_anchors_are_checked_against_rpn_sizes(c4, tmp_path):
    cfg, model, blobs = c4
    path = write_pth(tmp_path / "c4.pth", blobs, c4_anchor_state(), c4=True)
    report = load_maskrcnn_benchmark_weights(model, cfg, path)
    assert report.ok and report.checked == [(FIRST, ANCHORS_EQUAL)]
    before = values(model)
    halved = load_config(shared_path(*C4_CONFIG), [*RPN_ONLY, "RPN.SIZES", "(16, 32, 64, 128, 256)"])  # 15 anchors still
    with pytest.raises(ValueError, match=r"holds 15 anchors .*RPN\.SIZES \(16, 32, 64, 128, 256\), RPN\.ASPECT_RATIOS \(0\.5, 1, 2\), RPN\.STRIDE 16"):
        load_maskrcnn_benchmark_weights(model, halved, path)
    assert all(np.array_equal(a, b) for a, b in zip(before, values(model)))


def test_allow_missing_warns_about_other_anchors_and_ports(fpn, small_anchors):
    """An initialisation (allow_missing: the model will be trained) may start from other anchors, said aloud."""
    cfg, model, _ = fpn
    with pytest.warns(UserWarning, match=f"{FIRST} holds 3 anchors.*accepted: allow_missing"):
        report = load_maskrcnn_benchmark_weights(model, cfg, small_anchors, allow_missing=True)
    assert len(report.conflicts) == 5 and f"CONFLICT {FIRST}" in report.format()


def test_anchor_tensor_count_and_models_without_rpn():
    fpn_cfg = load_config(shared_path(*FPN_CONFIG), RPN_ONLY)
    four = {k: v for k, v in fpn_anchor_state().items() if not k.endswith(".4")}
    checked, conflicts = check_cell_anchors(four, fpn_cfg)
    assert len(checked) == 4 and [c[0] for c in conflicts] == ["rpn.anchor_generator.cell_anchors.*"]
    assert "are 4 tensors, the config's RPN has 5 levels (FPN.RPN_MIN_LEVEL 2 to FPN.RPN_MAX_LEVEL 6)" in conflicts[0][1]
    six = {**fpn_anchor_state(), "rpn.anchor_generator.cell_anchors.5": benchmark_generate_anchors(128, (1024,), (0.5, 1, 2))}
    _, conflicts = check_cell_anchors(six, fpn_cfg)
    assert [c[0] for c in conflicts] == ["rpn.anchor_generator.cell_anchors.5"] and "has no RPN level" in conflicts[0][1]
    fast_rcnn = load_config(shared_path(*BASELINES, "fast_rcnn_R-50-FPN_1x.yaml"))  # proposals from files: no RPN
    checked, conflicts = check_cell_anchors(fpn_anchor_state(), fast_rcnn)
    assert conflicts == [] and all("no RPN" in how for _, how in checked)


def test_cli_refuses_other_anchors_with_one_line_and_writes_nothing(small_anchors, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["maskrcnn-benchmark", "--cfg", str(shared_path(*FPN_CONFIG)), "--weights", str(small_anchors), "--out", str(out), *RPN_ONLY]
    capsys.readouterr()
    assert porting_main(argv) == 1
    (error,) = error_lines(capsys.readouterr().err)
    assert FIRST in error and "FPN.RPN_ANCHOR_START_SIZE 32" in error
    assert not out.exists()
    # The config with the sizes the model was trained with ports it.
    assert porting_main([*argv, "FPN.RPN_ANCHOR_START_SIZE", "16"]) == 0
    assert "5 x equal to the config's anchors" in capsys.readouterr().out and (out / "model.weights.h5").is_file()


# --------------------------------------------------------------------------- other maskrcnn-benchmark fields


def test_frozen_batch_norm_without_its_statistics_is_refused():
    """A running_var without its running_mean cannot be folded: the scale would be loaded unfolded."""
    state = {"backbone.body.stem.conv1.weight": np.ones((64, 3, 7, 7), np.float32)}
    for part, value in (("weight", 2.0), ("bias", 0.5), ("running_var", 4.0)):
        state[f"backbone.body.stem.bn1.{part}"] = np.full(64, value, np.float32)
    with pytest.raises(ValueError, match=r"FrozenBatchNorm2d backbone\.body\.stem\.bn1 lacks backbone\.body\.stem\.bn1\.running_mean"):
        benchmark_blobs(state, "m.pth")


def test_domain_classifiers_of_the_da_fork_are_ignored_with_their_reason():
    names = detectron_blob_names(["da_heads.imghead.conv1_da.weight", "da_heads.inshead.fc3_da.bias", "rpn.head.conv.weight"])
    assert set(names.ignored) == {"da_heads.imghead.conv1_da.weight", "da_heads.inshead.fc3_da.bias"}
    assert all("DA losses" in reason for reason in names.ignored.values()) and names.unknown == []


# --------------------------------------------------------------------------- the cfg saved in Detectron files


def saved_cfg(**changes):
    """The `cfg` of a trained RPN-only R-50-C4 file, Detectron-typed (AttrDicts, tuples, numpy means)."""
    sections = {
        "MODEL": {"TYPE": "generalized_rcnn", "CONV_BODY": "ResNet.add_ResNet50_conv4_body", "NUM_CLASSES": 81,
                  "FASTER_RCNN": True, "RPN_ONLY": True, "BBOX_REG_WEIGHTS": (10.0, 10.0, 5.0, 5.0)},
        "RESNETS": {"STRIDE_1X1": True, "TRANS_FUNC": "bottleneck_transformation"},
        "RPN": {"SIZES": (32, 64, 128, 256, 512), "STRIDE": 16, "ASPECT_RATIOS": (0.5, 1, 2)},
        "FPN": {"FPN_ON": False, "RPN_ANCHOR_START_SIZE": 32},  # not the C4 model's anchors: not compared
        "FAST_RCNN": {"ROI_XFORM_SAMPLING_RATIO": 0},
        "TEST": {"SCALE": 800, "MAX_SIZE": 1333},
        "PIXEL_MEANS": np.array([[[102.9801, 115.9465, 122.7717]]]),
    }  # fmt: skip
    for key, value in changes.items():  # SECTION__KEY=value, or a top-level KEY=value
        section, _, leaf = key.partition("__")
        if leaf:
            sections[section][leaf] = value
        else:
            sections[section] = value
    return detectron_cfg_yaml(sections)


def write_pkl(path, blobs, cfg_text):
    path.write_bytes(pickle.dumps({"blobs": blobs, "cfg": cfg_text}, protocol=2))
    return path


@pytest.fixture(scope="module")
def contradicting_pkl(c4, tmp_path_factory):
    """A trained C4 file whose saved cfg has other anchor sizes and the stride in the 3x3 convs."""
    cfg_text = saved_cfg(RPN__SIZES=(16, 32, 64, 128, 256), RESNETS__STRIDE_1X1=False)
    return write_pkl(tmp_path_factory.mktemp("pkl") / "m.pkl", c4[2], cfg_text)


def test_saved_cfg_keys_are_checked_test_time_keys_are_not():
    """Keys of the model checked, each equal one reported; TEST.SCALE, the RoIAlign sampling ratio and the
    FPN anchors of a C4 model are not compared."""
    cfg = load_config(shared_path(*C4_CONFIG), RPN_ONLY)
    other = saved_cfg(TEST__SCALE=500, FAST_RCNN__ROI_XFORM_SAMPLING_RATIO=2, FPN__RPN_ANCHOR_START_SIZE=16)
    checked, conflicts = check_saved_cfg(parse_embedded_cfg(other), cfg)
    keys = ("PIXEL_MEANS", "RESNETS.STRIDE_1X1", "RPN.SIZES", "RPN.STRIDE", "RPN.ASPECT_RATIOS")
    assert conflicts == [] and checked == [(f"saved cfg {key}", "the saved config's value equals the config's") for key in keys]
    reordered = saved_cfg(RPN__ASPECT_RATIOS=(2, 1, 0.5), PIXEL_MEANS=np.array([[[103.53, 116.28, 123.675]]]))
    _, conflicts = check_saved_cfg(parse_embedded_cfg(reordered), cfg)
    (field, detail, _), = conflicts
    assert field == "saved cfg" and "RPN.ASPECT_RATIOS (2, 1, 0.5) (the config: (0.5, 1, 2))" in detail
    assert "PIXEL_MEANS (((103.53, 116.28, 123.675),),) (the config: (((102.9801, 115.9465, 122.7717),),))" in detail


def test_saved_cfg_contradicting_the_config_is_refused_in_one_line(c4, contradicting_pkl):
    cfg, model, _ = c4
    before = values(model)
    with pytest.raises(ValueError) as refused:
        load_detectron_weights(model, cfg, contradicting_pkl)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{contradicting_pkl}: saved cfg says the model was trained with")
    assert "RESNETS.STRIDE_1X1 False (the config: True)" in message
    assert "RPN.SIZES (16, 32, 64, 128, 256) (the config: (32, 64, 128, 256, 512))" in message
    assert message.endswith("set these keys to the file's values, the ones the model was trained with")
    assert all(np.array_equal(a, b) for a, b in zip(before, values(model)))


def test_detectron_cli_refuses_a_contradicting_cfg_and_writes_nothing(contradicting_pkl, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["detectron", "--cfg", str(shared_path(*C4_CONFIG)), "--weights", str(contradicting_pkl), "--out", str(out), *RPN_ONLY]
    capsys.readouterr()
    assert porting_main(argv) == 1
    (error,) = error_lines(capsys.readouterr().err)
    assert "saved cfg says the model was trained with" in error and "RPN.SIZES (16, 32, 64, 128, 256)" in error
    assert not out.exists()
    # Without --cfg, the file's own config builds the model: nothing to contradict.
    assert porting_main(argv[:1] + argv[3:]) == 0
    assert "saved cfg RPN.SIZES" in capsys.readouterr().out and (out / "model.weights.h5").is_file()
