"""Building blocks shared by the RoI heads: RoI pooling from the body, Caffe2 fills and ConvTranspose.

Every layer carries its Detectron blob name (docs/design.md decision 3); layers without parameters
(crops, RoI pooling) get descriptive names that no Detectron blob uses. Convs, ConvGN and ReLUs
come from tfdet.modeling.backbones.conv_norm.
"""

import keras

from tfdet.layers.bilinear_upsample import BilinearKernel
from tfdet.layers.roi_feature_transform import RoIFeatureTransform
from tfdet.modeling.backbones.conv_norm import conv, conv_gn, relu


def caffe2_fill(fill, std=None):
    """The Keras initializer drawing like Caffe2's `fill` ('GaussianFill', 'MSRAFill', 'XavierFill').

    MSRAFill is N(0, 2 / fan_out) and XavierFill U(+-sqrt(3 / fan_in)), with Caffe2's fans, which
    Keras computes alike for Dense, Conv2D and Conv2DTranspose kernels.
    """
    if fill == "GaussianFill":
        return keras.initializers.RandomNormal(stddev=std)
    if fill == "MSRAFill":
        return keras.initializers.VarianceScaling(2.0, mode="fan_out", distribution="untruncated_normal")
    if fill == "XavierFill":
        return keras.initializers.VarianceScaling(1.0, mode="fan_in", distribution="uniform")
    raise ValueError(f"Unknown Caffe2 fill {fill!r}; expected GaussianFill, MSRAFill or XavierFill")


def roi_levels(cfg, body):
    """Pyramid levels the RoI heads pool from: FPN.ROI_MIN..MAX_LEVEL, else the body's single map."""
    if cfg.FPN.FPN_ON and cfg.FPN.MULTILEVEL_ROIS:
        return tuple(range(cfg.FPN.ROI_MIN_LEVEL, cfg.FPN.ROI_MAX_LEVEL + 1))
    return (min(body.features),)


def pool_rois(cfg, section, body, rois, box_indices, name):
    """RoIAlign features (R, res, res, C) with the ROI_XFORM_* keys of config `section` (e.g. 'MRCNN')."""
    head_cfg = getattr(cfg, section)
    if head_cfg.ROI_XFORM_METHOD != "RoIAlign":
        raise NotImplementedError(
            f"{section}.ROI_XFORM_METHOD {head_cfg.ROI_XFORM_METHOD!r}: only RoIAlign is implemented "
            "(the one Detectron's R-CNN zoo configs use)"
        )
    levels = roi_levels(cfg, body)
    transform = RoIFeatureTransform(
        head_cfg.ROI_XFORM_RESOLUTION,
        head_cfg.ROI_XFORM_SAMPLING_RATIO,
        levels,
        canonical_scale=cfg.FPN.ROI_CANONICAL_SCALE,
        canonical_level=cfg.FPN.ROI_CANONICAL_LEVEL,
        aligned=cfg.TFDET.ROI_ALIGN_ALIGNED,
        name=name,
    )
    return transform([*(body.features[level] for level in levels), rois, box_indices])


def conv_transpose(x, name, filters, kernel_size, stride, pad, fill, trainable=True):
    """Caffe2 `ConvTranspose`: the full transposed convolution with `pad` pixels cropped at each border.

    Output side (H - 1) * stride + kernel_size - 2 * pad, exactly Caffe2's, for any kernel and pad.
    """
    x = keras.layers.Conv2DTranspose(
        filters,
        kernel_size,
        strides=stride,
        padding="valid",
        kernel_initializer=fill,
        trainable=trainable,
        name=name,
    )(x)
    if pad:
        x = keras.layers.Cropping2D(pad, name=f"{name}_crop")(x)
    return x


def bilinear_upsample(x, name, up_scale):
    """Detectron's `BilinearInterpolation`: fixed bilinear ConvTranspose, kernel 2s, stride s, pad s/2."""
    if up_scale % 2:
        raise ValueError(f"{name}: bilinear upsampling needs an even scale (Detectron asserts it), got {up_scale}")
    channels = x.shape[-1]
    return conv_transpose(x, name, channels, 2 * up_scale, up_scale, up_scale // 2, BilinearKernel(), trainable=False)


def conv_relu_stack(x, cfg, prefix, count, filters, kernel_size, use_gn=False, **conv_args):
    """`count` x (conv `<prefix><i>` [+ GroupNorm `<prefix><i>_gn`, no conv bias] + ReLU), i from 1."""
    for i in range(1, count + 1):
        name = f"{prefix}{i}"
        if use_gn:
            x = conv_gn(x, cfg, name, filters, kernel_size, **conv_args)
        else:
            x = conv(x, name, filters, kernel_size, **conv_args)
        x = relu(x, f"{name}_relu")
    return x

