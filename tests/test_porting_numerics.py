"""A ported Mask R-CNN R-50-FPN against a float64 numpy forward written from Caffe2's semantics.

Random weights in Detectron layout (names and shapes from support/detectron_fixtures.py's §2 generator) are
written to a protocol-2 `.pkl` and loaded through `porting.load_detectron_weights`, so the test
covers the layout rules (OIHW kernels, AffineChannel, fc6's NCHW flatten). The reference runs
NCHW tensors with the Caffe2 blobs as they are in the file (support/numpy_backbones.py's conv / block / FPN
references, support/numpy_heads.py's FC, RoIAlign and FPN level mapping), on a demo photo at TEST.SCALE
160. Intermediate Keras outputs are read from a sub-model on the layers named after Detectron
blobs (DESIGN.md decision 3); the box head runs on given RoIs fed in place of the proposals.

Error measure per output: max |keras - reference| / max |reference| (< 1e-4).
"""

import pickle

import cv2
import keras
import numpy as np
import pytest

from porting import load_detectron_weights
from support.detectron_fixtures import R50_MASK_FPN, random_blobs, zoo_blob_shapes
from support.numpy_backbones import (
    np_affine,
    np_bottleneck_block,
    np_conv,
    np_fpn,
    np_max_pool,
    np_relu,
    relative_error,
)
from support.numpy_heads import fc, fpn_level, roi_align, sigmoid, softmax
from support.paths import shared_path
from tfdet.config import load_config
from tfdet.imaging.preprocessing import batch_images, prepare_image
from tfdet.modeling import build_model

CONFIG = shared_path("detectron", "configs", "12_2017_baselines", "e2e_mask_rcnn_R-50-FPN_1x.yaml")
OVERRIDES = ["TEST.SCALE", "160", "TEST.MAX_SIZE", "256"]
TOLERANCE = 1e-4
PIXEL_STD = 64.0  # conv1_w is divided by it: unit-variance stem input, so logits stay O(1) (no saturation)
R50_BLOCKS = (3, 4, 6, 3)
STAGE_SUMS = {2: "res2_2_sum", 3: "res3_3_sum", 4: "res4_5_sum", 5: "res5_2_sum"}
RPN_LEVELS = (2, 3, 4, 5, 6)
# x1, y1, x2, y2 in input pixels (the 160 x 240 resized photo): every FPN level 2..5 by
# Detectron's mapping, fractional corners, a sub-pixel box, boxes reaching outside the image.
ROIS = np.array(
    [
        [10.0, 12.0, 40.0, 50.0],
        [0.5, 3.25, 80.75, 60.1],
        [100.3, 80.6, 100.9, 81.1],
        [20.0, 10.4, 170.2, 150.0],
        [0.0, 0.0, 239.0, 159.0],
        [-30.5, -40.0, 260.0, 200.25],
        [-100.0, -100.0, 340.0, 260.0],
        [-200.0, -150.0, 300.0, 400.0],
        [225.0, 140.0, 250.5, 171.0],
    ],
    np.float32,
)


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    """(cfg, model with the file's weights, the file's blobs as float64)."""
    cfg = load_config(CONFIG, OVERRIDES)
    model = build_model(cfg)
    blobs = random_blobs(zoo_blob_shapes(R50_MASK_FPN), np.random.default_rng(0))
    blobs["conv1_w"] /= PIXEL_STD
    path = tmp_path_factory.mktemp("numerics") / "model_final.pkl"
    path.write_bytes(pickle.dumps({"blobs": blobs}, protocol=2))
    report = load_detectron_weights(model, cfg, path)
    assert report.ok and len(report.loaded) == len(blobs)
    return cfg, model, {name: value.astype(np.float64) for name, value in blobs.items()}


@pytest.fixture(scope="module")
def image(ported):
    """The first demo photo as Detectron feeds it: BGR minus means, resized, padded to 32."""
    cfg = ported[0]
    photo = cv2.imread(str(sorted(shared_path("data", "detectron_demo").glob("*.jpg"))[0]))
    resized, _ = prepare_image(photo, cfg.PIXEL_MEANS, cfg.TEST.SCALE, cfg.TEST.MAX_SIZE)
    return batch_images([resized], cfg.FPN.COARSEST_STRIDE)


def keras_outputs(model, image):
    """{Detectron blob name: NCHW (or (R, D)) float64 array} of the model's intermediate outputs."""
    layer = model.get_layer
    tensors = {f"fpn_{blob}": layer(f"fpn_{blob}").output for blob in STAGE_SUMS.values()}
    tensors["fpn_res5_2_sum_subsampled_2x"] = layer("fpn_res5_2_sum_subsampled_2x").output
    proposal_inputs = layer("rpn_rois").input  # [probs, deltas] per level, then im_info
    for i, level in enumerate(RPN_LEVELS):
        tensors[f"rpn_cls_logits_fpn{level}"] = layer(f"rpn_cls_probs_fpn{level}").input
        tensors[f"rpn_cls_probs_fpn{level}"] = layer(f"rpn_cls_probs_fpn{level}").output
        tensors[f"rpn_bbox_pred_fpn{level}"] = proposal_inputs[2 * i + 1]
    for name in ("roi_feat", "fc6_relu", "fc7_relu", "cls_score", "cls_prob", "bbox_pred"):
        tensors[name] = layer(name).output
    rois, box_indices = layer("rois").output  # the box head's RoIs, fed here instead of proposals
    sub_model = keras.Model([layer("images").output, rois, box_indices], tensors)
    values = sub_model([image, ROIS, np.zeros(len(ROIS), np.int32)])
    return {name: np.transpose(v, (0, 3, 1, 2)) if v.ndim == 4 else np.asarray(v) for name, v in values.items()}


def reference_outputs(blobs, cfg, image):
    """The same blobs by a float64 NCHW forward: R-50 body, FPN, RPN on P2..P6, 2mlp box head on ROIS."""
    x = np.transpose(image, (0, 3, 1, 2)).astype(np.float64)
    stem = np_affine(np_conv(x, blobs["conv1_w"], stride=2, pad=3), blobs["res_conv1_bn_s"], blobs["res_conv1_bn_b"])
    x = np_max_pool(np_relu(stem), kernel=3, stride=2, pad=1)
    stages = {}
    for stage, count in enumerate(R50_BLOCKS, start=2):
        for index in range(count):
            stride = 2 if index == 0 and stage > 2 else 1  # §2.1: res3..res5 downsample in block 0
            # MSRA R-50: stride on the 1x1 (STRIDE_1X1), no groups, no dilation.
            x = np_bottleneck_block(x, blobs, f"res{stage}_{index}", stride, True, 1, 1, "bn")
        stages[stage] = x
    pyramid = np_fpn(stages, blobs, cfg)
    out = {f"fpn_{blob}": pyramid[level] for level, blob in STAGE_SUMS.items()}
    out["fpn_res5_2_sum_subsampled_2x"] = pyramid[6]
    for level in RPN_LEVELS:  # one head shared by every level, stored as *_fpn2 (§2.4)
        hidden = np_relu(np_conv(pyramid[level], blobs["conv_rpn_fpn2_w"], blobs["conv_rpn_fpn2_b"], pad=1))
        logits = np_conv(hidden, blobs["rpn_cls_logits_fpn2_w"], blobs["rpn_cls_logits_fpn2_b"])
        out[f"rpn_cls_logits_fpn{level}"] = logits
        out[f"rpn_cls_probs_fpn{level}"] = sigmoid(logits)
        out[f"rpn_bbox_pred_fpn{level}"] = np_conv(hidden, blobs["rpn_bbox_pred_fpn2_w"], blobs["rpn_bbox_pred_fpn2_b"])
    levels = [fpn_level(roi) for roi in ROIS.astype(np.float64)]
    out["roi_feat"] = np.stack(
        [roi_align(pyramid[lvl][0], roi, 1.0 / 2**lvl, 7, 2) for roi, lvl in zip(ROIS.astype(np.float64), levels)]
    )
    fc6 = np_relu(fc(out["roi_feat"], blobs["fc6_w"], blobs["fc6_b"]))  # fc6_w columns in NCHW order
    fc7 = np_relu(fc(fc6, blobs["fc7_w"], blobs["fc7_b"]))
    out.update(fc6_relu=fc6, fc7_relu=fc7, cls_score=fc(fc7, blobs["cls_score_w"], blobs["cls_score_b"]))
    out["cls_prob"] = softmax(out["cls_score"])
    out["bbox_pred"] = fc(fc7, blobs["bbox_pred_w"], blobs["bbox_pred_b"])
    return out, levels


@pytest.fixture(scope="module")
def outputs(ported, image):
    """(keras outputs, reference outputs, FPN level of each RoI)."""
    cfg, model, blobs = ported
    reference, levels = reference_outputs(blobs, cfg, image)
    return keras_outputs(model, image), reference, levels


def assert_close(ours, reference, names):
    for name in names:
        assert ours[name].shape == reference[name].shape, name
        error = relative_error(ours[name], reference[name])
        assert error < TOLERANCE, f"{name}: relative error {error:.2e}"


def test_input_is_a_small_real_photo(image):
    assert image.shape == (1, 160, 256, 3)  # 600 x 900 photo -> 160 x 240, padded to 32
    assert image[0, :, 240:].max() == 0 and image[0, :, :240].std() > 20


def test_backbone_and_fpn_outputs_match_caffe2(outputs):
    ours, reference, _ = outputs
    assert_close(ours, reference, [f"fpn_{blob}" for blob in STAGE_SUMS.values()] + ["fpn_res5_2_sum_subsampled_2x"])
    assert ours["fpn_res5_2_sum_subsampled_2x"].shape[2:] == (3, 4)  # P6: ceil(5 / 2), ceil(8 / 2)


def test_rpn_outputs_match_caffe2_on_every_level(outputs):
    ours, reference, _ = outputs
    names = [
        f"{kind}_fpn{level}" for level in RPN_LEVELS for kind in ("rpn_cls_logits", "rpn_cls_probs", "rpn_bbox_pred")
    ]
    assert_close(ours, reference, names)
    assert ours["rpn_bbox_pred_fpn3"].shape == (1, 12, 20, 32)


def test_box_head_matches_caffe2_on_rois_of_every_level(outputs):
    ours, reference, levels = outputs
    assert sorted(set(levels)) == [2, 3, 4, 5]
    assert_close(ours, reference, ["roi_feat", "fc6_relu", "fc7_relu", "cls_score", "cls_prob", "bbox_pred"])
    assert ours["cls_prob"].shape == (len(ROIS), 81) and ours["bbox_pred"].shape == (len(ROIS), 324)
