"""Small hand-made inputs of `python -m tfdet.data.convert` in each source dataset's own layout: Cityscapes gtFine
(instanceIds png, polygons json) with its leftImg8bit and foggy images (`write_gtfine`, the objects of
VAL_OBJECTS / TRAIN_OBJECTS), KITTI labels (`write_kitti`, KITTI_LABELS), Sim10k VOC xml (`voc_xml`,
`write_sim10k`); `run` runs the command in this process."""

import contextlib
import io
import json

import cv2
import numpy as np

from tfdet.data.convert.__main__ import main

W, H = 64, 48  # every image's size
# (pixel value, (y0, y1, x0, x1) inclusive rectangles) of the val image; value // 1000 is the Cityscapes label id.
VAL_OBJECTS = [
    (26000, [(10, 19, 20, 39)]),  # car: 20 x 10 pixels
    (24001, [(30, 39, 5, 9)]),  # person: 5 x 10
    (25000, [(2, 4, 50, 52), (40, 41, 55, 60)]),  # rider in two pieces: two contours, one box over both
    (29000, [(30, 35, 30, 35)]),  # caravan: not one of the converter's 8 classes
    (26, [(25, 28, 40, 47)]),  # a car group (value < 1000): never an object
    (33000, [(45, 45, 60, 60)]),  # bicycle of one pixel: a contour of one point, skipped by the converter
]
TRAIN_OBJECTS = [(26001, [(5, 30, 10, 50)])]


def write_gtfine(root):
    """gtFine val/aachen and train/bochum with one image each, their leftImg8bit and foggy images."""
    for split, city, name, objects in (
        ("val", "aachen", "aachen_000000_000019", VAL_OBJECTS),
        ("train", "bochum", "bochum_000000_000313", TRAIN_OBJECTS),
    ):
        folder = root / "gtFine" / split / city
        folder.mkdir(parents=True)
        ids = np.full((H, W), 7, np.uint16)  # road
        for value, rectangles in objects:
            for y0, y1, x0, x1 in rectangles:
                ids[y0 : y1 + 1, x0 : x1 + 1] = value
        cv2.imwrite(str(folder / f"{name}_gtFine_instanceIds.png"), ids)
        # The polygons file gives the size; its polygons are not what the converter reads (the png is).
        polygons = {"imgHeight": H, "imgWidth": W, "objects": [{"label": "car", "polygon": [[0, 0], [1, 1], [0, 1]]}]}
        (folder / f"{name}_gtFine_polygons.json").write_text(json.dumps(polygons))
        for images, suffix in (("leftImg8bit", "leftImg8bit"), ("leftImg8bit_foggy", "leftImg8bit_foggy_beta_0.02")):
            (root / images / split / city).mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(root / images / split / city / f"{name}_{suffix}.png"), np.zeros((H, W, 3), np.uint8))
    return root


def run(*argv):
    """(exit status, stderr) of `python -m tfdet.data.convert ...` in this process."""
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        status = main([str(part) for part in argv])
    return status, errors.getvalue()


def write_kitti(root, label_text):
    (root / "training" / "image_2").mkdir(parents=True)
    (root / "training" / "label_2").mkdir(parents=True)
    cv2.imwrite(str(root / "training" / "image_2" / "000001.png"), np.zeros((37, 124, 3), np.uint8))
    cv2.imwrite(str(root / "training" / "image_2" / "000000.png"), np.zeros((30, 100, 3), np.uint8))
    (root / "training" / "label_2" / "000000.txt").write_text(label_text)  # 000001 has no label file
    return root


KITTI_LABELS = (
    "Car 0.00 0 -1.58 587.01 173.33 614.12 200.12 1.65 1.67 3.64 -0.65 1.71 46.70 -1.59\n"
    "Van 0.00 0 -1.62 609.00 162.70 641.00 199.90 2.10 1.90 5.20 0.20 1.70 48.10 -1.60\n"
    "DontCare -1 -1 -10 500.00 170.00 580.00 190.00 -1 -1 -1 -1000 -1000 -1000 -10\n"
    "\n"
    "Car 0.88 3 -0.69 0.00 192.37 402.31 374.00 1.60 1.57 3.23 -2.70 1.74 3.68 -1.29\n"
)


def voc_xml(objects, size=(1914, 1052)):
    parts = [f"<annotation><filename>3384645.jpg</filename><size><width>{size[0]}</width><height>{size[1]}</height>"
             "<depth>3</depth></size>"]  # fmt: skip
    for name, difficult, (xmin, ymin, xmax, ymax) in objects:
        parts.append(f"<object><name>{name}</name><difficult>{difficult}</difficult><bndbox><xmin>{xmin}</xmin>"
                     f"<ymin>{ymin}</ymin><xmax>{xmax}</xmax><ymax>{ymax}</ymax></bndbox></object>")  # fmt: skip
    return "".join(parts) + "</annotation>"


def write_sim10k(root, xml_text):
    (root / "Annotations").mkdir(parents=True)
    (root / "JPEGImages").mkdir()
    (root / "Annotations" / "3384645.xml").write_text(xml_text)
    cv2.imwrite(str(root / "JPEGImages" / "3384645.jpg"), np.zeros((8, 8, 3), np.uint8))
    return root
