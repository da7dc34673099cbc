"""Reading a COCO annotation json and checking it before training or evaluation starts.

Every problem is one line naming the file and the entry (image id and file_name, annotation id, category id):
malformed json or missing required fields, duplicate ids, an annotation of an unknown image or category, a
box with a negative size or lying entirely outside its image ([0, W) x [0, H); boxes partly outside are
clipped later, as Detectron does), a segmentation that is neither polygons nor RLE (or an RLE of another
size than its image), an image listed but absent from the image folder or whose first bytes no OpenCV decoder
recognises (training, inference and evaluation all decode with OpenCV), a dataset without images or categories.
Polygons of fewer than 6 coordinates (3 points) are not errors: Detectron's json_dataset drops them silently
(COCO itself has some); `degenerate_polygons` finds them so that the training roidb can drop them with one
warning. A polygon of an odd number (>= 7) of coordinates is kept, as Detectron keeps it: pycocotools
rasterises its first len // 2 points and ignores the trailing coordinate.

The checks run for every entry of COCO-sized jsons (860k annotations, ~40M polygon coordinates), so the common
case takes fast paths (`_all_numbers`) and entries are only named once something is wrong.
"""

import contextlib
import gc
import io
import json
import math
import os
import pathlib

import cv2
from pycocotools.coco import COCO

# Detectron's smallest valid polygon: 3 points (json_dataset keeps polygons of >= 6 coordinates, of either parity).
MIN_POLYGON_COORDS = 6
# The types json gives numbers; a list holding only these (no bool) is checked by one sum.
_NUMBER_TYPES = frozenset((int, float))


class DatasetError(ValueError):
    """A COCO json that cannot be used, in one line naming the file and the entry."""


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _all_numbers(values):
    """Whether every item is a finite number (not a bool). Plain ints and floats with a finite sum are finite
    (an inf or nan makes the sum inf or nan), one C-speed pass; anything else is checked item by item."""
    if _NUMBER_TYPES.issuperset(map(type, values)) and math.isfinite(sum(values)):
        return True
    return all(map(_is_number, values))


def image_entry(image):
    """'image id 3 (a/b.jpg)': how errors name an image."""
    return f"image id {image.get('id')} ({image.get('file_name')})"


def annotation_entry(annotation, images):
    """'annotation id 7 (image id 3, a/b.jpg)': how errors name an annotation."""
    image = images.get(annotation.get("image_id"))
    where = f"image id {image['id']}, {image['file_name']}" if image else f"image id {annotation.get('image_id')}"
    return f"annotation id {annotation.get('id')} ({where})"


def load_json(path):
    """The top-level object of a COCO annotation json; FileNotFoundError / DatasetError naming the file."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"annotation file not found: {path}")
    try:
        with open(path, encoding="utf-8") as stream, cyclic_gc_paused():
            data = json.load(stream)
    except json.JSONDecodeError as error:
        raise DatasetError(f"{path}: not valid JSON ({error})") from None
    except UnicodeDecodeError as error:
        raise DatasetError(f"{path}: not valid JSON (not UTF-8 text: {error.reason} at byte {error.start})") from None
    except OSError as error:
        raise DatasetError(f"{path}: cannot be read ({error.strerror or error})") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: a COCO annotation json holds an object, not a {type(data).__name__}")
    return data


@contextlib.contextmanager
def cyclic_gc_paused():
    """Pause Python's cyclic garbage collector (also as a decorator): a json parse makes millions of containers
    and no cycles, and the collector's passes over them cost a quarter of a COCO-sized json's parse, and as
    much again while the checks walk them. Whatever of the json is dropped by the end goes without a pass."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _list_field(path, data, key):
    value = data.get(key)
    if not isinstance(value, list):
        found = "missing" if value is None else f"a {type(value).__name__}"
        raise DatasetError(f"{path}: '{key}' must be a list (it is {found})")
    return value


def checked_images(path, data):
    """{id: image} of the json's `images`, each with an int id, a file_name and a positive height and width."""
    images = {}
    for image in _list_field(path, data, "images"):
        if not isinstance(image, dict):
            raise DatasetError(f"{path}: an entry of 'images' is a {type(image).__name__}, not an object")
        problem = _image_problem(image, images)
        if problem:
            raise DatasetError(f"{path}: {image_entry(image)}: {problem}")
        images[image["id"]] = image
    if not images:
        raise DatasetError(f"{path}: the dataset has no images")
    return images


def _image_problem(image, images):
    """What is wrong with one entry of 'images' (`images`: the ids seen before it), or None."""
    if not _is_int(image.get("id")):
        return "'id' must be an integer"
    if not isinstance(image.get("file_name"), str) or not image["file_name"]:
        return "'file_name' must be a non-empty string"
    for key in ("height", "width"):
        if not _is_int(image.get(key)) or image[key] <= 0:
            return f"'{key}' must be a positive integer, got {image.get(key)!r}"
    if image["id"] in images:
        return f"image id {image['id']} is listed twice"
    return None


def checked_categories(path, data):
    """The json's `categories` ids in json order (each with an int id and a name); no categories is an error."""
    ids = []
    for category in _list_field(path, data, "categories"):
        if not isinstance(category, dict) or not _is_int(category.get("id")):
            raise DatasetError(f"{path}: category {category!r} needs an integer 'id'")
        if not isinstance(category.get("name"), str):
            raise DatasetError(f"{path}: category id {category['id']}: 'name' must be a string")
        if category["id"] in ids:
            raise DatasetError(f"{path}: category id {category['id']} is listed twice")
        ids.append(category["id"])
    if not ids:
        raise DatasetError(f"{path}: the dataset defines no categories")
    return ids


def check_annotations(path, data, images, category_ids):
    """Raise DatasetError naming the first annotation that is malformed or refers to an unknown image or
    category, has a box of negative size or entirely outside its image, or a segmentation that is not
    polygons or RLE of its image's size."""
    known_categories, seen = set(category_ids), set()
    for annotation in _list_field(path, data, "annotations"):
        if not isinstance(annotation, dict):
            raise DatasetError(f"{path}: an entry of 'annotations' is a {type(annotation).__name__}, not an object")
        problem = _annotation_problem(annotation, images, known_categories, seen)
        if problem:
            raise DatasetError(f"{path}: {annotation_entry(annotation, images)}: {problem}")
        seen.add(annotation["id"])


def _annotation_problem(annotation, images, known_categories, seen):
    """What is wrong with one annotation, or None."""
    for key in ("id", "image_id", "category_id"):
        if not _is_int(annotation.get(key)):
            return f"'{key}' must be an integer, got {annotation.get(key)!r}"
    if annotation["id"] in seen:
        return "the annotation id is used twice"
    image = images.get(annotation["image_id"])
    if image is None:
        return "no image has this image_id"
    if annotation["category_id"] not in known_categories:
        return f"category_id {annotation['category_id']} is not one of the json's categories"
    bbox = annotation.get("bbox")
    if not isinstance(bbox, list) or len(bbox) != 4 or not _all_numbers(bbox):
        return f"'bbox' must be [x, y, width, height], got {bbox!r}"
    if not _is_number(annotation.get("area")):
        return f"'area' must be a number, got {annotation.get('area')!r}"
    if annotation.get("iscrowd") not in (0, 1):  # True and False compare equal to 1 and 0
        return f"'iscrowd' must be 0 or 1, got {annotation.get('iscrowd')!r}"
    x, y, w, h = bbox
    if w < 0 or h < 0:
        return f"bbox {bbox} has a negative width or height"
    height, width = image["height"], image["width"]
    if w > 0 and h > 0 and (x >= width or y >= height or x + w <= 0 or y + h <= 0):
        return f"bbox {bbox} lies entirely outside the {width}x{height} image"
    if "segmentation" in annotation:
        return _segmentation_problem(annotation["segmentation"], height, width)
    return None


def _segmentation_problem(segmentation, height, width):
    """What is wrong with a segmentation (polygons, or RLE with `size` [height, width]), or None."""
    if isinstance(segmentation, list):
        if all(isinstance(p, list) and _all_numbers(p) for p in segmentation):
            return None
        return "'segmentation' is a list but not of polygons (lists of numbers)"
    if isinstance(segmentation, dict) and set(segmentation) >= {"counts", "size"}:
        counts, size = segmentation["counts"], segmentation["size"]
        if not (isinstance(counts, str) or (isinstance(counts, list) and all(map(_is_int, counts)))):
            return "the RLE 'counts' must be a string or a list of integers"
        if size != [height, width]:
            return f"the RLE 'size' {size!r} is not the image's [height, width] [{height}, {width}]"
        return None
    return f"'segmentation' is neither polygons nor RLE: {type(segmentation).__name__}"


def degenerate_polygons(data):
    """(count, first annotation id) of the polygons of fewer than 6 coordinates (3 points), which Detectron's
    json_dataset drops (the count is 0 and the id None when there are none)."""
    count, first = 0, None
    for annotation in data.get("annotations", ()):
        segmentation = annotation.get("segmentation")
        if isinstance(segmentation, list):
            bad = sum(1 for polygon in segmentation if not is_valid_polygon(polygon))
            if bad and first is None:
                first = annotation["id"]
            count += bad
    return count, first


def is_valid_polygon(polygon):
    """Detectron's rule: at least 6 coordinates (3 points). No parity test: pycocotools rasterises an odd-length
    polygon as its first len // 2 points."""
    return len(polygon) >= MIN_POLYGON_COORDS


def check_image_files(path, images, image_dir):
    """FileNotFoundError naming the json, the first image listed but absent from `image_dir` and the count;
    else DatasetError naming the first file no OpenCV decoder recognises, and the count of such files.

    OpenCV picks a decoder by the file's first bytes (its signature) for cv2.imread and cv2.imdecode alike;
    `cv2.haveImageReader` asks that question of the file without decoding it (a few microseconds each). A file
    whose signature is right but whose body is damaged passes here and fails when `tfdet.imaging.image_io` reads it.
    """
    files = [(image, os.path.join(image_dir, image["file_name"])) for image in images.values()]
    missing = [(image, file) for image, file in files if not os.path.exists(file)]
    if missing:
        raise FileNotFoundError(_files_problem(path, missing, len(images), "not found"))
    undecodable = [(image, file) for image, file in files if not cv2.haveImageReader(file)]
    if undecodable:
        problem = "is not an image OpenCV can decode (its first bytes match no format OpenCV reads)"
        raise DatasetError(_files_problem(path, undecodable, len(images), problem))


def _files_problem(path, failing, num_images, problem):
    """'{json}: image id 3 (a.jpg): {dir}/a.jpg {problem} (and 4 more of its 10 images)'."""
    image, file = failing[0]
    more = f" (and {len(failing) - 1} more of its {num_images} images)" if len(failing) > 1 else ""
    return f"{path}: {image_entry(image)}: {file} {problem}{more}"


@cyclic_gc_paused()
def checked_json(path, image_dir=None):
    """The content of an annotation json, checked (see the module docstring); `image_dir`, when given, must
    hold every listed image, each in a format OpenCV decodes."""
    data = load_json(path)
    images = checked_images(path, data)
    category_ids = checked_categories(path, data)
    check_annotations(path, data, images, category_ids)
    if image_dir is not None:
        check_image_files(path, images, image_dir)
    return data


def coco_of(data):
    """pycocotools' COCO over an already read json (without its progress prints)."""
    coco = COCO()
    coco.dataset = data
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco
