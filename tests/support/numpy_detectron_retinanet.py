"""Detectron's RetinaNet inference (core/test_retinanet.py `_create_cell_anchors` and `im_detect_bbox`)
restated in NumPy from its source, independently of tfdet: it reads the network's output blobs in
Caffe2's layout, `retnet_cls_prob_fpn<l>` (1, A*C, H, W) and `retnet_bbox_pred_fpn<l>` (1, A*4, H, W),
and follows Detectron's dtypes (float32 boxes, float64 cell anchors, float32 NMS). Anchors, box
decoding, clipping and soft-NMS come from the other NumPy references of this folder."""

from collections import defaultdict

import numpy as np

from support import numpy_detectron_postprocess as post
from support import numpy_reference as ref

SOFT_NMS_SCORE_THRESH = 0.0001  # test_retinanet's literal
F0, F1 = np.float32(0.0), np.float32(1.0)


def nms(dets, thresh):
    """cython_nms.nms with its inner loop over later boxes vectorised: float32 areas, overlaps and IoUs
    (C floats), suppression when the IoU, compared as a double, is >= thresh. Indices of the kept rows."""
    dets = dets.astype(np.float32)
    x1, y1, x2, y2, scores = (dets[:, i] for i in range(5))
    areas = (x2 - x1 + F1) * (y2 - y1 + F1)
    order = scores.argsort()[::-1]
    suppressed = np.zeros(len(dets), dtype=bool)
    keep = []
    for _i, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        later = order[_i + 1 :]
        w = np.maximum(F0, np.minimum(x2[i], x2[later]) - np.maximum(x1[i], x1[later]) + F1)
        h = np.maximum(F0, np.minimum(y2[i], y2[later]) - np.maximum(y1[i], y1[later]) + F1)
        inter = w * h
        ovr = inter / (areas[i] + areas[later] - inter)
        suppressed[later[ovr.astype(np.float64) >= thresh]] = True
    return np.array(keep, dtype=np.int64)


def create_cell_anchors(cfg):
    """{level: (A, 4) float64}: per octave, per aspect ratio, one generate_anchors call."""
    k_max, k_min = cfg.FPN.RPN_MAX_LEVEL, cfg.FPN.RPN_MIN_LEVEL
    scales_per_octave = cfg.RETINANET.SCALES_PER_OCTAVE
    num_anchors = scales_per_octave * len(cfg.RETINANET.ASPECT_RATIOS)
    anchors = {}
    for lvl in range(k_min, k_max + 1):
        stride = 2.0**lvl
        cell_anchors = np.zeros((num_anchors, 4))
        a = 0
        for octave in range(scales_per_octave):
            octave_scale = 2 ** (octave / float(scales_per_octave))
            for aspect in cfg.RETINANET.ASPECT_RATIOS:
                sizes = (stride * octave_scale * cfg.RETINANET.ANCHOR_SCALE,)
                cell_anchors[a, :] = ref.anchors(stride, sizes, (aspect,))
                a += 1
        anchors[lvl] = cell_anchors
    return anchors


def im_detect_bbox(cfg, cls_probs, box_preds, im_shape, im_scale, stats=None):
    """Detections (N, 6) = x1, y1, x2, y2, score, class, sorted by score as Detectron returns them.

    cls_probs, box_preds: one blob per level, finest first (batch of one image); im_shape: the
    original image's (height, width); `stats`, if a dict, receives per level the number of
    candidates, the number kept and whether the top-N cut fell between equal scores.
    """
    anchors = create_cell_anchors(cfg)
    k_max, k_min = cfg.FPN.RPN_MAX_LEVEL, cfg.FPN.RPN_MIN_LEVEL
    num_anchors = cfg.RETINANET.SCALES_PER_OCTAVE * len(cfg.RETINANET.ASPECT_RATIOS)
    boxes_all = defaultdict(list)
    for cnt, lvl in enumerate(range(k_min, k_max + 1)):
        stride = 2.0**lvl
        cell_anchors = anchors[lvl]
        cls_prob, box_pred = cls_probs[cnt], box_preds[cnt]
        cls_prob = cls_prob.reshape(
            (cls_prob.shape[0], num_anchors, cls_prob.shape[1] // num_anchors, cls_prob.shape[2], cls_prob.shape[3])
        )
        box_pred = box_pred.reshape((box_pred.shape[0], num_anchors, 4, box_pred.shape[2], box_pred.shape[3]))
        if cfg.RETINANET.SOFTMAX:
            cls_prob = cls_prob[:, :, 1:, :, :]
        cls_prob_ravel = cls_prob.ravel()
        th = cfg.RETINANET.INFERENCE_TH if lvl < k_max else 0.0
        candidate_inds = np.where(cls_prob_ravel > th)[0]
        if stats is not None:
            stats[lvl] = {"candidates": len(candidate_inds)}
        if len(candidate_inds) == 0:
            continue
        pre_nms_topn = min(cfg.RETINANET.PRE_NMS_TOP_N, len(candidate_inds))
        candidate_scores = cls_prob_ravel[candidate_inds]
        inds = np.argpartition(candidate_scores, -pre_nms_topn)[-pre_nms_topn:]
        if stats is not None:
            stats[lvl]["kept"] = pre_nms_topn
            cut = candidate_scores[inds].min()
            left_out_at_cut = np.sum(candidate_scores == cut) - np.sum(candidate_scores[inds] == cut)
            stats[lvl]["tie_at_cut"] = bool(pre_nms_topn < len(candidate_inds) and left_out_at_cut > 0)
        inds = candidate_inds[inds]
        inds_5d = np.array(np.unravel_index(inds, cls_prob.shape)).transpose()
        classes = inds_5d[:, 2]
        anchor_ids, y, x = inds_5d[:, 1], inds_5d[:, 3], inds_5d[:, 4]
        scores = cls_prob[:, anchor_ids, classes, y, x]
        boxes = np.column_stack((x, y, x, y)).astype(dtype=np.float32)
        boxes *= stride
        boxes += cell_anchors[anchor_ids, :]
        box_deltas = box_pred[0, anchor_ids, :, y, x]
        pred_boxes = ref.bbox_transform(boxes, box_deltas) if cfg.TEST.BBOX_REG else boxes
        pred_boxes /= im_scale
        pred_boxes = ref.clip_tiled(pred_boxes, im_shape[0], im_shape[1])
        box_scores = np.zeros((pred_boxes.shape[0], 5))
        box_scores[:, 0:4] = pred_boxes
        box_scores[:, 4] = scores
        for cls in range(1, cfg.MODEL.NUM_CLASSES):
            inds = np.where(classes == cls - 1)[0]
            if len(inds) > 0:
                boxes_all[cls].extend(box_scores[inds, :])
    detections = []
    for cls, boxes in boxes_all.items():
        cls_dets = np.vstack(boxes).astype(dtype=np.float32)
        if cfg.TEST.SOFT_NMS.ENABLED:
            cls_dets, keep = post.soft_nms(
                cls_dets, sigma=cfg.TEST.SOFT_NMS.SIGMA, overlap_thresh=cfg.TEST.NMS,
                score_thresh=SOFT_NMS_SCORE_THRESH, method=cfg.TEST.SOFT_NMS.METHOD,
            )  # fmt: skip
        else:
            keep = nms(cls_dets, cfg.TEST.NMS)
            cls_dets = cls_dets[keep, :]
        out = np.zeros((len(keep), 6))
        out[:, 0:5] = cls_dets
        out[:, 5].fill(cls)
        detections.append(out)
    detections = np.vstack(detections)
    inds = np.argsort(-detections[:, 4])
    return detections[inds[0 : cfg.TEST.DETECTIONS_PER_IM], :]
