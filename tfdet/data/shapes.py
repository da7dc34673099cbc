"""The built-in synthetic dataset: squares, circles and triangles on textured backgrounds, in COCO format.

Every image is a pure function of (seed, index), so a split of any size is reproducible and its
first images do not depend on how many are made. Shapes are axis-aligned squares, circles and
upright triangles (apex on top, horizontal base); later shapes are drawn over earlier ones and
every shape keeps at least half of itself visible.

Annotations are real COCO json: the mask is the shape's polygon rasterised by pycocotools minus the
shapes drawn later; `segmentation` is that polygon when nothing covers the shape, else the RLE of
the visible mask (counts as str); `area` and `bbox` (x, y, w, h) are the visible mask's pixel count
and tight box; `iscrowd` 0. All three categories share one keypoint schema so that one
class-agnostic keypoint head serves them:
  top, left, right, bottom: the extreme points (square: edge midpoints; circle: compass points;
  triangle: apex, left and right base corners, base midpoint), and center (the centroid).
Visibility v: 2 when the keypoint touches the visible mask (its 3x3 pixel neighbourhood does);
1 when it is covered by a later shape but lies in the annotation's box (1 px margin), as COCO labels
occluded keypoints; 0 (with x = y = 0) otherwise, where no box-bound heatmap could learn it.
Keypoints sit on the polygon outline, so they lie within 1 px of the rasterised box.
An image has no shape with probability EMPTY_IMAGE_PROBABILITY (Detectron's training skips such images;
evaluation keeps them, where any detection is a false positive).

Rendering styles (`style`), for domain adaptation: "plain" (the default) is the dataset above; "foggy" renders
the same scenes (identical annotations) through dense haze, a strong colour cast and sensor grain (the FOG_*
constants): each pixel is blended toward a bright grey-blue airlight with a transmission that thins toward the
bottom of the image (Koschmieder's model, as Foggy Cityscapes uses), the channels get random gains, then a 5x5
Gaussian blur, a coarse grain (one grey level per 3 x 3 pixel cell, added to all channels) and per-pixel noise.
The fog changes only low-level statistics (contrast, colour, texture), never the geometry that defines the
classes (outlines, sizes, occlusions, boxes). Its draws come from their own generator, so a plain image is
unchanged by the existence of styles. The splits (SPLITS): `shapes_train` and `shapes_val` plain;
`shapes_target_train` (unlabelled for DA training: its annotations are there but not read) and
`shapes_target_val` foggy; `shapes_test` and `shapes_target_test`, 1024 images each, plain and foggy, for
measuring with less evaluation noise. How hard the shift is for a source-only detector: benchmarks/README.md.
"""

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
from dataclasses import dataclass

import cv2
import numpy as np
import pycocotools.mask as mask_util

from tfdet.data.data_root import shapes_root
from tfdet.data.keypoint_flips import keypoint_flip_pairs

# 2: the denser, grainier "foggy" style (plain images are unchanged since 1).
GENERATOR_VERSION = 2
CATEGORY_NAMES = ("square", "circle", "triangle")
KEYPOINT_NAMES = ("top", "left", "right", "bottom", "center")
# COCO skeletons are 1-based: the outline top-left-bottom-right and the center to the side points.
SKELETON = ((1, 2), (1, 3), (2, 4), (3, 4), (2, 5), (3, 5))
DEFAULT_IMAGE_SIZE = 192
JPEG_QUALITY = 95
EMPTY_IMAGE_PROBABILITY = 0.02
MAX_SHAPES_PER_IMAGE = 5
MIN_VISIBLE_FRACTION = 0.5
CIRCLE_VERTICES = 32
SIZE_RANGE = (0.12, 0.45)  # shape size as a fraction of the image's shorter side
PLACEMENT_TRIES = 20
MIN_COLOUR_DISTANCE = 80.0
STYLES = ("plain", "foggy")
# Draw stream of the style's own generator, (seed, index, STYLE_STREAM).
STYLE_STREAM = 1
FOG_TRANSMISSION = (0.15, 0.3)  # at the top of the image; the bottom gets up to FOG_DEPTH_GAIN more
FOG_DEPTH_GAIN = 0.25
FOG_AIRLIGHT = (190.0, 240.0)
FOG_CHANNEL_GAINS = (0.6, 1.4)
FOG_GRAIN_STD = 25.0  # one grey level per FOG_GRAIN_CELL x FOG_GRAIN_CELL pixel cell
FOG_GRAIN_CELL = 3
FOG_NOISE_STD = 10.0


@dataclass(frozen=True)
class SplitSpec:
    """A named split of the built-in dataset: how many images, from which seed."""

    num_images: int
    seed: int
    image_size: int = DEFAULT_IMAGE_SIZE
    style: str = "plain"


# The splits the catalog serves (`shapes_train`: 512 images, seed 0; `shapes_val`: 64, seed 1; their
# foggy target-domain counterparts for domain adaptation, other scenes: seeds 2 and 3). The two 1024-image
# test splits (seeds 4 and 5) measure with less evaluation noise than the 64-image val splits
# (benchmarks/da_experiment.py); they are made only when asked for.
SPLITS = {
    "shapes_train": SplitSpec(num_images=512, seed=0),
    "shapes_val": SplitSpec(num_images=64, seed=1),
    "shapes_target_train": SplitSpec(num_images=512, seed=2, style="foggy"),
    "shapes_target_val": SplitSpec(num_images=64, seed=3, style="foggy"),
    "shapes_test": SplitSpec(num_images=1024, seed=4),
    "shapes_target_test": SplitSpec(num_images=1024, seed=5, style="foggy"),
}


@dataclass(frozen=True)
class Shape:
    """One shape: its category (1-based), outline polygon (M, 2) and keypoints (K, 2), continuous pixels."""

    category_id: int
    polygon: np.ndarray
    keypoints: np.ndarray


def keypoint_flip_map():
    """Index pairs of keypoints that swap under a horizontal flip (left <-> right)."""
    return list(keypoint_flip_pairs(KEYPOINT_NAMES))


def categories():
    """COCO `categories` entries, ids 1..3, each with the shared keypoint schema and skeleton."""
    return [
        {
            "id": i + 1,
            "name": name,
            "supercategory": "shape",
            "keypoints": list(KEYPOINT_NAMES),
            "skeleton": [list(edge) for edge in SKELETON],
        }
        for i, name in enumerate(CATEGORY_NAMES)
    ]


def _square(x0, y0, size):
    polygon = np.array([[x0, y0], [x0 + size, y0], [x0 + size, y0 + size], [x0, y0 + size]], np.float64)
    half = size / 2.0
    keypoints = np.array(
        [[x0 + half, y0], [x0, y0 + half], [x0 + size, y0 + half], [x0 + half, y0 + size], [x0 + half, y0 + half]]
    )
    return polygon, keypoints


def _circle(x0, y0, size):
    radius = size / 2.0
    cx, cy = x0 + radius, y0 + radius
    angles = 2.0 * np.pi * np.arange(CIRCLE_VERTICES) / CIRCLE_VERTICES
    polygon = np.stack([cx + radius * np.cos(angles), cy + radius * np.sin(angles)], axis=1)
    keypoints = np.array([[cx, cy - radius], [cx - radius, cy], [cx + radius, cy], [cx, cy + radius], [cx, cy]])
    return polygon, keypoints


def _triangle(x0, y0, size, apex_fraction, height_ratio):
    height = max(round(size * height_ratio), 4)
    apex = (x0 + round(size * apex_fraction), y0)
    left, right = (x0, y0 + height), (x0 + size, y0 + height)
    polygon = np.array([apex, right, left], np.float64)
    keypoints = np.array([apex, left, right, (x0 + size / 2.0, y0 + height), polygon.mean(axis=0)])
    return polygon, keypoints


def random_shape(rng, height, width, size_range=SIZE_RANGE):
    """A shape of random kind, size (`size_range` of the shorter side) and position, entirely inside the image."""
    category_id = int(rng.integers(1, len(CATEGORY_NAMES) + 1))
    shorter = min(height, width)
    size = int(rng.integers(round(size_range[0] * shorter), round(size_range[1] * shorter) + 1))
    apex_fraction, height_ratio = rng.uniform(0.2, 0.8), rng.uniform(0.7, 1.1)
    extent_y = size if category_id != 3 else max(round(size * height_ratio), 4)
    x0 = int(rng.integers(1, width - size))
    y0 = int(rng.integers(1, height - extent_y))
    if category_id == 1:
        polygon, keypoints = _square(x0, y0, size)
    elif category_id == 2:
        polygon, keypoints = _circle(x0, y0, size)
    else:
        polygon, keypoints = _triangle(x0, y0, size, apex_fraction, height_ratio)
    return Shape(category_id, np.round(polygon, 2), np.round(keypoints, 2))


def polygon_mask(polygon, height, width):
    """(H, W) bool mask of a polygon rasterised exactly as pycocotools rasterises COCO polygons."""
    rles = mask_util.frPyObjects([polygon.reshape(-1).tolist()], height, width)
    return mask_util.decode(mask_util.merge(rles)).astype(bool)


def _background(rng, height, width):
    """(H, W, 3) float texture: smooth noise, a linear gradient or soft stripes."""
    kind = rng.integers(3)
    colours = rng.uniform(0, 255, size=(2, 3))
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float64)
    if kind == 0:
        coarse = rng.normal(0, 40, size=(max(height // 8, 2), max(width // 8, 2), 3)).astype(np.float32)
        image = colours[0] + cv2.resize(coarse, (width, height), interpolation=cv2.INTER_LINEAR)
    else:
        angle = rng.uniform(0, np.pi)
        along = xs * np.cos(angle) + ys * np.sin(angle)
        if kind == 1:
            t = (along - along.min()) / max(np.ptp(along), 1.0)
        else:
            period = rng.uniform(6, 24)
            t = np.clip(0.5 + 1.5 * np.sin(2 * np.pi * along / period), 0, 1)
        image = colours[0] * (1 - t[..., None]) + colours[1] * t[..., None]
    return image + rng.normal(0, 6, size=(height, width, 3))


def distinct_colour(rng, avoid, min_distance=MIN_COLOUR_DISTANCE):
    """A random colour at least `min_distance` from every colour in `avoid` (best of a few tries)."""
    best, best_distance = None, -1.0
    for _ in range(10):
        colour = rng.uniform(0, 255, size=3)
        distance = min((np.linalg.norm(colour - a) for a in avoid), default=np.inf)
        if distance >= min_distance:
            return colour
        if distance > best_distance:
            best, best_distance = colour, distance
    return best


def _place_shapes(rng, height, width):
    """Shapes and their full masks, drawn in order, each keeping MIN_VISIBLE_FRACTION of itself visible."""
    count = 0 if rng.uniform() < EMPTY_IMAGE_PROBABILITY else int(rng.integers(1, MAX_SHAPES_PER_IMAGE + 1))
    shapes, masks = [], []
    for _ in range(count):
        for _ in range(PLACEMENT_TRIES):
            shape = random_shape(rng, height, width)
            mask = polygon_mask(shape.polygon, height, width)
            covered = np.zeros_like(mask)
            fits = True
            for earlier in reversed(masks):  # the new shape covers part of each earlier one
                visible = earlier & ~covered & ~mask
                if visible.sum() < MIN_VISIBLE_FRACTION * earlier.sum():
                    fits = False
                    break
                covered |= earlier
            if fits and mask.any():
                shapes.append(shape)
                masks.append(mask)
                break
    return shapes, masks


def _visible_masks(masks):
    """Each full mask minus the union of the masks drawn after it."""
    covered = np.zeros_like(masks[0]) if masks else None
    visible = []
    for mask in reversed(masks):
        visible.append(mask & ~covered)
        covered = covered | mask
    return visible[::-1]


def _keypoint_annotation(keypoints, visible_mask, box):
    """COCO [x, y, v] * K and the count of labelled keypoints (see the module docstring for v)."""
    height, width = visible_mask.shape
    x, y, w, h = box
    flat, labelled = [], 0
    for kx, ky in keypoints:
        col, row = int(np.floor(kx)), int(np.floor(ky))
        patch = visible_mask[max(row - 1, 0) : min(row + 2, height), max(col - 1, 0) : min(col + 2, width)]
        in_box = x - 1 <= kx <= x + w + 1 and y - 1 <= ky <= y + h + 1
        v = 2 if patch.any() else 1 if in_box else 0
        flat += [float(kx), float(ky), v] if v else [0.0, 0.0, 0]
        labelled += v > 0
    return flat, labelled


def shape_annotation(shape, full_mask, visible_mask):
    """COCO annotation (no ids) of a shape: the visible mask's box, area and segmentation, and the keypoints."""
    rle = mask_util.encode(np.asfortranarray(visible_mask.astype(np.uint8)))
    box = [float(v) for v in mask_util.toBbox(rle)]
    if (visible_mask == full_mask).all():
        segmentation = [[float(v) for v in shape.polygon.reshape(-1)]]
    else:
        segmentation = {"size": rle["size"], "counts": rle["counts"].decode("ascii")}
    keypoints, num_keypoints = _keypoint_annotation(shape.keypoints, visible_mask, box)
    return {
        "category_id": shape.category_id,
        "segmentation": segmentation,
        "area": float(mask_util.area(rle)),
        "bbox": box,
        "iscrowd": 0,
        "keypoints": keypoints,
        "num_keypoints": int(num_keypoints),
    }


def _image_size(image_size):
    height, width = (image_size, image_size) if np.isscalar(image_size) else image_size
    if min(height, width) < 32:
        raise ValueError(f"image_size must be at least 32 pixels, got {image_size}")
    return int(height), int(width)


def _foggy(image, rng):
    """The "foggy" rendering of a float BGR image (see the module docstring)."""
    height, width = image.shape[:2]
    top = rng.uniform(*FOG_TRANSMISSION)
    rows = np.linspace(0.0, 1.0, height)[:, None, None]
    transmission = np.clip(top + FOG_DEPTH_GAIN * rows * rng.uniform(0.5, 1.0), 0.0, 1.0)
    airlight = rng.uniform(*FOG_AIRLIGHT) * np.array([1.0, 0.97, 0.93]) * rng.uniform(0.95, 1.05, size=3)
    hazy = image * transmission + airlight * (1.0 - transmission)
    hazy = hazy * rng.uniform(*FOG_CHANNEL_GAINS, size=3)
    hazy = cv2.GaussianBlur(hazy.astype(np.float32), (5, 5), 0).astype(np.float64)
    cells = rng.normal(0, FOG_GRAIN_STD, size=(-(-height // FOG_GRAIN_CELL), -(-width // FOG_GRAIN_CELL)))
    grain = np.repeat(np.repeat(cells, FOG_GRAIN_CELL, axis=0), FOG_GRAIN_CELL, axis=1)[:height, :width]
    return hazy + grain[..., None] + rng.normal(0, FOG_NOISE_STD, size=(height, width, 3))


def _check_style(style):
    if style not in STYLES:
        raise ValueError(f"unknown shapes style {style!r}; known: {', '.join(STYLES)}")


def render_image(seed, index, image_size=DEFAULT_IMAGE_SIZE, style="plain"):
    """Image `index` of the dataset with `seed`: (H, W, 3) uint8 BGR and its annotations (no ids yet).

    `style` (STYLES) changes the pixels only: the annotations are those of the plain image.
    """
    _check_style(style)
    height, width = _image_size(image_size)
    rng = np.random.default_rng([seed, index])
    image = _background(rng, height, width)
    shapes, masks = _place_shapes(rng, height, width)
    painted = []
    for shape, mask in zip(shapes, masks):
        avoid = [image[mask].mean(axis=0)] + [c for c, m in painted if (m & mask).any()]
        colour = distinct_colour(rng, avoid)
        image[mask] = colour + rng.normal(0, 6, size=(int(mask.sum()), 3))
        painted.append((colour, mask))
    if style == "foggy":
        image = _foggy(image, np.random.default_rng([seed, index, STYLE_STREAM]))
    annotations = [shape_annotation(s, m, v) for s, m, v in zip(shapes, masks, _visible_masks(masks))]
    return np.clip(np.round(image), 0, 255).astype(np.uint8), annotations


def split_paths(out_dir, split_name):
    """(annotation json, image folder) of a split written by `generate` into `out_dir`."""
    out_dir = pathlib.Path(out_dir)
    return out_dir / f"{split_name}.json", out_dir / split_name


def generate(out_dir, num_images, seed, image_size=DEFAULT_IMAGE_SIZE, split_name="train", style="plain"):
    """Write `num_images` JPEG images and their COCO json into `out_dir`; returns the json path.

    Images go to `out_dir/<split_name>/<split_name>_<index>.jpg` (quality 95), annotations to
    `out_dir/<split_name>.json`; image ids are index + 1, annotation ids count from 1. A `style`
    other than "plain" is recorded in the json's `info`.
    """
    _check_style(style)
    if num_images < 0:
        raise ValueError(f"num_images must be >= 0, got {num_images}")
    json_path, image_dir = split_paths(out_dir, split_name)
    image_dir.mkdir(parents=True, exist_ok=True)
    height, width = _image_size(image_size)
    images, annotations = [], []
    for index in range(num_images):
        image, image_annotations = render_image(seed, index, (height, width), style)
        file_name = f"{split_name}_{index:06d}.jpg"
        ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        if not ok:
            raise RuntimeError(f"could not encode {file_name} as JPEG")
        (image_dir / file_name).write_bytes(encoded.tobytes())
        images.append({"id": index + 1, "file_name": file_name, "height": height, "width": width})
        for annotation in image_annotations:
            annotations.append({"id": len(annotations) + 1, "image_id": index + 1, **annotation})
    dataset = {
        "info": {
            "description": "tfdet synthetic shapes",
            "version": GENERATOR_VERSION,
            "seed": seed,
            "num_images": num_images,
            "image_size": [height, width],
            **({"style": style} if style != "plain" else {}),
        },
        "licenses": [],
        "images": images,
        "annotations": annotations,
        "categories": categories(),
    }
    json_path.write_text(json.dumps(dataset))
    return json_path


def ensure_split(name, root=None):
    """(json path, image folder) of a named split (SPLITS), generated on first use into the cache.

    The cache is `root` or `$TFDET_DATA_DIR/shapes`, one folder per generator version. A split is
    generated in a temporary folder and moved into place, so concurrent first uses are safe.
    """
    if name not in SPLITS:
        raise KeyError(f"unknown shapes split {name!r}; known: {', '.join(sorted(SPLITS))}")
    if root is None:
        root = shapes_root()
    split_dir = pathlib.Path(root) / f"v{GENERATOR_VERSION}" / name
    json_path, image_dir = split_paths(split_dir, name)
    if not json_path.is_file():
        spec = SPLITS[name]
        split_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{name}-", dir=split_dir.parent))
        generate(staging, spec.num_images, spec.seed, spec.image_size, split_name=name, style=spec.style)
        try:
            os.rename(staging, split_dir)
        except OSError:  # another process finished first
            shutil.rmtree(staging, ignore_errors=True)
        if not json_path.is_file():
            raise RuntimeError(f"could not create the shapes split in {split_dir}")
    return json_path, image_dir


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tfdet.data.shapes",
        description="Write a split of the synthetic shapes dataset (COCO json + JPEGs).",
    )
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num", type=int, required=True, help="number of images")
    parser.add_argument("--seed", type=int, default=0, help="random seed (images depend only on seed and index)")
    parser.add_argument("--split", default="train", help="split name: the json and image folder names")
    parser.add_argument("--image-size", type=int, default=DEFAULT_IMAGE_SIZE, help="image side in pixels")
    parser.add_argument("--style", choices=STYLES, default="plain", help="rendering: plain, or foggy (a target domain)")
    args = parser.parse_args(argv)
    if args.num < 0:
        parser.error(f"--num must be >= 0, got {args.num}")
    json_path = generate(args.out, args.num, args.seed, args.image_size, split_name=args.split, style=args.style)
    print(f"wrote {args.num} images to {split_paths(args.out, args.split)[1]} and annotations to {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
