"""tfdet.data.photo_shapes: shapes painted on the demo photo, and their ground truth against the pixels."""

import pathlib

import numpy as np
import pytest
from pycocotools.coco import COCO

from tfdet.data import photo_shapes
from tfdet.data.shapes import CATEGORY_NAMES, KEYPOINT_NAMES
from tfdet.imaging.image_io import read_image

DEMO_PHOTO = pathlib.Path(__file__).resolve().parents[1] / "demo" / "24274813513_0cfd2ce6d0_k.jpg"


@pytest.fixture(scope="module")
def photo():
    return read_image(DEMO_PHOTO)


@pytest.fixture(scope="module")
def written(photo, tmp_path_factory):
    """(photo, painted image array, COCO of the written json) for seed 0."""
    out_dir = tmp_path_factory.mktemp("photo_shapes")
    image_path, json_path = photo_shapes.write_photo_shapes(DEMO_PHOTO, out_dir, seed=0)
    assert image_path.is_file() and image_path.name == "24274813513_0cfd2ce6d0_k_shapes.jpg"
    image, _ = photo_shapes.paint_shapes(photo, 0)
    return image, COCO(str(json_path))


def test_same_seed_same_result_other_seed_other_shapes(photo):
    original = photo.copy()
    image, annotations = photo_shapes.paint_shapes(photo, 7)
    again, annotations_again = photo_shapes.paint_shapes(photo, 7)
    other, annotations_other = photo_shapes.paint_shapes(photo, 8)
    np.testing.assert_array_equal(photo, original)  # the photo itself is not painted on
    np.testing.assert_array_equal(image, again)
    assert annotations == annotations_again
    assert [a["bbox"] for a in annotations] != [a["bbox"] for a in annotations_other]
    assert not np.array_equal(image, other)


def test_ground_truth_masks_are_the_painted_pixels(photo, written):
    image, coco = written
    masks = [coco.annToMask(annotation).astype(bool) for annotation in coco.loadAnns(coco.getAnnIds())]
    assert len(masks) == photo_shapes.NUM_SHAPES
    union = np.logical_or.reduce(masks)
    assert np.sum(masks, axis=0).max() == 1  # no shape covers another
    np.testing.assert_array_equal(image[~union], photo[~union])
    difference = np.abs(image.astype(int) - photo.astype(int)).sum(axis=-1)
    for mask in masks:
        assert (difference[mask] > 0).mean() > 0.99
        assert difference[mask].mean() > 60  # a colour apart from the photo beneath


def test_boxes_areas_keypoints_match_the_masks(written):
    image, coco = written
    height, width = image.shape[:2]
    file_name = "24274813513_0cfd2ce6d0_k_shapes.jpg"
    assert coco.imgs[1] == {"id": 1, "file_name": file_name, "height": height, "width": width}
    assert [c["name"] for c in coco.loadCats(coco.getCatIds())] == list(CATEGORY_NAMES)
    for annotation in coco.loadAnns(coco.getAnnIds()):
        mask = coco.annToMask(annotation).astype(bool)
        rows, cols = np.nonzero(mask)
        x, y, w, h = annotation["bbox"]
        assert (x, y, x + w, y + h) == (cols.min(), rows.min(), cols.max() + 1, rows.max() + 1)
        assert annotation["area"] == mask.sum()
        assert 0 < x and x + w < width and 0 < y and y + h < height  # inside the photo, off its edges
        assert isinstance(annotation["segmentation"], list)  # whole shapes: their polygon
        keypoints = np.array(annotation["keypoints"]).reshape(len(KEYPOINT_NAMES), 3)
        assert (keypoints[:, 2] == 2).all() and annotation["num_keypoints"] == len(KEYPOINT_NAMES)
        assert (keypoints[:, 0] >= x - 1).all() and (keypoints[:, 0] <= x + w + 1).all()
        assert (keypoints[:, 1] >= y - 1).all() and (keypoints[:, 1] <= y + h + 1).all()


def test_sizes_are_the_fraction_of_the_longer_side_the_model_needs(photo):
    longer = max(photo.shape[:2])
    widths = []
    for seed in range(6):
        _, annotations = photo_shapes.paint_shapes(photo, seed)
        widths += [annotation["bbox"][2] for annotation in annotations]
    low, high = (fraction * longer for fraction in photo_shapes.SIZE_RANGE)
    assert low - 1 <= min(widths) and max(widths) <= high + 1
    assert max(widths) - min(widths) > 0.5 * (high - low)  # the sizes spread over the range


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.zeros((100, 300, 3), np.uint8), "cannot hold the shapes"),
        (np.zeros((20, 30, 3), np.uint8), "cannot hold the shapes"),
        (np.zeros((100, 150), np.uint8), "must be \\(H, W, 3\\) uint8"),
        (np.zeros((100, 150, 3), np.float32), "must be \\(H, W, 3\\) uint8"),
    ],
)
def test_bad_photo_is_refused_in_one_line(bad, message):
    with pytest.raises(ValueError, match=message):
        photo_shapes.paint_shapes(bad, 0)


def test_the_demo_counts_the_painted_shapes_found(photo):
    from tfdet.demo import found_shapes

    _, annotations = photo_shapes.paint_shapes(photo, 0)
    first, second = annotations[:2]
    x, y, w, h = first["bbox"]
    detections = [
        {"category_id": first["category_id"], "bbox": [x + 0.1 * w, y, w, h], "score": 0.9},  # IoU 0.82: found
        {"category_id": first["category_id"], "bbox": [x, y, w, h], "score": 0.8},  # the same shape again: false
        {"category_id": second["category_id"] % 3 + 1, "bbox": second["bbox"], "score": 0.95},  # wrong class: false
        {"category_id": second["category_id"], "bbox": second["bbox"], "score": 0.4},  # under the threshold
    ]
    assert found_shapes(annotations, detections, thresh=0.5) == (1, 2)
    assert found_shapes(annotations, detections, thresh=0.3) == (2, 2)
