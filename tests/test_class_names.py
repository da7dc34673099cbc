"""Class names end to end: a model's classes (names, dataset ids) stored in its `.weights.h5`, written by training
and porting, and read by inference, evaluation and `tfdet.infer` without a dataset json.

The model is the SavedModel tests' tiny shapes model (`savedmodel_fixtures.TinyModel`, seeded weights with a
spread classifier, shared within a test process); copies of its weights file get other classes. The SavedModel's
`detection_class_names` and label map assets are checked by test_savedmodel.py (a fresh process that never
imports tfdet) and test_savedmodel_client.py (REST and gRPC clients), on that module's exports.
"""

import json
import pathlib
import shutil

import cv2
import h5py
import keras
import numpy as np
import pytest
from pycocotools.coco import COCO

from porting.__main__ import main as porting_main
from porting.detectron_writer import model_to_blobs, write_detectron_pkl
from support.savedmodel_fixtures import SHAPES_CATEGORIES, TINY_TEST, TinyModel, shapes_val_images
from support.training_fixtures import TINY_CONFIG
from tfdet import evaluate, infer
from tfdet.config import load_config
from tfdet.data import shapes
from tfdet.data.coco_classes import COCO_CATEGORY_IDS, COCO_CLASSES, ModelCategories, model_categories
from tfdet.data.model_labels import (
    ATTRIBUTE,
    read_model_categories,
    roidb_categories,
    weights_categories,
    write_model_categories,
)
from tfdet.data.roidb import load_coco_roidb
from tfdet.engine.weights import export_final_weights
from tfdet.modeling import build_model
from tfdet.outputs import detection_writer

# Non-contiguous dataset ids, not those of the shapes json (1..3): contiguous class c is json id OWN_IDS[c].
OWN_IDS = (0, 3, 7, 12)
OWN = ModelCategories(("__background__", "carré", 'cercle "rond"', "triangle"), OWN_IDS)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return TinyModel(tmp_path_factory)


@pytest.fixture(scope="module")
def own_weights(tiny, tmp_path_factory):
    """A copy of the tiny model's weights that stores OWN's classes."""
    path = tmp_path_factory.mktemp("own") / "model_final.weights.h5"
    shutil.copyfile(tiny.weights, path)
    write_model_categories(path, OWN)
    return path


def test_stored_classes_round_trip_and_survive_load_weights(tiny, own_weights, tmp_path):
    stored = read_model_categories(own_weights)
    assert stored == OWN and stored.weights_file == str(own_weights)
    assert read_model_categories(tiny.weights) == SHAPES_CATEGORIES

    # Keras' own load_weights reads a file that stores classes, which stay readable (the tiny model's Predictor
    # loads one in the tfdet.infer and evaluation tests below)
    def dense_model(seed):
        keras.utils.set_random_seed(seed)
        return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(4)])

    path = tmp_path / "dense.weights.h5"
    dense_model(0).save_weights(path)
    assert read_model_categories(path) is None  # Keras writes no classes; only ours do
    write_model_categories(path, OWN)
    loaded = dense_model(1)
    loaded.load_weights(path)
    for got, want in zip(loaded.weights, dense_model(0).weights, strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert read_model_categories(path) == OWN

    with h5py.File(path, "a") as f:
        f.attrs[ATTRIBUTE] = "{not json"
    with pytest.raises(ValueError, match=f"{path}: unreadable {ATTRIBUTE} record"):
        read_model_categories(path)
    with pytest.raises(ValueError, match="2 class names for 4 classes"):
        write_model_categories(path, ModelCategories(("__background__", "a"), OWN_IDS))


def test_stored_classes_come_first_and_a_json_must_agree(own_weights, tmp_path):
    """model_categories' one precedence: stored classes, a consistent json (may add a skeleton), else the json,
    COCO's for 81 classes, ids. A json that disagrees in a name, an id or the order (classes follow the json's
    order, as Detectron's) is one line naming both."""
    stored = read_model_categories(own_weights)
    agreeing = tmp_path / "agreeing.json"
    categories = [{"id": i, "name": n, "keypoints": ["a", "b", "c"], "skeleton": [[1, 2], [2, 3]]}
                  for i, n in zip(OWN_IDS[1:], OWN.names[1:])]  # fmt: skip
    agreeing.write_text(json.dumps({"categories": categories}))
    merged = model_categories(4, dataset_json=agreeing, stored=stored)
    assert merged == ModelCategories(OWN.names, OWN_IDS, ((0, 1), (1, 2))) and merged.weights_file == str(own_weights)
    reordered = tmp_path / "reordered.json"
    reordered.write_text(json.dumps({"categories": categories[::-1]}))
    with pytest.raises(ValueError, match="class 1 is carré=3 in the model, triangle=12 in the json"):
        model_categories(4, dataset_json=reordered, stored=stored)

    renamed = tmp_path / "renamed.json"
    renamed.write_text(json.dumps({"categories": [dict(c, name="square") if c["id"] == 7 else c for c in categories]}))
    with pytest.raises(ValueError) as error:
        weights_categories(4, weights=own_weights, dataset_json=renamed)
    message = str(error.value)
    assert "\n" not in message and str(own_weights) in message and str(renamed) in message
    assert 'class 2 is cercle "rond"=7 in the model, square=7 in the json' in message
    renumbered = tmp_path / "renumbered.json"
    renumbered.write_text(json.dumps({"categories": [dict(c, id=c["id"] + 1) for c in categories]}))
    with pytest.raises(ValueError, match="class 1 is carré=3 in the model, carré=4 in the json"):
        model_categories(4, dataset_json=renumbered, stored=stored)
    with pytest.raises(ValueError, match="stores 3 classes; the model has 80"):
        model_categories(81, stored=stored)

    assert model_categories(4, dataset_json=renamed).names[2] == "square"  # no stored classes: the json names them
    coco_guess = model_categories(81)
    assert coco_guess.names == COCO_CLASSES and coco_guess.json_ids == (0,) + COCO_CATEGORY_IDS
    assert model_categories(4, dataset_json=renamed, stored=coco_guess).names[2] == "square"  # a default, not stored
    assert weights_categories(4, weights=tmp_path / "model.pkl").json_ids == (0, 1, 2, 3)  # nothing stored: ids


def test_final_weights_carry_the_training_set_classes(tmp_path):
    """export_final_weights (what Trainer.train ends with) stores a Roidb's classes: json names and
    non-contiguous ids, in Detectron's order (the json's)."""
    json_path = pathlib.Path(shapes.generate(tmp_path / "data", 2, seed=0, split_name="train"))
    image_dir = shapes.split_paths(tmp_path / "data", "train")[1]
    dataset = json.loads(json_path.read_text())
    new_ids = {1: 40, 2: 9, 3: 23}  # square, circle, triangle -> json ids out of order
    for category in dataset["categories"]:
        category["id"] = new_ids[category["id"]]
    for annotation in dataset["annotations"]:
        annotation["category_id"] = new_ids[annotation["category_id"]]
    json_path.write_text(json.dumps(dataset))
    roidb = load_coco_roidb(json_path, image_dir, with_masks=True, keypoints_required=True)
    categories = roidb_categories(roidb)
    assert categories == ModelCategories(("__background__", "square", "circle", "triangle"), (0, 40, 9, 23))
    assert roidb_categories([]) is None  # records without classes (tests pass plain lists): nothing to store

    cfg = load_config(TINY_CONFIG)
    keras.utils.set_random_seed(0)
    path = export_final_weights(cfg, build_model(cfg, training=True), tmp_path, categories)
    assert read_model_categories(path) == categories
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "data", "model_final.weights.h5"]


def test_ported_81_class_model_stores_coco_classes(tmp_path, capsys):
    """`python -m porting detectron`: a complete 81-class port stores COCO's classes; a partial one
    (--allow-missing, an ImageNet-style backbone file) stores none."""
    overrides = ["MODEL.NUM_CLASSES", "81"]
    cfg = load_config(TINY_CONFIG, overrides)
    keras.utils.set_random_seed(0)
    with_heads = model_to_blobs(build_model(cfg), cfg.MRCNN.ROI_MASK_HEAD)
    write_detectron_pkl(tmp_path / "model_final.pkl", with_heads, cfg.dump())
    backbone = {name: blob for name, blob in with_heads.items() if name.startswith(("conv1", "res"))}
    write_detectron_pkl(tmp_path / "backbone.pkl", backbone, cfg.dump())

    args = ["detectron", "--cfg", str(TINY_CONFIG), "--weights", str(tmp_path / "model_final.pkl")]
    assert porting_main([*args, "--out", str(tmp_path / "full"), *overrides]) == 0
    stored = read_model_categories(tmp_path / "full" / "model.weights.h5")
    assert stored.names == COCO_CLASSES and stored.json_ids == (0,) + COCO_CATEGORY_IDS
    assert "names the classes: 80 classes: person=1, bicycle=2, car=3, motorcycle=4, ..." in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == ["config.yaml", "model.weights.h5"]

    args = ["detectron", "--cfg", str(TINY_CONFIG), "--weights", str(tmp_path / "backbone.pkl"), "--allow-missing"]
    assert porting_main([*args, "--out", str(tmp_path / "partial"), *overrides]) == 0
    assert read_model_categories(tmp_path / "partial" / "model.weights.h5") is None


@pytest.fixture(scope="module")
def shapes_image(tmp_path_factory):
    return shapes_val_images(tmp_path_factory.mktemp("shapes"), 1)["shapes0"]


def test_infer_names_classes_and_writes_dataset_ids_without_dataset_json(
    tiny, own_weights, shapes_image, tmp_path, monkeypatch
):
    drawn = []

    def recording_draw(image, detections, class_names=None, *args):
        drawn.append(class_names)
        return real_draw(image, detections, class_names, *args)

    real_draw = detection_writer.draw_detections
    monkeypatch.setattr(detection_writer, "draw_detections", recording_draw)
    out = tmp_path / "out"
    argv = ["--cfg", str(tiny.config), "--weights", str(own_weights), "--input", shapes_image, "--output", str(out),
            "--thresh", "0.3", *TINY_TEST]  # fmt: skip
    assert infer.main(argv) == 0
    assert drawn == [OWN.names] and (out / f"{pathlib.Path(shapes_image).name}.png").is_file()
    listing = json.loads((out / "images.json").read_text())
    assert listing["categories"] == [{"id": i, "name": n} for i, n in zip(OWN_IDS[1:], OWN.names[1:])]
    results = json.loads((out / "detections.json").read_text())
    found = {r["category_id"] for r in results}
    assert len(results) > 10 and found <= set(OWN_IDS[1:]) and len(found) >= 2  # class c is json id OWN_IDS[c]


def test_infer_and_evaluate_refuse_a_json_that_disagrees(tiny, own_weights, shapes_image, tmp_path, capsys):
    """Before any model is built: one line naming the model's classes and the json's categories."""
    shapes_json = tmp_path / "shapes.json"
    height, width = cv2.imread(shapes_image).shape[:2]
    image = {"id": 1, "file_name": pathlib.Path(shapes_image).name, "height": height, "width": width}
    shapes_json.write_text(json.dumps({"images": [image], "annotations": [], "categories": shapes.categories()}))
    argv = ["--cfg", str(tiny.config), "--weights", str(own_weights), "--input", shapes_image,
            "--output", str(tmp_path / "out"), "--dataset-json", str(shapes_json)]  # fmt: skip
    assert infer.main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: the model's classes (") and str(own_weights) in line and str(shapes_json) in line
    assert "class 1 is carré=3 in the model, square=1 in the json" in line
    assert not (tmp_path / "out").exists()

    argv = ["--cfg", str(tiny.config), "--weights", str(own_weights), "--annotations", str(shapes_json),
            "--images", str(pathlib.Path(shapes_image).parent), "--output", str(tmp_path / "eval")]  # fmt: skip
    assert evaluate.main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: the model's classes (") and "carré=3 in the model, square=1 in the json" in line


def test_evaluation_takes_the_predictor_categories(tiny, own_weights, shapes_image):
    """predict_dataset (tfdet.evaluate's model run) writes its results' category ids from its Predictor's
    `categories`, those the weights store: a dataset whose categories differ is refused (before any image)."""
    height, width = cv2.imread(shapes_image).shape[:2]
    image = {"id": 5, "file_name": pathlib.Path(shapes_image).name, "height": height, "width": width}
    coco = COCO()
    coco.dataset = {"images": [image], "annotations": [], "categories": shapes.categories()}
    coco.createIndex()
    with pytest.raises(ValueError, match="carré=3 in the model, square=1 in the json"):
        evaluate.predict_dataset(tiny.test_config(), own_weights, coco, pathlib.Path(shapes_image).parent)
