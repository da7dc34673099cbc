"""The training graph: Detectron's generalized R-CNN with its target assignment and losses, one Keras model.

`build_training_model(cfg)` (also `build_model(cfg, training=True)`) uses the registry builders of
the inference model, so every weight-carrying layer has the same Detectron name in both models
(`tfdet.modeling.blob_transfer.copy_weights_by_blob_name` moves weights between them).

Inputs, a dict (the training pipeline's batch, `tfdet.data.pipeline`, plus `seeds`):
  images (B, H, W, 3) float32, image_info (B, 3), gt_boxes (B, G, 4) float32 input pixels,
  gt_classes (B, G) int32 (0 = empty slot), gt_is_crowd (B, G) bool, num_gt (B,) int32,
  seeds (B, 2) int64 (one stateless sampling seed per image), gt_masks (B, G, H, W) uint8 when
  MASK_ON, gt_keypoints (B, G, K, 3) float32 when KEYPOINTS_ON.
Outputs, a dict of float32 scalars named as Detectron's json_stats: `loss_rpn_cls`, `loss_rpn_bbox`,
then (unless RPN_ONLY) `loss_cls`, `loss_bbox`, `accuracy_cls`, and `loss_mask` (MASK_ON),
`loss_kps` (KEYPOINTS_ON). The loss to minimise is the sum of the `loss_*` terms (`loss_terms`);
the others are metrics. (Detectron logs an FPN RPN's losses per level, `loss_rpn_cls_fpn2` ...;
here they are summed over the levels.)

As Detectron's `_single_gpu_build_func` in training: the RPN is trained on its anchors; the TRAIN.*
RPN proposals (FPN: the batch's top TRAIN.RPN_POST_NMS_TOP_N, `CollectProposals`) plus the ground
truth are sampled into BATCH_SIZE_PER_IM RoIs per image for the box head; the mask head runs on the
foreground RoIs of those samples, the keypoint head on its own keypoint samples (only the slots that hold
such a RoI: a variable count, as Detectron's blobs). FREEZE_AT freezes
the stem and stages up to it (the body builders); TRAIN.FREEZE_CONV_BODY freezes the whole body
(ResNet + FPN), Detectron's StopGradient on every body output. AffineChannel is always frozen.

MODEL.DOMAIN_ADAPTATION_ON adds the input `is_source` (B,) bool, keeps the detection losses on the
source images and adds the domain losses `loss_da_image`, `loss_da_instance`, `loss_da_consistency`
(`tfdet.modeling.domain_adaptation`); without it the graph is exactly the one above.
"""

import keras

# Importing the backbones fills BODIES.
from tfdet.modeling import backbones as _backbones  # noqa: F401
from tfdet.layers.detection_output import FlattenRoIs
from tfdet.layers.training_targets import (
    CollectProposals,
    FastRCNNLosses,
    GroundTruthValid,
    KeypointLoss,
    MaskLoss,
    RPNLosses,
    SampleRoIs,
    SelectedRoIs,
    TrainingImInfo,
)
from tfdet.modeling.domain_adaptation import (
    add_domain_adaptation_losses,
    check_domain_adaptation,
    source_images_only,
    source_roi_labels,
)
from tfdet.modeling.registry import BODIES, BOX_HEADS, KEYPOINT_HEADS, MASK_HEADS
from tfdet.modeling.roi_heads import add_fast_rcnn_outputs, add_keypoint_outputs, add_mask_rcnn_outputs
from tfdet.modeling.rpn import add_proposals, add_rpn_head, rpn_levels
from tfdet.modeling.training_inputs import training_inputs

LOSS_PREFIX = "loss_"


def loss_terms(outputs):
    """The loss terms of the training model's outputs (the `loss_*` entries); their sum is minimised."""
    return {name: value for name, value in outputs.items() if name.startswith(LOSS_PREFIX)}


def _check_trainable(cfg):
    if cfg.MODEL.TYPE != "generalized_rcnn":
        raise ValueError(
            f"build_training_model builds generalized_rcnn training graphs, not MODEL.TYPE {cfg.MODEL.TYPE!r}: "
            "use tfdet.modeling.build_model(cfg, training=True)"
        )
    if not cfg.RPN.RPN_ON:
        raise NotImplementedError(
            "Training needs an RPN (MODEL.FASTER_RCNN or MODEL.RPN_ONLY); Fast R-CNN training on precomputed "
            "proposals (TRAIN.PROPOSAL_FILES) is not implemented"
        )
    if cfg.MODEL.KEYPOINTS_ON and cfg.KRCNN.NUM_KEYPOINTS <= 0:
        raise ValueError(f"MODEL.KEYPOINTS_ON needs KRCNN.NUM_KEYPOINTS > 0, got {cfg.KRCNN.NUM_KEYPOINTS}")
    if cfg.MODEL.DOMAIN_ADAPTATION_ON:
        check_domain_adaptation(cfg)


def _freeze_body(inputs, body):
    """Make every layer between the images and the body outputs non-trainable (TRAIN.FREEZE_CONV_BODY)."""
    body_model = keras.Model(inputs["images"], list(body.features.values()))
    for layer in body_model.layers:
        layer.trainable = False


def _fpn_rpn(cfg):
    """Whether the RPN is Detectron's multi-level FPN RPN (its losses and its batch-level collect)."""
    return bool(cfg.FPN.FPN_ON and cfg.FPN.MULTILEVEL_RPN)


def _add_rpn_losses(cfg, rpn_outputs, inputs, gt_valid):
    levels = rpn_levels(cfg)
    train = cfg.TRAIN
    tensors = [
        *(t for logits, _, deltas in rpn_outputs for t in (logits, deltas)),
        inputs["gt_boxes"], inputs["gt_is_crowd"], gt_valid, inputs["image_info"], inputs["seeds"],
    ]
    if cfg.MODEL.DOMAIN_ADAPTATION_ON:
        tensors = source_images_only(inputs, tensors)  # target images have no anchor labels
    return RPNLosses(
        cell_anchors=[cell for _, _, cell in levels],
        strides=[stride for _, stride, _ in levels],
        positive_overlap=train.RPN_POSITIVE_OVERLAP,
        negative_overlap=train.RPN_NEGATIVE_OVERLAP,
        straddle_thresh=train.RPN_STRADDLE_THRESH,
        batch_size_per_im=train.RPN_BATCH_SIZE_PER_IM,
        fg_fraction=train.RPN_FG_FRACTION,
        fpn=_fpn_rpn(cfg),
        name="rpn_losses",
    )(tensors)


def _sample_rois(cfg, proposals, proposal_valid, inputs, gt_valid):
    train = cfg.TRAIN
    keypoints = [inputs["gt_keypoints"]] if cfg.MODEL.KEYPOINTS_ON else []
    sampler = SampleRoIs(
        num_classes=cfg.MODEL.NUM_CLASSES,
        batch_size_per_im=train.BATCH_SIZE_PER_IM,
        fg_fraction=train.FG_FRACTION,
        fg_thresh=train.FG_THRESH,
        bg_thresh_hi=train.BG_THRESH_HI,
        bg_thresh_lo=train.BG_THRESH_LO,
        bbox_thresh=train.BBOX_THRESH,
        box_coder_weights=cfg.MODEL.BBOX_REG_WEIGHTS,
        cls_agnostic_bbox_reg=cfg.MODEL.CLS_AGNOSTIC_BBOX_REG,
        heatmap_size=cfg.KRCNN.HEATMAP_SIZE if cfg.MODEL.KEYPOINTS_ON else None,
        name="sampled_roi_targets",
    )
    samples = sampler([
        proposals, proposal_valid, inputs["gt_boxes"], inputs["gt_classes"], inputs["gt_is_crowd"], gt_valid,
        inputs["image_info"], inputs["seeds"], *keypoints,
    ])
    return samples, sampler.foreground_slots


def _add_mask_loss(cfg, body, box_head, samples, foreground_slots, inputs, gt_valid):
    """Mask head on the foreground RoIs of the samples (their first slots, label > 0), then `loss_mask`."""
    fg_rois = samples["rois"][:, :foreground_slots]
    fg_labels = samples["labels"][:, :foreground_slots]
    rois, box_indices, slots = SelectedRoIs(name="mask_rois")([fg_rois, fg_labels > 0])
    mask_head = MASK_HEADS.get(cfg.MRCNN.ROI_MASK_HEAD)(cfg, body, rois, box_indices, box_head)
    mask_logits = add_mask_rcnn_outputs(cfg, mask_head).logits
    return MaskLoss(
        resolution=cfg.MRCNN.RESOLUTION,
        class_specific=cfg.MRCNN.CLS_SPECIFIC_MASK,
        loss_weight=cfg.MRCNN.WEIGHT_LOSS_MASK,
        name="mask_loss",
    )([mask_logits, slots, fg_rois, fg_labels, inputs["gt_masks"], inputs["gt_is_crowd"], gt_valid,
       inputs["image_info"]])


def _add_keypoint_loss(cfg, body, samples):
    """Keypoint head on the keypoint samples that carry a target (a weighted keypoint), then `loss_kps`."""
    weighted = keras.ops.any(samples["keypoint_weights"] > 0, axis=-1)
    rois, box_indices, slots = SelectedRoIs(name="keypoint_rois")([samples["keypoint_rois"], weighted])
    heatmaps = add_keypoint_outputs(cfg, KEYPOINT_HEADS.get(cfg.KRCNN.ROI_KEYPOINTS_HEAD)(cfg, body, rois, box_indices))
    return KeypointLoss(
        normalize_by_visible=cfg.KRCNN.NORMALIZE_BY_VISIBLE_KEYPOINTS,
        loss_weight=cfg.KRCNN.LOSS_WEIGHT,
        ims_per_batch=cfg.TRAIN.IMS_PER_BATCH,
        batch_size_per_im=cfg.TRAIN.BATCH_SIZE_PER_IM,
        fg_fraction=cfg.TRAIN.FG_FRACTION,
        name="keypoint_loss",
    )([heatmaps, slots, samples["keypoint_indices"], samples["keypoint_weights"]])


def build_training_model(cfg):
    """The training graph of `cfg` as a keras.Model (inputs and outputs in the module docstring)."""
    _check_trainable(cfg)
    inputs = training_inputs(cfg)
    body = BODIES.get(cfg.MODEL.CONV_BODY)(cfg, inputs["images"])
    if cfg.TRAIN.FREEZE_CONV_BODY:
        _freeze_body(inputs, body)
    gt_valid = GroundTruthValid(name="gt_valid")(inputs["gt_classes"], inputs["num_gt"])

    rpn_outputs = add_rpn_head(cfg, body)
    outputs = dict(zip(("loss_rpn_cls", "loss_rpn_bbox"), _add_rpn_losses(cfg, rpn_outputs, inputs, gt_valid)))
    if cfg.MODEL.RPN_ONLY:
        return keras.Model(inputs, outputs, name="rpn_training")

    im_info = TrainingImInfo(name="im_info")(inputs["image_info"])
    boxes, scores, num_proposals = add_proposals(cfg, rpn_outputs, im_info, training=True)
    proposals, proposal_valid = CollectProposals(across_batch=_fpn_rpn(cfg), name="collected_rois")(
        [boxes, scores, num_proposals]
    )
    samples, foreground_slots = _sample_rois(cfg, proposals, proposal_valid, inputs, gt_valid)

    rois, box_indices = FlattenRoIs(name="sampled_rois")(samples["rois"])
    box_head = BOX_HEADS.get(cfg.FAST_RCNN.ROI_BOX_HEAD)(cfg, body, rois, box_indices)
    box_outputs = add_fast_rcnn_outputs(cfg, box_head)
    labels = samples["labels"]
    if cfg.MODEL.DOMAIN_ADAPTATION_ON:
        labels = source_roi_labels(inputs, labels)  # target RoIs count in no detection loss
    outputs["loss_cls"], outputs["loss_bbox"], outputs["accuracy_cls"] = FastRCNNLosses(name="fast_rcnn_losses")([
        box_outputs.cls_score, box_outputs.bbox_pred, labels, samples["bbox_targets"],
        samples["bbox_inside_weights"], samples["bbox_outside_weights"],
    ])
    if cfg.MODEL.DOMAIN_ADAPTATION_ON:
        outputs.update(add_domain_adaptation_losses(cfg, body, box_head, samples["labels"], inputs))
    if cfg.MODEL.MASK_ON:
        outputs["loss_mask"] = _add_mask_loss(cfg, body, box_head, samples, foreground_slots, inputs, gt_valid)
    if cfg.MODEL.KEYPOINTS_ON:
        outputs["loss_kps"] = _add_keypoint_loss(cfg, body, samples)
    return keras.Model(inputs, outputs, name="generalized_rcnn_training")
