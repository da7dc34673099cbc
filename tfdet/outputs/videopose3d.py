"""VideoPose3D's 2D input: one `.npz` per video with Detectron's `im_detect_all` results of every frame.

Layout (as VideoPose3D's `inference/infer_video.py` saves it and `data/prepare_data_2d_custom.py`
reads it), one entry per frame, frames without detections included:
- `boxes[f]`: per-class list, index 0 `[]`, class j an (n_j, 5) float32 array x1, y1, x2, y2, score;
- `keypoints[f]`: None when the frame has no detection, else a per-class list whose person entry
  (class 1) lists one (4, K) float32 array per detection, rows x, y, heatmap logit, heatmap prob;
- `segments[f]`: None without masks or detections, else per-class lists of COCO RLEs;
- `metadata`: {'w': width, 'h': height} of the video.
The per-frame lists are pickled object arrays, so readers load with `allow_pickle=True`. They are
pickled so that numpy 1.x and 2.x both load them (`save_npz`): numpy 2's own pickles name
`numpy._core`, a module numpy < 1.26 lacks, and VideoPose3D's users often run numpy 1.x.
"""

import copyreg
import operator
import pickle
import zipfile

import numpy as np
import pycocotools.mask as mask_util


PERSON_CLASS = 1  # Detectron's keypoint_utils.get_person_class_index()


def detectron_frame_results(detections, num_classes):
    """(cls_boxes, cls_segms, cls_keyps) of one frame, as Detectron's im_detect_all returns them.

    `detections` is Predictor.predict's dict (sorted by score); keypoints need `keypoint_probs`. Detections are grouped by class, by descending score within a class.
    """
    classes = np.asarray(detections["classes"]).reshape(-1)
    order = np.argsort(classes, kind="stable")  # class by class, score order kept within each
    boxes = np.hstack(
        [
            np.asarray(detections["boxes"], np.float32).reshape(-1, 4),
            np.asarray(detections["scores"], np.float32)[:, None],
        ]
    )
    cls_boxes = [[]] + [boxes[order][classes[order] == j] for j in range(1, num_classes)]
    if len(order) == 0:
        return cls_boxes, None, None
    cls_segms = None
    if "masks" in detections:
        masks = np.asarray(detections["masks"], np.uint8)[order]
        rles = mask_util.encode(np.asfortranarray(masks.transpose(1, 2, 0)))
        cls_segms = [[] for _ in range(num_classes)]
        for j, rle in zip(classes[order], rles):
            cls_segms[j].append(rle)
    cls_keyps = None
    if "keypoints" in detections:
        if "keypoint_probs" not in detections:
            raise ValueError("VideoPose3D keypoints need 'keypoint_probs' (from Predictor.predict of a keypoint model)")
        points = np.asarray(detections["keypoints"], np.float32)[order]
        probs = np.asarray(detections["keypoint_probs"], np.float32)[order]
        rows = np.concatenate([points[:, :, :3], probs[:, :, None]], axis=2).transpose(0, 2, 1)  # (N, 4, K)
        cls_keyps = [[] for _ in range(num_classes)]
        cls_keyps[PERSON_CLASS] = [np.ascontiguousarray(row) for row in rows]  # Detectron: every box's keypoints
    return cls_boxes, cls_segms, cls_keyps


class VideoPose3DArchive:
    """Collects one video's frame results and saves them as VideoPose3D's `.npz`."""

    def __init__(self, num_classes):
        self.num_classes = num_classes
        self.boxes, self.segments, self.keypoints = [], [], []

    def add(self, detections):
        cls_boxes, cls_segms, cls_keyps = detectron_frame_results(detections, self.num_classes)
        self.boxes.append(cls_boxes)
        self.segments.append(cls_segms)
        self.keypoints.append(cls_keyps)

    def save(self, path, width, height):
        """Write the archive to `path` (give the full name, `.npz` included); numpy 1.x and 2.x load it."""
        save_npz(
            path,
            boxes=_object_array(self.boxes),
            segments=_object_array(self.segments),
            keypoints=_object_array(self.keypoints),
            metadata=np.array({"w": int(width), "h": int(height)}, dtype=object),
        )


def save_npz(path, **arrays):
    """np.savez_compressed's archive of `arrays`, any object array pickled by `PortablePickler`.

    Members are `<name>.npy` (format 1.0 headers), deflated, as numpy writes them; `np.load` of
    numpy 1.x and 2.x reads the file.
    """
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                write_npy(member, np.asanyarray(array))


def write_npy(f, array):
    """One `.npy` file of `array`: numpy's own writer, but object arrays through `PortablePickler`."""
    if not array.dtype.hasobject:
        np.lib.format.write_array(f, array)
        return
    np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
    PortablePickler(f, protocol=4).dump(array)  # as numpy 2's np.save (numpy 1.x's 3 compresses worse); Python >= 3.4


class PortablePickler(pickle.Pickler):
    """Pickles numpy arrays and scalars under names that numpy 1.x and 2.x both have.

    numpy 2 pickles an array as `numpy._core.multiarray._reconstruct(...)` and a scalar as
    `numpy._core.multiarray.scalar(...)`; numpy < 1.26 has no `numpy._core` and cannot load them.
    Here an array is `numpy.ndarray.__new__(numpy.ndarray, (0,), "b")` (the NEWOBJ opcode) given
    the array's own `__setstate__` state, as numpy's `_reconstruct` does, and a scalar is its
    0-d array indexed with `()` (`_operator.getitem`). Dtypes pickle as `numpy.dtype` already.
    """

    def reducer_override(self, obj):
        if type(obj) is np.ndarray:
            return copyreg.__newobj__, (np.ndarray, (0,), "b"), obj.__reduce__()[2]
        if isinstance(obj, np.generic):
            return operator.getitem, (np.asarray(obj), ())
        return NotImplemented


def _object_array(items):
    """1-D object array of per-frame entries (numpy would otherwise try, and fail, to make them rectangular)."""
    array = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        array[i] = item
    return array
