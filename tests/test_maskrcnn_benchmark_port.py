"""maskrcnn-benchmark .pth checkpoints ported into tfdet models: names, frozen BN, heads, report, errors.

The end-to-end checkpoints are made the way maskrcnn-benchmark itself names Detectron weights:
Detectron blobs of a tfdet model (random values) go through the renaming of
``maskrcnn_benchmark/utils/c2_model_loading.py``, replayed from its source, and are placed in
its module tree (``backbone.body``, ``backbone.fpn``, ``rpn.head``, ``roi_heads.*``; both in
``tests/support/benchmark_checkpoints.py``); the file is
written in torch's zip / legacy format by ``tests/fixtures/torch_writer.py`` (checked against real
torch.save files in test_pth_reader.py). Porting it back must give every variable its value.
Checkpoints go to tmpfs when there is one; the CLI's `main` runs in this process (test_porting_cli.py
runs `python -m porting` in a fresh interpreter).
"""

import re
import sys

import numpy as np
import pytest

from porting.maskrcnn_benchmark_loader import benchmark_blobs, load_maskrcnn_benchmark_weights, split_checkpoint
from porting.maskrcnn_benchmark_names import detectron_blob_names
from porting.__main__ import main as porting_main
from porting.pth_reader import read_pth
from support.benchmark_checkpoints import (
    assert_model_holds,
    benchmark_state,
    c2_renamed,
    config_anchors,
    module_key,
    random_blobs,
    torch_writer,
)
from support.paths import REPO_ROOT, shared_path
from support.porting_fixtures import assert_same, held, scratch_path, snapshot, unchanged  # noqa: F401 (fixture)
from tfdet.config import load_config
from tfdet.layers import placeholder_initialization
from tfdet.layers.bilinear_upsample import bilinear_kernel
from tfdet.modeling import build_model
from tfdet.modeling.detectron_names import detectron_inventory

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "pth"
BASELINES = ("detectron", "configs", "12_2017_baselines")
SMALL = ["MODEL.NUM_CLASSES", "4"]


# --------------------------------------------------------------------------- models


def built(*config, overrides=()):
    cfg = load_config(shared_path(*config), list(overrides))
    model = build_model(cfg)
    return cfg, model, random_blobs(model, cfg.MRCNN.ROI_MASK_HEAD)


@pytest.fixture(scope="module")
def fpn():
    return built(*BASELINES, "e2e_mask_rcnn_R-50-FPN_1x.yaml", overrides=SMALL)


@pytest.fixture(scope="module")
def keypoint():
    return built(*BASELINES, "e2e_keypoint_rcnn_R-50-FPN_1x.yaml")


# --------------------------------------------------------------------------- names


def test_names_of_a_real_maskrcnn_benchmark_state_dict():
    """The keys of the torch-saved fixture (real module names) against the reference's name table."""
    state, _, _ = split_checkpoint(read_pth(FIXTURES / "checkpoint_zip.pth"))
    names = detectron_blob_names(state)
    expected = {
        "conv1_w": "backbone.body.stem.conv1.weight",
        "res_conv1_bn_s": "backbone.body.stem.bn1.weight",
        "res_conv1_bn_b": "backbone.body.stem.bn1.bias",
        "res2_0_branch1_w": "backbone.body.layer1.0.downsample.0.weight",
        "res2_0_branch1_bn_s": "backbone.body.layer1.0.downsample.1.weight",
        "res2_0_branch1_bn_b": "backbone.body.layer1.0.downsample.1.bias",
        "res2_0_branch2a_w": "backbone.body.layer1.0.conv1.weight",
        "res2_0_branch2a_bn_s": "backbone.body.layer1.0.bn1.weight",
        "res2_0_branch2a_bn_b": "backbone.body.layer1.0.bn1.bias",
        "res2_0_branch2b_w": "backbone.body.layer1.0.conv2.weight",
        "res2_0_branch2b_bn_s": "backbone.body.layer1.0.bn2.weight",
        "res2_0_branch2b_bn_b": "backbone.body.layer1.0.bn2.bias",
        "res2_0_branch2c_w": "backbone.body.layer1.0.conv3.weight",
        "res2_0_branch2c_bn_s": "backbone.body.layer1.0.bn3.weight",
        "res2_0_branch2c_bn_b": "backbone.body.layer1.0.bn3.bias",
        "fpn_inner_res2_0_sum_lateral_w": "backbone.fpn.fpn_inner1.weight",
        "fpn_inner_res2_0_sum_lateral_b": "backbone.fpn.fpn_inner1.bias",
        "fpn_res2_0_sum_w": "backbone.fpn.fpn_layer1.weight",
        "fpn_res2_0_sum_b": "backbone.fpn.fpn_layer1.bias",
        "conv_rpn_fpn2_w": "rpn.head.conv.weight",
        "conv_rpn_fpn2_b": "rpn.head.conv.bias",
        "rpn_cls_logits_fpn2_w": "rpn.head.cls_logits.weight",
        "rpn_cls_logits_fpn2_b": "rpn.head.cls_logits.bias",
        "rpn_bbox_pred_fpn2_w": "rpn.head.bbox_pred.weight",
        "rpn_bbox_pred_fpn2_b": "rpn.head.bbox_pred.bias",
        "fc6_w": "roi_heads.box.feature_extractor.fc6.weight",
        "fc6_b": "roi_heads.box.feature_extractor.fc6.bias",
        "fc7_w": "roi_heads.box.feature_extractor.fc7.weight",
        "fc7_b": "roi_heads.box.feature_extractor.fc7.bias",
        "cls_score_w": "roi_heads.box.predictor.cls_score.weight",
        "cls_score_b": "roi_heads.box.predictor.cls_score.bias",
        "bbox_pred_w": "roi_heads.box.predictor.bbox_pred.weight",
        "bbox_pred_b": "roi_heads.box.predictor.bbox_pred.bias",
    }
    assert names.blobs == expected
    assert set(names.ignored) == {k for k in state if k.endswith(("running_mean", "running_var"))}
    assert names.anchors == ["rpn.anchor_generator.cell_anchors.0"]  # checked against the config by the loader
    assert names.unknown == [] and names.shared == {}
    assert "torch" not in sys.modules


def test_data_parallel_prefix_is_stripped_and_checkpoint_entries_reported():
    bare, ignored_bare, _ = split_checkpoint(read_pth(FIXTURES / "state_dict_data_parallel.pth"))
    state, ignored, iteration = split_checkpoint(read_pth(FIXTURES / "checkpoint_zip.pth"))
    assert list(bare) == list(state) and all(np.array_equal(bare[k], state[k]) for k in state)
    assert ignored_bare == [] and iteration == 90000
    reasons = dict(ignored)
    assert set(reasons) == {"optimizer", "scheduler", "iteration", "extra"}
    assert "optimizer" in reasons["optimizer"] and "scheduler" in reasons["scheduler"] and "90000" in reasons["iteration"]


def test_frozen_batch_norm_is_folded_as_it_computes():
    """x * s + b of the folded blobs equals batch norm's definition with the checkpoint's statistics."""
    state, _, _ = split_checkpoint(read_pth(FIXTURES / "checkpoint_legacy.pth"))
    blobs, names = benchmark_blobs(state)
    assert set(names.frozen_bn) == {"res_conv1_bn", "res2_0_branch1_bn", "res2_0_branch2a_bn", "res2_0_branch2b_bn", "res2_0_branch2c_bn"}
    x = np.random.default_rng(1).normal(size=(5, 8)).astype(np.float64)
    module = "backbone.body.stem.bn1"
    weight, bias, mean, var = (state[f"{module}.{p}"].astype(np.float64) for p in ("weight", "bias", "running_mean", "running_var"))
    assert not np.allclose(var, 1) and not np.allclose(mean, 0)
    reference = (x - mean) / np.sqrt(var) * weight + bias  # no eps, as FrozenBatchNorm2d
    np.testing.assert_allclose(x * blobs["res_conv1_bn_s"] + blobs["res_conv1_bn_b"], reference, rtol=1e-6, atol=1e-6)
    assert blobs["res_conv1_bn_s"].dtype == np.float32


def test_c2_renaming_replayed_matches_the_reference_examples():
    """The replay of maskrcnn-benchmark's renaming gives the names quoted in the reference (§3.2)."""
    renamed = c2_renamed(["res2_0_branch2a_w", "res_conv1_bn_s", "res3_1_branch1_bn_b", "rpn_bbox_pred_fpn2_b", "fpn_inner_res4_5_sum_lateral_w", "_[mask]_fcn2_b"])
    assert renamed == {
        "res2_0_branch2a_w": "layer1.0.conv1.weight",
        "res_conv1_bn_s": "bn1.weight",
        "res3_1_branch1_bn_b": "layer2.1.downsample.1.bias",
        "rpn_bbox_pred_fpn2_b": "rpn.head.bbox_pred.bias",
        "fpn_inner_res4_5_sum_lateral_w": "fpn_inner3.weight",
        "_[mask]_fcn2_b": "mask_fcn2.bias",
    }


def test_gn_model_names_come_back():
    """GN bodies, FPN and heads: GroupNorm modules (no running statistics) map to tfdet's `_gn` blobs."""
    cfg = load_config(shared_path("detectron", "configs", "04_2018_gn_baselines", "e2e_mask_rcnn_R-50-FPN_2x_gn.yaml"), SMALL)
    with placeholder_initialization():  # names and shapes only
        model = build_model(cfg)
    inventory = detectron_inventory(model, cfg.MRCNN.ROI_MASK_HEAD)
    # maskrcnn-benchmark wraps GN convs of the FPN and heads in nn.Sequential(conv, GroupNorm)
    # (make_layers.py) and stacks (conv, GroupNorm, ReLU) in the Xconv1fc box head (xconvs).
    sequential = {"w": "0.weight", "gn_s": "1.weight", "gn_b": "1.bias"}
    state = {}
    for blob in inventory:
        if match := re.fullmatch(r"fpn_(inner_)?res(\d)_\d+_sum(?:_lateral)?_(w|gn_s|gn_b)", blob):
            state[f"backbone.fpn.fpn_{'inner' if match[1] else 'layer'}{int(match[2]) - 1}.{sequential[match[3]]}"] = blob
        elif match := re.fullmatch(r"_mask_fcn(\d)_(w|gn_s|gn_b)", blob):
            state[f"roi_heads.mask.feature_extractor.mask_fcn{match[1]}.{sequential[match[2]]}"] = blob
        elif match := re.fullmatch(r"head_conv(\d)_(w|gn_s|gn_b)", blob):
            index = 3 * (int(match[1]) - 1) + (0 if match[2] == "w" else 1)
            state[f"roi_heads.box.feature_extractor.xconvs.{index}.{'bias' if match[2] == 'gn_b' else 'weight'}"] = blob
        else:
            state[module_key(c2_renamed([blob])[blob], c4=False)] = blob
    names = detectron_blob_names(state)
    assert names.blobs == {blob: key for key, blob in state.items()}
    assert len(names.blobs) == len(inventory) == 223 and names.frozen_bn == {} and names.unknown == []


# --------------------------------------------------------------------------- end to end


def test_mask_rcnn_fpn_checkpoint_ports_every_variable(fpn, scratch_path):
    cfg, target, blobs = fpn
    state = benchmark_state(blobs)
    # One frozen BN with real statistics: weight/bias chosen so that folding gives the blobs.
    rng = np.random.default_rng(2)
    mean, var = rng.normal(size=64).astype(np.float32), rng.uniform(0.5, 2, size=64).astype(np.float32)
    state["backbone.body.stem.bn1.running_mean"], state["backbone.body.stem.bn1.running_var"] = mean, var
    state["backbone.body.stem.bn1.weight"] = blobs["res_conv1_bn_s"] * np.sqrt(var.astype(np.float64))
    state["backbone.body.stem.bn1.bias"] = blobs["res_conv1_bn_b"] + mean * blobs["res_conv1_bn_s"].astype(np.float64)
    state["roi_heads.maskiou.maskiou_fc1.weight"] = np.ones((2, 2), np.float32)  # a head tfdet does not have
    state = {f"module.{k}": (v.astype(np.float32) if v.dtype == np.float64 else v) for k, v in state.items()}
    checkpoint = {
        "model": state,
        "optimizer": {"state": {0: {"momentum_buffer": np.ones(3, np.float32)}}, "param_groups": [{"lr": 0.02, "params": [0]}]},
        "scheduler": {"milestones": [60000, 80000], "last_epoch": 1234},
        "iteration": np.int64(1234),
    }
    torch_writer.write_zip(scratch_path / "model_final.pth", checkpoint)
    report = load_maskrcnn_benchmark_weights(target, cfg, scratch_path / "model_final.pth")
    assert report.ok and len(report.loaded) == len(blobs) == 201
    assert report.unused == ["roi_heads.maskiou.maskiou_fc1.weight"] and "maskiou_fc1" in report.format()
    assert report.iteration == 1234 and "iteration 1234" in report.format()
    ignored = dict(report.ignored)
    assert {"optimizer", "scheduler", "iteration", "backbone.body.stem.bn1.running_var"} <= set(ignored)
    assert sorted(dict(report.checked)) == sorted(config_anchors()) and not report.conflicts  # `module.` stripped
    assert sum("running statistics" in reason for reason in ignored.values()) == 2 * 53
    assert report.bbox_reg_weights == tuple(cfg.MODEL.BBOX_REG_WEIGHTS)
    assert_model_holds(target, cfg.MRCNN.ROI_MASK_HEAD, blobs, close=("res_conv1_bn_s", "res_conv1_bn_b"))


def test_missing_or_mismatched_weights_fail_and_change_nothing(fpn, scratch_path):
    cfg, target, blobs = fpn
    before = snapshot(target)
    state = benchmark_state(blobs)
    del state["roi_heads.box.feature_extractor.fc6.weight"]
    torch_writer.write_zip(scratch_path / "missing.pth", {"model": state})
    with pytest.raises(ValueError, match=r"MISSING fc6_w: expected shape \(1024, 12544\)"):
        load_maskrcnn_benchmark_weights(target, cfg, scratch_path / "missing.pth")
    # The torch-saved fixture holds a small slice of a model: every shape differs.
    with pytest.raises(ValueError, match=r"SHAPE MISMATCH conv1_w: model expects \(64, 3, 7, 7\), file has \(8, 3, 7, 7\)"):
        load_maskrcnn_benchmark_weights(target, cfg, FIXTURES / "checkpoint_zip.pth")
    assert unchanged(target, before)
    fc6 = target.get_layer("fc6").kernel.numpy()
    report = load_maskrcnn_benchmark_weights(target, cfg, scratch_path / "missing.pth", allow_missing=True)
    assert report.missing == [("fc6_w", (1024, 12544))] and np.array_equal(target.get_layer("fc6").kernel.numpy(), fc6)


def test_c4_mask_rcnn_with_shared_res5_in_legacy_format(scratch_path):
    cfg, target, blobs = built(*BASELINES, "e2e_mask_rcnn_R-50-C4_1x.yaml", overrides=SMALL)
    state = benchmark_state(blobs, c4=True)
    head = "roi_heads.box.feature_extractor.head."
    for key in [k for k in state if k.startswith(head)]:  # SHARE_BOX_FEATURE_EXTRACTOR: the mask head holds it too
        state[key.replace("roi_heads.box.", "roi_heads.mask.")] = state[key]
    torch_writer.write_legacy(scratch_path / "c4.pth", {"model": state, "iteration": 90000})
    report = load_maskrcnn_benchmark_weights(target, cfg, scratch_path / "c4.pth")
    assert report.ok and len(report.loaded) == len(blobs) == 173 and report.unused == []
    assert {"conv_rpn_w", "rpn_cls_logits_w", "res5_2_branch2c_w"} <= {name for name, _, _ in report.loaded}
    shared = {name for name, reason in report.ignored if "shared by two heads" in reason}
    copies = {k for k in state if k.startswith("roi_heads.mask.feature_extractor.head.") and not k.endswith(("_mean", "_var"))}
    assert shared == copies and len(copies) == 30
    assert_model_holds(target, cfg.MRCNN.ROI_MASK_HEAD, blobs)
    own_res5 = dict(state, **{"roi_heads.mask.feature_extractor.head.layer4.0.conv1.weight": np.zeros((512, 1024, 1, 1), np.float32)})
    torch_writer.write_legacy(scratch_path / "own.pth", {"model": own_res5})
    before = snapshot(target)
    with pytest.raises(ValueError, match="SHARE_BOX_FEATURE_EXTRACTOR"):
        load_maskrcnn_benchmark_weights(target, cfg, scratch_path / "own.pth")
    assert unchanged(target, before)


def test_keypoint_rcnn_gets_detectrons_fixed_upsampling(keypoint, scratch_path):
    cfg, target, blobs = keypoint
    state = benchmark_state(blobs)
    assert not any("kps_score." in k for k in state)  # maskrcnn-benchmark's predictor has no such weights
    torch_writer.write_zip(scratch_path / "kp.pth", state)
    target.get_layer("kps_score").kernel.assign(np.zeros(target.get_layer("kps_score").kernel.shape, np.float32))
    report = load_maskrcnn_benchmark_weights(target, cfg, scratch_path / "kp.pth")
    assert report.ok and len(report.loaded) == len(blobs) == 209
    assert [blob for blob, _ in report.filled] == ["kps_score_b", "kps_score_w"]
    assert_model_holds(target, cfg.MRCNN.ROI_MASK_HEAD, blobs)
    np.testing.assert_array_equal(target.get_layer("kps_score").kernel.numpy(), bilinear_kernel(17, 2))


def test_fixed_upsampling_matches_maskrcnn_benchmarks_interpolate_inside_the_heatmap(keypoint, rng):
    """F.interpolate(scale 2, bilinear, align_corners=False) vs the ported kps_score, from definitions."""
    _, model, _ = keypoint
    logits = rng.normal(size=(1, 7, 7, 17)).astype(np.float32)
    upsampled = model.get_layer("kps_score_crop")(model.get_layer("kps_score")(logits)).numpy()[0]
    source = np.clip((np.arange(14) + 0.5) / 2 - 0.5, 0, 6)  # align_corners=False source coordinates
    low = np.floor(source).astype(int)
    high, frac = np.minimum(low + 1, 6), source - low
    rows = logits[0][low] * (1 - frac)[:, None, None] + logits[0][high] * frac[:, None, None]
    reference = rows[:, low] * (1 - frac)[None, :, None] + rows[:, high] * frac[None, :, None]
    np.testing.assert_allclose(upsampled[1:-1, 1:-1], reference[1:-1, 1:-1], rtol=1e-5, atol=1e-5)
    assert not np.allclose(upsampled[0], reference[0])  # the border: zero padding vs edge clamping


def test_cli_ports_a_pth_and_reports_its_iteration(fpn, scratch_path, capsys):
    cfg, _, blobs = fpn
    torch_writer.write_zip(scratch_path / "model_final.pth", {"model": benchmark_state(blobs), "iteration": np.int64(90000)})
    # The `main` of `python -m porting maskrcnn-benchmark ...`, in this process: it returns the exit status.
    command = ["maskrcnn-benchmark", "--cfg", str(shared_path(*BASELINES, "e2e_mask_rcnn_R-50-FPN_1x.yaml")),
               "--weights", str(scratch_path / "model_final.pth"), "--out", str(scratch_path / "out"), *SMALL]  # fmt: skip
    assert porting_main(command) == 0
    printed = capsys.readouterr().out
    assert "iteration 90000" in printed and "loaded 201 blobs" in printed
    with placeholder_initialization():  # every weight comes from the file
        reloaded = build_model(load_config(scratch_path / "out" / "config.yaml"))
    reloaded.load_weights(scratch_path / "out" / "model.weights.h5")
    assert_model_holds(reloaded, cfg.MRCNN.ROI_MASK_HEAD, blobs)
    # An unreadable file: status 2 and a one-line error (an exception would fail this test instead of
    # printing a traceback).
    (scratch_path / "broken.pth").write_bytes(b"PK\x03\x04 not really a zip")
    assert porting_main(command[:4] + [str(scratch_path / "broken.pth")] + command[5:]) == 2
    err = capsys.readouterr().err
    assert "broken.pth" in err and "Traceback" not in err
