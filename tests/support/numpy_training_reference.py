"""Numpy oracles for training targets, written from Detectron's numpy code (one image at a time, as Detectron).

They follow `roi_data/rpn.py::_get_rpn_blobs`, `datasets/json_dataset.py` (`_merge_proposal_boxes_into_roidb`,
`_add_class_assignments`), `datasets/roidb.py::_compute_targets`, `roi_data/fast_rcnn.py` (`_sample_rois`,
`_expand_bbox_targets`), `roi_data/mask_rcnn.py` with `utils/segms.py` (pycocotools rasterisation),
`roi_data/keypoint_rcnn.py` and `utils/keypoints.py::keypoints_to_heatmap_labels`, and share no code with
tfdet. Random draws use a numpy Generator; tests compare their deterministic parts.
"""

import numpy as np
import pycocotools.mask as mask_util

from support.numpy_reference import bbox_transform_inv


def bbox_overlaps(boxes, query_boxes):
    """Detectron's cython `bbox_overlaps` in float32: IoU with +1 areas, 0 without intersection."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    query_boxes = np.asarray(query_boxes, np.float32).reshape(-1, 4)
    overlaps = np.zeros((len(boxes), len(query_boxes)), np.float32)
    for k, q in enumerate(query_boxes):
        query_area = (q[2] - q[0] + 1) * (q[3] - q[1] + 1)
        for n, b in enumerate(boxes):
            iw = min(b[2], q[2]) - max(b[0], q[0]) + 1
            if iw > 0:
                ih = min(b[3], q[3]) - max(b[1], q[1]) + 1
                if ih > 0:
                    union = (b[2] - b[0] + 1) * (b[3] - b[1] + 1) + query_area - iw * ih
                    overlaps[n, k] = iw * ih / union
    return overlaps


# ------------------------------------------------------------------------------------------------ RPN


def rpn_labels_before_sampling(im_height, im_width, anchors, gt_boxes, positive_overlap, negative_overlap,
                               straddle_thresh):
    """The deterministic half of `_get_rpn_blobs` for one image (non-crowd gt in input pixels).

    Returns a dict over all anchors: inside (bool), fg_candidates (labels == 1 before subsampling),
    bg_candidates (inside and best IoU < negative_overlap), targets (encode with the best gt for every
    anchor, used where an anchor is foreground). An image without gt has best IoU 0 everywhere (Detectron
    never sees one: its roidb filter drops such images).
    """
    anchors = np.asarray(anchors, np.float32)
    gt_boxes = np.asarray(gt_boxes, np.float32).reshape(-1, 4)
    if straddle_thresh >= 0:
        inds_inside = np.where(
            (anchors[:, 0] >= -straddle_thresh) & (anchors[:, 1] >= -straddle_thresh)
            & (anchors[:, 2] < im_width + straddle_thresh) & (anchors[:, 3] < im_height + straddle_thresh)
        )[0]
    else:
        inds_inside = np.arange(len(anchors))
    inside_anchors = anchors[inds_inside]
    labels = -np.ones(len(inds_inside), np.int32)
    anchor_to_gt_max = np.zeros(len(inds_inside), np.float32)
    anchor_to_gt_argmax = np.zeros(len(inds_inside), np.int64)
    if len(gt_boxes) > 0:
        overlap = bbox_overlaps(inside_anchors, gt_boxes)
        anchor_to_gt_argmax = overlap.argmax(axis=1)
        anchor_to_gt_max = overlap[np.arange(len(inds_inside)), anchor_to_gt_argmax]
        gt_to_anchor_argmax = overlap.argmax(axis=0)
        gt_to_anchor_max = overlap[gt_to_anchor_argmax, np.arange(overlap.shape[1])]
        anchors_with_max_overlap = np.where(overlap == gt_to_anchor_max)[0]
        labels[anchors_with_max_overlap] = 1
        labels[anchor_to_gt_max >= positive_overlap] = 1

    def unmap(values, fill):
        out = np.full((len(anchors),) + values.shape[1:], fill, values.dtype)
        out[inds_inside] = values
        return out

    targets = np.zeros((len(inds_inside), 4), np.float32)
    if len(gt_boxes) > 0:
        targets = bbox_transform_inv(inside_anchors, gt_boxes[anchor_to_gt_argmax]).astype(np.float32)
    return {
        "inside": unmap(np.ones(len(inds_inside), bool), False),
        "fg_candidates": unmap(labels == 1, False),
        "bg_candidates": unmap(anchor_to_gt_max < negative_overlap, False),
        "targets": unmap(targets, 0.0),
    }


def rpn_blobs(im_height, im_width, anchors, gt_boxes, positive_overlap, negative_overlap, straddle_thresh,
              batch_size_per_im, fg_fraction, rng):
    """`_get_rpn_blobs` for one image: labels, bbox targets, inside and outside weights over all anchors."""
    pre = rpn_labels_before_sampling(im_height, im_width, anchors, gt_boxes, positive_overlap,
                                     negative_overlap, straddle_thresh)
    labels = np.where(pre["fg_candidates"], 1, -1).astype(np.int32)
    num_fg = int(fg_fraction * batch_size_per_im)
    fg_inds = np.where(labels == 1)[0]
    if len(fg_inds) > num_fg:
        labels[rng.choice(fg_inds, size=len(fg_inds) - num_fg, replace=False)] = -1
    fg_inds = np.where(labels == 1)[0]
    num_bg = batch_size_per_im - np.sum(labels == 1)
    bg_inds = np.where(pre["bg_candidates"])[0]
    if len(bg_inds) > num_bg:
        labels[bg_inds[rng.integers(len(bg_inds), size=num_bg)]] = 0
    bbox_targets = np.zeros((len(anchors), 4), np.float32)
    bbox_targets[fg_inds] = pre["targets"][fg_inds]
    inside = np.zeros((len(anchors), 4), np.float32)
    inside[labels == 1] = 1.0
    outside = np.zeros((len(anchors), 4), np.float32)
    num_examples = np.sum(labels >= 0)
    if num_examples > 0:
        outside[labels >= 0] = 1.0 / num_examples
    return {"labels": labels, "bbox_targets": bbox_targets, "inside": inside, "outside": outside}


# ------------------------------------------------------------------------------------- Fast R-CNN RoIs


def roidb_entry(gt_boxes, gt_classes, is_crowd, proposals, num_classes, bbox_thresh, bbox_reg_weights,
                cls_agnostic=False):
    """One image's roidb after `add_proposals(crowd_thresh=0)` and `add_bbox_regression_targets`
    (original pixels): boxes, max_overlaps, max_classes, box_to_gt_ind_map, bbox_targets (class, deltas)."""
    gt_boxes = np.asarray(gt_boxes, np.float32).reshape(-1, 4)
    gt_classes = np.asarray(gt_classes, np.int32)
    is_crowd = np.asarray(is_crowd, bool)
    proposals = np.asarray(proposals, np.float32).reshape(-1, 4)
    num_gt = len(gt_boxes)
    gt_overlaps = np.zeros((num_gt, num_classes), np.float32)
    for ix in range(num_gt):
        if is_crowd[ix]:
            gt_overlaps[ix, :] = -1.0
        else:
            gt_overlaps[ix, gt_classes[ix]] = 1.0
    prop_overlaps = np.zeros((len(proposals), num_classes), np.float32)
    prop_map = -np.ones(len(proposals), np.int32)
    if num_gt > 0 and len(proposals) > 0:
        overlap = bbox_overlaps(proposals, gt_boxes)
        argmaxes = overlap.argmax(axis=1)
        maxes = overlap.max(axis=1)
        hit = np.where(maxes > 0)[0]
        prop_overlaps[hit, gt_classes[argmaxes[hit]]] = maxes[hit]
        prop_map[hit] = argmaxes[hit]
    boxes = np.concatenate([gt_boxes, proposals])
    overlaps = np.concatenate([gt_overlaps, prop_overlaps])
    entry_gt_classes = np.concatenate([gt_classes, np.zeros(len(proposals), np.int32)])
    entry_crowd = np.concatenate([is_crowd, np.zeros(len(proposals), bool)])
    max_overlaps = overlaps.max(axis=1)
    max_classes = overlaps.argmax(axis=1)

    targets = np.zeros((len(boxes), 5), np.float32)
    gt_inds = np.where((entry_gt_classes > 0) & ~entry_crowd)[0]
    if len(gt_inds) > 0:
        ex_inds = np.where(max_overlaps >= bbox_thresh)[0]
        ex_gt = bbox_overlaps(boxes[ex_inds], boxes[gt_inds])
        assignment = ex_gt.argmax(axis=1)
        targets[ex_inds, 0] = 1 if cls_agnostic else max_classes[ex_inds]
        targets[ex_inds, 1:] = bbox_transform_inv(boxes[ex_inds], boxes[gt_inds[assignment]], bbox_reg_weights)
    return {
        "boxes": boxes,
        "max_overlaps": max_overlaps,
        "max_classes": max_classes,
        "box_to_gt_ind_map": np.concatenate([np.arange(num_gt, dtype=np.int32), prop_map]),
        "bbox_targets": targets,
    }


def fg_bg_candidates(entry, fg_thresh, bg_thresh_hi, bg_thresh_lo):
    """The index sets `_sample_rois` draws from."""
    overlaps = entry["max_overlaps"]
    return (np.where(overlaps >= fg_thresh)[0],
            np.where((overlaps < bg_thresh_hi) & (overlaps >= bg_thresh_lo))[0])


def expand_bbox_targets(bbox_target_data, num_bbox_reg_classes):
    """`_expand_bbox_targets`: (class, deltas) rows -> 4-of-4K targets and inside weights."""
    classes = bbox_target_data[:, 0]
    targets = np.zeros((len(classes), 4 * num_bbox_reg_classes), np.float32)
    inside = np.zeros_like(targets)
    for ind in np.where(classes > 0)[0]:
        start = 4 * int(classes[ind])
        targets[ind, start:start + 4] = bbox_target_data[ind, 1:]
        inside[ind, start:start + 4] = 1.0
    return targets, inside


# ------------------------------------------------------------------------------------------- Masks


def polys_to_mask_wrt_box(polygons, box, resolution):
    """`segms.polys_to_mask_wrt_box`: the polygons rasterised by pycocotools in the box's M x M grid."""
    w = max(box[2] - box[0], 1)
    h = max(box[3] - box[1], 1)
    normalised = []
    for poly in polygons:
        p = np.array(poly, dtype=np.float32)
        p[0::2] = (p[0::2] - box[0]) * resolution / w
        p[1::2] = (p[1::2] - box[1]) * resolution / h
        normalised.append(p.tolist())
    rle = mask_util.frPyObjects(normalised, resolution, resolution)
    return (np.sum(mask_util.decode(rle), axis=2) > 0).astype(np.int32)


def polys_to_boxes(polys):
    """`segms.polys_to_boxes`: the tight box of each instance's polygon coordinates."""
    return np.array([[min(min(p[0::2]) for p in poly), min(min(p[1::2]) for p in poly),
                      max(max(p[0::2]) for p in poly), max(max(p[1::2]) for p in poly)] for poly in polys],
                    np.float32).reshape(-1, 4)


def mask_targets(fg_rois, polys, resolution):
    """`add_mask_rcnn_blobs` for foreground RoIs (original pixels) against non-crowd instances' polygons:
    the matched instance (best IoU with its polygon box) and the M x M target of each RoI."""
    overlaps = bbox_overlaps(fg_rois, polys_to_boxes(polys))
    matches = np.argmax(overlaps, axis=1)
    masks = np.stack([polys_to_mask_wrt_box(polys[m], roi, resolution) for roi, m in zip(fg_rois, matches)])
    return matches, masks


def rasterise(polys, height, width):
    """Full-image instance masks (G, H, W) uint8 as pycocotools rasterises polygons."""
    out = np.zeros((len(polys), height, width), np.uint8)
    for i, poly in enumerate(polys):
        rle = mask_util.frPyObjects(poly, height, width)
        out[i] = np.sum(mask_util.decode(rle), axis=2) > 0
    return out


# ---------------------------------------------------------------------------------------- Keypoints


def keypoint_fg_candidates(entry, gt_keypoints, fg_thresh):
    """`add_keypoint_rcnn_blobs` before its draw: candidate rows with max_overlaps >= fg_thresh whose
    matched gt (`gt_inds[box_to_gt_ind_map]`) has a visible keypoint within the row's box.

    gt_keypoints: (G, 3, K) Detectron layout (x row, y row, visibility row).
    """
    gt_keypoints = np.asarray(gt_keypoints)
    boxes = entry["boxes"]
    gt_inds = np.arange(len(gt_keypoints))
    kps = gt_keypoints[gt_inds[entry["box_to_gt_ind_map"]]]
    x_within = (kps[:, 0, :] >= boxes[:, 0:1]) & (kps[:, 0, :] <= boxes[:, 2:3])
    y_within = (kps[:, 1, :] >= boxes[:, 1:2]) & (kps[:, 1, :] <= boxes[:, 3:4])
    is_visible = np.sum((kps[:, 2, :] > 0) & x_within & y_within, axis=1) > 0
    return np.where((entry["max_overlaps"] >= fg_thresh) & is_visible)[0]


def keypoints_to_heatmap_labels(keypoints, rois, heatmap_size):
    """`keypoints_to_heatmap_labels`: keypoints (N, 3, K), rois (N, 4) -> (heatmaps, weights) (N, K)."""
    keypoints = np.asarray(keypoints)
    rois = np.asarray(rois, np.float32)
    heatmaps = np.zeros((len(rois), keypoints.shape[2]), np.float32)
    weights = np.zeros_like(heatmaps)
    offset_x, offset_y = rois[:, 0], rois[:, 1]
    scale_x = heatmap_size / (rois[:, 2] - rois[:, 0])
    scale_y = heatmap_size / (rois[:, 3] - rois[:, 1])
    for kp in range(keypoints.shape[2]):
        vis = keypoints[:, 2, kp] > 0
        x = keypoints[:, 0, kp].astype(np.float32)
        y = keypoints[:, 1, kp].astype(np.float32)
        x_boundary = np.where(x == rois[:, 2])[0]
        y_boundary = np.where(y == rois[:, 3])[0]
        x = np.floor((x - offset_x) * scale_x)
        x[x_boundary] = heatmap_size - 1
        y = np.floor((y - offset_y) * scale_y)
        y[y_boundary] = heatmap_size - 1
        valid = ((x >= 0) & (y >= 0) & (x < heatmap_size) & (y < heatmap_size) & vis).astype(np.int32)
        heatmaps[:, kp] = (y * heatmap_size + x) * valid
        weights[:, kp] = valid
    return heatmaps.astype(np.int32), weights
