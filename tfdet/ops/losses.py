"""Detectron's training losses as scalar float32 TF functions, normalised the way its Caffe2 ops normalise.

Each loss is computed on one replica's images, as Detectron computes it on one GPU; Detectron's extra
`1 / NUM_GPUS` (`GetLossScale`) is left to the training loop, which averages the replicas' losses. No
function here uses cross-replica operations. Leading dimensions are free unless stated: pass per-level
RPN tensors (B, H, W, A) or concatenated ones (B, N), flattened RoIs or (B, R) RoIs alike.
"""

import tensorflow as tf


def smooth_l1(x, beta):
    """Caffe2's SmoothL1: 0.5 x**2 / beta where |x| < beta, else |x| - 0.5 beta."""
    absolute = tf.abs(x)
    return tf.where(absolute < beta, 0.5 * x * x / beta, absolute - 0.5 * beta)


def _weighted_smooth_l1_sum(predictions, targets, inside_weights, outside_weights, beta):
    """sum(outside * SmoothL1(inside * (prediction - target))), Caffe2's SmoothL1Loss before its 1/N."""
    predictions = tf.cast(predictions, tf.float32)
    difference = tf.cast(inside_weights, tf.float32) * (predictions - tf.cast(targets, tf.float32))
    return tf.reduce_sum(tf.cast(outside_weights, tf.float32) * smooth_l1(difference, beta))


def rpn_objectness_loss(logits, labels, per_image_normalizer=None):
    """RPN sigmoid cross-entropy over labelled anchors (label -1 ignored): Detectron's SigmoidCrossEntropyLoss.

    `logits` and `labels` share a shape with the images first. per_image_normalizer None: divide by the
    number of labelled anchors (single-level RPN, `add_single_scale_rpn_losses`, normalize=1, at least
    1e-5). An int: divide by it times the number of images (FPN, `add_fpn_rpn_losses`: normalize=0 and
    scale 1 / (TRAIN.RPN_BATCH_SIZE_PER_IM * TRAIN.IMS_PER_BATCH) on every level; the sum of the
    per-level losses equals this loss on the levels concatenated).
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    labelled = labels >= 0
    losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(tf.maximum(labels, 0), tf.float32), logits=logits)
    total = tf.reduce_sum(tf.where(labelled, losses, 0.0))
    if per_image_normalizer is None:
        return total / tf.maximum(tf.reduce_sum(tf.cast(labelled, tf.float32)), 1e-5)
    num_images = tf.cast(tf.shape(logits)[0], tf.float32)
    return total / (float(per_image_normalizer) * num_images)


def rpn_box_loss(deltas, targets, inside_weights, outside_weights, beta=1.0 / 9.0):
    """RPN smooth-L1 box loss (beta 1/9): sum of outside-weighted SmoothL1 over the images' anchors divided by
    the number of images (Caffe2's SmoothL1Loss divides by the batch dimension; the outside weights
    1 / #labelled anchors make it the per-image average). Images first in every argument."""
    num_images = tf.cast(tf.shape(deltas)[0], tf.float32)
    return _weighted_smooth_l1_sum(deltas, targets, inside_weights, outside_weights, beta) / num_images


def fast_rcnn_class_loss(class_logits, labels):
    """Softmax cross-entropy averaged over the sampled RoIs (Detectron's SoftmaxWithLoss on cls_score).

    `class_logits` (..., NUM_CLASSES), `labels` (...) int with -1 for padding slots, which do not count.
    """
    labels = tf.cast(labels, tf.int32)
    real = labels >= 0
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.maximum(labels, 0), logits=tf.cast(class_logits, tf.float32)
    )
    return tf.math.divide_no_nan(tf.reduce_sum(tf.where(real, losses, 0.0)), tf.reduce_sum(tf.cast(real, tf.float32)))


def fast_rcnn_box_loss(bbox_pred, bbox_targets, inside_weights, outside_weights, labels, beta=1.0):
    """Fast R-CNN smooth-L1 box loss (beta 1): the weighted sum divided by the number of sampled RoIs
    (Caffe2's SmoothL1Loss divides by the RoI count; only foreground RoIs have non-zero weights).

    bbox_* (..., 4 * C); `labels` (...) as in `fast_rcnn_class_loss`, only counted (padding -1 excluded).
    """
    num_rois = tf.reduce_sum(tf.cast(tf.cast(labels, tf.int32) >= 0, tf.float32))
    return tf.math.divide_no_nan(
        _weighted_smooth_l1_sum(bbox_pred, bbox_targets, inside_weights, outside_weights, beta), num_rois
    )


def mask_loss(mask_logits, mask_targets, roi_classes, class_specific=True, loss_weight=1.0):
    """Mask sigmoid cross-entropy on each RoI's class channel, averaged over the non-ignored cells.

    mask_logits (..., M, M, C); mask_targets (..., M, M) int in {-1, 0, 1} (-1 ignored); roi_classes (...)
    int. class_specific (MRCNN.CLS_SPECIFIC_MASK): the channel of the RoI's class, else channel 0 (C = 1).
    Equals Detectron's SigmoidCrossEntropyLoss (normalize=1) on class-expanded targets, whose other
    channels are all -1. loss_weight: MRCNN.WEIGHT_LOSS_MASK.
    """
    mask_logits = tf.cast(mask_logits, tf.float32)
    if class_specific:
        channel = tf.one_hot(tf.maximum(tf.cast(roi_classes, tf.int32), 0), tf.shape(mask_logits)[-1])
        logits = tf.reduce_sum(mask_logits * channel[..., None, None, :], axis=-1)
    else:
        logits = mask_logits[..., 0]
    targets = tf.cast(mask_targets, tf.int32)
    counted = targets >= 0
    losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(tf.maximum(targets, 0), tf.float32), logits=logits)
    total = tf.reduce_sum(tf.where(counted, losses, 0.0))
    return loss_weight * total / tf.maximum(tf.reduce_sum(tf.cast(counted, tf.float32)), 1e-5)


def keypoint_loss(
    heatmap_logits,
    target_indices,
    weights,
    normalize_by_visible=True,
    loss_weight=1.0,
    ims_per_batch=None,
    batch_size_per_im=None,
    fg_fraction=None,
):
    """Keypoint loss: a softmax over the S*S heatmap cells of each (RoI, keypoint), Detectron's
    SoftmaxWithLoss with keypoint_weights (sum of weighted losses / sum of weights, 0 without weight).

    heatmap_logits (..., S, S, K); target_indices (..., K) int (y * S + x); weights (..., K).
    loss_weight: KRCNN.LOSS_WEIGHT. normalize_by_visible (KRCNN.NORMALIZE_BY_VISIBLE_KEYPOINTS) False:
    multiply by Detectron's keypoint_loss_normalizer, #visible / (TRAIN.IMS_PER_BATCH *
    TRAIN.BATCH_SIZE_PER_IM * TRAIN.FG_FRACTION * K) (`finalize_keypoint_minibatch`), which needs those
    three arguments.
    """
    heatmap_logits = tf.cast(heatmap_logits, tf.float32)
    num_keypoints = heatmap_logits.shape[-1]
    shape = tf.shape(heatmap_logits)
    rank = len(heatmap_logits.shape)
    per_keypoint = tf.transpose(heatmap_logits, [*range(rank - 3), rank - 1, rank - 3, rank - 2])
    per_keypoint = tf.reshape(per_keypoint, tf.concat([shape[:-3], [num_keypoints, shape[-3] * shape[-2]]], 0))
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(target_indices, tf.int32), logits=per_keypoint
    )
    weights = tf.cast(weights, tf.float32)
    num_visible = tf.reduce_sum(weights)
    loss = loss_weight * tf.math.divide_no_nan(tf.reduce_sum(weights * losses), num_visible)
    if normalize_by_visible:
        return loss
    if None in (ims_per_batch, batch_size_per_im, fg_fraction):
        raise ValueError(
            "keypoint_loss with normalize_by_visible=False needs ims_per_batch, batch_size_per_im and fg_fraction"
        )
    return loss * num_visible / (ims_per_batch * batch_size_per_im * fg_fraction * num_keypoints)
