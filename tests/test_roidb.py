"""COCO json -> training records: Detectron's json_dataset / filter_for_training conventions on a handmade json."""

import gc
import json
import logging
import pathlib

import cv2
import numpy as np
import pycocotools.mask as mask_util
import pytest
from pycocotools.coco import COCO

from tfdet.data import roidb as roidb_lib
from tfdet.data.catalog import DatasetSpec, check_evaluation_dataset
from tfdet.data.coco_json import DatasetError
from tfdet.evaluation.results import contiguous_to_json_ids
from tfdet.imaging.image_io import UnreadableImage, read_image

HEIGHT, WIDTH = 50, 60
KEYPOINT_NAMES = ["nose", "left_eye", "right_eye", "hand_left", "hand_right", "leftover"]


def _annotation(ann_id, image_id, category_id, bbox, area=None, **extra):
    x, y, w, h = bbox
    annotation = {
        "id": ann_id,
        "image_id": image_id,
        "category_id": category_id,
        "bbox": bbox,
        "area": float(w * h) if area is None else area,
        "iscrowd": 0,
        "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]],
    }
    annotation.update(extra)
    return annotation


def _keypoints(*visible):
    """Flat COCO keypoints: keypoint k at (10 + k, 20 + k) with the given visibilities (0 -> x = y = 0)."""
    flat = []
    for k, v in enumerate(visible):
        flat += [10.0 + k, 20.0 + k, v] if v else [0.0, 0.0, 0]
    return flat


def _write_dataset(tmp_path, annotations, images=None, categories=None):
    images = images or [{"id": i, "file_name": f"{i}.jpg", "height": HEIGHT, "width": WIDTH} for i in (1, 2, 3, 4)]
    for image in images:
        pixels = np.full((image["height"], image["width"], 3), 90, np.uint8)
        cv2.imwrite(str(tmp_path / image["file_name"]), pixels)
    # Non-contiguous json ids listed out of order: contiguous ids follow the json's order (Detectron's getCatIds).
    categories = categories or [
        {"id": 7, "name": "seven", "keypoints": KEYPOINT_NAMES},
        {"id": 3, "name": "three"},
        {"id": 12, "name": "twelve"},
    ]
    path = tmp_path / "annotations.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


@pytest.fixture
def dataset(tmp_path):
    crowd_rle = mask_util.encode(np.asfortranarray(np.pad(np.ones((5, 5), np.uint8), ((0, 45), (0, 55)))))
    annotations = [
        # image 1: the boxes Detectron keeps, and the ones it drops
        _annotation(1, 1, 7, [10, 20, 5, 8], keypoints=_keypoints(2, 1, 0, 2, 0, 0)),  # area 40
        _annotation(2, 1, 3, [55.5, 45, 10, 10]),  # clipped at the bottom-right
        _annotation(3, 1, 12, [-3, -2, 6, 7]),  # clipped at the top-left
        _annotation(4, 1, 3, [30, 30, 1, 5]),  # 1 px wide: x2 == x1, dropped
        _annotation(5, 1, 3, [30, 30, 5, 5], area=0.0),  # zero area, dropped
        _annotation(6, 1, 3, [30, 30, 5, 5], ignore=1),  # ignored, dropped
        _annotation(7, 1, 3, [59.5, 10, 5, 5]),  # mostly outside the image: clips to a line, dropped
        {
            "id": 8,
            "image_id": 1,
            "category_id": 12,
            "bbox": [0, 0, 5, 5],
            "area": 25.0,
            "iscrowd": 1,
            "segmentation": {"size": [HEIGHT, WIDTH], "counts": crowd_rle["counts"].decode("ascii")},
        },
        # image 2: only a crowd region -> skipped
        {**_annotation(9, 2, 3, [5, 5, 20, 20]), "iscrowd": 1},
        # image 3: no annotation -> skipped; image 4: only unusable boxes -> skipped
        _annotation(10, 4, 3, [10, 10, 1, 1]),
    ]
    return _write_dataset(tmp_path, annotations), tmp_path


def test_boxes_classes_and_crowd_follow_detectron(dataset, caplog):
    json_path, image_dir = dataset
    with caplog.at_level(logging.INFO, logger="tfdet.data.roidb"):
        roidb = roidb_lib.load_coco_roidb(json_path, image_dir)
    assert [r.image_id for r in roidb.records] == [1]
    assert roidb.num_skipped == 3
    assert "filtered 3 images" in caplog.text and "4 -> 1" in caplog.text
    record = roidb.records[0]
    assert (record.height, record.width) == (HEIGHT, WIDTH)
    assert record.file_path == str(image_dir / "1.jpg")
    expected_boxes = [
        [10, 20, 10 + 5 - 1, 20 + 8 - 1],  # x2 = x + w - 1
        [55.5, 45, WIDTH - 1, HEIGHT - 1],  # 64.5, 54 clipped to 59, 49
        [0, 0, -3 + 6 - 1, -2 + 7 - 1],
        [0, 0, 4, 4],  # the crowd box
    ]
    np.testing.assert_array_equal(record.boxes, np.array(expected_boxes, np.float32))
    assert record.boxes.dtype == np.float32
    # json ids 7, 3, 12 (as listed) -> contiguous 1, 2, 3
    np.testing.assert_array_equal(record.classes, [1, 2, 3, 3])
    assert roidb.json_category_ids == (7, 3, 12)
    # the evaluation maps classes back the same way
    assert list(roidb.json_category_ids) == contiguous_to_json_ids(COCO(str(json_path)))[1:]
    assert roidb.class_names == ("__background__", "seven", "three", "twelve")
    assert roidb.num_classes == 4
    np.testing.assert_array_equal(record.is_crowd, [False, False, False, True])
    assert record.mask_rles is None


def test_gt_min_area_drops_small_objects(dataset):
    json_path, image_dir = dataset
    roidb = roidb_lib.load_coco_roidb(json_path, image_dir, gt_min_area=41)
    # the 40- and 25-pixel objects (json ids 1 and 8) are gone, the 42- and 100-pixel ones stay
    np.testing.assert_array_equal(roidb.records[0].classes, [2, 3])


def test_keypoints_and_flip_pairs(dataset):
    json_path, image_dir = dataset
    roidb = roidb_lib.load_coco_roidb(json_path, image_dir)
    assert roidb.keypoint_names == tuple(KEYPOINT_NAMES)
    # left_eye <-> right_eye, hand_left <-> hand_right; "leftover" has no "rightover"
    assert roidb.keypoint_flip_pairs == ((1, 2), (3, 4))
    keypoints = roidb.records[0].keypoints
    assert keypoints.shape == (4, 6, 3) and keypoints.dtype == np.float32
    np.testing.assert_array_equal(keypoints[0, :, 2], [2, 1, 0, 2, 0, 0])
    np.testing.assert_array_equal(keypoints[0, 3], [13.0, 23.0, 2.0])
    np.testing.assert_array_equal(keypoints[1:], 0)  # annotations without keypoints


def test_keypoints_required_skips_images_without_visible_keypoints(tmp_path):
    annotations = [
        _annotation(1, 1, 7, [10, 20, 5, 8], keypoints=_keypoints(0, 0, 0, 0, 0, 0)),
        _annotation(2, 2, 7, [10, 20, 5, 8], keypoints=_keypoints(0, 1, 0, 0, 0, 0)),
    ]
    json_path = _write_dataset(tmp_path, annotations)
    roidb = roidb_lib.load_coco_roidb(json_path, tmp_path, keypoints_required=True)
    assert [r.image_id for r in roidb.records] == [2]
    assert roidb.num_skipped == 3
    assert len(roidb_lib.load_coco_roidb(json_path, tmp_path).records) == 2


def test_explicit_flip_map_and_bad_maps():
    names = ("a", "b", "c")
    assert roidb_lib.keypoint_flip_pairs(names, {"c": "a"}) == ((2, 0),)
    with pytest.raises(ValueError, match="not both among"):
        roidb_lib.keypoint_flip_pairs(names, {"a": "z"})
    coco_names = ["nose", "left_eye", "right_eye", "left_ear", "right_ear"]
    assert roidb_lib.keypoint_flip_pairs(coco_names) == ((1, 2), (3, 4))


def test_masks_are_pycocotools_rasterisations(dataset):
    json_path, image_dir = dataset
    roidb = roidb_lib.load_coco_roidb(json_path, image_dir, with_masks=True)
    coco = COCO(str(json_path))
    record = roidb.records[0]
    kept_ids = [1, 2, 3, 8]
    assert len(record.mask_rles) == len(kept_ids)
    for rle, ann_id in zip(record.mask_rles, kept_ids):
        mask = mask_util.decode({"size": [HEIGHT, WIDTH], "counts": rle})
        np.testing.assert_array_equal(mask, coco.annToMask(coco.anns[ann_id]))
    # the first polygon is the box (10, 20)-(15, 28): pixels 10..14 x 20..27
    mask = mask_util.decode({"size": [HEIGHT, WIDTH], "counts": record.mask_rles[0]})
    ys, xs = np.nonzero(mask)
    assert (xs.min(), xs.max(), ys.min(), ys.max()) == (10, 14, 20, 27)


def test_degenerate_polygons_are_removed(tmp_path):
    annotation = _annotation(1, 1, 3, [10, 10, 8, 8])
    annotation["segmentation"] = [[1, 1, 2, 2], annotation["segmentation"][0]]  # 2 points: not a polygon
    json_path = _write_dataset(tmp_path, [annotation])
    record = roidb_lib.load_coco_roidb(json_path, tmp_path, with_masks=True).records[0]
    mask = mask_util.decode({"size": [HEIGHT, WIDTH], "counts": record.mask_rles[0]})
    assert mask.sum() == 64 and mask[1, 1] == 0


def test_segmentation_of_wrong_size_is_an_error(tmp_path):
    rle = mask_util.encode(np.zeros((10, 10), np.uint8, order="F"))
    segmentation = {"size": [10, 10], "counts": rle["counts"].decode()}
    annotation = {**_annotation(1, 1, 3, [1, 1, 5, 5]), "segmentation": segmentation}
    json_path = _write_dataset(tmp_path, [annotation])
    with pytest.raises(ValueError, match="RLE 'size' \\[10, 10\\] is not the image's"):
        roidb_lib.load_coco_roidb(json_path, tmp_path, with_masks=True)


def test_missing_files_are_clear_errors(dataset, tmp_path):
    json_path, image_dir = dataset
    (image_dir / "1.jpg").unlink()
    with pytest.raises(FileNotFoundError, match=r"image id 1 \(1.jpg\): .*1.jpg not found"):
        roidb_lib.load_coco_roidb(json_path, image_dir)
    with pytest.raises(FileNotFoundError, match="annotation file"):
        roidb_lib.load_coco_roidb(tmp_path / "nope.json", image_dir)


def test_keypoints_required_without_keypoints_is_an_error(tmp_path):
    json_path = _write_dataset(tmp_path, [_annotation(1, 1, 3, [1, 1, 5, 5])], categories=[{"id": 3, "name": "x"}])
    with pytest.raises(ValueError, match="keypoints are required"):
        roidb_lib.load_coco_roidb(json_path, tmp_path, keypoints_required=True)


def test_concatenation_checks_categories(dataset, tmp_path):
    json_path, image_dir = dataset
    roidb = roidb_lib.load_coco_roidb(json_path, image_dir)
    both = roidb_lib.concatenate_roidbs([roidb, roidb])
    assert len(both.records) == 2 and both.num_skipped == 6
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = _write_dataset(other_dir, [_annotation(1, 1, 3, [1, 1, 5, 5])], categories=[{"id": 3, "name": "x"}])
    with pytest.raises(ValueError, match="different categories"):
        roidb_lib.concatenate_roidbs([roidb, roidb_lib.load_coco_roidb(other, other_dir)])


def test_training_roidb_reads_the_catalog(tmp_path, monkeypatch):
    from tfdet.config import load_config
    from tfdet.data import shapes

    monkeypatch.setenv("TFDET_DATA_DIR", str(tmp_path))
    monkeypatch.setitem(shapes.SPLITS, "shapes_train", shapes.SplitSpec(num_images=4, seed=0, image_size=64))
    monkeypatch.setitem(shapes.SPLITS, "shapes_val", shapes.SplitSpec(num_images=3, seed=1, image_size=64))
    cfg = load_config(
        None, {"TRAIN.DATASETS": ("shapes_train", "shapes_val"), "MODEL.MASK_ON": True, "MODEL.NUM_CLASSES": 4}
    )
    roidb = roidb_lib.training_roidb(cfg)
    assert len(roidb.records) + roidb.num_skipped == 7
    assert roidb.class_names == ("__background__", "square", "circle", "triangle")
    assert all(len(r.mask_rles) == len(r.classes) for r in roidb.records)
    with pytest.raises(ValueError, match="TRAIN.DATASETS"):
        roidb_lib.training_roidb(load_config(None, {}))


# ---- Detectron's polygon rule: >= 6 coordinates, no parity test ---------------------------------------------------


def detectron_polygon_mask(segmentation, height, width):
    """Detectron's path from a json polygon list to a mask, restated from its source: json_dataset's
    `_add_gt_annotations` keeps `[p for p in obj['segmentation'] if len(p) >= 6]`, and segms.polys_to_mask
    rasterises them with pycocotools (frPyObjects, decode, sum over the polygons, > 0)."""
    polygons = [p for p in segmentation if len(p) >= 6]
    masks = mask_util.decode(mask_util.frPyObjects(polygons, HEIGHT, WIDTH))
    return (masks.astype(np.float32).sum(axis=2) > 0).astype(np.uint8)


def _masks_and_warnings(tmp_path, segmentations, caplog):
    """The roidb's masks of one object per segmentation (all on image 1), and the warnings logged."""
    annotations = [
        {**_annotation(i + 1, 1, 3, [2, 2, 40, 40]), "segmentation": segmentation}
        for i, segmentation in enumerate(segmentations)
    ]
    json_path = _write_dataset(tmp_path, annotations)
    with caplog.at_level(logging.WARNING, logger="tfdet.data.roidb"):
        record = roidb_lib.load_coco_roidb(json_path, tmp_path, with_masks=True).records[0]
    masks = [mask_util.decode({"size": [HEIGHT, WIDTH], "counts": rle}) for rle in record.mask_rles]
    return masks, [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING], json_path


def test_a_polygon_of_7_coordinates_is_its_first_3_points(tmp_path, caplog):
    triangle_and_a_stray_x = [5, 5, 35, 8, 12, 30, 44]
    masks, warnings, _ = _masks_and_warnings(tmp_path, [[triangle_and_a_stray_x]], caplog)
    first_six = mask_util.decode(mask_util.frPyObjects([triangle_and_a_stray_x[:6]], HEIGHT, WIDTH))[..., 0]
    assert first_six.sum() > 100  # a real triangle, not an empty mask
    np.testing.assert_array_equal(masks[0], first_six)
    np.testing.assert_array_equal(masks[0], detectron_polygon_mask([triangle_and_a_stray_x], HEIGHT, WIDTH))
    assert warnings == []  # nothing dropped


def test_polygons_under_6_coordinates_are_dropped_and_counted(tmp_path, caplog):
    square = [10, 10, 30, 10, 30, 30, 10, 30]
    odd_triangle = [32, 2, 44, 2, 38, 9, 1]
    segmentations = [
        [[1, 1, 4, 4], square],  # a 4-coordinate polygon, then a square
        [odd_triangle, [40, 40, 45, 41, 42], square[:6], [3, 3]],  # mixed: 7, 5, 6 and 2 coordinates
        [square, odd_triangle],
    ]
    masks, warnings, json_path = _masks_and_warnings(tmp_path, segmentations, caplog)
    for mask, segmentation in zip(masks, segmentations):
        np.testing.assert_array_equal(mask, detectron_polygon_mask(segmentation, HEIGHT, WIDTH))
    square_mask = detectron_polygon_mask([square], HEIGHT, WIDTH)
    np.testing.assert_array_equal(masks[0], square_mask)
    assert masks[2].sum() > square_mask.sum()  # the odd-length triangle adds its pixels
    assert warnings == [
        f"{json_path}: dropped 3 polygon(s) of fewer than 6 coordinates (3 points), as Detectron does (the first "
        "in annotation id 1)"
    ]


# ---- the check reads every listed file's signature, as OpenCV picks a decoder --------------------------------------

DECODABLE = ("jpg", "png", "bmp", "tif", "webp", "ppm", "pgm", "jp2")


def _image_dataset(tmp_path, names):
    """A json listing `names` (one object each), and a real 64 x 64 picture written by cv2 under each name."""
    picture = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    images = [{"id": i + 1, "file_name": name, "height": 64, "width": 64} for i, name in enumerate(names)]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        assert cv2.imwrite(str(tmp_path / name), picture[..., 0] if name.endswith(".pgm") else picture)
    annotations = [_annotation(i + 1, i + 1, 3, [5, 5, 20, 20]) for i in range(len(names))]
    path = tmp_path / "annotations.json"
    categories = [{"id": 3, "name": "three"}]
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def _opencv_decodes(path):
    """Whether training's decoder (cv2.imdecode, IMREAD_COLOR) reads the file."""
    try:
        return read_image(path).shape == (64, 64, 3)
    except UnreadableImage:
        return False


def test_files_opencv_decodes_are_accepted(tmp_path):
    names = [f"picture.{ext}" for ext in DECODABLE]
    json_path = _image_dataset(tmp_path, names)
    assert all(_opencv_decodes(tmp_path / name) for name in names)
    roidb = roidb_lib.load_coco_roidb(json_path, tmp_path)
    assert [pathlib.Path(r.file_path).name for r in roidb.records] == names


@pytest.mark.parametrize(
    "content",
    [b"", b"not an image, only a name ending in .jpg\n", b"\x89PNG"],
    ids=["empty file", "text file", "truncated PNG signature"],
)
def test_files_opencv_cannot_decode_are_refused_in_one_line(tmp_path, content):
    names = ["good.png", "a/bad.jpg", "worse.jpg", "fine.tif"]
    json_path = _image_dataset(tmp_path, names)
    for name in ("a/bad.jpg", "worse.jpg"):
        (tmp_path / name).write_bytes(content)
        assert not _opencv_decodes(tmp_path / name)
    with pytest.raises(DatasetError) as error:
        roidb_lib.load_coco_roidb(json_path, tmp_path)
    assert str(error.value) == (
        f"{json_path}: image id 2 (a/bad.jpg): {tmp_path / 'a/bad.jpg'} is not an image OpenCV can decode (its "
        "first bytes match no format OpenCV reads) (and 1 more of its 4 images)"
    )
    with pytest.raises(DatasetError, match=r"image id 2 \(a/bad.jpg\)"):
        check_evaluation_dataset(DatasetSpec("bad", tmp_path, json_path))
    assert len(roidb_lib.load_coco_roidb(json_path, tmp_path, check_files=False).records) == 4


# ---- number checks: a fast path for plain numbers, exact for the rest ---------------------------------------------


@pytest.mark.parametrize(
    "polygon, problem",
    [
        ([10, 10, 30, 10, True, 30], "not of polygons"),
        ([10, 10, 30, 10, float("nan"), 30], "not of polygons"),
        ([10, 10, 30, 10, float("inf"), 30], "not of polygons"),
        ([10, 10, 30, 10, None, 30], "not of polygons"),
        ([1e308, 10, 1e308, 30, 10, 30], None),  # finite, though their sum overflows
    ],
    ids=["bool", "NaN", "Infinity", "null", "huge but finite"],
)
def test_polygon_numbers(tmp_path, polygon, problem):
    annotation = {**_annotation(1, 1, 3, [2, 2, 30, 30]), "segmentation": [polygon]}
    json_path = _write_dataset(tmp_path, [annotation])
    if problem is None:
        assert len(roidb_lib.load_coco_roidb(json_path, tmp_path).records) == 1
        return
    with pytest.raises(DatasetError, match=rf"^{json_path}: annotation id 1 \(image id 1, 1.jpg\): .*{problem}"):
        roidb_lib.load_coco_roidb(json_path, tmp_path)


def test_bbox_numbers(tmp_path):
    json_path = _write_dataset(tmp_path, [_annotation(1, 1, 3, [2, 2, 30, False])])
    with pytest.raises(DatasetError, match=r"'bbox' must be \[x, y, width, height\], got \[2, 2, 30, False\]"):
        roidb_lib.load_coco_roidb(json_path, tmp_path)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cyclic_collector_is_left_as_it_was(dataset, enabled):
    json_path, image_dir = dataset
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        roidb_lib.load_coco_roidb(json_path, image_dir)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
