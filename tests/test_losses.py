"""Training losses vs values computed by hand from Detectron's Caffe2 loss definitions."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfdet.ops import losses


def sigmoid_ce(logit, label):
    return math.log(1.0 + math.exp(-logit)) if label == 1 else math.log(1.0 + math.exp(logit))


def softmax_ce(logits, label):
    return -logits[label] + math.log(sum(math.exp(v) for v in logits))


def test_smooth_l1_pieces():
    values = losses.smooth_l1(tf.constant([0.05, -0.5, 0.0, 2.0]), 1.0 / 9.0).numpy()
    np.testing.assert_allclose(values, [0.5 * 0.05**2 * 9, 0.5 - 0.5 / 9, 0.0, 2.0 - 0.5 / 9], rtol=1e-6)


def test_rpn_objectness_normalisations():
    logits = tf.constant([[0.0, 2.0, -1.0, 5.0], [1.0, -3.0, 0.5, 0.0]])
    labels = tf.constant([[1, 0, -1, 1], [-1, -1, 0, -1]])
    total = sigmoid_ce(0, 1) + sigmoid_ce(2, 0) + sigmoid_ce(5, 1) + sigmoid_ce(0.5, 0)
    # Single-level RPN: averaged over the 4 labelled anchors of the whole batch.
    assert losses.rpn_objectness_loss(logits, labels).numpy() == pytest.approx(total / 4, rel=1e-6)
    # FPN: RPN_BATCH_SIZE_PER_IM (here 8) x 2 images, whatever the number of labelled anchors.
    assert losses.rpn_objectness_loss(logits, labels, 8).numpy() == pytest.approx(total / 16, rel=1e-6)
    # Per-level FPN losses add up to the loss of the concatenated levels.
    by_level = sum(losses.rpn_objectness_loss(logits[:, s], labels[:, s], 8) for s in (slice(0, 1), slice(1, 4)))
    assert by_level.numpy() == pytest.approx(total / 16, rel=1e-6)
    assert losses.rpn_objectness_loss(logits, -tf.ones_like(labels)).numpy() == 0.0


def test_rpn_box_loss_divides_by_the_number_of_images():
    deltas = tf.constant([[[0.05, -0.5, 0.0, 2.0]], [[9.0, 9.0, 9.0, 9.0]]])
    targets = tf.zeros_like(deltas)
    inside = tf.constant([[[1.0, 1.0, 1.0, 1.0]], [[0.0, 0.0, 0.0, 0.0]]])
    outside = tf.constant([[[0.25] * 4], [[0.5] * 4]])
    per_element = 0.5 * 0.05**2 * 9 + (0.5 - 0.5 / 9) + (2.0 - 0.5 / 9)
    expected = 0.25 * per_element / 2
    assert losses.rpn_box_loss(deltas, targets, inside, outside).numpy() == pytest.approx(expected, rel=1e-6)


def test_fast_rcnn_losses_average_over_real_rois():
    logits = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0], [5.0, 5.0, 5.0]]
    labels = tf.constant([2, 0, -1])
    expected_cls = (softmax_ce(logits[0], 2) + softmax_ce(logits[1], 0)) / 2
    assert losses.fast_rcnn_class_loss(tf.constant(logits), labels).numpy() == pytest.approx(expected_cls, rel=1e-6)

    pred = tf.constant([[0.0] * 8 + [0.5, -2.0, 0.1, 0.0], [0.0] * 12, [7.0] * 12])
    targets = tf.constant([[0.0] * 8 + [0.0, 0.0, 0.3, 1.0], [0.0] * 12, [0.0] * 12])
    inside = tf.constant([[0.0] * 8 + [1.0] * 4, [0.0] * 12, [0.0] * 12])
    per_roi = 0.5 * 0.5**2 + (2.0 - 0.5) + 0.5 * 0.2**2 + (1.0 - 0.5)
    box = losses.fast_rcnn_box_loss(pred, targets, inside, inside, labels).numpy()
    assert box == pytest.approx(per_roi / 2, rel=1e-6)
    empty = losses.fast_rcnn_box_loss(pred, targets, inside, inside, -tf.ones_like(labels)).numpy()
    assert empty == 0.0 and losses.fast_rcnn_class_loss(tf.constant(logits), -tf.ones_like(labels)).numpy() == 0.0


def test_mask_loss_uses_the_class_channel_and_skips_ignored_cells():
    logits = np.zeros((2, 2, 2, 3), np.float32)
    logits[0, :, :, 2] = [[1.0, -2.0], [0.5, 3.0]]
    logits[0, :, :, 1] = 100.0  # another class's channel: must not matter
    logits[1, :, :, 1] = [[-1.0, 0.0], [2.0, 4.0]]
    targets = np.array([[[1, 0], [-1, 1]], [[0, -1], [1, -1]]], np.int32)
    classes = np.array([2, 1], np.int32)
    expected = (sigmoid_ce(1, 1) + sigmoid_ce(-2, 0) + sigmoid_ce(3, 1) + sigmoid_ce(-1, 0) + sigmoid_ce(2, 1)) / 5
    got = losses.mask_loss(logits, targets, classes, loss_weight=2.0).numpy()
    assert got == pytest.approx(2.0 * expected, rel=1e-6)
    agnostic = losses.mask_loss(logits[:1, ..., 2:], targets[:1], classes[:1], class_specific=False).numpy()
    assert agnostic == pytest.approx((sigmoid_ce(1, 1) + sigmoid_ce(-2, 0) + sigmoid_ce(3, 1)) / 3, rel=1e-6)
    assert losses.mask_loss(logits, -np.ones_like(targets), classes).numpy() == 0.0


def test_keypoint_loss_normalisers():
    heatmaps = np.zeros((1, 2, 2, 2), np.float32)  # one RoI, S = 2, K = 2, channels last
    heatmaps[0, :, :, 0] = [[1.0, 2.0], [0.0, -1.0]]
    heatmaps[0, :, :, 1] = [[0.5, 0.5], [3.0, 0.0]]
    indices = np.array([[3, 2]], np.int32)  # keypoint 0 at (y=1, x=1), keypoint 1 at (y=1, x=0)
    ce0 = softmax_ce([1.0, 2.0, 0.0, -1.0], 3)
    ce1 = softmax_ce([0.5, 0.5, 3.0, 0.0], 2)
    both = losses.keypoint_loss(heatmaps, indices, np.float32([[1, 1]])).numpy()
    assert both == pytest.approx((ce0 + ce1) / 2, rel=1e-6)
    one = losses.keypoint_loss(heatmaps, indices, np.float32([[0, 1]]), loss_weight=4.0).numpy()
    assert one == pytest.approx(4.0 * ce1, rel=1e-6)
    # NORMALIZE_BY_VISIBLE_KEYPOINTS False: the sum over visible keypoints / (IMS * BATCH * FG_FRACTION * K).
    fixed = losses.keypoint_loss(heatmaps, indices, np.float32([[1, 1]]), False, 1.0, 2, 4, 0.5).numpy()
    assert fixed == pytest.approx((ce0 + ce1) / (2 * 4 * 0.5 * 2), rel=1e-6)
    assert losses.keypoint_loss(heatmaps, indices, np.zeros((1, 2), np.float32)).numpy() == 0.0
    with pytest.raises(ValueError, match="needs ims_per_batch"):
        losses.keypoint_loss(heatmaps, indices, np.float32([[1, 1]]), normalize_by_visible=False)


def test_losses_run_per_replica_under_mirrored_strategy():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    logits = tf.constant([[0.0, 2.0, -1.0, 5.0]])
    labels = tf.constant([[1, 0, -1, 1]])

    @tf.function
    def step():
        return strategy.run(lambda: losses.rpn_objectness_loss(logits, labels, 8)
                            + losses.fast_rcnn_class_loss(logits, labels[0, :1]))

    expected = losses.rpn_objectness_loss(logits, labels, 8) + losses.fast_rcnn_class_loss(logits, labels[0, :1])
    assert float(step()) == pytest.approx(float(expected), rel=1e-6)
