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

Datasets of one's own (`tfdet.data.user_datasets`): `coco:ANNOTATIONS.json:IMAGE_DIR` names any COCO-format
dataset (paths relative to the working directory), `register_coco_dataset` names one for this process and
`$TFDET_DATA_DIR/datasets.yaml` for every process. Those names may not shadow the built-in ones above.
"""

import difflib
import pathlib
import re
from dataclasses import dataclass

from tfdet.data import shapes, user_datasets
from tfdet.data.coco_json import checked_json
from tfdet.data.data_root import DATA_DIR_ENV, data_root


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset's name, image folder and COCO annotation file."""

    name: str
    image_dir: pathlib.Path
    annotation_file: pathlib.Path

    @property
    def file_stem(self):
        """The name as a file name part (`results_<stem>.json`): characters other than letters, digits, '_',
        '.', '-' become '_' (a `coco:` name holds ':' and '/')."""
        return re.sub(r"[^A-Za-z0-9_.-]", "_", self.name)


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


def builtin_dataset_names():
    """The names tfdet defines (Detectron's, the DA fork's, the shapes splits), sorted."""
    return sorted([*_FILE_DATASETS, *shapes.SPLITS])


def dataset_names():
    """Every name `get_dataset` knows, sorted: the built-in ones, those registered with
    `register_coco_dataset` and those of `$TFDET_DATA_DIR/datasets.yaml` (besides any `coco:` name)."""
    builtin = builtin_dataset_names()
    user = {*user_datasets.registered_datasets(), *user_datasets.catalog_file_datasets(builtin)}
    return sorted({*builtin, *user})


def register_coco_dataset(name, annotations, image_dir):
    """Name a COCO-format dataset (annotation json, image folder; relative paths are taken relative to the
    working directory now) for this process: TRAIN.DATASETS, TEST.DATASETS and `get_dataset` then accept it.
    A built-in name is refused (ValueError); registering a name again with other paths too."""
    user_datasets.check_name(name, "register_coco_dataset")
    if name in builtin_dataset_names():
        raise ValueError(f"register_coco_dataset: {name!r} is the name of a built-in dataset; choose another name")
    user_datasets.register(name, annotations, image_dir)


def dataset_paths(name, root=None):
    """The DatasetSpec of a dataset stored as files (not the generated shapes splits) under `root` (default: the
    data root), whether or not they exist yet: where the converters write it. KeyError for other names."""
    image_folder, annotation_name = _FILE_DATASETS[name]
    root = data_root() if root is None else pathlib.Path(root)
    return DatasetSpec(name, root / image_folder, root / annotation_name)


def get_dataset(name):
    """The DatasetSpec of a named dataset; shapes splits are generated when first asked for.

    `coco:ANNOTATIONS.json:IMAGE_DIR`, registered and datasets.yaml names are one's own datasets. Unknown
    names raise KeyError naming the closest known ones; missing files raise FileNotFoundError naming the
    missing path (and, for built-in names, the environment variable that sets the root); a malformed name or
    catalog file raises ValueError.
    """
    if user_datasets.is_coco_name(name):
        annotation_file, image_dir = user_datasets.coco_name_paths(name)
        return _existing(DatasetSpec(name, image_dir, annotation_file), name)
    user_paths = user_datasets.user_dataset_paths(name, builtin_dataset_names())  # checks the catalog file
    if user_paths is not None:
        annotation_file, image_dir = user_paths
        return _existing(DatasetSpec(name, image_dir, annotation_file), name)
    if name in shapes.SPLITS:
        annotation_file, image_dir = shapes.ensure_split(name)
        return DatasetSpec(name, image_dir, annotation_file)
    if name not in _FILE_DATASETS:
        known = dataset_names()
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(known)}"
        raise KeyError(
            f"unknown dataset {name!r}{hint} (a COCO-format dataset of one's own: "
            f"coco:ANNOTATIONS.json:IMAGE_DIR, or an entry of {user_datasets.catalog_file()})"
        )
    spec = dataset_paths(name)
    for path in (spec.annotation_file, spec.image_dir):
        if not path.exists():
            raise FileNotFoundError(
                f"dataset {name!r}: {path} not found (the data root is ${DATA_DIR_ENV}, now {data_root()})"
            )
    return spec


def _existing(spec, name):
    """`spec` once its annotation file and image folder exist; FileNotFoundError naming the missing one."""
    if not spec.annotation_file.is_file():
        raise FileNotFoundError(f"dataset {name!r}: annotation file {spec.annotation_file} not found")
    if not spec.image_dir.is_dir():
        raise FileNotFoundError(f"dataset {name!r}: image folder {spec.image_dir} not found")
    return spec


def check_evaluation_dataset(spec, need_images=True):
    """`spec` once its annotation json is checked (`tfdet.data.coco_json`: malformed entries, unknown
    categories, boxes outside their image) and, when `need_images`, every image it lists is in its folder;
    FileNotFoundError / ValueError in one line naming the file and the entry otherwise."""
    checked_json(spec.annotation_file, spec.image_dir if need_images else None)
    return spec


def configured_datasets(names, config_key, need):
    """The DatasetSpecs of `names`, the datasets the config key `config_key` lists (the training source or
    target); ValueError "<need>: set <config_key>" when it lists none."""
    if not names:
        raise ValueError(f"{need}: set {config_key}")
    return [get_dataset(name) for name in names]
