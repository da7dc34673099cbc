"""Sim10k (PASCAL VOC layout: `Annotations/*.xml`, `JPEGImages/`) -> COCO json of its cars
(`sim10k/car_instances.json`, the DA fork's `sim10k_cocostyle`).

The fork ships no Sim10k converter; this one writes its cars the way the fork reads VOC boxes
(`data/datasets/voc.py`: 1-based pixel coordinates minus 1) in the layout of its KITTI converter: one image
per xml file (sorted; ids from 0; size from `<size>`, else from the image), objects named `car` only,
category 1 'car', `bbox` [xmin - 1, ymin - 1, xmax - xmin + 1, ymax - ymin + 1], `area` its w x h,
`segmentation` [], `iscrowd` 0. Objects marked `<difficult>1` are left out, as the fork trains without them.
"""

import pathlib
import xml.etree.ElementTree as ElementTree

from tqdm import tqdm

from tfdet.data.convert.image_size import image_size
from tfdet.data.convert.output import ConversionError

CATEGORY = {"id": 1, "name": "car"}
_COORDINATES = ("xmin", "ymin", "xmax", "ymax")


def _number(element, tag, path):
    text = element.findtext(tag)
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ConversionError(f"{path}: <{tag}> is {text!r}, not a number") from None


def _read_xml(path, image_dir):
    """(file name, width, height, [[xmin, ymin, xmax, ymax] of its non-difficult cars]) of one VOC xml."""
    try:
        root = ElementTree.parse(path).getroot()
    except (ElementTree.ParseError, OSError) as error:
        raise ConversionError(f"{path}: not a VOC annotation ({error})") from None
    file_name = (root.findtext("filename") or f"{path.stem}.jpg").strip()
    size = root.find("size")
    if size is not None and size.findtext("width") and size.findtext("height"):
        width, height = int(_number(size, "width", path)), int(_number(size, "height", path))
    else:
        width, height = image_size(image_dir / file_name)
    boxes = []
    for item in root.iter("object"):
        difficult = (item.findtext("difficult") or "0").strip() == "1"
        if (item.findtext("name") or "").strip() != CATEGORY["name"] or difficult:
            continue
        box = item.find("bndbox")
        if box is None:
            raise ConversionError(f"{path}: an object without <bndbox>")
        boxes.append([_number(box, tag, path) for tag in _COORDINATES])
    return file_name, width, height, boxes


def convert_sim10k(sim10k_dir):
    """The COCO dict of `sim10k_dir` (holding Annotations and JPEGImages)."""
    annotation_dir, image_dir = pathlib.Path(sim10k_dir) / "Annotations", pathlib.Path(sim10k_dir) / "JPEGImages"
    files = sorted(annotation_dir.glob("*.xml"))
    if not files:
        raise ConversionError(f"{annotation_dir}: no VOC .xml annotation files")
    images, annotations = [], []
    for image_id, path in enumerate(tqdm(files, desc="Sim10k", unit="image", disable=None)):
        file_name, width, height, boxes = _read_xml(path, image_dir)
        images.append({"id": image_id, "width": width, "height": height, "file_name": file_name})
        for xmin, ymin, xmax, ymax in boxes:
            box = [xmin - 1, ymin - 1, xmax - xmin + 1, ymax - ymin + 1]
            annotations.append({
                "id": len(annotations), "image_id": image_id, "segmentation": [], "category_id": CATEGORY["id"],
                "iscrowd": 0, "bbox": box, "area": box[2] * box[3],
            })  # fmt: skip
    return {"images": images, "categories": [dict(CATEGORY)], "annotations": annotations}
