"""Named datasets and where their files live (the counterpart of Detectron's `dataset_catalog.py`).

Paths are Detectron's, relative to the data root `$TFDET_DATA_DIR` (default `~/.cache/tfdet/datasets`):
COCO images in `coco/coco_train2014`, `coco/coco_val2014`, annotations in
`coco/annotations/instances_<split>.json` and `person_keypoints_<split>.json`. Detectron's catalog
has no 2017 train/val entries; ours follow its pattern (`coco/coco_train2017`,
`coco/annotations/instances_train2017.json`). `shapes_train` and `shapes_val` are the synthetic
dataset (`tfdet.data.shapes`), generated on first use into `$TFDET_DATA_DIR/shapes`;
`shapes_target_train` and `shapes_target_val` are its "foggy" rendering, the target domain of the
domain-adaptation demo (TRAIN.TARGET_DATASETS, and a labelled split to measure on).
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


def dataset_names():
    """Every name `get_dataset` knows, sorted."""
    return sorted([*_COCO_DATASETS, *shapes.SPLITS])


def get_dataset(name):
    """The DatasetSpec of a named dataset; shapes splits are generated when first asked for.

    Unknown names raise KeyError naming the closest known ones; missing files raise
    FileNotFoundError naming the missing path and the environment variable that sets the root.
    """
    if name in shapes.SPLITS:
        annotation_file, image_dir = shapes.ensure_split(name)
        return DatasetSpec(name, image_dir, annotation_file)
    if name not in _COCO_DATASETS:
        close = difflib.get_close_matches(name, dataset_names(), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(dataset_names())}"
        raise KeyError(f"unknown dataset {name!r}{hint}")
    image_folder, annotation_name = _COCO_DATASETS[name]
    spec = DatasetSpec(name, data_root() / image_folder, data_root() / annotation_name)
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
