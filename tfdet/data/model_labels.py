"""A model's classes saved inside its weights file: what each contiguous class id means (name, dataset id).

A `.weights.h5` file of ours carries them as one JSON attribute of the HDF5 root (`tfdet_categories`), so that
they travel with the weights: `python -m tfdet.train` writes the training set's classes into
`model_final.weights.h5`, `python -m porting` writes COCO's into a ported 81-class model, and inference,
evaluation and export read them back (`tfdet.data.coco_classes.model_categories` decides what wins over
what). Keras' `load_weights` reads only its own groups and ignores the attribute.
"""

import json
import os

from tfdet.data.coco_classes import ModelCategories, model_categories

ATTRIBUTE = "tfdet_categories"


def _is_h5(path):
    return os.fspath(path).endswith(".h5") and os.path.isfile(path)


def write_model_categories(weights_path, categories):
    """Store `categories` (a ModelCategories) in the `.weights.h5` file at `weights_path`."""
    import h5py  # Keras' own dependency; imported here so that reading configs never loads it

    if categories.names is not None and len(categories.names) != len(categories.json_ids):
        raise ValueError(f"{len(categories.names)} class names for {len(categories.json_ids)} classes")
    record = {
        "names": [str(name) for name in categories.names] if categories.names else None,
        "dataset_ids": [int(i) for i in categories.json_ids],
        "skeleton": [list(map(int, edge)) for edge in categories.skeleton] if categories.skeleton else None,
    }
    with h5py.File(os.fspath(weights_path), "a") as weights_file:
        weights_file.attrs[ATTRIBUTE] = json.dumps(record)


def read_model_categories(weights_path):
    """The ModelCategories stored in a `.weights.h5` file, or None (another kind of file, or none stored).
    ValueError naming the file when the stored record is unreadable."""
    if weights_path is None or not _is_h5(weights_path):
        return None
    import h5py

    try:
        with h5py.File(os.fspath(weights_path), "r") as weights_file:
            text = weights_file.attrs.get(ATTRIBUTE)
    except OSError as error:  # h5py's own message names no file
        raise ValueError(f"{weights_path}: not a weights file ({error})") from None
    if text is None:
        return None
    try:
        record = json.loads(text)
        names = tuple(str(name) for name in record["names"]) if record["names"] else None
        json_ids = tuple(int(i) for i in record["dataset_ids"])
        skeleton = tuple((int(a), int(b)) for a, b in record["skeleton"]) if record["skeleton"] else None
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{weights_path}: unreadable {ATTRIBUTE} record ({error})") from None
    if names is not None and len(names) != len(json_ids):
        raise ValueError(f"{weights_path}: {ATTRIBUTE} has {len(names)} names for {len(json_ids)} classes")
    return ModelCategories(names, json_ids, skeleton, weights_file=os.fspath(weights_path))


def weights_categories(num_classes, keypoints_on=False, weights=None, dataset_json=None):
    """`model_categories` of a model whose weights file is `weights` (its stored classes first)."""
    return model_categories(num_classes, keypoints_on, dataset_json, read_model_categories(weights))


def roidb_categories(roidb):
    """The classes of a model trained on `roidb` (a `tfdet.data.roidb.Roidb`: its names and json category
    ids); None for records without them (a plain list, as tests pass)."""
    class_names = getattr(roidb, "class_names", None)
    if class_names is None:
        return None
    return ModelCategories(tuple(class_names), (0,) + tuple(int(i) for i in roidb.json_category_ids))
