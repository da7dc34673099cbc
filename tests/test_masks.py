"""Mask paste against Detectron's `segm_results`, run literally with numpy and cv2.resize: the graph op
(`tfdet.ops.masks`, the SavedModel's) and the Predictor's NumPy/cv2 paste (`tfdet.imaging.mask_paste`).

Our resize reproduces cv2's float32 INTER_LINEAR bit for bit as x86 builds run it (OpenCV hands
single-channel float32 resizes to Intel IPP): there soft and binary masks must be identical.
Builds without IPP run OpenCV's own kernel, which rounds differently by ~1e-6; against it soft
masks may differ by SOFT_TOLERANCE and binary ones only at pixels whose reference probability
lies within SOFT_TOLERANCE of the threshold (a genuine tie that rounding decides).
"""

import contextlib

import cv2
import numpy as np
import pytest
import tensorflow as tf

from tfdet.imaging import mask_paste
from tfdet.ops.masks import paste_masks, paste_masks_soft
from tfdet.ops.resize import resize_linear_cv2

SOFT_TOLERANCE = 1e-5
THRESHOLD = 0.5
CV2_USES_IPP = cv2.ipp.useIPP()


def detectron_expand_boxes(boxes, scale):
    """detectron/utils/boxes.py::expand_boxes, verbatim in behaviour (float32 in, float64 out)."""
    w_half = (boxes[:, 2] - boxes[:, 0]) * 0.5
    h_half = (boxes[:, 3] - boxes[:, 1]) * 0.5
    x_c = (boxes[:, 2] + boxes[:, 0]) * 0.5
    y_c = (boxes[:, 3] + boxes[:, 1]) * 0.5
    w_half *= scale
    h_half *= scale
    boxes_exp = np.zeros(boxes.shape)
    boxes_exp[:, 0] = x_c - w_half
    boxes_exp[:, 2] = x_c + w_half
    boxes_exp[:, 1] = y_c - h_half
    boxes_exp[:, 3] = y_c + h_half
    return boxes_exp


def detectron_segm_results(masks, boxes, im_h, im_w, threshold=THRESHOLD):
    """detectron/core/test.py::segm_results for one class-agnostic image: (soft, binary) masks."""
    mask_size = masks.shape[-1]
    ref_boxes = detectron_expand_boxes(boxes, (mask_size + 2.0) / mask_size).astype(np.int32)
    padded_mask = np.zeros((mask_size + 2, mask_size + 2), dtype=np.float32)
    soft = np.zeros((len(boxes), im_h, im_w), np.float32)
    binary = np.zeros((len(boxes), im_h, im_w), np.uint8)
    for i, ref_box in enumerate(ref_boxes):
        padded_mask[1:-1, 1:-1] = masks[i]
        w = max(ref_box[2] - ref_box[0] + 1, 1)
        h = max(ref_box[3] - ref_box[1] + 1, 1)
        mask = cv2.resize(padded_mask, (int(w), int(h)))
        x_0, x_1 = max(ref_box[0], 0), min(ref_box[2] + 1, im_w)
        y_0, y_1 = max(ref_box[1], 0), min(ref_box[3] + 1, im_h)
        crop = mask[(y_0 - ref_box[1]):(y_1 - ref_box[1]), (x_0 - ref_box[0]):(x_1 - ref_box[0])]
        soft[i, y_0:y_1, x_0:x_1] = crop
        binary[i, y_0:y_1, x_0:x_1] = np.array(crop > threshold, dtype=np.uint8)
    return soft, binary.astype(bool)


@pytest.fixture(scope="module")
def paste():
    """Both pastes in one graph with unknown N and a dynamic image size."""

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None, None], tf.float32),
            tf.TensorSpec([None, 4], tf.float32),
            tf.TensorSpec([], tf.int32),
            tf.TensorSpec([], tf.int32),
        ]
    )
    def run(masks, boxes, height, width):
        binary = paste_masks(masks, boxes, height, width, THRESHOLD)
        return binary, paste_masks_soft(masks, boxes, height, width)

    return lambda *args: [t.numpy() for t in run(*args)]


@contextlib.contextmanager
def opencv_without_ipp():
    """Make cv2 run its own resize kernel instead of Intel IPP's, restoring the setting after."""
    was_on = cv2.ipp.useIPP()
    cv2.ipp.setUseIPP(False)
    try:
        yield
    finally:
        cv2.ipp.setUseIPP(was_on)


def random_boxes(rng, n, height, width, max_size):
    """Float32 boxes centred in the image, many sticking out of it, sizes 0.2..max_size px."""
    centre_x = rng.uniform(0, width - 1, n)
    centre_y = rng.uniform(0, height - 1, n)
    box_w = rng.uniform(0.2, max_size, n)
    box_h = rng.uniform(0.2, max_size, n)
    boxes = [centre_x - box_w / 2, centre_y - box_h / 2, centre_x + box_w / 2, centre_y + box_h / 2]
    return np.stack(boxes, axis=1).astype(np.float32)


def assert_matches_detectron(ours, reference, exact):
    """Identical masks when `exact`; else soft ones within SOFT_TOLERANCE, binary flips at ties."""
    (binary, soft), (soft_ref, binary_ref) = ours, reference
    assert binary.dtype == bool and binary.shape == binary_ref.shape
    assert soft.dtype == np.float32 and soft.shape == soft_ref.shape
    assert np.array_equal(binary, soft > THRESHOLD)
    if exact:
        np.testing.assert_array_equal(soft, soft_ref)
        np.testing.assert_array_equal(binary, binary_ref)
        return
    np.testing.assert_allclose(soft, soft_ref, rtol=0, atol=SOFT_TOLERANCE)
    mismatched = binary != binary_ref
    assert np.all(np.abs(soft_ref[mismatched] - THRESHOLD) <= SOFT_TOLERANCE)
    assert mismatched.sum() <= 3  # observed 0 against OpenCV's own kernel


def test_random_masks_match_detectron(rng, paste):
    height, width, n = 300, 420, 60
    masks = rng.random((n, 28, 28), dtype=np.float32)
    boxes = random_boxes(rng, n, height, width, max_size=260)
    assert (boxes[:, 0] < 0).any() and (boxes[:, 2] > width - 1).any()
    reference = detectron_segm_results(masks, boxes, height, width)
    assert_matches_detectron(paste(masks, boxes, height, width), reference, exact=CV2_USES_IPP)


def test_smooth_masks_with_many_near_half_values(rng, paste):
    """Masks shaped like real ones (smooth ramps through 0.5), where rounding could flip pixels."""
    height, width, n = 200, 240, 30
    ramp = np.linspace(0.0, 1.0, 28, dtype=np.float32)
    angles = rng.uniform(0, 2 * np.pi, n)
    along_x = np.cos(angles)[:, None, None] * ramp[None, None, :]
    along_y = np.sin(angles)[:, None, None] * ramp[None, :, None]
    masks = (0.5 + 0.5 * (along_x + along_y)).astype(np.float32)
    boxes = random_boxes(rng, n, height, width, max_size=220)
    reference = detectron_segm_results(masks, boxes, height, width)
    assert_matches_detectron(paste(masks, boxes, height, width), reference, exact=CV2_USES_IPP)


def test_tiny_and_inverted_boxes(rng, paste):
    """Boxes under 1 px, and x2 < x1 (box decode can give those): w, h forced to 1 or empty."""
    height, width = 50, 60
    boxes = np.array(
        [
            [10.3, 20.1, 10.9, 20.4],  # 0.6 x 0.3 px
            [10.3, 20.1, 9.5, 21.0],  # x2 < x1: Detectron pastes nothing
            [0.0, 0.0, 0.0, 0.0],  # a point at the origin
            [-0.4, 5.0, 0.2, 5.5],  # straddles the left border
            [59.2, 49.1, 59.9, 49.8],  # in the bottom-right pixel
            [30.0, 30.0, 30.99, 30.99],
        ],
        np.float32,
    )
    masks = rng.random((len(boxes), 28, 28), dtype=np.float32)
    reference = detectron_segm_results(masks, boxes, height, width)
    assert_matches_detectron(paste(masks, boxes, height, width), reference, exact=CV2_USES_IPP)


def test_boxes_on_and_over_the_border(rng, paste):
    height, width = 64, 80
    boxes = np.array(
        [
            [0.0, 0.0, width - 1.0, height - 1.0],  # the whole image
            [-30.0, -20.0, 10.0, 12.0],  # top-left corner
            [50.0, 40.0, width + 25.0, height + 30.0],  # bottom-right corner
            [-5.0, 10.0, width + 5.0, 20.0],  # wider than the image
            [0.0, 30.0, 0.5, 40.0],  # on the left edge
        ],
        np.float32,
    )
    masks = rng.random((len(boxes), 28, 28), dtype=np.float32)
    reference = detectron_segm_results(masks, boxes, height, width)
    assert_matches_detectron(paste(masks, boxes, height, width), reference, exact=CV2_USES_IPP)


def test_other_mask_resolution_and_threshold(rng):
    """MRCNN.RESOLUTION 14 (C4 models) and a non-default THRESH_BINARIZE, in eager mode."""
    height, width, n = 90, 70, 8
    masks = rng.random((n, 14, 14), dtype=np.float32)
    boxes = random_boxes(rng, n, height, width, max_size=80)
    _, binary_ref = detectron_segm_results(masks, boxes, height, width, threshold=0.3)
    binary = paste_masks(masks, boxes, height, width, threshold=0.3).numpy()
    assert np.array_equal(binary, binary_ref)


def test_no_detections(paste):
    binary, soft = paste(np.zeros((0, 28, 28), np.float32), np.zeros((0, 4), np.float32), 37, 53)
    assert binary.shape == (0, 37, 53) and binary.dtype == bool
    assert soft.shape == (0, 37, 53)


def test_masks_of_images_of_different_sizes_on_one_canvas(rng, paste):
    """Per-mask image sizes and a canvas (the SavedModel's batch): each mask is its own image's paste, clipped
    there, zero-padded bottom-right to the canvas; no masks give (0, canvas)."""
    sizes = [(37, 53), (60, 41), (60, 53)]
    per_image = [random_boxes(rng, 4, h, w, max_size=70) for h, w in sizes]
    masks = rng.random((12, 28, 28), dtype=np.float32)
    boxes = np.concatenate(per_image).astype(np.float32)
    heights, widths = (np.repeat([s[k] for s in sizes], 4).astype(np.int32) for k in (0, 1))

    @tf.function
    def on_canvas(masks, boxes, heights, widths):
        return paste_masks(masks, boxes, heights, widths, THRESHOLD, canvas_size=tf.constant([64, 55]))

    got = on_canvas(masks, boxes, heights, widths).numpy()
    assert got.shape == (12, 64, 55) and got.dtype == bool
    for i, (height, width) in enumerate(sizes):
        want, _ = paste(masks[4 * i : 4 * i + 4], per_image[i], height, width)
        np.testing.assert_array_equal(got[4 * i : 4 * i + 4, :height, :width], want)
        assert not got[4 * i : 4 * i + 4, height:].any() and not got[4 * i : 4 * i + 4, :, width:].any()
    empty = on_canvas(masks[:0], boxes[:0], heights[:0], widths[:0]).numpy()
    assert empty.shape == (0, 64, 55)


def test_within_tolerance_of_opencv_without_ipp(rng, paste):
    """Against OpenCV's own resize kernel (builds without IPP): ~1e-6 apart, near-tie flips only."""
    height, width, n = 160, 200, 30
    masks = rng.random((n, 28, 28), dtype=np.float32)
    boxes = random_boxes(rng, n, height, width, max_size=150)
    # A 2x downscale (30 -> 15 px), which OpenCV's kernel turns into INTER_AREA.
    boxes[0] = [20.0, 20.0, 33.3, 33.3]
    ref_box = detectron_expand_boxes(boxes[:1], 30 / 28).astype(np.int32)[0]
    assert ref_box[2] - ref_box[0] + 1 == 15 and ref_box[3] - ref_box[1] + 1 == 15
    ours = paste(masks, boxes, height, width)
    with opencv_without_ipp():
        reference = detectron_segm_results(masks, boxes, height, width)
    assert_matches_detectron(ours, reference, exact=False)


@pytest.mark.parametrize("use_ipp", [True, False], ids=["ipp", "opencv"])
def test_resize_linear_alone(rng, use_ipp):
    """The resize op on its own: exact against IPP, within ~1e-5 of OpenCV's own kernel.

    A cv2 build without IPP runs its own kernel in both cases, so only the tolerance applies.
    """
    exact = use_ipp and CV2_USES_IPP
    worst = 0.0
    for _ in range(40):
        src_h, src_w = rng.integers(2, 64, size=2)
        dst_h, dst_w = rng.integers(1, 300, size=2)
        image = rng.standard_normal((src_h, src_w)).astype(np.float32)
        with contextlib.nullcontext() if use_ipp else opencv_without_ipp():
            expected = cv2.resize(image, (int(dst_w), int(dst_h)))
        resized = resize_linear_cv2(image, int(dst_h), int(dst_w)).numpy()
        worst = max(worst, float(np.abs(resized - expected).max()))
    assert worst <= (0.0 if exact else 2e-5)  # observed 0 (IPP) and ~8e-6 (OpenCV's own)


def predictor_paste_cases(rng):
    """(masks, boxes, height, width, threshold) cases: random boxes sticking out, sub-pixel and inverted boxes,
    the border, MRCNN.RESOLUTION 14 with THRESH_BINARIZE 0.3, no detections."""
    inverted = np.array([[10.3, 20.1, 10.9, 20.4], [10.3, 20.1, 9.5, 21.0], [0.0, 0.0, 0.0, 0.0],
                         [-0.4, 5.0, 0.2, 5.5], [59.2, 49.1, 59.9, 49.8], [-30.0, -20.0, 10.0, 12.0],
                         [50.0, 40.0, 85.0, 94.0], [-5.0, 10.0, 65.0, 20.0]], np.float32)
    return [
        (rng.random((60, 28, 28), dtype=np.float32), random_boxes(rng, 60, 300, 420, 260), 300, 420, THRESHOLD),
        (rng.random((len(inverted), 28, 28), dtype=np.float32), inverted, 50, 60, THRESHOLD),
        (rng.random((8, 14, 14), dtype=np.float32), random_boxes(rng, 8, 90, 70, 80), 90, 70, 0.3),
        (np.zeros((0, 28, 28), np.float32), np.zeros((0, 4), np.float32), 37, 53, THRESHOLD),
    ]


def test_predictor_paste_is_detectrons(rng, paste):
    """tfdet.imaging.mask_paste runs Detectron's own cv2 calls on each box's region: identical to segm_results, and to
    the graph op where cv2 uses IPP (which the op reproduces)."""
    for masks, boxes, height, width, threshold in predictor_paste_cases(rng):
        ours = mask_paste.paste_masks(masks, boxes, height, width, threshold)
        _, binary_ref = detectron_segm_results(masks, boxes, height, width, threshold=threshold)
        assert ours.dtype == bool and ours.shape == (len(masks), height, width)
        np.testing.assert_array_equal(ours, binary_ref)
        np.testing.assert_array_equal(mask_paste.reference_boxes(boxes, masks.shape[-1]),
                                      detectron_expand_boxes(boxes, (masks.shape[-1] + 2.0) / masks.shape[-1])
                                      .astype(np.int32))
        if threshold == THRESHOLD and CV2_USES_IPP:
            np.testing.assert_array_equal(ours, paste(masks, boxes, height, width)[0])
    # A box wholly outside the image (Detectron clips boxes first, so its slicing never meets one): nothing pasted.
    outside = mask_paste.paste_masks(np.ones((1, 28, 28), np.float32), [[70.0, 60.0, 90.0, 80.0]], 50, 60, 0.5)
    assert outside.shape == (1, 50, 60) and not outside.any()


def test_a_probability_equal_to_the_threshold_stays_off(paste):
    """Detectron binarizes with `mask > THRESH_BINARIZE`: a mask of exactly 0.5 (still 0.5 inside the box after
    the resize) leaves every pixel off, in the graph op and in the Predictor's paste alike."""
    masks = np.full((1, 28, 28), THRESHOLD, np.float32)
    boxes = np.array([[10.0, 12.0, 50.0, 40.0]], np.float32)
    soft_ref, binary_ref = detectron_segm_results(masks, boxes, 64, 80)
    assert (soft_ref == THRESHOLD).sum() > 500 and not binary_ref.any()
    binary, soft = paste(masks, boxes, 64, 80)
    assert (soft == THRESHOLD).sum() > 500 and not binary.any()
    assert not mask_paste.paste_masks(masks, boxes, 64, 80, THRESHOLD).any()
