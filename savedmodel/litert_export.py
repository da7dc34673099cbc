"""LiteRT export: the raw detection SavedModel (`savedmodel.runtime_graph`) converted to a .tflite flatbuffer
of LiteRT builtin operators only (no Flex / SELECT_TF_OPS delegate, no custom ops), float32 weights. Its
inputs keep TensorFlow's unknown sizes: the interpreter resizes them to each blob (`savedmodel.litert_runtime`).
The `tfdet` metadata JSON is stored in the flatbuffer's `metadata` list, where the runner reads it without
TensorFlow. The file appears complete or not at all (written under a temporary name, then renamed).
"""

import pathlib

import numpy as np

from savedmodel.runtime_files import METADATA_KEY, RuntimeExportError


def litert_refusal(cfg):
    """Why the model of `cfg` has no LiteRT builtin form, in a phrase, or None: adaptive RoIAlign (sampling ratio 0,
    Detectron's C4 configs) pools each box with its own grid in a loop of variable shapes, which the converter does
    not lower; soft-NMS's gaussian decay is computed in float64, which LiteRT lacks."""
    if cfg.MODEL.TYPE == "generalized_rcnn":
        heads = (("FAST_RCNN", True), ("MRCNN", cfg.MODEL.MASK_ON), ("KRCNN", cfg.MODEL.KEYPOINTS_ON))
        for section, on in heads:
            if on and cfg[section].ROI_XFORM_SAMPLING_RATIO == 0 and cfg[section].ROI_XFORM_METHOD == "RoIAlign":
                return (f"{section}.ROI_XFORM_SAMPLING_RATIO 0 (adaptive RoIAlign) pools each box in a loop of "
                        "variable shapes, which LiteRT's converter does not lower")
    if cfg.TEST.SOFT_NMS.ENABLED and cfg.TEST.SOFT_NMS.METHOD == "gaussian":
        return "TEST.SOFT_NMS.METHOD gaussian decays scores in float64, which LiteRT lacks"
    return None


def convert_to_litert(saved_model_dir, out_path, metadata_json):
    """Write the `serving_default` signature of `saved_model_dir` as LiteRT builtins to `out_path` (.tflite),
    with `metadata_json` (text) as its `tfdet` metadata entry; returns `out_path` as a Path."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model_dir))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    try:
        content = converter.convert()
    except Exception as error:  # the converter's ConverterError, whose summary names the ops it could not lower
        lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
        ops = [line.split(":", 1)[1].strip() for line in lines if line.startswith("TF Select ops:")]
        errors = [line.rsplit("error: ", 1)[-1] for line in lines if "error: " in line]
        reason = f"no LiteRT builtin for {ops[0]}" if ops else (errors or lines)[0]
        raise RuntimeExportError(f"the LiteRT converter could not convert the model: {reason}") from None
    out = pathlib.Path(out_path)
    staging = out.with_name(f".{out.name}.partial")
    staging.write_bytes(with_metadata(content, METADATA_KEY, metadata_json.encode("utf-8")))
    staging.replace(out)
    return out


def with_metadata(content, name, data):
    """The .tflite flatbuffer `content` with a metadata entry `name` holding `data` (bytes), added as the
    converter adds its own conversion metadata."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(content))
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(data, np.uint8)
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name, entry.buffer = name, len(model.buffers) - 1
    model.metadata = [*(model.metadata or []), entry]
    return flatbuffer_utils.convert_object_to_bytearray(model)
