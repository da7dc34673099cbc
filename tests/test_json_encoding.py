"""Annotation jsons are UTF-8 whatever the locale: the class-name reader (`tfdet.data.coco_classes`) and the
evaluator's ground truth (`tfdet.evaluation.coco_evaluator.load_coco`) read a category "carré" under an ASCII
locale (LC_ALL=C, UTF-8 mode off), as the training path (`tfdet.data.coco_json.load_json`) does.

The readers run in a child process with that locale; the test first checks that the child's locale encoding is
really not UTF-8 (else it could not fail)."""

import json
import os
import subprocess
import sys

from support.paths import REPO_ROOT

NAMES = ("__background__", "carré", "cercle « rond »", "日本")
JSON_IDS = (0, 5, 9, 2)
ASCII_LOCALE = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "ascii"}

READERS = """
import json, locale, sys
from tfdet.data.coco_classes import ModelCategories, model_categories
from tfdet.evaluation.coco_evaluator import load_coco

path = sys.argv[1]
stored = ModelCategories({names!a}, {json_ids!a}, weights_file="model_final.weights.h5")
coco = load_coco(path)
print(json.dumps({{
    "locale": locale.getpreferredencoding(),
    "from_json": model_categories(4, dataset_json=path).names,
    "stored_and_json": model_categories(4, dataset_json=path, stored=stored).names,
    "evaluator": [coco.cats[i]["name"] for i in coco.getCatIds()],
}}))
"""


def write_json(path):
    """A COCO json (UTF-8 bytes, names not escaped) with NAMES' categories, one image and one box."""
    categories = [{"id": i, "name": n} for i, n in zip(JSON_IDS[1:], NAMES[1:])]
    dataset = {
        "images": [{"id": 1, "file_name": "a.png", "width": 8, "height": 8}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 5, "bbox": [1, 1, 3, 3], "area": 9, "iscrowd": 0}],
        "categories": categories,
    }
    path.write_bytes(json.dumps(dataset, ensure_ascii=False).encode("utf-8"))
    assert "carré".encode("utf-8") in path.read_bytes()


def test_readers_of_annotation_jsons_are_utf8_under_an_ascii_locale(tmp_path):
    json_path = tmp_path / "annotations.json"
    write_json(json_path)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), CUDA_VISIBLE_DEVICES="", **ASCII_LOCALE)
    code = READERS.format(names=NAMES, json_ids=JSON_IDS)  # !a: the command line itself stays ASCII
    done = subprocess.run([sys.executable, "-c", code, str(json_path)], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")[-3000:]
    read = json.loads(done.stdout.decode("ascii").strip().splitlines()[-1])
    assert read["locale"].replace("-", "").lower() != "utf8"  # the child's open() default is not UTF-8
    assert read["from_json"] == read["stored_and_json"] == list(NAMES)
    assert read["evaluator"] == list(NAMES[1:])  # getCatIds: json order
