"""Exports for other runtimes, made from the SavedModel's `image_tensor` signature.

- onnx: tf2onnx converts the signature (standard ONNX operators of opset `ONNX_OPSET`, no custom domain);
  the `tfdet` metadata (`savedmodel.runtimes.model_metadata`) goes into the file's metadata_props.
- openvino, litert: refused in one line saying why (`NOT_YET`).
It takes images of any size (dynamic shapes), as the SavedModel does. The file appears complete or not at
all (written under a temporary name, then renamed).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

from savedmodel.label_map import LABELS_FILE
from savedmodel.runtimes import METADATA_KEY, categories_of, model_metadata

ONNX_OPSET = 18
FORMATS = {"onnx": ".onnx"}
NOT_YET = {
    "openvino": "OpenVINO's ONNX reader converts neither the ONNX Loops of tfdet's NMS nor Resize's "
    "tf_crop_and_resize mode: not exported yet (its runtime reads the .onnx file neither)",
    "litert": "LiteRT has no builtin CropAndResize (RoIAlign) or dynamic-size image input: not exported yet",
}


class RuntimeExportError(ValueError):
    """An export to another runtime that cannot proceed, in one line."""


def check_format(fmt, out):
    """`out` as a Path, checked to suit `fmt` (its file extension), before any model is built."""
    if fmt in NOT_YET:
        raise RuntimeExportError(f"--format {fmt}: {NOT_YET[fmt]}")
    out = pathlib.Path(out)
    if out.suffix.lower() != FORMATS[fmt]:
        raise RuntimeExportError(f"--format {fmt} writes a {FORMATS[fmt]} file: --out {out} should end in it")
    return out


def export_for_runtime(cfg, weights, out, fmt, overwrite=False, dataset_json=None, export_saved_model=None):
    """Write the model of `cfg` and `weights` for runtime `fmt` to `out`; returns `out`.

    `export_saved_model`: `savedmodel.export.export_saved_model` (passed in: that module imports this one).
    """
    out = check_format(fmt, out)
    if out.exists() and not overwrite:
        raise RuntimeExportError(f"{out} already exists; pass --overwrite to replace it")
    _check_installed(fmt)
    with tempfile.TemporaryDirectory() as work:
        work = pathlib.Path(work)
        from tfdet.ops.roi_align import portable_crop_and_resize

        with portable_crop_and_resize():  # RoIAlign's crops as gathers: runtimes without CropAndResize read them
            saved = export_saved_model(cfg, weights, work / "saved" / "1", dataset_json=dataset_json)
        labels = json.loads((saved / "assets" / LABELS_FILE).read_text(encoding="utf-8"))
        metadata = json.dumps(model_metadata(categories_of(labels), cfg), ensure_ascii=False)
        onnx_path = work / "model.onnx"
        _convert_to_onnx(saved, onnx_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_onnx(onnx_path, metadata, out)
    return out


def _check_installed(fmt):
    for module in ("tf2onnx", "onnx"):
        try:
            __import__(module)
        except ImportError:
            raise RuntimeExportError(f"--format {fmt} needs {module}: pip install {module}") from None


def _convert_to_onnx(saved_model, path):
    """tf2onnx of the `image_tensor` signature, in a child process (its log stays off the terminal)."""
    command = [
        sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(saved_model), "--signature_def",
        "image_tensor", "--opset", str(ONNX_OPSET), "--output", str(path),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=_quiet_env())
    if done.returncode != 0 or not path.is_file():
        errors = [line for line in done.stderr.splitlines() if "Error" in line or "error" in line]
        raise RuntimeExportError(f"tf2onnx could not convert the model: {(errors or ['no message'])[-1].strip()}")


def _quiet_env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


def _write_onnx(onnx_path, metadata, out):
    import onnx

    model = onnx.load(str(onnx_path))
    entry = model.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, metadata
    staging = out.with_name(f".{out.name}.partial")
    onnx.save(model, str(staging))
    staging.replace(out)
