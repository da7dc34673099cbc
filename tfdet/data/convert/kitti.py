"""KITTI object detection (`training/image_2`, `training/label_2`) -> COCO json of its cars, as the DA fork's
`tools/kitti/convert_kitti_to_coco.py` writes it (`kitti/annotations/caronly_training.json`).

Every `.png` of `image_2` is an image (sorted by name; ids from 0), sized from its header, with
`seg_file_name` its label file's name. Each label line is KITTI's `type truncated occluded alpha x1 y1 x2 y2
h w l x y z ry` (whitespace-separated); lines of type `Car` only (not Van, not DontCare) become annotations:
category 1 'Car', `bbox` [x1, y1, x2 - x1 + 1, y2 - y1 + 1] (the "+1" widths), `area` its w x h,
`segmentation` [], `iscrowd` 0. An image without a label file has no annotation, as in the converter.
"""

import pathlib

from tqdm import tqdm

from tfdet.data.convert.image_size import image_size
from tfdet.data.convert.output import ConversionError

CATEGORY = {"id": 1, "name": "Car"}
_LABEL_FIELDS = 15  # KITTI's training labels (result files add a score)


def _car_boxes(label_path):
    """[x1, y1, x2, y2] of the `Car` lines of a label file."""
    boxes = []
    for number, line in enumerate(label_path.read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0] != CATEGORY["name"]:
            continue
        try:
            if len(fields) < _LABEL_FIELDS:
                raise ValueError(f"{len(fields)} fields, KITTI labels have {_LABEL_FIELDS}")
            boxes.append([float(value) for value in fields[4:8]])
        except ValueError as error:
            raise ConversionError(f"{label_path}, line {number}: not a KITTI label ({error})") from None
    return boxes


def convert_kitti(training_dir):
    """The COCO dict of `training_dir` (holding image_2 and label_2)."""
    image_dir, label_dir = pathlib.Path(training_dir) / "image_2", pathlib.Path(training_dir) / "label_2"
    if not image_dir.is_dir():
        raise ConversionError(f"{image_dir}: no such folder (expected KITTI's training/image_2)")
    images, annotations = [], []
    for image_id, path in enumerate(tqdm(sorted(image_dir.glob("*.png")), desc="KITTI", unit="image", disable=None)):
        width, height = image_size(path)
        label_path = label_dir / f"{path.stem}.txt"
        images.append({"id": image_id, "width": width, "height": height, "file_name": path.name,
                       "seg_file_name": label_path.name})  # fmt: skip
        for x1, y1, x2, y2 in _car_boxes(label_path) if label_path.is_file() else []:
            box = [x1, y1, x2 - x1 + 1, y2 - y1 + 1]
            annotations.append({
                "id": len(annotations), "image_id": image_id, "segmentation": [], "category_id": CATEGORY["id"],
                "iscrowd": 0, "bbox": box, "area": box[2] * box[3],
            })  # fmt: skip
    return {"images": images, "categories": [dict(CATEGORY)], "annotations": annotations}
