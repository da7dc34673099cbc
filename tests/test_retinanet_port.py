"""RetinaNet weights ported into tfdet's RetinaNet: Detectron's zoo .pkl (and back), maskrcnn-benchmark's .pth.

The .pkl is a retinanet_R-50-FPN_1x model_final.pkl with the zoo's blob names and shapes from reference
§2.3 / §2.8 (`detectron_fixtures.retinanet_blob_shapes`, counted against §2.9's 195 blobs / 37.97 M), the
momentum, preserved MSRA junk and Python-tagged cfg a real one holds; every variable is compared with its
blob under test_porting_zoo's independent layout rules, and `export-detectron` must give back every blob.

The .pth is the same model in maskrcnn-benchmark's module names (test_maskrcnn_benchmark_port's replay of its
renaming for the body and FPN; `rpn.head.*` / `top_blocks.*` from retinanet.py and fpn.py) with its own
RetinaNet conventions: anchors made by a replica of its generator (ratios (0.5, 1, 2) outer, octave scales
inner) and codes for BoxCoder(10, 10, 5, 5). The ported prediction layers are checked by decoding: boxes
and scores decoded in NumPy the maskrcnn-benchmark way from the checkpoint's raw tensors must equal those
decoded the Detectron way (test_retinanet: octave-major anchors in the config's ratio order, bbox_transform
with weights 1) from the ported layers' outputs, anchor by anchor. Models are built without random draws.
"""

import math

import numpy as np
import pytest

from porting.__main__ import main as porting_main
from porting.config_checks import ANCHORS_REORDERED, check_cell_anchors, check_saved_cfg
from porting.detectron_loader import load_detectron_weights, port_weight_file
from porting.embedded_cfg import parse_embedded_cfg
from porting.maskrcnn_benchmark_loader import load_maskrcnn_benchmark_weights
from porting.maskrcnn_benchmark_retinanet import convert_predictions, generation_order
from porting.pickle_reader import WeightFile, read_weight_file
from support.benchmark_checkpoints import benchmark_generate_anchors, c2_renamed, module_key, torch_writer
from support.detectron_fixtures import (
    detectron_cfg_yaml,
    expected_resnet_blobs,
    momentum_junk,
    random_blobs,
    retinanet_blob_shapes,
    retinanet_saved_cfg,
    write_retinanet_model_final,
)
from support.paths import shared_path
from support.porting_fixtures import (  # noqa: F401 (fixtures)
    assert_same,
    assert_variables_hold,
    module_scratch_path,
    scratch_path,
    snapshot,
    unchanged,
)
from tfdet.config import load_config
from tfdet.layers import placeholder_initialization
from tfdet.modeling import build_model

ZOO_CONFIG = ("detectron", "configs", "12_2017_baselines", "retinanet_R-50-FPN_1x.yaml")
R50_BLOCKS = (3, 4, 6, 3)
PREDICTIONS = ("retnet_cls_pred_fpn3", "retnet_bbox_pred_fpn3")
BENCHMARK_RATIOS = (0.5, 1.0, 2.0)  # maskrcnn-benchmark's MODEL.RETINANET.ASPECT_RATIOS default
BENCHMARK_SIZES = (32, 64, 128, 256, 512)  # MODEL.RETINANET.ANCHOR_SIZES for strides 8..128
BENCHMARK_CODER = (10.0, 10.0, 5.0, 5.0)  # RetinaNetModule's BoxCoder
CLIP = math.log(1000.0 / 16)  # both box coders' bbox_xform_clip (Detectron's BBOX_XFORM_CLIP default)


def zoo_cfg(overrides=()):
    return load_config(shared_path(*ZOO_CONFIG), list(overrides))


def built(cfg):
    with placeholder_initialization():  # every value a test checks is assigned by a port
        return build_model(cfg)


def r50_shapes():
    return retinanet_blob_shapes(expected_resnet_blobs(R50_BLOCKS, 1, 64, "bn"), R50_BLOCKS)


@pytest.fixture(scope="module")
def r50():
    cfg = zoo_cfg()
    return cfg, built(cfg)


@pytest.fixture(scope="module")
def blobs():
    return random_blobs(r50_shapes(), np.random.default_rng(0))


@pytest.fixture(scope="module")
def model_final(blobs, module_scratch_path):
    """(path, junk) of the zoo model_final.pkl holding `blobs`."""
    path = module_scratch_path / "retinanet_R-50-FPN_1x.model_final.pkl"
    body = expected_resnet_blobs(R50_BLOCKS, 1, 64, "bn")
    return path, write_retinanet_model_final(path, blobs, body, retinanet_saved_cfg())


def in_memory(blobs, saved_cfg=None):
    """A WeightFile as `read_weight_file` returns it, without writing 300 MB."""
    return WeightFile(blobs=blobs, cfg_text=None if saved_cfg is None else detectron_cfg_yaml(saved_cfg), extras={})


def error_lines(err):
    return [line for line in err.splitlines() if line.strip() and not line.startswith("porting:")]


# --------------------------------------------------------------------------- Detectron .pkl


def test_zoo_inventory_is_the_documented_one():
    """Reference §2.9: RetinaNet R-50-FPN holds 195 parameter blobs, 37.97 M values."""
    shapes = r50_shapes()
    assert len(shapes) == 195 and sum(int(np.prod(s)) for s in shapes.values()) / 1e6 == pytest.approx(37.97, abs=0.005)
    assert "fpn_inner_res2_2_sum_lateral_w" not in shapes and shapes["fpn_6_w"] == (256, 2048, 3, 3)
    assert shapes["retnet_cls_pred_fpn3_w"] == (720, 256, 3, 3) and shapes["retnet_bbox_pred_fpn3_w"] == (36, 256, 3, 3)


def test_zoo_file_ports_with_its_saved_cfg_and_exports_back_bit_exactly(r50, blobs, model_final, scratch_path, capsys):
    cfg, model = r50
    path, junk = model_final
    out = scratch_path / "ported"
    assert porting_main(["detectron", "--weights", str(path), "--out", str(out)]) == 0  # the cfg saved in the file
    printed = capsys.readouterr().out
    assert "building the model from the config saved in" in printed and "loaded 195 blobs (37.97 M values)" in printed
    assert f"ignored {len(junk)} blobs on purpose" in printed and "MISSING" not in printed and "CONFLICT" not in printed
    ported_cfg = load_config(out / "config.yaml")
    assert ported_cfg.MODEL.TYPE == "retinanet" and tuple(ported_cfg.RETINANET.ASPECT_RATIOS) == (1.0, 2.0, 0.5)

    back = scratch_path / "back.pkl"
    assert porting_main(["export-detectron", "--weights", str(out / "model.weights.h5"), "--out", str(back)]) == 0
    exported = read_weight_file(back)
    momentum = set(momentum_junk(blobs))
    assert set(exported.blobs) == (set(blobs) | set(junk)) - momentum  # the params and the preserved junk
    for name, value in {**blobs, **junk}.items():
        if name not in momentum:
            assert exported.blobs[name].dtype == np.float32
            assert_same(exported.blobs[name], value, name)
    assert parse_embedded_cfg(exported.cfg_text)["MODEL"]["TYPE"] == "retinanet"


def test_zoo_file_ports_with_the_zoo_yaml_into_detectrons_layout(r50, blobs, model_final):
    cfg, model = r50
    path, junk = model_final
    report = load_detectron_weights(model, cfg, path)
    assert report.ok and report.unused == [] and not report.missing
    assert {name: shape for name, shape, _ in report.loaded} == r50_shapes()
    assert {name for name, _ in report.ignored} == set(junk)
    reasons = {reason for _, reason in report.ignored}
    assert {"SGD momentum (optimizer state)", "ImageNet classifier"} <= reasons
    checked = {field for field, _ in report.checked}
    for key in ("RETINANET.ASPECT_RATIOS", "RETINANET.SCALES_PER_OCTAVE", "RETINANET.ANCHOR_SCALE", "FPN.RPN_MIN_LEVEL",
                "FPN.RPN_MAX_LEVEL", "FPN.EXTRA_CONV_LEVELS", "RETINANET.SOFTMAX", "RETINANET.CLASS_SPECIFIC_BBOX",
                "RETINANET.SHARE_CLS_BBOX_TOWER", "RETINANET.NUM_CONVS"):  # fmt: skip
        assert f"saved cfg {key}" in checked
    assert not any("ROI_XFORM" in field for field in checked)  # RetinaNet has no RoI heads
    assert_variables_hold(model, blobs)  # every variable, by layout rules written apart from tfdet's


def test_missing_blob_and_shape_mismatch_are_refused_with_names_and_shapes(r50, blobs):
    cfg, model = r50
    before = snapshot(model)
    without = {name: value for name, value in blobs.items() if name != "retnet_cls_conv_n2_fpn3_w"}
    with pytest.raises(ValueError, match=r"MISSING retnet_cls_conv_n2_fpn3_w: expected shape \(256, 256, 3, 3\)"):
        port_weight_file(model, cfg, in_memory(without), "missing.pkl")
    softmax_shaped = {**blobs, "retnet_cls_pred_fpn3_w": np.zeros((729, 256, 3, 3), np.float32)}
    mismatch = r"SHAPE MISMATCH retnet_cls_pred_fpn3_w: model expects \(720, 256, 3, 3\), file has \(729, 256, 3, 3\)"
    with pytest.raises(ValueError, match=mismatch):
        port_weight_file(model, cfg, in_memory(softmax_shaped), "softmax.pkl")
    assert unchanged(model, before)


def test_saved_retinanet_keys_are_checked_test_time_keys_are_not(r50, blobs):
    cfg, model = r50
    parsed = lambda **sections: parse_embedded_cfg(detectron_cfg_yaml(retinanet_saved_cfg(**sections)))  # noqa: E731
    _, conflicts = check_saved_cfg(parsed(RETINANET={"INFERENCE_TH": 0.2, "PRE_NMS_TOP_N": 50}, TEST={"NMS": 0.4}), cfg)
    assert conflicts == []
    for section, key, value in (("RETINANET", "ASPECT_RATIOS", (0.5, 1.0, 2.0)), ("RETINANET", "SCALES_PER_OCTAVE", 2),
                                ("RETINANET", "ANCHOR_SCALE", 8), ("FPN", "RPN_MAX_LEVEL", 6),
                                ("RETINANET", "SHARE_CLS_BBOX_TOWER", True)):  # fmt: skip
        _, conflicts = check_saved_cfg(parsed(**{section: {key: value}}), cfg)
        assert len(conflicts) == 1 and f"{section}.{key} {value!r}" in conflicts[0][1], (key, conflicts)
    # Through a port: the other ratio order (same anchors, other channel meaning) is refused in one line.
    before = snapshot(model)
    reordered = in_memory(blobs, retinanet_saved_cfg(RETINANET={"ASPECT_RATIOS": (0.5, 1.0, 2.0)}))
    with pytest.raises(ValueError) as refused:
        port_weight_file(model, cfg, reordered, "reordered.pkl")
    message = str(refused.value)
    assert "\n" not in message and "RETINANET.ASPECT_RATIOS (0.5, 1.0, 2.0) (the config: (1.0, 2.0, 0.5))" in message
    assert unchanged(model, before)


def test_tower_convs_the_config_lacks_are_refused(blobs):
    """A file with 4 convs per tower into a 3-conv config: the 4th would be left out, changing every output."""
    cfg = zoo_cfg(["RETINANET.NUM_CONVS", "3"])
    model = built(cfg)
    with pytest.raises(ValueError) as refused:
        port_weight_file(model, cfg, in_memory(blobs), "four_convs.pkl")  # no saved cfg to tell
    message = str(refused.value)
    assert "retnet_bbox_conv_n3_fpn3_b" in message and "retnet_cls_conv_n3_fpn3_w" in message
    assert "RETINANET.NUM_CONVS 3" in message and "\n" not in message


# --------------------------------------------------------------------------- maskrcnn-benchmark .pth


def benchmark_cell_anchors(ratios=BENCHMARK_RATIOS, octave=2.0, scales_per_octave=3, sizes=BENCHMARK_SIZES):
    """{'rpn.anchor_generator.cell_anchors.i': (A, 4)} as make_anchor_generator_retinanet makes them: per level
    (stride 8 * 2**i) generate_anchors(stride, (size * octave**(s / S) for s), ratios): ratios outer."""
    state = {}
    for index, size in enumerate(sizes):
        octave_sizes = [size * octave ** (s / float(scales_per_octave)) for s in range(scales_per_octave)]
        state[f"rpn.anchor_generator.cell_anchors.{index}"] = benchmark_generate_anchors(8 * 2**index, octave_sizes, ratios)
    return state


def detectron_cell_anchors(level, ratios=(1.0, 2.0, 0.5), scales_per_octave=3, anchor_scale=4):
    """test_retinanet._create_cell_anchors: for octave (outer), for aspect in config order, one anchor of size
    stride * 2**(octave / S) * ANCHOR_SCALE. Detectron's generate_anchors is the algorithm the replica above
    restates (both repositories carry the same function)."""
    stride = 2.0**level
    return np.concatenate([
        benchmark_generate_anchors(stride, (stride * 2 ** (octave / float(scales_per_octave)) * anchor_scale,), (ratio,))
        for octave in range(scales_per_octave) for ratio in ratios
    ]).astype(np.float64)  # fmt: skip


_TOWERS = {"cls": "rpn.head.cls_tower", "bbox": "rpn.head.bbox_tower"}
_TOP = {"fpn_6": "backbone.fpn.top_blocks.p6", "fpn_7": "backbone.fpn.top_blocks.p7"}
_PREDICTION_MODULES = {"retnet_cls_pred_fpn3": "rpn.head.cls_logits", "retnet_bbox_pred_fpn3": "rpn.head.bbox_pred"}


def benchmark_key(blob):
    """The state-dict key of a blob in maskrcnn-benchmark's RetinaNet: towers nn.Sequential(conv, ReLU, ...) ->
    conv n at index 2n; predictions; LastLevelP6P7; body and FPN through its c2 renaming (fpn_inner2..4)."""
    layer, param = blob[:-2], {"_w": "weight", "_b": "bias"}.get(blob[-2:])
    if layer.startswith("retnet_") and "_conv_n" in layer:
        kind, conv = layer.split("_")[1], int(layer.split("_conv_n")[1].split("_")[0])
        return f"{_TOWERS[kind]}.{2 * conv}.{param}"
    if layer in _PREDICTION_MODULES:
        return f"{_PREDICTION_MODULES[layer]}.{param}"
    if layer in _TOP:
        return f"{_TOP[layer]}.{param}"
    return module_key(c2_renamed([blob])[blob], c4=False)


def benchmark_head(rng, classes=80, anchors=9, dim=256):
    """The prediction convs in maskrcnn-benchmark's conventions (its anchor order, codes for weights 10, 10, 5,
    5): cls logits N(0, 0.05) (scores spread around 0.5), box codes large enough that dw / 5 reaches the clip."""
    return {
        "rpn.head.cls_logits.weight": rng.normal(0, 0.05, (anchors * classes, dim, 3, 3)).astype(np.float32),
        "rpn.head.cls_logits.bias": rng.normal(0, 0.5, anchors * classes).astype(np.float32),
        "rpn.head.bbox_pred.weight": rng.normal(0, 0.4, (anchors * 4, dim, 3, 3)).astype(np.float32),
        "rpn.head.bbox_pred.bias": rng.normal(0, 2.0, anchors * 4).astype(np.float32),
    }


def benchmark_state(blobs, head, anchors):
    """maskrcnn-benchmark's RetinaNet state dict: `blobs` but the predictions, which come from `head`;
    FrozenBatchNorm2d buffers (mean 0, var 1); `anchors`."""
    state = {benchmark_key(b): v for b, v in blobs.items() if b[:-2] not in _PREDICTION_MODULES}
    for key in [k for k in state if k.endswith(("bn1.weight", "bn2.weight", "bn3.weight", "downsample.1.weight"))]:
        module = key[: -len(".weight")]
        state[f"{module}.running_mean"] = np.zeros_like(state[key])
        state[f"{module}.running_var"] = np.ones_like(state[key])
    return {**state, **head, **anchors}


@pytest.fixture(scope="module")
def checkpoint(blobs, module_scratch_path):
    """(path, state) of a maskrcnn-benchmark RetinaNet R-50-FPN model_final.pth."""
    state = benchmark_state(blobs, benchmark_head(np.random.default_rng(1)), benchmark_cell_anchors())
    path = module_scratch_path / "retinanet_R-50-FPN_1x.pth"
    torch_writer.write_zip(path, {"model": state, "iteration": np.int64(90000)})
    return path, state


def conv3x3(features, weight, bias):
    """A 3x3 pad-1 cross-correlation (torch's / Caffe2's Conv) in float64: (H, W, I), (O, I, 3, 3) -> (H, W, O)."""
    height, width, _ = features.shape
    padded = np.pad(features.astype(np.float64), ((1, 1), (1, 1), (0, 0)))
    out = np.broadcast_to(bias.astype(np.float64), (height, width, len(bias))).copy()
    for dy in range(3):
        for dx in range(3):
            out += padded[dy : dy + height, dx : dx + width] @ weight[:, :, dy, dx].astype(np.float64).T
    return out


def decode(anchors, codes, weights):
    """Both repositories' decode (box_coder.decode / bbox_transform): +1 widths, codes / weights, dw and dh
    clipped at log(1000/16), x2 = ctr + w / 2 - 1."""
    widths, heights = anchors[:, 2] - anchors[:, 0] + 1, anchors[:, 3] - anchors[:, 1] + 1
    ctr_x, ctr_y = anchors[:, 0] + 0.5 * widths, anchors[:, 1] + 0.5 * heights
    dx, dy, dw, dh = (codes[:, k] / weights[k] for k in range(4))
    dw, dh = np.minimum(dw, CLIP), np.minimum(dh, CLIP)
    x, y, w, h = dx * widths + ctr_x, dy * heights + ctr_y, np.exp(dw) * widths, np.exp(dh) * heights
    return np.stack([x - 0.5 * w, y - 0.5 * h, x + 0.5 * w - 1, y + 0.5 * h - 1], axis=1)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_benchmark_generation_order_gives_the_config_anchors():
    """maskrcnn-benchmark's ratio-major anchors over the config's own ratios, taken in generation_order, are
    Detectron's octave-major ones (the order assumed for a checkpoint without cell_anchors)."""
    cfg = zoo_cfg()
    order = generation_order(cfg)
    assert not np.array_equal(order, np.arange(9))
    file_anchors = benchmark_cell_anchors(ratios=(1.0, 2.0, 0.5))
    for index, level in enumerate(range(3, 8)):
        generated = file_anchors[f"rpn.anchor_generator.cell_anchors.{index}"]
        np.testing.assert_allclose(generated[order], detectron_cell_anchors(level), atol=1e-3)
    # A checkpoint without cell_anchors is converted in that order, and the report says it was assumed.
    biases = {"retnet_cls_pred_fpn3_b": np.arange(9 * 80, dtype=np.float32), "retnet_bbox_pred_fpn3_b": np.ones(36, np.float32)}
    converted = dict(convert_predictions(biases, None, cfg))
    assert "assumed" in converted["retnet_cls_pred_fpn3_b"] and set(converted) == set(biases)
    np.testing.assert_array_equal(biases["retnet_cls_pred_fpn3_b"].reshape(9, 80)[:, 0], order * 80)
    np.testing.assert_array_equal(biases["retnet_bbox_pred_fpn3_b"].reshape(9, 4)[0], np.float32([0.1, 0.1, 0.2, 0.2]))


def test_pth_ports_with_converted_predictions_that_decode_as_maskrcnn_benchmark(r50, blobs, checkpoint, scratch_path, capsys):
    cfg, _ = r50
    path, state = checkpoint
    out = scratch_path / "out"
    command = ["maskrcnn-benchmark", "--cfg", str(shared_path(*ZOO_CONFIG)), "--weights", str(path), "--out", str(out)]
    assert porting_main(command) == 0
    printed = capsys.readouterr().out
    assert "loaded 195 blobs" in printed and "iteration 90000" in printed
    assert "5 x the config's anchors in another order" in printed
    for name in ("retnet_cls_pred_fpn3_w", "retnet_cls_pred_fpn3_b", "retnet_bbox_pred_fpn3_w", "retnet_bbox_pred_fpn3_b"):
        assert f"converted {name}: anchor groups permuted" in printed
    assert printed.count("divided by the BoxCoder weights (10.0, 10.0, 5.0, 5.0)") == 2
    assert "post-processing is not ported" in printed and "Detectron's test_retinanet" in printed
    model = built(load_config(out / "config.yaml"))
    model.load_weights(out / "model.weights.h5")
    # Everything but the predictions is the checkpoint's, bit for bit (frozen BN: mean 0, var 1).
    assert_variables_hold(model, {b: v for b, v in blobs.items() if b[:-2] not in PREDICTIONS}, every_variable=False)

    rng = np.random.default_rng(2)
    features = rng.normal(0, 1, (4, 5, 256)).astype(np.float32)  # a tower's output on a 4x5 map
    classes = 80
    mb_logits = conv3x3(features, state["rpn.head.cls_logits.weight"], state["rpn.head.cls_logits.bias"])
    mb_codes = conv3x3(features, state["rpn.head.bbox_pred.weight"], state["rpn.head.bbox_pred.bias"])
    ported_logits = model.get_layer("retnet_cls_pred_fpn3")(features[None]).numpy()[0].astype(np.float64)
    ported_deltas = model.get_layer("retnet_bbox_pred_fpn3")(features[None]).numpy()[0].astype(np.float64)
    assert np.mean(np.minimum(mb_codes[..., 2::4] / 5, CLIP) == CLIP) > 0.01  # the clip is exercised
    for index, level in ((0, 3), (4, 7)):
        stride = 2**level
        mb_cell = state[f"rpn.anchor_generator.cell_anchors.{index}"].astype(np.float64)
        detectron_cell = detectron_cell_anchors(level)
        # Which maskrcnn-benchmark anchor is each Detectron anchor (independently of the port's matching).
        partner = [int(np.flatnonzero(np.all(np.abs(mb_cell - anchor) < 1e-3, axis=1))[0]) for anchor in detectron_cell]
        assert sorted(partner) == list(range(9)) and partner != list(range(9))
        for y in range(4):
            for x in range(5):
                shift = np.array([x, y, x, y], np.float64) * stride
                mb_boxes = decode(mb_cell + shift, mb_codes[y, x].reshape(9, 4), BENCHMARK_CODER)
                mb_scores = sigmoid(mb_logits[y, x].reshape(9, classes))  # permute_and_flatten: (A, C)
                boxes = decode(detectron_cell + shift, ported_deltas[y, x].reshape(9, 4), (1.0, 1.0, 1.0, 1.0))
                scores = sigmoid(ported_logits[y, x].reshape(9, classes))  # test_retinanet: (A, C)
                # float32 convs: codes good to ~1e-6 relative, boxes (up to ~60x their anchor) to ~1e-5 of their size
                np.testing.assert_allclose(boxes, mb_boxes[partner], rtol=0, atol=1e-5 * np.abs(mb_boxes).max() + 1e-3)
                np.testing.assert_allclose(scores, mb_scores[partner], rtol=0, atol=2e-5)


def test_pth_anchors_other_than_the_configs_are_refused_in_one_line(r50, blobs, scratch_path):
    cfg, model = r50
    before = snapshot(model)
    head = benchmark_head(np.random.default_rng(3))
    path = scratch_path / "octave3.pth"
    torch_writer.write_zip(path, {"model": benchmark_state(blobs, head, benchmark_cell_anchors(octave=3.0))})
    with pytest.raises(ValueError) as refused:
        load_maskrcnn_benchmark_weights(model, cfg, path)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{path}: rpn.anchor_generator.cell_anchors.0 holds 9 anchors")
    assert "RetinaNet level 3 (stride 8: RETINANET.ANCHOR_SCALE 4, RETINANET.SCALES_PER_OCTAVE 3" in message
    assert unchanged(model, before)
    checked, conflicts = check_cell_anchors(benchmark_cell_anchors(), cfg)  # the RPN check dispatches to RetinaNet's
    assert conflicts == [] and [how for _, how in checked] == [ANCHORS_REORDERED] * 5
    _, conflicts = check_cell_anchors(dict(list(benchmark_cell_anchors().items())[:4]), cfg)
    assert "are 4 tensors, the config's RetinaNet has 5 levels (FPN.RPN_MIN_LEVEL 3 to FPN.RPN_MAX_LEVEL 7)" in conflicts[0][1]


def test_p6_on_p5_is_refused(r50, blobs, scratch_path):
    """LastLevelP6P7 on P5 (MODEL.RETINANET.USE_C5 False): Detectron's fpn_6 is on C5."""
    cfg, model = r50
    state = benchmark_state(blobs, benchmark_head(np.random.default_rng(4)), benchmark_cell_anchors())
    state["backbone.fpn.top_blocks.p6.weight"] = np.zeros((256, 256, 3, 3), np.float32)
    torch_writer.write_zip(scratch_path / "p5.pth", state)
    with pytest.raises(ValueError, match=r"top_blocks\.p6\.weight \(256, 256, 3, 3\) takes P5 .*USE_C5 False"):
        load_maskrcnn_benchmark_weights(model, cfg, scratch_path / "p5.pth")
