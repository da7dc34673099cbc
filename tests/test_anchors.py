"""Anchors against Detectron's published values and a loop implementation of its algorithm."""

import numpy as np
import pytest
import tensorflow as tf

from support import numpy_reference as ref
from tfdet.ops import anchors as anchor_ops

# What Detectron's generate_anchors.py returns (its comment shows the MATLAB, 1-based table).
PUBLISHED_STRIDE16 = np.array(
    [
        [-84, -40, 99, 55],
        [-176, -88, 191, 103],
        [-360, -184, 375, 199],
        [-56, -56, 71, 71],
        [-120, -120, 135, 135],
        [-248, -248, 263, 263],
        [-36, -80, 51, 95],
        [-80, -168, 95, 183],
        [-168, -344, 183, 359],
    ],
    dtype=np.float64,
)
PUBLISHED_FPN_P2 = np.array([[-22, -10, 25, 13], [-14, -14, 17, 17], [-10, -22, 13, 25]], dtype=np.float64)


def test_published_stride16_table():
    got = anchor_ops.generate_anchors(16, (128, 256, 512), (0.5, 1, 2))
    np.testing.assert_array_equal(got, PUBLISHED_STRIDE16)


def test_published_fpn_p2_cell_anchors():
    np.testing.assert_array_equal(anchor_ops.generate_anchors(4, (32,), (0.5, 1, 2)), PUBLISHED_FPN_P2)
    np.testing.assert_array_equal(anchor_ops.fpn_level_anchors(2, 2, 32, (0.5, 1, 2)), PUBLISHED_FPN_P2)


@pytest.mark.parametrize(
    "stride,sizes,ratios",
    [
        (16, (32, 64, 128, 256, 512), (0.5, 1, 2)),  # C4 zoo RPN: 15 anchors, ratio-major
        (8, (32,), (0.5, 1, 2)),
        (32, (256,), (0.5, 1, 2)),
        (64, (512,), (0.5, 1, 2)),
        (8, (32, 40.3, 50.8), (1.0, 2.0, 0.5)),  # RetinaNet-style octave sizes
        (16, (100,), (0.25, 3.0)),
    ],
)
def test_matches_loop_reference(stride, sizes, ratios):
    np.testing.assert_allclose(
        anchor_ops.generate_anchors(stride, sizes, ratios), ref.anchors(stride, sizes, ratios), rtol=0, atol=1e-9
    )


def test_fpn_levels_sizes_double():
    for level in range(2, 7):
        got = anchor_ops.fpn_level_anchors(level, 2, 32, (1.0,))
        side = got[0, 2] - got[0, 0] + 1
        assert side == 32 * 2 ** (level - 2)


def test_shifted_anchors_order_is_h_w_a():
    cell = anchor_ops.generate_anchors(16, (32, 64), (0.5, 1, 2))
    height, width = 3, 5
    got = anchor_ops.shifted_anchors(cell, 16, height, width).numpy()
    assert got.shape == (height * width * len(cell), 4)
    for y in range(height):
        for x in range(width):
            for a in range(len(cell)):
                row = (y * width + x) * len(cell) + a
                np.testing.assert_array_equal(got[row], cell[a] + [16 * x, 16 * y, 16 * x, 16 * y])


def test_shifted_anchors_dynamic_shape_in_tf_function():
    cell = anchor_ops.generate_anchors(8, (32,), (0.5, 1, 2))
    fn = tf.function(
        lambda h, w: anchor_ops.shifted_anchors(cell, 8, h, w),
        input_signature=[tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.int32)],
    )
    assert fn(tf.constant(4), tf.constant(7)).shape == (4 * 7 * 3, 4)
    assert fn(tf.constant(1), tf.constant(1)).shape == (3, 4)
    assert fn(tf.constant(0), tf.constant(5)).shape == (0, 4)
