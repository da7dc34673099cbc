"""build_model: a Detectron config -> its generalized R-CNN as one Keras functional model.

The inference model takes `images` (B, H, W, 3) float32 BGR minus PIXEL_MEANS (H, W padded to
FPN.COARSEST_STRIDE for FPN) and `image_info` (B, 3) = (original height, original width, scale);
models without an RPN (Detectron's Fast R-CNN configs) also take `proposals` (B, N, 4) in original
pixels and `num_proposals` (B,). It returns complete detections (DESIGN.md decision 5): `boxes`
(B, D, 4) x1,y1,x2,y2 in original pixels, `scores`, `classes` (1..NUM_CLASSES-1), `num_detections`,
plus `mask_probs` (B, D, M, M) of each detection's class when MASK_ON and `keypoints`
(B, D, K, 4) x, y, logit, prob when KEYPOINTS_ON. RPN-only models return `proposals`,
`proposal_scores`, `num_proposals` (input pixels).
"""

import keras

# Importing these modules fills the registries with their builders.
from tfdet.modeling import backbones as _backbones  # noqa: F401
from tfdet.layers.detection_output import (
    DetectionOutput,
    FlattenRoIs,
    HeatmapsToKeypoints,
    RealDetectionRoIs,
    ScaleBoxes,
    ScatterToDetections,
    SelectClassMasks,
)
from tfdet.layers.image_info import ImInfo
from tfdet.modeling.device_map import apply_device_map
from tfdet.modeling.mixed_precision import dtype_policy_scope, keep_float32
from tfdet.modeling.registry import BODIES, BOX_HEADS, KEYPOINT_HEADS, MASK_HEADS
from tfdet.modeling.roi_heads import add_fast_rcnn_outputs, add_keypoint_outputs, add_mask_rcnn_outputs
from tfdet.modeling.rpn import add_proposals, add_rpn_head
from tfdet.modeling.training_graph import build_training_model


def build_model(cfg, training=False):
    """The generalized R-CNN of `cfg` (Detectron's MODEL.TYPE generalized_rcnn) as a keras.Model.

    `training` True builds the training graph instead (`tfdet.modeling.training_graph`): the batch
    dict in, Detectron's loss terms out, with the same Detectron-named layers. In both, the layers
    compute under TFDET.MIXED_PRECISION's Keras policy (`tfdet.modeling.mixed_precision`) and the
    parts TFDET.DEVICE_MAP names run on their devices (`tfdet.modeling.device_map`).
    """
    with dtype_policy_scope(cfg):
        model = build_training_model(cfg) if training else _build_inference_model(cfg)
    return apply_device_map(cfg, keep_float32(cfg, model))


def _build_inference_model(cfg):
    """The inference graph (inputs and outputs in the module docstring)."""
    if cfg.MODEL.TYPE != "generalized_rcnn":
        raise ValueError(f"MODEL.TYPE {cfg.MODEL.TYPE!r} is not supported; tfdet builds 'generalized_rcnn'")
    inputs = {"images": keras.Input((None, None, 3), name="images"), "image_info": keras.Input((3,), name="image_info")}
    body = BODIES.get(cfg.MODEL.CONV_BODY)(cfg, inputs["images"])
    if cfg.RPN.RPN_ON:
        im_info = ImInfo(name="im_info")(inputs["images"], inputs["image_info"])
        proposals, proposal_scores, num_proposals = add_proposals(cfg, add_rpn_head(cfg, body), im_info)
        if cfg.MODEL.RPN_ONLY:
            outputs = {"proposals": proposals, "proposal_scores": proposal_scores, "num_proposals": num_proposals}
            return keras.Model(inputs, outputs, name="rpn")
    else:
        inputs["proposals"] = keras.Input((None, 4), name="proposals")
        inputs["num_proposals"] = keras.Input((), dtype="int32", name="num_proposals")
        proposals = ScaleBoxes(name="proposal_rois")(inputs["proposals"], inputs["image_info"])
        num_proposals = inputs["num_proposals"]
    outputs = _add_detection_outputs(cfg, body, proposals, num_proposals, inputs["image_info"])
    return keras.Model(inputs, outputs, name="generalized_rcnn")


def _add_detection_outputs(cfg, body, proposals, num_proposals, image_info):
    """Box head on the proposals, detections, then mask and keypoint heads on the detections."""
    rois, box_indices = FlattenRoIs(name="rois")(proposals)
    box_head = BOX_HEADS.get(cfg.FAST_RCNN.ROI_BOX_HEAD)(cfg, body, rois, box_indices)
    box_outputs = add_fast_rcnn_outputs(cfg, box_head)
    boxes, scores, classes, num_detections = DetectionOutput(
        bbox_reg_weights=cfg.MODEL.BBOX_REG_WEIGHTS,
        apply_regression=cfg.TEST.BBOX_REG,
        class_agnostic=cfg.MODEL.CLS_AGNOSTIC_BBOX_REG,
        score_threshold=cfg.TEST.SCORE_THRESH,
        nms_threshold=cfg.TEST.NMS,
        detections_per_image=cfg.TEST.DETECTIONS_PER_IM,
        name="detections",
    )([proposals, num_proposals, box_outputs.cls_prob, box_outputs.bbox_pred, image_info])
    outputs = {"boxes": boxes, "scores": scores, "classes": classes, "num_detections": num_detections}
    if cfg.MODEL.MASK_ON or cfg.MODEL.KEYPOINTS_ON:
        det_rois, det_indices, positions, det_boxes = RealDetectionRoIs(name="detection_rois")(
            [boxes, num_detections, image_info]
        )
    if cfg.MODEL.MASK_ON:
        mask_head = MASK_HEADS.get(cfg.MRCNN.ROI_MASK_HEAD)(cfg, body, det_rois, det_indices, box_head)
        mask_probs = SelectClassMasks(name="class_mask_probs")(
            [add_mask_rcnn_outputs(cfg, mask_head).probs, classes, positions]
        )
        outputs["mask_probs"] = ScatterToDetections(name="mask_probs")([mask_probs, positions, classes])
    if cfg.MODEL.KEYPOINTS_ON:
        keypoint_head = KEYPOINT_HEADS.get(cfg.KRCNN.ROI_KEYPOINTS_HEAD)(cfg, body, det_rois, det_indices)
        heatmaps = add_keypoint_outputs(cfg, keypoint_head)
        keypoints = HeatmapsToKeypoints(min_size=cfg.KRCNN.INFERENCE_MIN_SIZE, name="roi_keypoints")(
            [heatmaps, det_boxes]
        )
        outputs["keypoints"] = ScatterToDetections(name="keypoints")([keypoints, positions, classes])
    return outputs
