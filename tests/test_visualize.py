"""Drawing functions of tfdet.visualize: pixels change where expected, inputs stay untouched."""

import cv2
import numpy as np
import pytest

from tfdet.data.coco_classes import COCO_CLASSES
from tfdet.data.keypoint_names import COCO_KEYPOINTS
from tfdet.visualize import (
    class_label,
    draw_box,
    draw_detections,
    draw_keypoints,
    draw_label,
    draw_mask,
    keypoint_colours,
    rainbow,
)

# The tests of drawing itself keep the image's size; `test_small_images_are_drawn_enlarged` checks enlarging.
SAME_SIZE = {"min_side": 0}


@pytest.fixture
def photo(rng):
    return rng.integers(40, 200, (120, 160, 3), dtype=np.uint8)


def test_box_outline_changes_only_the_outline(photo):
    before = photo.copy()
    out = draw_box(photo, (20, 30, 100, 90), thickness=1)
    np.testing.assert_array_equal(photo, before)
    changed = np.any(out != photo, axis=2)
    assert changed[30, 20:101].all() and changed[90, 20:101].all()  # top and bottom edges
    assert changed[30:91, 20].all() and changed[30:91, 100].all()  # left and right edges
    assert not changed[32:89, 22:99].any(), "the inside of a box outline stays as it was"
    assert not changed[:28].any() and not changed[:, 103:].any()


def test_mask_is_tinted_inside_and_outlined(photo):
    mask = np.zeros(photo.shape[:2], bool)
    mask[40:80, 50:110] = True
    colour = np.array([0.0, 0.0, 255.0])
    before = photo.copy()
    out = draw_mask(photo, mask, colour, alpha=0.5, contour_thickness=1)
    np.testing.assert_array_equal(photo, before)
    inside = (slice(45, 75), slice(55, 105))  # away from the contour
    expected = np.round(0.5 * photo[inside].astype(np.float64) + 0.5 * colour)
    np.testing.assert_allclose(out[inside], expected, atol=1)
    far = np.ones(mask.shape, bool)
    far[37:83, 47:113] = False
    np.testing.assert_array_equal(out[far], photo[far])
    # The contour is blended white: brighter than the tinted inside next to it.
    assert out[40, 60:100].astype(int).sum() > out[50, 60:100].astype(int).sum()


def test_keypoints_below_threshold_draw_nothing(photo):
    keypoints = np.zeros((17, 3), np.float32)
    keypoints[:, 0], keypoints[:, 1], keypoints[:, 2] = 80, 60, 1.9
    np.testing.assert_array_equal(draw_keypoints(photo, keypoints, kp_thresh=2.0), photo)


def test_keypoint_mid_shoulder_to_mid_hip_line():
    black = np.zeros((200, 200, 3), np.uint8)
    keypoints = np.zeros((17, 3), np.float32)
    keypoints[:, 2] = -10.0  # all hidden but shoulders and hips
    for name, x, y in (
        ("left_shoulder", 130, 50),
        ("right_shoulder", 70, 50),
        ("left_hip", 120, 150),
        ("right_hip", 80, 150),
    ):
        k = COCO_KEYPOINTS.index(name)
        keypoints[k] = (x, y, 5.0)
    out = draw_keypoints(black, keypoints, kp_thresh=2.0, alpha=1.0, thickness=3, radius=3)
    np.testing.assert_array_equal(black, 0)
    # Midway between mid-shoulder (100, 50) and mid-hip (100, 150): the last rainbow colour.
    expected = np.array(keypoint_colours()[-1])
    np.testing.assert_allclose(out[100, 100], expected, atol=2)
    # No nose: the nose-to-mid-shoulder line is absent.
    assert not out[10:45, 95:106].any()
    # The shoulder-to-shoulder edge is drawn.
    assert out[50, 100].any()


def test_other_keypoint_schemas_draw_their_own_skeleton_or_dots():
    black = np.zeros((100, 100, 3), np.uint8)
    keypoints = np.array([[20, 20, 5.0], [80, 20, 5.0], [50, 80, 5.0]], np.float32)  # 3 keypoints, not COCO's 17
    joined = draw_keypoints(black, keypoints, alpha=1.0, thickness=3, radius=3, skeleton=((0, 1),))
    assert joined[20, 50].any()  # the 0-1 edge
    assert not joined[50, 35].any()  # no 0-2 edge
    np.testing.assert_allclose(joined[80, 50], keypoint_colours(((0, 1),))[-1], atol=2)  # lone keypoint: a dot
    dots = draw_keypoints(black, keypoints, alpha=1.0, thickness=3, radius=3)
    assert all(dots[y, x].any() for x, y, _ in keypoints.astype(int)) and not dots[20, 50].any()


def test_rainbow_matches_matplotlib():
    # matplotlib.cm.rainbow at 0, 0.5 and 1.
    np.testing.assert_allclose(
        rainbow([0.0, 0.5, 1.0]), [[0.5, 0.0, 1.0], [0.5, 1.0, np.sqrt(0.5)], [1.0, 0.0, 0.0]], atol=1e-12
    )


def test_label_stays_inside_the_image(photo):
    out = draw_label(photo, (5, 2), "person 0.99", font_scale=0.4)
    changed = np.flatnonzero(np.any(out != photo, axis=(1, 2)))
    assert changed.min() >= 0 and changed.max() < 30, "a label at the top edge moves below it"
    assert changed.size > 5


def test_class_labels():
    assert class_label(1, 0.987, COCO_CLASSES) == "person 0.99"
    assert class_label(7, 0.5) == "id7 0.50"
    assert class_label(90, 0.5, COCO_CLASSES) == "id90 0.50"


def _detections(n, shape, masks=True, keypoints=True):
    boxes = np.array([[10, 20, 60, 90], [70, 10, 150, 110]], np.float32)[:n]
    result = {"boxes": boxes, "scores": np.array([0.9, 0.8], np.float32)[:n], "classes": np.array([1, 3], np.int32)[:n]}
    if masks:
        result["masks"] = np.zeros((n,) + shape[:2], bool)
        for i, (x1, y1, x2, y2) in enumerate(boxes.astype(int)):
            result["masks"][i, y1 + 5 : y2 - 5, x1 + 5 : x2 - 5] = True
    if keypoints:
        kps = np.zeros((n, 17, 3), np.float32)
        kps[:, :, 0] = boxes[:, None, 0] + 10
        kps[:, :, 1] = boxes[:, None, 1] + np.arange(17) * 3
        kps[:, :, 2] = 5.0
        result["keypoints"] = kps
    return result


def test_no_detections_give_an_unchanged_copy(photo):
    out = draw_detections(photo, _detections(0, photo.shape), **SAME_SIZE)
    assert out is not photo
    np.testing.assert_array_equal(out, photo)
    out = draw_detections(photo, _detections(0, photo.shape, masks=False, keypoints=False), **SAME_SIZE)
    np.testing.assert_array_equal(out, photo)


def test_detections_are_drawn_above_threshold_only(photo):
    detections = _detections(2, photo.shape)
    before = photo.copy()
    both = draw_detections(photo, detections, COCO_CLASSES, thresh=0.5, **SAME_SIZE)
    np.testing.assert_array_equal(photo, before)
    assert both.shape == photo.shape and both.dtype == np.uint8
    changed = np.any(both != photo, axis=2)
    assert changed[40:70, 20:50].mean() > 0.9  # first mask's inside
    assert changed[30:90, 85:135].mean() > 0.9  # second mask's inside
    first_only = draw_detections(photo, detections, COCO_CLASSES, thresh=0.85, **SAME_SIZE)
    changed = np.any(first_only != photo, axis=2)
    assert changed[40:70, 20:50].mean() > 0.9
    assert not changed[30:90, 100:135].any(), "the 0.8 detection is below the 0.85 threshold"


def test_detections_refuse_non_bgr_images():
    with pytest.raises(ValueError, match="H x W x 3"):
        draw_detections(np.zeros((10, 10), np.uint8), _detections(0, (10, 10)))


def test_small_images_are_drawn_enlarged_with_every_box_on_its_pixels():
    """A 192 x 240 image is drawn 3x (576 x 720), where a label's text is 10 px high instead of 5: its box
    outlines the same pixels (f x1 .. f x2 + f - 1), its mask covers them, a keypoint stays on its pixel."""
    image = np.full((192, 240, 3), 90, np.uint8)
    image[60:100, 40:90] = 220  # the object: pixels x 40..89, y 60..99
    mask = np.zeros((1, 192, 240), bool)
    mask[0, 60:100, 40:90] = True
    box = {"boxes": np.array([[40, 60, 89, 99]], np.float32), "scores": np.array([0.9], np.float32),
           "classes": np.array([1], np.int32)}
    boxed = draw_detections(image, box, ["bg", "triangle"], thresh=0.5)
    assert boxed.shape == (576, 720, 3)
    plain = cv2.resize(image, (720, 576), interpolation=cv2.INTER_LINEAR)
    changed = np.any(boxed != plain, axis=2)
    assert np.flatnonzero(changed[:, 200]).tolist() == [180, 299]  # top and bottom edges: rows 3 * 60, 3 * 99 + 2
    assert np.flatnonzero(changed[240]).tolist() == [120, 269]  # left and right edges
    assert np.flatnonzero(changed[:180].any(axis=1)).size >= 12, "a label band above the box, for text 10 px high"

    masked = draw_detections(image, {**box, "masks": mask}, ["bg", "triangle"], thresh=0.5)
    tinted = np.any(masked != boxed, axis=2)
    assert tinted[183:297, 123:267].all(), "the mask covers the object's pixels"
    outside = np.ones(tinted.shape, bool)
    outside[177:303, 117:273] = False
    assert not tinted[outside].any(), "and nothing beyond its contour"

    keypoints = np.zeros((1, 3, 3), np.float32)
    keypoints[0, :, :2], keypoints[0, :, 2] = [[40, 60], [89, 99], [64, 80]], 5.0  # corner and middle pixels
    dotted = draw_detections(image, {**box, "keypoints": keypoints}, ["bg", "triangle"], thresh=0.5, skeleton=())
    dots = np.any(dotted != boxed, axis=2)
    for x, y in [(121, 181), (268, 298), (193, 241)]:  # f x + (f - 1) / 2: the middle of each pixel's 3 x 3
        columns, rows = np.flatnonzero(dots[y, x - 8 : x + 9]), np.flatnonzero(dots[y - 8 : y + 9, x])
        assert columns.min() + columns.max() == 16 and rows.min() + rows.max() == 16, (x, y)


def test_pictures_of_large_images_keep_their_size(photo):
    large = cv2.resize(photo, (800, 600))
    assert draw_detections(large, _detections(2, large.shape), thresh=0.5).shape == large.shape
