"""DetectionOutput against Detectron's im_detect_bbox + box_results_with_nms_and_limit in numpy."""

import numpy as np
import pytest

from support import numpy_reference as ref
from support.numpy_reference import clustered_boxes, detectron_detections
from tfdet.layers.detection_output import DetectionOutput

WEIGHTS = (10.0, 10.0, 5.0, 5.0)


def detectron_im_detect_bbox(rois, cls_prob, bbox_pred, scale, height, width, agnostic):
    """Detectron: proposals back to the original image first, then decode, clip, tile if agnostic."""
    boxes = rois / scale
    deltas = bbox_pred[:, -4:] if agnostic else bbox_pred
    pred = ref.clip_tiled(ref.bbox_transform(boxes, deltas, WEIGHTS), height, width)
    if agnostic:
        pred = np.tile(pred, (1, cls_prob.shape[1]))
    return pred.reshape(len(rois), -1, 4)


@pytest.mark.parametrize("agnostic", [False, True])
def test_matches_detectron(rng, agnostic):
    num_rois, num_classes, valid = 120, 5, 100
    scale, height, width = 1.6, 300.0, 420.0
    rois = (clustered_boxes(rng, num_rois) * scale).astype(np.float32)
    logits = rng.normal(0, 2, (num_rois, num_classes))
    cls_prob = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    bbox_pred = rng.normal(0, 0.5, (num_rois, 4 * (2 if agnostic else num_classes))).astype(np.float32)
    layer = DetectionOutput(WEIGHTS, True, 0.05, 0.5, 30, class_agnostic=agnostic)
    boxes, scores, classes, num = layer(
        [rois[None], np.array([valid], np.int32), cls_prob, bbox_pred, np.array([[height, width, scale]], np.float32)]
    )
    # Only the first `valid` proposals are real; Detectron never sees the padding.
    pred = detectron_im_detect_bbox(
        rois[:valid].astype(np.float64), cls_prob[:valid], bbox_pred[:valid].astype(np.float64), scale, height, width,
        agnostic,
    ).astype(np.float32)
    want = detectron_detections(cls_prob[:valid], pred, 0.05, 0.5, 30)
    n = int(num[0])
    assert n == min(30, len(want))
    np.testing.assert_allclose(np.asarray(scores)[0, :n], [r[0] for r in want[:n]], rtol=0, atol=0)
    np.testing.assert_array_equal(np.asarray(classes)[0, :n], [r[1] for r in want[:n]])
    np.testing.assert_allclose(np.asarray(boxes)[0, :n], np.array([r[2] for r in want[:n]]), atol=2e-3)
    assert np.all(np.asarray(boxes)[0, :n, [0, 2]] <= width - 1)


def test_without_regression_boxes_are_proposals_in_original_pixels(rng):
    rois = np.array([[[16.0, 32, 80, 96]]], np.float32)
    cls_prob = np.array([[0.1, 0.9]], np.float32)
    layer = DetectionOutput(WEIGHTS, False, 0.05, 0.5, 5)
    boxes, scores, classes, num = layer([rois, np.array([1], np.int32), cls_prob, np.zeros((1, 8), np.float32),
                                         np.array([[100.0, 100.0, 2.0]], np.float32)])  # fmt: skip
    assert int(num[0]) == 1 and int(classes[0, 0]) == 1
    np.testing.assert_allclose(np.asarray(boxes)[0, 0], [8, 16, 40, 48])
