"""tfdet.ops.roi_align against a float64 numpy loop written from Caffe2's RoIAlign kernel
(caffe2/operators/roi_align_op.cc; detectron2's ROIAlign_cpu.cpp for aligned=True; support/numpy_roi_align.py)."""

import numpy as np
import pytest
import tensorflow as tf

from support.numpy_roi_align import (
    FLOAT32_TOL,
    FLOAT64_TOL,
    GRADIENT_TOL,
    assert_close,
    reference_roi_align,
    reference_roi_align_gradient,
)
from tfdet.ops.fpn_levels import multilevel_roi_align
from tfdet.ops.roi_align import (
    _CROP_PARTS,
    crop_and_resize,
    gathered_crop_and_resize,
    portable_crop_and_resize,
    roi_align,
)


def adaptive_grids(boxes, output_size, spatial_scale, aligned):
    """The set of adaptive grid sizes (both axes) the kernel uses for these boxes."""
    offset = 0.5 if aligned else 0.0
    sides = (boxes[:, 2:] * spatial_scale - offset) - (boxes[:, :2] * spatial_scale - offset)
    if not aligned:
        sides = np.maximum(sides, 1.0)
    return set(np.ceil(sides / np.array(output_size)[::-1]).astype(int).ravel())


def random_case(rng, num_images=3, height=11, width=17, channels=5, num_rois=40, stride=4,
                max_side=120.0):
    """N(0, 1) features and boxes with centres around and beyond the image, sides in [0, max_side]."""
    features = rng.standard_normal((num_images, height, width, channels))
    image_size = np.array([width, height]) * stride
    centres = rng.uniform(-0.3, 1.3, size=(num_rois, 2)) * image_size
    sides = rng.uniform(0.0, max_side, size=(num_rois, 2))
    boxes = np.concatenate([centres - sides / 2, centres + sides / 2], axis=1)
    return features, boxes, rng.integers(0, num_images, size=num_rois).astype(np.int32)


def run_float32(features, boxes, box_indices, output_size, spatial_scale, sampling_ratio, aligned=False,
                xla=False):
    """roi_align on float32 copies of numpy inputs, as a numpy array (`xla`: the XLA-compatible ops)."""
    return roi_align(tf.constant(features, tf.float32), tf.constant(boxes, tf.float32),
                     tf.constant(box_indices, tf.int32), output_size, spatial_scale, sampling_ratio,
                     aligned, xla=xla).numpy()


@pytest.mark.parametrize("xla", [False, True])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [0, 1, 2, 3])
def test_matches_reference_on_random_boxes(rng, sampling_ratio, aligned, xla):
    features, boxes, box_indices = random_case(rng)
    output_size = (5, 4)
    expected = reference_roi_align(features, boxes, box_indices, output_size, 0.25, sampling_ratio, aligned)
    actual = run_float32(features, boxes, box_indices, output_size, 0.25, sampling_ratio, aligned, xla)
    assert_close(actual, expected, FLOAT32_TOL)
    if sampling_ratio == 0:
        assert {1, 2, 3, 4, 5} <= adaptive_grids(boxes, output_size, 0.25, aligned)


@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_float64_matches_reference_to_rounding(rng, sampling_ratio):
    features, boxes, box_indices = random_case(rng, num_rois=20)
    expected = reference_roi_align(features, boxes, box_indices, (3, 6), 0.25, sampling_ratio)
    actual = roi_align(tf.constant(features), tf.constant(boxes), box_indices, (3, 6), 0.25,
                       sampling_ratio).numpy()
    assert_close(actual, expected, FLOAT64_TOL)


EDGE_BOXES = np.array([
    [-100.0, -100.0, -60.0, -50.0],  # fully outside, above-left
    [200.0, 10.0, 260.0, 30.0],  # fully outside, right of the map
    [-20.0, -12.0, 30.0, 25.0],  # partly outside
    [30.0, 50.0, 70.0, 90.0],  # partly outside, bottom-right
    [12.0, 8.0, 12.0, 30.0],  # zero width
    [12.0, 8.0, 40.0, 8.0],  # zero height
    [12.0, 8.0, 12.0, 8.0],  # a point
    [-4.0, -4.0, 44.0, 68.0],  # exactly [-1, W] x [-1, H] in feature cells
    [0.0, 0.0, 43.9, 67.9],  # the whole map
    [30.0, 20.0, 25.0, 10.0],  # x2 < x1 and y2 < y1 (legacy: forced to 1x1)
])


@pytest.mark.parametrize("xla", [False, True])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_boxes_outside_and_degenerate(rng, sampling_ratio, aligned, xla):
    features = rng.standard_normal((1, 17, 11, 4))  # H=17, W=11 at stride 4: 44 x 68 input pixels
    boxes = EDGE_BOXES if not aligned else EDGE_BOXES[:-1]  # detectron2 rejects negative sizes
    box_indices = np.zeros(len(boxes), np.int32)
    expected = reference_roi_align(features, boxes, box_indices, (4, 3), 0.25, sampling_ratio, aligned)
    actual = run_float32(features, boxes, box_indices, (4, 3), 0.25, sampling_ratio, aligned, xla)
    assert_close(actual, expected, FLOAT32_TOL)
    assert np.all(actual[:2] == 0.0)


@pytest.mark.parametrize("xla", [False, True])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_one_by_one_feature_map(rng, sampling_ratio, aligned, xla):
    features = rng.standard_normal((2, 1, 1, 3))
    # [2, 2, 18, 18] at 1/16 puts the last sample of sampling ratio 2 exactly on the map's edge (1.0 = height):
    # Caffe2 keeps a sample at y == height (it skips y > height only)
    boxes = np.array([[0.0, 0.0, 16.0, 16.0], [-20.0, -8.0, 40.0, 20.0], [4.0, 4.0, 5.0, 9.0],
                      [-40.0, 0.0, -20.0, 16.0], [2.0, 2.0, 18.0, 18.0]])
    box_indices = np.array([0, 1, 1, 0, 1], np.int32)
    expected = reference_roi_align(features, boxes, box_indices, (2, 2), 1 / 16, sampling_ratio, aligned)
    actual = run_float32(features, boxes, box_indices, 2, 1 / 16, sampling_ratio, aligned, xla)
    assert_close(actual, expected, FLOAT32_TOL)


@pytest.mark.parametrize("xla", [False, True])
@pytest.mark.parametrize("sampling_ratio", [1, 2, 4])
def test_samples_exactly_on_the_maps_far_edge_count(rng, sampling_ratio, xla):
    """Boxes whose last sample lands exactly on x == width / y == height (kept by Caffe2, weight on the last
    pixel) and just past it (dropped), on a map larger than one cell."""
    features = rng.standard_normal((1, 5, 6, 2))
    grid = sampling_ratio
    # one bin per axis, spatial scale 1: samples at x1 + (i + 0.5) * (x2 - x1) / grid; the last is on the edge
    # when x1 + (grid - 0.5) / grid * (x2 - x1) == length
    def box_ending_at(edge_x, edge_y, past=0.0):
        x1, y1 = 2.0, 1.0
        x2 = x1 + (edge_x + past - x1) * grid / (grid - 0.5)
        y2 = y1 + (edge_y + past - y1) * grid / (grid - 0.5)
        return [x1, y1, x2, y2]

    boxes = np.array([box_ending_at(6.0, 5.0), box_ending_at(6.0, 5.0, past=0.01)])
    expected = reference_roi_align(features, boxes, [0, 0], (1, 1), 1.0, sampling_ratio)
    actual = run_float32(features, boxes, np.array([0, 0], np.int32), 1, 1.0, sampling_ratio, xla=xla)
    assert_close(actual, expected, FLOAT32_TOL)
    assert not np.allclose(expected[0], expected[1], atol=1e-3)  # the sample on the edge counts, the other not


@pytest.mark.parametrize("xla", [False, True])
@pytest.mark.parametrize("sampling_ratio", [1, 2, 4])
def test_samples_exactly_on_the_maps_near_edge_count(rng, sampling_ratio, xla):
    """A box whose first sample lands exactly on x == -1 / y == -1 (kept by Caffe2, which skips y < -1 only:
    the whole weight on the first pixel) and one whose first sample lies just before it (dropped)."""
    features = rng.standard_normal((1, 5, 6, 2))
    # One bin per axis, spatial scale 1, a box `sampling_ratio` wide: samples at x1 + 0.5, x1 + 1.5, ...
    width = float(sampling_ratio)
    boxes = np.array([[-1.5, -1.5, -1.5 + width, -1.5 + width], [-1.51, -1.51, -1.51 + width, -1.51 + width]])
    expected = reference_roi_align(features, boxes, [0, 0], (1, 1), 1.0, sampling_ratio)
    actual = run_float32(features, boxes, np.array([0, 0], np.int32), 1, 1.0, sampling_ratio, xla=xla)
    assert_close(actual, expected, FLOAT32_TOL)
    assert not np.allclose(expected[0], expected[1], atol=1e-3)  # the sample on the edge counts, the other not


@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_box_indices_select_the_image(rng, sampling_ratio):
    features = rng.standard_normal((2, 8, 8, 2))
    boxes = np.array([[3.0, 5.0, 20.0, 27.0]] * 2)
    forward = run_float32(features, boxes, np.array([0, 1]), (3, 3), 0.25, sampling_ratio)
    swapped = run_float32(features[::-1], boxes, np.array([1, 0]), (3, 3), 0.25, sampling_ratio)
    expected = reference_roi_align(features, boxes, [0, 1], (3, 3), 0.25, sampling_ratio)
    assert_close(forward, expected, FLOAT32_TOL)
    np.testing.assert_array_equal(forward, swapped)
    assert not np.allclose(forward[0], forward[1])


@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_no_rois_gives_empty_output(sampling_ratio):
    features = tf.zeros([2, 6, 7, 3])
    pooled = roi_align(features, tf.zeros([0, 4]), tf.zeros([0], tf.int32), (7, 5), 0.25, sampling_ratio)
    assert pooled.shape == (0, 7, 5, 3)


SIGNATURE = [tf.TensorSpec([None, None, None, None], tf.float32), tf.TensorSpec([None, 4], tf.float32),
             tf.TensorSpec([None], tf.int32)]


@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_tf_function_with_unknown_shapes(rng, sampling_ratio):
    features, boxes, box_indices = random_case(rng, num_rois=12)
    traced = tf.function(lambda f, b, i: roi_align(f, b, i, (3, 4), 0.25, sampling_ratio),
                         input_signature=SIGNATURE)
    assert traced.get_concrete_function().structured_outputs.shape.as_list() == [None, 3, 4, None]
    expected = reference_roi_align(features, boxes, box_indices, (3, 4), 0.25, sampling_ratio)
    actual = traced(tf.constant(features, tf.float32), tf.constant(boxes, tf.float32), box_indices).numpy()
    assert_close(actual, expected, FLOAT32_TOL)
    empty = traced(tf.zeros([1, 5, 5, 2]), tf.zeros([0, 4]), tf.zeros([0], tf.int32))
    assert empty.shape == (0, 3, 4, 2)


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_xla_matches_eager(rng, sampling_ratio, aligned):
    features, boxes, box_indices = random_case(rng, num_rois=16)
    args = (tf.constant(features, tf.float32), tf.constant(boxes, tf.float32), tf.constant(box_indices))
    compiled = tf.function(lambda f, b, i: roi_align(f, b, i, (4, 3), 0.25, sampling_ratio, aligned, xla=True),
                           jit_compile=True)
    eager = roi_align(*args, (4, 3), 0.25, sampling_ratio, aligned).numpy()  # CropAndResize when it can
    assert_close(compiled(*args).numpy(), eager, 1e-5)
    assert compiled(args[0], args[1][:0], args[2][:0]).shape == (0, 4, 3, 5)


@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_xla_gradient_matches_eager(rng, sampling_ratio):
    features, boxes, box_indices = random_case(rng, num_rois=16)
    cotangent = tf.constant(rng.standard_normal((16, 4, 3, 5)), tf.float32)

    def gradient(f, b, i, xla):
        with tf.GradientTape() as tape:
            tape.watch(f)
            objective = tf.reduce_sum(roi_align(f, b, i, (4, 3), 0.25, sampling_ratio, xla=xla) * cotangent)
        return tape.gradient(objective, f)

    args = (tf.constant(features, tf.float32), tf.constant(boxes, tf.float32), tf.constant(box_indices))
    compiled = tf.function(lambda f, b, i: gradient(f, b, i, xla=True), jit_compile=True)
    assert_close(compiled(*args).numpy(), gradient(*args, xla=False).numpy(), 1e-5)


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_gradient_matches_numeric(rng, sampling_ratio, aligned):
    features = tf.constant(rng.standard_normal((2, 4, 5, 1)))
    boxes = tf.constant([[1.3, 2.1, 14.7, 11.2], [-3.0, 5.5, 9.2, 19.0], [6.1, 0.4, 30.0, 9.9]], tf.float64)
    box_indices = tf.constant([1, 0, 1])
    pool = tf.function(lambda f: roi_align(f, boxes, box_indices, (2, 3), 0.25, sampling_ratio, aligned))
    theoretical, numeric = tf.test.compute_gradient(pool, [features])
    assert np.abs(theoretical[0]).max() > 0.1
    assert_close(theoretical[0], numeric[0], GRADIENT_TOL)


@pytest.mark.parametrize("aligned", [False, True])
def test_float32_gradient_of_many_overlapping_rois_matches_reference_and_repeats(rng, aligned):
    """Hundreds of overlapping RoIs on one small map: TF's CPU CropAndResize gradient shards the boxes over
    threads that lose each other's additions there; ours must be Caffe2's gradient, identically on every call."""
    features, boxes, box_indices = random_case(rng, num_images=2, height=12, width=14, channels=32, num_rois=400,
                                               max_side=40.0)
    cotangent = rng.standard_normal((400, 7, 7, 32))

    def gradient():
        feature_map = tf.constant(features, tf.float32)
        with tf.GradientTape() as tape:
            tape.watch(feature_map)
            pooled = roi_align(feature_map, tf.constant(boxes, tf.float32), box_indices, 7, 0.25, 2, aligned)
        return tape.gradient(pooled, feature_map, output_gradients=tf.constant(cotangent, tf.float32)).numpy()

    first, second = gradient(), gradient()
    np.testing.assert_array_equal(first, second)
    expected = reference_roi_align_gradient(features.shape, boxes, box_indices, cotangent, (7, 7), 0.25, 2, aligned)
    assert np.abs(expected).max() > 10.0  # many RoIs add into the same pixels
    assert_close(first, expected, 1e-3)


@pytest.mark.parametrize("crop_size", [(1, 1), (5, 3), (14, 14)])
def test_crop_and_resize_gradient_is_the_transpose_of_tfs_forward(rng, crop_size):
    """<CropAndResize(x), u> = <x, gradient(u)> with TF's own forward kernel, for boxes that overlap, leave
    the image (extrapolated samples) and are flipped (y1 > y2)."""
    image = tf.constant(rng.standard_normal((2, 9, 13, 32)), tf.float32)
    corners = rng.uniform(-0.3, 1.3, size=(400, 4))
    boxes, box_indices = tf.constant(corners, tf.float32), tf.constant(rng.integers(0, 2, 400), tf.int32)
    upstream = tf.constant(rng.standard_normal((400, *crop_size, 32)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(image)
        crops = crop_and_resize(image, boxes, box_indices, crop_size)
    gradient = tape.gradient(crops, image, output_gradients=upstream)
    np.testing.assert_array_equal(crops, tf.image.crop_and_resize(image, boxes, box_indices, crop_size))
    forward = np.sum(crops.numpy().astype(np.float64) * upstream.numpy())
    transposed = np.sum(image.numpy().astype(np.float64) * gradient.numpy())
    scale = np.linalg.norm(crops.numpy().astype(np.float64)) * np.linalg.norm(upstream.numpy())  # Cauchy-Schwarz
    assert abs(forward - transposed) <= 1e-6 * scale


@pytest.mark.parametrize("num_boxes", [0, 1, 3, 5, 200])
def test_crops_made_in_parts_of_the_boxes_are_tfs_in_one_call(rng, num_boxes):
    """CropAndResize runs over parts of the boxes one after the other (one part's full-resolution crops in memory
    at a time): the same crops, in order, as one call of TF's kernel, with parts that are short or empty."""
    image = tf.constant(rng.standard_normal((2, 9, 13, 64)), tf.float32)
    boxes = tf.constant(rng.uniform(-0.3, 1.3, size=(num_boxes, 4)), tf.float32)
    box_indices = tf.constant(rng.integers(0, 2, num_boxes), tf.int32)
    want = tf.image.crop_and_resize(image, boxes, box_indices, (28, 28)).numpy()
    np.testing.assert_array_equal(crop_and_resize(image, boxes, box_indices, (28, 28)).numpy(), want)
    graph = tf.function(crop_and_resize).get_concrete_function(
        image, tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32), (28, 28)).graph
    crops = [op for op in graph.get_operations() if op.type == "CropAndResize"]
    assert len(crops) == _CROP_PARTS
    for later in crops[1:]:  # waits for the part before (through the first op made for it, its crop size)
        assert [op for op in [later, *(tensor.op for tensor in later.inputs)] if op.control_inputs]


def test_crop_and_resize_gradient_at_samples_exactly_on_the_image_edges(rng):
    """Samples at exactly 0 and exactly length - 1 are inside for TF's kernel (it skips only y < 0 or
    y > height - 1): the gradient counts them too, on boxes spanning the whole image, flipped, and ending on
    one edge."""
    image = tf.constant(rng.standard_normal((1, 9, 13, 4)), tf.float32)
    boxes = tf.constant([[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.5, 1.0, 1.0], [0.5, 0.0, 1.0, 0.5]])
    box_indices = tf.zeros([4], tf.int32)
    upstream = tf.constant(rng.standard_normal((4, 5, 3, 4)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(image)
        crops = crop_and_resize(image, boxes, box_indices, (5, 3))
    gradient = tape.gradient(crops, image, output_gradients=upstream).numpy()
    for edge in (gradient[0, 0], gradient[0, -1], gradient[0, :, 0], gradient[0, :, -1]):
        assert np.abs(edge).max() > 0.1  # every edge of the map is sampled and gets a gradient
    forward = np.sum(crops.numpy().astype(np.float64) * upstream.numpy())
    transposed = np.sum(image.numpy().astype(np.float64) * gradient)
    scale = np.linalg.norm(crops.numpy().astype(np.float64)) * np.linalg.norm(upstream.numpy())
    assert abs(forward - transposed) <= 1e-6 * scale


@pytest.mark.parametrize("crop_size", [(1, 1), (5, 3), (14, 14), (28, 28)])
def test_gathered_crop_and_resize_is_tfs_kernel_bit_for_bit(rng, crop_size):
    """The export form of CropAndResize against TF's kernel: boxes that overlap, leave the image (0 there),
    are flipped (y1 > y2), span exactly the image, on maps of one row or column too."""
    for height, width in ((9, 13), (1, 7), (6, 1), (31, 40)):
        image = tf.constant(rng.standard_normal((2, height, width, 8)) * 10, tf.float32)
        corners = np.concatenate([rng.uniform(-0.3, 1.3, size=(200, 4)), [[0, 0, 1, 1], [1, 1, 0, 0]]])
        boxes = tf.constant(corners, tf.float32)
        box_indices = tf.constant(rng.integers(0, 2, len(corners)), tf.int32)
        want = tf.image.crop_and_resize(image, boxes, box_indices, crop_size).numpy()
        np.testing.assert_array_equal(gathered_crop_and_resize(image, boxes, box_indices, crop_size).numpy(), want)


@pytest.mark.parametrize("sampling_ratio", [1, 2])
def test_portable_roi_align_is_the_kernels_bit_for_bit(rng, sampling_ratio):
    """RoIAlign traced within `portable_crop_and_resize` (for exports): CropAndResize gives way to gathers, every
    number stays (one level, and FPN's levels), for maps whose size is unknown when traced, as a model's are."""
    features, boxes, box_indices = random_case(rng)
    pyramid = [rng.standard_normal((2, 32 // 2**k, 40 // 2**k, 6)).astype(np.float32) for k in range(3)]
    centres = rng.uniform(0, 120, (60, 1, 2))
    image_boxes = np.concatenate([centres - rng.uniform(0, 40, (60, 1, 2)), centres + rng.uniform(0, 40, (60, 1, 2))],
                                 axis=1).reshape(60, 4).astype(np.float32)  # fmt: skip
    image_indices = rng.integers(0, 2, 60).astype(np.int32)
    maps = tf.TensorSpec([None, None, None, 6], tf.float32)
    signature = [tf.TensorSpec([None, None, None, features.shape[-1]], tf.float32), tf.TensorSpec([None, 4]),
                 tf.TensorSpec([None], tf.int32), maps, maps, maps, tf.TensorSpec([None, 4]), tf.TensorSpec([None], tf.int32)]

    def both(features, boxes, box_indices, p2, p3, p4, image_boxes, image_indices):
        one = roi_align(features, boxes, box_indices, (7, 7), 0.25, sampling_ratio)
        return one, multilevel_roi_align([p2, p3, p4], image_boxes, image_indices, 7, sampling_ratio, 2, 4)

    args = [features.astype(np.float32), boxes.astype(np.float32), box_indices, *pyramid, image_boxes, image_indices]
    kernel = [t.numpy() for t in tf.function(both, input_signature=signature, autograph=False)(*args)]
    with portable_crop_and_resize():
        traced = tf.function(both, input_signature=signature, autograph=False).get_concrete_function()
    assert "CropAndResize" not in {op.type for op in traced.graph.get_operations()}
    for got, want in zip(traced(*args), kernel):
        np.testing.assert_array_equal(got.numpy(), want)
