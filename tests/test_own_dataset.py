"""One's own COCO-format dataset, named without editing tfdet: `coco:ANNOTATIONS.json:IMAGE_DIR`,
`tfdet.data.register_coco_dataset` and `$TFDET_DATA_DIR/datasets.yaml`; Detectron's category mapping (json
order, non-contiguous ids) there and back; one line naming the file and the entry for each kind of bad input.

The dataset is written here (not the shapes generator): a few tiny drawn images in sub-folders, categories with
non-contiguous ids listed out of order, image ids out of order."""

import copy
import json
import logging
import pathlib
import re

import cv2
import numpy as np
import pycocotools.mask as mask_util
import pytest
from pycocotools.coco import COCO

from tfdet.config import load_config
from tfdet.config.errors import ConfigWarning
from tfdet.data import catalog, register_coco_dataset, user_datasets
from tfdet.data.catalog import check_evaluation_dataset, get_dataset
from tfdet.data.coco_json import DatasetError
from tfdet.data.roidb import load_coco_roidb, training_roidb

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY_CONFIG = REPO_ROOT / "configs" / "shapes_tiny_mask_keypoint.yaml"

# Listed out of order, non-contiguous: Detectron numbers them as listed (kite 1, cup 2, sock 3).
CATEGORIES = [{"id": 17, "name": "kite"}, {"id": 4, "name": "cup"}, {"id": 9, "name": "sock"}]
# id, file_name (sub-folders), height, width
IMAGES = [(5, "a/one.jpg", 32, 40), (1, "b/c/two.png", 36, 48), (8, "a/three.jpg", 32, 40),
          (2, "b/empty.jpg", 32, 40), (3, "b/crowd_only.png", 32, 40)]  # fmt: skip
ANNOTATIONS_NAME = "coco:data/annotations/train.json:data/images"


def _box_polygon(x, y, w, h):
    return [[x, y, x + w, y, x + w, y + h, x, y + h]]


def _annotation(ann_id, image_id, category_id, bbox, **extra):
    x, y, w, h = bbox
    annotation = {"id": ann_id, "image_id": image_id, "category_id": category_id, "bbox": bbox,
                  "area": float(w * h), "iscrowd": 0, "segmentation": _box_polygon(x, y, w, h)}  # fmt: skip
    annotation.update(extra)
    return annotation


def _crowd_rle(height, width):
    mask = np.zeros((height, width), np.uint8)
    mask[5:13, 5:13] = 1
    rle = mask_util.encode(np.asfortranarray(mask))
    return {"size": [height, width], "counts": rle["counts"].decode("ascii")}


def good_dataset():
    """The COCO json content (a fresh copy each call)."""
    annotations = [
        _annotation(11, 5, 4, [2, 3, 10, 12]),
        _annotation(12, 5, 17, [20, 5, 15, 10]),
        _annotation(13, 1, 9, [30, 20, 25, 25]),  # partly outside the 48x36 image: clipped
        _annotation(14, 1, 17, [5, 5, 8, 8], iscrowd=1, segmentation=_crowd_rle(36, 48)),
        _annotation(15, 8, 4, [1, 1, 1, 12]),  # 1 px wide: dropped (x2 == x1)
        _annotation(16, 8, 9, [10, 10, 12, 12]),
        _annotation(17, 8, 17, [3, 3, 6, 6], ignore=1),  # dropped
        _annotation(18, 8, 4, [25, 2, 3, 3]),  # area 9: dropped below TRAIN.GT_MIN_AREA 10
        _annotation(19, 3, 9, [4, 4, 10, 10], iscrowd=1, segmentation=_crowd_rle(32, 40)),
    ]
    images = [{"id": i, "file_name": name, "height": h, "width": w} for i, name, h, w in IMAGES]
    return {"images": images, "annotations": annotations, "categories": copy.deepcopy(CATEGORIES)}


def detectron_json_to_contiguous(categories):
    """Detectron's json_dataset: `category_ids = COCO.getCatIds()` (the json's `categories` as listed, which
    pycocotools returns unsorted) and `json_category_id_to_contiguous_id = {v: i + 1 ...}`."""
    return {category["id"]: i + 1 for i, category in enumerate(categories)}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A working folder holding data/annotations/train.json and data/images/<sub-folders>/<images>."""
    root = tmp_path_factory.mktemp("own")
    for image_id, name, height, width in IMAGES:
        path = root / "data" / "images" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        picture = np.full((height, width, 3), 40 + 30 * (image_id % 5), np.uint8)
        cv2.rectangle(picture, (2, 3), (11, 14), (200, 60, 30), -1)
        cv2.circle(picture, (width - 10, height - 10), 6, (20, 220, 90), -1)
        assert cv2.imwrite(str(path), picture)
    (root / "data" / "annotations").mkdir()
    (root / "data" / "annotations" / "train.json").write_text(json.dumps(good_dataset()))
    return root


@pytest.fixture
def in_work(work, monkeypatch, tmp_path):
    """Run in the working folder (coco: paths are relative to it), with an empty data root of the test's own."""
    monkeypatch.chdir(work)
    monkeypatch.setenv("TFDET_DATA_DIR", str(tmp_path / "data_root"))
    return work


@pytest.fixture
def registry():
    """Forget the names a test registers."""
    before = set(user_datasets.registered_datasets())
    yield
    for name in set(user_datasets.registered_datasets()) - before:
        user_datasets.unregister(name)


def _cfg(datasets, **overrides):
    return load_config(None, {"TRAIN.DATASETS": tuple(datasets), "MODEL.NUM_CLASSES": 4, **overrides})


# ---- naming ----------------------------------------------------------------------------------------------------


def test_coco_name_loads_with_detectrons_category_mapping(in_work, caplog):
    with caplog.at_level(logging.INFO, logger="tfdet.data.roidb"):
        roidb = training_roidb(_cfg([ANNOTATIONS_NAME], **{"TRAIN.GT_MIN_AREA": 10, "MODEL.MASK_ON": True}))
    expected = detectron_json_to_contiguous(CATEGORIES)
    assert expected == {17: 1, 4: 2, 9: 3}
    assert roidb.json_category_ids == (17, 4, 9)
    assert {j: c + 1 for c, j in enumerate(roidb.json_category_ids)} == expected
    assert roidb.class_names == ("__background__", "kite", "cup", "sock")
    # images by id (1, 5, 8; 2 has no annotation, 3 only a crowd region); files in their sub-folders
    assert [r.image_id for r in roidb.records] == [1, 5, 8]
    assert [pathlib.Path(r.file_path) for r in roidb.records] == [
        pathlib.Path("data/images/b/c/two.png"), pathlib.Path("data/images/a/one.jpg"),
        pathlib.Path("data/images/a/three.jpg")]  # fmt: skip
    kept = {1: [(13, 9), (14, 17)], 5: [(11, 4), (12, 17)], 8: [(16, 9)]}  # image id: (annotation id, json id)
    for record in roidb.records:
        np.testing.assert_array_equal(record.classes, [expected[j] for _, j in kept[record.image_id]])
    np.testing.assert_array_equal(roidb.records[0].boxes[0], [30, 20, 47, 35])  # clipped to 48x36
    np.testing.assert_array_equal(roidb.records[0].is_crowd, [False, True])
    assert roidb.num_skipped == 2
    # one line with the count of each of Detectron's filters
    lines = [r.getMessage() for r in caplog.records if r.name == "tfdet.data.roidb"]
    assert len(lines) == 1
    assert (
        "train.json: 6 objects kept (2 crowd), dropped 1 below TRAIN.GT_MIN_AREA, 1 ignore 1, "
        "1 zero area or under 2 px after clipping; filtered 2 images without usable annotations "
        "(2 images without a non-crowd object, 0 images without a visible keypoint): 5 -> 3"
    ) == lines[0]


def test_results_map_contiguous_ids_back_to_the_jsons(in_work):
    from tfdet.data.coco_classes import model_categories
    from tfdet.evaluation.results import contiguous_to_json_ids, detections_to_coco

    json_path = in_work / "data/annotations/train.json"
    coco = COCO(str(json_path))
    detections = {"boxes": np.array([[1, 1, 5, 5]] * 3, np.float32), "scores": np.array([0.9, 0.8, 0.7]),
                  "classes": np.array([1, 2, 3])}  # fmt: skip
    entries = detections_to_coco(detections, 5, contiguous_to_json_ids(coco))
    assert [e["category_id"] for e in entries] == [17, 4, 9]
    roidb = load_coco_roidb(json_path, in_work / "data/images")
    assert contiguous_to_json_ids(coco) == [0, *roidb.json_category_ids]
    # the class names inference and export use agree with the training set's
    categories = model_categories(4, dataset_json=str(json_path))
    assert categories.json_ids == (0, 17, 4, 9) and tuple(categories.names) == roidb.class_names


def test_evaluate_a_results_file_on_a_coco_name(in_work, capsys):
    from tfdet.evaluate import main

    data = good_dataset()
    results = [{"image_id": a["image_id"], "category_id": a["category_id"], "bbox": a["bbox"], "score": 1.0}
               for a in data["annotations"] if not a["iscrowd"]]  # fmt: skip
    results_path = in_work / "perfect.json"
    results_path.write_text(json.dumps(results))
    out = in_work / "eval_out"
    assert main(["--results", str(results_path), "--dataset", ANNOTATIONS_NAME, "--output", str(out)]) == 0
    assert "COCO bbox AP 1.0000" in capsys.readouterr().out
    metrics = json.loads((out / "metrics_coco_data_annotations_train.json_data_images.json").read_text())
    assert metrics["bbox"]["AP"] == 1.0
    # the same results under other category ids are refused, not silently scored
    for entry in results:
        entry["category_id"] = {17: 1, 4: 2, 9: 3}[entry["category_id"]]
    results_path.write_text(json.dumps(results))
    assert main(["--results", str(results_path), "--dataset", ANNOTATIONS_NAME, "--output", str(out)]) == 2
    assert "categories not in the annotations" in capsys.readouterr().err


def test_register_coco_dataset(in_work, registry):
    register_coco_dataset("my_train", "data/annotations/train.json", "data/images")
    spec = get_dataset("my_train")
    assert spec.annotation_file == in_work / "data/annotations/train.json" and spec.image_dir.is_dir()
    assert "my_train" in catalog.dataset_names()
    register_coco_dataset("my_train", in_work / "data/annotations/train.json", in_work / "data/images")  # same
    roidb = training_roidb(_cfg(["my_train"]))
    assert roidb.json_category_ids == (17, 4, 9) and len(roidb.records) == 3
    with pytest.raises(ValueError, match="'my_train' is already registered with .*train.json"):
        register_coco_dataset("my_train", "data/annotations/train.json", "data")
    with pytest.raises(ValueError, match="'coco_2014_train' is the name of a built-in dataset"):
        register_coco_dataset("coco_2014_train", "data/annotations/train.json", "data/images")
    with pytest.raises(ValueError, match="must be letters, digits"):
        register_coco_dataset("a:b", "data/annotations/train.json", "data/images")
    with pytest.raises(KeyError, match="did you mean my_train"):
        get_dataset("my_trian")
    register_coco_dataset("my_gone", "data/nothing.json", "data/images")
    with pytest.raises(FileNotFoundError, match="dataset 'my_gone': annotation file .*nothing.json not found"):
        get_dataset("my_gone")


def test_datasets_yaml(in_work, registry):
    root = catalog.data_root()
    (root / "mine").mkdir(parents=True)
    (root / "mine" / "train.json").write_text(json.dumps(good_dataset()))
    (root / "mine" / "images").symlink_to(in_work / "data" / "images")
    catalog_file = root / "datasets.yaml"
    catalog_file.write_text(
        "mine_train:\n  annotations: mine/train.json\n  images: mine/images\n"
        f"mine_abs: {{annotations: {in_work / 'data/annotations/train.json'}, images: {in_work / 'data/images'}}}\n"
    )
    spec = get_dataset("mine_train")
    assert spec.annotation_file == root / "mine" / "train.json" and spec.image_dir == root / "mine" / "images"
    assert get_dataset("mine_abs").annotation_file == in_work / "data/annotations/train.json"
    assert {"mine_train", "mine_abs", "shapes_train"} <= set(catalog.dataset_names())
    assert training_roidb(_cfg(["mine_train", "mine_abs"])).json_category_ids == (17, 4, 9)
    with pytest.raises(KeyError, match=r"did you mean mine_train.*coco:ANNOTATIONS.json:IMAGE_DIR"):
        get_dataset("mine_trian")
    # registered in this process too, with other paths: named both, never one silently
    register_coco_dataset("mine_train", "data/annotations/train.json", "data/images")
    both = f"registered with register_coco_dataset .* and listed in {re.escape(str(catalog_file))}"
    with pytest.raises(ValueError, match=both):
        get_dataset("mine_train")


@pytest.mark.parametrize(
    "text, message",
    [
        ("coco_2014_train: {annotations: a.json, images: b}\n",
         "entry 'coco_2014_train' is the name of a built-in dataset"),
        ("mine: {annotations: a.json}\n", "entry 'mine' must hold exactly annotations and images, got ['annotations']"),
        ("mine: {annotations: a.json, images: b, split: val}\n", "entry 'mine' must hold exactly annotations"),
        ("mine: a.json\n", "entry 'mine' must hold exactly annotations and images, got str"),
        ("mine: {annotations: 3, images: b}\n", "entry 'mine': annotations must be a path, got 3"),
        ("'a:b': {annotations: a.json, images: b}\n", "entry 'a:b': dataset name 'a:b' must be letters"),
        ("mine: {annotations: a.json, images: [b\n", "not valid YAML at line"),
        ("- a\n- b\n", "the dataset catalog must map names"),
    ],
)  # fmt: skip
def test_bad_datasets_yaml_entry_is_one_line(in_work, text, message):
    catalog_file = catalog.data_root() / "datasets.yaml"
    catalog_file.parent.mkdir()
    catalog_file.write_text(text)
    with pytest.raises(ValueError) as error:
        get_dataset("mine")
    assert str(error.value).startswith(f"{catalog_file}: ") and message in str(error.value)
    assert "\n" not in str(error.value)


def test_config_keeps_coco_names_whole(tmp_path):
    name = "coco:data/a.json:data/imgs"
    config = tmp_path / "cfg.yaml"
    config.write_text(f"TRAIN:\n  DATASETS: ('{name}',)\nTEST:\n  DATASETS: ['{name}', shapes_val]\n")
    cfg = load_config(config)
    assert cfg.TRAIN.DATASETS == (name,) and cfg.TEST.DATASETS == (name, "shapes_val")
    overrides = ["TRAIN.DATASETS", f"('{name}', 'shapes_train')", "TEST.DATASETS", f"['{name}']",
                 "TRAIN.TARGET_DATASETS", f"('{name}',)"]  # fmt: skip
    cfg = load_config(config, overrides)
    assert cfg.TRAIN.DATASETS == (name, "shapes_train") and cfg.TEST.DATASETS == (name,)
    assert cfg.TRAIN.TARGET_DATASETS == (name,)
    # Detectron's old colon-joined keys still split, each coco: name kept whole
    with pytest.warns(ConfigWarning, match="TRAIN.DATASET"):
        cfg = load_config(None, {"TRAIN.DATASET": f"coco_2014_train:{name}:coco_2014_valminusminival"})
    assert cfg.TRAIN.DATASETS == ("coco_2014_train", name, "coco_2014_valminusminival")
    with pytest.warns(ConfigWarning, match="TEST.DATASET"):
        cfg = load_config(None, ["TEST.DATASET", name])
    assert cfg.TEST.DATASETS == (name,)


def test_target_datasets_take_coco_names(in_work):
    from tfdet.data.domain_pipeline import target_roidb

    roidb = target_roidb(_cfg([], **{"TRAIN.TARGET_DATASETS": (ANNOTATIONS_NAME,)}))
    assert [r.image_id for r in roidb.records] == [1, 2, 3, 5, 8] and not any(len(r.boxes) for r in roidb.records)


# ---- bad input: one line naming the file and the entry ---------------------------------------------------------


def _write(tmp_path, data):
    path = tmp_path / "bad.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _annotation_of(data, ann_id):
    return next(a for a in data["annotations"] if a["id"] == ann_id)


def _set(ann_id, **fields):
    def mutate(data):
        _annotation_of(data, ann_id).update(fields)

    return mutate


def _drop(ann_id, key):
    def mutate(data):
        del _annotation_of(data, ann_id)[key]

    return mutate


def _image_field(image_id, **fields):
    def mutate(data):
        next(i for i in data["images"] if i["id"] == image_id).update(fields)

    return mutate


BAD_INPUTS = [
    ("image listed but absent", _image_field(8, file_name="a/gone.jpg"), FileNotFoundError,
     "image id 8 (a/gone.jpg): ", "a/gone.jpg not found"),
    ("box entirely outside", _set(12, bbox=[40, 5, 15, 10]), DatasetError,
     "annotation id 12 (image id 5, a/one.jpg): ", "bbox [40, 5, 15, 10] lies entirely outside the 40x32 image"),
    ("box above the image", _set(12, bbox=[20, -12, 15, 12]), DatasetError,
     "annotation id 12 (image id 5, a/one.jpg): ", "lies entirely outside"),
    ("negative width", _set(11, bbox=[2, 3, -10, 12]), DatasetError,
     "annotation id 11 (image id 5, a/one.jpg): ", "negative width or height"),
    ("unknown category", _set(16, category_id=5), DatasetError,
     "annotation id 16 (image id 8, a/three.jpg): ", "category_id 5 is not one of the json's categories"),
    ("unknown image", _set(16, image_id=99), DatasetError, "annotation id 16 (image id 99): ", "no image has this"),
    ("not a segmentation", _set(11, segmentation="a polygon"), DatasetError,
     "annotation id 11 (image id 5, a/one.jpg): ", "'segmentation' is neither polygons nor RLE: str"),
    ("polygon of strings", _set(11, segmentation=[["1", "2", "3", "4", "5", "6"]]), DatasetError,
     "annotation id 11 ", "not of polygons"),
    ("RLE of another size", _set(14, segmentation=_crowd_rle(32, 40)), DatasetError,
     "annotation id 14 (image id 1, b/c/two.png): ", "the RLE 'size' [32, 40] is not the image's"),
    ("missing bbox", _drop(13, "bbox"), DatasetError, "annotation id 13 (image id 1, b/c/two.png): ",
     "'bbox' must be [x, y, width, height], got None"),
    ("missing area", _drop(13, "area"), DatasetError, "annotation id 13 ", "'area' must be a number"),
    ("missing iscrowd", _drop(13, "iscrowd"), DatasetError, "annotation id 13 ", "'iscrowd' must be 0 or 1"),
    ("duplicate annotation id", _set(12, id=11), DatasetError, "annotation id 11 (image id 5, a/one.jpg): ",
     "used twice"),
    ("missing file_name", _image_field(5, file_name=None), DatasetError, "image id 5 (None): ", "'file_name'"),
    ("bad height", _image_field(5, height=0), DatasetError, "image id 5 (a/one.jpg): ", "'height' must be a positive"),
    ("duplicate image id", _image_field(1, id=5), DatasetError, "image id 5 (b/c/two.png): ", "listed twice"),
    ("duplicate category", lambda d: d["categories"].append({"id": 4, "name": "mug"}), DatasetError,
     "category id 4 is listed twice", ""),
    ("no images", lambda d: d.update(images=[], annotations=[]), DatasetError, "the dataset has no images", ""),
    ("no categories", lambda d: d.update(categories=[]), DatasetError, "the dataset defines no categories", ""),
    ("no annotations list", lambda d: d.pop("annotations"), DatasetError, "'annotations' must be a list", ""),
    ("nothing usable", lambda d: d.update(annotations=[_annotation(1, 5, 4, [1, 1, 1, 1])]), DatasetError,
     "none of its 5 images has an object training can use", "1 zero area or under 2 px after clipping"),
]  # fmt: skip


@pytest.mark.parametrize(
    "mutate, error_type, entry, problem", [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS]
)
def test_bad_input_is_one_line_naming_file_and_entry(work, tmp_path, mutate, error_type, entry, problem):
    data = good_dataset()
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(error_type) as error:
        load_coco_roidb(path, work / "data" / "images")
    message = str(error.value)
    assert message.startswith(f"{path}: {entry}") and problem in message and "\n" not in message


def test_malformed_json_and_missing_files(work, tmp_path, in_work):
    path = re.escape(str(_write(tmp_path, '{"images": [')))
    with pytest.raises(DatasetError, match=rf"^{path}: not valid JSON \(Expecting value: line 1 column 13"):
        load_coco_roidb(tmp_path / "bad.json", work / "data" / "images")
    _write(tmp_path, "[1, 2]")
    with pytest.raises(DatasetError, match=rf"^{path}: a COCO annotation json holds an object, not a list"):
        load_coco_roidb(tmp_path / "bad.json", work / "data" / "images")
    with pytest.raises(FileNotFoundError, match="dataset 'coco:data/none.json:data/images': annotation file "):
        training_roidb(_cfg(["coco:data/none.json:data/images"]))
    with pytest.raises(FileNotFoundError, match="image folder data/pictures not found"):
        training_roidb(_cfg(["coco:data/annotations/train.json:data/pictures"]))
    with pytest.raises(ValueError, match="'coco:data/annotations/train.json': write coco:ANNOTATIONS.json:IMAGE_DIR"):
        get_dataset("coco:data/annotations/train.json")


def test_degenerate_polygons_are_dropped_with_one_warning(work, tmp_path, caplog):
    data = good_dataset()
    _annotation_of(data, 11)["segmentation"].insert(0, [1, 1, 4, 4])  # 2 points
    _annotation_of(data, 12)["segmentation"].append([20, 5, 30, 5, 30, 12, 20])  # 7 coordinates: kept, as Detectron
    _annotation_of(data, 16)["segmentation"].append([10, 10, 12, 12])
    path = _write(tmp_path, data)
    with caplog.at_level(logging.WARNING, logger="tfdet.data.roidb"):
        roidb = load_coco_roidb(path, work / "data" / "images", with_masks=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"{path}: dropped 2 polygon(s) of fewer than 6 coordinates (3 points), as Detectron does (the first in "
        "annotation id 11)"
    ]
    record = roidb.records[1]  # image 5: annotation 11's mask is its box alone, the 2-point polygon dropped
    mask = mask_util.decode({"size": [32, 40], "counts": record.mask_rles[0]})
    expected = COCO()
    expected.dataset = {"images": data["images"], "annotations": [_annotation(11, 5, 4, [2, 3, 10, 12])],
                        "categories": CATEGORIES}  # fmt: skip
    expected.createIndex()
    np.testing.assert_array_equal(mask, expected.annToMask(expected.anns[11]))


def test_num_classes_must_match_the_training_set(in_work, capsys):
    from tfdet.train import main

    with pytest.raises(ValueError) as error:
        training_roidb(_cfg([ANNOTATIONS_NAME], **{"MODEL.NUM_CLASSES": 81}))
    assert str(error.value) == (
        f"MODEL.NUM_CLASSES is 81 but the training set ({ANNOTATIONS_NAME}) has 3 categories: "
        "set MODEL.NUM_CLASSES 4 (1 background + 3)"
    )
    # the command line stops before anything is built, in one line
    out = in_work / "train_out"
    args = ["--cfg", str(TINY_CONFIG), "--skip-test", "OUTPUT_DIR", str(out), "MODEL.KEYPOINTS_ON", "False",
            "TRAIN.DATASETS", f"('{ANNOTATIONS_NAME}',)", "MODEL.NUM_CLASSES", "6"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"error: MODEL.NUM_CLASSES is 6 but the training set ({ANNOTATIONS_NAME}) has 3 categories: "
        "set MODEL.NUM_CLASSES 4 (1 background + 3)"
    )
    assert not out.exists() or not any(out.iterdir())


def test_evaluation_datasets_are_checked_before_any_work(in_work, tmp_path, capsys):
    from tfdet.evaluate import main

    spec = get_dataset(ANNOTATIONS_NAME)
    assert check_evaluation_dataset(spec) is spec
    data = good_dataset()
    data["images"][0]["file_name"] = "a/missing.jpg"
    _set(16, category_id=12)(data)
    path = _write(tmp_path, data)
    bad = catalog.DatasetSpec("bad", spec.image_dir, path)
    with pytest.raises(DatasetError, match=r"annotation id 16 \(image id 8, a/three.jpg\): category_id 12"):
        check_evaluation_dataset(bad, need_images=False)
    _set(16, category_id=9)(data)
    _write(tmp_path, data)
    with pytest.raises(FileNotFoundError, match=r"image id 5 \(a/missing.jpg\): .*a/missing.jpg not found"):
        check_evaluation_dataset(bad)
    check_evaluation_dataset(bad, need_images=False)  # a results file needs no images
    _set(16, category_id=12)(data)
    _write(tmp_path, data)
    results = tmp_path / "results.json"
    results.write_text("[]")
    assert main(["--results", str(results), "--dataset", f"coco:{path}:{spec.image_dir}"]) == 2
    problem = "annotation id 16 (image id 8, a/three.jpg): category_id 12 is not one of the json's categories"
    assert capsys.readouterr().err == f"error: {path}: {problem}\n"
