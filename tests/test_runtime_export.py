"""Export to ONNX Runtime, and `savedmodel.run`, which needs neither TensorFlow nor pycocotools.

The tiny shapes Mask + Keypoint R-CNN (`savedmodel_fixtures.TinyModel`) is exported by `python -m
savedmodel.export --format onnx`. A child process in which importing tensorflow, keras or pycocotools fails runs `savedmodel.run` on
shapes validation images of three sizes (JPEG and PNG) and a PNG of the pixel means, and keeps the
runtime's raw detections; they must be the Predictor's: boxes within 0.05 px, scores within
5e-4 (random weights: one float32 step of the input moves TF's own scores by 2e-4), masks IoU >= 0.99 (or 2 pixels apart), keypoints within 0.1 px but where Detectron's rule jumps
(`savedmodel_fixtures.assert_same_detections`).
"""

import json
import subprocess
import sys

import cv2
import numpy as np
import onnx
import pytest

from savedmodel.export import main as export_main
from savedmodel.runtimes import METADATA_KEY, ExportedModel, ModelFileError
from savedmodel_fixtures import SHAPES_CATEGORIES, TINY_TEST, TinyModel, assert_same_detections, shapes_val_images
from tfdet.inference import Predictor

SERVING = ("TEST.RPN_POST_NMS_TOP_N", "50", "TEST.DETECTIONS_PER_IM", "160")

# Run by the child: tensorflow, keras and pycocotools cannot be imported there.
CHILD = r"""
import importlib.abc, json, sys
import numpy as np

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras", "pycocotools"):
            raise ImportError(f"{name} is not available to the runner")
        return None

sys.meta_path.insert(0, Refuse())
from savedmodel import run
from savedmodel.runtimes import ExportedModel
import cv2

models, images, out = json.loads(sys.argv[1])
statuses = {}
for name, path in models.items():
    statuses[name] = run.main(["--model", path, "--input", images, "--output", f"{out}/{name}", "--thresh", "0.3"])
    model = ExportedModel(path)
    arrays = {}
    for image in sorted(__import__("pathlib").Path(images).iterdir()):
        for key, value in model.predict(cv2.imread(str(image))).items():
            arrays[f"{image.name}/{key}"] = value
    np.savez(f"{out}/{name}.npz", **arrays)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "pycocotools"))
print(json.dumps({"statuses": statuses, "loaded": loaded}))
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return TinyModel(tmp_path_factory)


@pytest.fixture(scope="module")
def exported(tiny, tmp_path_factory):
    """{runtime: model file}: the CLI's ONNX export."""
    folder = tmp_path_factory.mktemp("runtimes")
    onnx_path = folder / "tiny.onnx"
    args = ["--cfg", str(tiny.config), "--weights", str(tiny.weights), "--format", "onnx", "--out", str(onnx_path),
            *TINY_TEST, *SERVING]  # fmt: skip
    assert export_main(args) == 0
    assert METADATA_KEY in {entry.key for entry in onnx.load(str(onnx_path)).metadata_props}
    return {"onnx": onnx_path}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A folder of shapes val images of three sizes and a 240 x 320 PNG of the pixel means."""
    folder = tmp_path_factory.mktemp("run_images")
    source = shapes_val_images(tmp_path_factory.mktemp("val"), 3)
    for i, path in enumerate(sorted(source.values())):
        image = cv2.imread(path)
        if i == 1:
            cv2.imwrite(str(folder / f"shapes{i}.png"), image[:, :160])
        elif i == 2:
            cv2.imwrite(str(folder / f"shapes{i}.jpg"), cv2.resize(image, (224, 256)))
        else:
            cv2.imwrite(str(folder / f"shapes{i}.jpg"), image)
    blank = np.broadcast_to(np.round([102.9801, 115.9465, 122.7717]).astype(np.uint8), (240, 320, 3))
    cv2.imwrite(str(folder / "blank.png"), np.ascontiguousarray(blank))
    return folder


@pytest.fixture(scope="module")
def child(exported, images, tmp_path_factory):
    out = tmp_path_factory.mktemp("run_out")
    argument = json.dumps([{k: str(v) for k, v in exported.items()}, str(images), str(out)])
    done = subprocess.run([sys.executable, "-c", CHILD, argument], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), out


@pytest.mark.parametrize("runtime", ["onnx"])
def test_runtime_gives_the_predictors_detections(tiny, images, child, runtime):
    report, out = child
    assert report["loaded"] == [] and report["statuses"][runtime] == 0
    predictor = Predictor(tiny.test_config(*SERVING), tiny.weights)
    arrays = np.load(out / f"{runtime}.npz")
    for path in sorted(images.iterdir()):
        want = predictor.predict(cv2.imread(str(path)))
        got = {key.split("/", 1)[1]: arrays[key] for key in arrays.files if key.startswith(f"{path.name}/")}
        assert len(want["scores"]) >= 3
        assert_same_detections(got, want, box_atol=0.05, keypoint_atol=0.1, score_atol=5e-4)


@pytest.mark.parametrize("runtime", ["onnx"])
def test_runner_writes_what_tfdet_infer_writes(images, child, runtime):
    report, out = child
    folder = out / runtime
    results = json.loads((folder / "detections.json").read_text())
    listed = json.loads((folder / "images.json").read_text())
    assert sorted(image["file_name"].rsplit("/", 1)[-1] for image in listed["images"]) == sorted(
        p.name for p in images.iterdir()
    )
    assert listed["categories"] == SHAPES_CATEGORIES.coco_categories()
    assert {r["category_id"] for r in results} <= {1, 2, 3} and all("segmentation" in r for r in results)
    assert all(len(r["keypoints"]) == 5 * 3 for r in results)
    assert sorted(p.name for p in folder.glob("*.png")) == sorted(f"{p.name}.png" for p in images.iterdir())


def test_exported_model_carries_its_classes(exported):
    model = ExportedModel(exported["onnx"])
    assert model.categories.display_names() == SHAPES_CATEGORIES.display_names()
    assert model.categories.json_ids == SHAPES_CATEGORIES.json_ids


def test_bad_model_files_are_one_line(exported, tmp_path, capsys):
    with pytest.raises(ModelFileError, match=r"not a model file savedmodel\.run reads \(\.onnx;"):
        ExportedModel(tmp_path / "model.pt")
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx model")
    with pytest.raises(ModelFileError, match="ONNX Runtime cannot load it"):
        ExportedModel(broken)
    bare = onnx.load(str(exported["onnx"]))
    del bare.metadata_props[:]
    onnx.save(bare, str(tmp_path / "bare.onnx"))
    with pytest.raises(ModelFileError, match="holds no tfdet metadata"):
        ExportedModel(tmp_path / "bare.onnx")
    from savedmodel import run

    assert run.main(["--model", str(tmp_path / "model.pt"), "--input", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_export_refusals_are_one_line(tiny, tmp_path, capsys):
    base = ["--cfg", str(tiny.config), "--weights", str(tiny.weights)]
    assert export_main([*base, "--format", "onnx", "--out", str(tmp_path / "model.pb")]) == 1
    assert "--format onnx writes a .onnx file" in capsys.readouterr().err
    assert export_main([*base, "--format", "litert", "--out", str(tmp_path / "model.tflite")]) == 1
    assert "--format litert: LiteRT has no builtin CropAndResize" in capsys.readouterr().err
    assert export_main([*base, "--format", "openvino", "--out", str(tmp_path / "model.xml")]) == 1
    assert "--format openvino: OpenVINO's ONNX reader converts neither" in capsys.readouterr().err
    assert export_main([*base, "--format", "onnx", "--mask-format", "roi", "--out", str(tmp_path / "m.onnx")]) == 1
    assert "exports image masks" in capsys.readouterr().err
