"""Detectron's mask pasting (core/test.py segm_results) with NumPy and cv2.resize, for the Predictor.

Each detection's M x M probabilities, zero-padded by one pixel, are resized with cv2 to the integer box that
`expand_boxes(box, (M + 2) / M)` gives, thresholded, and written into that box's region of an empty image mask:
the work scales with the boxes' areas, not with N full images. The SavedModel pastes in its graph
(`tfdet.ops.masks.paste_masks`, which reproduces this); on a CPU this is over ten times faster than that graph
op for 100 masks of an 800 x 1344 image (benchmarks/stage_profile.py's "mask paste").
"""

import cv2
import numpy as np


def reference_boxes(boxes, mask_size):
    """Detectron's `expand_boxes(boxes, (M + 2) / M).astype(np.int32)`: float32 arithmetic, truncated."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    scale = np.float32((mask_size + 2.0) / mask_size)
    half_width = (boxes[:, 2] - boxes[:, 0]) * np.float32(0.5) * scale
    half_height = (boxes[:, 3] - boxes[:, 1]) * np.float32(0.5) * scale
    center_x = (boxes[:, 2] + boxes[:, 0]) * np.float32(0.5)
    center_y = (boxes[:, 3] + boxes[:, 1]) * np.float32(0.5)
    expanded = [center_x - half_width, center_y - half_height, center_x + half_width, center_y + half_height]
    return np.stack(expanded, axis=1).astype(np.int32)


def paste_masks(probs, boxes, image_height, image_width, threshold):
    """(N, H, W) bool image masks from (N, M, M) probabilities and their (N, 4) x1, y1, x2, y2 boxes; a pixel is
    on where its resized probability is above `threshold` (MRCNN.THRESH_BINARIZE)."""
    probs = np.asarray(probs, np.float32)
    size = probs.shape[-1]
    masks = np.zeros((len(probs), image_height, image_width), bool)
    padded = np.zeros((size + 2, size + 2), np.float32)
    for mask, prob, (x1, y1, x2, y2) in zip(masks, probs, reference_boxes(boxes, size)):
        padded[1:-1, 1:-1] = prob
        region = cv2.resize(padded, (max(int(x2 - x1 + 1), 1), max(int(y2 - y1 + 1), 1))) > threshold
        x_start, x_end = max(x1, 0), min(x2 + 1, image_width)
        y_start, y_end = max(y1, 0), min(y2 + 1, image_height)
        if x_start < x_end and y_start < y_end:
            mask[y_start:y_end, x_start:x_end] = region[y_start - y1 : y_end - y1, x_start - x1 : x_end - x1]
    return masks
