"""Numpy oracles for RetinaNet training, written from Detectron's and Caffe2's source (share no code with tfdet).

They follow `roi_data/retinanet.py` (`add_retinanet_blobs`, `_get_retinanet_blobs`), `roi_data/data_utils.py`
(`get_field_of_anchors`, `compute_targets`) and the Caffe2 ops of `modules/detectron/`
(`sigmoid_focal_loss_op.cu`, `softmax_focal_loss_op.cu`, `select_smooth_l1_loss_op.cu`), forward kernels and
hand-written gradient kernels, in Caffe2's NCHW layout. Blobs keep Detectron's names and shapes.
"""

import math

import numpy as np

from support.numpy_reference import anchors as generate_anchors
from support.numpy_reference import bbox_transform_inv
from support.numpy_training_reference import bbox_overlaps

FLT_MIN = np.finfo(np.float32).tiny


def field_of_anchors(stride, anchor_size, aspect_ratio, max_size, coarsest_stride):
    """`get_field_of_anchors` for one (octave, aspect) cell anchor: (field_size**2, 4) float32, field_size."""
    cell = generate_anchors(stride, (anchor_size,), (aspect_ratio,))
    fpn_max_size = coarsest_stride * np.ceil(max_size / float(coarsest_stride))
    field_size = int(np.ceil(fpn_max_size / float(stride)))
    shifts = np.arange(0, field_size) * stride
    shift_x, shift_y = np.meshgrid(shifts, shifts)
    shift_x, shift_y = shift_x.ravel(), shift_y.ravel()
    shifts = np.vstack((shift_x, shift_y, shift_x, shift_y)).transpose()
    field = cell.reshape((1, 1, 4)) + shifts.reshape((1, -1, 4)).transpose((1, 0, 2))
    return field.reshape((-1, 4)).astype(np.float32), field_size


def all_foas(min_level, max_level, scales_per_octave, aspect_ratios, anchor_scale, max_size, coarsest_stride):
    """The foas of `add_retinanet_blobs`: dicts (anchors, stride, field_size, octave, aspect), level-major."""
    foas = []
    for lvl in range(min_level, max_level + 1):
        stride = 2.0**lvl
        for octave in range(scales_per_octave):
            octave_scale = 2 ** (octave / float(scales_per_octave))
            for idx in range(len(aspect_ratios)):
                anchors, size = field_of_anchors(
                    stride, stride * octave_scale * anchor_scale, aspect_ratios[idx], max_size, coarsest_stride
                )
                foas.append(dict(anchors=anchors, stride=stride, field_size=size, octave=octave, aspect=idx))
    return foas


def image_blobs(foas, gt_boxes, gt_classes, blob_width, blob_height, num_classes, positive_overlap,
                negative_overlap, class_specific):
    """`_get_retinanet_blobs` for one image (non-crowd gt in input pixels, at least one: Detectron asserts).

    Returns (per-foa dicts of retnet_cls_labels (1, 1, h, w), retnet_roi_bbox_targets (M, 4),
    retnet_roi_fg_bbox_locs (M, 4) = [0, l, y, x]), fg_num (num_fg + 1), bg_num, and `debug`: the uncropped
    labels of the whole field, fg_inds, num_fg, num_bg. As in Detectron, the fg locations come from the
    uncropped field, so a positive anchor of the field outside the blob would give a location past the map.
    """
    gt_boxes = np.asarray(gt_boxes, np.float32).reshape(-1, 4)
    gt_classes = np.asarray(gt_classes)
    anchors = np.concatenate([f["anchors"] for f in foas])
    num_inside = len(anchors)
    labels = np.empty((num_inside,), dtype=np.float32)
    labels.fill(-1)
    overlap = bbox_overlaps(anchors, gt_boxes)
    anchor_to_gt_argmax = overlap.argmax(axis=1)
    anchor_to_gt_max = overlap[np.arange(num_inside), anchor_to_gt_argmax]
    gt_to_anchor_argmax = overlap.argmax(axis=0)
    gt_to_anchor_max = overlap[gt_to_anchor_argmax, np.arange(overlap.shape[1])]
    anchors_with_max_overlap = np.where(overlap == gt_to_anchor_max)[0]
    labels[anchors_with_max_overlap] = gt_classes[anchor_to_gt_argmax[anchors_with_max_overlap]]
    inds = anchor_to_gt_max >= positive_overlap
    labels[inds] = gt_classes[anchor_to_gt_argmax[inds]]
    fg_inds = np.where(labels >= 1)[0]
    bg_inds = np.where(anchor_to_gt_max < negative_overlap)[0]
    labels[bg_inds] = 0
    num_fg, num_bg = len(fg_inds), len(bg_inds)
    bbox_targets = np.zeros((num_inside, 4), dtype=np.float32)
    bbox_targets[fg_inds, :] = bbox_transform_inv(
        anchors[fg_inds].astype(np.float32), gt_boxes[anchor_to_gt_argmax[fg_inds]]
    ).astype(np.float32)

    blobs_out = []
    start = 0
    for foa in foas:
        size = foa["field_size"]
        end = start + size * size
        field_labels = labels[start:end].reshape((1, 1, size, size))
        field_targets = bbox_targets[start:end].reshape((1, size, size, 4)).transpose(0, 3, 1, 2)
        start = end
        w = int(blob_width / foa["stride"])
        h = int(blob_height / foa["stride"])
        im_inds, _, y, x = np.where(field_labels > 0)
        roi_targets = np.zeros((len(im_inds), 4))
        roi_locs = np.zeros((len(im_inds), 4))
        for i in range(len(im_inds)):
            label = field_labels[im_inds[i], 0, y[i], x[i]] - 1 if class_specific else 0
            assert 0 <= label < num_classes - 1
            roi_targets[i] = field_targets[0, :, y[i], x[i]]
            roi_locs[i] = [0, label, y[i], x[i]]
        blobs_out.append(dict(
            retnet_cls_labels=field_labels[:, :, 0:h, 0:w].astype(np.int32),
            retnet_roi_bbox_targets=roi_targets.astype(np.float32),
            retnet_roi_fg_bbox_locs=roi_locs.astype(np.float32),
        ))
    fg_num = np.array([num_fg + 1.0], dtype=np.float32)
    bg_num = np.array([num_bg + 1.0]) * (num_classes - 1) + fg_num * (num_classes - 2)
    debug = dict(labels=labels, fg_inds=fg_inds, num_fg=num_fg, num_bg=num_bg)
    return blobs_out, fg_num, bg_num, debug


def retinanet_blobs(images, blob_height, blob_width, min_level, max_level, scales_per_octave, aspect_ratios,
                    anchor_scale, max_size, coarsest_stride, num_classes, positive_overlap=0.5,
                    negative_overlap=0.4, class_specific=False):
    """`add_retinanet_blobs` for a minibatch; `images` lists (gt_boxes in input pixels, gt_classes, is_crowd).

    Returns Detectron's blobs: retnet_fg_num, retnet_bg_num (float32), and per level k
    retnet_cls_labels_fpn<k> (N, A, h, w), retnet_roi_bbox_targets_fpn<k> (M, 4),
    retnet_roi_fg_bbox_locs_fpn<k> (M, 4) = [image, channel, y, x], plus `debug` (one dict per image).
    """
    foas = all_foas(min_level, max_level, scales_per_octave, aspect_ratios, anchor_scale, max_size,
                    coarsest_stride)
    num_aspects = len(aspect_ratios)
    blobs = {"retnet_fg_num": 0.0, "retnet_bg_num": 0.0, "debug": []}
    per_level = {}
    for im_i, (boxes, classes, crowd) in enumerate(images):
        classes, crowd = np.asarray(classes), np.asarray(crowd, bool)
        gt_inds = np.where((classes > 0) & ~crowd)[0]
        assert len(gt_inds) > 0
        out, fg_num, bg_num, debug = image_blobs(
            foas, np.asarray(boxes, np.float32).reshape(-1, 4)[gt_inds], classes[gt_inds], blob_width,
            blob_height, num_classes, positive_overlap, negative_overlap, class_specific,
        )
        blobs["debug"].append(debug)
        for foa, values in zip(foas, out):
            level = int(np.log2(foa["stride"]))
            for key, value in values.items():
                if key == "retnet_roi_fg_bbox_locs":
                    value[:, 0] = im_i
                    loc_stride = 4 * (num_classes - 1 if class_specific else 1)
                    value[:, 1] *= 4
                    value[:, 1] += loc_stride * (foa["octave"] * num_aspects + foa["aspect"])
                per_level.setdefault(f"{key}_fpn{level}", []).append(value)
        blobs["retnet_fg_num"] += fg_num
        blobs["retnet_bg_num"] += bg_num
    blobs["retnet_fg_num"] = blobs["retnet_fg_num"].astype(np.float32)
    blobs["retnet_bg_num"] = blobs["retnet_bg_num"].astype(np.float32)
    num_images = len(images)
    for key, values in per_level.items():
        if key.startswith("retnet_cls_labels"):
            a = len(values) // num_images
            blobs[key] = np.concatenate(
                [np.concatenate(values[i: i + a], axis=1) for i in range(0, len(values), a)], axis=0
            )
        else:
            blobs[key] = np.concatenate(values, axis=0)
    return blobs


def sigmoid_focal_loss(logits, targets, fg_num, gamma, alpha, num_classes, scale=1.0):
    """SigmoidFocalLoss forward and gradient kernels: logits (N, A*C, H, W), targets (N, A, H, W).
    Returns (loss, d loss / d logits) in float32."""
    x = np.asarray(logits, np.float32)
    n, d, h, w = x.shape
    a = np.arange(d) // num_classes
    cls = np.arange(d) % num_classes
    t = np.asarray(targets)[:, a]  # (N, D, H, W): each channel's anchor target
    c1 = (t == cls[None, :, None, None] + 1).astype(np.float32)
    c2 = ((t != -1) & (t != cls[None, :, None, None] + 1)).astype(np.float32)
    np_ = max(float(fg_num), 1.0)
    zn, zp = (1.0 - alpha) / np_, alpha / np_
    p = (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    log_one_minus_p = -x * (x >= 0) - np.log(1.0 + np.exp(x - 2.0 * x * (x >= 0)))
    term1 = np.power(1.0 - p, gamma) * np.log(np.maximum(p, FLT_MIN))
    term2 = np.power(p, gamma) * log_one_minus_p
    loss = np.sum(-c1 * term1 * zp - c2 * term2 * zn) * scale
    g_term1 = np.power(1.0 - p, gamma) * (1.0 - p - p * gamma * np.log(np.maximum(p, FLT_MIN)))
    g_term2 = np.power(p, gamma) * (log_one_minus_p * (1.0 - p) * gamma - p)
    grad = (-c1 * zp * g_term1 - c2 * zn * g_term2) * scale
    return np.float32(loss), grad.astype(np.float32)


def softmax_focal_loss(logits, targets, fg_num, gamma, alpha, num_classes, scale=1.0):
    """SoftmaxFocalLoss forward and gradient kernels: logits (N, A*C, H, W) with C = NUM_CLASSES (background
    channel first per anchor), targets (N, A, H, W). Returns (loss, d loss / d logits)."""
    x = np.asarray(logits, np.float64)
    n, d, h, w = x.shape
    anchors = d // num_classes
    per_anchor = x.reshape(n, anchors, num_classes, h, w)
    e = np.exp(per_anchor - per_anchor.max(axis=2, keepdims=True))
    prob = e / e.sum(axis=2, keepdims=True)
    label = np.asarray(targets)
    np_ = max(float(fg_num), 1.0)
    z = (label == 0) * (1 - alpha) / np_ + (label >= 1) * alpha / np_
    p_t = np.take_along_axis(prob, np.maximum(label, 0)[:, :, None], axis=2)[:, :, 0]
    losses = np.where(label >= 0, -(np.power(1.0 - p_t, gamma) * np.log(np.maximum(p_t, FLT_MIN))) * z, 0.0)
    weight = np.where(
        label >= 0,
        (-np.power(1.0 - p_t, gamma) + gamma * np.power(1.0 - p_t, gamma - 1) * p_t * np.log(np.maximum(p_t, FLT_MIN)))
        * z,
        0.0,
    )
    onehot = (np.arange(num_classes)[None, None, :, None, None] == label[:, :, None]).astype(np.float64)
    grad = (label >= 0)[:, :, None] * weight[:, :, None] * (onehot - prob) * scale
    return np.float32(losses.sum() * scale), grad.reshape(n, d, h, w).astype(np.float32)


def select_smooth_l1_loss(bbox_pred, roi_targets, roi_locs, fg_num, beta, scale=1.0):
    """SelectSmoothL1Loss forward and gradient kernels: bbox_pred (N, D, H, W), roi_targets and roi_locs (M, 4).

    Raises ValueError for a location past the map, where the kernel's flat index leaves the (y, x) cell."""
    y_hat = np.asarray(bbox_pred, np.float32)
    n, d, h, w = y_hat.shape
    out = np.zeros_like(y_hat)
    grad = np.zeros_like(y_hat)
    norm = max(float(fg_num), 1.0)
    for i in range(len(roi_locs)):
        image, channel, y, x = (int(v) for v in roi_locs[i])
        if not (0 <= y < h and 0 <= x < w):
            raise ValueError(f"location {(image, channel, y, x)} is outside the {h} x {w} map")
        for j in range(4):
            val = y_hat[image, channel + j, y, x] - roi_targets[i][j]
            if abs(val) < beta:
                out[image, channel + j, y, x] = 0.5 * val * val / beta / norm
                grad[image, channel + j, y, x] = scale * val / beta / norm
            else:
                out[image, channel + j, y, x] = (abs(val) - 0.5 * beta) / norm
                grad[image, channel + j, y, x] = scale * math.copysign(1.0, val) * (val != 0) / norm
    return np.float32(out.sum() * scale), grad
