"""Exports to ONNX Runtime and OpenVINO, and `savedmodel.run`, which needs neither TensorFlow nor pycocotools.

The tiny shapes Mask + Keypoint R-CNN (`savedmodel_fixtures.TinyModel`) is exported by `python -m
savedmodel.export --format onnx|openvino`: by default with Detectron's AffineChannel ResNet body (GroupNorm in FPN
and the heads only: `AFFINE_BODY_EXPORT`, a third fewer graph ops to convert), under -m slow the tiny config itself
(GroupNorm everywhere). A child process in which importing tensorflow, keras or pycocotools
fails runs `savedmodel.run` on shapes validation images of three sizes (JPEG and PNG) and a PNG of the pixel
means, and keeps the runtime's detections of each image and of all four as one batch; they must be the
Predictor's: boxes within 0.05 px, scores within 5e-4 (random weights: one float32 step of the input moves TF's
own scores by 2e-4), masks IoU >= 0.99 (or 2 pixels apart), keypoints within 0.1 px but where Detectron's rule
jumps (`savedmodel_fixtures.assert_same_detections`).
"""

import json
import subprocess
import sys

import cv2
import numpy as np
import onnx
import onnxruntime
import pytest

from savedmodel.export import main as export_main
from savedmodel.quantization import quantize_onnx
from savedmodel.runtimes import METADATA_KEY, ExportedModel, ModelFileError, _open_openvino
from support.savedmodel_fixtures import (
    AFFINE_BODY_EXPORT,
    SHAPES_CATEGORIES,
    TINY_TEST,
    TinyModel,
    assert_same_detections,
    shapes_val_images,
)
from tfdet.imaging.preprocessing import prepared_inputs
from tfdet.inference import Predictor

SERVING = ("TEST.RPN_POST_NMS_TOP_N", "50", "TEST.DETECTIONS_PER_IM", "160")
# The model every runtime gets (overrides of the tiny config, TinyModel's folder): by default the AffineChannel
# body's; the tiny config's own GroupNorm body (twice the conversion time) under -m slow.
MODELS = [
    pytest.param((AFFINE_BODY_EXPORT, "savedmodel_tiny_affine_body"), id="affine_body"),
    pytest.param(((), "savedmodel_tiny_model"), id="tiny_config", marks=pytest.mark.slow),
]

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
    files = sorted(__import__("pathlib").Path(images).iterdir())
    for image in files:
        for key, value in model.predict(cv2.imread(str(image))).items():
            arrays[f"{image.name}/{key}"] = value
    for image, result in zip(files, model.predict([cv2.imread(str(image)) for image in files])):
        for key, value in result.items():
            arrays[f"batch/{image.name}/{key}"] = value
    np.savez(f"{out}/{name}.npz", **arrays)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "pycocotools"))
print(json.dumps({"statuses": statuses, "loaded": loaded}))
"""


@pytest.fixture(scope="module", params=MODELS)
def tiny(request, tmp_path_factory):
    return TinyModel(tmp_path_factory, *request.param)


@pytest.fixture(scope="module")
def default_model(tmp_path_factory):
    """The default model's files, for the refusals (which stop before building it)."""
    return TinyModel(tmp_path_factory, *MODELS[0].values[0])


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    """The tiny config's own model (GroupNorm body), for the slow command-line exports."""
    return TinyModel(tmp_path_factory)


@pytest.fixture(scope="module")
def exported(tiny, tmp_path_factory):
    """{runtime: model file}: the CLI's exports."""
    folder = tmp_path_factory.mktemp("runtimes")
    paths = {"onnx": folder / "tiny.onnx", "openvino": folder / "tiny.xml"}
    for runtime, path in paths.items():
        args = ["--cfg", str(tiny.config), "--weights", str(tiny.weights), "--format", runtime, "--out", str(path),
                *TINY_TEST, *SERVING]  # fmt: skip
        assert export_main(args) == 0
    assert METADATA_KEY in {entry.key for entry in onnx.load(str(paths["onnx"])).metadata_props}
    return paths


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


@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
def test_runtime_gives_the_predictors_detections(tiny, images, child, runtime):
    report, out = child
    assert report["loaded"] == [] and report["statuses"][runtime] == 0
    predictor = Predictor(tiny.test_config(*SERVING), tiny.weights)
    arrays = np.load(out / f"{runtime}.npz")
    files = sorted(images.iterdir())
    pictures = [cv2.imread(str(path)) for path in files]
    for prefix, wanted in (("", [predictor.predict(p) for p in pictures]), ("batch/", predictor.predict(pictures))):
        for path, want in zip(files, wanted):
            key = f"{prefix}{path.name}/"
            got = {name[len(key) :]: arrays[name] for name in arrays.files if name.startswith(key)}
            assert len(want["scores"]) >= 3
            assert_same_detections(got, want, box_atol=0.05, keypoint_atol=0.1, score_atol=5e-4)


@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
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


@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
def test_exported_model_carries_its_classes(exported, runtime):
    model = ExportedModel(exported[runtime])
    assert model.categories.display_names() == SHAPES_CATEGORIES.display_names()
    assert model.categories.json_ids == SHAPES_CATEGORIES.json_ids
    assert model.precision == "float32" and model.keypoint_confidence == "bbox"


def test_bad_model_files_are_one_line(exported, tmp_path, capsys):
    with pytest.raises(ModelFileError, match=r"not a model file savedmodel\.run reads \(\.onnx, \.xml, \.tflite;"):
        ExportedModel(tmp_path / "model.pt")
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx model")
    with pytest.raises(ModelFileError, match="ONNX Runtime cannot load it"):
        ExportedModel(broken)
    (tmp_path / "broken.xml").write_text("<net>")
    with pytest.raises(ModelFileError, match="OpenVINO cannot read it"):
        ExportedModel(tmp_path / "broken.xml")
    bare = onnx.load(str(exported["onnx"]))
    del bare.metadata_props[:]
    onnx.save(bare, str(tmp_path / "bare.onnx"))
    with pytest.raises(ModelFileError, match="holds no tfdet metadata"):
        ExportedModel(tmp_path / "bare.onnx")
    entry = bare.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, json.dumps({"version": 1})
    onnx.save(bare, str(tmp_path / "old.onnx"))
    with pytest.raises(ModelFileError, match=r"tfdet metadata version 1; this runner reads version 2 \(export"):
        ExportedModel(tmp_path / "old.onnx")
    from savedmodel import run

    assert run.main(["--model", str(tmp_path / "model.pt"), "--input", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    (tmp_path / "notes.txt").write_text("not an image")
    assert run.main(["--model", str(exported["onnx"]), "--input", str(tmp_path / "notes.txt"), "--output",
                     str(tmp_path / "out")]) == 1  # fmt: skip
    assert "notes.txt" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--format", "onnx", "--out", "model.pb"], "--format onnx writes a .onnx file"),
        (["--format", "litert", "--out", "model.onnx"], "--format litert writes a .tflite file"),
        (["--format", "litert", "--precision", "int8", "--out", "m.tflite"], "litert exports compute in float32"),
        (["--format", "onnx", "--mask-format", "roi", "--out", "m.onnx"], "exports image masks"),
        (["--format", "openvino", "--precision", "int8", "--out", "m.xml"],
         "--format openvino --precision int8: openvino exports compute in float32, bfloat16, float16"),
        (["--format", "onnx", "--precision", "int8", "--out", "m.onnx"], "--precision int8 needs --calibrate"),
        (["--format", "onnx", "--calibrate", "x", "--out", "m.onnx"], "--calibrate is for --precision int8"),
        (["--precision", "bfloat16", "--out", "base/tiny/1"], "--precision and --calibrate are for --format onnx"),
        (["--format", "onnx", "--precision", "int8", "--calibrate", "coco:missing.json:images", "--out", "m.onnx"],
         "--calibrate coco:missing.json:images: "),
    ],
)  # fmt: skip
def test_export_refusals_are_one_line(default_model, tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    assert export_main(["--cfg", str(default_model.config), "--weights", str(default_model.weights), *args]) == 1
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1, error
    assert not list(tmp_path.iterdir())


def test_int8_quantizes_every_convolution_and_runs(exported, images, tmp_path):
    """ONNX Runtime's static QDQ quantization of the float32 export, calibrated on two images: every convolution
    reads int8 weights, and ONNX Runtime runs the result. Its accuracy is measured on trained models by
    benchmarks/runtime_precision.py; the command line's int8 export is the slow test below."""
    float32 = ExportedModel(exported["onnx"])
    path = tmp_path / "tiny_int8.onnx"
    quantize_onnx(exported["onnx"], path, sorted(images.glob("shapes*"))[:2], float32.metadata)
    assert_convolutions_read_int8_weights(path)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = float32.metadata
    image = cv2.imread(str(sorted(images.glob("shapes*"))[0]))
    inputs = prepared_inputs([image], meta["pixel_means"], meta["test_scale"], meta["test_max_size"], meta["stride"])
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs)))
    assert {"num_detections", "boxes", "scores", "classes", "mask_probs", "keypoint_heatmaps"} <= set(outputs)


def assert_convolutions_read_int8_weights(path):
    graph = onnx.load(str(path)).graph
    int8_weights = {init.name for init in graph.initializer if init.data_type == onnx.TensorProto.INT8}
    from_int8 = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in int8_weights}
    convolutions = [node for node in graph.node if node.op_type == "Conv"]
    assert convolutions and all(node.input[1] in from_int8 for node in convolutions)


@pytest.mark.slow
def test_int8_export_on_the_command_line(tiny_config, images, tmp_path):
    path = tmp_path / "tiny_int8.onnx"
    args = ["--cfg", str(tiny_config.config), "--weights", str(tiny_config.weights), "--format", "onnx",
            "--precision", "int8", "--calibrate", str(images), "--out", str(path), *TINY_TEST, *SERVING]  # fmt: skip
    assert export_main(args) == 0
    assert_convolutions_read_int8_weights(path)
    model = ExportedModel(path)
    assert model.precision == "int8"
    result = model.predict(cv2.imread(str(sorted(images.glob("shapes*"))[0])))
    assert {"boxes", "scores", "classes", "masks", "keypoints", "keypoint_probs"} <= set(result)


def test_openvino_computes_in_the_precision_asked_or_says_which(exported, images):
    """bfloat16 where the CPU has it (AVX512-BF16, AMX), else float32, which the runner then reports."""
    run, computed = _open_openvino(exported["openvino"]).compile("bfloat16")
    assert computed in ("bfloat16", "float32")
    meta = ExportedModel(exported["openvino"]).metadata
    image = cv2.imread(str(sorted(images.glob("shapes*"))[0]))
    outputs = run(prepared_inputs([image], meta["pixel_means"], meta["test_scale"], meta["test_max_size"], meta["stride"]))
    assert outputs["mask_probs"].shape[-2:] == (14, 14) and outputs["keypoint_heatmaps"].ndim == 5


@pytest.mark.slow
def test_openvino_bfloat16_export_on_the_command_line(tiny_config, images, tmp_path):
    path = tmp_path / "tiny_bf16.xml"
    args = ["--cfg", str(tiny_config.config), "--weights", str(tiny_config.weights), "--format", "openvino",
            "--precision", "bfloat16", "--out", str(path), *TINY_TEST, *SERVING]  # fmt: skip
    assert export_main(args) == 0
    model = ExportedModel(path)
    assert model.metadata["precision"] == "bfloat16"
    assert model.precision in ("bfloat16", "float32")  # float32 on a CPU without bfloat16 arithmetic
    result = model.predict(cv2.imread(str(sorted(images.glob("shapes*"))[0])))
    assert result["masks"].dtype == bool and result["keypoints"].shape[1:] == (5, 3)
