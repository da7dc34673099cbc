"""python -m tfdet.evaluate end to end: a random-weight Mask + Keypoint R-CNN on a tiny shapes split,
an existing results file, and the errors a user meets (missing dataset, unreadable image)."""

import json
import shutil
import subprocess
import sys

import pytest
from pycocotools.coco import COCO

from support.paths import REPO_ROOT
from support.training_fixtures import ONE_SAMPLE_ROI_ALIGN
from tfdet.data import shapes
from tfdet.evaluate import main

CONFIG = REPO_ROOT / "configs" / "shapes_mask_keypoint_R-50-FPN.yaml"
# AffineChannel instead of GroupNorm in the body, FPN and mask head (the CLI does not depend on the network):
# half the ops to trace in each of the module's model runs.
AFFINE = ["RESNETS.STEM_FUNC", "basic_bn_stem", "RESNETS.TRANS_FUNC", "bottleneck_transformation",
          "RESNETS.SHORTCUT_FUNC", "basic_bn_shortcut", "FPN.USE_GN", "False",
          "MRCNN.ROI_MASK_HEAD", "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs"]  # fmt: skip
SMALL = ["TEST.SCALE", "96", "TEST.MAX_SIZE", "96", "TEST.DETECTIONS_PER_IM", "10", *ONE_SAMPLE_ROI_ALIGN, *AFFINE]


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """(annotation json, image folder) of 4 shapes images of 96 x 96."""
    out = tmp_path_factory.mktemp("split")
    json_path = shapes.generate(out, 4, seed=21, image_size=96, split_name="tiny")
    return json_path, out / "tiny"


@pytest.fixture(scope="module")
def random_weights(tmp_path_factory):
    from tfdet.config import load_config
    from tfdet.modeling import build_model

    path = tmp_path_factory.mktemp("weights") / "random.weights.h5"
    build_model(load_config(CONFIG, AFFINE)).save_weights(str(path))
    return path


def perfect_results(json_path):
    """COCO results equal to the ground truth: every annotation with score 1."""
    coco = COCO(str(json_path))
    results = []
    for ann in coco.loadAnns(coco.getAnnIds()):
        rle = coco.annToRLE(ann)  # compressed; counts are bytes for polygons, str when read from json
        counts = rle["counts"].decode("ascii") if isinstance(rle["counts"], bytes) else rle["counts"]
        segmentation = {"size": rle["size"], "counts": counts}
        keypoints = [v if i % 3 < 2 else 1 for i, v in enumerate(ann["keypoints"])]
        results.append(
            {"image_id": ann["image_id"], "category_id": ann["category_id"], "bbox": ann["bbox"], "score": 1.0,
             "segmentation": segmentation, "keypoints": keypoints}
        )  # fmt: skip
    return results


def test_model_run_writes_results_and_metrics(split, random_weights, tmp_path, capsys):
    json_path, image_dir = split
    args = ["--cfg", str(CONFIG), "--weights", str(random_weights), "--annotations", str(json_path)]
    args += ["--images", str(image_dir), "--output", str(tmp_path), "--batch-size", "2", *SMALL]
    assert main(args) == 0
    results = json.loads((tmp_path / "results_tiny.json").read_text())
    metrics = json.loads((tmp_path / "metrics_tiny.json").read_text())
    assert set(metrics) == {"bbox", "segm", "keypoints"}
    assert 0.0 <= metrics["bbox"]["AP"] <= 1.0 and len(metrics["keypoints"]) >= 10
    assert {r["image_id"] for r in results} <= {1, 2, 3, 4}
    assert all({"bbox", "segmentation", "keypoints"} <= r.keys() for r in results)
    assert all(len(r["keypoints"]) == 3 * len(shapes.KEYPOINT_NAMES) for r in results)
    assert "COCO bbox AP" in capsys.readouterr().out


def test_unreadable_image_is_named_and_fails(split, random_weights, tmp_path, capsys):
    json_path, image_dir = split
    images = tmp_path / "images"
    shutil.copytree(image_dir, images)
    # A JPEG cut in half: its signature passes the dataset check (a text file is refused there, before any
    # work); decoding it fails.
    jpeg = (images / "tiny_000002.jpg").read_bytes()
    (images / "tiny_000002.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    args = ["--cfg", str(CONFIG), "--weights", str(random_weights), "--annotations", str(json_path)]
    args += ["--images", str(images), "--output", str(tmp_path / "out"), *SMALL]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "tiny_000002.jpg" in err and "1 image(s) could not be read" in err
    results = json.loads((tmp_path / "out/results_tiny.json").read_text())
    assert 3 not in {r["image_id"] for r in results}  # image id = index + 1
    assert (tmp_path / "out/metrics_tiny.json").is_file()


def test_results_file_of_ground_truth_scores_one(split, tmp_path):
    json_path, _ = split
    results_path = tmp_path / "perfect.json"
    results_path.write_text(json.dumps(perfect_results(json_path)))
    done = subprocess.run(
        [sys.executable, "-m", "tfdet.evaluate", "--results", str(results_path), "--annotations", str(json_path)],
        capture_output=True, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "COCO bbox AP 1.0000 AP50 1.0000 | segm AP 1.0000 AP50 1.0000 | keypoints AP 1.0000" in done.stdout
    metrics = json.loads((tmp_path / "metrics_tiny.json").read_text())
    assert metrics["segm"]["AP"] == metrics["keypoints"]["AP"] == 1.0


def test_missing_dataset_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TFDET_DATA_DIR", str(tmp_path))
    results = tmp_path / "r.json"
    results.write_text("[]")
    assert main(["--results", str(results), "--dataset", "coco_2014_minival"]) == 2
    err = capsys.readouterr().err
    assert "instances_minival2014.json not found" in err and "TFDET_DATA_DIR" in err
    assert main(["--results", str(results), "--annotations", str(tmp_path / "missing.json")]) == 2
    assert "annotation file not found" in capsys.readouterr().err


def test_usage_errors(split, tmp_path, capsys):
    json_path, image_dir = split
    base = ["--annotations", str(json_path), "--images", str(image_dir)]
    assert main(["--cfg", str(CONFIG), "--weights", str(tmp_path / "none.h5"), *base]) == 2
    assert "weights file not found" in capsys.readouterr().err
    assert main(["--cfg", str(CONFIG), "--weights", "w", *base, "MODEL.NUM_CLASSES", "81"]) == 2
    assert "NUM_CLASSES 81, the dataset 3 categories" in capsys.readouterr().err
    assert main(["--cfg", str(CONFIG), "--weights", "w", *base, "KRCNN.NUM_KEYPOINTS", "17"]) == 2
    assert "predicts 17 keypoints, the dataset has 5" in capsys.readouterr().err
    assert main(["--dataset", "shapes_vall", "--results", "r.json"]) == 2
    assert "did you mean shapes_val" in capsys.readouterr().err


def test_says_where_it_writes_when_no_output_folder_is_given(split, tmp_path, monkeypatch, capsys):
    """Without --output the results go to the config's OUTPUT_DIR, relative to the working folder (or beside
    --results): a line says which folder and why, before any is written. Flags may follow the KEY VALUE overrides."""
    json_path, _ = split
    results_path = tmp_path / "perfect.json"
    results_path.write_text(json.dumps(perfect_results(json_path)))
    monkeypatch.chdir(tmp_path)
    assert main(["--cfg", str(CONFIG), "--results", str(results_path), "OUTPUT_DIR", "runs/eval", *AFFINE,
                 "--annotations", str(json_path)]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    said = lines.index(f"results and metrics go to {tmp_path / 'runs' / 'eval'} (the config's OUTPUT_DIR runs/eval; "
                       "--output DIR writes elsewhere)")  # fmt: skip
    assert said < min(i for i, line in enumerate(lines) if line.startswith("wrote "))
    assert (tmp_path / "runs" / "eval" / "metrics_tiny.json").is_file()
    assert main(["--results", str(results_path), "--annotations", str(json_path)]) == 0
    said = f"results and metrics go to {tmp_path} (the folder of --results; --output DIR writes elsewhere)"
    assert said in capsys.readouterr().out.splitlines()
    assert main(["--results", str(results_path), "--annotations", str(json_path), "--output", "chosen"]) == 0
    assert "go to" not in capsys.readouterr().out and (tmp_path / "chosen" / "metrics_tiny.json").is_file()
