"""FPN level assignment against a hand-computed table (Detectron's +1 areas) and multilevel RoIAlign
against the single-level numpy reference run on each RoI's own level, in input order."""

import numpy as np
import pytest
import tensorflow as tf

from support.numpy_roi_align import FLOAT32_TOL, GRADIENT_TOL, assert_close, reference_roi_align
from tfdet.ops.fpn_levels import map_rois_to_fpn_levels, multilevel_roi_align

# box -> level for k_min=2, k_max=5, canonical 224 / level 4; side = x2 - x1 + 1 (Detectron's boxes_area)
LEVEL_TABLE = [
    ([0.0, 0.0, 223.0, 223.0], 4),  # side 224: log2(1) = 0
    ([10.0, 20.0, 233.0, 243.0], 4),  # side 224, anywhere
    ([0.0, 0.0, 222.0, 222.0], 3),  # side 223: just below 224
    ([0.0, 0.0, 111.0, 111.0], 3),  # side 112
    ([0.0, 0.0, 110.0, 110.0], 2),  # side 111
    ([0.0, 0.0, 447.0, 447.0], 5),  # side 448
    ([0.0, 0.0, 447.0, 111.0], 4),  # 448 x 112: sqrt = 224
    ([5.0, 5.0, 5.0, 5.0], 2),  # one pixel: 4 + log2(1/224) = -3.8 -> k_min
    ([0.0, 0.0, 55.0, 55.0], 2),  # side 56: exactly level 2
    ([0.0, 0.0, 1999.0, 1999.0], 5),  # side 2000: level 7 -> k_max
    ([10.0, 10.0, 5.0, 20.0], 2),  # negative area counts as 0 -> k_min
]


def test_level_table():
    boxes = tf.constant([box for box, _ in LEVEL_TABLE], tf.float32)
    levels = map_rois_to_fpn_levels(boxes, 2, 5)
    assert levels.dtype == tf.int32
    np.testing.assert_array_equal(levels.numpy(), [level for _, level in LEVEL_TABLE])


def test_level_range_and_canonical_arguments():
    boxes = tf.constant([[0.0, 0.0, 223.0, 223.0], [0.0, 0.0, 1999.0, 1999.0], [0.0, 0.0, 9.0, 9.0]])
    np.testing.assert_array_equal(map_rois_to_fpn_levels(boxes, 2, 7).numpy(), [4, 7, 2])
    np.testing.assert_array_equal(map_rois_to_fpn_levels(boxes, 3, 4).numpy(), [4, 4, 3])
    np.testing.assert_array_equal(map_rois_to_fpn_levels(boxes, 1, 9, 112, 3).numpy(), [4, 7, 1])


def detectron_levels(boxes, k_min, k_max):
    """Detectron's map_rois_to_fpn_levels in numpy (boxes_area with +1 widths)."""
    areas = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    levels = np.floor(4 + np.log2(np.sqrt(areas) / 224 + 1e-6))
    return np.clip(levels, k_min, k_max).astype(np.int32)


IMAGE_HEIGHT, IMAGE_WIDTH = 96, 128
LEVELS = (2, 3, 4, 5)


def pyramid_case(rng, num_rois=32, num_images=2, channels=3):
    """Features for levels 2..5 of a 96 x 128 batch and boxes of every level (some partly outside)."""
    features = [rng.standard_normal((num_images, IMAGE_HEIGHT // 2 ** k, IMAGE_WIDTH // 2 ** k, channels))
                for k in LEVELS]
    sides = np.exp(rng.uniform(np.log(8.0), np.log(700.0), size=(num_rois, 1))) * rng.uniform(
        0.5, 2.0, size=(num_rois, 2))
    centres = rng.uniform(-0.2, 1.2, size=(num_rois, 2)) * [IMAGE_WIDTH, IMAGE_HEIGHT]
    boxes = np.concatenate([centres - sides / 2, centres + sides / 2], axis=1)
    return features, boxes, rng.integers(0, num_images, size=num_rois).astype(np.int32)


def reference_multilevel(features, boxes, box_indices, output_size, sampling_ratio):
    """Each RoI pooled by the single-level reference from its own level, rows in input order."""
    levels = detectron_levels(boxes, LEVELS[0], LEVELS[-1])
    rows = [reference_roi_align(features[level - LEVELS[0]], box[None], [image], output_size,
                                0.5 ** level, sampling_ratio)[0]
            for box, image, level in zip(boxes, box_indices, levels)]
    return np.stack(rows), levels


def run_multilevel(features, boxes, box_indices, output_size, sampling_ratio):
    """multilevel_roi_align on float32 copies of numpy inputs, as a numpy array."""
    return multilevel_roi_align([tf.constant(f, tf.float32) for f in features],
                                tf.constant(boxes, tf.float32), tf.constant(box_indices), output_size,
                                sampling_ratio, LEVELS[0], LEVELS[-1]).numpy()


@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_multilevel_matches_reference_in_input_order(rng, sampling_ratio):
    features, boxes, box_indices = pyramid_case(rng)
    expected, levels = reference_multilevel(features, boxes, box_indices, (3, 4), sampling_ratio)
    assert set(levels) == set(LEVELS)
    tf_levels = map_rois_to_fpn_levels(tf.constant(boxes, tf.float32), 2, 5)
    np.testing.assert_array_equal(tf_levels.numpy(), levels)
    assert_close(run_multilevel(features, boxes, box_indices, (3, 4), sampling_ratio), expected, FLOAT32_TOL)


@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_multilevel_tf_function_unknown_rois(rng, sampling_ratio):
    features, boxes, box_indices = pyramid_case(rng, num_rois=12)
    signature = ([tf.TensorSpec([None, None, None, 3], tf.float32)] * len(LEVELS),
                 tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32))
    traced = tf.function(lambda f, b, i: multilevel_roi_align(f, b, i, 2, sampling_ratio, 2, 5),
                         input_signature=signature)
    feature_tensors = [tf.constant(f, tf.float32) for f in features]
    expected, _ = reference_multilevel(features, boxes, box_indices, (2, 2), sampling_ratio)
    assert_close(traced(feature_tensors, tf.constant(boxes, tf.float32), box_indices).numpy(), expected,
                 FLOAT32_TOL)
    assert traced(feature_tensors, tf.zeros([0, 4]), tf.zeros([0], tf.int32)).shape == (0, 2, 2, 3)


def test_multilevel_xla_matches_eager(rng):
    features, boxes, box_indices = pyramid_case(rng, num_rois=16)
    args = ([tf.constant(f, tf.float32) for f in features], tf.constant(boxes, tf.float32),
            tf.constant(box_indices))
    compiled = tf.function(lambda f, b, i: multilevel_roi_align(f, b, i, 2, 2, 2, 5, xla=True), jit_compile=True)
    assert_close(compiled(*args).numpy(), multilevel_roi_align(*args, 2, 2, 2, 5).numpy(), 1e-5)


def test_multilevel_gradient_reaches_each_level(rng):
    """Tape gradient of <pooled, cotangent> against a central difference along a random direction per
    level (exact up to rounding: the op is linear in the features)."""
    features = [tf.constant(rng.standard_normal((1, 32 // 2 ** k, 32 // 2 ** k, 1))) for k in LEVELS]
    boxes = tf.constant([[1.5, 2.0, 40.0, 30.0], [-50.0, -50.0, 100.0, 100.0], [-100.0, -100.0, 200.0, 200.0],
                         [-200.0, -200.0, 300.0, 300.0]], tf.float64)  # levels 2, 3, 4, 5
    cotangent = tf.constant(rng.standard_normal((4, 2, 2, 1)))

    def objective(feature_list):
        return tf.reduce_sum(multilevel_roi_align(feature_list, boxes, [0, 0, 0, 0], 2, 2, 2, 5) * cotangent)

    with tf.GradientTape() as tape:
        tape.watch(features)
        value = objective(features)
    gradients = tape.gradient(value, features)
    for level, gradient in enumerate(gradients):
        direction = tf.constant(rng.standard_normal(features[level].shape))
        plus, minus = ([f + sign * direction if i == level else f for i, f in enumerate(features)]
                       for sign in (1.0, -1.0))
        numeric = (objective(plus) - objective(minus)) / 2.0
        assert np.abs(gradient.numpy()).max() > 0.1
        assert_close(tf.reduce_sum(gradient * direction).numpy(), numeric.numpy(), GRADIENT_TOL)


def test_multilevel_crop_and_resize_gradient_matches_the_float64_composite(rng):
    """The float32 path (every level's lattices at once, one CropAndResize per level) against the float64
    gather composite: the same gradient for every level, boxes of every level, two images."""
    features, boxes, box_indices = pyramid_case(rng, num_rois=24)
    cotangent = rng.standard_normal((24, 3, 4, 3))

    def gradients(dtype):
        maps = [tf.constant(f, dtype) for f in features]
        with tf.GradientTape() as tape:
            tape.watch(maps)
            pooled = multilevel_roi_align(maps, tf.constant(boxes, dtype), box_indices, (3, 4), 2, 2, 5)
            value = tf.reduce_sum(pooled * tf.constant(cotangent, dtype))
        return [g.numpy() for g in tape.gradient(value, maps)]

    for level, (got, want) in enumerate(zip(gradients(tf.float32), gradients(tf.float64))):
        assert np.abs(want).max() > 0.1, level
        assert_close(got, want, 1e-4)


def test_wrong_number_of_levels_is_rejected():
    with pytest.raises(ValueError, match="levels 2..5"):
        multilevel_roi_align([tf.zeros([1, 8, 8, 1])] * 3, tf.zeros([1, 4]), [0], 2, 2, 2, 5)
