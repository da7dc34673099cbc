"""Box coding, clipping and IoU against numpy implementations of Detectron's definitions."""

import numpy as np
import tensorflow as tf

from support import numpy_reference as ref
from tfdet.ops import boxes as box_ops


def random_boxes(rng, n, size=500.0):
    xy = rng.uniform(-50, size, (n, 2))
    wh = rng.uniform(0, 200, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1)


def test_decode_matches_detectron(rng):
    boxes = random_boxes(rng, 300)
    deltas = rng.normal(0, 2, (300, 4 * 5))
    deltas[:7, 2::4] = 9.0  # beyond BBOX_XFORM_CLIP: must be clipped
    weights = (10.0, 10.0, 5.0, 5.0)
    want = ref.bbox_transform(boxes, deltas, weights)
    got = box_ops.decode_boxes(boxes[:, None, :], tf.reshape(deltas, [300, 5, 4]), weights)
    np.testing.assert_allclose(tf.reshape(got, [300, 20]).numpy(), want, rtol=1e-12, atol=1e-9)


def test_decode_float32_close_to_float64(rng):
    boxes = random_boxes(rng, 200)
    deltas = rng.normal(0, 0.5, (200, 4))
    want = ref.bbox_transform(boxes, deltas)
    got = box_ops.decode_boxes(tf.constant(boxes, tf.float32), tf.constant(deltas, tf.float32))
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=2e-3)


def test_encode_matches_detectron_and_inverts_decode(rng):
    boxes = random_boxes(rng, 200)
    gt = random_boxes(rng, 200)
    weights = (10.0, 10.0, 5.0, 5.0)
    want = ref.bbox_transform_inv(boxes, gt, weights)
    got = box_ops.encode_boxes(tf.constant(boxes), tf.constant(gt), weights).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    back = box_ops.decode_boxes(tf.constant(boxes), tf.constant(got), weights, scale_clip=np.inf)
    np.testing.assert_allclose(back.numpy(), gt, atol=1e-9)


def test_clip_boxes_to_image_minus_one(rng):
    boxes = random_boxes(rng, 100, size=700)
    got = box_ops.clip_boxes(tf.constant(boxes), 480, 640).numpy()
    np.testing.assert_array_equal(got, ref.clip_tiled(boxes, 480, 640))
    assert got[:, [0, 2]].max() <= 639 and got[:, [1, 3]].max() <= 479 and got.min() >= 0


def test_clip_boxes_per_image_sizes():
    boxes = tf.constant([[[0.0, 0, 900, 900]], [[-5.0, -5, 900, 900]]])
    got = box_ops.clip_boxes(boxes, tf.constant([100.0, 200.0]), tf.constant([300.0, 50.0])).numpy()
    np.testing.assert_array_equal(got[:, 0], [[0, 0, 299, 99], [0, 0, 49, 199]])


def test_iou_plus_one_areas_hand_computed():
    a = tf.constant([[0.0, 0, 9, 9]])  # 10x10 = 100 px
    b = tf.constant([[0.0, 0, 9, 4], [5.0, 5, 14, 14], [10.0, 10, 20, 20], [0.0, 0, 0, 0]])
    got = box_ops.pairwise_iou(a, b).numpy()
    np.testing.assert_allclose(got, [[0.5, 25 / 175, 0.0, 1 / 100]], rtol=1e-6)


def test_areas_and_xywh_conversions():
    boxes = tf.constant([[10.0, 20, 10, 20], [0.0, 0, 99.5, 49.5]])
    np.testing.assert_allclose(box_ops.box_areas(boxes).numpy(), [1.0, 100.5 * 50.5])
    xywh = box_ops.xyxy_to_xywh(boxes)
    np.testing.assert_allclose(xywh.numpy(), [[10, 20, 1, 1], [0, 0, 100.5, 50.5]])
    np.testing.assert_allclose(box_ops.xywh_to_xyxy(xywh).numpy(), boxes.numpy())
    # Detectron's xywh_to_xyxy never makes x2 < x1 for zero sizes.
    np.testing.assert_allclose(box_ops.xywh_to_xyxy(tf.constant([[5.0, 6, 0, 0]])).numpy(), [[5, 6, 5, 6]])


def test_large_boxes_mask_is_strict_with_plus_one():
    boxes = tf.constant(
        [[0.0, 0, 4, 4], [0.0, 0, 5, 9], [0.0, 0, 9, 5], [3.0, 3, 2, 9], [0.0, 0, 4, 9], [0.0, 0, 9, 4]]
    )
    # Widths 5, 6, 10, 0, 5, 10 and heights 5, 10, 6, 7, 10, 5: Detectron keeps w > min and h > min, so a box
    # exactly min_size wide (or high) goes, however large its other side.
    assert box_ops.large_boxes_mask(boxes, 5).numpy().tolist() == [False, True, True, False, False, False]


def test_empty_inputs():
    empty = tf.zeros([0, 4])
    assert box_ops.decode_boxes(empty, empty).shape == (0, 4)
    assert box_ops.pairwise_iou(empty, tf.ones([3, 4])).shape == (0, 3)
