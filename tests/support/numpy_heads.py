"""Detectron's RoI heads restated in float64 NumPy on NCHW arrays, from its Caffe2 graphs: Caffe2's Conv, ConvTranspose
(IOHW), FC (on the NCHW flatten), GroupNorm and AffineChannel, softmax and sigmoid, the fixed bilinear upsampling
weights, the res5 head, one RoI's legacy RoIAlign and map_rois_to_fpn_levels. Shares no code with tfdet."""

import numpy as np

from support.numpy_roi_align import reference_roi_align

def relu(x):
    return np.maximum(x, 0.0)


def conv(x, w, b=None, stride=1, pad=0, dilation=1):
    """Caffe2 Conv: x (N, I, H, W), w (O, I, kh, kw), symmetric zero padding."""
    n, _, height, width = x.shape
    out_c, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out_h = (height + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    out_w = (width + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, out_c, out_h, out_w))
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[:, :, ky * dilation :: stride, kx * dilation :: stride][:, :, :out_h, :out_w]
            out += np.einsum("nihw,oi->nohw", patch, w[:, :, ky, kx], optimize=True)
    return out if b is None else out + b[None, :, None, None]


def conv_transpose(x, w, b, stride, pad):
    """Caffe2 ConvTranspose: w (I, O, kh, kw); full output (H-1)*s+k, `pad` cropped at each border."""
    n, _, height, width = x.shape
    _, out_c, kh, kw = w.shape
    full = np.zeros((n, out_c, (height - 1) * stride + kh, (width - 1) * stride + kw))
    for ky in range(kh):
        for kx in range(kw):
            full[:, :, ky : ky + stride * height : stride, kx : kx + stride * width : stride] += np.einsum(
                "nihw,io->nohw", x, w[:, :, ky, kx], optimize=True
            )
    out = full[:, :, pad : full.shape[2] - pad, pad : full.shape[3] - pad]
    return out + b[None, :, None, None]


def fc(x, w, b):
    """Caffe2 FC: flattens (N, C, H, W) in C, H, W order; w (out, in)."""
    return x.reshape(len(x), -1) @ w.T + b


def group_norm(x, gamma, beta, groups, eps=1e-5):
    n, c, h, w = x.shape
    g = x.reshape(n, groups, -1)
    g = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)
    return g.reshape(n, c, h, w) * gamma[None, :, None, None] + beta[None, :, None, None]


def affine(x, blobs, name):
    return x * blobs[name + "_s"][None, :, None, None] + blobs[name + "_b"][None, :, None, None]


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def bilinear_upsample_weights(channels, up_scale):
    """Detectron's BilinearInterpolation weights (C, C, 2s, 2s): FCN bilinear filter on the diagonal."""
    size = 2 * up_scale
    factor = (size + 1) // 2
    center = factor - 0.5  # size is even
    og = np.ogrid[:size, :size]
    filt = (1 - abs(og[0] - center) / factor) * (1 - abs(og[1] - center) / factor)
    w = np.zeros((channels, channels, size, size))
    w[range(channels), range(channels)] = filt
    return w


def res5_reference(x, blobs, stride_init, stride_1x1=True):
    """Three Detectron bottleneck blocks `res5_<i>` with AffineChannel, block 0 projected and strided."""
    for i in range(3):
        p = f"res5_{i}"
        stride = stride_init if i == 0 else 1
        s1, s3 = (stride, 1) if stride_1x1 else (1, stride)
        y = relu(affine(conv(x, blobs[p + "_branch2a_w"], stride=s1), blobs, p + "_branch2a_bn"))
        y = relu(affine(conv(y, blobs[p + "_branch2b_w"], stride=s3, pad=1), blobs, p + "_branch2b_bn"))
        y = affine(conv(y, blobs[p + "_branch2c_w"]), blobs, p + "_branch2c_bn")
        shortcut = affine(conv(x, blobs[p + "_branch1_w"], stride=stride), blobs, p + "_branch1_bn") if i == 0 else x
        x = relu(y + shortcut)
    return x


def roi_align(fmap, roi, scale, res, sampling_ratio):
    """Caffe2's legacy RoIAlign of one RoI on one (C, H, W) map (support/numpy_roi_align.py's loop reference)."""
    pooled = reference_roi_align(np.transpose(fmap, (1, 2, 0))[None], [roi], [0], (res, res), scale, sampling_ratio)
    return np.transpose(pooled[0], (2, 0, 1))


def fpn_level(roi, k_min=2, k_max=5):
    """Detectron's map_rois_to_fpn_levels for one RoI (areas with the +1 convention)."""
    area = (roi[2] - roi[0] + 1) * (roi[3] - roi[1] + 1)
    return int(np.clip(np.floor(4 + np.log2(np.sqrt(area) / 224 + 1e-6)), k_min, k_max))
