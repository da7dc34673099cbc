"""The folder the README test runs the README's commands in, as a newcomer's checkout would be, with stand-ins
for the files the commands name: the checkout's folders, small shapes splits as the data root, and (for the
slow blocks) Detectron's own YAML files with Detectron `.pkl` files of random weights, photos, short videos and
a small COCO json with a results file for it. No command reaches the network: Detectron's URLs point nowhere."""

import dataclasses
import json
import os
import pathlib
import shutil
import sys
import warnings

import cv2
import keras
import numpy as np

from porting.detectron_writer import model_to_blobs, write_detectron_pkl
from support.paths import REPO_ROOT, SHARED_DIR
from tfdet.config import load_config
from tfdet.data import shapes
from tfdet.data.coco_classes import COCO_CATEGORY_IDS, COCO_CLASSES
from tfdet.modeling import build_model

CHECKOUT_FOLDERS = ("configs", "benchmarks", "demo")  # what the README's commands read from a checkout
# The shapes splits the configs train and test on, cut down (from 512 and 64 images) for 2-iteration runs.
SMALL_SPLITS = {"shapes_train": 8, "shapes_val": 4, "shapes_target_train": 8, "shapes_target_val": 4}
# Detectron's YAML files the README names, each with the Detectron .pkl of random weights it is run with.
DETECTRON_MODELS = {
    "e2e_mask_rcnn_R-50-FPN_1x.yaml": "model_final.pkl",
    "e2e_keypoint_rcnn_R-101-FPN_s1x.yaml": "keypoints/model_final.pkl",
    "retinanet_R-50-FPN_1x.yaml": "retinanet/model_final.pkl",
}
BACKBONE = "R-50.pkl"  # an ImageNet R-50: the Mask R-CNN's body blobs
PHOTO_WIDTH = 480
VIDEO_FRAMES = 3


def checkout(workspace):
    """`workspace` made to look like a checkout (its folders linked in) with the small shapes splits in its data
    root; returns the environment the commands run in."""
    workspace.mkdir(parents=True, exist_ok=True)
    for name in CHECKOUT_FOLDERS:
        (workspace / name).symlink_to(REPO_ROOT / name, target_is_directory=True)
    small_shapes(workspace / "data" / "shapes")
    return {
        **os.environ,
        # `pip install -e .` puts the checkout on the path; the test's interpreter is `python`
        "PYTHONPATH": str(REPO_ROOT),
        "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "TFDET_DATA_DIR": str(workspace / "data"),
        "TFDET_CACHE": str(workspace / "cache"),
        "TFDET_DETECTRON_URL": "http://127.0.0.1:9/detectron",  # nothing listens there: no download
        "CUDA_VISIBLE_DEVICES": "",
    }


def small_shapes(root):
    """The SMALL_SPLITS shapes splits, generated where the catalog looks for them."""
    for name, count in SMALL_SPLITS.items():
        spec = shapes.SPLITS[name]
        shapes.SPLITS[name] = dataclasses.replace(spec, num_images=count)
        try:
            shapes.ensure_split(name, root)
        finally:
            shapes.SPLITS[name] = spec


def detectron_files(workspace):
    """Detectron's YAML files, each with a Detectron .pkl of seeded random weights and its cfg (a trained file),
    and R-50.pkl (a backbone file: blobs only)."""
    for config_name, weights_name in DETECTRON_MODELS.items():
        config = shutil.copy(SHARED_DIR / "detectron" / "configs" / "12_2017_baselines" / config_name, workspace)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the zoo files' old function names
            cfg = load_config(config)
        keras.utils.set_random_seed(0)
        blobs = model_to_blobs(build_model(cfg), cfg.MRCNN.ROI_MASK_HEAD)
        weights = workspace / weights_name
        weights.parent.mkdir(exist_ok=True)
        write_detectron_pkl(weights, blobs, cfg.dump())
        if weights_name == "model_final.pkl":
            body = {name: value for name, value in blobs.items() if name.startswith(("conv1_", "res"))}
            write_detectron_pkl(workspace / BACKBONE, body, "")


def media_files(workspace):
    """Two demo photos in photos/ and images/ (photo.jpg: the first), a short video clip.mp4 and videos/walk.mp4."""
    paths = sorted((SHARED_DIR / "data" / "detectron_demo").glob("*.jpg"))[:2]
    photos = [cv2.resize(image, (PHOTO_WIDTH, PHOTO_WIDTH * image.shape[0] // image.shape[1]))
              for image in map(cv2.imread, map(str, paths))]  # fmt: skip
    for folder in ("photos", "images"):
        (workspace / folder).mkdir()
        for path, photo in zip(paths, photos):
            cv2.imwrite(str(workspace / folder / path.name), photo)
    cv2.imwrite(str(workspace / "photo.jpg"), photos[0])
    (workspace / "videos").mkdir()
    for video in (workspace / "clip.mp4", workspace / "videos" / "walk.mp4"):
        height, width = photos[0].shape[:2]
        writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"mp4v"), 10, (width, height))
        for frame in range(VIDEO_FRAMES):
            writer.write(np.roll(photos[0], 8 * frame, axis=1))
        writer.release()
    return paths


def coco_files(workspace, paths):
    """instances.json: COCO's categories and one box (with its polygon) on each image of images/; detections.json:
    a results file for it."""
    images, annotations, results = [], [], []
    for image_id, path in enumerate(paths, start=1):
        height, width = cv2.imread(str(workspace / "images" / path.name)).shape[:2]
        images.append({"id": image_id, "file_name": path.name, "height": height, "width": width})
        x, y, w, h = width // 4, height // 4, width // 2, height // 2
        polygon = [x, y, x + w, y, x + w, y + h, x, y + h]
        annotations.append({"id": image_id, "image_id": image_id, "category_id": 1, "bbox": [x, y, w, h],
                            "area": w * h, "iscrowd": 0, "segmentation": [polygon]})  # fmt: skip
        results.append({"image_id": image_id, "category_id": 1, "bbox": [x + 2, y, w, h], "score": 0.9})
    categories = [{"id": i, "name": n} for i, n in zip(COCO_CATEGORY_IDS, COCO_CLASSES[1:])]
    coco = {"images": images, "annotations": annotations, "categories": categories}
    (workspace / "instances.json").write_text(json.dumps(coco))
    (workspace / "detections.json").write_text(json.dumps(results))


def stand_ins(workspace):
    """Every file the slow blocks name (the quick ones need only the checkout)."""
    detectron_files(workspace)
    coco_files(workspace, media_files(workspace))
