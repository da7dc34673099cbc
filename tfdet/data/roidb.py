"""COCO json -> per-image training records ("roidb"), with Detectron's `json_dataset` conventions.

One record per image that training can use, following Detectron's `JsonDataset._add_gt_annotations`
and `roidb.filter_for_training`:
- The json is checked first (`tfdet.data.coco_json`): a malformed entry, an unknown category, a box
  entirely outside its image or an image absent from the image folder is one error naming the file and entry.
- Images in increasing id order; classes are contiguous ids 1..C over the json category ids in the
  order the json lists them (Detectron's `getCatIds()`, the json's order, not sorted); `json_category_ids`
  maps them back (`tfdet.evaluation.contiguous_to_json_ids` gives the same list).
- Boxes: json (x, y, w, h) -> x1, y1, x2 = x + max(0, w - 1), y2 = y + max(0, h - 1) (the "+1"
  convention), clipped to [0, W - 1] x [0, H - 1]. An object is kept when its `area` > 0 and, after
  clipping, x2 > x1 and y2 > y1 (so boxes 1 pixel wide or tall are dropped); objects with `area` <
  TRAIN.GT_MIN_AREA or `ignore` == 1 are dropped; polygons of fewer than 6 coordinates (3 points) are
  removed, with one warning giving their count and the first annotation holding one. Longer polygons of an
  odd length stay (Detectron has no parity test); pycocotools rasterises their first len // 2 points.
- Crowd objects stay, flagged `is_crowd` (Detectron gives them gt_overlaps -1 so they never become
  foreground; the training targets must ignore them).
- Keypoints (K, 3) = x, y, v from the annotation (zeros when it has none). Detectron stores them as
  int32 (truncating fractional json coordinates); here they stay float32, identical for COCO, whose
  keypoints are integers.
- An image is skipped when it has no non-crowd object left (Detectron: no foreground or background
  RoI), or, when keypoints are required, no visible (v > 0) keypoint. One log line per json gives the
  objects dropped for each reason and the images skipped; a json leaving no usable image is an error.
Horizontal flips are not added as records (Detectron's TRAIN.USE_FLIPPED doubles the roidb): the
pipeline flips each image at random instead, so one pass over the records is one epoch.
Segmentations are kept as COCO's compressed RLE (polygons rasterised by pycocotools at the image's
size) only when masks are asked for, so the pipeline decodes them with TensorFlow ops.
The json is read once without pycocotools' COCO index (its per-image getAnnIds / loadAnns order is kept:
images by id, each image's annotations in json order), and the filters run over all objects at once in
NumPy, so that a COCO-sized json loads in about the time of pycocotools' own COCO(json).
"""

import collections
import dataclasses
import itertools
import logging
import pathlib

import numpy as np
import pycocotools.mask as mask_util

from tfdet.data.catalog import configured_datasets
from tfdet.data.coco_json import (
    DatasetError,
    annotation_entry,
    checked_json,
    cyclic_gc_paused,
    degenerate_polygons,
    is_valid_polygon,
)
from tfdet.data.keypoint_flips import keypoint_flip_pairs

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ImageRecord:
    """One training image and its ground truth in original-image pixels (Detectron's roidb entry)."""

    image_id: int
    file_path: str
    height: int
    width: int
    boxes: np.ndarray  # (N, 4) float32 x1, y1, x2, y2, inclusive pixel indices ("+1" widths)
    classes: np.ndarray  # (N,) int32 contiguous ids 1..C
    is_crowd: np.ndarray  # (N,) bool
    keypoints: np.ndarray | None  # (N, K, 3) float32 x, y, v; None when the dataset has no keypoints
    mask_rles: list | None  # N compressed COCO RLE `counts` (bytes) at (height, width); None without masks


@dataclasses.dataclass
class Roidb:
    """A training dataset: its records and what the records' ids and indices mean."""

    records: list
    json_category_ids: tuple  # json id of contiguous class c is json_category_ids[c - 1]
    class_names: tuple  # ("__background__", name of class 1, ...)
    keypoint_names: tuple | None
    keypoint_flip_pairs: tuple  # (i, j) index pairs that swap under a horizontal flip
    num_skipped: int  # images dropped because training cannot use them

    @property
    def num_classes(self):
        """Classes including the background, as cfg.MODEL.NUM_CLASSES counts them."""
        return len(self.class_names)

    @property
    def num_keypoints(self):
        return 0 if self.keypoint_names is None else len(self.keypoint_names)


def clipped_boxes(bboxes, heights, widths):
    """(N, 4) float64 json (x, y, w, h) -> Detectron's `xywh_to_xyxy` ("+1": x2 = x + max(0, w - 1)) then
    `clip_xyxy_to_image`, for all objects at once (`heights`, `widths`: each object's image size)."""
    x, y, w, h = bboxes.T
    x2, y2 = x + np.maximum(0.0, w - 1.0), y + np.maximum(0.0, h - 1.0)
    return np.stack([_clip(x, widths), _clip(y, heights), _clip(x2, widths), _clip(y2, heights)], axis=1)


def _clip(coordinates, sizes):
    return np.minimum(sizes - 1.0, np.maximum(0.0, coordinates))


def segmentation_rle(segmentation, height, width):
    """A COCO segmentation (polygons, uncompressed or compressed RLE) as compressed RLE `counts` bytes."""
    if isinstance(segmentation, list):
        if not segmentation:  # every polygon was degenerate: an empty mask
            return mask_util.encode(np.zeros((height, width), np.uint8, order="F"))["counts"]
        rles = mask_util.frPyObjects(segmentation, height, width)
        rle = rles[0] if len(rles) == 1 else mask_util.merge(rles)  # merge copies a single RLE as it is
    elif isinstance(segmentation, dict) and isinstance(segmentation.get("counts"), list):
        rle = mask_util.frPyObjects(segmentation, height, width)
    elif isinstance(segmentation, dict) and isinstance(segmentation.get("counts"), (str, bytes)):
        rle = segmentation
    else:
        raise ValueError(f"unknown segmentation format {type(segmentation).__name__}")
    if [int(s) for s in rle["size"]] != [height, width]:
        raise ValueError(f"segmentation of size {list(rle['size'])} on an image of size {[height, width]}")
    counts = rle["counts"]
    return counts.encode("ascii") if isinstance(counts, str) else bytes(counts)


@cyclic_gc_paused()
def load_coco_roidb(
    annotation_file,
    image_dir,
    *,
    with_masks=False,
    keypoints_required=False,
    gt_min_area=-1,
    keypoint_flip_map=None,
    check_files=True,
):
    """The Roidb of one COCO json: usable images and their ground truth (see the module docstring).

    `with_masks` keeps each object's mask as RLE; `keypoints_required` (cfg.MODEL.KEYPOINTS_ON) also
    skips images without a visible keypoint; `gt_min_area` is cfg.TRAIN.GT_MIN_AREA; `check_files`
    requires every listed image to be in `image_dir`.
    """
    annotation_file, image_dir = pathlib.Path(annotation_file), pathlib.Path(image_dir)
    data = checked_json(annotation_file, image_dir if check_files else None)
    categories = data["categories"]
    json_ids = tuple(c["id"] for c in categories)  # the json's order, as Detectron's COCO.getCatIds()
    contiguous = {json_id: i + 1 for i, json_id in enumerate(json_ids)}
    class_names = ("__background__",) + tuple(c["name"] for c in categories)
    keypoint_names = _keypoint_schema(categories, annotation_file)
    if keypoints_required and keypoint_names is None:
        raise ValueError(f"keypoints are required (MODEL.KEYPOINTS_ON) but {annotation_file} has none")
    flip_pairs = keypoint_flip_pairs(keypoint_names, keypoint_flip_map) if keypoint_names else ()
    _warn_degenerate_polygons(annotation_file, data)

    images = sorted(data["images"], key=lambda image: image["id"])  # Detectron: sorted(COCO.getImgIds())
    objects, image_index = _objects_by_image(data["annotations"], images)
    counts = collections.Counter()
    keep, boxes, crowd = _kept_objects(objects, image_index, images, gt_min_area, counts)
    kept = np.flatnonzero(keep)
    kept_objects = [objects[i] for i in kept]
    classes = np.array([contiguous[obj["category_id"]] for obj in kept_objects], np.int32)
    keypoints, rles = _keypoints_and_masks(
        kept_objects, image_index[kept], images, keypoint_names, with_masks, annotation_file
    )
    objects_of = _ObjectsOfImages(image_index[kept], boxes[kept], classes, crowd[kept], keypoints, rles)
    records = _usable_records(images, image_dir, objects_of, keypoints_required, counts)
    _log_filtering(annotation_file, len(images), records, counts)
    if not records:
        raise DatasetError(
            f"{annotation_file}: none of its {len(images)} images has an object training can use "
            f"({_describe(counts)})"
        )
    return Roidb(records, json_ids, class_names, keypoint_names, flip_pairs, len(images) - len(records))


def _objects_by_image(annotations, images):
    """The annotations in roidb order, image by image in `images`' order and each image's in json order (as
    COCO.getAnnIds(imgIds=id) lists them), and the index in `images` of each one's image."""
    position = {image["id"]: i for i, image in enumerate(images)}
    groups = [[] for _ in images]
    for annotation in annotations:
        groups[position[annotation["image_id"]]].append(annotation)
    image_index = np.repeat(np.arange(len(images)), [len(group) for group in groups])
    return list(itertools.chain.from_iterable(groups)), image_index


def _kept_objects(objects, image_index, images, gt_min_area, counts):
    """Detectron's `_add_gt_annotations` filter, over all objects at once: (kept: bool mask, clipped float32
    boxes, is_crowd); `counts` adds up why the others are dropped, tested in Detectron's order."""
    area = np.array([obj["area"] for obj in objects], np.float64)
    ignore = np.array([obj.get("ignore", 0) == 1 for obj in objects], bool)
    crowd = np.array([bool(obj["iscrowd"]) for obj in objects], bool)
    bboxes = np.fromiter(itertools.chain.from_iterable(obj["bbox"] for obj in objects), np.float64).reshape(-1, 4)
    height, width = (np.array([image[key] for image in images], np.float64) for key in ("height", "width"))
    boxes = clipped_boxes(bboxes, height[image_index], width[image_index])
    below = area < gt_min_area
    ignored = ~below & ignore
    too_small = ~below & ~ignore & ~((area > 0) & (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1]))
    keep = ~(below | ignored | too_small)
    for reason, dropped in zip(_OBJECT_REASONS, (below, ignored, too_small)):
        counts[reason] += int(dropped.sum())
    counts["kept"] += int(keep.sum())
    counts["crowd"] += int((keep & crowd).sum())
    return keep, boxes.astype(np.float32), crowd


def _keypoints_and_masks(objects, image_index, images, keypoint_names, with_masks, path):
    """The kept objects' (M, K, 3) keypoints (None without a keypoint schema) and RLE masks (None without
    masks), object by object as Detectron reads them; a bad object is a DatasetError naming it."""
    keypoints = [] if keypoint_names is not None else None
    rles = [] if with_masks else None
    for obj, i in zip(objects, image_index.tolist()):
        try:
            if keypoints is not None:
                keypoints.append(_object_keypoints(obj, len(keypoint_names)))
            if rles is not None:
                rles.append(_object_rle(obj, images[i]["height"], images[i]["width"]))
        except ValueError as error:
            entry = annotation_entry(obj, {image["id"]: image for image in images})
            raise DatasetError(f"{path}: {entry}: {error}") from None
    if keypoints is not None:
        keypoints = np.array(keypoints, np.float32).reshape(-1, len(keypoint_names), 3)
    return keypoints, rles


def _object_rle(obj, height, width):
    """An object's mask as RLE counts, from its polygons of >= 6 coordinates (Detectron drops the others)."""
    segmentation = obj.get("segmentation")
    if segmentation is None:
        raise ValueError("no 'segmentation' (masks are trained: MODEL.MASK_ON)")
    if isinstance(segmentation, list):
        segmentation = [polygon for polygon in segmentation if is_valid_polygon(polygon)]
    return segmentation_rle(segmentation, height, width)


@dataclasses.dataclass
class _ObjectsOfImages:
    """The kept objects of all images in roidb order (image by image), each image's a slice of these."""

    image_index: np.ndarray  # sorted: the index in the roidb's images of each object's image
    boxes: np.ndarray
    classes: np.ndarray
    is_crowd: np.ndarray
    keypoints: np.ndarray | None
    mask_rles: list | None


def _usable_records(images, image_dir, objects, keypoints_required, counts):
    """The ImageRecords of the images training can use; `counts` adds up the images skipped and why."""
    num_images = len(images)
    non_crowd = np.bincount(objects.image_index[~objects.is_crowd], minlength=num_images).tolist()
    if keypoints_required:
        visible = (objects.keypoints[..., 2] > 0).any(axis=1)
        with_visible = np.bincount(objects.image_index[visible], minlength=num_images).tolist()
    bounds = np.searchsorted(objects.image_index, np.arange(num_images + 1)).tolist()  # image i: [b[i], b[i + 1])
    records = []
    for i, image in enumerate(images):
        if not non_crowd[i]:
            counts["images without a non-crowd object"] += 1
        elif keypoints_required and not with_visible[i]:
            counts["images without a visible keypoint"] += 1
        else:
            records.append(_image_record(image, image_dir, objects, slice(bounds[i], bounds[i + 1])))
    return records


def _image_record(image, image_dir, objects, where):
    """The ImageRecord of one image, its objects being `objects`' `where` slice."""
    return ImageRecord(
        image_id=int(image["id"]),
        file_path=str(image_dir / image["file_name"]),
        height=int(image["height"]),
        width=int(image["width"]),
        boxes=objects.boxes[where],
        classes=objects.classes[where],
        is_crowd=objects.is_crowd[where],
        keypoints=None if objects.keypoints is None else objects.keypoints[where],
        mask_rles=None if objects.mask_rles is None else objects.mask_rles[where],
    )


def _warn_degenerate_polygons(annotation_file, dataset):
    """One warning for the polygons Detectron drops silently (fewer than 6 coordinates: 3 points)."""
    count, first_id = degenerate_polygons(dataset)
    if count:
        logger.warning(
            "%s: dropped %d polygon(s) of fewer than 6 coordinates (3 points), as Detectron does (the first in "
            "annotation id %s)",
            annotation_file,
            count,
            first_id,
        )


# Why objects and images are dropped, in the order of the log line.
_OBJECT_REASONS = ("below TRAIN.GT_MIN_AREA", "ignore 1", "zero area or under 2 px after clipping")
_IMAGE_REASONS = ("images without a non-crowd object", "images without a visible keypoint")


def _describe(counts):
    """'2 below TRAIN.GT_MIN_AREA, 1 ignore 1' for the non-zero counts of `counts`, else 'nothing dropped'."""
    parts = [f"{counts[reason]} {reason}" for reason in (*_OBJECT_REASONS, *_IMAGE_REASONS) if counts[reason]]
    return ", ".join(parts) or "nothing dropped"


def _log_filtering(annotation_file, num_images, records, counts):
    """One line: objects kept and dropped per reason, images filtered (Detectron's filter_for_training count)."""
    objects = [f"{counts[reason]} {reason}" for reason in _OBJECT_REASONS]
    images = [f"{counts[reason]} {reason}" for reason in _IMAGE_REASONS]
    logger.info(
        "%s: %d objects kept (%d crowd), dropped %s; filtered %d images without usable annotations (%s): "
        "%d -> %d",
        annotation_file.name,
        counts["kept"],
        counts["crowd"],
        ", ".join(objects),
        num_images - len(records),
        ", ".join(images),
        num_images,
        len(records),
    )


def concatenate_roidbs(roidbs):
    """One Roidb from several with the same categories and keypoints (cfg.TRAIN.DATASETS' union)."""
    first = roidbs[0]
    for other in roidbs[1:]:
        if (other.json_category_ids, other.class_names) != (first.json_category_ids, first.class_names):
            raise ValueError("training datasets with different categories cannot be combined")
        if (other.keypoint_names, other.keypoint_flip_pairs) != (first.keypoint_names, first.keypoint_flip_pairs):
            raise ValueError("training datasets with different keypoints cannot be combined")
    return dataclasses.replace(
        first,
        records=[r for roidb in roidbs for r in roidb.records],
        num_skipped=sum(r.num_skipped for r in roidbs),
    )


def training_roidb(cfg, dataset_names=None, keypoint_flip_map=None):
    """The Roidb of cfg.TRAIN.DATASETS (or `dataset_names`), named in `tfdet.data.catalog`."""
    names = tuple(dataset_names if dataset_names is not None else cfg.TRAIN.DATASETS)
    roidbs = [
        load_coco_roidb(
            spec.annotation_file,
            spec.image_dir,
            with_masks=bool(cfg.MODEL.MASK_ON),
            keypoints_required=bool(cfg.MODEL.KEYPOINTS_ON),
            gt_min_area=cfg.TRAIN.GT_MIN_AREA,
            keypoint_flip_map=keypoint_flip_map,
        )
        for spec in configured_datasets(names, "TRAIN.DATASETS", "no training dataset")
    ]
    roidb = concatenate_roidbs(roidbs)
    check_num_classes(cfg, roidb, names)
    return roidb


def check_num_classes(cfg, roidb, names):
    """ValueError in one line unless cfg.MODEL.NUM_CLASSES is 1 (the background) + the training set's categories."""
    if cfg.MODEL.NUM_CLASSES != roidb.num_classes:
        raise ValueError(
            f"MODEL.NUM_CLASSES is {cfg.MODEL.NUM_CLASSES} but the training set ({', '.join(names)}) has "
            f"{roidb.num_classes - 1} categories: set MODEL.NUM_CLASSES {roidb.num_classes} (1 background + "
            f"{roidb.num_classes - 1})"
        )


def _keypoint_schema(categories, annotation_file):
    """The keypoint names the categories share, or None; categories naming different ones are an error."""
    schemas = {tuple(c["keypoints"]) for c in categories if c.get("keypoints")}
    if len(schemas) > 1:
        raise ValueError(f"{annotation_file}: categories define different keypoint lists")
    return schemas.pop() if schemas else None


def _object_keypoints(obj, num_keypoints):
    """(K, 3) x, y, v of an annotation; zeros when it has no keypoints."""
    values = obj.get("keypoints")
    if not values:
        return np.zeros((num_keypoints, 3), np.float32)
    if len(values) != 3 * num_keypoints:
        raise ValueError(f"{len(values) // 3} keypoints, its category names {num_keypoints}")
    return np.asarray(values, np.float32).reshape(num_keypoints, 3)
