"""Exported models opened with their own runtime (ONNX Runtime, OpenVINO, LiteRT): no TensorFlow.

Every export holds the SavedModel's `image_tensor` signature (uint8 RGB images in, the signature's
detection outputs out, see `savedmodel.outputs`) and a `tfdet` metadata entry (JSON, `model_metadata`):
the class names and dataset ids (labels.json's content), KRCNN.KEYPOINT_CONFIDENCE, MODEL.NUM_CLASSES
and, for runtimes that need static shapes, the input size that images are letterboxed into.
The runtime is chosen by the file: `.onnx` ONNX Runtime, `.xml` (with its `.bin`) OpenVINO, `.tflite` LiteRT.
"""

import json
import pathlib

import numpy as np

from savedmodel.outputs import TENSOR_INPUT, detections_per_image
from tfdet.data.coco_classes import ModelCategories

METADATA_KEY = "tfdet"
METADATA_VERSION = 1
RUNTIMES = {".onnx": "onnx", ".xml": "openvino", ".tflite": "litert"}
INSTALL = {"onnx": "onnxruntime", "openvino": "openvino", "litert": "ai-edge-litert"}


class ModelFileError(ValueError):
    """A model file the runner cannot use, in one line naming it."""


def model_metadata(categories, cfg, input_size=None):
    """The `tfdet` metadata of an export: labels (as labels.json), keypoint confidence, class count, the
    static (height, width) input size or None."""
    from savedmodel.label_map import labels_json

    return {
        "version": METADATA_VERSION,
        "labels": labels_json(categories),
        "keypoint_confidence": cfg.KRCNN.KEYPOINT_CONFIDENCE,
        "num_classes": int(cfg.MODEL.NUM_CLASSES),
        "input_size": list(input_size) if input_size else None,
    }


def categories_of(labels):
    """ModelCategories of labels.json's content."""
    classes = sorted(labels["classes"], key=lambda c: c["id"])
    names = ("__background__",) + tuple(c["name"] for c in classes) if labels["names_known"] else None
    return ModelCategories(names, (0,) + tuple(int(c["dataset_id"]) for c in classes))


class ExportedModel:
    """An exported tfdet model: `predict(image)` gives what `Predictor.predict` gives for a BGR uint8 image;
    `categories`, `keypoint_confidence`, `num_classes` as the model was exported with."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        runtime = RUNTIMES.get(self.path.suffix.lower())
        if runtime is None:
            raise ModelFileError(
                f"{self.path}: not a model file savedmodel.run reads ({', '.join(RUNTIMES)}; a SavedModel folder "
                "is served by TF Serving or savedmodel.client)"
            )
        if not self.path.is_file():
            raise ModelFileError(f"{self.path}: no such model file")
        self.runtime = runtime
        self._run, metadata = _OPENERS[runtime](self.path)
        self.metadata = _checked_metadata(self.path, metadata)
        self.categories = categories_of(self.metadata["labels"])
        self.keypoint_confidence = self.metadata["keypoint_confidence"]
        self.num_classes = self.metadata["num_classes"]

    def predict(self, image):
        """Detections of one H x W x 3 uint8 BGR image, as `Predictor.predict` returns them."""
        image = np.ascontiguousarray(image, np.uint8)
        if image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"expected an H x W x 3 BGR image, got shape {image.shape}")
        rgb = np.ascontiguousarray(image[None, :, :, ::-1])  # the image_tensor signature takes RGB
        detections = detections_per_image(self._run(rgb))[0]
        detections.pop("class_names", None)
        return detections


def _checked_metadata(path, text):
    """The parsed `tfdet` metadata, or ModelFileError saying what the file lacks."""
    if text is None:
        raise ModelFileError(
            f"{path}: holds no tfdet metadata (not exported by `python -m savedmodel.export --format ...`)"
        )
    try:
        metadata = json.loads(text)
    except json.JSONDecodeError as error:
        raise ModelFileError(f"{path}: its tfdet metadata is not JSON ({error})") from None
    if metadata.get("version") != METADATA_VERSION:
        raise ModelFileError(
            f"{path}: tfdet metadata version {metadata.get('version')!r}; this runner reads version "
            f"{METADATA_VERSION} (export the model again with this tfdet)"
        )
    return metadata


def _import_runtime(runtime, module):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise ModelFileError(f"the {runtime} runtime is not installed: pip install {INSTALL[runtime]}") from None


def _open_onnx(path):
    ort = _import_runtime("onnx", "onnxruntime")
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own exception types for bad files
        raise ModelFileError(f"{path}: ONNX Runtime cannot load it ({str(error).splitlines()[0]})") from None
    names = [output.name for output in session.get_outputs()]

    def run(images):
        return dict(zip(names, session.run(names, {TENSOR_INPUT: images})))

    return run, session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)


def _open_openvino(path):
    ov = _import_runtime("openvino", "openvino")
    core = ov.Core()
    try:
        model = core.read_model(str(path))
    except Exception as error:  # OpenVINO raises RuntimeError and its own types
        raise ModelFileError(f"{path}: OpenVINO cannot read it ({str(error).splitlines()[0]})") from None
    metadata = model.get_rt_info([METADATA_KEY]).astype(str) if model.has_rt_info([METADATA_KEY]) else None
    compiled = core.compile_model(model, "CPU")
    request = compiled.create_infer_request()

    def run(images):
        results = request.infer({TENSOR_INPUT: images})
        return {output.get_any_name(): value for output, value in results.items()}

    return run, metadata


def _open_litert(path):
    litert = _import_runtime("litert", "ai_edge_litert.interpreter")
    try:
        interpreter = litert.Interpreter(model_path=str(path))
    except Exception as error:  # LiteRT raises ValueError or RuntimeError for bad files
        raise ModelFileError(f"{path}: LiteRT cannot load it ({str(error).splitlines()[0]})") from None
    runner = interpreter.get_signature_runner()
    sidecar = path.with_suffix(".json")
    metadata = sidecar.read_text(encoding="utf-8") if sidecar.is_file() else None

    def run(images):
        return runner(**{TENSOR_INPUT: images})

    return run, metadata


_OPENERS = {"onnx": _open_onnx, "openvino": _open_openvino, "litert": _open_litert}
