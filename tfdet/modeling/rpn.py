"""Region proposal network: Detectron's single-level (C4) and FPN heads, anchors and proposals."""

import keras

from tfdet.layers import CaffeConv2D
from tfdet.layers.proposal_layer import GenerateProposals
from tfdet.ops.anchors import fpn_level_anchors, generate_anchors


def rpn_levels(cfg):
    """The (level, stride, cell anchors) the RPN runs on: FPN levels, or C4's single stride-16 map."""
    if cfg.FPN.FPN_ON and cfg.FPN.MULTILEVEL_RPN:
        k_min, k_max = cfg.FPN.RPN_MIN_LEVEL, cfg.FPN.RPN_MAX_LEVEL
        return [
            (level, 2**level, fpn_level_anchors(level, k_min, cfg.FPN.RPN_ANCHOR_START_SIZE, cfg.FPN.RPN_ASPECT_RATIOS))
            for level in range(k_min, k_max + 1)
        ]
    level = {8: 3, 16: 4, 32: 5}[cfg.RPN.STRIDE]
    return [(level, cfg.RPN.STRIDE, generate_anchors(cfg.RPN.STRIDE, cfg.RPN.SIZES, cfg.RPN.ASPECT_RATIOS))]


def add_rpn_head(cfg, body):
    """RPN head on every RPN level: [(objectness probabilities, deltas)] per level, NHWC.

    FPN shares one head across levels under the finest level's names (`conv_rpn_fpn2`, ...), as
    Detectron's ConvShared does; C4 names are `conv_rpn`, `rpn_cls_logits`, `rpn_bbox_pred`.
    """
    levels = rpn_levels(cfg)
    num_anchors = len(levels[0][2])
    suffix = f"_fpn{levels[0][0]}" if len(levels) > 1 or cfg.FPN.FPN_ON else ""
    dim = body.dim
    conv = CaffeConv2D(dim, 3, padding=1, name="conv_rpn" + suffix)
    cls_logits = CaffeConv2D(num_anchors, 1, name="rpn_cls_logits" + suffix)
    bbox_pred = CaffeConv2D(4 * num_anchors, 1, name="rpn_bbox_pred" + suffix)
    outputs = []
    for level, _, _ in levels:
        tag = f"_fpn{level}" if suffix else ""
        hidden = keras.layers.ReLU(name=f"conv_rpn_relu{tag}")(conv(body.features[level]))
        logits = cls_logits(hidden)
        probs = keras.layers.Activation("sigmoid", name=f"rpn_cls_probs{tag}")(logits)
        outputs.append((logits, probs, bbox_pred(hidden)))
    return outputs


def add_proposals(cfg, rpn_outputs, im_info, training=False):
    """Proposals from the RPN outputs with TRAIN.* or TEST.* RPN settings (Detectron's cfg_key)."""
    settings = cfg.TRAIN if training else cfg.TEST
    levels = rpn_levels(cfg)
    inputs = [t for _, probs, deltas in rpn_outputs for t in (probs, deltas)]
    return GenerateProposals(
        cell_anchors=[cell for _, _, cell in levels],
        strides=[stride for _, stride, _ in levels],
        pre_nms_top_n=settings.RPN_PRE_NMS_TOP_N,
        post_nms_top_n=settings.RPN_POST_NMS_TOP_N,
        nms_threshold=settings.RPN_NMS_THRESH,
        min_size=settings.RPN_MIN_SIZE,
        final_top_n=settings.RPN_POST_NMS_TOP_N,
        name="rpn_rois",
    )([*inputs, im_info])
