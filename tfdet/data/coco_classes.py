"""COCO's class names in Detectron's contiguous order: index i is the name of class id i of an 81-class model.

Index 0 is the background, 1..80 are COCO's 80 categories sorted by their COCO category id (the order
Detectron's `dummy_datasets.get_coco_dataset` and its json datasets use). The keypoint names and
skeleton live in `tfdet.modeling.roi_heads.keypoint_names`. `model_categories` tells what a model's class ids
mean (names for pictures, category ids for COCO json).
"""

import json
from dataclasses import dataclass

from tfdet.modeling.roi_heads.keypoint_names import COCO_KEYPOINTS

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
    `skeleton`: the keypoint edges as 0-based index pairs (None: COCO's person skeleton for 17 keypoints)."""

    names: tuple | None
    json_ids: tuple
    skeleton: tuple | None = None

    def coco_categories(self):
        """The `categories` list of a COCO json for these classes."""
        return [
            {"id": int(self.json_ids[c]), "name": self.names[c] if self.names else f"id{c}"}
            for c in range(1, len(self.json_ids))
        ]


def model_categories(num_classes, keypoints_on=False, dataset_json=None):
    """Categories of a model: a dataset json's (Detectron's order: sorted by id), COCO's for 81 classes,
    'person' for a 2-class keypoint model, else the contiguous ids themselves. ValueError on a bad json."""
    if dataset_json:
        try:
            with open(dataset_json) as f:
                categories = sorted(json.load(f)["categories"], key=lambda c: c["id"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{dataset_json}: not a COCO annotation json with categories ({error})") from None
        if len(categories) != num_classes - 1:
            raise ValueError(
                f"{dataset_json} has {len(categories)} categories; the model has {num_classes - 1} (NUM_CLASSES - 1)"
            )
        names = ("__background__",) + tuple(c["name"] for c in categories)
        return ModelCategories(names, (0,) + tuple(c["id"] for c in categories), _json_skeleton(categories))
    if num_classes == len(COCO_CLASSES):
        return ModelCategories(COCO_CLASSES, (0,) + COCO_CATEGORY_IDS)
    if num_classes == 2 and keypoints_on:
        return ModelCategories(COCO_CLASSES[:2], (0, COCO_CATEGORY_IDS[0]))
    return ModelCategories(None, tuple(range(num_classes)))


def _json_skeleton(categories):
    """The first keypoint category's COCO `skeleton` (1-based pairs) as 0-based pairs; None when absent or
    when the keypoints are COCO's person keypoints (drawn with Detectron's own skeleton)."""
    category = next((c for c in categories if c.get("skeleton")), None)
    if category is None or tuple(category.get("keypoints", ())) == COCO_KEYPOINTS:
        return None
    return tuple((int(a) - 1, int(b) - 1) for a, b in category["skeleton"])
