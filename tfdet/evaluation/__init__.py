"""COCO evaluation with pycocotools (bbox, segm, keypoints) and Detectron-style result writers.

The names load lazily, so that `tfdet.evaluation.results` (NumPy only) is usable where pycocotools is not
installed (`savedmodel.run`, the runner that needs only a runtime, NumPy and OpenCV).
"""

import importlib

_HOMES = {
    "evaluate_results": "coco_evaluator",
    "load_coco": "coco_evaluator",
    "summary_line": "coco_evaluator",
    "write_metrics": "coco_evaluator",
    "contiguous_to_json_ids": "results",
    "detections_to_coco": "results",
    "read_results": "results",
    "split_by_iou_type": "results",
    "write_results": "results",
}

__all__ = sorted(_HOMES)


def __getattr__(name):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
