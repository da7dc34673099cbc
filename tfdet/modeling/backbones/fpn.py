"""Feature Pyramid Network bodies as Detectron's modeling/FPN.py builds them on a ResNet.

For R-50 (last-block sums res5_2_sum, res4_5_sum, res3_3_sum, res2_2_sum) the layers are:
`fpn_inner_res5_2_sum` (1x1 on C5), then per finer level a lateral 1x1
`fpn_inner_res4_5_sum_lateral`, a nearest 2x upsampling `fpn_inner_res4_5_sum_topdown` of the
level above and their sum `fpn_inner_res4_5_sum`; each inner map gets a 3x3 output conv
`fpn_res4_5_sum`. No ReLU anywhere. FPN.USE_GN drops the conv biases and adds `<conv>_gn`
(the GN output then feeds everything the conv fed). P6 for the RPN is
`fpn_res5_2_sum_subsampled_2x`, P5 subsampled by a 1x1 stride-2 max pool (x[:, ::2, ::2]); with
FPN.EXTRA_CONV_LEVELS (RetinaNet) P6 is instead `fpn_6`, a 3x3 stride-2 conv on C5, and P7 is
`fpn_7` on `fpn_6_relu`.

The levels come from FPN.{RPN,ROI}_{MIN,MAX}_LEVEL as Detectron's get_min_max_levels picks them:
2..5 unless MULTILEVEL_RPN / MULTILEVEL_ROIS widen them (2..6 in the Faster/Mask R-CNN configs).
Input height and width must be multiples of FPN.COARSEST_STRIDE so upsampled maps match laterals.
"""

import functools

import keras

from tfdet.modeling.backbones.conv_norm import XAVIER_FILL, conv, conv_gn, relu
from tfdet.modeling.backbones.resnet import BLOCK_COUNTS, resnet_stages, stage_tensors
from tfdet.modeling.registry import BODIES, BodyOutput

LOWEST_BACKBONE_LEVEL = 2
HIGHEST_BACKBONE_LEVEL = 5


def pyramid_levels(cfg):
    """(min, max) pyramid level that the multi-level RPN and/or RoI heads need (get_min_max_levels)."""
    fpn = cfg.FPN
    if fpn.MULTILEVEL_RPN and fpn.MULTILEVEL_ROIS:
        return min(fpn.RPN_MIN_LEVEL, fpn.ROI_MIN_LEVEL), max(fpn.RPN_MAX_LEVEL, fpn.ROI_MAX_LEVEL)
    if fpn.MULTILEVEL_RPN:
        return fpn.RPN_MIN_LEVEL, fpn.RPN_MAX_LEVEL
    if fpn.MULTILEVEL_ROIS:
        return fpn.ROI_MIN_LEVEL, fpn.ROI_MAX_LEVEL
    return LOWEST_BACKBONE_LEVEL, HIGHEST_BACKBONE_LEVEL


def _fpn_conv(x, cfg, name, kernel_size, kernel_initializer=XAVIER_FILL):
    """An FPN conv to FPN.DIM channels: with bias, or without bias and followed by `<name>_gn`."""
    args = dict(padding=kernel_size // 2, kernel_initializer=kernel_initializer)
    if cfg.FPN.USE_GN:
        return conv_gn(x, cfg, name, cfg.FPN.DIM, kernel_size, **args)
    return conv(x, name, cfg.FPN.DIM, kernel_size, **args)


def _top_down(cfg, backbone):
    """Inner maps {level: tensor}: 1x1 on the coarsest stage, then lateral 1x1 + upsampled level above."""
    lateral_init = "zeros" if cfg.FPN.ZERO_INIT_LATERAL else XAVIER_FILL
    coarsest, *finer = sorted(backbone, reverse=True)
    inner = {coarsest: _fpn_conv(backbone[coarsest].tensor, cfg, f"fpn_inner_{backbone[coarsest].blob}", 1)}
    for level in finer:
        name = f"fpn_inner_{backbone[level].blob}"
        lateral = _fpn_conv(backbone[level].tensor, cfg, f"{name}_lateral", 1, lateral_init)
        top_down = keras.layers.UpSampling2D(2, interpolation="nearest", name=f"{name}_topdown")(inner[level + 1])
        inner[level] = keras.layers.Add(name=name)([lateral, top_down])
    return inner


def _coarser_levels(cfg, backbone, p5, max_level):
    """Levels above 5: P6 subsampled from P5, or (EXTRA_CONV_LEVELS) stride-2 convs from C5."""
    c5 = backbone[HIGHEST_BACKBONE_LEVEL]
    if not cfg.FPN.EXTRA_CONV_LEVELS:
        if max_level != HIGHEST_BACKBONE_LEVEL + 1:
            return {}
        p5_blob = f"fpn_{c5.blob}_gn" if cfg.FPN.USE_GN else f"fpn_{c5.blob}"
        return {max_level: keras.layers.MaxPooling2D(1, strides=2, name=f"{p5_blob}_subsampled_2x")(p5)}
    coarser, x = {}, c5.tensor
    for level in range(HIGHEST_BACKBONE_LEVEL + 1, max_level + 1):
        if level > HIGHEST_BACKBONE_LEVEL + 1:
            x = relu(x, f"fpn_{level - 1}_relu")
        x = conv(x, f"fpn_{level}", cfg.FPN.DIM, 3, stride=2, padding=1)
        coarser[level] = x
    return coarser


def add_fpn(cfg, backbone):
    """FPN on backbone stages {level: StageOutput}; returns {level: tensor}, finest level first.

    Stages finer than the minimum pyramid level are left out (RetinaNet's min level 3 drops res2).
    """
    min_level, max_level = pyramid_levels(cfg)
    used = {level: stage for level, stage in backbone.items() if level >= min_level}
    inner = _top_down(cfg, used)
    pyramid = {level: _fpn_conv(inner[level], cfg, f"fpn_{used[level].blob}", 3) for level in inner}
    pyramid.update(_coarser_levels(cfg, backbone, pyramid[HIGHEST_BACKBONE_LEVEL], max_level))
    return dict(sorted(pyramid.items()))


def _fpn_body(block_counts, p2_only, cfg, images):
    """A ResNet conv5 body with FPN on top; P2only bodies return the finest level alone."""
    stages = resnet_stages(cfg, images, block_counts)
    pyramid = add_fpn(cfg, stages)
    if p2_only:
        finest = min(pyramid)
        pyramid = {finest: pyramid[finest]}
    return BodyOutput(pyramid, cfg.FPN.DIM, stage_tensors(stages))


for _depth in (50, 101, 152):
    for _p2_only, _suffix in ((False, ""), (True, "_P2only")):
        BODIES.register(f"FPN.add_fpn_ResNet{_depth}_conv5{_suffix}_body")(
            functools.partial(_fpn_body, BLOCK_COUNTS[_depth], _p2_only)
        )
