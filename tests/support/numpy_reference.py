"""Float64/float32 numpy implementations written from Detectron's definitions, used as test oracles.

They follow reference/detectron.md and Detectron's utils/boxes.py, generate_anchors.py,
cython_nms.pyx, ops/generate_proposals.py, core/test.py (box_results_with_nms_and_limit), utils/blob.py
(prep_im_for_blob) and utils/keypoints.py (heatmaps_to_keypoints) line by line (loops where Detectron loops),
and share no code with tfdet. `clustered_boxes` draws the overlapping boxes the NMS tests feed both sides.
"""

import math

import cv2
import numpy as np

SCALE_CLIP = math.log(1000.0 / 16.0)


def anchors(stride, sizes, aspect_ratios):
    """Detectron's generate_anchors, loop by loop: ratio enumeration, then scale enumeration."""

    def whctrs(a):
        w = a[2] - a[0] + 1
        h = a[3] - a[1] + 1
        return w, h, a[0] + 0.5 * (w - 1), a[1] + 0.5 * (h - 1)

    def make(w, h, cx, cy):
        return [cx - 0.5 * (w - 1), cy - 0.5 * (h - 1), cx + 0.5 * (w - 1), cy + 0.5 * (h - 1)]

    base = np.array([1, 1, stride, stride], dtype=float) - 1
    w, h, cx, cy = whctrs(base)
    out = []
    for ratio in aspect_ratios:
        ws = np.round(np.sqrt(w * h / ratio))
        hs = np.round(ws * ratio)
        ratio_anchor = make(ws, hs, cx, cy)
        rw, rh, rcx, rcy = whctrs(ratio_anchor)
        for size in sizes:
            scale = size / stride
            out.append(make(rw * scale, rh * scale, rcx, rcy))
    return np.array(out)


def bbox_transform(boxes, deltas, weights=(1.0, 1.0, 1.0, 1.0)):
    """Detectron's bbox_transform for (N, 4) boxes and (N, 4k) deltas."""
    widths = boxes[:, 2] - boxes[:, 0] + 1.0
    heights = boxes[:, 3] - boxes[:, 1] + 1.0
    ctr_x = boxes[:, 0] + 0.5 * widths
    ctr_y = boxes[:, 1] + 0.5 * heights
    wx, wy, ww, wh = weights
    dx = deltas[:, 0::4] / wx
    dy = deltas[:, 1::4] / wy
    dw = np.minimum(deltas[:, 2::4] / ww, SCALE_CLIP)
    dh = np.minimum(deltas[:, 3::4] / wh, SCALE_CLIP)
    pcx = dx * widths[:, None] + ctr_x[:, None]
    pcy = dy * heights[:, None] + ctr_y[:, None]
    pw = np.exp(dw) * widths[:, None]
    ph = np.exp(dh) * heights[:, None]
    out = np.zeros(deltas.shape, dtype=deltas.dtype)
    out[:, 0::4] = pcx - 0.5 * pw
    out[:, 1::4] = pcy - 0.5 * ph
    out[:, 2::4] = pcx + 0.5 * pw - 1
    out[:, 3::4] = pcy + 0.5 * ph - 1
    return out


def bbox_transform_inv(boxes, gt, weights=(1.0, 1.0, 1.0, 1.0)):
    """Detectron's bbox_transform_inv."""
    ew = boxes[:, 2] - boxes[:, 0] + 1.0
    eh = boxes[:, 3] - boxes[:, 1] + 1.0
    ex = boxes[:, 0] + 0.5 * ew
    ey = boxes[:, 1] + 0.5 * eh
    gw = gt[:, 2] - gt[:, 0] + 1.0
    gh = gt[:, 3] - gt[:, 1] + 1.0
    gx = gt[:, 0] + 0.5 * gw
    gy = gt[:, 1] + 0.5 * gh
    wx, wy, ww, wh = weights
    return np.stack(
        [wx * (gx - ex) / ew, wy * (gy - ey) / eh, ww * np.log(gw / ew), wh * np.log(gh / eh)], axis=1
    )


def clip_tiled(boxes, height, width):
    """Detectron's clip_tiled_boxes."""
    out = boxes.copy()
    out[:, 0::4] = np.maximum(np.minimum(out[:, 0::4], width - 1), 0)
    out[:, 1::4] = np.maximum(np.minimum(out[:, 1::4], height - 1), 0)
    out[:, 2::4] = np.maximum(np.minimum(out[:, 2::4], width - 1), 0)
    out[:, 3::4] = np.maximum(np.minimum(out[:, 3::4], height - 1), 0)
    return out


def nms(dets, thresh):
    """Detectron's Cython NMS: float32 arithmetic, suppress when ovr >= thresh (a Python float)."""
    dets = dets.astype(np.float32)
    x1, y1, x2, y2, scores = (dets[:, i] for i in range(5))
    areas = (x2 - x1 + np.float32(1)) * (y2 - y1 + np.float32(1))
    order = np.argsort(-scores, kind="stable")
    suppressed = np.zeros(len(dets), dtype=bool)
    keep = []
    for _i, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        for j in order[_i + 1 :]:
            if suppressed[j]:
                continue
            w = max(np.float32(0), min(x2[i], x2[j]) - max(x1[i], x1[j]) + np.float32(1))
            h = max(np.float32(0), min(y2[i], y2[j]) - max(y1[i], y1[j]) + np.float32(1))
            inter = np.float32(w * h)
            ovr = np.float32(inter / (areas[i] + areas[j] - inter))
            if float(ovr) >= thresh:
                suppressed[j] = True
    return np.array(keep, dtype=np.int64)


def proposals_one_image(scores, deltas, cell_anchors, stride, im_info, pre_n, post_n, nms_thresh, min_size):
    """Detectron's GenerateProposalsOp.proposals_for_one_image for an NHWC level.

    scores (H, W, A), deltas (H, W, 4A). Returns proposals (n, 4) and scores (n,).
    """
    height, width = scores.shape[:2]
    sx, sy = np.meshgrid(np.arange(width) * stride, np.arange(height) * stride)
    shifts = np.stack([sx.ravel(), sy.ravel(), sx.ravel(), sy.ravel()], axis=1)
    all_anchors = (cell_anchors[None] + shifts[:, None]).reshape(-1, 4)
    deltas = deltas.reshape(-1, 4)
    scores = scores.reshape(-1)
    order = np.argsort(-scores, kind="stable")
    if 0 < pre_n < len(scores):
        order = order[:pre_n]
    props = bbox_transform(all_anchors[order].astype(np.float32), deltas[order].astype(np.float32))
    props = clip_tiled(props, im_info[0], im_info[1])
    sc = scores[order]
    ws_orig = (props[:, 2] - props[:, 0]) / im_info[2] + 1
    hs_orig = (props[:, 3] - props[:, 1]) / im_info[2] + 1
    ms = max(min_size, 1)
    ws = props[:, 2] - props[:, 0] + 1
    hs = props[:, 3] - props[:, 1] + 1
    keep = np.where(
        (ws_orig >= ms) & (hs_orig >= ms) & (props[:, 0] + ws / 2.0 < im_info[1]) & (props[:, 1] + hs / 2.0 < im_info[0])
    )[0]
    props, sc = props[keep], sc[keep]
    keep = nms(np.hstack([props, sc[:, None]]), nms_thresh)[:post_n]
    return props[keep], sc[keep]


def clustered_boxes(rng, n, clusters=12):
    """Boxes jittered around a few centres, so that many overlap near typical thresholds."""
    centres = rng.uniform(0, 400, (clusters, 2))
    pick = centres[rng.integers(0, clusters, n)]
    xy = pick + rng.normal(0, 8, (n, 2))
    wh = rng.uniform(20, 80, (n, 2))
    # Integer-ish coordinates make exact IoU ties common, as with real clipped boxes.
    return np.round(np.concatenate([xy, xy + wh], axis=1) * 2) / 2


def detectron_detections(scores, boxes, score_thresh, nms_thresh, limit):
    """Detectron's box_results_with_nms_and_limit, returning (score, class, box) rows by score."""
    rows = []
    for j in range(1, scores.shape[1]):
        inds = np.where(scores[:, j] > np.float32(score_thresh))[0]
        dets = np.hstack([boxes[inds, j], scores[inds, j, None]]).astype(np.float32)
        for k in nms(dets, nms_thresh) if len(inds) else []:
            rows.append((dets[k, 4], j, dets[k, :4]))
    rows.sort(key=lambda r: -r[0])
    if len(rows) > limit:
        cut = rows[limit - 1][0]
        rows = [r for r in rows if r[0] >= cut]
    return rows


PIXEL_MEANS = np.array([[[102.9801, 115.9465, 122.7717]]])  # Detectron's default (BGR)


def detectron_prep(im, target_size, max_size):
    """Detectron's utils/blob.py::prep_im_for_blob, line for line."""
    im = im.astype(np.float32, copy=False)
    im -= PIXEL_MEANS
    im_size_min, im_size_max = np.min(im.shape[0:2]), np.max(im.shape[0:2])
    im_scale = float(target_size) / float(im_size_min)
    if np.round(im_scale * im_size_max) > max_size:
        im_scale = float(max_size) / float(im_size_max)
    return cv2.resize(im, None, None, fx=im_scale, fy=im_scale, interpolation=cv2.INTER_LINEAR), im_scale


def detectron_heatmaps_to_keypoints(maps, rois, min_size=0):
    """detectron/utils/keypoints.py::heatmaps_to_keypoints with NHWC `maps`; returns (N, K, 4)."""
    offset_x, offset_y = rois[:, 0], rois[:, 1]
    widths = np.maximum(rois[:, 2] - rois[:, 0], 1)
    heights = np.maximum(rois[:, 3] - rois[:, 1], 1)
    widths_ceil, heights_ceil = np.ceil(widths), np.ceil(heights)
    num_keypoints = maps.shape[-1]
    xy_preds = np.zeros((len(rois), 4, num_keypoints), dtype=np.float32)
    for i in range(len(rois)):
        if min_size > 0:
            roi_map_width = int(np.maximum(widths_ceil[i], min_size))
            roi_map_height = int(np.maximum(heights_ceil[i], min_size))
        else:
            roi_map_width, roi_map_height = widths_ceil[i], heights_ceil[i]
        width_correction = widths[i] / roi_map_width
        height_correction = heights[i] / roi_map_height
        roi_map = cv2.resize(
            maps[i], (int(roi_map_width), int(roi_map_height)), interpolation=cv2.INTER_CUBIC
        ).reshape(int(roi_map_height), int(roi_map_width), num_keypoints)
        roi_map = np.transpose(roi_map, [2, 0, 1])
        roi_map_probs = detectron_scores_to_probs(roi_map.copy())
        w = roi_map.shape[2]
        for k in range(num_keypoints):
            pos = roi_map[k, :, :].argmax()
            x_int = pos % w
            y_int = (pos - x_int) // w
            xy_preds[i, 0, k] = (x_int + 0.5) * width_correction + offset_x[i]
            xy_preds[i, 1, k] = (y_int + 0.5) * height_correction + offset_y[i]
            xy_preds[i, 2, k] = roi_map[k, y_int, x_int]
            xy_preds[i, 3, k] = roi_map_probs[k, y_int, x_int]
    return np.transpose(xy_preds, [0, 2, 1])


def detectron_scores_to_probs(scores):
    """detectron/utils/keypoints.py::scores_to_probs: spatial softmax of each CxHxW channel."""
    for c in range(scores.shape[0]):
        temp = scores[c, :, :]
        max_score = temp.max()
        scores[c, :, :] = np.exp(temp - max_score) / np.sum(np.exp(temp - max_score))
    return scores
