"""Cityscapes `gtFine` -> COCO json, as Detectron's / the DA fork's `convert_cityscapes_to_coco.py` writes it.

For every `<city>_<seq>_<frame>_gtFine_polygons.json` (walked in sorted order, splits val, train, test as the
converter does; image and annotation ids count on from 0 across the splits) the image size comes from the
polygons file and the objects from its `_gtFine_instanceIds.png`, as the converter's
`instances2dict_with_polygons` reads them:

* an object is a pixel value >= 1000 (value // 1000 is the Cityscapes label id; values below 1000 are
  groups and stuff, never objects, so no object is a crowd: `iscrowd` 0), taken in increasing value order;
* only the converter's classes are kept, with its ids: person 1, rider 2, car 3, truck 4, bus 5, train 6,
  motorcycle 7, bicycle 8 (the car-only files: car 1);
* `segmentation`: the outer contours of the object's pixels (cv2.findContours, RETR_EXTERNAL,
  CHAIN_APPROX_NONE), each a flat [x0, y0, x1, y1, ...] list; an object without contours, or with a contour
  of two points or fewer, is skipped (the converter's warnings);
* `area`: its pixel count; `bbox`: [x0, y0, x1 - x0 + 1, y1 - y0 + 1] over the contours' points.

Images are named `<prefix>leftImg8bit.png` (Foggy Cityscapes: `<prefix>leftImg8bit_foggy_beta_0.02.png`,
the beta = 0.02 images, with the same gtFine annotations) and listed with their `seg_file_name`.
"""

import dataclasses
import json
import pathlib

import cv2
import numpy as np
from tqdm import tqdm

from tfdet.data.convert.output import ConversionError

SPLITS = ("val", "train", "test")  # the converter's order: ids count on from one split to the next
CLASSES = ("person", "rider", "car", "truck", "bus", "train", "motorcycle", "bicycle")
CAR_CLASSES = ("car",)
CITYSCAPES_IMAGE = "leftImg8bit.png"
FOGGY_IMAGE = "leftImg8bit_foggy_beta_0.02.png"
POLYGONS_SUFFIX = "gtFine_polygons.json"
INSTANCE_IDS_SUFFIX = "gtFine_instanceIds.png"
# Cityscapes label ids of the classes with instances (cityscapesscripts' labels.py); 0..33 are its ids.
_INSTANCE_LABELS = {
    24: "person", 25: "rider", 26: "car", 27: "truck", 28: "bus", 29: "caravan", 30: "trailer", 31: "train",
    32: "motorcycle", 33: "bicycle",
}  # fmt: skip
_LAST_LABEL_ID = 33
_MIN_CONTOUR_COORDS = 5  # the converter skips an object with a contour of 4 numbers (2 points) or fewer


@dataclasses.dataclass
class AnnotatedImage:
    """One gtFine image: its file prefix, size and objects [(class name, contours, pixel count)]."""

    prefix: str
    width: int
    height: int
    objects: list


def _image_size(polygons_path):
    try:
        content = json.loads(polygons_path.read_text(encoding="utf-8"))
        width, height = int(content["imgWidth"]), int(content["imgHeight"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConversionError(f"{polygons_path}: not a gtFine polygons file with imgWidth and imgHeight ({error!r})")
    return width, height


def _objects(instance_path, width, height):
    """[(class name, contours, pixel count)] of an instanceIds png, and how many objects were skipped."""
    ids = cv2.imread(str(instance_path), cv2.IMREAD_UNCHANGED)
    if ids is None:
        raise ConversionError(f"{instance_path}: missing or not an image")
    if ids.ndim != 2 or ids.shape != (height, width):
        raise ConversionError(f"{instance_path}: expected a {width}x{height} one-channel image, got shape {ids.shape}")
    objects, skipped = [], 0
    for instance_id in np.unique(ids):
        if instance_id < 1000:
            continue
        label = int(instance_id) // 1000
        if label > _LAST_LABEL_ID:
            raise ConversionError(f"{instance_path}: value {instance_id} names no Cityscapes label (id {label})")
        name = _INSTANCE_LABELS.get(label)
        if name not in CLASSES:
            continue
        mask = (ids == instance_id).astype(np.uint8)
        contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        polygons = [contour.reshape(-1).tolist() for contour in contours]
        if not polygons or min(len(polygon) for polygon in polygons) < _MIN_CONTOUR_COORDS:
            skipped += 1
            continue
        objects.append((name, polygons, int(mask.sum())))
    return objects, skipped


def read_gtfine(gtfine_dir, splits=SPLITS):
    """({split: [AnnotatedImage]} for the splits present under `gtfine_dir`, objects skipped as the converter does)."""
    gtfine_dir = pathlib.Path(gtfine_dir)
    present = [split for split in splits if (gtfine_dir / split).is_dir()]
    if not present:
        raise ConversionError(f"{gtfine_dir}: no {', '.join(splits)} folder of gtFine annotations")
    images, skipped = {}, 0
    for split in present:
        files = sorted((gtfine_dir / split).rglob(f"*_{POLYGONS_SUFFIX}"))
        images[split] = []
        for polygons_path in tqdm(files, desc=f"gtFine {split}", unit="image", disable=None):
            width, height = _image_size(polygons_path)
            prefix = polygons_path.name[: -len(POLYGONS_SUFFIX)]
            objects, dropped = _objects(polygons_path.with_name(prefix + INSTANCE_IDS_SUFFIX), width, height)
            images[split].append(AnnotatedImage(prefix, width, height, objects))
            skipped += dropped
    return images, skipped


def _box(polygons):
    """[x0, y0, w, h] with the "+1" widths over every point of the polygons (floats, as the converter's)."""
    xs = [x for polygon in polygons for x in polygon[0::2]]
    ys = [y for polygon in polygons for y in polygon[1::2]]
    return [float(min(xs)), float(min(ys)), float(max(xs) - min(xs) + 1), float(max(ys) - min(ys) + 1)]


def coco_datasets(images, classes=CLASSES, image_name=CITYSCAPES_IMAGE):
    """{split: COCO dict} of `read_gtfine`'s images with the objects of `classes` (ids 1.. in that order)."""
    category_ids = {name: index for index, name in enumerate(classes, start=1)}
    datasets, image_id, annotation_id = {}, 0, 0
    for split, split_images in images.items():
        entries, annotations = [], []
        for image in split_images:
            entries.append({
                "id": image_id, "width": image.width, "height": image.height,
                "file_name": image.prefix + image_name, "seg_file_name": image.prefix + INSTANCE_IDS_SUFFIX,
            })  # fmt: skip
            for name, polygons, pixel_count in image.objects:
                if name not in category_ids:
                    continue
                annotations.append({
                    "id": annotation_id, "image_id": image_id, "segmentation": polygons,
                    "category_id": category_ids[name], "iscrowd": 0, "area": pixel_count, "bbox": _box(polygons),
                })  # fmt: skip
                annotation_id += 1
            image_id += 1
        categories = [{"id": category_ids[name], "name": name} for name in classes]
        datasets[split] = {"images": entries, "categories": categories, "annotations": annotations}
    return datasets


def image_links(datasets, images_dir, image_folder):
    """{link in `image_folder`: the image under `images_dir/<split>/<city>/`} for every image of `datasets`."""
    links = {}
    for split, dataset in datasets.items():
        for entry in dataset["images"]:
            name = entry["file_name"]
            links[pathlib.Path(image_folder) / name] = pathlib.Path(images_dir) / split / name.split("_")[0] / name
    return links
