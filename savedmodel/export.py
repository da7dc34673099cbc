"""python -m savedmodel.export --cfg X.yaml --weights W --out BASE/NAME/VERSION [KEY VALUE ...]

Writes a SavedModel in TF Serving's layout (BASE/NAME/<integer version>/saved_model.pb and
variables/) with two signatures: `serving_default` (encoded JPEG/PNG bytes, as the REST API
sends them base64) and `image_tensor` (uint8 RGB batches). `--weights` is our `.weights.h5` or a
Detectron `.pkl`. The classes are named as `tfdet.data.coco_classes.model_categories` decides (the
weights' stored classes, else `--dataset-json`'s categories, else COCO's for 81 classes, else ids): the
`detection_class_names` output and the assets `labels.json` and `label_map.pbtxt` (`savedmodel.label_map`).
An existing version is refused unless `--overwrite`; the version appears
complete or not at all (written beside it under a name TF Serving ignores, then renamed).
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import json
import pathlib
import shutil
import sys
import tempfile
import time
import uuid

from tqdm import tqdm

from savedmodel.label_map import LABELS_FILE
from savedmodel.loaded_model import check_exportable, load_model_for_export
from savedmodel.outputs import MASK_FORMATS
from savedmodel.runtime_export import FORMATS as RUNTIME_FORMATS
from savedmodel.runtime_export import PRECISIONS, check_format, export_for_runtime
from tfdet.console import add_verbose_flag


class ExportError(Exception):
    """The export cannot proceed; the message says why in one line."""


def version_directory(out):
    """`out` as a Path, checked to be BASE/NAME/VERSION with VERSION a non-negative integer."""
    out = pathlib.Path(out)
    if not out.name.isdigit():
        raise ExportError(
            f"--out must end in an integer version directory (BASE/NAME/1), as TF Serving loads: got {str(out)!r}"
        )
    return out


def export_saved_model(cfg, weights, out, mask_format="image", overwrite=False, progress=False, dataset_json=None):
    """Build the model of `cfg`, load `weights` (ours or a Detectron .pkl), write the SavedModel with its
    classes' names (`model_categories` of the weights' stored classes and `dataset_json`).

    Returns the version directory. Raises ExportError when it exists and `overwrite` is False, or for `mask_format`
    "roi" on a model without masks; ValueError when `dataset_json` is bad or disagrees with the classes the
    weights store.
    `progress`: a bar over the steps (build and load, trace and write) on a terminal. Config keys tfdet does not
    implement for export raise tfdet.config.ConfigError first (`tfdet.config.support`).
    """
    check_exportable(cfg)
    if mask_format != "image" and not cfg.MODEL.MASK_ON:
        raise ExportError(no_masks(mask_format))
    out = version_directory(out)
    if out.exists() and not overwrite:
        raise ExportError(f"{out} already exists; pass --overwrite to replace that version")
    import tensorflow as tf

    from savedmodel.label_map import write_label_map
    from savedmodel.signatures import DetectionServingModule

    with tqdm(total=2, desc="export", unit="step", leave=False, disable=None if progress else True) as bar:
        bar.set_postfix_str(f"building the model, loading {pathlib.Path(str(weights)).name}")
        try:
            model, categories = load_model_for_export(cfg, weights, dataset_json)
        except FileNotFoundError as error:
            raise ExportError(str(error)) from None
        bar.update()
        bar.set_postfix_str("tracing the signatures, writing")
        module = DetectionServingModule(model, cfg, mask_format, categories)
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = out.parent / f".{out.name}-export-{uuid.uuid4().hex[:12]}"
        staging.mkdir()  # mkdir honours the umask (mkdtemp's 0700 would hide it from a server's user)
        try:
            with tempfile.TemporaryDirectory() as label_dir:
                # tracked assets: saving copies them into assets/; tf.saved_model.load gives their paths
                labels, label_map = write_label_map(label_dir, categories)
                module.labels_file = tf.saved_model.Asset(str(labels))
                module.label_map_file = tf.saved_model.Asset(str(label_map))
                # Serving never differentiates: without the custom gradients (GroupNorm's, RoIAlign's) saved
                # beside the graph, TensorFlow does not trace each of them again (tiny Faster R-CNN: 14.8 -> 10.9 s).
                options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
                tf.saved_model.save(module, str(staging), signatures=module.signatures(), options=options)
            replace_version(staging, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        bar.update()
    return out


def no_masks(mask_format):
    """The refusal of a mask format for a model without masks: the option would change nothing."""
    return f"--mask-format {mask_format} applies to a model with masks, and this one has none (MODEL.MASK_ON False)"


def replace_version(staging, out):
    """Rename the finished export `staging` to `out`; an existing `out` is swapped out as late as possible."""
    if not out.exists():
        staging.rename(out)
        return
    retired = out.parent / f".{out.name}-replaced-{staging.name}"
    out.rename(retired)
    staging.rename(out)
    shutil.rmtree(retired, ignore_errors=True)


def _parse(argv):
    parser = argparse.ArgumentParser(
        prog="python -m savedmodel.export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_verbose_flag(parser)
    parser.add_argument("--cfg", required=True, help="YAML config of the model (Detectron's own or ours)")
    parser.add_argument(
        "--weights", required=True,
        help="our .weights.h5 or a Detectron .pkl (a Detectron URL or catalog:// name: downloaded, md5-checked)",
    )  # fmt: skip
    parser.add_argument(
        "--out", required=True,
        help="BASE/NAME/VERSION, VERSION an integer (a SavedModel); a .onnx file for --format onnx, a .xml file "
        "(beside it the .bin) for --format openvino, a .tflite file for --format litert",
    )  # fmt: skip
    parser.add_argument(
        "--format", default="savedmodel", choices=("savedmodel", *RUNTIME_FORMATS),
        help="savedmodel (TF Serving's layout, default); onnx (standard opset, for ONNX Runtime); openvino (IR); "
        "litert (.tflite of builtin operators); the class names inside each",
    )  # fmt: skip
    precisions = sorted({p for values in PRECISIONS.values() for p in values})
    parser.add_argument(
        "--precision", default="float32", choices=precisions,
        help="what the runtime computes in: float32 (default, tfdet's detections); onnx: int8 (needs --calibrate); "
        "openvino: bfloat16 or float16",
    )  # fmt: skip
    parser.add_argument(
        "--calibrate",
        help="int8: images to calibrate on: a dataset name (coco:JSON:DIR, ...), a folder or a glob",
    )
    parser.add_argument(
        "--mask-format",
        choices=MASK_FORMATS,
        help="image: binary masks pasted to the image size (default); roi: M x M probabilities per box "
        "(models with masks only)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing version")
    parser.add_argument(
        "--dataset-json",
        help="COCO json whose categories name the classes of weights that store none (if they do, it must agree)",
    )
    parser.add_argument("opts", nargs="*", help="config overrides KEY VALUE ...")
    return parser.parse_args(argv)


def main(argv=None):
    args = _parse(argv)
    from porting.pickle_reader import WeightFileError
    from tfdet.config import load_config

    start = time.perf_counter()
    try:
        if args.format == "savedmodel":
            version_directory(args.out)
            if args.precision != "float32" or args.calibrate is not None:
                raise ExportError("--precision and --calibrate are for --format onnx or openvino; a SavedModel "
                                  "computes as its config says (TFDET.MIXED_PRECISION)")
        else:
            check_format(args.format, args.out, args.precision, args.calibrate)
        if not pathlib.Path(args.cfg).is_file():
            raise ExportError(f"config file not found: {args.cfg}")  # as tfdet.train and tfdet.evaluate say it
        cfg = load_config(args.cfg, args.opts)
        if args.mask_format is not None and not cfg.MODEL.MASK_ON:
            raise ExportError(no_masks(args.mask_format))
        mask_format = args.mask_format or "image"
        if args.format != "savedmodel":
            if mask_format != "image":
                raise ExportError(f"--format {args.format} exports image masks: --mask-format {mask_format} is for "
                                  "the SavedModel")
            out = export_for_runtime(cfg, args.weights, args.out, args.format, args.overwrite, args.dataset_json,
                                     args.precision, args.calibrate)
            print(f"wrote {out} in {time.perf_counter() - start:.1f} s ({args.format}, {args.precision}); run it with "
                  f"python -m savedmodel.run --model {out} --input IMAGES")
            return 0
        out = export_saved_model(
            cfg, args.weights, args.out, mask_format, args.overwrite, progress=True, dataset_json=args.dataset_json
        )
    except (ExportError, ValueError, FileNotFoundError, WeightFileError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    masks = f"; {mask_format} masks" if cfg.MODEL.MASK_ON else ""
    size_mb = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 2**20
    print(f"wrote {out} in {time.perf_counter() - start:.1f} s, {size_mb:.0f} MB "
          f"(signatures serving_default, image_tensor{masks})")
    print(_classes_line(out / "assets" / LABELS_FILE))
    return 0


def _classes_line(labels_path):
    """'3 classes (assets/labels.json): square, circle, triangle' from the exported label map."""
    classes = json.loads(labels_path.read_text(encoding="utf-8"))["classes"]
    names = ", ".join(c["name"] for c in classes[:6]) + (", ..." if len(classes) > 6 else "")
    return f"{len(classes)} classes ({labels_path.parent.name}/{labels_path.name}): {names}"


if __name__ == "__main__":
    sys.exit(main())
