"""Exported models opened with their own runtime: no TensorFlow, no tfdet model code.

An export holds the raw detection graph (`savedmodel.runtime_graph`) and a `tfdet` metadata entry (JSON,
`model_metadata`): the class names and dataset ids (labels.json's content), the preparation and finishing
values of the config, and the precision the runtime computes in. `ExportedModel.predict` prepares images,
runs the graph and finishes its detections with the code the Predictor uses, so it returns what
`Predictor.predict` returns. The runtime is chosen by the file: `.onnx` ONNX Runtime, `.xml` OpenVINO, `.tflite` LiteRT.
"""

import json
import pathlib

import numpy as np

from savedmodel.litert_runtime import open_litert
from savedmodel.runtime_files import METADATA_KEY, ModelFileError, Opened, first_line
from tfdet.data.coco_classes import ModelCategories
from tfdet.imaging.keypoint_decoding import heatmaps_to_keypoints
from tfdet.imaging.mask_paste import paste_masks
from tfdet.imaging.preprocessing import as_bgr_image, prepared_inputs

METADATA_VERSION = 2
RUNTIMES = {".onnx": "onnx", ".xml": "openvino", ".tflite": "litert"}
INSTALL = {"onnx": "onnxruntime", "openvino": "openvino", "litert": "ai-edge-litert"}
# What each runtime computes in, by the export's --precision (float32 unless the export said otherwise).
OPENVINO_PRECISION_HINTS = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


def model_metadata(categories, cfg, stride, precision="float32"):
    """The `tfdet` metadata of an export of `cfg`: labels (as labels.json), the values that prepare images
    (PIXEL_MEANS, TEST.SCALE, TEST.MAX_SIZE, the padding `stride`) and finish detections
    (MRCNN.THRESH_BINARIZE, KRCNN.INFERENCE_MIN_SIZE, KRCNN.KEYPOINT_CONFIDENCE), the class count, `precision`."""
    from savedmodel.label_map import labels_json

    return {
        "version": METADATA_VERSION,
        "labels": labels_json(categories),
        "num_classes": int(cfg.MODEL.NUM_CLASSES),
        "pixel_means": [float(v) for v in np.asarray(cfg.PIXEL_MEANS, np.float64).reshape(3)],
        "test_scale": int(cfg.TEST.SCALE),
        "test_max_size": int(cfg.TEST.MAX_SIZE),
        "stride": int(stride),
        "mask_threshold": float(cfg.MRCNN.THRESH_BINARIZE),
        "keypoint_min_size": int(cfg.KRCNN.INFERENCE_MIN_SIZE),
        "keypoint_confidence": cfg.KRCNN.KEYPOINT_CONFIDENCE,
        "precision": precision,
    }


def categories_of(labels):
    """ModelCategories of labels.json's content."""
    classes = sorted(labels["classes"], key=lambda c: c["id"])
    names = ("__background__",) + tuple(c["name"] for c in classes) if labels["names_known"] else None
    return ModelCategories(names, (0,) + tuple(int(c["dataset_id"]) for c in classes))


class ExportedModel:
    """An exported tfdet model: `predict(image)` gives what `Predictor.predict` gives for a BGR uint8 image (or
    a list of them, batched as the Predictor batches); `categories`, `keypoint_confidence`, `num_classes` as the
    model was exported with; `precision`, what the runtime computes in on this CPU (the export's, or float32
    or bfloat16 where the CPU lacks the one asked for: OpenVINO's choice)."""

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
        opened = _OPENERS[runtime](self.path)
        self.metadata = _checked_metadata(self.path, opened.metadata)
        self._run, self.precision = opened.compile(self.metadata["precision"])
        self.categories = categories_of(self.metadata["labels"])
        self.keypoint_confidence = self.metadata["keypoint_confidence"]
        self.num_classes = self.metadata["num_classes"]

    def predict(self, image):
        """Detections of one H x W x 3 uint8 BGR image, as `Predictor.predict` returns them; a list of
        results for a list of images (sizes may differ: one padded batch, as the Predictor runs it)."""
        if isinstance(image, (list, tuple)):
            return self._predict_batch(list(image))
        return self._predict_batch([image])[0]

    def _predict_batch(self, images):
        images = [as_bgr_image(image) for image in images]
        meta = self.metadata
        inputs = prepared_inputs(images, meta["pixel_means"], meta["test_scale"], meta["test_max_size"], meta["stride"])
        outputs = self._run(inputs)
        return [self._image_results(outputs, i, image.shape[:2]) for i, image in enumerate(images)]

    def _image_results(self, outputs, index, image_size):
        count = int(outputs["num_detections"][index])
        result = {
            "boxes": outputs["boxes"][index, :count].astype(np.float32),
            "scores": outputs["scores"][index, :count].astype(np.float32),
            "classes": outputs["classes"][index, :count].astype(np.int32),
        }
        if "mask_probs" in outputs:
            height, width = int(image_size[0]), int(image_size[1])
            probs = outputs["mask_probs"][index, :count]
            result["masks"] = paste_masks(probs, result["boxes"], height, width, self.metadata["mask_threshold"])
        if "keypoint_heatmaps" in outputs:
            heatmaps = outputs["keypoint_heatmaps"][index, :count]
            keypoints = heatmaps_to_keypoints(heatmaps, result["boxes"], self.metadata["keypoint_min_size"])
            result["keypoints"] = keypoints[:, :, :3]
            result["keypoint_probs"] = keypoints[:, :, 3]
        return result


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
        raise ModelFileError(f"{path}: ONNX Runtime cannot load it ({first_line(error)})") from None
    names = [output.name for output in session.get_outputs()]
    inputs = [item.name for item in session.get_inputs()]

    def compile(precision):
        def run(feeds):
            return dict(zip(names, session.run(names, {name: feeds[name] for name in inputs})))

        return run, precision

    return Opened(session.get_modelmeta().custom_metadata_map.get(METADATA_KEY), compile)


def _open_openvino(path):
    ov = _import_runtime("openvino", "openvino")
    core = ov.Core()
    try:
        model = core.read_model(str(path))
    except Exception as error:  # OpenVINO raises RuntimeError subclasses of its own
        raise ModelFileError(f"{path}: OpenVINO cannot read it ({first_line(error)})") from None
    metadata = model.get_rt_info([METADATA_KEY]).astype(str) if model.has_rt_info([METADATA_KEY]) else None

    def compile(precision):
        hint = OPENVINO_PRECISION_HINTS.get(precision)
        if hint is None:
            raise ModelFileError(f"{path}: precision {precision!r} is not one OpenVINO computes in")
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": hint})
        request = compiled.create_infer_request()
        outputs = [(output, output.get_any_name()) for output in compiled.outputs]
        inputs = [item.get_any_name() for item in compiled.inputs]

        def run(feeds):
            request.infer({name: feeds[_plain(name)] for name in inputs})
            return {_plain(name): request.get_tensor(output).data.copy() for output, name in outputs}

        computed = compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
        return run, {hint: name for name, hint in OPENVINO_PRECISION_HINTS.items()}.get(computed, computed)

    return Opened(metadata, compile)


def _plain(name):
    """A tensor name without TensorFlow's ':0' suffix."""
    return name.split(":")[0]


_OPENERS = {"onnx": _open_onnx, "openvino": _open_openvino, "litert": open_litert}
