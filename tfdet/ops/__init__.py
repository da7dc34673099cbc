"""Pure TensorFlow functions with Detectron's numerics: anchors, boxes, NMS, proposals, RoIAlign,
mask paste and keypoint decoding. No Keras, no state; usable inside any graph."""

from tfdet.ops.anchors import fpn_level_anchors, generate_anchors, shifted_anchors
from tfdet.ops.boxes import (
    box_areas,
    clip_boxes,
    decode_boxes,
    encode_boxes,
    large_boxes_mask,
    pairwise_iou,
    xywh_to_xyxy,
    xyxy_to_xywh,
)
from tfdet.ops.nms import batched_nms, per_class_nms
from tfdet.ops.proposals import generate_proposals, proposal_keep_mask
from tfdet.ops.keypoints import heatmaps_to_keypoints
from tfdet.ops.masks import paste_masks, paste_masks_soft
from tfdet.ops.resize import resize_cubic_cv2, resize_linear_cv2
from tfdet.ops.fpn_levels import map_rois_to_fpn_levels, multilevel_roi_align
from tfdet.ops.roi_align import roi_align
from tfdet.ops.rpn_targets import RpnTargets, rpn_anchor_targets, split_rpn_targets
from tfdet.ops.roi_sampling import RoiCandidates, RoiSamples, label_proposals, sample_rois
from tfdet.ops.mask_targets import mask_rcnn_targets, match_masks_to_rois
from tfdet.ops.keypoint_targets import KeypointRois, keypoint_heatmap_targets, sample_keypoint_rois
from tfdet.ops.losses import (
    fast_rcnn_box_loss,
    fast_rcnn_class_loss,
    keypoint_loss,
    mask_loss,
    rpn_box_loss,
    rpn_objectness_loss,
)
