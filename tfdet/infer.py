"""python -m tfdet.infer: detections, pictures and COCO json for images, folders, globs and videos.

    python -m tfdet.infer --cfg X.yaml --weights W --input PATH [--output DIR] [KEY VALUE ...]
    python -m tfdet.infer --cfg X.yaml --wts W [--output-dir DIR] [--image-ext jpg] IMAGE_OR_FOLDER
    python -m tfdet.infer --zoo e2e_mask_rcnn_R-50-FPN_1x --input PATH [--output DIR] [KEY VALUE ...]

The second form is Detectron's `tools/infer_simple.py` command line (its flags `--wts`,
`--output-dir`, `--image-ext`, `--output-ext`, `--always-out`, `--thresh`, `--kp-thresh` work as
there). Trailing KEY VALUE pairs override config keys (e.g. `TEST.SCALE 600`). W may be a Detectron URL or
`catalog://` name (downloaded once, md5-checked: tfdet.weights.download); `--zoo NAME` takes a Detectron zoo model
by name instead of --cfg and --weights, ported once into $TFDET_CACHE/zoo/NAME (porting.zoo).

Written to the output folder, each named after its input file (Detectron's `<file name>.<ext>`):
- `<name>.<output-ext>`: the picture (png, jpg or pdf; pdf is a one-page raster PDF, as OpenCV
  writes no PDF). As in Detectron, an image with no detection scoring >= --thresh gets no
  picture unless --always-out is given. An image under 512 px on its shorter side is drawn enlarged by
  a whole factor, its boxes on the same pixels, so that every label can be read (`tfdet.visualize`);
- `<name>.mp4`: for a video, every frame annotated (mp4v);
- `<name>.npz`: with --videopose3d, VideoPose3D's 2D detections of a video (`tfdet.outputs.videopose3d`);
- `detections.json`: COCO results (every detection the model keeps, whatever --thresh) of the whole
  run, and `images.json`: the COCO `images` (ids, file names, sizes; video frames have `frame`)
  and `categories` they refer to, so `COCO("images.json").loadRes("detections.json")` works.
  With --json-per-input, each input also gets `<name>.json` with its own results.
Classes are named, and results carry dataset category ids, as the weights file stores them (a model
trained or ported by tfdet; `tfdet.data.model_labels`); --dataset-json names the classes of weights
that store none and must agree with those that do; else COCO's for 81 classes, else ids.
Unreadable inputs are reported and skipped; the exit status is 1 if any failed. Progress bars are drawn only
on a terminal: a redirected log holds the errors and the summary.
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import sys

from tfdet.config import ConfigError, check_supported, load_config
from tfdet.console import add_verbose_flag
from tfdet.data.coco_classes import model_categories
from tfdet.data.model_labels import read_model_categories
from tfdet.evaluation.results import KEYPOINT_CONFIDENCES
from tfdet.imaging.image_io import PICTURE_FORMATS, list_inputs
from tfdet.inference import Predictor
from tfdet.outputs.detection_writer import DetectionRun
from tfdet.startup import freeze_imports
from tfdet.weights.weights_file import weights_file


class UsageError(Exception):
    """A command line that cannot run (no input, a model that lacks what an option needs, a bad dataset json)."""


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m tfdet.infer",
        description="Detect objects in images, folders, globs or videos; write pictures and COCO json.",
    )
    add_verbose_flag(parser)
    parser.add_argument("--cfg", help="config YAML (Detectron's own zoo files load unchanged)")
    parser.add_argument(
        "--weights", "--wts", dest="weights",
        help="our .weights.h5 or a Detectron .pkl (a Detectron URL or catalog:// name: downloaded and md5-checked)",
    )  # fmt: skip
    parser.add_argument(
        "--zoo", metavar="NAME",
        help="instead of --cfg and --weights: Detectron zoo model NAME (python -m porting zoo --list), ported once "
        "into $TFDET_CACHE/zoo/NAME",
    )  # fmt: skip
    parser.add_argument("--input", help="image, folder, glob pattern or video (or give it as the positional)")
    parser.add_argument("--output", "--output-dir", dest="output", default="infer_output", help="output folder")
    parser.add_argument(
        "--image-ext",
        help="in a folder, only files with this extension (e.g. jpg, mp4); default: every image and video",
    )
    parser.add_argument("--output-ext", default="png", choices=PICTURE_FORMATS, help="picture format (png)")
    parser.add_argument(
        "--always-out", action="store_true", help="write a picture even when no detection reaches --thresh"
    )
    parser.add_argument("--thresh", type=float, default=0.7, help="score threshold for drawing (0.7)")
    parser.add_argument("--kp-thresh", type=float, default=2.0, help="keypoint heatmap logit threshold (2)")
    parser.add_argument(
        "--dataset-json",
        help="COCO annotation json whose categories name the classes (weights that store their classes need "
        "none; if given, it must agree with them)",
    )
    parser.add_argument(
        "--json-per-input",
        "--json-per-image",
        action="store_true",
        help="also write <name>.json per input (detections.json of the whole run is always written)",
    )
    parser.add_argument("--videopose3d", action="store_true", help="per video, VideoPose3D's <name>.npz")
    parser.add_argument("--no-vis", action="store_true", help="write no pictures or annotated videos")
    parser.add_argument(
        "rest", nargs="*", metavar="[IMAGE_OR_FOLDER] KEY VALUE", help="input (without --input), config overrides"
    )
    return parser


def parse_args(argv=None):
    """Parsed command line; `args.input` is set and `args.opts` holds the KEY VALUE overrides."""
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)
    rest = list(args.rest)
    if args.input is None:
        if not rest:
            parser.error("give the input as --input PATH or as the first positional argument")
        args.input = rest.pop(0)
    if len(rest) % 2:
        parser.error(f"config overrides come in KEY VALUE pairs, got {rest}")
    if args.zoo is not None and (args.cfg or args.weights):
        parser.error("--zoo NAME replaces --cfg and --weights: give one or the other")
    if args.zoo is None and args.cfg is None:
        parser.error("--cfg is required (or --zoo NAME)")
    if args.zoo is None and args.weights is None:
        parser.error("--weights (or --wts) is required")
    args.opts = rest
    return args


def first_line(error):
    """The first line of an exception's message (Keras' weight-loading errors run to pages)."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def check_usage(args, cfg, stored=None):
    """(inputs, categories) for the command line, or UsageError before any model is built. `stored`: the
    classes the weights store (or a Predictor's categories), named and numbered by `model_categories`."""
    return check_inputs(args, cfg), check_categories(args, cfg, stored)


def check_inputs(args, cfg):
    """The input files of the command line (`list_inputs`), or UsageError: an input that is not there, an
    option the model of `cfg` cannot honour."""
    if args.videopose3d and not cfg.MODEL.KEYPOINTS_ON:
        raise UsageError("--videopose3d needs a keypoint model (MODEL.KEYPOINTS_ON: True)")
    if cfg.MODEL.KEYPOINTS_ON and cfg.KRCNN.KEYPOINT_CONFIDENCE not in KEYPOINT_CONFIDENCES:
        raise UsageError(
            f"KRCNN.KEYPOINT_CONFIDENCE {cfg.KRCNN.KEYPOINT_CONFIDENCE!r} cannot score json keypoints; "
            f"use one of {KEYPOINT_CONFIDENCES}"
        )
    try:
        return list_inputs(args.input, args.image_ext)
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from None


def check_categories(args, cfg, stored=None):
    """What the model's class ids mean (`model_categories` of `stored` and --dataset-json), or UsageError."""
    try:
        return model_categories(cfg.MODEL.NUM_CLASSES, cfg.MODEL.KEYPOINTS_ON, args.dataset_json, stored)
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from None


def run(args, predictor):
    """Run parsed `args` with an already built `predictor` (main builds one from --cfg, --weights); exit status."""
    try:
        inputs, categories = check_usage(args, predictor.cfg, predictor.categories)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return _execute(args, predictor, inputs, categories)


def _execute(args, predictor, inputs, categories):
    log = DetectionRun(args, predictor.predict, categories, predictor.cfg).run(inputs)
    print(log.summary(args.thresh))
    return 1 if log.failures else 0


def main(argv=None):
    """The command line: parse; check the config, the inputs, the weights and the classes, each once and before
    the model is built; build it from them (a Detectron .pkl is ported on load); run."""
    args = parse_args(argv)
    try:
        if args.zoo is not None:
            from porting.zoo import ported_zoo_files  # porting builds on tfdet: imported only for --zoo

            args.cfg, args.weights = ported_zoo_files(args.zoo)
        cfg = load_config(args.cfg, args.opts)
        check_supported(cfg, "inference")  # before the weights: a refused key is the config's problem
        inputs = check_inputs(args, cfg)  # before the weights: a download is slow
        weights = weights_file(args.weights, cfg.DOWNLOAD_CACHE)  # a URL: the checked download; else one line
        categories = check_categories(args, cfg, read_model_categories(weights.path))
    except (UsageError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    args.weights = weights.path
    freeze_imports()
    try:
        predictor = Predictor.from_checked(cfg, weights, categories)
    except ConfigError as error:  # a config value the model cannot be built with
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # the command line's boundary: any failure to load weights is one line
        reason = f"{type(error).__name__}: {first_line(error)}"
        print(f"error: cannot load {args.weights} into the model of {args.cfg}: {reason}", file=sys.stderr)
        return 2
    return _execute(args, predictor, inputs, categories)


if __name__ == "__main__":
    sys.exit(main())
