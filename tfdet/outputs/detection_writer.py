"""What a detection run writes: pictures, annotated videos, COCO results (`detections.json`, `images.json`)
and a summary; shared by `tfdet.infer` (a Predictor) and `savedmodel.run` (an exported model, no TensorFlow).

Imports no TensorFlow and no pycocotools, so that a runtime, NumPy and OpenCV are all a deployment needs.
"""

import json
import pathlib
import sys
import time
from dataclasses import dataclass, field

import cv2
import numpy as np
from tqdm import tqdm

from tfdet.evaluation.results import detections_to_coco, write_results
from tfdet.imaging.image_io import UnreadableImage, VideoFrames, is_video, read_image, write_picture
from tfdet.visualize import draw_detections

# Errors that make one input fail without stopping the run.
INPUT_ERRORS = (UnreadableImage, ValueError, OSError, cv2.error)


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


class DetectionRun:
    """Runs a detector over inputs and writes what `tfdet.infer`'s command line asks for.

    `args`: the parsed command line (output, output_ext, thresh, kp_thresh, always_out, no_vis,
    json_per_input, videopose3d); `predict(image) -> detections` as `Predictor.predict` returns them;
    `categories`: the model's ModelCategories; `cfg`: its config (MODEL.NUM_CLASSES, KRCNN.KEYPOINT_CONFIDENCE)
    or any object with those attributes.
    """

    def __init__(self, args, predict, categories, cfg):
        self.args, self.predict, self.categories = args, predict, categories
        self.output = pathlib.Path(args.output)
        self.log = RunLog()
        self.keypoint_confidence = cfg.KRCNN.KEYPOINT_CONFIDENCE
        self.num_classes = cfg.MODEL.NUM_CLASSES

    def detect(self, image, file_name, frame=None):
        """Predictor output for one image, its results and image entry recorded."""
        start = time.perf_counter()
        detections = self.predict(image)
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
        archive = None
        if self.args.videopose3d:
            from tfdet.outputs.videopose3d import VideoPose3DArchive  # pycocotools: not needed by savedmodel.run

            archive = VideoPose3DArchive(self.num_classes)
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


def open_video_writer(path, fps, size):
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
    if not writer.isOpened():
        raise OSError(f"{path}: OpenCV cannot write an mp4v video here")
    return writer
