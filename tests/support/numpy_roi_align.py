"""Caffe2's RoIAlign restated in float64 NumPy, one sample at a time, from its kernel
(caffe2/operators/roi_align_op.cc; detectron2's ROIAlign_cpu.cpp for aligned=True): the forward pass, its
gradient, and the tolerances the RoIAlign tests hold tfdet's op to against it. Shares no code with tfdet."""

import math

import numpy as np

FLOAT32_TOL = 2e-5  # abs, float32 op vs float64 reference on N(0, 1) features
FLOAT64_TOL = 1e-10  # abs, float64 op vs float64 reference
GRADIENT_TOL = 1e-8  # abs, theoretical vs numeric Jacobian entries (the op is linear in the features)


def reference_roi_align(features, boxes, box_indices, output_size, spatial_scale, sampling_ratio,
                        aligned=False):
    """Caffe2 RoIAlignForward (aligned=False) / detectron2 ROIAlignV2 (aligned=True), one sample at a time."""
    pooled = np.zeros((len(boxes), *output_size, features.shape[-1]))
    for r, ph, pw, y, x, count in reference_samples(boxes, output_size, spatial_scale, sampling_ratio, aligned):
        image = features[box_indices[r]]
        height, width = image.shape[:2]
        pooled[r, ph, pw] += sum(w * image[yy, xx] for yy, xx, w in bilinear_taps(height, width, y, x)) / count
    return pooled


def reference_roi_align_gradient(features_shape, boxes, box_indices, cotangent, output_size, spatial_scale,
                                 sampling_ratio, aligned=False):
    """Caffe2 RoIAlignGradient: each bin's cotangent / count goes to its samples' bilinear taps."""
    gradient = np.zeros(features_shape)
    height, width = features_shape[1:3]
    for r, ph, pw, y, x, count in reference_samples(boxes, output_size, spatial_scale, sampling_ratio, aligned):
        for yy, xx, w in bilinear_taps(height, width, y, x):
            gradient[box_indices[r], yy, xx] += w * cotangent[r, ph, pw] / count
    return gradient


def reference_samples(boxes, output_size, spatial_scale, sampling_ratio, aligned):
    """(RoI, bin row, bin column, sample y, sample x, samples in the bin) of every sample, as the kernels
    place them."""
    out_h, out_w = output_size
    offset = 0.5 if aligned else 0.0
    for r, box in enumerate(boxes):
        x1, y1, x2, y2 = (float(v) * spatial_scale - offset for v in box)
        roi_w, roi_h = x2 - x1, y2 - y1
        if not aligned:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / out_h, roi_w / out_w
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / out_h)
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / out_w)
        count = max(grid_h * grid_w, 1)
        for ph in range(out_h):
            for pw in range(out_w):
                for iy in range(grid_h):
                    y = y1 + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                    for ix in range(grid_w):
                        yield r, ph, pw, y, x1 + pw * bin_w + (ix + 0.5) * bin_w / grid_w, count


def bilinear_taps(height, width, y, x):
    """Caffe2's bilinear_interpolate as (row, column, weight) taps: none outside [-1, H] x [-1, W],
    clamped at the borders."""
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return []
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_low = y_high = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_low = x_high = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx
    return [(y_low, x_low, hy * hx), (y_low, x_high, hy * lx), (y_high, x_low, ly * hx), (y_high, x_high, ly * lx)]


def assert_close(actual, expected, tol):
    """Element-wise |actual - expected| <= tol; prints the largest error (shown by pytest -s)."""
    assert actual.shape == expected.shape
    error = float(np.max(np.abs(actual - expected))) if actual.size else 0.0
    print(f"max abs error {error:.3g} (tol {tol:g})")
    assert error <= tol
