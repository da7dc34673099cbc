"""The synthetic shapes dataset (real COCO json read back with pycocotools) and the dataset catalog."""

import json
import subprocess
import sys

import cv2
import numpy as np
import pycocotools.mask as mask_util
import pytest
from pycocotools.coco import COCO

from tfdet.data import catalog, shapes

NUM_IMAGES = 48


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    out = tmp_path_factory.mktemp("shapes")
    json_path = shapes.generate(out, NUM_IMAGES, seed=7, image_size=160, split_name="val")
    return json_path, COCO(str(json_path))


def test_same_seed_same_files_and_any_count(tmp_path):
    a = shapes.generate(tmp_path / "a", 4, seed=3, image_size=96, split_name="s")
    b = shapes.generate(tmp_path / "b", 6, seed=3, image_size=96, split_name="s")
    c = shapes.generate(tmp_path / "c", 4, seed=4, image_size=96, split_name="s")
    data_a, data_b, data_c = (json.loads(p.read_text()) for p in (a, b, c))
    assert data_a["images"] == data_b["images"][:4]
    assert data_a["annotations"] == [x for x in data_b["annotations"] if x["image_id"] <= 4]
    for name in ("s_000000.jpg", "s_000003.jpg"):
        assert (tmp_path / "a/s" / name).read_bytes() == (tmp_path / "b/s" / name).read_bytes()
    assert data_a["annotations"] != data_c["annotations"]


def test_json_is_coco_with_shared_keypoint_schema(split):
    _, coco = split
    cats = coco.loadCats(coco.getCatIds())
    assert [(c["id"], c["name"]) for c in cats] == [(1, "square"), (2, "circle"), (3, "triangle")]
    for c in cats:
        assert c["keypoints"] == list(shapes.KEYPOINT_NAMES)
        assert all(1 <= i <= len(shapes.KEYPOINT_NAMES) for edge in c["skeleton"] for i in edge)
    assert len(coco.getImgIds()) == NUM_IMAGES
    assert len(coco.getAnnIds()) > NUM_IMAGES  # 1..5 shapes per image, rarely none
    for image in coco.loadImgs(coco.getImgIds()):
        assert (image["height"], image["width"]) == (160, 160)


def test_bbox_and_area_are_the_decoded_masks(split):
    _, coco = split
    for ann in coco.loadAnns(coco.getAnnIds()):
        mask = coco.annToMask(ann)
        rows, cols = np.nonzero(mask)
        tight = [cols.min(), rows.min(), cols.max() - cols.min() + 1, rows.max() - rows.min() + 1]
        assert ann["bbox"] == pytest.approx(tight)
        assert ann["area"] == mask.sum()
        assert ann["iscrowd"] == 0


def test_later_shapes_cut_earlier_masks(split):
    _, coco = split
    kinds = set()
    for image_id in coco.getImgIds():
        anns = coco.loadAnns(coco.getAnnIds(imgIds=image_id))
        if anns:
            coverage = np.sum([coco.annToMask(a) for a in anns], axis=0)
            assert coverage.max() == 1  # visible masks of one image never overlap
        for ann in anns:
            kinds.add(type(ann["segmentation"]))
            if isinstance(ann["segmentation"], list):  # unoccluded: the polygon is the whole shape
                assert len(ann["segmentation"]) == 1 and len(ann["segmentation"][0]) >= 6
    assert kinds == {list, dict}  # some shapes occluded (RLE), others whole (polygons)


def test_keypoints_labelled_inside_their_box(split):
    _, coco = split
    visibilities = []
    for ann in coco.loadAnns(coco.getAnnIds()):
        kps = np.array(ann["keypoints"], np.float64).reshape(-1, 3)
        assert kps.shape == (len(shapes.KEYPOINT_NAMES), 3)
        x, y, w, h = ann["bbox"]
        labelled = kps[:, 2] > 0
        assert ann["num_keypoints"] == labelled.sum()
        # keypoints lie on the polygon outline: within 1 px of the rasterised box
        assert np.all((kps[labelled, 0] >= x - 1) & (kps[labelled, 0] <= x + w + 1))
        assert np.all((kps[labelled, 1] >= y - 1) & (kps[labelled, 1] <= y + h + 1))
        assert np.all(kps[~labelled, :2] == 0)
        visibilities += list(kps[:, 2])
    assert set(visibilities) <= {0, 1, 2} and 2 in visibilities and 1 in visibilities


def test_flip_map_matches_names_and_geometry(split):
    names = shapes.KEYPOINT_NAMES
    flip = shapes.keypoint_flip_map()
    assert flip == [(names.index("left"), names.index("right"))]
    _, coco = split
    left, right = flip[0]
    width = 160
    checked = 0
    for ann in coco.loadAnns(coco.getAnnIds()):
        kps = np.array(ann["keypoints"], np.float64).reshape(-1, 3)
        if kps[left, 2] and kps[right, 2]:
            assert kps[left, 0] < kps[right, 0]
            flipped = kps.copy()
            flipped[:, 0] = width - kps[:, 0]
            flipped[[left, right]] = flipped[[right, left]]
            assert flipped[left, 0] < flipped[right, 0]  # after the swap, "left" is still on the left
            checked += 1
    assert checked > NUM_IMAGES


def test_triangle_and_square_keypoints_are_their_geometry():
    polygon, keypoints = shapes._triangle(10, 20, 40, apex_fraction=0.25, height_ratio=1.0)
    top, left, right, bottom, center = keypoints
    assert tuple(top) == (20, 20) and tuple(left) == (10, 60) and tuple(right) == (50, 60)
    assert tuple(bottom) == (30, 60) and center == pytest.approx(polygon.mean(axis=0))
    _, keypoints = shapes._square(0, 0, 10)
    assert keypoints.tolist() == [[5, 0], [0, 5], [10, 5], [5, 10], [5, 5]]


def test_polygon_mask_is_pycocotools_rasterisation():
    mask = shapes.polygon_mask(np.array([[2.0, 2.0], [6.0, 2.0], [6.0, 6.0], [2.0, 6.0]]), 10, 10)
    expected = np.zeros((10, 10), bool)
    expected[2:6, 2:6] = True
    np.testing.assert_array_equal(mask, expected)
    rle = mask_util.encode(np.asfortranarray(mask.astype(np.uint8)))
    assert list(mask_util.toBbox(rle)) == [2, 2, 4, 4]


def test_cli_writes_n_images(tmp_path):
    out = tmp_path / "cli"
    subprocess.run(
        [sys.executable, "-m", "tfdet.data.shapes", "--out", str(out), "--num", "3", "--seed", "2", "--split", "val",
         "--image-size", "64"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    assert sorted(p.name for p in (out / "val").iterdir()) == [f"val_{i:06d}.jpg" for i in range(3)]
    assert len(COCO(str(out / "val.json")).getImgIds()) == 3


def test_cli_rejects_negative_count(tmp_path):
    command = [sys.executable, "-m", "tfdet.data.shapes", "--out", str(tmp_path), "--num", "-1"]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode != 0 and "--num" in done.stderr


def test_ensure_split_generates_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setitem(shapes.SPLITS, "shapes_tiny", shapes.SplitSpec(num_images=2, seed=5, image_size=64))
    monkeypatch.setenv(catalog.DATA_DIR_ENV, str(tmp_path))
    spec = catalog.get_dataset("shapes_tiny")
    assert spec.annotation_file.is_relative_to(tmp_path / "shapes")
    assert len(list(spec.image_dir.glob("*.jpg"))) == 2
    stamp = spec.annotation_file.stat().st_mtime_ns
    assert shapes.ensure_split("shapes_tiny") == (spec.annotation_file, spec.image_dir)
    assert spec.annotation_file.stat().st_mtime_ns == stamp


def test_registered_splits():
    assert shapes.SPLITS["shapes_train"].num_images == 512 and shapes.SPLITS["shapes_val"].num_images == 64
    assert shapes.SPLITS["shapes_test"].num_images == shapes.SPLITS["shapes_target_test"].num_images == 1024
    assert [shapes.SPLITS[n].style for n in ("shapes_test", "shapes_target_test")] == ["plain", "foggy"]
    seeds = [spec.seed for spec in shapes.SPLITS.values()]
    assert len(set(seeds)) == len(seeds)  # every split holds other scenes


def test_catalog_uses_detectron_paths_under_the_data_root(tmp_path, monkeypatch):
    monkeypatch.setenv(catalog.DATA_DIR_ENV, str(tmp_path))
    (tmp_path / "coco/coco_val2014").mkdir(parents=True)
    (tmp_path / "coco/annotations").mkdir()
    (tmp_path / "coco/annotations/person_keypoints_minival2014.json").write_text("{}")
    spec = catalog.get_dataset("keypoints_coco_2014_minival")
    assert spec.image_dir == tmp_path / "coco/coco_val2014"
    assert spec.annotation_file == tmp_path / "coco/annotations/person_keypoints_minival2014.json"
    with pytest.raises(FileNotFoundError, match=r"instances_minival2014\.json.*TFDET_DATA_DIR"):
        catalog.get_dataset("coco_2014_minival")


def test_catalog_unknown_name_suggests_closest():
    with pytest.raises(KeyError, match="did you mean coco_2014_minival"):
        catalog.get_dataset("coco_2014_minval")
    assert {"coco_2017_val", "keypoints_coco_2017_train", "shapes_train", "shapes_val"} <= set(catalog.dataset_names())


# ---- the "foggy" target domain ---------------------------------------------------------------------------------


def test_foggy_split_is_deterministic_by_seed(tmp_path):
    paths = [shapes.generate(tmp_path / name, 3, seed=seed, image_size=96, split_name="t", style="foggy")
             for name, seed in (("a", 5), ("b", 5), ("c", 6))]  # fmt: skip
    assert paths[0].read_bytes() == paths[1].read_bytes()
    for index in range(3):
        name = f"t/t_{index:06d}.jpg"
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert (tmp_path / "a" / name).read_bytes() != (tmp_path / "c" / name).read_bytes()
    first, _ = shapes.render_image(5, 1, 96, style="foggy")
    again, _ = shapes.render_image(5, 1, 96, style="foggy")
    np.testing.assert_array_equal(first, again)


def test_foggy_split_has_the_plain_annotations(tmp_path):
    plain = json.loads(shapes.generate(tmp_path / "p", 6, seed=9, image_size=96, split_name="t").read_text())
    foggy_path = shapes.generate(tmp_path / "f", 6, seed=9, image_size=96, split_name="t", style="foggy")
    foggy = json.loads(foggy_path.read_text())
    assert foggy["annotations"] == plain["annotations"] and foggy["images"] == plain["images"]
    assert foggy["info"]["style"] == "foggy" and "style" not in plain["info"]
    assert foggy["info"]["version"] == shapes.GENERATOR_VERSION
    assert (tmp_path / "f/t/t_000000.jpg").read_bytes() != (tmp_path / "p/t/t_000000.jpg").read_bytes()


def _statistics(style, seed=8, count=8, size=128):
    """Per image: (per-channel std of the low-passed image, mean pixel std inside the eroded shape fills)."""
    low, fill = [], []
    for index in range(count):
        image, annotations = shapes.render_image(seed, index, size, style=style)
        image = image.astype(np.float32)
        smooth = cv2.GaussianBlur(image, (0, 0), 3)
        low.append(smooth.reshape(-1, 3).std(axis=0).mean())
        for ann in annotations:
            segmentation = ann["segmentation"]  # a polygon list, or an RLE with str counts
            if isinstance(segmentation, list):
                segmentation = mask_util.merge(mask_util.frPyObjects(segmentation, size, size))
            mask = mask_util.decode(segmentation)
            inner = cv2.erode(mask.astype(np.uint8), np.ones((7, 7), np.uint8)).astype(bool)
            if inner.sum() >= 50:
                fill.append(image[inner].std(axis=0).mean())
    return np.array(low), np.array(fill)


def test_foggy_lowers_contrast_and_adds_grain_to_flat_fills():
    """The intended shift: large-scale contrast (per channel) falls, flat shape fills get a grain texture."""
    plain_low, plain_fill = _statistics("plain")
    foggy_low, foggy_fill = _statistics("foggy")
    assert foggy_low.mean() < 0.6 * plain_low.mean()  # on average: a flat plain image gains the depth ramp
    assert len(plain_fill) >= 8 and plain_fill.mean() < 8  # plain fills: a flat colour + N(0, 6^2)
    assert foggy_fill.mean() > 3 * plain_fill.mean()
