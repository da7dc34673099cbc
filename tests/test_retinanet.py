"""RetinaNet (MODEL.TYPE retinanet): anchors, heads and their initialisation, Detectron's blob inventory
of the zoo models, detections equal to a NumPy restatement of core/test_retinanet.py fed the model's
own head outputs, the refusals, and the Predictor / tfdet.infer / tfdet.evaluate on a RetinaNet."""

import functools
import gc
import json
import math
import types

import cv2
import keras
import numpy as np
import pytest
import tensorflow as tf

from porting.detectron_writer import model_to_blobs
from support import numpy_detectron_retinanet as detectron
from support.detectron_fixtures import (
    expected_fpn_blobs,
    expected_resnet_blobs,
    retinanet_saved_cfg,
    write_retinanet_model_final,
)
from support.paths import shared_path
from support.retinanet_fixtures import calibrate_predictions, spread_weights
from tfdet.config import ConfigError, check_supported, load_config
from tfdet.data import shapes
from tfdet.inference import Predictor
from tfdet.layers import placeholder_initialization
from tfdet.modeling import build_model
from tfdet.modeling.detectron_names import detectron_inventory
from tfdet.modeling.registry import BodyOutput
from tfdet.modeling.retinanet import add_retinanet_heads, retinanet_cell_anchors
from tfdet.ops.retinanet_detections import retinanet_detections

ZOO_DIR = ("detectron", "configs", "12_2017_baselines")
# A narrow R-50-FPN RetinaNet: 8-wide bottlenecks, 16-channel pyramid and heads, one tower conv.
TINY = [
    "RESNETS.WIDTH_PER_GROUP", "8", "FPN.DIM", "16", "MODEL.NUM_CLASSES", "4", "RETINANET.NUM_CONVS", "1",
    "TEST.DETECTIONS_PER_IM", "40",
]  # fmt: skip
# Two images in one padded 128 x 256 blob: 150 x 300 shown at scale 0.8 (120 x 240), and 128 x 256 at 1.
IMAGE_INFO = np.array([[150.0, 300.0, 0.8], [128.0, 256.0, 1.0]], np.float32)


def zoo_config(name, overrides=()):
    return load_config(shared_path(*ZOO_DIR, name), list(overrides))


def run_model(cfg, seed=0):
    keras.utils.set_random_seed(seed)
    model = build_model(cfg)
    spread_weights(model, seed)
    images = np.random.default_rng(seed + 1).normal(0.0, 40.0, (2, 128, 256, 3)).astype(np.float32)
    inputs = {"images": images, "image_info": IMAGE_INFO}
    calibrate_predictions(model, inputs, list(range(cfg.FPN.RPN_MIN_LEVEL, cfg.FPN.RPN_MAX_LEVEL + 1)))
    outputs = {name: np.asarray(value) for name, value in tf.function(model, autograph=False)(inputs).items()}
    raw = [np.asarray(t) for t in keras.Model(model.inputs, model.get_layer("detections").input)(inputs)]
    return outputs, raw


def reference(cfg, raw, image):
    levels = len(raw) // 2
    blobs = [np.ascontiguousarray(t[image : image + 1].transpose(0, 3, 1, 2)) for t in raw[:-1]]
    height, width, scale = IMAGE_INFO[image]
    stats = {}
    dets = detectron.im_detect_bbox(cfg, blobs[:levels], blobs[levels:], (height, width), float(scale), stats)
    return dets, stats


def assert_same_detections(outputs, image, expected):
    count = int(outputs["num_detections"][image])
    boxes = outputs["boxes"][image, :count]
    scores = outputs["scores"][image, :count]
    classes = outputs["classes"][image, :count]
    assert count == len(expected)
    assert np.all(np.diff(scores) <= 0)
    unmatched = list(range(count))
    for row in expected:
        found = [
            i for i in unmatched
            if classes[i] == row[5] and abs(scores[i] - row[4]) <= 1e-4 and np.abs(boxes[i] - row[:4]).max() <= 0.05
        ]  # fmt: skip
        assert found, f"no detection matches {row}"
        unmatched.remove(found[0])


def tiny_config(*overrides):
    return zoo_config("retinanet_R-50-FPN_1x.yaml", TINY + list(overrides))


# ---- anchors --------------------------------------------------------------------------------------------------


def test_cell_anchors_match_detectron_and_hand_values():
    cfg = zoo_config("retinanet_R-50-FPN_1x.yaml")
    ours, expected = retinanet_cell_anchors(cfg), detectron.create_cell_anchors(cfg)
    assert sorted(ours) == [3, 4, 5, 6, 7]
    for level in ours:
        assert ours[level].shape == (9, 4)
        np.testing.assert_allclose(ours[level], expected[level], rtol=0, atol=1e-9)
    # By hand, level 3 (stride 8): the 8x8 window centred at 3.5. Octave 0, ratio 1: size 8 * 4 = 32, so
    # 3.5 -+ 15.5. Octave 0, ratio 2 (config order 1, 2, 0.5): w = round(sqrt(64 / 2)) = 6, h = 12, both x4.
    np.testing.assert_array_equal(ours[3][0], [-12.0, -12.0, 19.0, 19.0])
    np.testing.assert_array_equal(ours[3][1], [3.5 - 11.5, 3.5 - 23.5, 3.5 + 11.5, 3.5 + 23.5])
    # Octave 1, ratio 1: size 32 * 2 ** (1/3) = 40.3175..., the unrounded 8-wide window scaled by 5.0397...
    half = 0.5 * (8 * 4 * 2 ** (1 / 3) - 1)
    np.testing.assert_allclose(ours[3][3], [3.5 - half, 3.5 - half, 3.5 + half, 3.5 + half], rtol=0, atol=1e-12)
    # Level 7 (stride 128), octave 0, ratio 1: size 512 about the centre 63.5.
    np.testing.assert_array_equal(ours[7][0], [63.5 - 255.5, 63.5 - 255.5, 63.5 + 255.5, 63.5 + 255.5])


# ---- heads ----------------------------------------------------------------------------------------------------


def heads_model(cfg, dim=16):
    """The RetinaNet heads alone, on one (B, H, W, dim) input per level 3..7."""
    features = {level: keras.Input((None, None, dim), name=f"p{level}") for level in range(3, 8)}
    heads = add_retinanet_heads(cfg, BodyOutput(features, dim))
    return keras.Model(list(features.values()), {f"{kind}{level}": t for level, pair in heads.items()
                                                 for kind, t in zip(("cls", "box"), pair)})  # fmt: skip


def test_head_variants_and_initialisation():
    prior = 0.01
    model = heads_model(tiny_config())
    names = {layer.name for layer in model.layers if layer.weights}
    assert names == {f"retnet_{kind}_fpn3" for kind in ("cls_conv_n0", "bbox_conv_n0", "cls_pred", "bbox_pred")}
    cls_pred = model.get_layer("retnet_cls_pred_fpn3")
    assert len(cls_pred._inbound_nodes) == 5  # one layer, called on P3..P7 (Detectron's ConvShared)
    kernel, bias = (np.asarray(w) for w in cls_pred.get_weights())
    assert kernel.shape == (3, 3, 16, 9 * 3)
    assert model.output["cls7"].shape[-1] == 9 * 3 and model.output["box7"].shape[-1] == 9 * 4
    np.testing.assert_allclose(bias, -math.log((1 - prior) / prior), rtol=1e-6)
    assert abs(kernel.std() - 0.01) < 0.001 and abs(kernel.mean()) < 0.001
    for name in ("retnet_cls_conv_n0_fpn3", "retnet_bbox_pred_fpn3"):
        assert not np.any(model.get_layer(name).get_weights()[1])

    # Softmax: every anchor's background channel starts at log((C-1)(1-p)/p), its classes at 0.
    model = heads_model(tiny_config("RETINANET.SOFTMAX", "True", "RETINANET.SHARE_CLS_BBOX_TOWER", "True"))
    bias = np.asarray(model.get_layer("retnet_cls_pred_fpn3").get_weights()[1])
    np.testing.assert_allclose(bias, np.tile([math.log(3 * 99.0), 0.0, 0.0, 0.0], 9), rtol=1e-6)
    # A shared tower: no box tower; the box pred reads the class tower.
    assert not any(layer.name.startswith("retnet_bbox_conv") for layer in model.layers)
    cls_nodes, box_nodes = (model.get_layer(f"retnet_{kind}_pred_fpn3")._inbound_nodes for kind in ("cls", "bbox"))
    for cls_node, box_node in zip(cls_nodes, box_nodes):
        assert cls_node.input_tensors[0] is box_node.input_tensors[0]

    # Class-specific boxes: A * 4 * (NUM_CLASSES - 1) deltas; no inference model (test_retinanet cannot decode them).
    cfg = tiny_config("RETINANET.CLASS_SPECIFIC_BBOX", "True")
    assert heads_model(cfg).output["box3"].shape[-1] == 9 * 4 * 3
    with pytest.raises(ValueError, match="RETINANET.CLASS_SPECIFIC_BBOX"):
        build_model(cfg)


# ---- Detectron's blob inventory -------------------------------------------------------------------------------

ZOO_RETINANETS = [
    pytest.param(
        f"retinanet_{body}_{schedule}.yaml", marks=() if (body, schedule) == ("R-50-FPN", "1x") else pytest.mark.slow
    )
    for body in ("R-50-FPN", "R-101-FPN", "X-101-32x8d-FPN", "X-101-64x4d-FPN")
    for schedule in ("1x", "2x")
]  # fmt: skip


def expected_retinanet_inventory(cfg):
    """Blob -> Caffe2 shape from the architecture: ResNet stages, FPN on res3..res5 with the two extra stride-2
    convs (fpn_6 on C5, fpn_7), and one class and one box tower named after level 3."""
    depth = {"ResNet50": (3, 4, 6, 3), "ResNet101": (3, 4, 23, 3)}[cfg.MODEL.CONV_BODY.split("_")[2]]
    blobs = expected_resnet_blobs(depth, cfg.RESNETS.NUM_GROUPS, cfg.RESNETS.WIDTH_PER_GROUP, "bn")
    sums = ("res5_2_sum", f"res4_{depth[2] - 1}_sum", f"res3_{depth[1] - 1}_sum")
    blobs.update(expected_fpn_blobs(sums, "bn"))
    convs = {"fpn_6": (256, 2048, 3, 3), "fpn_7": (256, 256, 3, 3)}
    for tower in ("cls", "bbox"):
        convs.update({f"retnet_{tower}_conv_n{i}_fpn3": (256, 256, 3, 3) for i in range(4)})
    convs["retnet_cls_pred_fpn3"] = (9 * 80, 256, 3, 3)
    convs["retnet_bbox_pred_fpn3"] = (9 * 4, 256, 3, 3)
    for name, shape in convs.items():
        blobs.update({f"{name}_w": shape, f"{name}_b": shape[:1]})
    return blobs


@pytest.mark.parametrize("name", ZOO_RETINANETS)
def test_zoo_retinanet_inventory(name):
    cfg = zoo_config(name)
    with placeholder_initialization():  # names and shapes only
        model = build_model(cfg)
    inventory = detectron_inventory(model)
    assert inventory == expected_retinanet_inventory(cfg)
    if name == "retinanet_R-50-FPN_1x.yaml":  # the zoo's published size of this model
        assert len(inventory) == 195
        assert sum(int(np.prod(shape)) for shape in inventory.values()) / 1e6 == pytest.approx(37.97, abs=0.005)
    del model
    gc.collect()


# ---- detections -----------------------------------------------------------------------------------------------

# case: (overrides of the network run end to end, overrides of the post-processing alone). With the latter
# the case's own model is built and its `detections` layer applied to the head outputs of the former run.
DETECTION_CASES = {
    # The zoo's settings: PRE_NMS_TOP_N 1000 cuts the finest levels, INFERENCE_TH 0.05.
    "zoo_settings": ((), ()),
    # Only the coarsest level, thresholded at 0.0, has candidates; boxes are the anchors themselves.
    "coarsest_level_without_regression": ((), ("RETINANET.INFERENCE_TH", "0.999", "TEST.BBOX_REG", "False")),
    # Every survivor is returned, so decayed scores show.
    "soft_nms": (
        (), ("TEST.SOFT_NMS.ENABLED", "True", "RETINANET.PRE_NMS_TOP_N", "60", "TEST.DETECTIONS_PER_IM", "300")
    ),
    "softmax_shared_tower": (
        ("RETINANET.SOFTMAX", "True", "RETINANET.SHARE_CLS_BBOX_TOWER", "True", "RETINANET.PRE_NMS_TOP_N", "200",
         "TEST.NMS", "0.3"),
        (),
    ),  # fmt: skip
}


@functools.lru_cache(maxsize=None)
def end_to_end(network_overrides):
    """(outputs, raw head outputs) of the tiny RetinaNet with these overrides, run once per module."""
    return run_model(tiny_config(*network_overrides))


def detections_layer_outputs(cfg, raw):
    """The outputs of `cfg`'s model's `detections` layer applied to raw head outputs."""
    with placeholder_initialization():
        layer = build_model(cfg).get_layer("detections")
    outputs = tf.function(layer, autograph=False)([tf.constant(t) for t in raw])
    return {name: t.numpy() for name, t in zip(("boxes", "scores", "classes", "num_detections"), outputs)}


@pytest.mark.parametrize("case", list(DETECTION_CASES))
def test_detections_match_detectron(case):
    network, postprocessing = DETECTION_CASES[case]
    cfg = tiny_config(*network, *postprocessing)
    outputs, raw = end_to_end(network)
    if postprocessing:
        outputs = detections_layer_outputs(cfg, raw)
    for image in range(2):
        expected, stats = reference(cfg, raw, image)
        assert not any(level.get("tie_at_cut") for level in stats.values())  # the top-N is well defined
        assert len(np.unique(expected[:, 4])) == len(expected)  # so is the order
        assert_same_detections(outputs, image, expected)
        truncated = [level for level, s in stats.items() if s["candidates"] > cfg.RETINANET.PRE_NMS_TOP_N]
        if case == "zoo_settings":
            assert truncated and len(expected) == cfg.TEST.DETECTIONS_PER_IM
            if image == 0:  # boxes reach the border of the original 150 x 300 image, inside the padded blob
                assert np.any(expected[:, 2] == 299.0) and np.any(expected[:, 3] == 149.0)
        if case == "coarsest_level_without_regression":
            assert [level for level, s in stats.items() if s["candidates"]] == [7] and len(expected) > 0
        if case == "soft_nms":  # some detections keep a decayed score, no network probability
            probabilities = np.concatenate([blob[image].ravel() for blob in raw[: len(raw) // 2]])
            assert truncated and not np.all(np.isin(expected[:, 4].astype(np.float32), probabilities))


def test_refusals_name_the_key():
    for key, value in (("TEST.BBOX_AUG.ENABLED", "True"), ("TEST.BBOX_VOTE.ENABLED", "True"),
                       ("RETINANET.CLASS_SPECIFIC_BBOX", "True"), ("MODEL.MASK_ON", "True")):  # fmt: skip
        with pytest.raises(ConfigError) as error:
            check_supported(zoo_config("retinanet_R-50-FPN_1x.yaml", [key, value]), "inference")
        assert str(error.value).startswith(f"{key} = True: ") and len(str(error.value).splitlines()) == 1
    with pytest.raises(ConfigError, match="^MODEL.TYPE = retinanet: "):
        check_supported(zoo_config("retinanet_R-50-FPN_1x.yaml", ["RETINANET.RETINANET_ON", "False"]), "inference")
    for use in ("inference", "export", "evaluation"):
        check_supported(zoo_config("retinanet_R-50-FPN_1x.yaml", ["TEST.SOFT_NMS.ENABLED", "True"]), use)


# ---- the Predictor and the command lines ----------------------------------------------------------------------

SMALL = ["TEST.SCALE", "96", "TEST.MAX_SIZE", "160"]


def test_predictor_infer_and_evaluate_run_a_retinanet(tmp_path, monkeypatch):
    import tfdet.inference
    from tfdet.evaluate import main as evaluate_main
    from tfdet.infer import parse_args, run
    from tfdet.visualize import PICTURE_MIN_SIDE

    keras.utils.set_random_seed(7)
    predictor = Predictor(tiny_config(*SMALL))
    image = np.random.default_rng(3).integers(0, 255, (90, 130, 3), dtype=np.uint8)
    result = predictor.predict(image)
    assert set(result) == {"boxes", "scores", "classes"} and 0 < len(result["scores"]) <= 40
    assert np.all(result["boxes"][:, 2] <= 129) and np.all(result["boxes"][:, 3] <= 89)
    assert np.all((result["classes"] >= 1) & (result["classes"] <= 3)) and np.all(np.diff(result["scores"]) <= 0)

    # tfdet.infer with this predictor (its main would build the same one from --cfg and the overrides).
    config = str(shared_path(*ZOO_DIR, "retinanet_R-50-FPN_1x.yaml"))
    cv2.imwrite(str(tmp_path / "photo.jpg"), image)
    argv = ["--cfg", config, "--weights", "unused.weights.h5", "--input", str(tmp_path / "photo.jpg")]
    argv += ["--output", str(tmp_path / "pictures"), "--always-out", *TINY, *SMALL]
    assert run(parse_args(argv), predictor) == 0
    factor = -(-PICTURE_MIN_SIDE // 90)  # a picture of a small image is drawn enlarged by a whole factor
    assert cv2.imread(str(tmp_path / "pictures" / "photo.jpg.png")).shape == (90 * factor, 130 * factor, 3)
    written = json.loads((tmp_path / "pictures" / "detections.json").read_text())
    assert 0 < len(written) <= len(result["scores"]) and {entry["category_id"] for entry in written} <= {1, 2, 3}

    # tfdet.evaluate end to end on a shapes split, handed this predictor for the weights file it names.
    weights = tmp_path / "random.weights.h5"
    predictor.model.save_weights(str(weights))
    given = []

    def from_checked(cfg, checked_weights, categories):  # how tfdet.evaluate builds its Predictor
        given.append(checked_weights.path)
        return predictor

    monkeypatch.setattr(tfdet.inference, "Predictor", types.SimpleNamespace(from_checked=from_checked))
    annotations = shapes.generate(tmp_path, 2, seed=5, image_size=96, split_name="tiny")
    argv = ["--cfg", config, "--weights", str(weights), "--annotations", str(annotations)]
    argv += ["--images", str(tmp_path / "tiny"), "--output", str(tmp_path / "eval"), *TINY, *SMALL]
    assert evaluate_main(argv) == 0 and given == [str(weights)]
    metrics = json.loads((tmp_path / "eval" / "metrics_tiny.json").read_text())
    assert set(metrics) == {"bbox"} and 0.0 <= metrics["bbox"]["AP"] <= 1.0


@pytest.mark.slow
def test_demo_photo_through_the_zoo_retinanet_matches_detectron(tmp_path):
    """The full-size path from a Detectron-format file: seeded weights whose top class probabilities are sparse
    enough for a well-defined top-1000 per level, written as a Python-2 model_final.pkl with the zoo's junk blobs
    and cfg; a demo photo through retinanet_R-50-FPN_1x (800 px, P3..P7, 80 classes) ported from that file, vs
    the NumPy test_retinanet fed the ported model's head outputs; then Detectron's infer_simple command line."""
    from tfdet.infer import main as infer_main

    cfg = zoo_config("retinanet_R-50-FPN_1x.yaml")
    photo_path = sorted(shared_path("data", "detectron_demo").glob("*.jpg"))[0]
    photo = cv2.imread(str(photo_path))
    keras.utils.set_random_seed(0)
    seeded = Predictor(cfg)
    inputs = seeded.model_inputs([photo])
    spread_weights(seeded.model, 0)
    calibrate_predictions(seeded.model, inputs, [3, 4, 5, 6, 7], logit_mean=-6.0)
    blobs = model_to_blobs(seeded.model)
    weights = tmp_path / "model_final.pkl"
    body_shapes = {name: blob.shape for name, blob in blobs.items() if name.startswith(("res", "conv1"))}
    write_retinanet_model_final(weights, blobs, body_shapes, retinanet_saved_cfg())
    del seeded
    gc.collect()

    predictor = Predictor(cfg, str(weights))
    result = predictor.predict(photo)
    heads = keras.Model(predictor.model.inputs, predictor.model.get_layer("detections").input)
    raw = [np.asarray(t) for t in heads(inputs)]
    blobs = [np.ascontiguousarray(t.transpose(0, 3, 1, 2)) for t in raw[:-1]]
    stats = {}
    scale = float(inputs["image_info"][0, 2])
    expected = detectron.im_detect_bbox(cfg, blobs[:5], blobs[5:], photo.shape[:2], scale, stats)
    assert not any(level.get("tie_at_cut") for level in stats.values())
    assert len(np.unique(expected[:, 4])) == len(expected)
    assert any(s["candidates"] > cfg.RETINANET.PRE_NMS_TOP_N for s in stats.values()) and len(expected) == 100
    outputs = {"num_detections": np.array([len(result["scores"])]), **{k: v[None] for k, v in result.items()}}
    assert_same_detections(outputs, 0, expected)

    # Detectron's tools/infer_simple.py command line on the same file writes the same detections.
    config = str(shared_path(*ZOO_DIR, "retinanet_R-50-FPN_1x.yaml"))
    argv = ["--cfg", config, "--wts", str(weights), "--output-dir", str(tmp_path / "out"), str(photo_path)]
    assert infer_main(argv) == 0
    written = json.loads((tmp_path / "out" / "detections.json").read_text())
    assert sorted(entry["score"] for entry in written) == pytest.approx(sorted(result["scores"]), abs=1e-6)


def test_candidates_exceed_the_threshold_strictly_and_padding_is_zero():
    """Detectron's `cls_prob > INFERENCE_TH` (0.0 on the coarsest level): a probability exactly at the threshold is
    no candidate; past num_detections every row is zeros."""
    threshold = np.float32(0.05)
    fine = np.zeros((1, 2, 2, 2), np.float32)  # 2 x 2 positions, one anchor, two classes
    fine[0, 0, 0, 0], fine[0, 1, 1, 1], fine[0, 0, 1, 0] = 0.9, threshold, np.nextafter(threshold, np.float32(1))
    coarse = np.zeros((1, 1, 1, 2), np.float32)  # all exactly 0.0: nothing on the coarsest level
    cell = np.array([[-4.0, -4.0, 11.0, 11.0]], np.float32)
    boxes, scores, classes, count = retinanet_detections(
        [fine, coarse], [np.zeros((1, 2, 2, 4), np.float32), np.zeros((1, 1, 1, 4), np.float32)], [cell, cell],
        [16, 32], tf.constant([[64.0, 64.0, 1.0]]), float(threshold), 10, 0.5, 8, 3, apply_regression=False,
    )  # fmt: skip
    assert int(count[0]) == 2
    assert scores.numpy()[0, :2].tolist() == [np.float32(0.9), np.nextafter(threshold, np.float32(1))]
    assert classes.numpy()[0, :2].tolist() == [1, 1]
    assert not boxes.numpy()[0, 2:].any() and not scores.numpy()[0, 2:].any() and not classes.numpy()[0, 2:].any()
