"""ResNet and ResNeXt conv bodies as Detectron's modeling/ResNet.py builds them, layer for layer.

Layer names are Detectron's blob names: stem `conv1`, `res_conv1_bn` (or `conv1_gn`), `pool1`;
blocks `res<s>_<i>_branch2{a,b,c}` with `_bn`/`_gn`, projection `res<s>_0_branch1`. Detectron
sums and ReLUs in place, so the layers it leaves unnamed follow one rule: the ReLU after conv
`<x>` and its norm is `<x>_relu`; a block's sum is `res<s>_<i>_add` and the ReLU after it
`res<s>_<i>_sum`, whose output is what Detectron's blob `res<s>_<last>_sum` holds (post-ReLU).

RESNETS.STEM_FUNC, TRANS_FUNC and SHORTCUT_FUNC choose the variants by Detectron's names.

TRAIN.FREEZE_AT = k freezes the stem (stage 1) and stages res2..res<k>: Detectron puts a
StopGradient on the output of stage k, so nothing upstream of it ever receives a gradient; here
those layers are built non-trainable, which leaves the same weights untouched by training. 0
freezes nothing; 1 (the stem alone) is accepted although Detectron refuses it. Layers downstream
(later stages, FPN, heads) keep their own defaults (AffineChannel is always frozen).
"""

import collections
import functools

import keras

from tfdet.modeling.backbones.conv_norm import conv_affine, conv_gn, relu
from tfdet.modeling.registry import BODIES, BodyOutput, Registry

STEMS = Registry("RESNETS.STEM_FUNC")
TRANSFORMATIONS = Registry("RESNETS.TRANS_FUNC")
SHORTCUTS = Registry("RESNETS.SHORTCUT_FUNC")

STEM_DIM = 64
STAGE_OUTPUT_DIMS = {2: 256, 3: 512, 4: 1024, 5: 2048}
BLOCK_COUNTS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}

StageOutput = collections.namedtuple("StageOutput", ["blob", "tensor"])
StageOutput.__doc__ = "A stage's last block output and its Detectron blob name (`res4_5_sum`)."


def _pool1(x):
    """MaxPool 3x3 stride 2 pad 1 (floor output size); zero padding is exact after the ReLU."""
    x = keras.layers.ZeroPadding2D(1, name="pool1_pad")(x)
    return keras.layers.MaxPooling2D(3, strides=2, padding="valid", name="pool1")(x)


@STEMS.register("basic_bn_stem")
def basic_bn_stem(cfg, images, trainable=True):
    """conv1 7x7/2 (no bias) -> AffineChannel `res_conv1_bn` (MSRA's bn_conv1) -> ReLU -> pool1."""
    x = conv_affine(
        images, cfg, "conv1", STEM_DIM, 7, stride=2, padding=3, trainable=trainable, norm_name="res_conv1_bn"
    )
    return _pool1(relu(x, "conv1_relu"))


@STEMS.register("basic_gn_stem")
def basic_gn_stem(cfg, images, trainable=True):
    """conv1 7x7/2 (no bias) -> GroupNorm `conv1_gn` -> ReLU -> pool1."""
    x = conv_gn(images, cfg, "conv1", STEM_DIM, 7, stride=2, padding=3, trainable=trainable)
    return _pool1(relu(x, "conv1_relu"))


def _bottleneck(conv_norm, cfg, x, prefix, dim_out, dim_inner, stride, dilation, trainable):
    """1x1 -> 3x3 (grouped, dilated) -> 1x1, norm after each, ReLU after the first two.

    The block stride sits on the 1x1 when RESNETS.STRIDE_1X1 (MSRA models), else on the 3x3.
    """
    stride_1x1, stride_3x3 = (stride, 1) if cfg.RESNETS.STRIDE_1X1 else (1, stride)
    x = conv_norm(x, cfg, f"{prefix}_branch2a", dim_inner, 1, stride=stride_1x1, trainable=trainable)
    x = relu(x, f"{prefix}_branch2a_relu")
    x = conv_norm(
        x,
        cfg,
        f"{prefix}_branch2b",
        dim_inner,
        3,
        stride=stride_3x3,
        padding=dilation,
        dilation=dilation,
        groups=cfg.RESNETS.NUM_GROUPS,
        trainable=trainable,
    )
    x = relu(x, f"{prefix}_branch2b_relu")
    return conv_norm(x, cfg, f"{prefix}_branch2c", dim_out, 1, trainable=trainable)


TRANSFORMATIONS.register("bottleneck_transformation")(functools.partial(_bottleneck, conv_affine))
TRANSFORMATIONS.register("bottleneck_gn_transformation")(functools.partial(_bottleneck, conv_gn))


def _projection_shortcut(conv_norm, cfg, x, prefix, dim_in, dim_out, stride, trainable):
    """Identity when dims match, else 1x1 conv `<prefix>_branch1` (stride `stride`) + norm."""
    if dim_in == dim_out:
        return x
    return conv_norm(x, cfg, f"{prefix}_branch1", dim_out, 1, stride=stride, trainable=trainable)


SHORTCUTS.register("basic_bn_shortcut")(functools.partial(_projection_shortcut, conv_affine))
SHORTCUTS.register("basic_gn_shortcut")(functools.partial(_projection_shortcut, conv_gn))


def block_stride(dim_in, dim_out, dilation, stride_init):
    """Detectron's rule: only a dimension-changing block after res2 (dim_in != 64), undilated, strides."""
    return stride_init if dim_in != dim_out and dim_in != STEM_DIM and dilation == 1 else 1


def add_residual_block(x, prefix, dim_in, dim_out, dim_inner, stride_init, dilation, cfg, trainable=True):
    """One residual block `<prefix>` (e.g. res3_0): transformation + shortcut, summed, then ReLU."""
    stride = block_stride(dim_in, dim_out, dilation, stride_init)
    transform = TRANSFORMATIONS.get(cfg.RESNETS.TRANS_FUNC)
    shortcut = SHORTCUTS.get(cfg.RESNETS.SHORTCUT_FUNC)
    branch = transform(cfg, x, prefix, dim_out, dim_inner, stride, dilation, trainable)
    identity = shortcut(cfg, x, prefix, dim_in, dim_out, stride, trainable)
    summed = keras.layers.Add(name=f"{prefix}_add")([branch, identity])
    return relu(summed, f"{prefix}_sum")


def add_stage(x, prefix, num_blocks, dim_in, dim_out, dim_inner, stride_init, dilation, cfg, trainable=True):
    """Stack `num_blocks` residual blocks `<prefix>_0 ..` on any 4-D input; returns the last output.

    Reusable outside the bodies: the C4 box head builds res5 on pooled RoI features with
    `add_stage(pool5, 'res5', 3, 1024, 2048, 8 * NUM_GROUPS * WIDTH_PER_GROUP, stride_init=2,
    dilation=1, cfg=cfg)`. Block 0 strides by `stride_init` when dim_in != dim_out, dim_in != 64
    and dilation == 1 (Detectron's rule); `dilation` > 1 dilates every 3x3 and keeps stride 1.
    The returned tensor is the layer `<prefix>_<num_blocks - 1>_sum`. Variants, groups and
    stride placement come from cfg.RESNETS; `trainable=False` freezes every layer of the stage.
    """
    for index in range(num_blocks):
        x = add_residual_block(
            x, f"{prefix}_{index}", dim_in, dim_out, dim_inner, stride_init, dilation, cfg, trainable
        )
        dim_in = dim_out
    return x


def _check_freeze_at(freeze_at):
    if freeze_at not in range(6):
        raise ValueError(f"TRAIN.FREEZE_AT must be 0 (nothing) to 5 (through res5), got {freeze_at}")


def resnet_stages(cfg, images, block_counts):
    """Stem and stages res2.. (one per entry of `block_counts`): {stage: StageOutput}."""
    freeze_at = cfg.TRAIN.FREEZE_AT
    _check_freeze_at(freeze_at)
    x = STEMS.get(cfg.RESNETS.STEM_FUNC)(cfg, images, trainable=freeze_at < 1)
    bottleneck_dim = cfg.RESNETS.NUM_GROUPS * cfg.RESNETS.WIDTH_PER_GROUP
    dim_in, stages = STEM_DIM, {}
    for stage, num_blocks in enumerate(block_counts, start=2):
        dilation = cfg.RESNETS.RES5_DILATION if stage == 5 else 1
        dim_out, dim_inner = STAGE_OUTPUT_DIMS[stage], bottleneck_dim * 2 ** (stage - 2)
        x = add_stage(
            x, f"res{stage}", num_blocks, dim_in, dim_out, dim_inner, 2, dilation, cfg, trainable=stage > freeze_at
        )
        stages[stage] = StageOutput(f"res{stage}_{num_blocks - 1}_sum", x)
        dim_in = dim_out
    return stages


def _resnet_body(block_counts, cfg, images):
    """A C4 (res2..res4) or C5 (res2..res5) body: the last stage, keyed by its level (log2 stride)."""
    stages = resnet_stages(cfg, images, block_counts)
    last = max(stages)
    # A dilated res5 keeps res4's stride, 16.
    level = 4 if last == 5 and cfg.RESNETS.RES5_DILATION > 1 else last
    return BodyOutput({level: stages[last].tensor}, STAGE_OUTPUT_DIMS[last], stage_tensors(stages))


def stage_tensors(stages):
    """{stage name ("res2"): tensor} of `resnet_stages`' {stage: StageOutput}, for BodyOutput.stages."""
    return {f"res{stage}": output.tensor for stage, output in stages.items()}


RESNET_BODIES = {
    "ResNet.add_ResNet50_conv4_body": BLOCK_COUNTS[50][:3],
    "ResNet.add_ResNet50_conv5_body": BLOCK_COUNTS[50],
    "ResNet.add_ResNet101_conv4_body": BLOCK_COUNTS[101][:3],
    "ResNet.add_ResNet101_conv5_body": BLOCK_COUNTS[101],
    "ResNet.add_ResNet152_conv5_body": BLOCK_COUNTS[152],
}
for _name, _block_counts in RESNET_BODIES.items():
    BODIES.register(_name)(functools.partial(_resnet_body, _block_counts))
