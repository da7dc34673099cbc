"""Mask targets sampled from full-image masks vs Detectron's polygon rasterisation (pycocotools) in the RoI."""

import numpy as np
import pytest
import tensorflow as tf

from support import numpy_training_reference as ref
from tfdet.ops.mask_targets import mask_rcnn_targets, match_masks_to_rois

HEIGHT, WIDTH = 120, 160  # original image
POLYGONS = [
    [[28, 44, 80, 44, 80, 70, 28, 70]],  # rectangle
    [[90.6, 10.4, 151.6, 24.2, 116.8, 101.4]],  # triangle
    [[11, 80.4, 60.2, 80.4, 60.2, 116.6, 40.8, 116.6, 40.8, 97.6, 11, 97.6]],  # L shape (concave)
    [[100, 60, 140, 60, 140, 110, 100, 110]],  # crowd region, never a mask target
]
CROWD = [False, False, False, True]


def full_image_masks(scale, resized=False):
    """Full-image masks at the input size: the polygons scaled and rasterised there, or (`resized`, as
    tfdet.data.pipeline does) rasterised at the original size and resized by nearest neighbour."""
    height, width = int(round(HEIGHT * scale)), int(round(WIDTH * scale))
    if resized:
        rows = np.minimum(np.floor((np.arange(height) + 0.5) / scale).astype(int), HEIGHT - 1)
        cols = np.minimum(np.floor((np.arange(width) + 0.5) / scale).astype(int), WIDTH - 1)
        return ref.rasterise(POLYGONS, HEIGHT, WIDTH)[:, rows][:, :, cols]
    scaled = [[list(np.asarray(p, np.float64) * scale) for p in poly] for poly in POLYGONS]
    return ref.rasterise(scaled, height, width)


def targets_for(rois, scale, resolution, resized=False):
    """TF targets for foreground RoIs (original pixels) of one image at `scale`, matched as Detectron does."""
    rois_in = np.asarray(rois, np.float32)[None] * np.float32(scale)
    boxes_in = ref.polys_to_boxes(POLYGONS)[None] * np.float32(scale)
    scales = tf.constant([scale], tf.float32)
    index = match_masks_to_rois(rois_in, boxes_in, [CROWD], [[True] * len(POLYGONS)], scales)
    labels = np.ones((1, len(rois)), np.int32)
    masks = full_image_masks(scale, resized)[None]
    return index.numpy()[0], mask_rcnn_targets(rois_in, labels, masks, index, scales, resolution).numpy()[0]


def iou(a, b):
    return np.sum((a > 0) & (b > 0)) / max(np.sum((a > 0) | (b > 0)), 1)


def distance_to_boundary(point, polygons):
    """Distance from a point to the nearest polygon edge."""
    best = np.inf
    for poly in polygons:
        vertices = np.reshape(poly, (-1, 2))
        for a, b in zip(vertices, np.roll(vertices, -1, axis=0)):
            t = np.clip(np.dot(point - a, b - a) / np.dot(b - a, b - a), 0.0, 1.0)
            best = min(best, np.linalg.norm(point - (a + t * (b - a))))
    return best


RoIS = [
    [24, 40, 84, 74],  # tight on the rectangle
    [10, 30, 100, 90],  # loose around it
    [40, 50, 120, 100],  # cuts the rectangle, reaches the triangle
    [88, 8, 154, 104],  # triangle
    [96, 20, 120, 60],  # inside the triangle, smaller than the 28 x 28 grid (upsampling)
    [6, 76, 66, 120],  # L shape
    [37.4, 88.6, 56.4, 115.8],  # fractional box in the L
]


@pytest.mark.parametrize("scale, resized", [(1.0, False), (1.6, False), (2.0, False), (1.6, True), (2.0, True)])
@pytest.mark.parametrize("resolution", [14, 28])
def test_agrees_with_detectron_polygon_rasterisation(scale, resized, resolution):
    """Same matches; cells differ only next to the polygon boundary, which keeps the IoU high. "Next to":
    within 0.75 pixel of the rasterisation (input pixels, or original pixels for resized masks: the mask
    places a straight edge to within half a pixel per axis) plus 0.15 grid cell (pycocotools rounds the
    vertices it rasterises to a fifth of a grid cell)."""
    non_crowd = [p for p, c in zip(POLYGONS, CROWD) if not c]
    expected_index, expected = ref.mask_targets(np.float32(RoIS), non_crowd, resolution)
    index, targets = targets_for(RoIS, scale, resolution, resized)
    np.testing.assert_array_equal(index, expected_index)
    ious = [iou(got, want) for got, want in zip(targets, expected)]
    assert min(ious) >= 0.9 and np.mean(ious) >= 0.97, ious
    for roi, match, got, want in zip(RoIS, index, targets, expected):
        assert set(np.unique(got)) <= {0, 1}
        w, h = max(roi[2] - roi[0], 1), max(roi[3] - roi[1], 1)
        tolerance = 0.75 / (1.0 if resized else scale) + 0.15 * max(w, h) / resolution  # original pixels
        for i, j in np.argwhere(got != want):
            centre = np.array([roi[0] + (j + 0.5) * w / resolution, roi[1] + (i + 0.5) * h / resolution])
            assert distance_to_boundary(centre, non_crowd[match]) <= tolerance, (roi, i, j)


@pytest.mark.parametrize(
    "roi, rectangle",
    [
        ([10, 20, 66, 48], [14, 22, 40, 35]),  # 2 x 1 pixel cells, centres at odd x and at half-integer y
        ([5, 5, 19, 19], [8, 8, 14, 14]),  # half-pixel cells (the grid upsamples the RoI)
        ([30, 40, 86, 96], [20, 50, 60, 140]),  # rectangle partly outside the RoI
    ],
)
def test_exact_for_grid_aligned_rectangles(roi, rectangle):
    """No cell centre on a rectangle edge: bilinear sampling + 0.5 reproduces pycocotools' polygon test."""
    x1, y1, x2, y2 = rectangle
    polygon = [[x1, y1, x2, y1, x2, y2, x1, y2]]
    masks = ref.rasterise([polygon], HEIGHT, WIDTH)[None]
    targets = mask_rcnn_targets(np.float32([[roi]]), [[1]], masks, [[0]], tf.constant([1.0]), 28).numpy()[0, 0]
    expected = ref.polys_to_mask_wrt_box(polygon, np.float32(roi), 28)
    np.testing.assert_array_equal(targets, expected)
    assert 0 < expected.sum() < 28 * 28


def test_non_foreground_rois_and_rois_without_ground_truth_are_ignored():
    masks = full_image_masks(1.0)[None]
    rois = np.float32([[RoIS[0], RoIS[0], [0, 0, 5, 5]]])
    labels = np.int32([[2, 0, 1]])
    gt_index = np.int32([[0, 0, -1]])
    targets = mask_rcnn_targets(rois, labels, masks, gt_index, tf.constant([1.0]), 14).numpy()[0]
    assert targets[0].max() == 1 and (targets[1] == -1).all() and (targets[2] == -1).all()


def test_crowd_regions_are_never_matched():
    rois_in = np.float32([[POLYGONS[3][0][0:2] + POLYGONS[3][0][4:6]]])
    boxes = ref.polys_to_boxes(POLYGONS)[None]
    index = match_masks_to_rois(rois_in, boxes, [CROWD], [[True] * 4], tf.constant([1.0])).numpy()
    assert index[0, 0] not in (-1, 3)
    none = match_masks_to_rois(rois_in, boxes, [[True] * 4], [[True] * 4], tf.constant([1.0])).numpy()
    assert none[0, 0] == -1


def test_graph_mode_batch_with_padding():
    masks = np.concatenate([full_image_masks(1.0), np.zeros((1, HEIGHT, WIDTH), np.uint8)])
    batch_masks = np.stack([masks, masks[::-1]])
    rois = np.float32([[RoIS[0], [0, 0, 0, 0]], [RoIS[3], RoIS[0]]])
    labels = np.int32([[1, -1], [2, 1]])
    gt_index = np.int32([[0, -1], [3, 4]])  # image 1 holds the masks in reverse order
    fn = tf.function(lambda *a: mask_rcnn_targets(*a, 14))
    targets = fn(rois, labels, batch_masks, gt_index, tf.constant([1.0, 1.0])).numpy()
    eager = mask_rcnn_targets(rois[:1, :1], labels[:1, :1], masks[None], np.int32([[0]]), tf.constant([1.0]), 14)
    np.testing.assert_array_equal(targets[0, 0], eager.numpy()[0, 0])
    np.testing.assert_array_equal(targets[1, 1], eager.numpy()[0, 0])
    assert (targets[0, 1] == -1).all() and targets[1, 0].sum() > 0
