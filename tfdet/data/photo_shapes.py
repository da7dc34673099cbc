"""Synthetic shapes painted onto a real photo, with their COCO ground truth.

A model trained on the shapes dataset knows no street-photo object; squares, circles and triangles
painted on a photo (`tfdet.data.shapes`' geometry, keypoints, colours and annotations) give it
objects it knows on a real background, with exact ground truth to judge its detections by.

Sizes are set for what the model sees: the tiny shapes model (configs/shapes_tiny_mask_keypoint.yaml,
TEST.SCALE = TEST.MAX_SIZE = 128) sees any photo with its longer side at 128 px, where shapes_val's
shapes are 15-58 px (12-45% of its square images). Here a shape is SIZE_RANGE of the photo's longer
side, 19-45 px as that model sees it, whatever the photo's resolution. Shapes do not touch (their
boxes are GAP apart), so each is whole: a polygon segmentation and every keypoint visible (v = 2).
"""

import json
import pathlib

import cv2
import numpy as np

from tfdet.data.shapes import JPEG_QUALITY, categories, distinct_colour, polygon_mask, random_shape, shape_annotation
from tfdet.imaging.image_io import read_image

NUM_SHAPES = 4
SIZE_RANGE = (0.15, 0.35)  # shape size as a fraction of the photo's longer side
GAP = 0.02  # least distance between two shapes' boxes, as a fraction of the longer side
PLACEMENT_TRIES = 50  # a shape that finds no free place in this many tries is left out
PAINT_NOISE_STD = 6.0  # per-pixel colour noise, as the shapes dataset paints
# The tallest shape (a triangle 1.1 times as tall as wide, 0.35 of the longer side) must fit the
# shorter side: 0.35 * 1.1 * 2.5 < 1.
MAX_ASPECT_RATIO = 2.5
MIN_SHORTER_SIDE = 32


def paint_shapes(photo, seed):
    """(copy of `photo` with up to NUM_SHAPES shapes painted on, their COCO annotations without ids).

    `photo` is (H, W, 3) uint8 BGR; the result depends only on (photo, seed).
    """
    if photo.dtype != np.uint8 or photo.ndim != 3 or photo.shape[2] != 3:
        raise ValueError(f"photo must be (H, W, 3) uint8 BGR, got {photo.dtype} {photo.shape}")
    height, width = photo.shape[:2]
    shorter, longer = min(height, width), max(height, width)
    if shorter < MIN_SHORTER_SIDE or longer > MAX_ASPECT_RATIO * shorter:
        raise ValueError(
            f"photo {width}x{height} cannot hold the shapes: the shorter side must be at least "
            f"{MIN_SHORTER_SIDE} px and the longer at most {MAX_ASPECT_RATIO} times the shorter"
        )
    rng = np.random.default_rng(seed)
    size_range = tuple(fraction * longer / shorter for fraction in SIZE_RANGE)  # random_shape: of the shorter side
    gap = GAP * longer
    image = photo.astype(np.float64)
    placed, boxes = [], []
    for _ in range(NUM_SHAPES):
        for _ in range(PLACEMENT_TRIES):
            shape = random_shape(rng, height, width, size_range)
            box = np.concatenate([shape.polygon.min(axis=0), shape.polygon.max(axis=0)])
            if not any(_boxes_within(box, other, gap) for other in boxes):
                break
        else:
            continue
        mask = polygon_mask(shape.polygon, height, width)
        colour = distinct_colour(rng, [image[mask].mean(axis=0)])
        image[mask] = colour + rng.normal(0, PAINT_NOISE_STD, size=(int(mask.sum()), 3))
        placed.append((shape, mask))
        boxes.append(box)
    annotations = [shape_annotation(shape, mask, mask) for shape, mask in placed]
    return np.clip(np.round(image), 0, 255).astype(np.uint8), annotations


def _boxes_within(box, other, gap):
    """Whether two (x1, y1, x2, y2) boxes come closer than `gap` to each other."""
    return bool(np.all(box[:2] < other[2:] + gap) and np.all(other[:2] < box[2:] + gap))


def write_photo_shapes(photo_path, out_dir, seed=0):
    """Paint shapes on the photo at `photo_path`; returns (JPEG path, COCO json path) in `out_dir`.

    Both are named after the photo (`<stem>_shapes.jpg`, `<stem>_shapes.json`); the json is a COCO
    dataset of that one image (id 1) with the shapes' categories and keypoint schema.
    """
    photo_path, out_dir = pathlib.Path(photo_path), pathlib.Path(out_dir)
    image, annotations = paint_shapes(read_image(photo_path), seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    image_path, json_path = out_dir / f"{photo_path.stem}_shapes.jpg", out_dir / f"{photo_path.stem}_shapes.json"
    ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise RuntimeError(f"could not encode {image_path.name} as JPEG")
    image_path.write_bytes(encoded.tobytes())
    height, width = image.shape[:2]
    dataset = {
        "info": {"description": f"tfdet shapes painted on {photo_path.name}", "seed": seed},
        "licenses": [],
        "images": [{"id": 1, "file_name": image_path.name, "height": height, "width": width}],
        "annotations": [{"id": i + 1, "image_id": 1, **annotation} for i, annotation in enumerate(annotations)],
        "categories": categories(),
    }
    json_path.write_text(json.dumps(dataset))
    return image_path, json_path
