"""LiteRT export (`savedmodel.litert_export`) and its runner (`savedmodel.litert_runtime`), which needs neither
TensorFlow nor tfdet's model code.

The tiny shapes Mask + Keypoint R-CNN (`savedmodel_fixtures.TinyModel`) is converted to LiteRT builtins. A child
process in which importing tensorflow or keras fails opens the .tflite file with `savedmodel.runtimes.ExportedModel`
and keeps its detections of shapes validation images of three sizes and of two flat images (the pixel means; white,
without detection), one by one and as one batch; they must be the Predictor's: boxes within 0.05 px, scores within
5e-4, keypoints within 0.1 px (`savedmodel_fixtures.assert_same_detections`). The file holds no Flex or custom
operator and no float64 tensor, and carries the `tfdet` metadata.
"""

import json
import subprocess
import sys

import cv2
import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert import schema_py_generated as schema

from savedmodel.export import main as export_main
from savedmodel.litert_export import convert_to_litert
from savedmodel.litert_runtime import open_litert, read_metadata
from savedmodel.runtime_export import RuntimeExportError
from savedmodel.runtimes import ModelFileError, model_metadata
from support.savedmodel_fixtures import SHAPES_CATEGORIES, TinyModel, assert_same_detections, shapes_val_images
from tfdet.imaging.preprocessing import padding_stride
from tfdet.inference import Predictor

# Score threshold 0.62: just above the best score of the white image (0.616), which then has no detection, while the
# others keep 5 to 14 (LiteRT's scores are within 1e-4 of the Predictor's).
SERVING = ("TEST.RPN_POST_NMS_TOP_N", "50", "TEST.DETECTIONS_PER_IM", "160", "TEST.SCORE_THRESH", "0.62")

# Run by the child: tensorflow and keras cannot be imported there.
CHILD = r"""
import importlib.abc, json, pathlib, sys
import numpy as np

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras"):
            raise ImportError(f"{name} is not available to the runner")
        return None

sys.meta_path.insert(0, Refuse())
import cv2
from savedmodel import runtimes
path, images, out = json.loads(sys.argv[1])
model = runtimes.ExportedModel(path)
files = sorted(pathlib.Path(images).iterdir())
pictures = [cv2.imread(str(image)) for image in files]
arrays = {}
for prefix, results in (("", [model.predict(p) for p in pictures]), ("batch/", model.predict(pictures))):
    for image, result in zip(files, results):
        arrays.update({f"{prefix}{image.name}/{key}": value for key, value in result.items()})
np.savez(out, **arrays)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras"))
print(json.dumps({"loaded": loaded, "precision": model.precision, "names": model.categories.display_names()}))
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return TinyModel(tmp_path_factory)


@pytest.fixture(scope="module")
def exported(tiny, tmp_path_factory):
    """(the .tflite file, its metadata text), written by `python -m savedmodel.export --format litert`."""
    path = tmp_path_factory.mktemp("litert") / "tiny.tflite"
    args = ["--cfg", str(tiny.config), "--weights", str(tiny.weights), "--format", "litert", "--out", str(path),
            *SERVING]  # fmt: skip
    assert export_main(args) == 0
    cfg = tiny.test_config(*SERVING)
    return path, json.dumps(model_metadata(SHAPES_CATEGORIES, cfg, padding_stride(cfg)), ensure_ascii=False)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Shapes val images of three sizes, and two flat 240 x 320 images: of the pixel means, and white (no
    detection: every head runs on no box, and LiteRT's Unpack, for one, refuses an empty tensor)."""
    folder = tmp_path_factory.mktemp("litert_images")
    source = shapes_val_images(tmp_path_factory.mktemp("val"), 3)
    for i, path in enumerate(sorted(source.values())):
        image = cv2.imread(path)
        image = {1: image[:, :160], 2: cv2.resize(image, (224, 256))}.get(i, image)
        cv2.imwrite(str(folder / f"shapes{i}.png"), image)
    blank = np.broadcast_to(np.round([102.9801, 115.9465, 122.7717]).astype(np.uint8), (240, 320, 3))
    cv2.imwrite(str(folder / "blank.png"), np.ascontiguousarray(blank))
    cv2.imwrite(str(folder / "white.png"), np.full((240, 320, 3), 255, np.uint8))
    return folder


def test_litert_gives_the_predictors_detections_without_tensorflow(tiny, exported, images, tmp_path):
    out = tmp_path / "litert.npz"
    argument = json.dumps([str(exported[0]), str(images), str(out)])
    done = subprocess.run([sys.executable, "-c", CHILD, argument], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"loaded": [], "precision": "float32", "names": list(SHAPES_CATEGORIES.display_names())}
    predictor = Predictor(tiny.test_config(*SERVING), tiny.weights)
    arrays = np.load(out)
    files = sorted(images.iterdir())
    pictures = [cv2.imread(str(path)) for path in files]
    for prefix, wanted in (("", [predictor.predict(p) for p in pictures]), ("batch/", predictor.predict(pictures))):
        for path, want in zip(files, wanted):
            key = f"{prefix}{path.name}/"
            got = {name[len(key) :]: arrays[name] for name in arrays.files if name.startswith(key)}
            # Alone, the white image has no detection; in the batch, its zero padding gives it some.
            assert len(want["scores"]) == 0 if path.stem == "white" and not prefix else len(want["scores"]) >= 3
            assert {name: value.shape[1:] for name, value in got.items()} == {
                name: value.shape[1:] for name, value in want.items()
            }
            assert_same_detections(got, want, box_atol=0.05, keypoint_atol=0.1, score_atol=5e-4)


def test_litert_file_holds_builtins_in_float32_and_the_metadata(exported):
    path, metadata = exported
    content = path.read_bytes()
    model = schema.Model.GetRootAs(content, 0)
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    builtins = {max(code.BuiltinCode(), code.DeprecatedBuiltinCode()) for code in codes}
    assert schema.BuiltinOperator.CUSTOM not in builtins and not any(code.CustomCode() for code in codes)
    types = {
        model.Subgraphs(s).Tensors(t).Type()
        for s in range(model.SubgraphsLength())
        for t in range(model.Subgraphs(s).TensorsLength())
    }
    assert schema.TensorType.FLOAT64 not in types
    assert read_metadata(content) == metadata
    assert read_metadata(content, "no such entry") is None


def test_bad_litert_files_are_one_line(exported, tmp_path):
    broken = tmp_path / "broken.tflite"
    broken.write_bytes(b"not a flatbuffer at all")
    with pytest.raises(ModelFileError, match="LiteRT cannot load it"):
        open_litert(broken)
    with pytest.raises(ModelFileError, match="precision 'int8' is not one"):
        open_litert(exported[0]).compile("int8")


def test_a_graph_without_litert_builtins_is_refused_in_one_line(tmp_path):
    """float64 arithmetic, for one, has no LiteRT builtin."""
    mean = tf.function(
        lambda x: tf.cast(tf.reduce_mean(tf.cast(x, tf.float64)), tf.float32),
        input_signature=[tf.TensorSpec([None], tf.float32)],
    )
    module = tf.Module()
    module.mean = mean
    tf.saved_model.save(module, str(tmp_path / "saved"), signatures={"serving_default": mean.get_concrete_function()})
    refusal = r"^the LiteRT converter could not convert the model: no LiteRT builtin for Mean$"
    with pytest.raises(RuntimeExportError, match=refusal):
        convert_to_litert(tmp_path / "saved", tmp_path / "model.tflite", "{}")
    assert list(tmp_path.glob("*.tflite*")) == []


@pytest.mark.parametrize(
    "overrides, reason",
    [
        (("FAST_RCNN.ROI_XFORM_SAMPLING_RATIO", "0"), "FAST_RCNN.ROI_XFORM_SAMPLING_RATIO 0 (adaptive RoIAlign)"),
        (("TEST.SOFT_NMS.ENABLED", "True", "TEST.SOFT_NMS.METHOD", "gaussian"), "gaussian decays scores in float64"),
    ],
)
def test_a_family_litert_cannot_hold_is_refused_before_anything_is_built(tiny, tmp_path, capsys, overrides, reason):
    """Detectron's C4 configs (adaptive RoIAlign) and gaussian soft-NMS: one line saying why, and which formats do."""
    args = ["--cfg", str(tiny.config), "--weights", str(tiny.weights), "--format", "litert",
            "--out", str(tmp_path / "m.tflite"), *overrides]  # fmt: skip
    assert export_main(args) == 1
    error = capsys.readouterr().err
    assert reason in error and "--format onnx or openvino exports it" in error and error.count("\n") == 1
    assert not list(tmp_path.iterdir())
