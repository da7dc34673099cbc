"""Soft-NMS and box voting (TEST.SOFT_NMS, TEST.BBOX_VOTE) against Detectron's code restated in NumPy
(tests/support/numpy_detectron_postprocess.py): the ops alone, then `per_class_nms` as Detectron's
box_results_with_nms_and_limit, then the DetectionOutput layer built from a config."""

import numpy as np
import pytest
import tensorflow as tf

from support import numpy_detectron_postprocess as det
from support.numpy_reference import clustered_boxes
from tfdet.ops.box_voting import SCORING_METHODS
from tfdet.ops.nms import BoxVoting, SoftNMS, per_class_nms
from tfdet.ops.soft_nms import batched_soft_nms


# Graph functions: eager while-loops run op by op from Python, 10x slower.
soft_nms_graph = tf.function(batched_soft_nms, reduce_retracing=True, autograph=False)
per_class_nms_graph = tf.function(per_class_nms, reduce_retracing=True, autograph=False)

# Two boxes of IoU exactly 0.5 with +1 sizes: 10 x 10 inside 10 x 20 (100 of 200 pixels).
HALF_OVERLAPPING_BOXES = np.array([[0, 0, 9, 9], [0, 0, 9, 19]], np.float32)


def run_soft_nms(boxes, scores, valid, **kwargs):
    got = soft_nms_graph(tf.constant(boxes[None]), tf.constant(scores[None]), tf.constant(valid[None]), **kwargs)
    count = int(got[3][0])
    return got[0].numpy()[0, :count], got[1].numpy()[0, :count], got[2].numpy()[0, :count]


def random_dets(rng, n, tie_every=0):
    boxes = clustered_boxes(rng, n, clusters=max(1, n // 8)).astype(np.float32)
    scores = rng.uniform(0.05, 1.0, n).astype(np.float32)
    if tie_every:
        scores[::tie_every] = scores[0]  # exact ties: Detectron's first-position rule decides
    return boxes, scores


@pytest.mark.parametrize("method, sigma, threshold", [
    ("linear", 0.5, 0.3), ("linear", 0.5, 0.6), ("gaussian", 0.5, 0.3), ("gaussian", 0.1, 0.3), ("hard", 0.5, 0.5),
])  # fmt: skip
def test_soft_nms_matches_numpy_reference(rng, method, sigma, threshold):
    for n, tie_every in ((1, 0), (40, 0), (150, 3), (250, 0)):
        boxes, scores = random_dets(rng, n, tie_every)
        valid = rng.uniform(size=n) < 0.8  # the row's dets are its valid entries, in order
        valid[0] = True
        got_boxes, got_scores, got_indices = run_soft_nms(
            boxes, scores, valid, iou_threshold=threshold, sigma=sigma, score_threshold=0.0001, method=method
        )
        dets = np.hstack([boxes[valid], scores[valid, None]])
        want, want_inds = det.soft_nms(dets, sigma, threshold, 0.0001, method)
        np.testing.assert_array_equal(got_indices, np.flatnonzero(valid)[want_inds])
        np.testing.assert_array_equal(got_scores, want[:, 4])  # float32, bit for bit
        np.testing.assert_array_equal(got_boxes, want[:, :4])


def test_soft_nms_hand_made_cases():
    # Two identical boxes with equal scores, a third apart: the first position wins the tie; linear
    # decay of the twin by 1 - IoU = 0 drops it (below 0.0001); the far box keeps its score.
    boxes = np.array([[0, 0, 9, 9], [0, 0, 9, 9], [50, 50, 59, 59]], np.float32)
    scores = np.array([0.8, 0.8, 0.3], np.float32)
    got_boxes, got_scores, got_indices = run_soft_nms(boxes, scores, np.ones(3, bool), iou_threshold=0.3)
    assert got_indices.tolist() == [0, 2] and got_scores.tolist() == [np.float32(0.8), np.float32(0.3)]
    # Gaussian: every overlapping box decays, even below the IoU threshold; touching (+1 areas) counts.
    boxes = np.array([[0, 0, 9, 9], [9, 0, 18, 9]], np.float32)  # IoU 10 / 190 with +1 areas
    _, got_scores, _ = run_soft_nms(boxes, np.array([0.9, 0.5], np.float32), np.ones(2, bool),
                                    iou_threshold=0.3, sigma=0.5, method="gaussian")  # fmt: skip
    iou = np.float32(10.0) / np.float32(190.0)
    assert got_scores[1] == np.float32(0.5) * np.float32(np.exp(np.float64(-(iou * iou) / np.float32(0.5))))
    # Nothing valid: nothing out.
    assert run_soft_nms(boxes, np.array([0.9, 0.5], np.float32), np.zeros(2, bool), iou_threshold=0.3)[0].shape == (0, 4)


def test_rows_of_a_batch_are_independent(rng):
    """Rows finishing at different steps: a row whose dets are done keeps its count while others go on."""
    rows = [random_dets(rng, n) for n in (60, 60, 60)]
    boxes, scores = np.stack([b for b, _ in rows]), np.stack([s for _, s in rows])
    valid = np.zeros((3, 60), bool)
    valid[0, :2], valid[1, :], valid[2, 30:] = True, True, True  # 2, 60 and 30 dets
    got = soft_nms_graph(tf.constant(boxes), tf.constant(scores), tf.constant(valid), iou_threshold=0.3,
                         score_threshold=0.0001)  # fmt: skip
    for row in range(3):
        dets = np.hstack([boxes[row][valid[row]], scores[row][valid[row], None]])
        want, want_inds = det.soft_nms(dets, 0.5, 0.3, 0.0001, "linear")
        count = int(got[3][row])
        assert count == len(want_inds), f"row {row}: {count} rows out, Detectron gives {len(want_inds)}"
        np.testing.assert_array_equal(got[2].numpy()[row, :count], np.flatnonzero(valid[row])[want_inds])
        np.testing.assert_array_equal(got[1].numpy()[row, :count], want[:, 4])


def image_predictions(rng, num_rois=200, num_classes=5):
    base = clustered_boxes(rng, num_rois)
    boxes = np.round((base[:, None, :] + rng.normal(0, 3, (num_rois, num_classes, 4))) * 4) / 4
    logits = rng.normal(0, 2, (num_rois, num_classes))
    scores = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    return boxes.astype(np.float32), scores


def check_detections(got, want, limit, box_atol=0.0, score_atol=0.0):
    boxes, scores, classes, num = (np.asarray(t) for t in got)
    want = det.by_score(want)
    n = int(num)
    assert n == min(limit, len(want)) and n > 0
    np.testing.assert_array_equal(classes[:n], [row[1] for row in want[:n]])
    np.testing.assert_allclose(scores[:n], [row[0] for row in want[:n]], rtol=0, atol=score_atol)
    np.testing.assert_allclose(boxes[:n], np.array([row[2] for row in want[:n]]), rtol=0, atol=box_atol)
    assert not scores[n:].any() and not boxes[n:].any()


@pytest.mark.parametrize("method", ["linear", "gaussian"])
def test_per_class_soft_nms_is_detectrons_box_results(rng, method):
    boxes, scores = image_predictions(rng)
    got = per_class_nms_graph(tf.constant(boxes), tf.constant(scores), 0.05, 0.5, 40, soft_nms=SoftNMS(method, 0.5))
    want = det.box_results_with_nms_and_limit(scores, boxes.reshape(len(boxes), -1), 0.05, 0.5, 40,
                                              soft_nms_method=method)  # fmt: skip
    check_detections(got, want, 40)


@pytest.mark.parametrize("scoring_method", SCORING_METHODS)
@pytest.mark.parametrize("soft", [False, True])
def test_box_voting_matches_numpy_reference(rng, scoring_method, soft):
    boxes, scores = image_predictions(rng)
    soft_nms = SoftNMS("linear", 0.5) if soft else None
    got = per_class_nms_graph(tf.constant(boxes), tf.constant(scores), 0.05, 0.5, 30, soft_nms=soft_nms,
                        voting=BoxVoting(0.7, scoring_method))  # fmt: skip
    want = det.box_results_with_nms_and_limit(
        scores, boxes.reshape(len(boxes), -1), 0.05, 0.5, 30, soft_nms_method="linear" if soft else None,
        vote_th=0.7, vote_method=scoring_method,
    )
    # Voted boxes and scores are float32 weighted means: summation order differs from numpy's.
    check_detections(got, want, 30, box_atol=1e-3, score_atol=1e-6)


def test_voting_moves_a_box_to_the_score_weighted_mean_of_its_voters():
    boxes = np.array([[[0, 0, 10, 10]], [[2, 0, 12, 10]], [[40, 40, 50, 50]]], np.float32)  # class-agnostic
    scores = np.array([[0.1, 0.9], [0.4, 0.6], [0.2, 0.8]], np.float32)
    got_boxes, got_scores, _, num = per_class_nms(tf.constant(boxes), tf.constant(scores), 0.05, 0.3, 5,
                                                  voting=BoxVoting(0.5, "AVG"))  # fmt: skip
    assert int(num) == 2  # box 1 is suppressed by box 0 (IoU 99/143) and votes for it
    np.testing.assert_allclose(got_boxes[1], [(0.9 * 0 + 0.6 * 2) / 1.5, 0, (0.9 * 10 + 0.6 * 12) / 1.5, 10], atol=1e-5)
    np.testing.assert_allclose(got_scores[:2], [0.8, 0.75], atol=1e-7)  # box 2 alone: 0.8; box 0: mean(0.9, 0.6)


@pytest.mark.parametrize("soft, scoring_method", [(False, None), (True, None), (False, "AVG"), (True, "IOU_AVG")])
def test_a_limit_above_the_survivors_returns_exactly_the_survivors(rng, soft, scoring_method):
    """Room for 1000 detections: every class keeps all its survivors and nothing else (no padding slot
    counted as a detection of score 0)."""
    boxes, scores = image_predictions(rng, num_rois=60)
    soft_nms = SoftNMS("linear", 0.5) if soft else None
    voting = BoxVoting(0.7, scoring_method) if scoring_method else None
    got = per_class_nms_graph(tf.constant(boxes), tf.constant(scores), 0.05, 0.5, 1000, soft_nms=soft_nms,
                              voting=voting)  # fmt: skip
    want = det.box_results_with_nms_and_limit(
        scores, boxes.reshape(len(boxes), -1), 0.05, 0.5, 1000, soft_nms_method="linear" if soft else None,
        vote_th=0.7 if voting else None, vote_method=scoring_method or "ID",
    )
    assert 0 < len(want) < 1000
    check_detections(got, want, 1000, box_atol=1e-3, score_atol=1e-6)


@pytest.mark.parametrize("scoring_method", ["AVG", "IOU_AVG"])
def test_voting_that_rescores_applies_the_limit_after_the_vote(rng, scoring_method):
    """One class with many more survivors than the limit: a vote that changes scores reorders them, so the
    best 5 are those after the vote (Detectron votes on every survivor, then keeps the limit)."""
    boxes, scores = image_predictions(rng, num_rois=200, num_classes=2)
    voting = BoxVoting(0.5, scoring_method)
    got = per_class_nms_graph(tf.constant(boxes), tf.constant(scores), 0.05, 0.5, 5, voting=voting)
    want = det.box_results_with_nms_and_limit(scores, boxes.reshape(len(boxes), -1), 0.05, 0.5, 5, vote_th=0.5,
                                              vote_method=scoring_method)  # fmt: skip
    check_detections(got, want, 5, box_atol=1e-3, score_atol=1e-6)


def test_a_score_equal_to_the_threshold_is_not_a_candidate():
    """Detectron's `scores[:, j] > TEST.SCORE_THRESH`, numpy comparing float32 scores in float32: a score of
    exactly float32(0.05) is dropped, the next float32 above it kept."""
    boxes = np.array([[[0, 0, 10, 10]], [[40, 40, 50, 50]]], np.float32)  # class-agnostic, far apart
    at = np.float32(0.05)
    above = np.nextafter(at, np.float32(1))
    scores = np.array([[1 - at, at], [1 - above, above]], np.float32)
    _, got_scores, _, num = per_class_nms(tf.constant(boxes), tf.constant(scores), 0.05, 0.5, 10)
    assert int(num) == 1 and got_scores.numpy()[0] == above


def test_a_voter_exactly_at_the_voting_threshold_votes():
    """Detectron votes with every candidate whose IoU is >= the threshold: IoU exactly 0.5 (100 of 200 pixels,
    +1 sizes) at TEST.BBOX_VOTE.VOTE_TH 0.5 counts."""
    boxes = HALF_OVERLAPPING_BOXES[:, None, :]  # class-agnostic
    scores = np.array([[0.1, 0.9], [0.4, 0.6]], np.float32)
    got_boxes, got_scores, _, num = per_class_nms(tf.constant(boxes), tf.constant(scores), 0.05, 0.3, 5,
                                                  voting=BoxVoting(0.5, "ID"))  # fmt: skip
    want = det.box_results_with_nms_and_limit(scores, np.tile(boxes.reshape(2, 4), (1, 2)), 0.05, 0.3, 5, vote_th=0.5)
    assert int(num) == 1  # box 1 is suppressed by box 0 (IoU 0.5 > 0.3), and votes for it
    np.testing.assert_allclose(got_boxes[0], [0, 0, 9, (0.9 * 9 + 0.6 * 19) / 1.5], atol=1e-5)
    np.testing.assert_allclose(got_boxes[0], want[0][2], atol=1e-5)
    assert got_scores[0] == np.float32(0.9)


@pytest.mark.parametrize("method", ["linear", "hard"])
def test_soft_nms_thresholds_at_equality(method):
    """Cython's `if ov > Nt` (linear, hard) and `if dets[pos, 4] < threshold`: an IoU exactly at the overlap
    threshold leaves the score as it is, and a score decayed to exactly the score threshold stays."""
    boxes = HALF_OVERLAPPING_BOXES
    scores = np.array([0.9, 0.6], np.float32)
    dets = np.hstack([boxes, scores[:, None]])
    _, got_scores, got_indices = run_soft_nms(boxes, scores, np.ones(2, bool), iou_threshold=0.5, method=method)
    want, want_inds = det.soft_nms(dets, 0.5, 0.5, 0.001, method)
    assert got_indices.tolist() == list(want_inds) == [0, 1] and got_scores.tolist() == want[:, 4].tolist()
    assert got_scores[1] == np.float32(0.6)
    if method == "linear":  # 0.6 * (1 - 0.5) is float32(0.3) exactly: at the score threshold, kept
        _, got_scores, got_indices = run_soft_nms(boxes, scores, np.ones(2, bool), iou_threshold=0.3,
                                                  score_threshold=0.3, method=method)  # fmt: skip
        want, want_inds = det.soft_nms(dets, 0.5, 0.3, 0.3, method)
        assert got_indices.tolist() == list(want_inds) == [0, 1] and got_scores[1] == np.float32(0.3)


def test_soft_nms_padding_rows_are_zeros(rng):
    """Past each row's count every box, score and index is 0, invalid entries with high scores included."""
    boxes, scores = random_dets(rng, 50)
    valid = rng.uniform(size=50) < 0.6
    got = soft_nms_graph(tf.constant(boxes[None]), tf.constant(scores[None]), tf.constant(valid[None]),
                         iou_threshold=0.3, score_threshold=0.0001)  # fmt: skip
    count = int(got[3][0])
    assert 0 < count <= valid.sum() < 50
    assert not got[0].numpy()[0, count:].any() and not got[1].numpy()[0, count:].any()
    assert not got[2].numpy()[0, count:].any()
