"""python -m tfdet.infer: detections, pictures and COCO json for images, folders, globs and videos.

    python -m tfdet.infer --cfg X.yaml --weights W --input PATH [--output DIR] [KEY VALUE ...]
    python -m tfdet.infer --cfg X.yaml --wts W [--output-dir DIR] [--image-ext jpg] IMAGE_OR_FOLDER
    python -m tfdet.infer --zoo e2e_mask_rcnn_R-50-FPN_1x --input PATH [--output DIR] [KEY VALUE ...]

The second form is Detectron's `tools/infer_simple.py` command line (its flags `--wts`,
`--output-dir`, `--image-ext`, `--output-ext`, `--always-out`, `--thresh`, `--kp-thresh` work as
there). Trailing KEY VALUE pairs override config keys (e.g. `TEST.SCALE 600`). W may be a Detectron URL or
`catalog://` name (downloaded once, md5-checked: tfdet.download); `--zoo NAME` takes a Detectron zoo model
by name instead of --cfg and --weights, ported once into $TFDET_CACHE/zoo/NAME (porting.zoo).

Written to the output folder, each named after its input file (Detectron's `<file name>.<ext>`):
- `<name>.<output-ext>`: the picture (png, jpg or pdf; pdf is a one-page raster PDF, as OpenCV
  writes no PDF). As in Detectron, an image with no detection scoring >= --thresh gets no
  picture unless --always-out is given. An image under 512 px on its shorter side is drawn enlarged by
  a whole factor, its boxes on the same pixels, so that every label can be read (`tfdet.visualize`);
- `<name>.mp4`: for a video, every frame annotated (mp4v);
- `<name>.npz`: with --videopose3d, VideoPose3D's 2D detections of a video (`tfdet.videopose3d`);
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
import json
import pathlib
import sys
import time
from dataclasses import dataclass, field

import cv2
import numpy as np
from tqdm import tqdm

from tfdet.config import check_supported, load_config
from tfdet.console import add_verbose_flag
from tfdet.data.coco_classes import model_categories
from tfdet.data.model_labels import read_model_categories
from tfdet.download import resolve_weights
from tfdet.evaluation.results import KEYPOINT_CONFIDENCES, detections_to_coco, write_results
from tfdet.image_io import (
    PICTURE_FORMATS,
    UnreadableImage,
    VideoFrames,
    is_video,
    list_inputs,
    read_image,
    write_picture,
)
from tfdet.inference import Predictor
from tfdet.startup import freeze_imports
from tfdet.videopose3d import VideoPose3DArchive
from tfdet.visualize import draw_detections
from tfdet.weights_file import weights_file

# Errors that make one input fail without stopping the run.
INPUT_ERRORS = (UnreadableImage, ValueError, OSError, cv2.error)


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


@dataclass
class RunLog:
    """What the run did: COCO results and images, latencies, failures."""

    results: list = field(default_factory=list)
    images: list = field(default_factory=list)
    latencies: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    pictures: int = 0
    frames: int = 0

    def fail(self, path, error):
        """Record and report an input that failed, named once (most errors name their file already)."""
        message = str(error) if str(path) in str(error) else f"{path}: {error}"
        self.failures.append(message)
        tqdm.write(f"error: {message}", file=sys.stderr)

    def summary(self, thresh):
        still = len(self.images) - self.frames
        detections = len(self.results)
        shown = sum(r["score"] >= thresh for r in self.results)
        lines = [
            f"{still} images, {self.frames} video frames, {detections} detections ({shown} scoring >= {thresh}), "
            f"{self.pictures} pictures or videos written"
        ]
        if self.latencies:
            lines.append(f"warm-up: the first image took {1000 * self.latencies[0]:.0f} ms (graph tracing and set-up)")
            steady = self.latencies[1:]
            if steady:
                lines.append(
                    f"steady: median {1000 * np.median(steady):.1f} ms, mean {1000 * np.mean(steady):.1f} ms per image "
                    f"over the other {len(steady)}"
                )
        if self.failures:
            lines.append(f"{len(self.failures)} inputs failed:")
            lines += [f"  {message}" for message in self.failures]
        return "\n".join(lines)


class Runner:
    """Runs a predictor over inputs and writes what the command line asks for."""

    def __init__(self, args, predictor, categories):
        self.args, self.predictor, self.categories = args, predictor, categories
        self.output = pathlib.Path(args.output)
        self.log = RunLog()
        self.keypoint_confidence = predictor.cfg.KRCNN.KEYPOINT_CONFIDENCE

    def detect(self, image, file_name, frame=None):
        """Predictor output for one image, its results and image entry recorded."""
        start = time.perf_counter()
        detections = self.predictor.predict(image)
        self.log.latencies.append(time.perf_counter() - start)
        image_id = len(self.log.images) + 1
        entry = {"id": image_id, "file_name": file_name, "height": image.shape[0], "width": image.shape[1]}
        if frame is not None:
            entry["frame"] = frame
        self.log.images.append(entry)
        results = detections_to_coco(detections, image_id, self.categories.json_ids, self.keypoint_confidence)
        self.log.results.extend(results)
        return detections, results

    def draw(self, image, detections):
        names = self.categories.names
        return draw_detections(
            image, detections, names, self.args.thresh, self.args.kp_thresh, self.categories.skeleton
        )

    def image(self, path):
        image = read_image(path)
        detections, results = self.detect(image, str(path))
        if not self.args.no_vis and (self.args.always_out or np.any(detections["scores"] >= self.args.thresh)):
            write_picture(self.output / f"{path.name}.{self.args.output_ext}", self.draw(image, detections))
            self.log.pictures += 1
        return results

    def video(self, path):
        frames = VideoFrames(path)
        archive = VideoPose3DArchive(self.predictor.cfg.MODEL.NUM_CLASSES) if self.args.videopose3d else None
        writer, size, video_results = None, None, []
        bar = tqdm(frames, total=frames.frame_count or None, unit="frame", desc=path.name, leave=False, disable=None)
        try:
            for index, frame in enumerate(bar):
                detections, results = self.detect(frame, str(path), frame=index)
                self.log.frames += 1
                video_results += results
                if archive is not None:
                    archive.add(detections)
                size = size or (frame.shape[1], frame.shape[0])
                if not self.args.no_vis:
                    drawn = self.draw(frame, detections)  # a small video's frames are drawn enlarged
                    picture_size = drawn.shape[1], drawn.shape[0]
                    writer = writer or open_video_writer(self.output / f"{path.name}.mp4", frames.fps, picture_size)
                    writer.write(drawn)
        finally:
            bar.close()
            if writer is not None:
                writer.release()
        if size is None:
            raise UnreadableImage(f"{path}: no frame could be read")
        if writer is not None:
            self.log.pictures += 1
        if archive is not None:
            archive.save(self.output / f"{path.name}.npz", *size)
        return video_results

    def run(self, inputs):
        self.output.mkdir(parents=True, exist_ok=True)
        images = [p for p in inputs if not is_video(p)]
        progress = tqdm(total=len(images), unit="img", disable=None if images else True)  # only on a terminal
        for path in inputs:
            try:
                results = self.video(path) if is_video(path) else self.image(path)
            except INPUT_ERRORS as error:
                self.log.fail(path, error)
                continue
            finally:
                if not is_video(path):
                    progress.update(1)
            if self.args.json_per_input:
                write_results(self.output / f"{path.name}.json", results)
        progress.close()
        write_results(self.output / "detections.json", self.log.results)
        with open(self.output / "images.json", "w") as f:
            json.dump({"images": self.log.images, "categories": self.categories.coco_categories()}, f)
        return self.log


def first_line(error):
    """The first line of an exception's message (Keras' weight-loading errors run to pages)."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def open_video_writer(path, fps, size):
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
    if not writer.isOpened():
        raise OSError(f"{path}: OpenCV cannot write an mp4v video here")
    return writer


def check_usage(args, cfg, stored=None):
    """(inputs, categories) for the command line, or UsageError before any model is built. `stored`: the
    classes the weights store (or a Predictor's categories), named and numbered by `model_categories`."""
    if args.videopose3d and not cfg.MODEL.KEYPOINTS_ON:
        raise UsageError("--videopose3d needs a keypoint model (MODEL.KEYPOINTS_ON: True)")
    if cfg.MODEL.KEYPOINTS_ON and cfg.KRCNN.KEYPOINT_CONFIDENCE not in KEYPOINT_CONFIDENCES:
        raise UsageError(
            f"KRCNN.KEYPOINT_CONFIDENCE {cfg.KRCNN.KEYPOINT_CONFIDENCE!r} cannot score json keypoints; "
            f"use one of {KEYPOINT_CONFIDENCES}"
        )
    try:
        inputs = list_inputs(args.input, args.image_ext)
        categories = model_categories(cfg.MODEL.NUM_CLASSES, cfg.MODEL.KEYPOINTS_ON, args.dataset_json, stored)
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from None
    return inputs, categories


def run(args, predictor):
    """Run parsed `args` with an already built `predictor` (main builds one from --cfg, --weights); exit status."""
    try:
        inputs, categories = check_usage(args, predictor.cfg, predictor.categories)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return _execute(args, predictor, inputs, categories)


def _execute(args, predictor, inputs, categories):
    log = Runner(args, predictor, categories).run(inputs)
    print(log.summary(args.thresh))
    return 1 if log.failures else 0


def main(argv=None):
    """The command line: parse, check, build the model (a Detectron .pkl is ported on load), run."""
    args = parse_args(argv)
    try:
        if args.zoo is not None:
            from porting.zoo import ported_zoo_files  # porting builds on tfdet: imported only for --zoo

            args.cfg, args.weights = ported_zoo_files(args.zoo)
        cfg = load_config(args.cfg, args.opts)
        check_supported(cfg, "inference")  # before the weights: a refused key is the config's problem
        args.weights = resolve_weights(args.weights, cfg.DOWNLOAD_CACHE)  # a URL: the checked download
        inputs, categories = check_usage(args, cfg, read_model_categories(args.weights))
        args.weights = weights_file(args.weights).path  # after the inputs: a missing or unknown file, one line
    except (UsageError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    freeze_imports()
    try:
        predictor = Predictor(cfg, args.weights)
    except Exception as error:  # the command line's boundary: any failure to load weights is one line
        reason = f"{type(error).__name__}: {first_line(error)}"
        print(f"error: cannot load {args.weights} into the model of {args.cfg}: {reason}", file=sys.stderr)
        return 2
    return _execute(args, predictor, inputs, categories)


if __name__ == "__main__":
    sys.exit(main())
