"""The whole model: every Detectron zoo architecture builds with Detectron's blob inventory."""

import gc
import warnings

import numpy as np
import pytest

from support.detectron_fixtures import expected_fpn_blobs, expected_resnet_blobs
from support.paths import shared_path
from tfdet.config import load_config
from tfdet.layers import placeholder_initialization
from tfdet.modeling import build_model
from tfdet.modeling.detectron_names import detectron_inventory

DEPTHS = {"50": (3, 4, 6, 3), "101": (3, 4, 23, 3), "152": (3, 8, 36, 3)}
STAGE_SUMS = {
    "50": ("res5_2_sum", "res4_5_sum", "res3_3_sum", "res2_2_sum"),
    "101": ("res5_2_sum", "res4_22_sum", "res3_3_sum", "res2_2_sum"),
    "152": ("res5_2_sum", "res4_35_sum", "res3_7_sum", "res2_2_sum"),
}


def load_quietly(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # legacy names in some zoo files warn, as they should
        return load_config(path)


def zoo_configs():
    """(name, cfg) of each distinct generalized R-CNN architecture among Detectron's zoo YAMLs.

    Depth and groups only tell e2e Mask R-CNN configs apart: the heads do not depend on them and
    test_backbones checks every body's inventory; this keeps the suite within its time budget.
    """
    seen, found = set(), []
    for path in sorted(shared_path("detectron", "configs").rglob("*.yaml")):
        cfg = load_quietly(path)
        if cfg.MODEL.TYPE != "generalized_rcnn":
            continue
        body = cfg.MODEL.CONV_BODY, cfg.RESNETS.NUM_GROUPS, cfg.RESNETS.WIDTH_PER_GROUP
        if not path.name.startswith("e2e_mask_rcnn"):
            body = body[0].startswith("FPN"), body[0].endswith("conv4_body")
        signature = (
            body, cfg.RESNETS.STEM_FUNC,
            cfg.FPN.USE_GN, cfg.RPN.RPN_ON, cfg.MODEL.RPN_ONLY, cfg.FAST_RCNN.ROI_BOX_HEAD, cfg.MODEL.MASK_ON,
            cfg.MRCNN.ROI_MASK_HEAD, cfg.MODEL.KEYPOINTS_ON, cfg.MODEL.NUM_CLASSES, cfg.MODEL.CLS_AGNOSTIC_BBOX_REG,
        )  # fmt: skip
        if signature not in seen:
            seen.add(signature)
            found.append((path.name, cfg))
    return found


def with_bias(name, shape):
    return {f"{name}_w": shape, f"{name}_b": shape[:1]}


def transposed_with_bias(name, shape):
    """A ConvTranspose blob: Caffe2 lays its weight out (in, out, kH, kW), so the bias has shape[1]."""
    return {f"{name}_w": shape, f"{name}_b": shape[1:2]}


def with_gn(name, shape):
    return {f"{name}_w": shape, f"{name}_gn_s": shape[:1], f"{name}_gn_b": shape[:1]}


def expected_inventory(cfg):
    """Blob -> Caffe2 shape of the whole model, from reference/detectron.md §2's rules."""
    body = cfg.MODEL.CONV_BODY
    depth = next(d for d in DEPTHS if f"ResNet{d}_" in body)
    fpn = body.startswith("FPN.")
    norm = "gn" if cfg.RESNETS.STEM_FUNC == "basic_gn_stem" else "bn"
    groups, width = cfg.RESNETS.NUM_GROUPS, cfg.RESNETS.WIDTH_PER_GROUP
    c4 = body.endswith("conv4_body")
    blobs = expected_resnet_blobs(DEPTHS[depth][:3] if c4 else DEPTHS[depth], groups, width, norm)
    if fpn:
        blobs.update(expected_fpn_blobs(STAGE_SUMS[depth], "gn" if cfg.FPN.USE_GN else "bn"))
    dim = 256 if fpn else 1024
    if cfg.RPN.RPN_ON:
        tag = "_fpn2" if fpn else ""
        anchors = len(cfg.FPN.RPN_ASPECT_RATIOS) if fpn else len(cfg.RPN.SIZES) * len(cfg.RPN.ASPECT_RATIOS)
        blobs.update(with_bias("conv_rpn" + tag, (dim, dim, 3, 3)))
        blobs.update(with_bias("rpn_cls_logits" + tag, (anchors, dim, 1, 1)))
        blobs.update(with_bias("rpn_bbox_pred" + tag, (4 * anchors, dim, 1, 1)))
    if cfg.MODEL.RPN_ONLY:
        return blobs
    box_head = cfg.FAST_RCNN.ROI_BOX_HEAD.split(".")[-1]
    classes = cfg.MODEL.NUM_CLASSES
    res = cfg.FAST_RCNN.ROI_XFORM_RESOLUTION
    if box_head == "add_ResNet_roi_conv5_head":
        res5 = expected_resnet_blobs((3, 4, 6, 3), groups, width, norm)
        blobs.update({k: v for k, v in res5.items() if k.startswith("res5_")})
        head_dim = 2048
    elif box_head == "add_roi_2mlp_head":
        blobs.update(with_bias("fc6", (1024, dim * res * res)))
        blobs.update(with_bias("fc7", (1024, 1024)))
        head_dim = 1024
    else:  # add_roi_Xconv1fc_gn_head
        for i in range(1, cfg.FAST_RCNN.NUM_STACKED_CONVS + 1):
            blobs.update(with_gn(f"head_conv{i}", (256, dim if i == 1 else 256, 3, 3)))
        blobs.update(with_bias("fc6", (1024, 256 * res * res)))
        head_dim = 1024
    blobs.update(with_bias("cls_score", (classes, head_dim)))
    blobs.update(with_bias("bbox_pred", (4 * (2 if cfg.MODEL.CLS_AGNOSTIC_BBOX_REG else classes), head_dim)))
    if cfg.MODEL.MASK_ON:
        mask_head = cfg.MRCNN.ROI_MASK_HEAD.split(".")[-1]
        if mask_head == "mask_rcnn_fcn_head_v0upshare":
            blobs.update(transposed_with_bias("conv5_mask", (2048, 256, 2, 2)))
        else:
            gn = mask_head.endswith("_gn")
            for i in range(1, 5):
                shape = (256, dim if i == 1 else 256, 3, 3)
                blobs.update(with_gn(f"_mask_fcn{i}", shape) if gn else with_bias(f"_[mask]_fcn{i}", shape))
            blobs.update(transposed_with_bias("conv5_mask", (256, 256, 2, 2)))
        blobs.update(with_bias("mask_fcn_logits", (classes, 256, 1, 1)))
    if cfg.MODEL.KEYPOINTS_ON:
        for i in range(1, cfg.KRCNN.NUM_STACKED_CONVS + 1):
            blobs.update(with_bias(f"conv_fcn{i}", (512, dim if i == 1 else 512, 3, 3)))
        blobs.update(transposed_with_bias("kps_score_lowres", (512, 17, 4, 4)))
        blobs.update(transposed_with_bias("kps_score", (17, 17, 4, 4)))
    return blobs


ZOO = zoo_configs()


_INVENTORIES = {}


def inventory_of(cfg):
    """Detectron inventory of `cfg`'s model, built once per config in this module (names and shapes only: no
    random draws for 100 M parameters; the model itself is dropped)."""
    key = cfg.dump()
    if key not in _INVENTORIES:
        with placeholder_initialization():
            model = build_model(cfg)
        _INVENTORIES[key] = detectron_inventory(model, cfg.MRCNN.ROI_MASK_HEAD)
        del model
        gc.collect()
    return _INVENTORIES[key]


@pytest.mark.parametrize("name,cfg", ZOO, ids=[name for name, _ in ZOO])
def test_zoo_architecture_inventory(name, cfg):
    inventory = inventory_of(cfg)
    expected = expected_inventory(cfg)
    assert sorted(set(expected) - set(inventory)) == [] and sorted(set(inventory) - set(expected)) == []
    assert inventory == expected


@pytest.mark.parametrize(
    "name,blobs,millions",
    [
        ("e2e_mask_rcnn_R-50-FPN_1x.yaml", 201, 44.40),
        ("e2e_keypoint_rcnn_R-50-FPN_1x.yaml", 209, 59.20),
        ("e2e_mask_rcnn_R-50-C4_1x.yaml", 173, 35.97),
    ],
)
def test_documented_blob_and_parameter_counts(name, blobs, millions):
    inventory = inventory_of(load_quietly(shared_path("detectron", "configs", "12_2017_baselines", name)))
    assert len(inventory) == blobs
    assert sum(int(np.prod(s)) for s in inventory.values()) / 1e6 == pytest.approx(millions, abs=0.005)


def test_zoo_covers_every_family():
    names = {name for name, _ in ZOO}
    for family in ("e2e_faster_rcnn_", "e2e_mask_rcnn_R-50-C4", "e2e_mask_rcnn_R-50-FPN", "e2e_keypoint_rcnn_",
                   "e2e_mask_rcnn_X-101-64x4d-FPN", "e2e_mask_rcnn_X-152", "fast_rcnn_", "rpn_", "keypoint_rcnn_"):  # fmt: skip
        assert any(n.startswith(family) for n in names), family
    assert sum(n.endswith("_gn.yaml") for n in names) >= 3
