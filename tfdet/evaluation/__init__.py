"""COCO evaluation with pycocotools (bbox, segm, keypoints) and Detectron-style result writers."""

from tfdet.evaluation.coco_evaluator import evaluate_results, load_coco, summary_line, write_metrics
from tfdet.evaluation.results import (
    contiguous_to_json_ids,
    detections_to_coco,
    read_results,
    split_by_iou_type,
    write_results,
)

__all__ = [
    "contiguous_to_json_ids",
    "detections_to_coco",
    "evaluate_results",
    "load_coco",
    "read_results",
    "split_by_iou_type",
    "summary_line",
    "write_metrics",
    "write_results",
]
