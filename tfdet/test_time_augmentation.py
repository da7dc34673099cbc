"""Test-time augmentation as Detectron's core/test.py: im_detect_bbox_aug, im_detect_mask_aug and
im_detect_keypoints_aug around box_results_with_nms_and_limit, for one image at a time.

Boxes: the network runs on every transform of TEST.BBOX_AUG (horizontal flip; SCALES at MAX_SIZE,
each optionally flipped; ASPECT_RATIOS at TEST.SCALE, each optionally flipped; the identity last);
each transform's class boxes are mapped back to the original image and all proposals' scores and
boxes are stacked (the UNION heuristic, the only one Detectron allows for Faster R-CNN), then
per-class NMS / soft-NMS / voting and the DETECTIONS_PER_IM limit run once on the union. Masks and
keypoints: the heads run on the final boxes at every transform of TEST.MASK_AUG / KPS_AUG (the
identity first), their outputs are mapped back (flips mirror masks; heatmaps also swap left and
right keypoints with COCO's flip map) and combined by MASK_AUG.HEUR / KPS_AUG.HEUR. Float32
arithmetic follows Detectron's numpy code.
"""

from typing import NamedTuple

import cv2
import numpy as np
import tensorflow as tf

from tfdet.config.errors import ConfigError
from tfdet.data.keypoint_names import flip_permutation
from tfdet.imaging.preprocessing import as_bgr_image, model_inputs
from tfdet.modeling.blob_transfer import copy_weights_by_blob_name
from tfdet.modeling.test_settings import soft_nms_setting, voting_setting
from tfdet.modeling.test_time_models import build_test_time_models
from tfdet.ops.keypoints import heatmaps_to_keypoints
from tfdet.ops.nms import BoxVoting, SoftNMS, per_class_nms

MASK_HEURISTICS = ("SOFT_AVG", "SOFT_MAX", "LOGIT_AVG")
KEYPOINT_HEURISTICS = ("HM_AVG", "HM_MAX")
COCO_NUM_KEYPOINTS = 17


class Transform(NamedTuple):
    """One test-time transform: resize to (scale, max_size) after an optional width-relative aspect
    ratio change and horizontal flip; keypoint transforms tag scales below / above TEST.SCALE."""

    scale: int
    max_size: int
    hflip: bool = False
    aspect_ratio: float | None = None
    downscale: bool = False
    upscale: bool = False


def uses_test_time_augmentation(cfg):
    """Whether any of TEST.BBOX_AUG / MASK_AUG / KPS_AUG is enabled for this model."""
    test = cfg.TEST
    return bool(
        test.BBOX_AUG.ENABLED
        or (cfg.MODEL.MASK_ON and test.MASK_AUG.ENABLED)
        or (cfg.MODEL.KEYPOINTS_ON and test.KPS_AUG.ENABLED)
    )


def _augmented(cfg, aug, tag_scales=False):
    """The flip / scale / aspect-ratio transforms of one TEST.*_AUG section, in Detectron's order."""
    test = cfg.TEST
    transforms = []
    if aug.H_FLIP:
        transforms.append(Transform(test.SCALE, test.MAX_SIZE, hflip=True))
    for scale in aug.SCALES:
        tags = dict(downscale=scale < test.SCALE, upscale=scale > test.SCALE) if tag_scales else {}
        transforms.append(Transform(scale, aug.MAX_SIZE, **tags))
        if aug.SCALE_H_FLIP:
            transforms.append(Transform(scale, aug.MAX_SIZE, hflip=True, **tags))
    for ratio in aug.ASPECT_RATIOS:
        transforms.append(Transform(test.SCALE, test.MAX_SIZE, aspect_ratio=ratio))
        if aug.ASPECT_RATIO_H_FLIP:
            transforms.append(Transform(test.SCALE, test.MAX_SIZE, hflip=True, aspect_ratio=ratio))
    return transforms


def box_transforms(cfg):
    """im_detect_bbox_aug's transforms: the augmented ones, then the identity."""
    identity = Transform(cfg.TEST.SCALE, cfg.TEST.MAX_SIZE)
    return [*_augmented(cfg, cfg.TEST.BBOX_AUG), identity] if cfg.TEST.BBOX_AUG.ENABLED else [identity]


def mask_transforms(cfg):
    """im_detect_mask_aug's transforms: the identity, then the augmented ones."""
    identity = Transform(cfg.TEST.SCALE, cfg.TEST.MAX_SIZE)
    return [identity, *_augmented(cfg, cfg.TEST.MASK_AUG)] if cfg.TEST.MASK_AUG.ENABLED else [identity]


def keypoint_transforms(cfg):
    """im_detect_keypoints_aug's transforms (scales tagged as down- or upscaling), the identity first."""
    identity = Transform(cfg.TEST.SCALE, cfg.TEST.MAX_SIZE)
    if not cfg.TEST.KPS_AUG.ENABLED:
        return [identity]
    return [identity, *_augmented(cfg, cfg.TEST.KPS_AUG, tag_scales=True)]


def transformed_image(image, transform):
    """Detectron's image_utils.aspect_ratio_rel (cv2.resize of the width), then the horizontal flip."""
    if transform.aspect_ratio is not None:
        height, width = image.shape[:2]
        image = cv2.resize(image, dsize=(int(round(transform.aspect_ratio * width)), height))
    return image[:, ::-1, :] if transform.hflip else image


def flip_boxes(boxes, width):
    """box_utils.flip_boxes: x1' = W - x2 - 1, x2' = W - x1 - 1 (float32 boxes, last axis 4)."""
    flipped = boxes.copy()
    flipped[..., 0] = np.float32(width) - boxes[..., 2] - np.float32(1)
    flipped[..., 2] = np.float32(width) - boxes[..., 0] - np.float32(1)
    return flipped


def scale_widths(boxes, factor):
    """box_utils.aspect_ratio: the x coordinates times `factor` (in float32, as numpy computes it)."""
    scaled = boxes.copy()
    scaled[..., 0::2] = np.float32(factor) * boxes[..., 0::2]
    return scaled


def boxes_into(boxes, image_width, transform):
    """Original-image boxes -> the transformed image's (aspect ratio, then flip)."""
    if transform.aspect_ratio is not None:
        boxes = scale_widths(boxes, transform.aspect_ratio)
        image_width = int(round(transform.aspect_ratio * image_width))
    return flip_boxes(boxes, image_width) if transform.hflip else boxes


def boxes_back(boxes, transformed_width, transform):
    """The transformed image's boxes -> original-image boxes (undo the flip, then the aspect ratio)."""
    if transform.hflip:
        boxes = flip_boxes(boxes, transformed_width)
    if transform.aspect_ratio is not None:
        boxes = scale_widths(boxes, 1.0 / transform.aspect_ratio)
    return boxes


def combine_masks(masks, heuristic):
    """im_detect_mask_aug's combination of per-transform soft masks (T, N, M, M)."""
    masks = np.asarray(masks, np.float32)
    if heuristic == "SOFT_AVG":
        return np.mean(masks, axis=0)
    if heuristic == "SOFT_MAX":
        return np.amax(masks, axis=0)
    if heuristic == "LOGIT_AVG":
        with np.errstate(divide="ignore", over="ignore"):  # a probability of exactly 1 has logit inf, as in Detectron
            logits = -1.0 * np.log((1.0 - masks) / np.maximum(masks, 1e-20))
            return 1.0 / (1.0 + np.exp(-np.mean(logits, axis=0)))
    raise ConfigError(f"TEST.MASK_AUG.HEUR {heuristic!r} is not one of {', '.join(MASK_HEURISTICS)}")


def combine_heatmaps(heatmaps, transforms, boxes, cfg):
    """im_detect_keypoints_aug's combination of per-transform heatmaps (T, N, S, S, K); with
    SCALE_SIZE_DEP, small and medium objects (+1 area < AREA_TH) ignore downscaled transforms and
    large ones upscaled transforms (combine_heatmaps_size_dep)."""
    heuristic = cfg.TEST.KPS_AUG.HEUR
    if heuristic not in KEYPOINT_HEURISTICS:
        raise ConfigError(f"TEST.KPS_AUG.HEUR {heuristic!r} is not one of {', '.join(KEYPOINT_HEURISTICS)}")
    reduce = np.mean if heuristic == "HM_AVG" else np.amax
    heatmaps = np.asarray(heatmaps, np.float32)
    if not cfg.TEST.KPS_AUG.SCALE_SIZE_DEP:
        return reduce(heatmaps, axis=0)
    areas = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    small = areas < cfg.TEST.KPS_AUG.AREA_TH
    combined = np.zeros_like(heatmaps[0])
    for i in range(heatmaps.shape[1]):
        use = [t for t, transform in enumerate(transforms)
               if not (small[i] and transform.downscale) and not (not small[i] and transform.upscale)]  # fmt: skip
        combined[i] = reduce(heatmaps[use, i], axis=0)
    return combined


class TestTimeAugmentation:
    """Runs one image through Detectron's augmented test for `cfg`, with the weights of `model`
    (the Predictor's inference model, copied by Detectron blob name)."""

    def __init__(self, cfg, model):
        if cfg.MODEL.KEYPOINTS_ON and cfg.TEST.KPS_AUG.ENABLED and cfg.KRCNN.NUM_KEYPOINTS != COCO_NUM_KEYPOINTS:
            flips = any(getattr(cfg.TEST.KPS_AUG, key) for key in ("H_FLIP", "SCALE_H_FLIP", "ASPECT_RATIO_H_FLIP"))
            if flips:
                raise ConfigError(
                    f"TEST.KPS_AUG flips: Detectron mirrors heatmaps with COCO's 17-keypoint flip map, and this model "
                    f"has KRCNN.NUM_KEYPOINTS {cfg.KRCNN.NUM_KEYPOINTS}; set H_FLIP, SCALE_H_FLIP and "
                    "ASPECT_RATIO_H_FLIP False"
                )
        self.cfg = cfg
        self.models = build_test_time_models(cfg)
        copy_weights_by_blob_name(model, self.models.all_layers, cfg.MRCNN.ROI_MASK_HEAD)
        image_spec = {
            "images": tf.TensorSpec([None, None, None, 3], tf.float32),
            "image_info": tf.TensorSpec([None, 3], tf.float32),
        }
        self._boxes = tf.function(self.models.box_model, input_signature=[image_spec], autograph=False)
        if self.models.heads_model is not None:
            detection_spec = {
                "detection_boxes": tf.TensorSpec([None, None, 4], tf.float32),
                "detection_classes": tf.TensorSpec([None, None], tf.int32),
                "num_detections": tf.TensorSpec([None], tf.int32),
            }
            self._heads = tf.function(
                self.models.heads_model, input_signature=[{**image_spec, **detection_spec}], autograph=False
            )
        soft_nms, voting = soft_nms_setting(cfg), voting_setting(cfg)
        self._select = tf.function(
            lambda scores, boxes: per_class_nms(
                boxes, scores, cfg.TEST.SCORE_THRESH, cfg.TEST.NMS, cfg.TEST.DETECTIONS_PER_IM,
                soft_nms=None if soft_nms is None else SoftNMS(*soft_nms),
                voting=None if voting is None else BoxVoting(*voting),
            ),
            input_signature=[tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, None, 4], tf.float32)],
            autograph=False,
        )  # fmt: skip
        self._keypoints = tf.function(
            lambda maps, boxes: heatmaps_to_keypoints(maps, boxes, cfg.KRCNN.INFERENCE_MIN_SIZE),
            input_signature=[tf.TensorSpec([None, None, None, None], tf.float32), tf.TensorSpec([None, 4], tf.float32)],
            autograph=False,
        )

    def detect(self, image, paste_masks):
        """Detections of one BGR image, as Predictor.predict returns them; `paste_masks(probs, boxes)`
        turns (N, M, M) soft masks and their boxes into full-image boolean masks."""
        image = as_bgr_image(image)
        scores, boxes = self.detect_boxes(image)
        out_boxes, out_scores, out_classes, count = (t.numpy() for t in self._select(scores, boxes))
        count = int(count)
        result = {
            "boxes": out_boxes[:count].astype(np.float32),
            "scores": out_scores[:count].astype(np.float32),
            "classes": out_classes[:count].astype(np.int32),
        }
        if self.cfg.MODEL.MASK_ON:
            probs = self.instance_outputs(image, result, mask_transforms(self.cfg), "mask_probs")
            result["masks"] = paste_masks(combine_masks(probs, self.cfg.TEST.MASK_AUG.HEUR), result["boxes"])
        if self.cfg.MODEL.KEYPOINTS_ON:
            transforms = keypoint_transforms(self.cfg)
            heatmaps = self.instance_outputs(image, result, transforms, "keypoint_heatmaps")
            combined = combine_heatmaps(heatmaps, transforms, result["boxes"], self.cfg)
            keypoints = self._keypoints(combined, result["boxes"]).numpy()
            result["keypoints"] = keypoints[:, :, :3].astype(np.float32)
            result["keypoint_probs"] = keypoints[:, :, 3].astype(np.float32)
        return result

    def detect_boxes(self, image):
        """im_detect_bbox_aug with the UNION heuristics: every transform's proposals' class scores (R, C)
        and class boxes (R, K, 4) in original pixels, stacked in Detectron's transform order."""
        all_scores, all_boxes = [], []
        for transform in box_transforms(self.cfg):
            moved = transformed_image(image, transform)
            outputs = self._boxes(self._inputs(moved, transform))
            scores, boxes = outputs["scores"].numpy()[0], outputs["boxes"].numpy()[0]
            count = int(outputs["num_rois"].numpy()[0])
            all_scores.append(scores[:count])
            all_boxes.append(boxes_back(boxes[:count], moved.shape[1], transform))
        return np.concatenate(all_scores), np.concatenate(all_boxes)

    def instance_outputs(self, image, result, transforms, output):
        """The heads' `output` for the final boxes at every transform, mapped back: (T, N, ...)."""
        count = len(result["scores"])
        per_transform = []
        for transform in transforms:
            moved = transformed_image(image, transform)
            inputs = self._inputs(moved, transform)
            inputs.update(
                detection_boxes=boxes_into(result["boxes"], image.shape[1], transform)[None],
                detection_classes=result["classes"][None],
                num_detections=np.array([count], np.int32),
            )
            values = self._heads(inputs)[output].numpy()[0, :count]
            if transform.hflip:
                values = values[:, :, ::-1]  # mirror each mask / heatmap (N, M, M[, K]) along its width
                if output == "keypoint_heatmaps":
                    values = values[..., flip_permutation()]
            per_transform.append(values)
        return per_transform

    def _inputs(self, image, transform):
        """The model inputs of one transformed image at the transform's scale."""
        return model_inputs([image], self.cfg, transform.scale, transform.max_size)
