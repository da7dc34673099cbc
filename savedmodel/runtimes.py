"""Exported models opened with their own runtime (ONNX Runtime): no TensorFlow.

Every export holds the SavedModel's `image_tensor` signature (uint8 RGB images in, the signature's
detection outputs out, see `savedmodel.outputs`) and a `tfdet` metadata entry (JSON, `model_metadata`):
the class names and dataset ids (labels.json's content), KRCNN.KEYPOINT_CONFIDENCE and MODEL.NUM_CLASSES.
The runtime is chosen by the file: `.onnx` ONNX Runtime (the only export so far).
"""

import json
import pathlib

import numpy as np

from savedmodel.outputs import TENSOR_INPUT, detections_per_image
from tfdet.data.coco_classes import ModelCategories

METADATA_KEY = "tfdet"
METADATA_VERSION = 1
RUNTIMES = {".onnx": "onnx"}  # OpenVINO IR and LiteRT follow when savedmodel.export writes them
INSTALL = {"onnx": "onnxruntime"}


class ModelFileError(ValueError):
    """A model file the runner cannot use, in one line naming it."""


def model_metadata(categories, cfg):
    """The `tfdet` metadata of an export: labels (as labels.json), keypoint confidence, class count."""
    from savedmodel.label_map import labels_json

    return {
        "version": METADATA_VERSION,
        "labels": labels_json(categories),
        "keypoint_confidence": cfg.KRCNN.KEYPOINT_CONFIDENCE,
        "num_classes": int(cfg.MODEL.NUM_CLASSES),
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


_OPENERS = {"onnx": _open_onnx}
