"""Detectron's generalized R-CNN (MODEL.TYPE generalized_rcnn) as one Keras functional model.

The inference model takes `images` (B, H, W, 3) float32 BGR minus PIXEL_MEANS (H, W padded to
FPN.COARSEST_STRIDE for FPN) and `image_info` (B, 3) = (original height, original width, scale);
models without an RPN (Detectron's Fast R-CNN configs) also take `proposals` (B, N, 4) in original
pixels and `num_proposals` (B,). It returns complete detections (docs/design.md decision 5): `boxes`
(B, D, 4) x1,y1,x2,y2 in original pixels, `scores`, `classes` (1..NUM_CLASSES-1), `num_detections`,
plus `mask_probs` (B, D, M, M) of each detection's class when MASK_ON and `keypoints`
(B, D, K, 4) x, y, logit, prob when KEYPOINTS_ON. RPN-only models return `proposals`,
`proposal_scores`, `num_proposals` (input pixels).
"""

import keras

# Importing these modules fills the registries with their builders.
from tfdet.modeling import backbones as _backbones  # noqa: F401
from tfdet.layers.detection_output import (
    AtLeastOneRoI,
    DetectionOutput,
    FirstRows,
    FlattenRoIs,
    HeatmapsToKeypoints,
    RealDetectionRoIs,
    ScaleBoxes,
    ScatterToDetections,
    SelectClassMasks,
)
from tfdet.layers.image_info import ImInfo
from tfdet.modeling.registry import BODIES, BOX_HEADS, KEYPOINT_HEADS, MASK_HEADS
from tfdet.modeling.roi_heads import add_fast_rcnn_outputs, add_keypoint_outputs, add_mask_rcnn_outputs
from tfdet.modeling.rpn import add_proposals, add_rpn_head
from tfdet.modeling.test_settings import detection_settings, voting_setting


def build_generalized_rcnn(cfg):
    """The inference graph of `cfg` (inputs and outputs in the module docstring); its training graph, with the
    same Detectron-named layers, is `tfdet.modeling.training_graph.build_training_model`."""
    inputs, body, proposals, proposal_scores, num_proposals = add_body_and_proposals(cfg)
    if cfg.MODEL.RPN_ONLY:
        outputs = {"proposals": proposals, "proposal_scores": proposal_scores, "num_proposals": num_proposals}
        return keras.Model(inputs, outputs, name="rpn")
    box_head, box_outputs = add_box_head(cfg, body, proposals)
    boxes, scores, classes, num_detections = DetectionOutput(
        bbox_reg_weights=cfg.MODEL.BBOX_REG_WEIGHTS,
        class_agnostic=cfg.MODEL.CLS_AGNOSTIC_BBOX_REG,
        score_threshold=cfg.TEST.SCORE_THRESH,
        voting=voting_setting(cfg),
        **detection_settings(cfg),
        name="detections",
    )([proposals, num_proposals, box_outputs.cls_prob, box_outputs.bbox_pred, inputs["image_info"]])
    outputs = {"boxes": boxes, "scores": scores, "classes": classes, "num_detections": num_detections}
    outputs.update(add_instance_outputs(cfg, body, box_head, boxes, classes, num_detections, inputs["image_info"]))
    return keras.Model(inputs, outputs, name="generalized_rcnn")


def add_body_and_proposals(cfg):
    """(inputs, body, proposals, proposal_scores, num_proposals): the model inputs, the backbone, and the
    RoIs the box head sees (B, N, 4) in input pixels, with their RPN scores (None for given proposals)."""
    if cfg.MODEL.TYPE != "generalized_rcnn":
        raise ValueError(f"the generalized R-CNN's body and proposals, asked for MODEL.TYPE {cfg.MODEL.TYPE!r}")
    inputs = {"images": keras.Input((None, None, 3), name="images"), "image_info": keras.Input((3,), name="image_info")}
    body = BODIES.get(cfg.MODEL.CONV_BODY)(cfg, inputs["images"])
    if cfg.RPN.RPN_ON:
        im_info = ImInfo(name="im_info")(inputs["images"], inputs["image_info"])
        proposals, proposal_scores, num_proposals = add_proposals(cfg, add_rpn_head(cfg, body), im_info)
    else:
        inputs["proposals"] = keras.Input((None, 4), name="proposals")
        inputs["num_proposals"] = keras.Input((), dtype="int32", name="num_proposals")
        proposals = ScaleBoxes(name="proposal_rois")(inputs["proposals"], inputs["image_info"])
        proposal_scores, num_proposals = None, inputs["num_proposals"]
    return inputs, body, proposals, proposal_scores, num_proposals


def add_box_head(cfg, body, proposals):
    """(box head output, its cls_prob / bbox_pred outputs) on the proposals (B, N, 4) in input pixels."""
    rois, box_indices = FlattenRoIs(name="rois")(proposals)
    box_head = BOX_HEADS.get(cfg.FAST_RCNN.ROI_BOX_HEAD)(cfg, body, rois, box_indices)
    return box_head, add_fast_rcnn_outputs(cfg, box_head)


def add_instance_outputs(cfg, body, box_head, boxes, classes, num_detections, image_info, heatmaps=False):
    """Mask and keypoint heads on given detections (boxes (B, D, 4) in original pixels, classes (B, D),
    num_detections (B,)): `mask_probs` (B, D, M, M) of each box's class when MASK_ON, and `keypoints`
    (B, D, K, 4) when KEYPOINTS_ON, or their raw `keypoint_heatmaps` (B, D, S, S, K) if `heatmaps`."""
    outputs = {}
    if not (cfg.MODEL.MASK_ON or cfg.MODEL.KEYPOINTS_ON):
        return outputs
    real_rois, real_indices, positions, det_boxes = RealDetectionRoIs(name="detection_rois")(
        [boxes, num_detections, image_info]
    )
    det_rois, det_indices = AtLeastOneRoI(name="nonempty_detection_rois")(real_rois, real_indices)
    if cfg.MODEL.MASK_ON:
        mask_head = MASK_HEADS.get(cfg.MRCNN.ROI_MASK_HEAD)(cfg, body, det_rois, det_indices, box_head)
        mask_probs = FirstRows(name="real_mask_probs")(add_mask_rcnn_outputs(cfg, mask_head).probs, positions)
        mask_probs = SelectClassMasks(name="class_mask_probs")([mask_probs, classes, positions])
        outputs["mask_probs"] = ScatterToDetections(name="mask_probs")([mask_probs, positions, classes])
    if cfg.MODEL.KEYPOINTS_ON:
        keypoint_head = KEYPOINT_HEADS.get(cfg.KRCNN.ROI_KEYPOINTS_HEAD)(cfg, body, det_rois, det_indices)
        keypoint_maps = FirstRows(name="real_keypoint_heatmaps")(add_keypoint_outputs(cfg, keypoint_head), positions)
        if heatmaps:
            outputs["keypoint_heatmaps"] = ScatterToDetections(name="keypoint_heatmaps")(
                [keypoint_maps, positions, classes]
            )
        else:
            keypoints = HeatmapsToKeypoints(min_size=cfg.KRCNN.INFERENCE_MIN_SIZE, name="roi_keypoints")(
                [keypoint_maps, det_boxes]
            )
            outputs["keypoints"] = ScatterToDetections(name="keypoints")([keypoints, positions, classes])
    return outputs
