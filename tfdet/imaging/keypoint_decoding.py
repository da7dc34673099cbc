"""Detectron's keypoint decoding (utils/keypoints.py heatmaps_to_keypoints) with NumPy and cv2.resize.

For runners without TensorFlow; it gives what `tfdet.ops.keypoints.heatmaps_to_keypoints` gives in the model.
Each box's heatmaps are resized (INTER_CUBIC) to ceil(box size) pixels, raised to `min_size` when that is
positive; the first maximum of each keypoint's map in row-major order gives the keypoint at the centre of
that pixel, scaled back to the box; its logit and spatial-softmax probability come with it.
"""

import cv2
import numpy as np

# cv2 resizes 1, 3 or 4 channels with IPP's cubic kernel and more with OpenCV's own, which the model's
# resize_cubic_cv2 reproduces: fewer keypoints are padded to this many channels.
OPENCV_KERNEL_CHANNELS = 5


def heatmaps_to_keypoints(heatmaps, boxes, min_size=0):
    """(N, K, 4) float32 keypoints (x, y, logit, prob) from (N, S, S, K) heatmap logits and (N, 4) float32
    boxes x1, y1, x2, y2 in image pixels; `min_size` is KRCNN.INFERENCE_MIN_SIZE."""
    heatmaps = np.asarray(heatmaps, np.float32)
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    count, num_keypoints = len(boxes), heatmaps.shape[-1]
    keypoints = np.zeros((count, num_keypoints, 4), np.float32)
    widths = np.maximum(boxes[:, 2] - boxes[:, 0], np.float32(1))
    heights = np.maximum(boxes[:, 3] - boxes[:, 1], np.float32(1))
    map_widths, map_heights = np.ceil(widths), np.ceil(heights)
    if min_size > 0:
        map_widths = np.maximum(map_widths, np.float32(min_size))
        map_heights = np.maximum(map_heights, np.float32(min_size))
    channels = max(num_keypoints, OPENCV_KERNEL_CHANNELS)
    for i in range(count):
        width, height = int(map_widths[i]), int(map_heights[i])
        maps = heatmaps[i]
        if channels > num_keypoints:
            maps = np.concatenate([maps, np.zeros(maps.shape[:2] + (channels - num_keypoints,), np.float32)], -1)
        scores = cv2.resize(maps, (width, height), interpolation=cv2.INTER_CUBIC)
        scores = scores.reshape(height * width, channels)[:, :num_keypoints]
        best_index = scores.argmax(axis=0)  # the first maximum, as np.argmax of Detectron's row-major map
        best = scores[best_index, np.arange(num_keypoints)]
        probs = np.float32(1) / np.exp(scores - best).sum(axis=0, dtype=np.float32)  # softmax at the maximum
        # (pixel + 0.5) * correction + offset in float64, stored as float32, as Detectron's numpy does
        x = (best_index % width + 0.5) * np.float64(widths[i] / map_widths[i]) + np.float64(boxes[i, 0])
        y = (best_index // width + 0.5) * np.float64(heights[i] / map_heights[i]) + np.float64(boxes[i, 1])
        keypoints[i] = np.stack([x, y, best, probs], axis=-1)
    return keypoints
