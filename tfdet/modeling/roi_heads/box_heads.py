"""Fast R-CNN box heads (Detectron's fast_rcnn_heads.py and ResNet.add_ResNet_roi_conv5_head).

Each registered head pools RoI features from the body, then turns them into one vector per RoI;
`add_fast_rcnn_outputs` scores classes and regresses boxes from that vector. The `*_features`
functions hold the layers after RoI pooling, so they can also run on given RoI features.
"""

import collections

import keras

from tfdet.layers.flatten_dense import FlattenDense
from tfdet.modeling.backbones.conv_norm import relu
from tfdet.modeling.backbones.resnet import add_stage
from tfdet.modeling.registry import BOX_HEADS, RoIHeadOutput
from tfdet.modeling.roi_heads.common import caffe2_fill, conv_relu_stack, pool_rois

FastRCNNOutputs = collections.namedtuple("FastRCNNOutputs", ["cls_prob", "bbox_pred", "cls_score"])
FastRCNNOutputs.__doc__ = "Class probabilities (R, K), box deltas (R, 4 * classes), class logits (R, K)."

RES5_DIM = 2048


def _dense_relu(x, name, units):
    """Detectron `FC` (XavierFill weights, zero bias) followed by ReLU."""
    x = keras.layers.Dense(units, kernel_initializer=caffe2_fill("XavierFill"), name=name)(x)
    return relu(x, f"{name}_relu")


def _fc6_relu(cfg, x):
    """fc6 over the flattened RoI map (porting reorders Detectron's NCHW-flatten columns), then ReLU."""
    fc6 = FlattenDense(cfg.FAST_RCNN.MLP_HEAD_DIM, kernel_initializer=caffe2_fill("XavierFill"), name="fc6")
    return relu(fc6(x), "fc6_relu")


def mlp_head_features(cfg, roi_features):
    """fc6 + ReLU -> fc7 + ReLU on (R, res, res, C) RoI features: (R, MLP_HEAD_DIM)."""
    return _dense_relu(_fc6_relu(cfg, roi_features), "fc7", cfg.FAST_RCNN.MLP_HEAD_DIM)


def xconv1fc_head_features(cfg, roi_features, use_gn=False):
    """NUM_STACKED_CONVS x (3x3 conv [+ GroupNorm] + ReLU) -> fc6 + ReLU: (R, MLP_HEAD_DIM).

    Convs are `head_conv<i>`, MSRAFill; with GroupNorm they have no bias and `head_conv<i>_gn` follows.
    """
    x = conv_relu_stack(
        roi_features, cfg, "head_conv", cfg.FAST_RCNN.NUM_STACKED_CONVS, cfg.FAST_RCNN.CONV_HEAD_DIM, 3,
        use_gn=use_gn, padding=1, kernel_initializer=caffe2_fill("MSRAFill"),
    )
    return _fc6_relu(cfg, x)


def res5_stage(cfg, dim_in, resolution):
    """Detectron's RoI `res5` stage as a reusable Keras model (R, res, res, dim_in) -> (R, res', res', 2048).

    Three bottleneck blocks, dilation 1, first stride ROI_XFORM_RESOLUTION // 7 (2 for 14x14 RoIs).
    A model, so that the C4 mask head can run the very same layers (same weights) on mask RoIs.
    """
    inputs = keras.Input((resolution, resolution, dim_in), name="res5_input")
    dim_inner = cfg.RESNETS.NUM_GROUPS * cfg.RESNETS.WIDTH_PER_GROUP * 8
    outputs = add_stage(inputs, "res5", 3, dim_in, RES5_DIM, dim_inner, resolution // 7, 1, cfg)
    return keras.Model(inputs, outputs, name="res5")


def res5_head_features(cfg, pool5, res5):
    """res5 on pooled RoIs, then `res5_pool` (7x7 average pool) to one 2048-vector per RoI."""
    x = keras.layers.AveragePooling2D(7, strides=1, name="res5_pool")(res5(pool5))
    if tuple(x.shape[1:3]) != (1, 1):
        raise ValueError(
            f"res5 head: FAST_RCNN.ROI_XFORM_RESOLUTION {pool5.shape[1]} gives res5 maps of "
            f"{x.shape[1] + 6}x{x.shape[2] + 6}; Detectron's 7x7 res5_pool needs 7x7 (resolution 14 or 7)"
        )
    return keras.layers.Flatten(name="res5_pool_flat")(x)


@BOX_HEADS.register("fast_rcnn_heads.add_roi_2mlp_head")
def add_roi_2mlp_head(cfg, body, rois, box_indices):
    """RoIAlign -> fc6 -> fc7 (the FPN box head)."""
    roi_feat = pool_rois(cfg, "FAST_RCNN", body, rois, box_indices, "roi_feat")
    return RoIHeadOutput(mlp_head_features(cfg, roi_feat), cfg.FAST_RCNN.MLP_HEAD_DIM)


@BOX_HEADS.register("fast_rcnn_heads.add_roi_Xconv1fc_head")
def add_roi_Xconv1fc_head(cfg, body, rois, box_indices):
    """RoIAlign -> X convs -> fc6."""
    roi_feat = pool_rois(cfg, "FAST_RCNN", body, rois, box_indices, "roi_feat")
    return RoIHeadOutput(xconv1fc_head_features(cfg, roi_feat), cfg.FAST_RCNN.MLP_HEAD_DIM)


@BOX_HEADS.register("fast_rcnn_heads.add_roi_Xconv1fc_gn_head")
def add_roi_Xconv1fc_gn_head(cfg, body, rois, box_indices):
    """RoIAlign -> X convs with GroupNorm -> fc6 (the GN zoo models' box head)."""
    roi_feat = pool_rois(cfg, "FAST_RCNN", body, rois, box_indices, "roi_feat")
    return RoIHeadOutput(xconv1fc_head_features(cfg, roi_feat, use_gn=True), cfg.FAST_RCNN.MLP_HEAD_DIM)


@BOX_HEADS.register("ResNet.add_ResNet_roi_conv5_head")
def add_ResNet_roi_conv5_head(cfg, body, rois, box_indices):
    """RoIAlign from res4 -> res5 -> average pool (the C4 box head); `shared['res5']` is the stage."""
    pool5 = pool_rois(cfg, "FAST_RCNN", body, rois, box_indices, "pool5")
    res5 = res5_stage(cfg, body.dim, cfg.FAST_RCNN.ROI_XFORM_RESOLUTION)
    return RoIHeadOutput(res5_head_features(cfg, pool5, res5), RES5_DIM, shared={"res5": res5})


def add_fast_rcnn_outputs(cfg, head):
    """`cls_score` (softmax -> `cls_prob`) and `bbox_pred` (4 deltas per class, or bg/fg when class-agnostic)."""
    num_classes = cfg.MODEL.NUM_CLASSES
    num_bbox_reg_classes = 2 if cfg.MODEL.CLS_AGNOSTIC_BBOX_REG else num_classes
    cls_score = keras.layers.Dense(num_classes, kernel_initializer=caffe2_fill("GaussianFill", 0.01), name="cls_score")(
        head.features
    )
    bbox_pred = keras.layers.Dense(
        4 * num_bbox_reg_classes, kernel_initializer=caffe2_fill("GaussianFill", 0.001), name="bbox_pred"
    )(head.features)
    cls_prob = keras.layers.Softmax(name="cls_prob")(cls_score)
    return FastRCNNOutputs(cls_prob, bbox_pred, cls_score)
