"""COCO's class names in Detectron's contiguous order: index i is the name of class id i of an 81-class model.

Index 0 is the background, 1..80 are COCO's 80 categories sorted by their COCO category id (the order
Detectron's `dummy_datasets.get_coco_dataset` and its json datasets use). The keypoint names and
skeleton live in `tfdet.data.keypoint_names`. `model_categories` tells what a model's class ids
mean (names for pictures, category ids for COCO json).
"""

import json
from dataclasses import dataclass, field, replace

from tfdet.data.keypoint_names import COCO_KEYPOINTS

COCO_CLASSES = (
    "__background__",
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange",
    "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant",
    "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors",
    "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip

# COCO's category ids of classes 1..80 (the ids are not contiguous: 12, 26, 29, ... are unused).
COCO_CATEGORY_IDS = (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28,
    31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55,
    56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84,
    85, 86, 87, 88, 89, 90,
)  # fmt: skip


@dataclass(frozen=True)
class ModelCategories:
    """What a model's contiguous class ids mean: `names[c]` (None: show ids) and `json_ids[c]` of class c;
    `skeleton`: the keypoint edges as 0-based index pairs (None: COCO's person skeleton for 17 keypoints);
    `weights_file`: the weights file they were read from (None: not stored with the weights; a default or a
    dataset json's)."""

    names: tuple | None
    json_ids: tuple
    skeleton: tuple | None = None
    weights_file: str | None = field(default=None, compare=False)

    def display_names(self):
        """The name of every class id (index 0 the background): its name, or `id<c>` when none is known
        (Detectron's `get_class_string`)."""
        if self.names:
            return tuple(self.names)
        return ("__background__",) + tuple(f"id{c}" for c in range(1, len(self.json_ids)))

    def coco_categories(self):
        """The `categories` list of a COCO json for these classes."""
        names = self.display_names()
        return [{"id": int(self.json_ids[c]), "name": names[c]} for c in range(1, len(self.json_ids))]

    def describe(self, limit=4):
        """'3 classes: circle=5, square=2, triangle=9' (name=dataset id; the first `limit`, then '...')."""
        names = self.display_names()
        pairs = [f"{names[c]}={self.json_ids[c]}" for c in range(1, len(self.json_ids))]
        shown = ", ".join(pairs[:limit]) + (", ..." if len(pairs) > limit else "")
        return f"{len(pairs)} classes: {shown}"


def model_categories(num_classes, keypoints_on=False, dataset_json=None, stored=None):
    """What the class ids of a model with `num_classes` mean, decided here for every command (one precedence):

    1. the classes stored with its weights (`stored`, from `tfdet.data.model_labels.read_model_categories`, or
       a Predictor's `categories`; only classes read from a weights file count): a `dataset_json` given as
       well must agree with them (same names and dataset ids, class by class) and may only add a skeleton;
       a json that disagrees is a ValueError naming both, never a silent relabelling;
    2. else the categories of `dataset_json` (a COCO json file or its loaded dict; Detectron's order: as the
       json lists them, its `getCatIds()`);
    3. else COCO's for 81 classes, 'person' for a 2-class keypoint model;
    4. else the contiguous ids themselves (no names).
    ValueError on a bad json, or on classes whose count is not the model's.
    """
    if stored is not None and stored.weights_file is None:
        stored = None  # a default or a json's classes: not what the weights carry
    if stored is not None and len(stored.json_ids) != num_classes:
        raise ValueError(
            f"{stored.weights_file} stores {len(stored.json_ids) - 1} classes; the model has {num_classes - 1} "
            "(NUM_CLASSES - 1)"
        )
    from_json = _json_categories(dataset_json, num_classes) if dataset_json not in (None, "") else None
    if stored is not None:
        if from_json is None:
            return stored
        _check_agreement(stored, from_json, dataset_json)
        return replace(stored, names=stored.names or from_json.names, skeleton=stored.skeleton or from_json.skeleton)
    if from_json is not None:
        return from_json
    if num_classes == len(COCO_CLASSES):
        return ModelCategories(COCO_CLASSES, (0,) + COCO_CATEGORY_IDS)
    if num_classes == 2 and keypoints_on:
        return ModelCategories(COCO_CLASSES[:2], (0, COCO_CATEGORY_IDS[0]))
    return ModelCategories(None, tuple(range(num_classes)))


def _json_categories(dataset_json, num_classes):
    """The ModelCategories of a COCO json's categories (a file, read as UTF-8 whatever the locale, or its loaded
    dict), checked to number NUM_CLASSES - 1."""
    try:
        if isinstance(dataset_json, dict):
            categories = list(dataset_json["categories"])  # json order, as Detectron
        else:
            with open(dataset_json, encoding="utf-8") as f:  # as training reads it (coco_json.load_json)
                categories = list(json.load(f)["categories"])
        names = ("__background__",) + tuple(str(c["name"]) for c in categories)
        json_ids = (0,) + tuple(int(c["id"]) for c in categories)
    except (OSError, ValueError, KeyError, TypeError) as error:
        label = _json_label(dataset_json)
        raise ValueError(f"{label}: not a COCO annotation json with categories ({error})") from None
    if len(categories) != num_classes - 1:
        raise ValueError(
            f"{_json_label(dataset_json)} has {len(categories)} categories; the model has {num_classes - 1} "
            "(NUM_CLASSES - 1)"
        )
    return ModelCategories(names, json_ids, _json_skeleton(categories))


def _check_agreement(stored, from_json, dataset_json):
    """ValueError naming both when a dataset json's categories are not the classes the weights store."""
    for c in range(1, len(stored.json_ids)):
        same_name = stored.names is None or stored.names[c] == from_json.names[c]
        if not same_name or stored.json_ids[c] != from_json.json_ids[c]:
            stored_name, json_name = stored.display_names()[c], from_json.names[c]
            raise ValueError(
                f"the model's classes ({stored.weights_file}: {stored.describe()}) are not the categories of "
                f"{_json_label(dataset_json)} ({from_json.describe()}): class {c} is "
                f"{stored_name}={stored.json_ids[c]} in the model, {json_name}={from_json.json_ids[c]} in the json"
            )


def _json_label(dataset_json):
    """How messages name a dataset json: its path, or 'the dataset' for a loaded dict."""
    return "the dataset" if isinstance(dataset_json, dict) else str(dataset_json)


def _json_skeleton(categories):
    """The first keypoint category's COCO `skeleton` (1-based pairs) as 0-based pairs; None when absent or
    when the keypoints are COCO's person keypoints (drawn with Detectron's own skeleton)."""
    category = next((c for c in categories if c.get("skeleton")), None)
    if category is None or tuple(category.get("keypoints", ())) == COCO_KEYPOINTS:
        return None
    return tuple((int(a) - 1, int(b) - 1) for a, b in category["skeleton"])
