"""RoI heads against float64 numpy references written from Detectron's Caffe2 graphs (NCHW, OIHW/IOHW, FC
on the NCHW flatten; support/numpy_heads.py), with random weights in Caffe2 layout loaded through the porting
rules (`to_keras`).

Error measure everywhere: max |ours - reference| / max |reference| over the whole output (< 1e-4).
"""

import math

import keras
import numpy as np
import pytest

from support.numpy_heads import (
    bilinear_upsample_weights,
    conv,
    conv_transpose,
    fc,
    fpn_level,
    group_norm,
    relu,
    res5_reference,
    roi_align,
    sigmoid,
    softmax,
)
from support.paths import shared_path
from tfdet.config import load_config
from tfdet.config.errors import ConfigWarning
from tfdet.data.keypoint_names import COCO_KEYPOINT_CONNECTIONS, COCO_KEYPOINTS, flip_permutation
from tfdet.modeling.detectron_names import detectron_inventory, model_blobs
from tfdet.modeling.registry import BOX_HEADS, KEYPOINT_HEADS, MASK_HEADS, BodyOutput, RoIHeadOutput
from tfdet.modeling.roi_heads import (
    add_fast_rcnn_outputs,
    add_keypoint_outputs,
    add_mask_rcnn_outputs,
)
from tfdet.modeling.roi_heads import box_heads, keypoint_heads, mask_heads

TOLERANCE = 1e-4


# ---------------------------------------------------------------------------- helpers


def load_random_blobs(model, rng, mask_head="", keep=()):
    """Random Caffe2-layout blobs loaded through porting's `to_keras`, except `keep` (read as built); all returned."""
    blobs = {}
    for name, variable, to_caffe2, to_keras in model_blobs(model, mask_head):
        if name in keep:
            blobs[name] = to_caffe2(variable.numpy().astype(np.float64))
            continue
        shape = to_caffe2(np.zeros(variable.shape)).shape
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        if name.endswith("_s"):
            blob = rng.uniform(0.5, 1.5, shape)
        elif len(shape) == 1:
            blob = rng.normal(0.0, 0.1, shape)
        else:
            blob = rng.normal(0.0, 1.0 / math.sqrt(fan_in), shape)
        variable.assign(to_keras(blob).astype(np.float32))
        blobs[name] = blob
    return blobs


def relative_error(ours, reference):
    return float(np.max(np.abs(np.asarray(ours, np.float64) - reference)) / np.max(np.abs(reference)))


def nchw(x):
    return np.transpose(x, (0, 3, 1, 2))


def nhwc(x):
    return np.transpose(x, (0, 2, 3, 1))


def roi_input(res, channels):
    return keras.Input((res, res, channels), name="roi_features")


# ---------------------------------------------------------------------------- box heads


def test_2mlp_head_and_outputs_match_caffe2_with_nchw_fc6(rng):
    cfg = load_config(overrides={"MODEL.NUM_CLASSES": 5, "FAST_RCNN.MLP_HEAD_DIM": 32})
    inputs = roi_input(7, 8)
    head = RoIHeadOutput(box_heads.mlp_head_features(cfg, inputs), 32)
    model = keras.Model(inputs, list(add_fast_rcnn_outputs(cfg, head)))
    blobs = load_random_blobs(model, rng)
    x = rng.normal(size=(6, 7, 7, 8))

    cls_prob, bbox_pred, cls_score = model(x.astype(np.float32))

    h = relu(fc(nchw(x), blobs["fc6_w"], blobs["fc6_b"]))
    h = relu(fc(h, blobs["fc7_w"], blobs["fc7_b"]))
    score = fc(h, blobs["cls_score_w"], blobs["cls_score_b"])
    assert relative_error(cls_score, score) < TOLERANCE
    assert relative_error(cls_prob, softmax(score)) < TOLERANCE
    assert relative_error(bbox_pred, fc(h, blobs["bbox_pred_w"], blobs["bbox_pred_b"])) < TOLERANCE
    assert bbox_pred.shape == (6, 20)


@pytest.mark.parametrize("use_gn", [False, True])
def test_xconv1fc_head_matches_caffe2(rng, use_gn):
    cfg = load_config(
        overrides={
            "FAST_RCNN.CONV_HEAD_DIM": 16,
            "FAST_RCNN.NUM_STACKED_CONVS": 2,
            "FAST_RCNN.MLP_HEAD_DIM": 24,
            "GROUP_NORM.NUM_GROUPS": 4,
        }
    )
    inputs = roi_input(7, 8)
    model = keras.Model(inputs, box_heads.xconv1fc_head_features(cfg, inputs, use_gn=use_gn))
    blobs = load_random_blobs(model, rng)
    x = rng.normal(size=(3, 7, 7, 8))

    ours = model(x.astype(np.float32))

    h = nchw(x)
    for i in (1, 2):
        name = f"head_conv{i}"
        h = conv(h, blobs[name + "_w"], blobs.get(name + "_b"), pad=1)
        if use_gn:
            h = group_norm(h, blobs[name + "_gn_s"], blobs[name + "_gn_b"], 4)
        h = relu(h)
    assert ("head_conv1_b" in blobs) is not use_gn
    assert relative_error(ours, relu(fc(h, blobs["fc6_w"], blobs["fc6_b"]))) < TOLERANCE


def test_res5_head_and_v0upshare_mask_head_share_res5(rng):
    cfg = load_config(
        overrides={
            "MODEL.NUM_CLASSES": 3,
            "RESNETS.WIDTH_PER_GROUP": 2,
            "MRCNN.DIM_REDUCED": 8,
            "MRCNN.DILATION": 1,
            "MRCNN.ROI_XFORM_RESOLUTION": 14,
        }
    )
    pool5 = keras.Input((14, 14, 16), name="pool5")
    mask_pool5 = keras.Input((14, 14, 16), name="mask_pool5")
    res5 = box_heads.res5_stage(cfg, 16, 14)
    box = RoIHeadOutput(box_heads.res5_head_features(cfg, pool5, res5), 2048, {"res5": res5})
    mask = RoIHeadOutput(mask_heads.v0upshare_features(cfg, mask_pool5, box.shared["res5"]), 8)
    outputs = [*add_fast_rcnn_outputs(cfg, box)[:2], add_mask_rcnn_outputs(cfg, mask).logits]
    model = keras.Model([pool5, mask_pool5], outputs)
    blobs = load_random_blobs(model, rng)
    x_box, x_mask = rng.normal(size=(2, 14, 14, 16)), rng.normal(size=(3, 14, 14, 16))

    cls_prob, bbox_pred, mask_logits = model([x_box.astype(np.float32), x_mask.astype(np.float32)])

    pooled = res5_reference(nchw(x_box), blobs, 2).mean(axis=(2, 3))
    assert relative_error(cls_prob, softmax(fc(pooled, blobs["cls_score_w"], blobs["cls_score_b"]))) < TOLERANCE
    assert relative_error(bbox_pred, fc(pooled, blobs["bbox_pred_w"], blobs["bbox_pred_b"])) < TOLERANCE
    m = res5_reference(nchw(x_mask), blobs, 2)
    m = relu(conv_transpose(m, blobs["conv5_mask_w"], blobs["conv5_mask_b"], 2, 0))
    m = conv(m, blobs["mask_fcn_logits_w"], blobs["mask_fcn_logits_b"])
    assert relative_error(mask_logits, nhwc(m)) < TOLERANCE
    assert mask_logits.shape == (3, 14, 14, 3)
    res5_blobs = [name for name in blobs if name.startswith("res5_")]
    assert len(res5_blobs) == 30 and len(blobs) == 30 + 8  # res5 once, + cls, bbox, conv5_mask, logits


# ---------------------------------------------------------------------------- mask heads


@pytest.mark.parametrize(
    "num_convs, dilation, use_gn, mask_head",
    [
        (4, 1, False, "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs"),
        (2, 2, False, "mask_rcnn_heads.mask_rcnn_fcn_head_v1up"),
        (4, 1, True, "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs_gn"),
    ],
)
def test_fcn_mask_head_matches_caffe2(rng, num_convs, dilation, use_gn, mask_head):
    cfg = load_config(
        overrides={
            "MODEL.NUM_CLASSES": 5,
            "MRCNN.DIM_REDUCED": 16,
            "MRCNN.DILATION": dilation,
            "GROUP_NORM.NUM_GROUPS": 4,
        }
    )
    inputs = roi_input(6, 8)
    head = RoIHeadOutput(mask_heads.fcn_head_features(cfg, inputs, num_convs, use_gn=use_gn), 16)
    model = keras.Model(inputs, list(add_mask_rcnn_outputs(cfg, head)))
    blobs = load_random_blobs(model, rng, mask_head)
    x = rng.normal(size=(3, 6, 6, 8))

    probs, logits = model(x.astype(np.float32))

    prefix = "_mask_fcn" if use_gn else "_[mask]_fcn"
    h = nchw(x)
    for i in range(1, num_convs + 1):
        name = f"{prefix}{i}"
        h = conv(h, blobs[name + "_w"], blobs.get(name + "_b"), pad=dilation, dilation=dilation)
        if use_gn:
            h = group_norm(h, blobs[name + "_gn_s"], blobs[name + "_gn_b"], 4)
        h = relu(h)
    h = relu(conv_transpose(h, blobs["conv5_mask_w"], blobs["conv5_mask_b"], 2, 0))
    reference = nhwc(conv(h, blobs["mask_fcn_logits_w"], blobs["mask_fcn_logits_b"]))
    assert logits.shape == (3, 12, 12, 5)
    assert relative_error(logits, reference) < TOLERANCE
    assert relative_error(probs, sigmoid(reference)) < TOLERANCE


def test_mask_outputs_upsampled_and_fc_variants_match_caffe2(rng):
    x = rng.normal(size=(2, 4, 4, 6))
    cfg_up = load_config(overrides={"MODEL.NUM_CLASSES": 3, "MRCNN.UPSAMPLE_RATIO": 2})
    inputs = roi_input(4, 6)
    model = keras.Model(inputs, add_mask_rcnn_outputs(cfg_up, RoIHeadOutput(inputs, 6)).logits)
    blobs = load_random_blobs(model, rng, keep=("mask_fcn_logits_up_w", "mask_fcn_logits_up_b"))
    np.testing.assert_allclose(blobs["mask_fcn_logits_up_w"], bilinear_upsample_weights(3, 2), atol=1e-7)
    np.testing.assert_array_equal(blobs["mask_fcn_logits_up_b"], np.zeros(3))
    logits = conv(nchw(x), blobs["mask_fcn_logits_w"], blobs["mask_fcn_logits_b"])
    reference = nhwc(conv_transpose(logits, bilinear_upsample_weights(3, 2), np.zeros(3), 2, 1))
    assert relative_error(model(x.astype(np.float32)), reference) < TOLERANCE

    cfg_fc = load_config(overrides={"MODEL.NUM_CLASSES": 3, "MRCNN.USE_FC_OUTPUT": True, "MRCNN.RESOLUTION": 5})
    inputs = roi_input(4, 6)
    model = keras.Model(inputs, add_mask_rcnn_outputs(cfg_fc, RoIHeadOutput(inputs, 6)).logits)
    blobs = load_random_blobs(model, rng)
    reference = fc(nchw(x), blobs["mask_fcn_logits_w"], blobs["mask_fcn_logits_b"]).reshape(2, 3, 5, 5)
    assert relative_error(model(x.astype(np.float32)), nhwc(reference)) < TOLERANCE


def test_gn_mask_head_rejects_dilation_detectron_never_applies():
    cfg = load_config(overrides={"MRCNN.DILATION": 2})
    with pytest.raises(NotImplementedError, match="MRCNN.DILATION"):
        mask_heads.fcn_head_features(cfg, roi_input(14, 8), 4, use_gn=True)


# ---------------------------------------------------------------------------- keypoint head


@pytest.mark.parametrize("deconv_kernel, use_deconv", [(4, False), (3, True)])
def test_keypoint_head_matches_caffe2_with_fresh_bilinear_kps_score(rng, deconv_kernel, use_deconv):
    cfg = load_config(
        overrides={
            "KRCNN.CONV_HEAD_DIM": 16,
            "KRCNN.NUM_STACKED_CONVS": 2,
            "KRCNN.NUM_KEYPOINTS": 5,
            "KRCNN.USE_DECONV_OUTPUT": True,
            "KRCNN.USE_DECONV": use_deconv,
            "KRCNN.DECONV_DIM": 12,
            "KRCNN.DECONV_KERNEL": deconv_kernel,
            "KRCNN.UP_SCALE": 2,
        }
    )
    inputs = roi_input(6, 8)
    features = keypoint_heads.conv_stack_features(cfg, inputs)
    model = keras.Model(inputs, add_keypoint_outputs(cfg, RoIHeadOutput(features, 16)))
    blobs = load_random_blobs(model, rng, keep=("kps_score_w", "kps_score_b"))
    x = rng.normal(size=(2, 6, 6, 8))

    heatmaps = model(x.astype(np.float32))

    h = nchw(x)
    for i in (1, 2):
        h = relu(conv(h, blobs[f"conv_fcn{i}_w"], blobs[f"conv_fcn{i}_b"], pad=1))
    pad = int(deconv_kernel / 2 - 1)
    if use_deconv:
        h = relu(conv_transpose(h, blobs["kps_deconv_w"], blobs["kps_deconv_b"], 2, pad))
    h = conv_transpose(h, blobs["kps_score_lowres_w"], blobs["kps_score_lowres_b"], 2, pad)
    reference = nhwc(conv_transpose(h, bilinear_upsample_weights(5, 2), np.zeros(5), 2, 1))
    np.testing.assert_allclose(blobs["kps_score_w"], bilinear_upsample_weights(5, 2), atol=1e-7)
    np.testing.assert_array_equal(blobs["kps_score_b"], np.zeros(5))
    assert heatmaps.shape == reference.shape
    assert relative_error(heatmaps, reference) < TOLERANCE
    assert model.get_layer("kps_score").weights and not model.get_layer("kps_score").trainable_weights


def test_coco_keypoint_names_flip_and_skeleton():
    assert len(COCO_KEYPOINTS) == 17 and COCO_KEYPOINTS[:3] == ("nose", "left_eye", "right_eye")
    assert COCO_KEYPOINTS[-1] == "right_ankle"
    permutation = flip_permutation()
    assert permutation[0] == 0 and permutation[1] == 2 and permutation[16] == 15
    assert sorted(permutation) == list(range(17))
    assert len(COCO_KEYPOINT_CONNECTIONS) == 15 and COCO_KEYPOINT_CONNECTIONS[0] == (1, 2)


# ---------------------------------------------------------------------------- end to end with RoIAlign


def body_inputs(levels, channels):
    return BodyOutput(
        {level: keras.Input((None, None, channels), name=f"p{level}") for level in levels}, channels
    )


def roi_inputs():
    return keras.Input((4,), name="rois"), keras.Input((), dtype="int32", name="box_indices")


def test_fpn_2mlp_head_end_to_end_with_multilevel_roi_align(rng):
    cfg = load_config(
        overrides={
            "MODEL.NUM_CLASSES": 3,
            "FPN.FPN_ON": True,
            "FPN.MULTILEVEL_ROIS": True,
            "FAST_RCNN.ROI_XFORM_METHOD": "RoIAlign",
            "FAST_RCNN.ROI_XFORM_RESOLUTION": 7,
            "FAST_RCNN.ROI_XFORM_SAMPLING_RATIO": 2,
            "FAST_RCNN.MLP_HEAD_DIM": 16,
        }
    )
    body = body_inputs(range(2, 6), 4)
    rois, box_indices = roi_inputs()
    head = BOX_HEADS.get("fast_rcnn_heads.add_roi_2mlp_head")(cfg, body, rois, box_indices)
    model = keras.Model([*body.features.values(), rois, box_indices], head.features)
    blobs = load_random_blobs(model, rng)
    maps = [rng.normal(size=(2, 640 // 2**level, 576 // 2**level, 4)) for level in range(2, 6)]
    boxes = np.array([[10, 20, 50, 60], [30.5, 40, 190, 170], [0, 0, 300, 250], [20, 10, 570, 630], [5, 5, 6, 9]])
    images = np.array([0, 1, 1, 0, 1])

    ours = model([*(m.astype(np.float32) for m in maps), boxes.astype(np.float32), images.astype(np.int32)])

    levels = [fpn_level(box) for box in boxes]
    assert sorted(set(levels)) == [2, 3, 4, 5]
    pooled = np.stack(
        [
            roi_align(nchw(maps[level - 2])[image], box, 1 / 2**level, 7, 2)
            for box, image, level in zip(boxes, images, levels)
        ]
    )
    h = relu(fc(relu(fc(pooled, blobs["fc6_w"], blobs["fc6_b"])), blobs["fc7_w"], blobs["fc7_b"]))
    assert relative_error(ours, h) < TOLERANCE


def test_c4_heads_end_to_end_with_adaptive_roi_align(rng):
    cfg = load_config(
        overrides={
            "MODEL.NUM_CLASSES": 3,
            "RESNETS.WIDTH_PER_GROUP": 2,
            "FAST_RCNN.ROI_XFORM_METHOD": "RoIAlign",
            "MRCNN.ROI_XFORM_RESOLUTION": 14,
            "MRCNN.DILATION": 1,
            "MRCNN.DIM_REDUCED": 8,
        }
    )
    body = body_inputs([4], 16)
    rois, box_indices = roi_inputs()
    mask_rois, mask_indices = keras.Input((4,), name="mask_rois"), keras.Input((), dtype="int32", name="mask_idx")
    box_head = BOX_HEADS.get("ResNet.add_ResNet_roi_conv5_head")(cfg, body, rois, box_indices)
    mask_head = MASK_HEADS.get("mask_rcnn_heads.mask_rcnn_fcn_head_v0upshare")(
        cfg, body, mask_rois, mask_indices, box_head
    )
    outputs = [add_fast_rcnn_outputs(cfg, box_head).cls_prob, add_mask_rcnn_outputs(cfg, mask_head).probs]
    model = keras.Model([body.features[4], rois, box_indices, mask_rois, mask_indices], outputs)
    blobs = load_random_blobs(model, rng, "mask_rcnn_heads.mask_rcnn_fcn_head_v0upshare")
    res4 = rng.normal(size=(1, 12, 10, 16))
    boxes = np.array([[10, 20, 70, 150], [0, 0, 159, 191], [40.5, 33, 41, 34]])
    mask_boxes = boxes[:2] * 0.9

    inputs = [res4, boxes, np.zeros(3), mask_boxes, np.zeros(2)]
    cls_prob, mask_probs = model([a.astype(np.int32 if a.ndim == 1 else np.float32) for a in inputs])

    def pool(bxs):
        return np.stack([roi_align(nchw(res4)[0], box, 1 / 16, 14, 0) for box in bxs])

    pooled = res5_reference(pool(boxes), blobs, 2).mean(axis=(2, 3))
    assert relative_error(cls_prob, softmax(fc(pooled, blobs["cls_score_w"], blobs["cls_score_b"]))) < TOLERANCE
    m = res5_reference(pool(mask_boxes), blobs, 2)
    m = relu(conv_transpose(m, blobs["conv5_mask_w"], blobs["conv5_mask_b"], 2, 0))
    m = sigmoid(conv(m, blobs["mask_fcn_logits_w"], blobs["mask_fcn_logits_b"]))
    assert relative_error(mask_probs, nhwc(m)) < TOLERANCE


# ---------------------------------------------------------------------------- inventories (zoo configs)


def zoo_config(name, overrides=None):
    return load_config(shared_path("detectron", "configs", name), overrides)


def head_inventory(cfg, levels, channels, with_mask=False, with_keypoints=False):
    """Detectron blob inventory of the configured heads (box, and mask or keypoint) on a synthetic body."""
    body = body_inputs(levels, channels)
    rois, box_indices = roi_inputs()
    box = BOX_HEADS.get(cfg.FAST_RCNN.ROI_BOX_HEAD)(cfg, body, rois, box_indices)
    outputs = list(add_fast_rcnn_outputs(cfg, box)[:2])
    if with_mask:
        mask = MASK_HEADS.get(cfg.MRCNN.ROI_MASK_HEAD)(cfg, body, rois, box_indices, box)
        outputs.append(add_mask_rcnn_outputs(cfg, mask).probs)
    if with_keypoints:
        keypoints = KEYPOINT_HEADS.get(cfg.KRCNN.ROI_KEYPOINTS_HEAD)(cfg, body, rois, box_indices)
        outputs.append(add_keypoint_outputs(cfg, keypoints))
    model = keras.Model([*body.features.values(), rois, box_indices], outputs)
    return detectron_inventory(model, cfg.MRCNN.ROI_MASK_HEAD), outputs


def test_fpn_mask_rcnn_head_inventory():
    cfg = zoo_config("12_2017_baselines/e2e_mask_rcnn_R-50-FPN_1x.yaml")
    inventory, outputs = head_inventory(cfg, range(2, 6), 256, with_mask=True)
    assert inventory["fc6_w"] == (1024, 12544) and inventory["fc7_w"] == (1024, 1024)
    assert inventory["cls_score_w"] == (81, 1024) and inventory["bbox_pred_w"] == (324, 1024)
    for i in range(1, 5):
        assert inventory[f"_[mask]_fcn{i}_w"] == (256, 256, 3, 3) and inventory[f"_[mask]_fcn{i}_b"] == (256,)
    assert inventory["conv5_mask_w"] == (256, 256, 2, 2) and inventory["mask_fcn_logits_w"] == (81, 256, 1, 1)
    assert len(inventory) == 8 + 12  # Detectron's 201 blobs less 181 in body and RPN
    assert tuple(outputs[-1].shape) == (None, 28, 28, 81)


def test_gn_heads_inventory():
    cfg = zoo_config("04_2018_gn_baselines/e2e_mask_rcnn_R-50-FPN_2x_gn.yaml")
    inventory, _ = head_inventory(cfg, range(2, 6), 256, with_mask=True)
    assert inventory["head_conv1_w"] == (256, 256, 3, 3) and inventory["head_conv1_gn_s"] == (256,)
    assert inventory["_mask_fcn1_w"] == (256, 256, 3, 3) and inventory["_mask_fcn1_gn_s"] == (256,)
    assert "head_conv1_b" not in inventory and "_mask_fcn1_b" not in inventory
    assert inventory["fc6_w"] == (1024, 256 * 49)


def test_keypoint_rcnn_head_inventory():
    with pytest.warns(ConfigWarning, match="head_builder.add_roi_2mlp_head"):  # Detectron's legacy name
        cfg = zoo_config("12_2017_baselines/e2e_keypoint_rcnn_R-50-FPN_1x.yaml")
    inventory, outputs = head_inventory(cfg, range(2, 6), 256, with_keypoints=True)
    assert inventory["conv_fcn1_w"] == (512, 256, 3, 3) and inventory["conv_fcn8_w"] == (512, 512, 3, 3)
    assert inventory["kps_score_lowres_w"] == (512, 17, 4, 4) and inventory["kps_score_w"] == (17, 17, 4, 4)
    assert inventory["cls_score_w"] == (2, 1024) and inventory["bbox_pred_w"] == (8, 1024)
    assert len(inventory) == 8 + 20  # Detectron's 209 blobs less 181 in body and RPN
    assert tuple(outputs[-1].shape) == (None, 56, 56, 17)


def test_c4_mask_rcnn_head_inventory_shares_res5():
    cfg = zoo_config("12_2017_baselines/e2e_mask_rcnn_R-50-C4_1x.yaml")
    inventory, outputs = head_inventory(cfg, [4], 1024, with_mask=True)
    assert inventory["conv5_mask_w"] == (2048, 256, 2, 2) and inventory["mask_fcn_logits_w"] == (81, 256, 1, 1)
    assert inventory["cls_score_w"] == (81, 2048) and inventory["bbox_pred_w"] == (324, 2048)
    assert inventory["res5_0_branch1_w"] == (2048, 1024, 1, 1) and inventory["res5_2_branch2b_w"] == (512, 512, 3, 3)
    assert len(inventory) == 30 + 8  # Detectron's 173 blobs less 135 in body and RPN; no `_[mask]_res5_*`
    assert tuple(outputs[-1].shape) == (None, 14, 14, 81)


def test_class_agnostic_bbox_pred_has_bg_and_fg_rows():
    cfg = zoo_config("12_2017_baselines/e2e_faster_rcnn_R-50-FPN_1x.yaml", {"MODEL.CLS_AGNOSTIC_BBOX_REG": True})
    inventory, _ = head_inventory(cfg, range(2, 6), 256)
    assert inventory["bbox_pred_w"] == (8, 1024) and inventory["cls_score_w"] == (81, 1024)
