"""Named datasets and where their files live (the counterpart of Detectron's `dataset_catalog.py`).

Paths are Detectron's, relative to the data root `$TFDET_DATA_DIR` (default `~/.cache/tfdet/datasets`):
COCO images in `coco/coco_train2014`, `coco/coco_val2014`, annotations in
`coco/annotations/instances_<split>.json` and `person_keypoints_<split>.json`. Detectron's catalog
has no 2017 train/val entries; ours follow its pattern (`coco/coco_train2017`,
`coco/annotations/instances_train2017.json`). `shapes_train` and `shapes_val` are the synthetic
dataset (`tfdet.data.shapes`), generated on first use into `$TFDET_DATA_DIR/shapes`;
`shapes_target_train` and `shapes_target_val` are its "foggy" rendering, the target domain of the
domain-adaptation demo (TRAIN.TARGET_DATASETS, and a labelled split to measure on).

The DA fork's datasets (krumo/Domain-Adaptive-Faster-RCNN-PyTorch, `config/paths_catalog.py`) keep its
names and folders: `cityscapes/images` (every image in one folder) with
`cityscapes/annotations/instancesonly_filtered_gtFine_<split>.json` (8 classes) and
`caronly_filtered_gtFine_<split>.json` (car), `foggy_cityscapes/...` likewise, `sim10k/JPEGImages` with
`sim10k/car_instances.json`, `kitti/training/image_2` with `kitti/annotations/caronly_training.json`; the
converters of `python -m tfdet.data.convert` write them.
"""

import difflib
import pathlib
from dataclasses import dataclass

from tfdet.data import shapes
from tfdet.data.data_root import DATA_DIR_ENV, data_root


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset's name, image folder and COCO annotation file."""

    name: str
    image_dir: pathlib.Path
    annotation_file: pathlib.Path


def _coco(image_folder, annotation_name):
    return (f"coco/{image_folder}", f"coco/annotations/{annotation_name}.json")


# name -> (image folder, annotation file), relative to the data root.
_COCO_DATASETS = {
    "coco_2014_train": _coco("coco_train2014", "instances_train2014"),
    "coco_2014_val": _coco("coco_val2014", "instances_val2014"),
    "coco_2014_minival": _coco("coco_val2014", "instances_minival2014"),
    "coco_2014_valminusminival": _coco("coco_val2014", "instances_valminusminival2014"),
    "coco_2017_train": _coco("coco_train2017", "instances_train2017"),
    "coco_2017_val": _coco("coco_val2017", "instances_val2017"),
    "keypoints_coco_2014_train": _coco("coco_train2014", "person_keypoints_train2014"),
    "keypoints_coco_2014_val": _coco("coco_val2014", "person_keypoints_val2014"),
    "keypoints_coco_2014_minival": _coco("coco_val2014", "person_keypoints_minival2014"),
    "keypoints_coco_2014_valminusminival": _coco("coco_val2014", "person_keypoints_valminusminival2014"),
    "keypoints_coco_2017_train": _coco("coco_train2017", "person_keypoints_train2017"),
    "keypoints_coco_2017_val": _coco("coco_val2017", "person_keypoints_val2017"),
}


def _cityscapes(folder, annotation_name):
    return (f"{folder}/images", f"{folder}/annotations/{annotation_name}.json")


# The DA fork's datasets: name -> (image folder, annotation file), relative to the data root.
_DA_FORK_DATASETS = {
    **{
        f"cityscapes_fine_instanceonly_seg_{split}_cocostyle": _cityscapes(
            "cityscapes", f"instancesonly_filtered_gtFine_{split}"
        )
        for split in ("train", "val", "test")
    },
    **{
        f"foggy_cityscapes_fine_instanceonly_seg_{split}_cocostyle": _cityscapes(
            "foggy_cityscapes", f"foggy_instancesonly_filtered_gtFine_{split}"
        )
        for split in ("train", "val")
    },
    **{
        f"cityscapes_car_{split}_cocostyle": _cityscapes("cityscapes", f"caronly_filtered_gtFine_{split}")
        for split in ("train", "val")
    },
    "sim10k_cocostyle": ("sim10k/JPEGImages", "sim10k/car_instances.json"),
    "kitti_cocostyle": ("kitti/training/image_2", "kitti/annotations/caronly_training.json"),
}
_FILE_DATASETS = {**_COCO_DATASETS, **_DA_FORK_DATASETS}


def dataset_names():
    """Every name `get_dataset` knows, sorted."""
    return sorted([*_FILE_DATASETS, *shapes.SPLITS])


def dataset_paths(name, root=None):
    """The DatasetSpec of a dataset stored as files (not the generated shapes splits) under `root` (default: the
    data root), whether or not they exist yet: where the converters write it. KeyError for other names."""
    image_folder, annotation_name = _FILE_DATASETS[name]
    root = data_root() if root is None else pathlib.Path(root)
    return DatasetSpec(name, root / image_folder, root / annotation_name)


def get_dataset(name):
    """The DatasetSpec of a named dataset; shapes splits are generated when first asked for.

    Unknown names raise KeyError naming the closest known ones; missing files raise
    FileNotFoundError naming the missing path and the environment variable that sets the root.
    """
    if name in shapes.SPLITS:
        annotation_file, image_dir = shapes.ensure_split(name)
        return DatasetSpec(name, image_dir, annotation_file)
    if name not in _FILE_DATASETS:
        close = difflib.get_close_matches(name, dataset_names(), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(dataset_names())}"
        raise KeyError(f"unknown dataset {name!r}{hint}")
    spec = dataset_paths(name)
    for path in (spec.annotation_file, spec.image_dir):
        if not path.exists():
            raise FileNotFoundError(
                f"dataset {name!r}: {path} not found (the data root is ${DATA_DIR_ENV}, now {data_root()})"
            )
    return spec


def configured_datasets(names, config_key, need):
    """The DatasetSpecs of `names`, the datasets the config key `config_key` lists (the training source or
    target); ValueError "<need>: set <config_key>" when it lists none."""
    if not names:
        raise ValueError(f"{need}: set {config_key}")
    return [get_dataset(name) for name in names]
