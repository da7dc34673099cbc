"""Datasets the user names without editing tfdet: `coco:ANNOTATIONS.json:IMAGE_DIR` names, names registered
in this process (`register`), and names listed in the catalog file `$TFDET_DATA_DIR/datasets.yaml`.

The catalog file maps each name to its COCO annotation json and image folder:

    my_train:
      annotations: my/annotations/train.json   # relative paths are relative to the file's folder,
      images: my/images/train                  # the data root; absolute and ~ paths are kept
    my_val: {annotations: /data/val.json, images: /data/val}

A name is letters, digits, '_', '.' and '-' (no ':', which joins Detectron's old dataset lists). This module
only reads names and paths; `tfdet.data.catalog` refuses names that would shadow its built-in ones.
"""

import os
import pathlib
import re

from tfdet.data.data_root import data_root

COCO_PREFIX = "coco:"
CATALOG_FILE_NAME = "datasets.yaml"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_ENTRY_KEYS = ("annotations", "images")

# name -> (annotation json, image folder), absolute: the names register() added in this process.
_REGISTERED = {}


def is_coco_name(name):
    """Whether `name` is a `coco:ANNOTATIONS.json:IMAGE_DIR` name."""
    return isinstance(name, str) and name.startswith(COCO_PREFIX)


def coco_name_paths(name):
    """(annotation json, image folder) of a `coco:ANNOTATIONS.json:IMAGE_DIR` name, relative to the working
    directory as written; ValueError naming the name when it is not of that form."""
    parts = name[len(COCO_PREFIX) :].split(":")
    if len(parts) != 2 or not all(parts):
        raise ValueError(
            f"dataset name {name!r}: write coco:ANNOTATIONS.json:IMAGE_DIR (two paths without ':')"
        )
    return pathlib.Path(parts[0]).expanduser(), pathlib.Path(parts[1]).expanduser()


def check_name(name, where):
    """ValueError naming `where` unless `name` is a valid dataset name of one's own."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"{where}: dataset name {name!r} must be letters, digits, '_', '.' or '-' (starting with a letter "
            "or digit)"
        )


def register(name, annotations, image_dir):
    """Add `name` for this process (paths relative to the working directory now). Registering a name again
    with the same paths changes nothing; with other paths it is a ValueError."""
    check_name(name, "register_coco_dataset")
    paths = (_absolute(pathlib.Path(annotations).expanduser()), _absolute(pathlib.Path(image_dir).expanduser()))
    if _REGISTERED.get(name, paths) != paths:
        old_annotations, old_images = _REGISTERED[name]
        raise ValueError(
            f"register_coco_dataset: {name!r} is already registered with {old_annotations} and {old_images}"
        )
    _REGISTERED[name] = paths


def _absolute(path):
    return pathlib.Path(os.path.abspath(path))


def unregister(name):
    """Forget a name register() added (KeyError when there is none)."""
    del _REGISTERED[name]


def registered_datasets():
    """{name: (annotation json, image folder)} registered in this process."""
    return dict(_REGISTERED)


def catalog_file():
    """The catalog file: `$TFDET_DATA_DIR/datasets.yaml`."""
    return data_root() / CATALOG_FILE_NAME


def catalog_file_datasets(reserved_names=()):
    """{name: (annotation json, image folder)} of the catalog file ({} when there is none).

    ValueError in one line naming the file (and the entry) when the file is not YAML, is not a mapping of
    names to {annotations, images}, or names one of `reserved_names` (the built-in datasets)."""
    import yaml  # only when a catalog file is read

    path = catalog_file()
    if not path.is_file():
        return {}
    try:
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read the dataset catalog ({error})") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise ValueError(f"{path}: not valid YAML{where} ({problem})") from None
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise ValueError(
            f"{path}: the dataset catalog must map names to {{annotations: ..., images: ...}}, "
            f"got {type(content).__name__}"
        )
    reserved = set(reserved_names)
    return {name: _catalog_entry(path, name, entry, reserved) for name, entry in content.items()}


def _catalog_entry(path, name, entry, reserved):
    """(annotation json, image folder) of one catalog file entry, checked."""
    check_name(name, f"{path}: entry {name!r}")
    if name in reserved:
        raise ValueError(f"{path}: entry {name!r} is the name of a built-in dataset; choose another name")
    if not isinstance(entry, dict) or set(entry) != set(_ENTRY_KEYS):
        given = sorted(map(str, entry)) if isinstance(entry, dict) else type(entry).__name__
        raise ValueError(f"{path}: entry {name!r} must hold exactly annotations and images, got {given}")
    for key in _ENTRY_KEYS:
        if not isinstance(entry[key], str) or not entry[key]:
            raise ValueError(f"{path}: entry {name!r}: {key} must be a path, got {entry[key]!r}")
    return tuple(_absolute(path.parent / pathlib.Path(entry[key]).expanduser()) for key in _ENTRY_KEYS)


def user_dataset_paths(name, reserved_names=()):
    """(annotation json, image folder) of a registered or catalog-file name, or None. A name both registered
    and in the catalog file with other paths is a ValueError naming both."""
    registered = _REGISTERED.get(name)
    listed = catalog_file_datasets(reserved_names).get(name)
    if registered and listed and registered != listed:
        raise ValueError(
            f"dataset {name!r} is registered with register_coco_dataset ({registered[0]}, {registered[1]}) "
            f"and listed in {catalog_file()} ({listed[0]}, {listed[1]}); rename one"
        )
    return registered or listed
