"""Detectron's RetinaNet (MODEL.TYPE retinanet) as one Keras functional model.

The inference model takes the R-CNN model's inputs, `images` (B, H, W, 3) float32 BGR minus
PIXEL_MEANS padded to FPN.COARSEST_STRIDE and `image_info` (B, 3) = (original height, original
width, scale), and returns the same outputs: `boxes` (B, D, 4) x1,y1,x2,y2 in original pixels,
`scores`, `classes` (1..NUM_CLASSES-1) and `num_detections`, D = TEST.DETECTIONS_PER_IM, after
Detectron's core/test_retinanet.py post-processing (`tfdet.layers.retinanet_output`).

The heads follow modeling/retinanet_heads.py: per level a class tower and a box tower of
RETINANET.NUM_CONVS 3x3 convs + ReLU and a 3x3 prediction conv; every level calls the same layer
objects, named after the finest level (`retnet_cls_conv_n0_fpn3`, ...), as Detectron's ConvShared
stores only those blobs.
"""

import math

import keras
import numpy as np

# Importing these modules fills the registries with their builders.
from tfdet.modeling import backbones as _backbones  # noqa: F401
from tfdet.layers import CaffeConv2D
from tfdet.layers.retinanet_output import RetinaNetClassProbs, RetinaNetDetections
from tfdet.modeling.registry import BODIES
from tfdet.modeling.roi_heads.common import caffe2_fill
from tfdet.modeling.test_settings import detection_settings
from tfdet.ops.anchors import retinanet_level_anchors

HEAD_STD = 0.01  # GaussianFill std of every RetinaNet head conv


def retinanet_levels(cfg):
    """The pyramid levels RetinaNet predicts on: FPN.RPN_MIN_LEVEL..RPN_MAX_LEVEL (3..7 in the zoo)."""
    return list(range(cfg.FPN.RPN_MIN_LEVEL, cfg.FPN.RPN_MAX_LEVEL + 1))


def num_anchors(cfg):
    """A, the anchors per position: SCALES_PER_OCTAVE * len(ASPECT_RATIOS)."""
    return cfg.RETINANET.SCALES_PER_OCTAVE * len(cfg.RETINANET.ASPECT_RATIOS)


def num_class_outputs(cfg):
    """C, the class channels per anchor: NUM_CLASSES with SOFTMAX (background first), else NUM_CLASSES-1."""
    return cfg.MODEL.NUM_CLASSES if cfg.RETINANET.SOFTMAX else cfg.MODEL.NUM_CLASSES - 1


def retinanet_cell_anchors(cfg):
    """{level: cell anchors (A, 4)} in Detectron's octave-major order (test_retinanet._create_cell_anchors)."""
    retina = cfg.RETINANET
    return {
        level: retinanet_level_anchors(level, retina.SCALES_PER_OCTAVE, retina.ASPECT_RATIOS, retina.ANCHOR_SCALE)
        for level in retinanet_levels(cfg)
    }


def class_prior_bias(cfg):
    """The cls pred bias init (get_retinanet_bias_init): -log((1-p)/p) for sigmoid; with SOFTMAX the
    background channel of every anchor gets log((C-1)(1-p)/p) and the classes 0."""
    prior = cfg.RETINANET.PRIOR_PROB
    if not cfg.RETINANET.SOFTMAX:
        return keras.initializers.Constant(-math.log((1.0 - prior) / prior))
    per_anchor = np.zeros(cfg.MODEL.NUM_CLASSES, dtype=np.float32)
    per_anchor[0] = math.log((cfg.MODEL.NUM_CLASSES - 1) * (1.0 - prior) / prior)
    return keras.initializers.Constant(np.tile(per_anchor, num_anchors(cfg)))


def _head_conv(name, filters, bias_initializer="zeros"):
    """A 3x3 pad-1 head conv with Gaussian(0.01) weights, named after its Detectron blob."""
    return CaffeConv2D(
        filters, 3, padding=1, kernel_initializer=caffe2_fill("GaussianFill", HEAD_STD),
        bias_initializer=bias_initializer, name=name,
    )  # fmt: skip


def _tower(cfg, kind, dim, k_min):
    """The NUM_CONVS shared 3x3 convs of the `kind` ('cls' or 'bbox') tower, named after level k_min."""
    return [_head_conv(f"retnet_{kind}_conv_n{i}_fpn{k_min}", dim) for i in range(cfg.RETINANET.NUM_CONVS)]


def _run_tower(convs, features, kind, level):
    """The tower's convs, each followed by a ReLU, on one level's features."""
    x = features
    for i, conv in enumerate(convs):
        x = keras.layers.ReLU(name=f"retnet_{kind}_conv_n{i}_fpn{level}_relu")(conv(x))
    return x


def add_retinanet_heads(cfg, body):
    """{level: (cls_logits, bbox_pred)} NHWC on every RetinaNet level of `body` (a BodyOutput).

    cls_logits (B, H, W, A*C): channel a*C + c (C from `num_class_outputs`); bbox_pred (B, H, W, A*4):
    channel a*4 + k, or with CLASS_SPECIFIC_BBOX (B, H, W, A*4*(NUM_CLASSES-1)): channel
    a*4*(NUM_CLASSES-1) + 4*c + k (Caffe2's NCHW channels, in the same order). Box deltas are
    (dx, dy, dw, dh); without SHARE_CLS_BBOX_TOWER the box pred sits on its own tower.
    """
    levels = retinanet_levels(cfg)
    missing = [level for level in levels if level not in body.features]
    if missing:
        raise ValueError(
            f"RetinaNet needs pyramid levels {levels}; body {cfg.MODEL.CONV_BODY} lacks {missing} "
            "(set FPN.MULTILEVEL_RPN and FPN.EXTRA_CONV_LEVELS as the RetinaNet configs do)"
        )
    k_min, anchors, dim = levels[0], num_anchors(cfg), body.dim
    box_dim = 4 * (cfg.MODEL.NUM_CLASSES - 1) if cfg.RETINANET.CLASS_SPECIFIC_BBOX else 4
    cls_tower = _tower(cfg, "cls", dim, k_min)
    cls_pred = _head_conv(f"retnet_cls_pred_fpn{k_min}", num_class_outputs(cfg) * anchors, class_prior_bias(cfg))
    share = cfg.RETINANET.SHARE_CLS_BBOX_TOWER
    bbox_tower = None if share else _tower(cfg, "bbox", dim, k_min)
    bbox_pred = _head_conv(f"retnet_bbox_pred_fpn{k_min}", box_dim * anchors)
    outputs = {}
    for level in levels:
        cls_features = _run_tower(cls_tower, body.features[level], "cls", level)
        bbox_features = cls_features if share else _run_tower(bbox_tower, body.features[level], "bbox", level)
        outputs[level] = (cls_pred(cls_features), bbox_pred(bbox_features))
    return outputs


def add_retinanet_inputs():
    """The inference model's inputs: `images` and `image_info`, as the R-CNN model takes them."""
    return {"images": keras.Input((None, None, 3), name="images"), "image_info": keras.Input((3,), name="image_info")}


def build_retinanet(cfg):
    """The inference graph of `cfg`: body, heads, class probabilities and test_retinanet's post-processing. Its
    training graph, with the same Detectron-named layers, is `tfdet.modeling.retinanet_training`'s."""
    if cfg.RETINANET.CLASS_SPECIFIC_BBOX:
        raise ValueError(
            "RETINANET.CLASS_SPECIFIC_BBOX True: Detectron's test_retinanet cannot decode class-specific boxes, "
            "so there is no inference model to match; set it False"
        )
    inputs = add_retinanet_inputs()
    body = BODIES.get(cfg.MODEL.CONV_BODY)(cfg, inputs["images"])
    heads = add_retinanet_heads(cfg, body)
    softmax_classes = cfg.MODEL.NUM_CLASSES if cfg.RETINANET.SOFTMAX else None
    probs = [
        RetinaNetClassProbs(softmax_classes, name=f"retnet_cls_prob_fpn{level}")(cls_logits)
        for level, (cls_logits, _) in heads.items()
    ]
    cell_anchors = retinanet_cell_anchors(cfg)
    boxes, scores, classes, num_detections = RetinaNetDetections(
        cell_anchors=[cell_anchors[level] for level in heads],
        strides=[2**level for level in heads],
        num_classes=cfg.MODEL.NUM_CLASSES,
        inference_threshold=cfg.RETINANET.INFERENCE_TH,
        pre_nms_top_n=cfg.RETINANET.PRE_NMS_TOP_N,
        softmax=cfg.RETINANET.SOFTMAX,
        name="detections",
        **detection_settings(cfg),
    )([*probs, *(bbox_pred for _, bbox_pred in heads.values()), inputs["image_info"]])
    outputs = {"boxes": boxes, "scores": scores, "classes": classes, "num_detections": num_detections}
    return keras.Model(inputs, outputs, name="retinanet")
