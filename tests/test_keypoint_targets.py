"""Keypoint RoI sampling and heatmap targets vs Detectron's `add_keypoint_rcnn_blobs` and
`keypoints_to_heatmap_labels` (numpy transcriptions)."""

import numpy as np
import pytest
import tensorflow as tf

from support import numpy_training_reference as ref
from tfdet.ops.keypoint_targets import keypoint_heatmap_targets, sample_keypoint_rois
from tfdet.ops.roi_sampling import label_proposals

S = 56


def detectron_layout(keypoints):
    """(N, K, 3) x, y, v -> Detectron's (N, 3, K)."""
    return np.transpose(np.asarray(keypoints), (0, 2, 1))


@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_heatmap_labels_equal_detectron(scale):
    rois = np.float32([[10, 20, 66, 76], [0, 0, 27, 13], [5.5, 7.25, 40.75, 33.5]])
    keypoints = np.float32([
        # inside, on x1, on x2 (boundary rule), on y2, outside left, invisible
        [[30, 40, 2], [10, 50, 1], [66, 30, 2], [20, 76, 2], [9, 30, 2], [40, 40, 0]],
        # the first cell, the last cell, past x2, past y2, on both x2 and y2, negative
        [[0, 0, 1], [26.9, 12.9, 2], [27.5, 5, 2], [5, 13.2, 2], [27, 13, 2], [-1, 5, 2]],
        # fractional boxes and points
        [[5.5, 7.25, 2], [40.75, 33.5, 1], [23.1, 20.4, 2], [12.3, 31.9, 2], [40.7, 7.3, 2], [6, 8, 2]],
    ])
    expected_index, expected_weight = ref.keypoints_to_heatmap_labels(detectron_layout(keypoints), rois, S)
    scaled_keypoints = keypoints.copy()
    scaled_keypoints[..., :2] *= scale
    index, weight = keypoint_heatmap_targets(rois[None] * scale, scaled_keypoints[None], [scale], S)
    np.testing.assert_array_equal(index.numpy()[0], expected_index)
    np.testing.assert_array_equal(weight.numpy()[0], expected_weight)
    assert expected_weight.sum() >= 10 and (expected_index == S * S - 1).any()


G, P, K = 3, 6, 4
GT = [[10, 10, 60, 60], [70, 10, 110, 70], [20, 80, 60, 110]]
CROWD = [False, False, True]
GT_KEYPOINTS = np.float32([
    [[20, 20, 2], [50, 50, 1], [0, 0, 0], [30, 55, 2]],  # visible inside its box
    [[0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]],  # no visible keypoint: never a keypoint RoI
    [[0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]],  # crowd
])
PROPOSALS = [
    [12, 12, 62, 62],  # foreground of gt 0, keypoints inside
    [30, 30, 62, 62],  # overlap below 0.5
    [10, 25, 60, 75],  # foreground of gt 0; keypoint (20, 20) outside, (30, 55) and (50, 50) inside
    [22, 5, 62, 48],  # foreground of gt 0 (IoU 0.53), but none of its visible keypoints inside
    [72, 12, 110, 70],  # foreground of gt 1 (no visible keypoints)
    [20, 80, 60, 112],  # on the crowd box
]


def candidates():
    gt = np.float32([GT])
    proposals = np.float32([PROPOSALS])
    return label_proposals(proposals, np.ones((1, P), bool), gt, [[1, 1, 1]], [CROWD], [[True] * G], [1.0])


def test_eligible_set_equals_detectron():
    entry = ref.roidb_entry(GT, [1, 1, 1], CROWD, PROPOSALS, 2, 0.5, (10.0, 10.0, 5.0, 5.0))
    expected = set(ref.keypoint_fg_candidates(entry, detectron_layout(GT_KEYPOINTS), 0.5))
    assert expected == {0, 3, 5} and entry["max_overlaps"][6] >= 0.5  # gt 0 and proposals 0 and 2
    for seed in range(4):
        rois = sample_keypoint_rois(candidates(), GT_KEYPOINTS[None], [1.0], 16, 0.25, seed=tf.constant([seed, 9]))
        valid = rois.valid.numpy()[0]
        picked = rois.candidate_index.numpy()[0][valid]
        assert set(picked) == expected and len(picked) == len(expected)
        assert valid[: len(expected)].all()
        gt_of = entry["box_to_gt_ind_map"][picked]
        np.testing.assert_array_equal(rois.keypoints.numpy()[0][valid], GT_KEYPOINTS[gt_of])
        np.testing.assert_array_equal(rois.rois.numpy()[0][valid], entry["boxes"][picked])
        assert not rois.rois.numpy()[0][~valid].any() and (rois.candidate_index.numpy()[0][~valid] == -1).all()


def test_at_most_round_fg_fraction_times_batch_rois_are_drawn():
    rois = sample_keypoint_rois(candidates(), GT_KEYPOINTS[None], [1.0], 4, 0.25, seed=tf.constant([1, 1]))
    assert rois.valid.shape == (1, 1) and rois.valid.numpy().all()


def test_graph_mode_end_to_end():
    @tf.function
    def run(gt_keypoints):
        rois = sample_keypoint_rois(candidates(), gt_keypoints, [1.0], 16, 0.25, seed=tf.constant([2, 2]))
        return keypoint_heatmap_targets(rois.rois, rois.keypoints, [1.0], S)

    index, weight = run(GT_KEYPOINTS[None])
    assert index.shape == (1, 4, K) and weight.numpy().sum() > 0
    assert weight.numpy()[0, 3:].sum() == 0  # three eligible RoIs, the fourth slot is padding
