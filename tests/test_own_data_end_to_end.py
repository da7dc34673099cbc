"""One's own COCO-format dataset from the command lines, as a user runs them: `python -m tfdet.train` on a
`coco:` name (a json written here, not shapes: non-contiguous category ids listed out of order, images in
sub-folders), its final evaluation, then `python -m tfdet.infer` naming the classes from the weights alone. Under
`-m slow`: the default suite tests each part (see the test)."""

import json
import pathlib

import cv2
import numpy as np
import pytest

from support.training_fixtures import AFFINE_BODY, ONE_SAMPLE_ROI_ALIGN, TINY_CONFIG
from tfdet import infer, train
from tfdet.data.model_labels import read_model_categories

# Listed out of order, with gaps: Detectron numbers classes as the json lists them (kite 1, cup 2, sock 3).
CATEGORIES = [{"id": 17, "name": "kite"}, {"id": 4, "name": "cup"}, {"id": 9, "name": "sock"}]
TRAIN_NAME = "coco:data/train.json:data/images"
VAL_NAME = "coco:data/val.json:data/images"
OVERRIDES = [
    "SOLVER.MAX_ITER", "2", "SOLVER.WARM_UP_ITERS", "1", "SOLVER.STEPS", "[0]", "SOLVER.BASE_LR", "0.0001",
    "MODEL.NUM_CLASSES", "4", "MODEL.KEYPOINTS_ON", "False", "TRAIN.DATASETS", f"('{TRAIN_NAME}',)",
    "TEST.DATASETS", f"('{VAL_NAME}',)", *ONE_SAMPLE_ROI_ALIGN, *AFFINE_BODY,
]  # fmt: skip


def draw_image(path, seed):
    """A 96x96 picture of one filled rectangle, ellipse and triangle on a noisy gradient; their COCO objects
    (category id, polygon) in that order."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(30, 150, 96, dtype=np.float32)
    picture = (ramp[:, None, None] + rng.normal(0, 12, (96, 96, 3))).clip(0, 255).astype(np.uint8)
    x, y = (int(v) for v in rng.integers(4, 40, 2))
    rectangle = [[x, y], [x + 30, y], [x + 30, y + 20], [x, y + 20]]
    ellipse = cv2.ellipse2Poly((70, 70), (14, 9), 0, 0, 360, 20).tolist()
    triangle = [[10, 90], [30, 60], [50, 90]]
    for polygon, color in ((rectangle, (40, 200, 240)), (ellipse, (230, 60, 60)), (triangle, (60, 230, 90))):
        cv2.fillPoly(picture, [np.array(polygon, np.int32)], color)
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), picture)
    return [(17, rectangle), (4, ellipse), (9, triangle)]


def write_split(root, split, image_ids):
    """data/<split>.json over images in data/images/<split>/<sub-folder>/ (file names with folders)."""
    images, annotations = [], []
    for image_id in image_ids:
        file_name = f"{split}/part{image_id % 2}/img{image_id}.jpg"
        for category_id, polygon in draw_image(root / "data" / "images" / file_name, image_id):
            points = np.array(polygon, np.float64)
            x1, y1 = points.min(0)
            x2, y2 = points.max(0)
            annotations.append({
                "id": len(annotations) + 100, "image_id": image_id, "category_id": category_id, "iscrowd": 0,
                "bbox": [x1, y1, x2 - x1 + 1, y2 - y1 + 1], "area": float(cv2.contourArea(points.astype(np.float32))),
                "segmentation": [points.ravel().tolist()],
            })  # fmt: skip
        images.append({"id": image_id, "file_name": file_name, "height": 96, "width": 96})
    (root / "data" / f"{split}.json").write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": CATEGORIES})
    )


# Slow (a training run with its evaluation, then inference: ~12 s of a core): each part has a cheaper default test.
# A `coco:` name with non-contiguous ids listed out of order and images in sub-folders: test_own_dataset.py
# (test_coco_name_loads_with_detectrons_category_mapping; results mapped back to the json's ids and evaluated,
# test_results_map_contiguous_ids_back_to_the_jsons, test_evaluate_a_results_file_on_a_coco_name); the training run
# end to end with its evaluation: test_train_cli.py; its classes stored in the final weights:
# test_class_names.py::test_final_weights_carry_the_training_set_classes; `tfdet.infer` naming the classes and
# writing the json's ids from the weights alone:
# test_class_names.py::test_infer_names_classes_and_writes_dataset_ids_without_dataset_json.
@pytest.mark.slow
def test_train_evaluate_and_infer_on_a_coco_json_of_ones_own(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # coco: paths are relative to the working directory
    write_split(tmp_path, "train", [31, 7, 12, 5])
    write_split(tmp_path, "val", [40, 41])
    output = tmp_path / "run"

    assert train.main(["--cfg", str(TINY_CONFIG), "OUTPUT_DIR", str(output), *OVERRIDES]) == 0
    capsys.readouterr()
    stored = read_model_categories(output / "model_final.weights.h5")
    assert stored.names == ("__background__", "kite", "cup", "sock")
    assert stored.json_ids == (0, 17, 4, 9)
    results = list(output.glob("results_*.json"))
    metrics = list(output.glob("metrics_*.json"))
    assert len(results) == len(metrics) == 1, sorted(p.name for p in output.iterdir())
    assert set(json.loads(metrics[0].read_text())) == {"bbox", "segm"}
    detections = json.loads(results[0].read_text())
    assert {d["image_id"] for d in detections} <= {40, 41}
    assert {d["category_id"] for d in detections} <= {17, 4, 9}  # the json's ids, never contiguous ones

    pictures = tmp_path / "pictures"
    status = infer.main(["--cfg", str(output / "config.yaml"), "--weights", str(output / "model_final.weights.h5"),
                         "--input", "data/images/val/part0/img40.jpg", "--output", str(pictures), "--always-out",
                         "--thresh", "0"])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    assert json.loads((pictures / "images.json").read_text())["categories"] == CATEGORIES
    inferred = json.loads((pictures / "detections.json").read_text())
    assert {d["category_id"] for d in inferred} <= {17, 4, 9}
    assert (pictures / "img40.jpg.png").is_file()  # Detectron's <file name>.<output-ext>
