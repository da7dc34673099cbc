"""A small COCO-format dataset that is not tfdet's shapes, for the own-data fine-tuning benchmark.

Other objects on other backgrounds, seeded, every image a pure function of (seed, split, index):
- five categories, written with NON-contiguous json ids listed out of order (42, 4, 23, 17, 8):
  star (5-pointed, random inner radius), ring (an annulus: its mask has a hole, so its segmentation is
  always RLE), cross (a plus sign), heart, and triangle, the one name shared with tfdet's shapes
  (`tfdet/data/shapes.py`: square, circle, triangle); shapes' triangles are upright, these turn freely
  and have uneven sides. Every object is rotated at random.
- backgrounds unlike shapes' (smooth noise, a linear gradient, soft stripes): a rotated checkerboard,
  a plaid (two crossing stripe sets), a radial vignette, multi-octave "marble" noise, or a flat colour with
  clutter (unannotated thin lines and small dots); the background kind names each image's sub-folder
  (`file_name` is e.g. `plaid/000012.jpg`).
- objects are filled with a two-colour gradient and noise (shapes' fills are flat), 1-6 per image, 15-45%
  of the image side; later objects cover earlier ones and every object keeps at least half of itself visible.
Annotations: the visible mask's tight box (x, y, w, h) and pixel area; `segmentation` is the polygon
when the object is a simple polygon that nothing covers, else the visible mask's RLE (counts as str);
`iscrowd` 0; no keypoints.

    python benchmarks/own_objects_dataset.py --out DIR --train 400 --val 100 --seed 0

writes DIR/train/annotations.json with its images under DIR/train/<background>/, and DIR/val/ likewise
(generated in a temporary folder and renamed, so an interrupted run leaves nothing half-written; an
existing DIR made with the same settings is reused, one made with others is refused).
"""

import argparse
import json
import pathlib
import shutil
import sys
import tempfile

import cv2
import numpy as np
import pycocotools.mask as mask_util

from tfdet.data.shapes import distinct_colour

GENERATOR_VERSION = 1
# name -> json category id: non-contiguous, and listed in the json in this (not sorted) order.
CATEGORY_IDS = {"cross": 42, "ring": 4, "triangle": 23, "star": 17, "heart": 8}
SHARED_WITH_SHAPES = ("triangle",)
BACKGROUNDS = ("checker", "plaid", "vignette", "marble", "clutter")
SPLITS = ("train", "val")  # the split's index is part of every image's random stream
IMAGE_SIZE = 128
JPEG_QUALITY = 95
MAX_OBJECTS = 6
SIZE_RANGE = (0.15, 0.45)  # object diameter as a fraction of the image side
MIN_VISIBLE_FRACTION = 0.5
PLACEMENT_TRIES = 20
MIN_COLOUR_DISTANCE = 90.0
OUTLINE_VERTICES = 40
ANNOTATIONS = "annotations.json"


def _rotate(points, angle, centre):
    cos, sin = np.cos(angle), np.sin(angle)
    return points @ np.array([[cos, sin], [-sin, cos]]) + centre


def _star(rng, radius):
    inner = radius * rng.uniform(0.38, 0.55)
    angles = np.pi / 2 + np.pi * np.arange(10) / 5
    radii = np.where(np.arange(10) % 2 == 0, radius, inner)
    return np.stack([radii * np.cos(angles), -radii * np.sin(angles)], axis=1)


def _circle(radius, vertices=OUTLINE_VERTICES):
    angles = 2 * np.pi * np.arange(vertices) / vertices
    return np.stack([radius * np.cos(angles), radius * np.sin(angles)], axis=1)


def _cross(rng, radius):
    half = radius * rng.uniform(0.14, 0.22)
    r = radius
    return np.array([[-half, -r], [half, -r], [half, -half], [r, -half], [r, half], [half, half],
                     [half, r], [-half, r], [-half, half], [-r, half], [-r, -half], [-half, -half]], np.float64)


def _heart(radius):
    t = 2 * np.pi * np.arange(OUTLINE_VERTICES) / OUTLINE_VERTICES
    x = 16 * np.sin(t) ** 3
    y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
    points = np.stack([x, y], axis=1)
    points -= (points.max(axis=0) + points.min(axis=0)) / 2
    return points * (radius / np.abs(points).max())


def _triangle(rng, radius):
    angles = np.array([0.0, 2 * np.pi / 3, 4 * np.pi / 3]) + rng.uniform(-0.35, 0.35, size=3)
    return np.stack([radius * np.cos(angles), radius * np.sin(angles)], axis=1)


def polygon_mask(polygon, height, width):
    """(H, W) bool mask of a polygon, rasterised as pycocotools rasterises COCO polygons."""
    rles = mask_util.frPyObjects([polygon.reshape(-1).tolist()], height, width)
    return mask_util.decode(mask_util.merge(rles)).astype(bool)


def random_object(rng, size):
    """(category name, outline polygon (M, 2) or None for a ring, full (H, W) mask) of one object, inside the image."""
    name = list(CATEGORY_IDS)[int(rng.integers(len(CATEGORY_IDS)))]
    radius = rng.uniform(*SIZE_RANGE) * size / 2
    centre = rng.uniform(radius + 1, size - radius - 1, size=2)
    angle = rng.uniform(0, 2 * np.pi) if name != "heart" else rng.uniform(-0.5, 0.5)
    if name == "ring":
        outer = polygon_mask(_circle(radius) + centre, size, size)
        inner = polygon_mask(_circle(radius * rng.uniform(0.45, 0.65)) + centre, size, size)
        return name, None, outer & ~inner
    shape = {"star": lambda: _star(rng, radius), "cross": lambda: _cross(rng, radius),
             "heart": lambda: _heart(radius), "triangle": lambda: _triangle(rng, radius)}[name]()
    polygon = np.round(_rotate(shape, angle, centre), 2)
    return name, polygon, polygon_mask(polygon, size, size)


def _stripes(along, period):
    return 0.5 + 0.5 * np.sin(2 * np.pi * along / period)


def background(rng, kind, size):
    """(size, size, 3) float BGR background of one of BACKGROUNDS."""
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float64)
    colours = rng.uniform(0, 255, size=(2, 3))
    if kind == "checker":
        angle, cell = rng.uniform(0, np.pi), rng.uniform(8, 20)
        u, v = xs * np.cos(angle) + ys * np.sin(angle), -xs * np.sin(angle) + ys * np.cos(angle)
        t = ((np.floor(u / cell) + np.floor(v / cell)) % 2)[..., None]
        t = cv2.GaussianBlur(t.astype(np.float32), (3, 3), 0)[..., None]
    elif kind == "plaid":
        angle = rng.uniform(0, np.pi)
        first = _stripes(xs * np.cos(angle) + ys * np.sin(angle), rng.uniform(8, 24))
        second = _stripes(-xs * np.sin(angle) + ys * np.cos(angle), rng.uniform(8, 24))
        t = (0.5 * first + 0.5 * second)[..., None]
    elif kind == "vignette":
        centre = rng.uniform(0, size, size=2)
        distance = np.hypot(xs - centre[0], ys - centre[1])
        t = (distance / distance.max())[..., None] ** rng.uniform(0.6, 1.6)
    elif kind == "marble":
        noise = np.zeros((size, size), np.float32)
        for octave, cells in enumerate((4, 8, 16, 32)):
            coarse = rng.normal(0, 1, size=(cells, cells)).astype(np.float32)
            noise += cv2.resize(coarse, (size, size), interpolation=cv2.INTER_CUBIC) / 2**octave
        t = _stripes(xs * rng.uniform(0.5, 1.5) + 12 * noise, rng.uniform(20, 40))[..., None]
    else:  # clutter: a flat colour with thin lines and small dots that are not objects
        image = np.broadcast_to(colours[0], (size, size, 3)).copy()
        for _ in range(int(rng.integers(4, 12))):
            start, end = rng.integers(0, size, size=(2, 2))
            cv2.line(image, tuple(map(int, start)), tuple(map(int, end)), rng.uniform(0, 255, size=3).tolist(),
                     int(rng.integers(1, 3)))
        for _ in range(int(rng.integers(3, 10))):
            centre = tuple(map(int, rng.integers(0, size, size=2)))
            cv2.circle(image, centre, int(rng.integers(1, 4)), rng.uniform(0, 255, size=3).tolist(), -1)
        return image + rng.normal(0, 5, size=image.shape)
    image = colours[0] * (1 - t) + colours[1] * t
    return image + rng.normal(0, 5, size=image.shape)


def _place_objects(rng, size):
    """Objects drawn in order, each leaving every earlier one at least MIN_VISIBLE_FRACTION visible."""
    objects = []
    for _ in range(int(rng.integers(1, MAX_OBJECTS + 1))):
        for _ in range(PLACEMENT_TRIES):
            name, polygon, mask = random_object(rng, size)
            covered, fits = np.zeros_like(mask), mask.any()
            for _, _, earlier in reversed(objects):
                if (earlier & ~covered & ~mask).sum() < MIN_VISIBLE_FRACTION * earlier.sum():
                    fits = False
                    break
                covered |= earlier
            if fits:
                objects.append((name, polygon, mask))
                break
    return objects


def _annotation(name, polygon, full_mask, visible_mask):
    rle = mask_util.encode(np.asfortranarray(visible_mask.astype(np.uint8)))
    if polygon is not None and (visible_mask == full_mask).all():
        segmentation = [[float(v) for v in polygon.reshape(-1)]]
    else:
        segmentation = {"size": [int(s) for s in rle["size"]], "counts": rle["counts"].decode("ascii")}
    return {"category_id": CATEGORY_IDS[name], "segmentation": segmentation, "area": float(mask_util.area(rle)),
            "bbox": [float(v) for v in mask_util.toBbox(rle)], "iscrowd": 0}


def render_image(seed, split, index, size=IMAGE_SIZE):
    """(background kind, (size, size, 3) uint8 BGR image, annotations without ids) of one image."""
    rng = np.random.default_rng([seed, SPLITS.index(split), index])
    kind = BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
    image = background(rng, kind, size)
    objects = _place_objects(rng, size)
    for _, _, mask in objects:
        ys, xs = np.nonzero(mask)
        first = distinct_colour(rng, [image[mask].mean(axis=0)], MIN_COLOUR_DISTANCE)
        second = np.clip(first + rng.uniform(-60, 60, size=3), 0, 255)
        angle = rng.uniform(0, 2 * np.pi)
        along = xs * np.cos(angle) + ys * np.sin(angle)
        t = ((along - along.min()) / max(np.ptp(along), 1.0))[:, None]
        image[ys, xs] = first * (1 - t) + second * t + rng.normal(0, 6, size=(len(ys), 3))
    covered = np.zeros((size, size), bool)
    annotations = []
    for name, polygon, mask in reversed(objects):
        annotations.append(_annotation(name, polygon, mask, mask & ~covered))
        covered |= mask
    return kind, np.clip(np.round(image), 0, 255).astype(np.uint8), annotations[::-1]


def categories():
    """COCO `categories`, in CATEGORY_IDS' (unsorted) order."""
    return [{"id": json_id, "name": name, "supercategory": "object"} for name, json_id in CATEGORY_IDS.items()]


def write_split(split_dir, split, num_images, seed):
    """Write `num_images` JPEGs under split_dir/<background>/ and split_dir/annotations.json."""
    images, annotations = [], []
    for index in range(num_images):
        kind, image, image_annotations = render_image(seed, split, index)
        file_name = f"{kind}/{index:06d}.jpg"
        (split_dir / kind).mkdir(parents=True, exist_ok=True)
        ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        if not ok:
            raise RuntimeError(f"could not encode {file_name} as JPEG")
        (split_dir / file_name).write_bytes(encoded.tobytes())
        image_id = 1000 + 3 * index  # not 1..N either: ids are the json's, whatever they are
        images.append({"id": image_id, "file_name": file_name, "height": IMAGE_SIZE, "width": IMAGE_SIZE})
        for annotation in image_annotations:
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, **annotation})
    dataset = {"info": _info(split, num_images, seed), "licenses": [], "images": images,
               "annotations": annotations, "categories": categories()}
    (split_dir / ANNOTATIONS).write_text(json.dumps(dataset))


def _info(split, num_images, seed):
    return {"description": "tfdet own-objects benchmark dataset", "version": GENERATOR_VERSION, "split": split,
            "num_images": num_images, "seed": seed, "image_size": IMAGE_SIZE}


def split_paths(out, split):
    """(annotations.json, image folder) of a split under `out`."""
    split_dir = pathlib.Path(out) / split
    return split_dir / ANNOTATIONS, split_dir


def ensure_dataset(out, num_train, num_val, seed):
    """{split: (annotations.json, image folder)} of the dataset in `out`, generated unless it is there.

    A split already in `out` is reused when it was made with the same settings; other settings raise
    ValueError naming the file. Each split is written into a temporary folder and renamed into place.
    """
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, num_images in zip(SPLITS, (num_train, num_val)):
        json_path, split_dir = split_paths(out, split)
        if split_dir.exists():
            found = json.loads(json_path.read_text())["info"] if json_path.is_file() else None
            if found != _info(split, num_images, seed):
                made = "no annotations.json" if found is None else (
                    f"{found['num_images']} images, seed {found['seed']}, generator v{found['version']}")
                raise ValueError(f"{split_dir} holds another dataset ({made}), not {num_images} images, seed {seed}, "
                                 f"generator v{GENERATOR_VERSION}: use another --out")
        else:
            staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{split}-", dir=out))
            try:
                write_split(staging, split, num_images, seed)
                staging.rename(split_dir)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        paths[split] = (json_path, split_dir)
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder (train/ and val/ go inside)")
    parser.add_argument("--train", type=int, default=400, help="training images")
    parser.add_argument("--val", type=int, default=100, help="validation images")
    parser.add_argument("--seed", type=int, default=0, help="random seed (an image depends on seed, split, index)")
    args = parser.parse_args(argv)
    if args.train < 1 or args.val < 1:
        parser.error("--train and --val must be at least 1")
    try:
        paths = ensure_dataset(args.out, args.train, args.val, args.seed)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for split, (json_path, image_dir) in paths.items():
        dataset = json.loads(json_path.read_text())
        print(f"{split}: {len(dataset['images'])} images, {len(dataset['annotations'])} objects: "
              f"{json_path} (images under {image_dir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
