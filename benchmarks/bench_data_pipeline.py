"""Throughput of the training input pipeline alone (no model), in images per second.

Two datasets, each with and without masks:
- shapes: the built-in synthetic dataset (192 px images) at the shapes config's scales
  (configs/shapes_mask_keypoint_R-50-FPN.yaml: TRAIN.SCALES 160/192/224, MAX_SIZE 320);
- photos: the Detectron demo photos (~600 x 900) at Detectron's COCO scale (800 / 1333), written
  into a temporary COCO json with 10 fake elliptical objects each.
A last row times the image path alone (read, decode, mean subtraction, resize) done instead by
cv2 in a `tf.numpy_function`, the alternative to the in-graph resize. Timings start after a
warm-up. Images/s depend on the cores free (a shared machine gives lower bounds); the process's
CPU milliseconds per image estimate what one dedicated core sustains (1000 / ms images/s).

    python benchmarks/bench_data_pipeline.py [--batches 30] [--shapes-images 64]
"""

import argparse
import json
import os
import pathlib
import shutil
import tempfile
import time

import cv2
import numpy as np
import tensorflow as tf

from tfdet.config import load_config
from tfdet.data import pipeline, shapes
from tfdet.data.roidb import load_coco_roidb
from tfdet.imaging.preprocessing import prepare_image

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHAPES_CONFIG = ROOT / "configs" / "shapes_mask_keypoint_R-50-FPN.yaml"
DEMO = ROOT.parent / "shared" / "data" / "detectron_demo"
OBJECTS_PER_PHOTO = 10


def photo_dataset(out_dir, rng):
    """A COCO json over the demo photos with OBJECTS_PER_PHOTO random ellipses (polygons) each."""
    images, annotations = [], []
    for image_id, path in enumerate(sorted(DEMO.glob("*.jpg")), start=1):
        height, width = cv2.imread(str(path)).shape[:2]
        shutil.copy(path, out_dir / path.name)
        images.append({"id": image_id, "file_name": path.name, "height": height, "width": width})
        for _ in range(OBJECTS_PER_PHOTO):
            w, h = rng.uniform(0.05, 0.4) * width, rng.uniform(0.05, 0.4) * height
            x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
            angles = np.linspace(0, 2 * np.pi, 24, endpoint=False)
            polygon = np.stack([x + w / 2 * (1 + np.cos(angles)), y + h / 2 * (1 + np.sin(angles))], 1)
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": 1,
                    "bbox": [x, y, w, h],
                    "area": float(np.pi * w * h / 4),
                    "iscrowd": 0,
                    "segmentation": [polygon.reshape(-1).round(2).tolist()],
                }
            )
    json_path = out_dir / "photos.json"
    categories = [{"id": 1, "name": "thing"}]
    json_path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return json_path


def throughput(dataset, batches, batch_size):
    """(images per second, process CPU milliseconds per image) over `batches` batches after a warm-up."""
    iterator = iter(dataset)
    for _ in range(3):  # warm-up: tracing, autotuning, first reads
        next(iterator)
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    for _ in range(batches):
        batch = next(iterator)
    _ = batch["images"].numpy()
    images = batches * batch_size
    return images / (time.perf_counter() - start), (_cpu_seconds() - cpu_start) * 1000 / images


def _cpu_seconds():
    times = os.times()
    return times.user + times.system


def cv2_image_path(roidb, cfg):
    """The image path alone with cv2 in a numpy_function (Detectron's own code path), batched alike."""
    paths = [r.file_path for r in roidb.records]
    target, max_size = int(cfg.TRAIN.SCALES[0]), int(cfg.TRAIN.MAX_SIZE)

    def load(index):
        image, scale = prepare_image(cv2.imread(paths[index]), cfg.PIXEL_MEANS, target, max_size)
        return image, np.float32(scale)

    def load_op(index):
        image, scale = tf.numpy_function(load, [index], [tf.float32, tf.float32])
        return {"images": tf.ensure_shape(image, [None, None, 3]), "scale": tf.ensure_shape(scale, [])}

    return (
        tf.data.Dataset.range(len(paths))
        .repeat()
        .map(load_op, num_parallel_calls=tf.data.AUTOTUNE)
        .padded_batch(int(cfg.TRAIN.IMS_PER_BATCH), drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def report(dataset, content, rate, cpu_ms):
    print(f"{dataset:<18} {content:<26} {rate:8.1f} images/s {cpu_ms:8.1f} CPU ms/image", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=30, help="timed batches per row")
    parser.add_argument("--shapes-images", type=int, default=64)
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench_data_"))
    try:
        photos_dir = work / "photos"
        photos_dir.mkdir()
        photos = {"TRAIN.SCALES": (800,), "TRAIN.MAX_SIZE": 1333, "FPN.FPN_ON": True, "TRAIN.IMS_PER_BATCH": 2}
        datasets = (
            ("shapes", shapes.generate(work, args.shapes_images, seed=0), work / "train", SHAPES_CONFIG, {}),
            ("photos 800/1333", photo_dataset(photos_dir, np.random.default_rng(0)), photos_dir, None, photos),
        )
        for name, json_path, image_dir, config_file, overrides in datasets:
            for masks in (True, False):
                cfg = load_config(config_file, {**overrides, "MODEL.MASK_ON": masks})
                keypoints = bool(cfg.MODEL.KEYPOINTS_ON)
                roidb = load_coco_roidb(json_path, image_dir, with_masks=masks, keypoints_required=keypoints)
                dataset = pipeline.build_train_dataset(cfg, roidb)
                content = "boxes" + (" + masks" if masks else "") + (" + keypoints" if keypoints else "")
                report(name, content, *throughput(dataset, args.batches, cfg.TRAIN.IMS_PER_BATCH))
        cfg = load_config(None, photos)
        roidb = load_coco_roidb(datasets[1][1], photos_dir)
        report("photos 800/1333", "images only, cv2", *throughput(cv2_image_path(roidb, cfg), args.batches, 2))
        print(f"({os.cpu_count()} CPU cores, possibly shared: images/s are lower bounds)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
