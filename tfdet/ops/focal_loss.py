"""RetinaNet's losses as Caffe2's SigmoidFocalLoss, SoftmaxFocalLoss and SelectSmoothL1Loss ops compute them.

Each sums over one replica's images and divides by max(`retnet_fg_num`, 1), as the ops do on one GPU;
Detectron's extra `1 / NUM_GPUS` (`GetLossScale`) is left to the training loop, as in `tfdet.ops.losses`.
Head outputs are NHWC with Caffe2's channel order: class logits (B, H, W, A*C) with channel a*C + c, box
deltas (B, H, W, A*4) with channel a*4 + k, or class-specific (B, H, W, A*K*4) with channel a*K*4 + 4*c + k.
Labels are (B, H, W, A) int: -1 ignored, 0 background, c >= 1 the class. TensorFlow's gradients of these
functions are the ops' hand-written gradients (the normaliser is data: no gradient flows into it).
"""

import tensorflow as tf

from tfdet.ops.losses import smooth_l1

# Caffe2 clamps probabilities at FLT_MIN before their log: the smallest normal float32.
_FLT_MIN = 1.1754943508222875e-38


def _per_anchor(outputs, labels):
    """(B, H, W, A*D) head outputs -> (B, H, W, A, D), A from the labels (B, H, W, A)."""
    shape = tf.concat([tf.shape(labels), [-1]], axis=0)
    return tf.reshape(tf.cast(outputs, tf.float32), shape)


def _normalised(total, normalizer):
    """`total` / max(normalizer, 1), the ops' `max(weight_pos[0], 1.0)`."""
    return total / tf.maximum(tf.cast(normalizer, tf.float32), 1.0)


def sigmoid_focal_loss(logits, labels, normalizer, gamma=2.0, alpha=0.25):
    """SigmoidFocalLoss: per anchor and class channel c (class c + 1), with p = sigmoid(logit),
    -alpha (1-p)**gamma log(p) where the label is c + 1, -(1-alpha) p**gamma log(1-p) where the label is
    anything else but -1 (background or another class), 0 where it is -1; summed, / max(normalizer, 1).

    log(p) and log(1-p) are log-sigmoids (Caffe2's log(1-p) is the same stable form; its log(p) clamps p at
    FLT_MIN, which differs only for logits below -87), and p**gamma = exp(gamma log p), stable for any gamma.
    """
    logits = _per_anchor(logits, labels)
    labels = tf.cast(labels, tf.int32)[..., None]
    classes = tf.range(1, tf.shape(logits)[-1] + 1)
    positive = labels == classes
    negative = (labels != -1) & ~positive
    log_p = tf.math.log_sigmoid(logits)
    log_not_p = tf.math.log_sigmoid(-logits)
    positive_loss = -alpha * tf.exp(gamma * log_not_p) * log_p
    negative_loss = -(1.0 - alpha) * tf.exp(gamma * log_p) * log_not_p
    losses = tf.where(positive, positive_loss, tf.where(negative, negative_loss, 0.0))
    return _normalised(tf.reduce_sum(losses), normalizer)


def softmax_focal_loss(logits, labels, normalizer, gamma=2.0, alpha=0.25):
    """SoftmaxFocalLoss (RETINANET.SOFTMAX): a softmax over each anchor's NUM_CLASSES channels (background
    first), then -(1-p_t)**gamma log(p_t) for the label t >= 0, weighted alpha for t >= 1 and 1-alpha for
    t = 0, nothing for -1; summed, / max(normalizer, 1). log(p_t) is a log-softmax (Caffe2 clamps p_t at
    FLT_MIN: the same above it)."""
    logits = _per_anchor(logits, labels)
    labels = tf.cast(labels, tf.int32)
    log_p = tf.gather(tf.nn.log_softmax(logits, axis=-1), tf.maximum(labels, 0), batch_dims=labels.shape.rank)
    # max() keeps the gradient of (1-p)**gamma finite where p rounds to 1 (gamma < 1 included).
    modulating = tf.pow(tf.maximum(1.0 - tf.exp(log_p), _FLT_MIN), gamma)
    weight = tf.where(labels == 0, 1.0 - alpha, tf.where(labels >= 1, alpha, 0.0))
    return _normalised(tf.reduce_sum(-weight * modulating * log_p), normalizer)


def select_smooth_l1_loss(bbox_pred, bbox_targets, labels, normalizer, beta=0.11, class_specific=False, weight=1.0):
    """SelectSmoothL1Loss: SmoothL1(beta) of prediction - target on the 4 box channels of every anchor with
    a label >= 1 (its class's channels when `class_specific`, RETINANET.CLASS_SPECIFIC_BBOX); summed,
    / max(normalizer, 1), times `weight` (RETINANET.BBOX_REG_WEIGHT). bbox_targets (B, H, W, A, 4)."""
    deltas = _per_anchor(bbox_pred, labels)
    deltas = tf.reshape(deltas, tf.concat([tf.shape(deltas)[:-1], [-1, 4]], axis=0))  # (B, H, W, A, K, 4)
    labels = tf.cast(labels, tf.int32)
    channel = tf.maximum(labels - 1, 0) if class_specific else tf.zeros_like(labels)
    selected = tf.gather(deltas, channel, batch_dims=labels.shape.rank)
    losses = smooth_l1(selected - tf.cast(bbox_targets, tf.float32), beta)
    total = tf.reduce_sum(tf.where((labels >= 1)[..., None], losses, 0.0))
    return weight * _normalised(total, normalizer)
