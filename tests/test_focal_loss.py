"""RetinaNet losses vs hand-computed values and numpy transcriptions of Caffe2's focal and select-smooth-L1 ops
(their forward and hand-written gradient kernels, NCHW)."""

import math

import numpy as np
import pytest
import tensorflow as tf

from support import numpy_retinanet_training as ref
from tfdet.ops.focal_loss import select_smooth_l1_loss, sigmoid_focal_loss, softmax_focal_loss

N, A, H, W = 2, 3, 3, 4


def nhwc(x):
    return np.ascontiguousarray(np.transpose(x, (0, 2, 3, 1)))


def nchw(x):
    return np.transpose(x, (0, 3, 1, 2))


def random_labels(rng, num_classes):
    """(N, A, H, W) labels with ignored (-1), background (0) and every class."""
    return rng.integers(-1, num_classes, size=(N, A, H, W)).astype(np.int32)


def value_and_gradient(function, outputs, *args, **kwargs):
    outputs = tf.constant(outputs)
    with tf.GradientTape() as tape:
        tape.watch(outputs)
        loss = function(outputs, *args, **kwargs)
    return loss.numpy(), tape.gradient(loss, outputs).numpy()


@pytest.mark.parametrize("gamma, alpha", [(2.0, 0.25), (0.0, 0.5), (1.5, 0.75)])
def test_sigmoid_focal_loss_and_gradient_equal_caffe2s(rng, gamma, alpha):
    classes = 4
    logits = rng.normal(0.0, 3.0, size=(N, A * classes, H, W)).astype(np.float32)
    labels = random_labels(rng, classes + 1)
    fg_num = 7.0
    expected, expected_grad = ref.sigmoid_focal_loss(logits, labels, fg_num, gamma, alpha, classes)
    loss, grad = value_and_gradient(sigmoid_focal_loss, nhwc(logits), nhwc(labels), fg_num, gamma, alpha)
    assert loss == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(nchw(grad), expected_grad, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("gamma, alpha", [(2.0, 0.25), (0.0, 0.5), (0.5, 0.25)])
def test_softmax_focal_loss_and_gradient_equal_caffe2s(rng, gamma, alpha):
    classes = 5  # NUM_CLASSES, background included
    logits = rng.normal(0.0, 3.0, size=(N, A * classes, H, W)).astype(np.float32)
    labels = random_labels(rng, classes)
    fg_num = 9.0
    expected, expected_grad = ref.softmax_focal_loss(logits, labels, fg_num, gamma, alpha, classes)
    loss, grad = value_and_gradient(softmax_focal_loss, nhwc(logits), nhwc(labels), fg_num, gamma, alpha)
    assert loss == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(nchw(grad), expected_grad, rtol=1e-4, atol=1e-7)


def test_sigmoid_focal_loss_by_hand():
    """One anchor, two classes, logits 0 and log 3 (p = 1/2, 3/4), fg_num 2."""
    logits = np.array([[[[0.0, math.log(3.0)]]]], np.float32)
    positive = 0.25 * (0.5**2) * math.log(2.0)  # label 1: channel 0 positive
    negative = 0.75 * (0.75**2) * math.log(4.0)  # channel 1 negative: -(1-alpha) p**2 log(1 - p)
    loss = sigmoid_focal_loss(logits, np.array([[[[1]]]]), 2.0)
    assert loss.numpy() == pytest.approx((positive + negative) / 2.0, rel=1e-6)
    background = 0.75 * (0.5**2) * math.log(2.0) + negative
    assert sigmoid_focal_loss(logits, np.array([[[[0]]]]), 2.0).numpy() == pytest.approx(background / 2, rel=1e-6)
    assert sigmoid_focal_loss(logits, np.array([[[[-1]]]]), 2.0).numpy() == 0.0


def test_gamma_0_alpha_half_is_half_the_cross_entropy(rng):
    classes = 3
    logits = rng.normal(0.0, 2.0, size=(N, H, W, A * classes)).astype(np.float32)
    labels = nhwc(random_labels(rng, classes + 1))
    target = (labels[..., None] == np.arange(1, classes + 1)).astype(np.float32)
    counted = np.repeat(labels[..., None] >= 0, classes, axis=-1)
    bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=target, logits=logits.reshape(N, H, W, A, classes)).numpy()
    loss = sigmoid_focal_loss(logits, labels, 5.0, gamma=0.0, alpha=0.5)
    assert loss.numpy() == pytest.approx(0.5 * bce[counted].sum() / 5.0, rel=1e-5)

    logits = rng.normal(0.0, 2.0, size=(N, H, W, A * (classes + 1))).astype(np.float32)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=np.maximum(labels, 0), logits=logits.reshape(N, H, W, A, classes + 1)
    ).numpy()
    loss = softmax_focal_loss(logits, labels, 5.0, gamma=0.0, alpha=0.5)
    assert loss.numpy() == pytest.approx(0.5 * ce[labels >= 0].sum() / 5.0, rel=1e-5)


def test_extreme_logits_give_finite_losses_and_gradients():
    logits = np.array([[[[-200.0, 200.0, 90.0, -90.0]]]], np.float32)  # one anchor
    for function, label in [(sigmoid_focal_loss, 2), (sigmoid_focal_loss, 0), (softmax_focal_loss, 1)]:
        for gamma in (0.0, 0.5, 2.0):
            loss, grad = value_and_gradient(function, logits, np.array([[[[label]]]]), 1.0, gamma, 0.25)
            assert np.isfinite(loss) and np.all(np.isfinite(grad))
    # A confident wrong positive costs its whole logit: -alpha log(sigmoid(-200)) = 0.25 * 200 (no FLT_MIN clamp).
    loss = sigmoid_focal_loss(logits[..., :1], np.array([[[[1]]]]), 1.0, 2.0, 0.25)
    assert loss.numpy() == pytest.approx(0.25 * 200.0, rel=1e-6)


def test_normalizer_below_one_counts_as_one():
    logits = np.zeros((1, 1, 1, 2), np.float32)
    labels = np.array([[[[1]]]])
    assert sigmoid_focal_loss(logits, labels, 0.0).numpy() == sigmoid_focal_loss(logits, labels, 1.0).numpy()


def detectron_locations(labels, class_specific, num_classes):
    """Detectron's retnet_roi_fg_bbox_locs [image, channel, y, x] of the label > 0 anchors (N, A, H, W)."""
    loc_stride = 4 * (num_classes - 1 if class_specific else 1)
    image, anchor, y, x = np.nonzero(labels > 0)
    class_offset = 4 * (labels[image, anchor, y, x] - 1) if class_specific else 0
    return np.stack([image, anchor * loc_stride + class_offset, y, x], axis=1).astype(np.float32)


@pytest.mark.parametrize("class_specific", [False, True])
def test_select_smooth_l1_loss_and_gradient_equal_caffe2s(rng, class_specific):
    num_classes = 4
    per_anchor = 4 * (num_classes - 1) if class_specific else 4
    bbox_pred = rng.normal(0.0, 0.2, size=(N, A * per_anchor, H, W)).astype(np.float32)
    labels = random_labels(rng, num_classes)
    targets = rng.normal(0.0, 0.2, size=(N, H, W, A, 4)).astype(np.float32)
    locs = detectron_locations(labels, class_specific, num_classes)
    image, channel, y, x = locs.astype(int).T
    roi_targets = targets[image, y, x, channel // per_anchor]
    beta, fg_num, weight = 0.11, 6.0, 0.5
    expected, expected_grad = ref.select_smooth_l1_loss(bbox_pred, roi_targets, locs, fg_num, beta, scale=weight)
    loss, grad = value_and_gradient(
        select_smooth_l1_loss, nhwc(bbox_pred), targets, nhwc(labels), fg_num, beta, class_specific, weight
    )
    difference = np.stack([bbox_pred[image, channel + j, y, x] for j in range(4)], axis=1) - roi_targets
    assert len(locs) > 5 and (np.abs(difference) < beta).any() and (np.abs(difference) >= beta).any()
    assert loss == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(nchw(grad), expected_grad, rtol=1e-5, atol=1e-7)


def test_select_smooth_l1_by_hand():
    """Two anchors (A = 2), the second positive: |0.05| < beta (quadratic) and |0.5| (linear) on its channels."""
    bbox_pred = np.array([[[[9.0, 9.0, 9.0, 9.0, 0.05, -0.5, 0.0, 0.0]]]], np.float32)
    targets = np.zeros((1, 1, 1, 2, 4), np.float32)
    labels = np.array([[[[0, 3]]]])
    beta = 0.11
    expected = (0.5 * 0.05**2 / beta + (0.5 - 0.5 * beta)) / 4.0
    loss = select_smooth_l1_loss(bbox_pred, targets, labels, 4.0, beta, weight=2.0)
    assert loss.numpy() == pytest.approx(2.0 * expected, rel=1e-6)
    assert select_smooth_l1_loss(bbox_pred, targets, -np.ones_like(labels), 4.0, beta).numpy() == 0.0
