"""Exports for other runtimes: the raw detection graph (`savedmodel.runtime_graph`) with the `tfdet` metadata.

- onnx: tf2onnx converts the graph (standard operators of opset `ONNX_OPSET`, no custom domain); the metadata
  goes into the file's metadata_props. `--precision int8`: ONNX Runtime's static quantization of the
  convolutions and matrix products (QDQ, int8 weights per channel), calibrated on `--calibrate` images.
- openvino: OpenVINO's TensorFlow reader converts the graph to IR (model.xml + model.bin, weights kept in
  float32); the metadata goes into the IR's rt_info. `--precision bfloat16|float16`: the runtime's inference
  precision, stored with the model and applied by the runner.
- litert: TensorFlow's LiteRT converter, builtin operators only (`savedmodel.litert_export`); the metadata in the
  flatbuffer's metadata list.
Images of any size go in (dynamic shapes). The files appear complete or not at all (written under temporary
names, then renamed).
"""

import contextlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from savedmodel.litert_export import convert_to_litert, litert_refusal
from savedmodel.runtime_files import METADATA_KEY, RuntimeExportError
from savedmodel.runtimes import model_metadata

ONNX_OPSET = 18
FORMATS = {"onnx": ".onnx", "openvino": ".xml", "litert": ".tflite"}
PRECISIONS = {"onnx": ("float32", "int8"), "openvino": ("float32", "bfloat16", "float16"), "litert": ("float32",)}
NEEDS = {"onnx": ("tf2onnx", "onnx"), "openvino": ("openvino",), "litert": ()}  # LiteRT's converter is TF's
CALIBRATION_IMAGES = 32


def check_format(fmt, out, precision="float32", calibrate=None):
    """`out` as a Path, checked to suit `fmt` (its file extension) and `precision`, before any model is built."""
    out = pathlib.Path(out)
    if out.suffix.lower() != FORMATS[fmt]:
        raise RuntimeExportError(f"--format {fmt} writes a {FORMATS[fmt]} file: --out {out} should end in it")
    if precision not in PRECISIONS[fmt]:
        raise RuntimeExportError(
            f"--format {fmt} --precision {precision}: {fmt} exports compute in {', '.join(PRECISIONS[fmt])}"
        )
    if (precision == "int8") != (calibrate is not None):
        raise RuntimeExportError(
            "--precision int8 needs --calibrate IMAGES (a dataset name such as coco:JSON:DIR, a folder or a glob)"
            if precision == "int8" else "--calibrate is for --precision int8"
        )  # fmt: skip
    return out


def export_for_runtime(cfg, weights, out, fmt, overwrite=False, dataset_json=None, precision="float32",
                       calibrate=None):  # fmt: skip
    """Write the model of `cfg` and `weights` for runtime `fmt` to `out` in `precision`; returns `out`.
    `calibrate` (int8): the images the quantization ranges are measured on (`calibration_images`)."""
    from savedmodel.loaded_model import check_exportable, load_model_for_export

    out = check_format(fmt, out, precision, calibrate)
    check_exportable(cfg)
    refusal = litert_refusal(cfg) if fmt == "litert" else None
    if refusal:
        raise RuntimeExportError(f"--format litert: {refusal}; --format onnx or openvino exports it")
    if out.exists() and not overwrite:
        raise RuntimeExportError(f"{out} already exists; pass --overwrite to replace it")
    _check_installed(fmt)
    calibration = calibration_images(calibrate) if calibrate is not None else None
    from savedmodel.runtime_graph import write_raw_saved_model
    from tfdet.imaging.preprocessing import padding_stride

    model, categories = load_model_for_export(cfg, weights, dataset_json)
    metadata = json.dumps(model_metadata(categories, cfg, padding_stride(cfg), precision), ensure_ascii=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work, _quiet_absl():
        work = pathlib.Path(work)
        saved = write_raw_saved_model(model, work / "saved")
        if fmt == "onnx":
            _convert_to_onnx(saved, work / "model.onnx")
            if calibration is not None:
                from savedmodel.quantization import quantize_onnx

                quantize_onnx(work / "model.onnx", work / "model.int8.onnx", calibration, json.loads(metadata))
                (work / "model.int8.onnx").replace(work / "model.onnx")
            _write_onnx(work / "model.onnx", metadata, out)
        elif fmt == "litert":
            convert_to_litert(saved, out, metadata)
        else:
            _write_openvino(saved, metadata, out)
    return out


@contextlib.contextmanager
def _quiet_absl():
    """TensorFlow's Python-side absl warnings off the terminal while the converters reload the graph (its
    custom gradients are not saved: serving never differentiates)."""
    from absl import logging as absl_logging  # TensorFlow's own dependency

    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        yield
    finally:
        absl_logging.set_verbosity(verbosity)


def calibration_images(spec, count=CALIBRATION_IMAGES):
    """Up to `count` image paths for calibration, evenly spread: a dataset name (coco:JSON:DIR, a registered or
    catalog name) gives its json's images; otherwise an image, a folder or a glob
    (`tfdet.imaging.image_io.list_inputs`)."""
    from tfdet.imaging.image_io import VIDEO_EXTENSIONS, list_inputs

    if ":" in str(spec) or not pathlib.Path(spec).exists() and not any(c in str(spec) for c in "*?["):
        paths = _dataset_images(spec)
    else:
        paths = [p for p in list_inputs(spec) if p.suffix.lower() not in VIDEO_EXTENSIONS]
    if not paths:
        raise RuntimeExportError(f"--calibrate {spec}: no images")
    step = max(1, len(paths) // count)
    return paths[::step][:count]


def _dataset_images(name):
    from tfdet.data.catalog import get_dataset
    from tfdet.data.coco_json import load_json

    try:
        spec = get_dataset(name)
    except (KeyError, ValueError, FileNotFoundError) as error:
        raise RuntimeExportError(f"--calibrate {name}: {str(error).strip(chr(34) + chr(39))}") from None
    images = load_json(spec.annotation_file).get("images", [])
    return [pathlib.Path(spec.image_dir) / image["file_name"] for image in sorted(images, key=lambda i: i["id"])]


def _check_installed(fmt):
    for module in NEEDS[fmt]:
        try:
            __import__(module)
        except ImportError:
            raise RuntimeExportError(f"--format {fmt} needs {module}: pip install {module}") from None


def _convert_to_onnx(saved_model, path):
    """tf2onnx of the raw detection signature, in a child process (its log stays off the terminal)."""
    command = [
        sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(saved_model), "--opset", str(ONNX_OPSET),
        "--output", str(path),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if done.returncode != 0 or not path.is_file():
        errors = [line for line in done.stderr.splitlines() if "Error" in line or "error" in line]
        raise RuntimeExportError(f"tf2onnx could not convert the model: {(errors or ['no message'])[-1].strip()}")


def _write_onnx(onnx_path, metadata, out):
    import onnx

    model = onnx.load(str(onnx_path))
    entry = model.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, metadata
    staging = out.with_name(f".{out.name}.partial")
    onnx.save(model, str(staging))
    staging.replace(out)


def _write_openvino(saved_model, metadata, out):
    """IR of the SavedModel (OpenVINO's TensorFlow reader), float32 weights, metadata in rt_info: the .bin
    is renamed into place before the .xml, so a complete .xml always has its weights."""
    import openvino as ov

    try:
        model = ov.convert_model(str(saved_model))
    except Exception as error:  # OpenVINO's conversion errors are its own types
        raise RuntimeExportError(f"OpenVINO could not convert the model: {str(error).strip().splitlines()[0]}")
    model.set_rt_info(metadata, [METADATA_KEY])
    staging = out.with_name(f".{out.stem}.partial.xml")
    ov.save_model(model, str(staging), compress_to_fp16=False)
    staging.with_suffix(".bin").replace(out.with_suffix(".bin"))
    staging.replace(out)
