"""python -m tfdet.data.convert on small hand-made inputs (support/dataset_sources.py): Cityscapes gtFine
(instanceIds png + polygons json), Foggy Cityscapes, Sim10k (VOC xml) and KITTI (label txt). Expected values
are worked out by hand from the fork's converters (`tools/cityscapes/convert_cityscapes_to_coco.py`,
`..._caronly_coco.py`, `convert_foggy_cityscapes_to_coco.py`, `tools/kitti/convert_kitti_to_coco.py`) and the
fork's VOC reader; every json is read back with pycocotools; a malformed input is refused naming its file, with
nothing written."""

import contextlib
import io
import json

import cv2
import numpy as np
import pytest
from pycocotools.coco import COCO

from support.dataset_sources import (
    KITTI_LABELS,
    VAL_OBJECTS,
    H,
    W,
    run,
    voc_xml,
    write_gtfine,
    write_kitti,
    write_sim10k,
)

CITYSCAPES_CATEGORIES = [
    {"id": 1, "name": "person"}, {"id": 2, "name": "rider"}, {"id": 3, "name": "car"}, {"id": 4, "name": "truck"},
    {"id": 5, "name": "bus"}, {"id": 6, "name": "train"}, {"id": 7, "name": "motorcycle"}, {"id": 8, "name": "bicycle"},
]  # fmt: skip


def border(y0, y1, x0, x1):
    """The (x, y) pixels on a rectangle's border: what CHAIN_APPROX_NONE lists for its outer contour."""
    return {(x, y) for x in range(x0, x1 + 1) for y in range(y0, y1 + 1) if x in (x0, x1) or y in (y0, y1)}


def points(polygon):
    return set(zip(polygon[0::2], polygon[1::2]))


def loaded(path):
    """The json at `path`, after pycocotools has indexed it."""
    with contextlib.redirect_stdout(io.StringIO()):
        COCO(str(path))
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    source = write_gtfine(tmp_path_factory.mktemp("cityscapes"))
    root = tmp_path_factory.mktemp("root")
    command = ["cityscapes", "--gtfine", source / "gtFine", "--images", source / "leftImg8bit", "--data-root", root]
    assert run(*command)[0] == 0
    assert run("foggy-cityscapes", "--gtfine", source / "gtFine", "--images", source / "leftImg8bit_foggy",
               "--data-root", root)[0] == 0  # fmt: skip
    return source, root


def test_cityscapes_instances_field_by_field(converted):
    _, root = converted
    val = loaded(root / "cityscapes" / "annotations" / "instancesonly_filtered_gtFine_val.json")
    train = loaded(root / "cityscapes" / "annotations" / "instancesonly_filtered_gtFine_train.json")
    assert val["categories"] == train["categories"] == CITYSCAPES_CATEGORIES
    assert val["images"] == [{"id": 0, "width": W, "height": H, "file_name": "aachen_000000_000019_leftImg8bit.png",
                              "seg_file_name": "aachen_000000_000019_gtFine_instanceIds.png"}]  # fmt: skip
    assert [image["id"] for image in train["images"]] == [1]  # ids count on from val to train, as the converter's
    # Objects in increasing pixel value: person 24001, rider 25000, car 26000 (caravan, group, 1-pixel bicycle out).
    person, rider, car = val["annotations"]
    assert [(a["id"], a["image_id"], a["category_id"], a["iscrowd"]) for a in (person, rider, car)] == [
        (0, 0, 1, 0), (1, 0, 2, 0), (2, 0, 3, 0)
    ]  # fmt: skip
    assert car["bbox"] == [20.0, 10.0, 20.0, 10.0] and car["area"] == 200
    assert person["bbox"] == [5.0, 30.0, 5.0, 10.0] and person["area"] == 50
    assert rider["bbox"] == [50.0, 2.0, 11.0, 40.0] and rider["area"] == 9 + 12
    assert len(car["segmentation"]) == 1 and points(car["segmentation"][0]) == border(10, 19, 20, 39)
    pieces = sorted(sorted(points(polygon)) for polygon in rider["segmentation"])
    assert pieces == sorted(sorted(border(*rectangle)) for rectangle in VAL_OBJECTS[2][1])
    (train_car,) = train["annotations"]
    assert (train_car["id"], train_car["image_id"], train_car["category_id"]) == (3, 1, 3)
    assert train_car["bbox"] == [10.0, 5.0, 41.0, 26.0] and train_car["area"] == 41 * 26


def test_cityscapes_car_only_and_foggy(converted):
    _, root = converted
    cars = loaded(root / "cityscapes" / "annotations" / "caronly_filtered_gtFine_val.json")
    assert cars["categories"] == [{"id": 1, "name": "car"}]
    assert [(a["id"], a["image_id"], a["category_id"], a["bbox"]) for a in cars["annotations"]] == [
        (0, 0, 1, [20.0, 10.0, 20.0, 10.0])
    ]  # fmt: skip
    train_cars = loaded(root / "cityscapes" / "annotations" / "caronly_filtered_gtFine_train.json")
    assert [(a["id"], a["image_id"]) for a in train_cars["annotations"]] == [(1, 1)]
    instances = json.loads((root / "cityscapes" / "annotations" / "instancesonly_filtered_gtFine_val.json").read_text())
    foggy = loaded(root / "foggy_cityscapes" / "annotations" / "foggy_instancesonly_filtered_gtFine_val.json")
    assert foggy["annotations"] == instances["annotations"] and foggy["categories"] == instances["categories"]
    assert foggy["images"][0]["file_name"] == "aachen_000000_000019_leftImg8bit_foggy_beta_0.02.png"
    assert not (root / "foggy_cityscapes" / "annotations" / "foggy_instancesonly_filtered_gtFine_test.json").exists()


def test_images_are_linked_where_the_catalog_looks(converted, monkeypatch):
    source, root = converted
    monkeypatch.setenv("TFDET_DATA_DIR", str(root))
    from tfdet.data.catalog import get_dataset

    spec = get_dataset("foggy_cityscapes_fine_instanceonly_seg_val_cocostyle")
    linked = spec.image_dir / "aachen_000000_000019_leftImg8bit_foggy_beta_0.02.png"
    assert linked.resolve() == (source / "leftImg8bit_foggy" / "val" / "aachen" / linked.name).resolve()
    assert get_dataset("cityscapes_car_train_cocostyle").image_dir == root / "cityscapes" / "images"
    # Converting again finds the links in place.
    command = ["cityscapes", "--gtfine", source / "gtFine", "--images", source / "leftImg8bit", "--data-root", root]
    assert run(*command)[0] == 0


@pytest.mark.parametrize(
    "breakage, named",
    [
        (lambda gt: (gt / "val/aachen/aachen_000000_000019_gtFine_polygons.json").write_text('{"imgHeight": 48}'),
         "aachen_000000_000019_gtFine_polygons.json"),
        (lambda gt: cv2.imwrite(str(gt / "train/bochum/bochum_000000_000313_gtFine_instanceIds.png"),
                                np.zeros((H, W + 1), np.uint16)),
         "bochum_000000_000313_gtFine_instanceIds.png"),
        (lambda gt: cv2.imwrite(str(gt / "train/bochum/bochum_000000_000313_gtFine_instanceIds.png"),
                                np.full((H, W), 60000, np.uint16)),  # label id 60: Cityscapes has 0..33
         "bochum_000000_000313_gtFine_instanceIds.png"),
    ],
    ids=["no_width", "wrong_size", "unknown_label"],
)  # fmt: skip
def test_malformed_gtfine_is_refused_naming_the_file(tmp_path, breakage, named):
    source = write_gtfine(tmp_path / "cityscapes")
    breakage(source / "gtFine")
    status, error = run("cityscapes", "--gtfine", source / "gtFine", "--images", source / "leftImg8bit",
                        "--data-root", tmp_path / "root")  # fmt: skip
    assert status == 2 and error.startswith("error: ") and named in error, error
    assert not (tmp_path / "root").exists()  # nothing half-written


def test_a_conflicting_image_stops_the_conversion_before_any_json(tmp_path):
    source = write_gtfine(tmp_path / "cityscapes")
    images = tmp_path / "root" / "cityscapes" / "images"
    images.mkdir(parents=True)
    (images / "bochum_000000_000313_leftImg8bit.png").write_bytes(b"another image")
    status, error = run("cityscapes", "--gtfine", source / "gtFine", "--images", source / "leftImg8bit",
                        "--data-root", tmp_path / "root")  # fmt: skip
    assert status == 2 and "bochum_000000_000313_leftImg8bit.png exists and is not" in error, error
    assert sorted(path.name for path in (tmp_path / "root").rglob("*")) == ["bochum_000000_000313_leftImg8bit.png",
                                                                           "cityscapes", "images"]  # fmt: skip


def test_kitti_cars_field_by_field(tmp_path):
    source = write_kitti(tmp_path / "kitti", KITTI_LABELS)
    assert run("kitti", "--kitti", source, "--data-root", tmp_path / "root")[0] == 0
    dataset = loaded(tmp_path / "root" / "kitti" / "annotations" / "caronly_training.json")
    assert dataset["categories"] == [{"id": 1, "name": "Car"}]
    assert dataset["images"] == [
        {"id": 0, "width": 100, "height": 30, "file_name": "000000.png", "seg_file_name": "000000.txt"},
        {"id": 1, "width": 124, "height": 37, "file_name": "000001.png", "seg_file_name": "000001.txt"},
    ]
    first, second = dataset["annotations"]
    assert first == {"id": 0, "image_id": 0, "segmentation": [], "category_id": 1, "iscrowd": 0,
                     "bbox": [587.01, 173.33, 614.12 - 587.01 + 1, 200.12 - 173.33 + 1],
                     "area": (614.12 - 587.01 + 1) * (200.12 - 173.33 + 1)}  # fmt: skip
    assert second["bbox"] == [0.0, 192.37, 403.31, 374.0 - 192.37 + 1] and second["id"] == 1
    linked = tmp_path / "root" / "kitti" / "training" / "image_2"
    assert linked.resolve() == (source / "training" / "image_2").resolve()


def test_malformed_kitti_label_is_refused_naming_file_and_line(tmp_path):
    source = write_kitti(tmp_path / "kitti", KITTI_LABELS + "Car 0.00 0 -1.58 587.01 oops 614.12 200.12\n")
    status, error = run("kitti", "--kitti", source, "--data-root", tmp_path / "root")
    assert status == 2 and "000000.txt, line 6" in error, error
    assert not (tmp_path / "root").exists()


def test_sim10k_cars_field_by_field(tmp_path):
    objects = [("car", 0, (815, 536, 912, 600)), ("motorbike", 0, (1, 2, 30, 40)), ("car", 1, (5, 5, 9, 9)),
               ("car", 0, (1, 1, 1914, 1052))]  # fmt: skip
    source = write_sim10k(tmp_path / "sim10k", voc_xml(objects))
    assert run("sim10k", "--sim10k", source, "--data-root", tmp_path / "root")[0] == 0
    dataset = loaded(tmp_path / "root" / "sim10k" / "car_instances.json")
    assert dataset["categories"] == [{"id": 1, "name": "car"}]
    assert dataset["images"] == [{"id": 0, "width": 1914, "height": 1052, "file_name": "3384645.jpg"}]
    # VOC's 1-based inclusive corners: x = xmin - 1, w = xmax - xmin + 1; the motorbike and the difficult car out.
    assert [(a["id"], a["bbox"], a["area"]) for a in dataset["annotations"]] == [
        (0, [814.0, 535.0, 98.0, 65.0], 98.0 * 65.0), (1, [0.0, 0.0, 1914.0, 1052.0], 1914.0 * 1052.0)
    ]  # fmt: skip
    assert {a["category_id"] for a in dataset["annotations"]} == {1}


def test_malformed_sim10k_xml_is_refused_naming_the_file(tmp_path):
    source = write_sim10k(tmp_path / "sim10k", voc_xml([("car", 0, (1, 2, "x", 4))]))
    status, error = run("sim10k", "--sim10k", source, "--data-root", tmp_path / "root")
    assert status == 2 and "3384645.xml" in error and "<xmax>" in error, error
    (source / "Annotations" / "3384645.xml").write_text("<annotation><object>")
    status, error = run("sim10k", "--sim10k", source, "--data-root", tmp_path / "root")
    assert status == 2 and "3384645.xml" in error, error
    assert not (tmp_path / "root").exists()
