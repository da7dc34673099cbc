"""Convolutions followed by a normalisation, named as Detectron's ConvAffine and ConvGN name them.

`conv_affine(x, cfg, 'res2_0_branch2a', ...)` makes the layers `res2_0_branch2a` (no bias) and
`res2_0_branch2a_bn`; `conv_gn` makes `<name>` (no bias) and `<name>_gn`. Every builder takes
`trainable`: False freezes the layer's weights (TRAIN.FREEZE_AT); True keeps the layer's own default
(AffineChannel stays frozen, as its definition says).
"""

import keras

from tfdet.layers import AffineChannel, CaffeConv2D, GroupNormalization

# Caffe2's XavierFill: uniform in +-sqrt(3 / fan_in), fan_in = in_channels / groups * kh * kw.
XAVIER_FILL = "lecun_uniform"


def frozen_unless(layer, trainable):
    """`layer`, made non-trainable when `trainable` is False (Detectron's StopGradient upstream)."""
    if not trainable:
        layer.trainable = False
    return layer


def group_norm_groups(cfg, channels):
    """GroupNorm group count for `channels`, Detectron's get_group_gn: G or C/G, exactly one of them."""
    dim_per_group, num_groups = cfg.GROUP_NORM.DIM_PER_GP, cfg.GROUP_NORM.NUM_GROUPS
    if (dim_per_group > 0) == (num_groups > 0):
        raise ValueError(
            f"GroupNorm: set exactly one of GROUP_NORM.DIM_PER_GP ({dim_per_group}) and "
            f"GROUP_NORM.NUM_GROUPS ({num_groups}) and the other to -1"
        )
    groups = channels // dim_per_group if dim_per_group > 0 else num_groups
    if channels % groups or (dim_per_group > 0 and channels % dim_per_group):
        raise ValueError(f"GroupNorm: {channels} channels do not split into {groups} equal groups")
    return groups


def conv_layer(
    name,
    filters,
    kernel_size,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    use_bias=True,
    kernel_initializer=XAVIER_FILL,
    trainable=True,
):
    """A Caffe2 convolution layer (symmetric padding, channel groups) named after its blob `name`."""
    layer = CaffeConv2D(
        filters,
        kernel_size,
        strides=stride,
        padding=padding,
        dilation_rate=dilation,
        groups=groups,
        use_bias=use_bias,
        kernel_initializer=kernel_initializer,
        name=name,
    )
    return frozen_unless(layer, trainable)


def conv(x, name, filters, kernel_size, **options):
    """`conv_layer(name, filters, kernel_size, **options)` applied to `x`."""
    return conv_layer(name, filters, kernel_size, **options)(x)


def conv_affine(x, cfg, name, filters, kernel_size, trainable=True, norm_name=None, **conv_args):
    """Conv without bias, then the frozen batch norm `norm_name` (default `<name>_bn`; ConvAffine).

    Both layers keep their Detectron names and weights; the convolution applies the affine
    (CaffeConv2D.fold_affine), which is one fused Conv2D + BiasAdd for TensorFlow."""
    del cfg  # same signature as conv_gn, so the two are interchangeable
    convolution = conv_layer(name, filters, kernel_size, use_bias=False, trainable=trainable, **conv_args)
    affine = frozen_unless(AffineChannel(name=norm_name or f"{name}_bn"), trainable)
    affine.build((None, None, None, filters))
    convolution.fold_affine(affine)
    return affine(convolution(x))


def conv_gn(x, cfg, name, filters, kernel_size, trainable=True, **conv_args):
    """Conv without bias, then GroupNorm `<name>_gn` with Detectron's group rule (ConvGN)."""
    x = conv(x, name, filters, kernel_size, use_bias=False, trainable=trainable, **conv_args)
    norm = GroupNormalization(
        groups=group_norm_groups(cfg, filters), epsilon=cfg.GROUP_NORM.EPSILON, name=f"{name}_gn"
    )
    return frozen_unless(norm, trainable)(x)


def relu(x, name):
    """ReLU layer named `name` (Detectron applies its ReLUs in place, so the name is ours)."""
    return keras.layers.ReLU(name=name)(x)
