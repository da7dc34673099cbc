"""Detectron's test-time augmentation (core/test.py) restated in NumPy from its source, independently of
tfdet's orchestration: im_detect_bbox_aug (UNION), im_detect_mask_aug, im_detect_keypoints_aug (with
combine_heatmaps_size_dep), the flips and aspect-ratio changes of images, boxes, masks and heatmaps,
and box_results_with_nms_and_limit (tests/support/numpy_detectron_postprocess.py).

The network itself is an oracle (`Network`): given one image blob it returns what Detectron fetches
from its workspace (rois, cls_prob, bbox_pred; mask_fcn_probs or kps_score for given boxes). Box
decoding, clipping, every transform and every combination are done here.
"""

import cv2
import numpy as np

from support import numpy_detectron_postprocess as post
from support import numpy_reference as ref
from support.numpy_reference import detectron_prep

# detectron/utils/keypoints.py get_keypoints(): COCO's keypoints and their left/right flip map.
COCO_KEYPOINTS = [
    "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder", "left_elbow",
    "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee", "right_knee", "left_ankle",
    "right_ankle",
]  # fmt: skip
COCO_FLIP_MAP = {f"left_{part}": f"right_{part}" for part in ("eye", "ear", "shoulder", "elbow", "wrist", "hip",
                                                             "knee", "ankle")}  # fmt: skip


def pad_to_stride(blob, stride):
    """im_list_to_blob for one image with FPN's COARSEST_STRIDE padding."""
    height, width = (int(np.ceil(d / stride) * stride) for d in blob.shape[:2])
    padded = np.zeros((1, height, width, 3), np.float32)
    padded[0, : blob.shape[0], : blob.shape[1]] = blob
    return padded


class Network:
    """The network as Detectron's workspace exposes it, for one image: `boxes_net(blob, im_info)` ->
    (rois (R, 4) in blob pixels, cls_prob (R, C), bbox_pred (R, 4K)); `mask_net(blob, im_info,
    rois_in_image_pixels, classes)` -> (R, M, M) probabilities of each box's class; `keypoint_net(...)`
    -> (R, S, S, K) heatmap logits (NHWC)."""

    def __init__(self, boxes_net, heads_net, stride):
        self.boxes_net, self.heads_net, self.stride = boxes_net, heads_net, stride


def im_detect_bbox(net, cfg, im, target_scale, target_max_size):
    blob, im_scale = detectron_prep(im, target_scale, target_max_size)
    im_info = np.array([[im.shape[0], im.shape[1], im_scale]], np.float32)
    rois, scores, box_deltas = net.boxes_net(pad_to_stride(blob, net.stride), im_info)
    boxes = rois / np.float32(im_scale)
    if cfg.MODEL.CLS_AGNOSTIC_BBOX_REG:
        box_deltas = box_deltas[:, -4:]
    pred_boxes = ref.bbox_transform(boxes, box_deltas, cfg.MODEL.BBOX_REG_WEIGHTS)
    pred_boxes = ref.clip_tiled(pred_boxes, im.shape[0], im.shape[1])
    if cfg.MODEL.CLS_AGNOSTIC_BBOX_REG:
        pred_boxes = np.tile(pred_boxes, (1, scores.shape[1]))
    return scores, pred_boxes, im_scale


def flip_boxes(boxes, im_width):
    boxes_flipped = boxes.copy()
    boxes_flipped[:, 0::4] = im_width - boxes[:, 2::4] - 1
    boxes_flipped[:, 2::4] = im_width - boxes[:, 0::4] - 1
    return boxes_flipped


def aspect_ratio_boxes(boxes, aspect_ratio):
    boxes_ar = boxes.copy()
    boxes_ar[:, 0::4] = aspect_ratio * boxes[:, 0::4]
    boxes_ar[:, 2::4] = aspect_ratio * boxes[:, 2::4]
    return boxes_ar


def aspect_ratio_rel(im, aspect_ratio):
    im_h, im_w = im.shape[:2]
    return cv2.resize(im, dsize=(int(round(aspect_ratio * im_w)), im_h))


def im_detect_bbox_hflip(net, cfg, im, target_scale, target_max_size):
    scores_hf, boxes_hf, im_scale = im_detect_bbox(net, cfg, im[:, ::-1, :], target_scale, target_max_size)
    return scores_hf, flip_boxes(boxes_hf, im.shape[1]), im_scale


def im_detect_bbox_scale(net, cfg, im, scale, max_size, hflip=False):
    if hflip:
        return im_detect_bbox_hflip(net, cfg, im, scale, max_size)[:2]
    return im_detect_bbox(net, cfg, im, scale, max_size)[:2]


def im_detect_bbox_aspect_ratio(net, cfg, im, aspect_ratio, hflip=False):
    im_ar = aspect_ratio_rel(im, aspect_ratio)
    if hflip:
        scores_ar, boxes_ar, _ = im_detect_bbox_hflip(net, cfg, im_ar, cfg.TEST.SCALE, cfg.TEST.MAX_SIZE)
    else:
        scores_ar, boxes_ar, _ = im_detect_bbox(net, cfg, im_ar, cfg.TEST.SCALE, cfg.TEST.MAX_SIZE)
    return scores_ar, aspect_ratio_boxes(boxes_ar, 1.0 / aspect_ratio)


def im_detect_bbox_aug(net, cfg, im):
    """UNION of every transform's scores and boxes, the identity last."""
    aug = cfg.TEST.BBOX_AUG
    scores_ts, boxes_ts = [], []
    if aug.H_FLIP:
        s, b, _ = im_detect_bbox_hflip(net, cfg, im, cfg.TEST.SCALE, cfg.TEST.MAX_SIZE)
        scores_ts.append(s), boxes_ts.append(b)
    for scale in aug.SCALES:
        for hflip in (False, True) if aug.SCALE_H_FLIP else (False,):
            s, b = im_detect_bbox_scale(net, cfg, im, scale, aug.MAX_SIZE, hflip)
            scores_ts.append(s), boxes_ts.append(b)
    for aspect_ratio in aug.ASPECT_RATIOS:
        for hflip in (False, True) if aug.ASPECT_RATIO_H_FLIP else (False,):
            s, b = im_detect_bbox_aspect_ratio(net, cfg, im, aspect_ratio, hflip)
            scores_ts.append(s), boxes_ts.append(b)
    s, b, _ = im_detect_bbox(net, cfg, im, cfg.TEST.SCALE, cfg.TEST.MAX_SIZE)
    scores_ts.append(s), boxes_ts.append(b)
    return np.vstack(scores_ts), np.vstack(boxes_ts)


def _head(net, im, scale, max_size, boxes, classes, output):
    blob, im_scale = detectron_prep(im, scale, max_size)
    im_info = np.array([[im.shape[0], im.shape[1], im_scale]], np.float32)
    return net.heads_net(pad_to_stride(blob, net.stride), im_info, boxes, classes)[output]


def flip_heatmaps(heatmaps):
    """keypoint_utils.flip_heatmaps on NHWC heatmaps."""
    heatmaps_flipped = heatmaps.copy()
    for lkp, rkp in COCO_FLIP_MAP.items():
        lid, rid = COCO_KEYPOINTS.index(lkp), COCO_KEYPOINTS.index(rkp)
        heatmaps_flipped[..., rid] = heatmaps[..., lid]
        heatmaps_flipped[..., lid] = heatmaps[..., rid]
    return heatmaps_flipped[:, :, ::-1, :]


def _instance_aug(net, cfg, im, boxes, classes, aug, output):
    """The per-transform outputs of im_detect_mask_aug / im_detect_keypoints_aug (identity first), with
    their down/upscaling tags."""
    test = cfg.TEST
    results = [(_head(net, im, test.SCALE, test.MAX_SIZE, boxes, classes, output), False, False)]

    def hflip_run(image, scale, max_size, image_boxes):
        values = _head(net, image[:, ::-1, :], scale, max_size, flip_boxes(image_boxes, image.shape[1]), classes,
                       output)  # fmt: skip
        return values[:, :, ::-1] if output == "mask_probs" else flip_heatmaps(values)

    if aug.H_FLIP:
        results.append((hflip_run(im, test.SCALE, test.MAX_SIZE, boxes), False, False))
    for scale in aug.SCALES:
        ds, us = scale < test.SCALE, scale > test.SCALE
        results.append((_head(net, im, scale, aug.MAX_SIZE, boxes, classes, output), ds, us))
        if aug.SCALE_H_FLIP:
            results.append((hflip_run(im, scale, aug.MAX_SIZE, boxes), ds, us))
    for aspect_ratio in aug.ASPECT_RATIOS:
        im_ar, boxes_ar = aspect_ratio_rel(im, aspect_ratio), aspect_ratio_boxes(boxes, aspect_ratio)
        results.append((_head(net, im_ar, test.SCALE, test.MAX_SIZE, boxes_ar, classes, output), False, False))
        if aug.ASPECT_RATIO_H_FLIP:
            results.append((hflip_run(im_ar, test.SCALE, test.MAX_SIZE, boxes_ar), False, False))
    return results


def combine_masks(masks_ts, heuristic):
    if heuristic == "SOFT_AVG":
        return np.mean(masks_ts, axis=0)
    if heuristic == "SOFT_MAX":
        return np.amax(masks_ts, axis=0)

    def logit(y):
        return -1.0 * np.log((1.0 - y) / np.maximum(y, 1e-20))

    with np.errstate(divide="ignore", over="ignore"):  # Detectron's own log(0) at probability 1
        return 1.0 / (1.0 + np.exp(-np.mean([logit(y) for y in masks_ts], axis=0)))


def combine_heatmaps(results, boxes, cfg):
    heur_f = np.mean if cfg.TEST.KPS_AUG.HEUR == "HM_AVG" else np.amax
    hms_ts = [r[0] for r in results]
    if not cfg.TEST.KPS_AUG.SCALE_SIZE_DEP:
        return heur_f(hms_ts, axis=0)
    areas = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    sm_objs, l_objs = areas < cfg.TEST.KPS_AUG.AREA_TH, areas >= cfg.TEST.KPS_AUG.AREA_TH
    hms_c = np.zeros_like(hms_ts[0])
    for i in range(hms_c.shape[0]):
        hms_c[i] = heur_f([h[i] for h, ds, us in results if not (sm_objs[i] and ds) and not (l_objs[i] and us)],
                          axis=0)  # fmt: skip
    return hms_c


def im_detect_all(net, cfg, im):
    """Detections (rows by descending score), combined soft masks (N, M, M) and heatmaps (N, S, S, K)."""
    if cfg.TEST.BBOX_AUG.ENABLED:
        scores, boxes = im_detect_bbox_aug(net, cfg, im)
    else:
        scores, boxes, _ = im_detect_bbox(net, cfg, im, cfg.TEST.SCALE, cfg.TEST.MAX_SIZE)
    test = cfg.TEST
    rows = post.by_score(post.box_results_with_nms_and_limit(
        scores, boxes, test.SCORE_THRESH, test.NMS, test.DETECTIONS_PER_IM,
        soft_nms_method=test.SOFT_NMS.METHOD if test.SOFT_NMS.ENABLED else None, soft_nms_sigma=test.SOFT_NMS.SIGMA,
        vote_th=test.BBOX_VOTE.VOTE_TH if test.BBOX_VOTE.ENABLED else None, vote_method=test.BBOX_VOTE.SCORING_METHOD,
    ))[: test.DETECTIONS_PER_IM]  # fmt: skip
    final_boxes = np.array([r[2] for r in rows], np.float32).reshape(-1, 4)
    classes = np.array([r[1] for r in rows], np.int32)
    out = {"rows": rows}
    if cfg.MODEL.MASK_ON:
        aug = test.MASK_AUG if test.MASK_AUG.ENABLED else None
        results = _instance_aug(net, cfg, im, final_boxes, classes, aug, "mask_probs") if aug else [
            (_head(net, im, test.SCALE, test.MAX_SIZE, final_boxes, classes, "mask_probs"), False, False)]
        out["mask_probs"] = combine_masks([r[0] for r in results], test.MASK_AUG.HEUR)
    if cfg.MODEL.KEYPOINTS_ON:
        aug = test.KPS_AUG if test.KPS_AUG.ENABLED else None
        results = _instance_aug(net, cfg, im, final_boxes, classes, aug, "keypoint_heatmaps") if aug else [
            (_head(net, im, test.SCALE, test.MAX_SIZE, final_boxes, classes, "keypoint_heatmaps"), False, False)]
        out["heatmaps"] = combine_heatmaps(results, final_boxes, cfg) if aug else results[0][0]
    return out
