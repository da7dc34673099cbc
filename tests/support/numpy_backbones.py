"""Caffe2's ops and Detectron's body restated in float64 NumPy on NCHW arrays, from the Caffe2 op definitions
and Detectron's modeling/ResNet.py and FPN.py: convolution (grouped, dilated), AffineChannel, GroupNorm,
max pooling, nearest upsampling, the bottleneck block and the FPN top-down path; `relative_error`, the
numeric tests' measure (max |ours - reference| / max |reference|). Shares no code with tfdet."""

import numpy as np

def strided_window(x, top, left, stride, out_h, out_w):
    """The (out_h, out_w) samples of x[..., top + stride * i, left + stride * j]."""
    return x[:, :, top : top + stride * (out_h - 1) + 1 : stride, left : left + stride * (out_w - 1) + 1 : stride]


def np_conv(x, w, b=None, stride=1, pad=0, dilation=1, groups=1):
    """Caffe2 Conv: zero padding `pad` on every side, floor output size, weights (O, I/groups, kh, kw)."""
    height, width = x.shape[2:]
    out_channels, group_in, kh, kw = w.shape
    group_out = out_channels // groups
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out_h = (height + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    out_w = (width + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((x.shape[0], out_channels, out_h, out_w))
    for g in range(groups):
        x_g = padded[:, g * group_in : (g + 1) * group_in]
        w_g = w[g * group_out : (g + 1) * group_out]
        for i in range(kh):
            for j in range(kw):
                patch = strided_window(x_g, i * dilation, j * dilation, stride, out_h, out_w)
                out[:, g * group_out : (g + 1) * group_out] += np.einsum(
                    "nchw,oc->nohw", patch, w_g[:, :, i, j], optimize=True
                )
    return out if b is None else out + b[None, :, None, None]


def np_affine(x, scale, bias):
    """Caffe2 AffineChannel: x * scale + bias per channel."""
    return x * scale[None, :, None, None] + bias[None, :, None, None]


def np_group_norm(x, gamma, beta, groups, eps):
    """Caffe2 GroupNorm: per sample and group, statistics over (C/G, H, W); eps inside the sqrt."""
    n, c, h, w = x.shape
    grouped = x.reshape(n, groups, c // groups, h, w)
    mean = grouped.mean(axis=(2, 3, 4), keepdims=True)
    var = ((grouped - mean) ** 2).mean(axis=(2, 3, 4), keepdims=True)
    return np_affine(((grouped - mean) / np.sqrt(var + eps)).reshape(n, c, h, w), gamma, beta)


def np_max_pool(x, kernel, stride, pad):
    """Caffe2 MaxPool: -inf padding, floor output size."""
    height, width = x.shape[2:]
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    out_h = (height + 2 * pad - kernel) // stride + 1
    out_w = (width + 2 * pad - kernel) // stride + 1
    out = np.full(x.shape[:2] + (out_h, out_w), -np.inf)
    for i in range(kernel):
        for j in range(kernel):
            out = np.maximum(out, strided_window(padded, i, j, stride, out_h, out_w))
    return out


def np_upsample_nearest_2x(x):
    """Caffe2 UpsampleNearest(scale=2): every pixel repeated 2x2."""
    return x.repeat(2, axis=2).repeat(2, axis=3)


def np_relu(x):
    return np.maximum(x, 0.0)


def np_conv_norm(x, blobs, name, norm, gn_groups=None, eps=1e-5, **conv_args):
    """Detectron's ConvAffine (`_bn`) or ConvGN (`_gn`): a bias-free conv and its normalisation."""
    y = np_conv(x, blobs[f"{name}_w"], **conv_args)
    if norm == "bn":
        return np_affine(y, blobs[f"{name}_bn_s"], blobs[f"{name}_bn_b"])
    return np_group_norm(y, blobs[f"{name}_gn_s"], blobs[f"{name}_gn_b"], gn_groups(y.shape[1]), eps)


def np_bottleneck_block(x, blobs, prefix, stride, stride_1x1, groups, dilation, norm, gn_groups=None):
    """Detectron's residual block: 1x1, 3x3 (grouped, dilated), 1x1 + shortcut, ReLU after the sum."""

    def branch(x, name, **conv_args):
        return np_conv_norm(x, blobs, f"{prefix}_{name}", norm, gn_groups, **conv_args)

    stride_a, stride_b = (stride, 1) if stride_1x1 else (1, stride)
    y = np_relu(branch(x, "branch2a", stride=stride_a))
    y = np_relu(branch(y, "branch2b", stride=stride_b, pad=dilation, dilation=dilation, groups=groups))
    y = branch(y, "branch2c")
    shortcut = branch(x, "branch1", stride=stride) if f"{prefix}_branch1_w" in blobs else x
    return np_relu(y + shortcut)


# level: (stage blob, channels, (height, width)) of small stand-ins for C2..C5
FPN_STAGES = {
    5: ("res5_2_sum", 14, (2, 3)),
    4: ("res4_5_sum", 12, (4, 6)),
    3: ("res3_3_sum", 10, (8, 12)),
    2: ("res2_2_sum", 6, (16, 24)),
}


def np_fpn(stages, blobs, cfg):
    """Detectron's add_fpn on NCHW stage outputs {level: array}: top-down, 3x3 outputs, P6 / P6-P7."""
    gn = cfg.FPN.USE_GN
    min_level = 3 if cfg.FPN.EXTRA_CONV_LEVELS else 2

    def fpn_conv(x, name, pad=0):
        if gn:
            return np_conv_norm(x, blobs, name, "gn", lambda c: 2, pad=pad)
        return np_conv(x, blobs[f"{name}_w"], blobs[f"{name}_b"], pad=pad)

    inner = {5: fpn_conv(stages[5], "fpn_inner_res5_2_sum")}
    for level in range(4, min_level - 1, -1):
        blob = FPN_STAGES[level][0]
        inner[level] = fpn_conv(stages[level], f"fpn_inner_{blob}_lateral") + np_upsample_nearest_2x(inner[level + 1])
    outputs = {level: fpn_conv(inner[level], f"fpn_{FPN_STAGES[level][0]}", pad=1) for level in inner}
    if cfg.FPN.EXTRA_CONV_LEVELS:
        outputs[6] = np_conv(stages[5], blobs["fpn_6_w"], blobs["fpn_6_b"], stride=2, pad=1)
        outputs[7] = np_conv(np_relu(outputs[6]), blobs["fpn_7_w"], blobs["fpn_7_b"], stride=2, pad=1)
    else:
        outputs[6] = np_max_pool(outputs[5], kernel=1, stride=2, pad=0)
    return outputs


def relative_error(actual, expected):
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))
