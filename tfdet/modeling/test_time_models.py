"""The two halves of a generalized R-CNN that test-time augmentation runs separately (Detectron's
core/test.py: im_detect_bbox before NMS, then im_detect_mask / im_detect_keypoints on given boxes).

`box_model`: images, image_info -> every proposal's class `scores` (B, N, C) and class `boxes`
(B, N, K, 4) in original pixels, clipped, before any NMS, and `num_rois` (B,) real proposals; also the
raw box head inputs and outputs Detectron fetches (`rois` (B, N, 4) input pixels, `cls_prob`, `bbox_pred`). `heads_model`: images, image_info and
given detections (`detection_boxes` (B, D, 4) original pixels, `detection_classes` (B, D),
`num_detections` (B,)) ->
`mask_probs` (B, D, M, M) of each box's class and raw `keypoint_heatmaps` (B, D, S, S, K). Both are
views of one graph (`all_layers`), so they share every weight with the same Detectron names as
`build_model`'s inference model.
"""

from typing import NamedTuple

import keras

from tfdet.layers.detection_output import ClassBoxes
from tfdet.modeling.device_map import apply_device_map
from tfdet.modeling.generalized_rcnn import add_body_and_proposals, add_box_head, add_instance_outputs
from tfdet.modeling.mixed_precision import dtype_policy_scope, keep_float32


class TestTimeModels(NamedTuple):
    """The box and head halves, and a model holding both (to load or copy weights into)."""

    box_model: keras.Model
    heads_model: keras.Model | None
    all_layers: keras.Model


def build_test_time_models(cfg):
    """TestTimeModels of `cfg` (an R-CNN with an RPN; heads_model None without masks or keypoints)."""
    with dtype_policy_scope(cfg):
        inputs, body, proposals, _, num_proposals = add_body_and_proposals(cfg)
        box_head, box_outputs = add_box_head(cfg, body, proposals)
        scores, boxes = ClassBoxes(
            bbox_reg_weights=cfg.MODEL.BBOX_REG_WEIGHTS,
            apply_regression=cfg.TEST.BBOX_REG,
            class_agnostic=cfg.MODEL.CLS_AGNOSTIC_BBOX_REG,
            name="class_boxes",
        )([proposals, num_proposals, box_outputs.cls_prob, box_outputs.bbox_pred, inputs["image_info"]])
        box_outputs = {
            "scores": scores, "boxes": boxes, "num_rois": num_proposals,
            "rois": proposals, "cls_prob": box_outputs.cls_prob, "bbox_pred": box_outputs.bbox_pred,
        }  # fmt: skip
        box_model = keras.Model(inputs, box_outputs, name="test_time_boxes")
        detections = {
            "detection_boxes": keras.Input((None, 4), name="detection_boxes"),
            "detection_classes": keras.Input((None,), dtype="int32", name="detection_classes"),
            "num_detections": keras.Input((), dtype="int32", name="num_detections"),
        }
        head_outputs = add_instance_outputs(
            cfg, body, box_head, detections["detection_boxes"], detections["detection_classes"],
            detections["num_detections"], inputs["image_info"], heatmaps=True,
        )  # fmt: skip
        heads_model = keras.Model({**inputs, **detections}, head_outputs, name="test_time_heads") if head_outputs else None
        all_layers = keras.Model({**inputs, **detections}, {**box_outputs, **head_outputs}, name="generalized_rcnn")
    apply_device_map(cfg, keep_float32(cfg, all_layers))
    return TestTimeModels(box_model, heads_model, all_layers)
