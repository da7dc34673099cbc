"""Detectron's detection post-processing restated in NumPy from its source, independently of tfdet:
utils/cython_nms.pyx `soft_nms`, utils/boxes.py `box_voting` (with cython_bbox `bbox_overlaps`),
and core/test.py `box_results_with_nms_and_limit`. Float32 arithmetic where the Cython code uses C
floats; every constant is an explicit np.float32 so that no promotion to float64 sneaks in."""

import numpy as np

from support import numpy_reference as ref

F1 = np.float32(1.0)
SOFT_NMS_METHODS = {"hard": 0, "linear": 1, "gaussian": 2}


def soft_nms(dets, sigma=0.5, overlap_thresh=0.3, score_thresh=0.001, method="linear"):
    """cython_nms.soft_nms, line by line: (dets (n, 5) in output order, indices into the input)."""
    boxes = np.array(dets, np.float32, copy=True)
    method = SOFT_NMS_METHODS[method]
    sigma, overlap_thresh, score_thresh = np.float32(sigma), np.float32(overlap_thresh), np.float32(score_thresh)
    n = boxes.shape[0]
    inds = np.arange(n)
    for i in range(n):
        if i >= n:
            break
        maxscore, maxpos = boxes[i, 4], i
        tx1, ty1, tx2, ty2, ts = boxes[i, :5].copy()
        ti = inds[i]
        for pos in range(i + 1, n):
            if maxscore < boxes[pos, 4]:
                maxscore, maxpos = boxes[pos, 4], pos
        boxes[i, :5] = boxes[maxpos, :5]
        inds[i] = inds[maxpos]
        boxes[maxpos, :5] = (tx1, ty1, tx2, ty2, ts)
        inds[maxpos] = ti
        tx1, ty1, tx2, ty2, ts = boxes[i, :5].copy()
        pos = i + 1
        while pos < n:
            x1, y1, x2, y2 = boxes[pos, :4]
            area = (x2 - x1 + F1) * (y2 - y1 + F1)
            iw = min(tx2, x2) - max(tx1, x1) + F1
            if iw > 0:
                ih = min(ty2, y2) - max(ty1, y1) + F1
                if ih > 0:
                    ua = np.float32((tx2 - tx1 + F1) * (ty2 - ty1 + F1) + area - iw * ih)
                    ov = np.float32(iw * ih / ua)
                    if method == 1:
                        weight = F1 - ov if ov > overlap_thresh else F1
                    elif method == 2:
                        weight = np.float32(np.exp(np.float64(-(ov * ov) / sigma)))
                    else:
                        weight = np.float32(0.0) if ov > overlap_thresh else F1
                    boxes[pos, 4] = np.float32(weight * boxes[pos, 4])
                    if boxes[pos, 4] < score_thresh:
                        boxes[pos, :5] = boxes[n - 1, :5]
                        inds[pos] = inds[n - 1]
                        n -= 1
                        pos -= 1
            pos += 1
    return boxes[:n], inds[:n]


def bbox_overlaps(boxes, query_boxes):
    """cython_bbox.bbox_overlaps: (N, K) float32 IoUs with +1 areas."""
    boxes, query_boxes = np.asarray(boxes, np.float32), np.asarray(query_boxes, np.float32)
    overlaps = np.zeros((len(boxes), len(query_boxes)), np.float32)
    for k, q in enumerate(query_boxes):
        box_area = (q[2] - q[0] + F1) * (q[3] - q[1] + F1)
        for n, b in enumerate(boxes):
            iw = min(b[2], q[2]) - max(b[0], q[0]) + F1
            if iw > 0:
                ih = min(b[3], q[3]) - max(b[1], q[1]) + F1
                if ih > 0:
                    ua = np.float32((b[2] - b[0] + F1) * (b[3] - b[1] + F1) + box_area - iw * ih)
                    overlaps[n, k] = iw * ih / ua
    return overlaps


def box_voting(top_dets, all_dets, thresh, scoring_method="ID", beta=1.0):
    """utils/boxes.py box_voting, as written there (float32 arrays, numpy's own reductions)."""
    top_dets_out = top_dets.copy()
    all_boxes, all_scores = all_dets[:, :4], all_dets[:, 4]
    overlaps = bbox_overlaps(top_dets[:, :4], all_boxes)
    for k in range(top_dets_out.shape[0]):
        inds = np.where(overlaps[k] >= thresh)[0]
        ws = all_scores[inds]
        top_dets_out[k, :4] = np.average(all_boxes[inds, :], axis=0, weights=ws)
        if scoring_method == "TEMP_AVG":
            p = np.vstack((ws, 1.0 - ws))
            x_exp = np.exp(np.log(p / np.max(p, axis=0)) / beta)
            top_dets_out[k, 4] = (x_exp / np.sum(x_exp, axis=0))[0].mean()
        elif scoring_method == "AVG":
            top_dets_out[k, 4] = ws.mean()
        elif scoring_method == "IOU_AVG":
            top_dets_out[k, 4] = np.average(ws, weights=overlaps[k, inds])
        elif scoring_method == "GENERALIZED_AVG":
            top_dets_out[k, 4] = np.mean(ws**beta) ** (1.0 / beta)
        elif scoring_method == "QUASI_SUM":
            top_dets_out[k, 4] = ws.sum() / float(len(ws)) ** beta
        elif scoring_method != "ID":
            raise NotImplementedError(scoring_method)
    return top_dets_out


def box_results_with_nms_and_limit(scores, boxes, score_thresh, nms, detections_per_im, soft_nms_method=None,
                                   soft_nms_sigma=0.5, vote_th=None, vote_method="ID"):  # fmt: skip
    """core/test.py: scores (R, C), boxes (R, 4C) -> [(score, class, box (4,))] in Detectron's order
    (class by class, each in its NMS output order), after the DETECTIONS_PER_IM limit."""
    num_classes = scores.shape[1]
    cls_boxes = [np.zeros((0, 5), np.float32) for _ in range(num_classes)]
    for j in range(1, num_classes):
        inds = np.where(scores[:, j] > np.float32(score_thresh))[0]
        dets_j = np.hstack((boxes[inds, j * 4 : (j + 1) * 4], scores[inds, j, None])).astype(np.float32)
        if soft_nms_method is not None:
            nms_dets, _ = soft_nms(dets_j, soft_nms_sigma, nms, 0.0001, soft_nms_method) if len(dets_j) else (dets_j, [])
        else:
            keep = ref.nms(dets_j, nms) if len(dets_j) else []
            nms_dets = dets_j[keep, :]
        if vote_th is not None and len(nms_dets):
            nms_dets = box_voting(nms_dets, dets_j, vote_th, vote_method)
        cls_boxes[j] = nms_dets
    if detections_per_im > 0:
        image_scores = np.hstack([cls_boxes[j][:, -1] for j in range(1, num_classes)])
        if len(image_scores) > detections_per_im:
            image_thresh = np.sort(image_scores)[-detections_per_im]
            for j in range(1, num_classes):
                cls_boxes[j] = cls_boxes[j][cls_boxes[j][:, -1] >= image_thresh]
    return [(row[4], j, row[:4]) for j in range(1, num_classes) for row in cls_boxes[j]]


def by_score(rows):
    """Detectron's rows in tfdet's order: descending score, then class, then Detectron's order (stable)."""
    return sorted(rows, key=lambda row: -row[0])
