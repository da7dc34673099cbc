"""NMS against Detectron's Cython algorithm (numpy loop), including its >= tie rule."""

import numpy as np
import pytest
import tensorflow as tf

from support import numpy_reference as ref
from support.numpy_reference import clustered_boxes, detectron_detections
from tfdet.ops import nms as nms_ops


def run_nms(boxes, scores, thresh, max_out, tile_size=nms_ops.DEFAULT_TILE_SIZE):
    idx, num = nms_ops.batched_nms(
        tf.constant(boxes[None], tf.float32), tf.constant(scores[None], tf.float32), thresh, max_out,
        tile_size=tile_size,
    )
    return idx.numpy()[0, : num.numpy()[0]]


@pytest.mark.parametrize("thresh", [0.3, 0.5, 0.7])
@pytest.mark.parametrize("tile_size", [7, 64, 256])
def test_matches_detectron_nms(rng, thresh, tile_size):
    for trial in range(3):
        n = int(rng.integers(1, 400 if tile_size > 7 else 60))  # 7-box tiles: up to 9 of them (eager: slow)
        boxes = clustered_boxes(rng, n)
        scores = rng.permutation(n).astype(np.float32) / n  # distinct scores: order is defined
        want = ref.nms(np.hstack([boxes, scores[:, None]]), thresh)
        got = run_nms(boxes, scores, thresh, max_out=n, tile_size=tile_size)
        np.testing.assert_array_equal(got, want)


def test_equal_iou_is_suppressed_unlike_tensorflow():
    # IoU of these two is exactly 0.5 with +1 areas: 10x10 box and its 10x5 upper half.
    boxes = np.array([[0, 0, 9, 9], [0, 0, 9, 4]], np.float32)
    scores = np.array([0.9, 0.8], np.float32)
    assert list(run_nms(boxes, scores, 0.5, 10)) == [0]
    assert list(ref.nms(np.hstack([boxes, scores[:, None]]), 0.5)) == [0]
    tf_keep = tf.image.non_max_suppression(boxes[:, [1, 0, 3, 2]], scores, 10, iou_threshold=0.5).numpy()
    assert list(tf_keep) == [0, 1]  # TensorFlow's kernel keeps both: this is why we have our own


def test_threshold_compared_in_float64():
    # IoU = 7000/10000 is float32(0.7), which is below the double 0.7: Detectron keeps both boxes.
    boxes = np.array([[0, 0, 99, 99], [0, 0, 99, 69]], np.float32)
    scores = np.array([0.9, 0.8], np.float32)
    assert list(ref.nms(np.hstack([boxes, scores[:, None]]), 0.7)) == [0, 1]
    assert list(run_nms(boxes, scores, 0.7, 10)) == [0, 1]
    assert list(run_nms(boxes, scores, 0.69, 10)) == [0]


@pytest.mark.parametrize("thresh", [0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.8, 1 / 3])
def test_float32_comparison_is_the_float64_one(thresh):
    """Every float32 IoU next to a threshold compares as Cython's float64 `ovr >= thresh` does."""
    near = np.float32(thresh)
    values = [near]
    for _ in range(3):
        values = [np.nextafter(values[0], np.float32(0)), *values, np.nextafter(values[-1], np.float32(1))]
    iou = np.array(values, np.float32)
    want = iou.astype(np.float64) >= thresh
    np.testing.assert_array_equal(nms_ops._suppresses(tf.constant(iou), thresh).numpy(), want)
    # A threshold given as a tensor takes the float64 comparison itself: the same answers.
    np.testing.assert_array_equal(nms_ops._suppresses(tf.constant(iou), tf.constant(thresh, tf.float64)).numpy(), want)


def test_float32_ious_are_never_copied_to_float64():
    """With a Python threshold the comparison stays in float32 (a float64 copy of every IoU cost 0.68 s of
    RetinaNet's NMS on 2 cores): nothing in the traced NMS, its loop bodies included, is float64."""
    boxes = tf.TensorSpec([1, None, 4], tf.float32)
    scores = tf.TensorSpec([1, None], tf.float32)
    graph = tf.function(lambda b, s: nms_ops.batched_nms(b, s, 0.7, 10)).get_concrete_function(boxes, scores).graph
    graph_def = graph.as_graph_def()
    assert len(graph_def.library.function) > 0  # the tiles' loop: its body is a function of the library
    assert "DT_DOUBLE" not in str(graph_def)


def test_max_output_and_padding(rng):
    boxes = clustered_boxes(rng, 200)
    scores = rng.permutation(200).astype(np.float32)
    want = ref.nms(np.hstack([boxes, scores[:, None]]), 0.5)
    idx, num = nms_ops.batched_nms(tf.constant(boxes[None]), tf.constant(scores[None]), 0.5, 5)
    assert num.numpy()[0] == min(5, len(want))
    np.testing.assert_array_equal(idx.numpy()[0], want[:5])
    idx, num = nms_ops.batched_nms(tf.constant(boxes[None]), tf.constant(scores[None]), 0.5, 500)
    assert idx.shape == (1, 500) and num.numpy()[0] == len(want)
    assert np.all(idx.numpy()[0, len(want):] == 0)


def test_batch_rows_and_invalid_entries_are_independent(rng):
    rows = [clustered_boxes(rng, 150) for _ in range(3)]
    scores = [rng.permutation(150).astype(np.float32) for _ in range(3)]
    valid = rng.uniform(size=(3, 150)) > 0.3
    idx, num = nms_ops.batched_nms(tf.constant(np.stack(rows)), tf.constant(np.stack(scores)), 0.6, 150, valid=valid)
    for r in range(3):
        keep_in = np.where(valid[r])[0]
        want = keep_in[ref.nms(np.hstack([rows[r][keep_in], scores[r][keep_in, None]]), 0.6)]
        np.testing.assert_array_equal(idx.numpy()[r, : num.numpy()[r]], want)


def test_empty_and_all_invalid():
    idx, num = nms_ops.batched_nms(tf.zeros([2, 0, 4]), tf.zeros([2, 0]), 0.5, 4)
    assert idx.shape == (2, 4) and list(num.numpy()) == [0, 0]
    idx, num = nms_ops.batched_nms(tf.ones([1, 3, 4]), tf.ones([1, 3]), 0.5, 4, valid=tf.zeros([1, 3], tf.bool))
    assert list(num.numpy()) == [0]


def test_nms_in_tf_function_with_unknown_sizes(rng):
    fn = tf.function(
        lambda b, s: nms_ops.batched_nms(b, s, 0.5, 20),
        input_signature=[tf.TensorSpec([None, None, 4]), tf.TensorSpec([None, None])],
    )
    boxes = clustered_boxes(rng, 90).astype(np.float32)
    scores = rng.permutation(90).astype(np.float32)
    want = ref.nms(np.hstack([boxes, scores[:, None]]), 0.5)[:20]
    idx, num = fn(boxes[None], scores[None])
    np.testing.assert_array_equal(idx.numpy()[0, : num.numpy()[0]], want)


@pytest.mark.parametrize("agnostic", [False, True])
def test_per_class_nms_matches_detectron(rng, agnostic):
    num_rois, num_classes = 300, 6
    base = clustered_boxes(rng, num_rois)
    boxes = base[:, None, :] + (0 if agnostic else rng.normal(0, 3, (num_rois, num_classes, 4)))
    boxes = np.round(boxes.astype(np.float32) * 4) / 4
    logits = rng.normal(0, 2, (num_rois, num_classes))
    scores = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    want = detectron_detections(scores, np.broadcast_to(boxes, (num_rois, num_classes, 4)), 0.05, 0.5, 100)
    got_boxes, got_scores, got_classes, num = nms_ops.per_class_nms(
        tf.constant(boxes if not agnostic else base[:, None, :].astype(np.float32)),
        tf.constant(scores), 0.05, 0.5, 100,
    )
    num = int(num)
    assert num == min(100, len(want))
    np.testing.assert_array_equal(got_scores.numpy()[:num], [r[0] for r in want[:num]])
    np.testing.assert_array_equal(got_classes.numpy()[:num], [r[1] for r in want[:num]])
    np.testing.assert_array_equal(got_boxes.numpy()[:num], np.array([r[2] for r in want[:num]]))
    assert np.all(got_scores.numpy()[num:] == 0) and np.all(got_classes.numpy()[num:] == 0)


def test_per_class_nms_no_detection():
    scores = np.full((10, 4), 0.01, np.float32)
    scores[:, 0] = 0.97
    boxes, scores_out, classes, num = nms_ops.per_class_nms(tf.ones([10, 4, 4]), tf.constant(scores), 0.05, 0.5, 100)
    assert int(num) == 0 and boxes.shape == (100, 4) and not np.any(classes.numpy())


@pytest.mark.parametrize("tile_size", [5, 64, 256])
@pytest.mark.parametrize("dominant", [False, True])
def test_grouped_nms_matches_detectron_per_class(rng, tile_size, dominant):
    """grouped_nms (RetinaNet's candidates: one class each, all classes in one pass) against Detectron's NMS
    per class on the numpy reference, then the best over classes; with a class holding most candidates,
    invalid candidates, tied scores, and groups spanning tile borders (5-box tiles)."""
    num, classes = (120 if tile_size == 5 else 500), 7
    boxes = clustered_boxes(rng, num).astype(np.float32)
    groups = rng.integers(0, classes, num)
    if dominant:
        groups[rng.random(num) < 0.8] = 3
    scores = (rng.integers(1, num // 2, num) / num).astype(np.float32)  # many exact ties
    valid = rng.random(num) < 0.9
    limit = 40
    idx, count = nms_ops.grouped_nms(
        tf.constant(boxes), tf.constant(scores), tf.constant(groups, tf.int32), tf.constant(valid), 0.5, limit,
        tile_size=tile_size,
    )
    # Room for every candidate: all the kept ones, then zeros.
    all_idx, all_count = nms_ops.grouped_nms(
        tf.constant(boxes), tf.constant(scores), tf.constant(groups, tf.int32), tf.constant(valid), 0.5, num,
        tile_size=tile_size,
    )
    got = idx.numpy()[: int(count)]
    want = []
    for group in range(classes):
        members = np.flatnonzero(valid & (groups == group))
        ordered = members[np.argsort(-scores[members], kind="stable")]  # ties: lower index first
        dets = np.hstack([boxes[ordered], scores[ordered, None]])
        want += [(group, rank, ordered[k]) for rank, k in enumerate(ref.nms(dets, 0.5))] if len(ordered) else []
    want.sort(key=lambda r: (-scores[r[2]], r[0], r[1]))  # by score; ties: lower class, then the class's order
    assert list(got) == [r[2] for r in want[:limit]]
    assert np.all(idx.numpy()[int(count):] == 0)
    assert limit < int(all_count) < num and list(all_idx.numpy()[: int(all_count)]) == [r[2] for r in want]
    assert all_idx.shape == (num,) and np.all(all_idx.numpy()[int(all_count):] == 0)
