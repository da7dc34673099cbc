"""Mask R-CNN mask heads (Detectron's mask_rcnn_heads.py), as its test-time graph builds them.

FPN heads: RoIAlign -> X 3x3 convs `_[mask]_fcn<i>` (Keras `mask_fcn<i>`) -> `conv5_mask`
(ConvTranspose k2 s2) -> ReLU. The C4 head `v0upshare` runs the box head's own res5 layers on
the mask RoIs (Detectron loads its `_[mask]_res5_*` from `res5_*`, so the weights are the same)
-> `conv5_mask`. `add_mask_rcnn_outputs` predicts per-class mask logits and probabilities.
"""

import collections

import keras

from tfdet.layers.flatten_dense import FlattenDense
from tfdet.modeling.backbones.conv_norm import conv, relu
from tfdet.modeling.registry import MASK_HEADS, RoIHeadOutput
from tfdet.modeling.roi_heads.common import (
    bilinear_upsample,
    caffe2_fill,
    conv_relu_stack,
    conv_transpose,
    pool_rois,
)

MaskOutputs = collections.namedtuple("MaskOutputs", ["probs", "logits"])
MaskOutputs.__doc__ = "Sigmoid mask probabilities and their logits, (R, M, M, classes) each."


def _conv5_mask(cfg, x):
    """`conv5_mask`: 2x upsampling ConvTranspose (k2 s2 p0) to DIM_REDUCED channels, then ReLU."""
    x = conv_transpose(x, "conv5_mask", cfg.MRCNN.DIM_REDUCED, 2, 2, 0, caffe2_fill(cfg.MRCNN.CONV_INIT, 0.001))
    return relu(x, "conv5_mask_relu")


def fcn_head_features(cfg, roi_features, num_convs, use_gn=False):
    """X x (3x3 conv [+ GroupNorm] + ReLU) -> conv5_mask + ReLU: (R, 2 res, 2 res, DIM_REDUCED).

    Plain convs are dilated by MRCNN.DILATION (padded alike). Detectron's GroupNorm head pads by
    DILATION without dilating, which changes the mask size unless DILATION is 1, so it must be 1.
    """
    dilation = cfg.MRCNN.DILATION
    if use_gn and dilation != 1:
        raise NotImplementedError(
            f"MRCNN.DILATION {dilation} with a GroupNorm mask head: Detectron pads these convs by "
            "DILATION without dilating them, growing the masks; only MRCNN.DILATION 1 is supported"
        )
    x = conv_relu_stack(
        roi_features, cfg, "mask_fcn", num_convs, cfg.MRCNN.DIM_REDUCED, 3, use_gn=use_gn,
        padding=dilation, dilation=dilation, kernel_initializer=caffe2_fill(cfg.MRCNN.CONV_INIT, 0.001),
    )
    return _conv5_mask(cfg, x)


def mask_rcnn_fcn_head_v1upXconvs(cfg, body, rois, box_indices, box_head, num_convs):
    """RoIAlign -> `num_convs` convs -> conv5_mask; unregistered: as in Detectron, no config sets `num_convs`."""
    roi_feat = pool_rois(cfg, "MRCNN", body, rois, box_indices, "mask_roi_feat")
    return RoIHeadOutput(fcn_head_features(cfg, roi_feat, num_convs), cfg.MRCNN.DIM_REDUCED)


def mask_rcnn_fcn_head_v1upXconvs_gn(cfg, body, rois, box_indices, box_head, num_convs):
    """RoIAlign -> `num_convs` convs with GroupNorm (`_mask_fcn<i>` blobs) -> conv5_mask."""
    roi_feat = pool_rois(cfg, "MRCNN", body, rois, box_indices, "mask_roi_feat")
    return RoIHeadOutput(fcn_head_features(cfg, roi_feat, num_convs, use_gn=True), cfg.MRCNN.DIM_REDUCED)


@MASK_HEADS.register("mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs")
def mask_rcnn_fcn_head_v1up4convs(cfg, body, rois, box_indices, box_head):
    """The FPN zoo mask head: 4 convs -> conv5_mask."""
    return mask_rcnn_fcn_head_v1upXconvs(cfg, body, rois, box_indices, box_head, 4)


@MASK_HEADS.register("mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs_gn")
def mask_rcnn_fcn_head_v1up4convs_gn(cfg, body, rois, box_indices, box_head):
    """The GN zoo mask head: 4 convs with GroupNorm -> conv5_mask."""
    return mask_rcnn_fcn_head_v1upXconvs_gn(cfg, body, rois, box_indices, box_head, 4)


@MASK_HEADS.register("mask_rcnn_heads.mask_rcnn_fcn_head_v1up")
def mask_rcnn_fcn_head_v1up(cfg, body, rois, box_indices, box_head):
    """2 convs -> conv5_mask."""
    return mask_rcnn_fcn_head_v1upXconvs(cfg, body, rois, box_indices, box_head, 2)


def v0upshare_features(cfg, mask_pool5, res5):
    """The box head's res5 stage on pooled mask RoIs, then conv5_mask + ReLU."""
    return _conv5_mask(cfg, res5(mask_pool5))


@MASK_HEADS.register("mask_rcnn_heads.mask_rcnn_fcn_head_v0upshare")
def mask_rcnn_fcn_head_v0upshare(cfg, body, rois, box_indices, box_head):
    """The C4 mask head: RoIAlign from res4 -> the box head's res5 layers (shared) -> conv5_mask."""
    if "res5" not in box_head.shared:
        raise ValueError(
            "MRCNN.ROI_MASK_HEAD mask_rcnn_fcn_head_v0upshare shares the res5 stage of the box head "
            "FAST_RCNN.ROI_BOX_HEAD ResNet.add_ResNet_roi_conv5_head, which this model does not use"
        )
    if cfg.MRCNN.ROI_XFORM_RESOLUTION != cfg.FAST_RCNN.ROI_XFORM_RESOLUTION:
        raise ValueError(
            "mask_rcnn_fcn_head_v0upshare shares res5 with the box head, so MRCNN.ROI_XFORM_RESOLUTION "
            f"({cfg.MRCNN.ROI_XFORM_RESOLUTION}) must equal FAST_RCNN.ROI_XFORM_RESOLUTION "
            f"({cfg.FAST_RCNN.ROI_XFORM_RESOLUTION})"
        )
    if cfg.MRCNN.DILATION != 1:
        raise NotImplementedError(
            f"MRCNN.DILATION {cfg.MRCNN.DILATION} with mask_rcnn_fcn_head_v0upshare: the shared res5 "
            "layers are built undilated for the box head; only MRCNN.DILATION 1 (the zoo's) is supported"
        )
    mask_pool5 = pool_rois(cfg, "MRCNN", body, rois, box_indices, "mask_pool5")
    return RoIHeadOutput(v0upshare_features(cfg, mask_pool5, box_head.shared["res5"]), cfg.MRCNN.DIM_REDUCED)


def _fc_mask_logits(cfg, features, num_classes):
    """MRCNN.USE_FC_OUTPUT: FC `mask_fcn_logits` to classes x RESOLUTION^2, reshaped to (R, M, M, classes)."""
    side = cfg.MRCNN.RESOLUTION
    logits = FlattenDense(
        num_classes * side * side, kernel_initializer=caffe2_fill("GaussianFill", 0.001), name="mask_fcn_logits"
    )(features)
    # Detectron's output columns are (class, y, x), its masks NCHW.
    logits = keras.layers.Reshape((num_classes, side, side), name="mask_fcn_logits_nchw")(logits)
    return keras.layers.Permute((2, 3, 1), name="mask_fcn_logits_nhwc")(logits)


def _conv_mask_logits(cfg, features, num_classes):
    """1x1 conv `mask_fcn_logits`, then `mask_fcn_logits_up` bilinear upsampling when UPSAMPLE_RATIO > 1."""
    # Detectron draws class-agnostic logits from a Gaussian: fan-based fills can diverge there.
    fill = cfg.MRCNN.CONV_INIT if cfg.MRCNN.CLS_SPECIFIC_MASK else "GaussianFill"
    logits = conv(features, "mask_fcn_logits", num_classes, 1, kernel_initializer=caffe2_fill(fill, 0.001))
    if cfg.MRCNN.UPSAMPLE_RATIO > 1:
        logits = bilinear_upsample(logits, "mask_fcn_logits_up", cfg.MRCNN.UPSAMPLE_RATIO)
    return logits


def add_mask_rcnn_outputs(cfg, head):
    """Mask logits and sigmoid probabilities (`mask_fcn_probs`): one mask per class, or one if class-agnostic."""
    num_classes = cfg.MODEL.NUM_CLASSES if cfg.MRCNN.CLS_SPECIFIC_MASK else 1
    if cfg.MRCNN.USE_FC_OUTPUT:
        logits = _fc_mask_logits(cfg, head.features, num_classes)
    else:
        logits = _conv_mask_logits(cfg, head.features, num_classes)
    probs = keras.layers.Activation("sigmoid", name="mask_fcn_probs")(logits)
    return MaskOutputs(probs, logits)
