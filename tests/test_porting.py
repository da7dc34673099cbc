"""Porting Detectron .pkl files into tfdet models: round trip, report, errors, CLI, Predictor.

The files (Python 3 pickles at protocol 2, 180 MB) go to tmpfs when there is one; the trained file
and the one missing `fc6_w` are written once for the module. The CLI's `main` runs in this process;
test_porting_cli.py runs `python -m porting` itself in a fresh interpreter.
"""

import pickle
import warnings

import cv2
import numpy as np
import pytest

from porting import load_detectron_weights, read_weight_file
from porting.__main__ import main as porting_main
from support.paths import shared_path
from support.porting_fixtures import (  # noqa: F401 (fixtures)
    assert_same,
    held,
    module_scratch_path,
    scratch_path,
    snapshot,
    unchanged,
)
from support.porting_source import CONFIG, SMALL, cfg, same_weights, source, target_model  # noqa: F401 (fixtures)
from tfdet.config import load_config
from tfdet.inference import Predictor

EMBEDDED_CFG = """!!python/object/new:detectron.utils.collections.AttrDict
dictitems:
  MODEL: !!python/object/new:detectron.utils.collections.AttrDict
    dictitems:
      NUM_CLASSES: 4
      {weights}
"""


def write_pkl(path, blobs, extra=None, weights_line="BBOX_REG_WEIGHTS: !!python/tuple [10.0, 10.0, 5.0, 5.0]"):
    """A trained-model file as Detectron writes it: protocol 2, junk blobs included."""
    junk = {"conv1_b": np.zeros(64, np.float32), "res2_0_branch2a_b": np.zeros(64, np.float32),
            "fc1000_w": np.ones((1000, 2048), np.float32), "fc6_w_momentum": np.zeros((2, 2), np.float32)}  # fmt: skip
    content = {"blobs": {**blobs, **junk, **(extra or {})}, "cfg": EMBEDDED_CFG.format(weights=weights_line)}
    path.write_bytes(pickle.dumps(content, protocol=2))
    return path


@pytest.fixture(scope="module")
def trained_pkl(source, module_scratch_path):
    """The source model's trained file, junk and an `lr` scalar included, written once for the module."""
    return write_pkl(module_scratch_path / "model_final.pkl", source[1], {"lr": np.float32(0.02)})


@pytest.fixture(scope="module")
def pkl_without_fc6(source, module_scratch_path):
    """The trained file without `fc6_w` (and without `lr`), written once for the module."""
    return write_pkl(module_scratch_path / "no_fc6.pkl", {k: v for k, v in source[1].items() if k != "fc6_w"})


def test_round_trip_loads_every_variable_and_reports_junk(cfg, source, trained_pkl):
    model, blobs = source
    target = target_model(cfg)
    report = load_detectron_weights(target, cfg, trained_pkl)
    assert report.ok and len(report.loaded) == len(blobs) and report.unused == []
    assert same_weights(model, target)
    ignored = dict(report.ignored)
    assert set(ignored) == {"conv1_b", "res2_0_branch2a_b", "fc1000_w", "fc6_w_momentum", "lr"}
    assert "momentum" in ignored["fc6_w_momentum"] and "classifier" in ignored["fc1000_w"]


def test_missing_blob_fails_and_changes_nothing(cfg, pkl_without_fc6):
    target = target_model(cfg)  # zero kernels: any value from the file would show
    before = snapshot(target)
    with pytest.raises(ValueError, match=r"MISSING fc6_w: expected shape \(1024, 12544\)"):
        load_detectron_weights(target, cfg, pkl_without_fc6)
    assert unchanged(target, before)


def test_shape_mismatch_names_blob_and_both_shapes(cfg, source, scratch_path):
    _, blobs = source
    wrong = dict(blobs, cls_score_w=np.zeros((81, 1024), np.float32))
    with pytest.raises(ValueError, match=r"SHAPE MISMATCH cls_score_w: model expects \(4, 1024\), file has \(81, 1024\)"):
        load_detectron_weights(target_model(cfg), cfg, write_pkl(scratch_path / "m.pkl", wrong))


def test_imagenet_backbone_with_allow_missing(cfg, source, scratch_path):
    _, blobs = source
    backbone = {k: v for k, v in blobs.items() if k.startswith(("conv1", "res"))}
    path = scratch_path / "R-50.pkl"
    path.write_bytes(pickle.dumps({**backbone, "fc1000_w": np.zeros((1000, 2048), np.float32)}, protocol=2))
    target = target_model(cfg)
    report = load_detectron_weights(target, cfg, path, allow_missing=True)
    assert len(report.loaded) == len(backbone) == 159
    assert {name for name, _ in report.missing} >= {"fpn_inner_res5_2_sum_w", "fc6_w", "conv5_mask_w"}
    np.testing.assert_array_equal(target.get_layer("conv1").kernel.numpy(), blobs["conv1_w"].transpose(2, 3, 1, 0))
    with pytest.raises(ValueError, match="MISSING"):
        load_detectron_weights(target, cfg, path)


def test_file_without_bbox_reg_weights_uses_unit_weights(cfg, source, scratch_path):
    _, blobs = source
    path = write_pkl(scratch_path / "old.pkl", blobs, weights_line="NUM_GPUS_UNUSED: 1")
    target = target_model(cfg)
    with pytest.warns(UserWarning, match="BBOX_REG_WEIGHTS"):
        report = load_detectron_weights(target, cfg, path)
    assert report.bbox_reg_weights == (1.0, 1.0, 1.0, 1.0)
    assert target.get_layer("detections").bbox_reg_weights == (1.0, 1.0, 1.0, 1.0)


# Two R-50 Predictors traced (~1 min on 2 cores). By default, a .pkl through `tfdet.weights.weights_file.load_weights`
# (what Predictor(cfg, "x.pkl") runs) giving the source model's detections is checked by
# test_savedmodel.py::test_serving_default_batch_matches_predictor[mask_rcnn] (exported from a .pkl), and
# Predictor on a .pkl by test_infer.py::test_mask_rcnn_subprocess_with_detectron_command_line.
@pytest.mark.slow
def test_predictor_on_pkl_gives_the_source_models_detections(cfg, source, trained_pkl, scratch_path):
    model, _ = source
    image = cv2.imread(str(sorted(shared_path("data", "detectron_demo").glob("*.jpg"))[0]))
    ported = Predictor(cfg, trained_pkl).predict(image)
    weights = scratch_path / "source.weights.h5"
    model.save_weights(weights)
    original = Predictor(cfg, weights).predict(image)
    for key in original:
        np.testing.assert_array_equal(ported[key], original[key])


def test_cli_writes_weights_and_config(cfg, source, trained_pkl, pkl_without_fc6, scratch_path, capsys):
    out = scratch_path / "ported"
    # The `main` of `python -m porting detectron ...`, in this process: it returns the command's exit status.
    command = ["detectron", "--cfg", str(CONFIG), "--weights", str(trained_pkl), "--out", str(out), *SMALL]
    assert porting_main(command) == 0
    printed = capsys.readouterr().out
    assert "loaded 201 blobs" in printed and "ignored" in printed
    ported_cfg = load_config(out / "config.yaml")
    assert ported_cfg.MODEL.NUM_CLASSES == 4
    reloaded = target_model(ported_cfg)
    reloaded.load_weights(out / "model.weights.h5")
    assert same_weights(source[0], reloaded)
    # The failures: a missing blob (status 1), a file that is not safe to read (status 2).
    assert porting_main(command[:4] + [str(pkl_without_fc6)] + command[5:]) == 1
    assert "MISSING fc6_w" in capsys.readouterr().err
    evil = scratch_path / "evil.pkl"
    evil.write_bytes(b"\x80\x02cos\nsystem\nq\x00X\x05\x00\x00\x00touchq\x01\x85q\x02Rq\x03.")
    assert porting_main(command[:4] + [str(evil)] + command[5:]) == 2
    assert "os.system" in capsys.readouterr().err


def test_export_detectron_round_trip_with_numpy1_names(cfg, source, scratch_path):
    model, blobs = source
    weights = scratch_path / "source.weights.h5"
    model.save_weights(weights)
    out = scratch_path / "model_final.pkl"
    command = ["export-detectron", "--cfg", str(CONFIG), "--weights", str(weights), "--out", str(out), *SMALL]
    assert porting_main(command) == 0  # the `main` of `python -m porting export-detectron ...`
    raw = out.read_bytes()
    assert raw[:2] == b"\x80\x02" and b"numpy.core.multiarray" in raw and b"numpy._core" not in raw

    exported = read_weight_file(out)
    assert set(exported.blobs) == set(blobs)
    for name, value in blobs.items():
        assert_same(exported.blobs[name], value, name)
    assert "NUM_CLASSES: 4" in exported.cfg_text
    # What Detectron's load_object does with it (plain pickle, latin1), here under numpy 2.
    with open(out, "rb") as f, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        plain = pickle.load(f, encoding="latin1")
    np.testing.assert_array_equal(plain["blobs"]["fc6_w"], blobs["fc6_w"])
