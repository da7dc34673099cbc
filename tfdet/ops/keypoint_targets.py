"""Keypoint R-CNN training targets as Detectron's `roi_data/keypoint_rcnn.py` and `utils/keypoints.py` make them.

Keypoint RoIs are sampled on their own from the same candidates as the box head's RoIs (ground truth +
proposals, `add_keypoint_rcnn_blobs`): foreground candidates (max overlap >= FG_THRESH) whose matched
ground truth has at least one visible keypoint inside the candidate box. Their targets are one heatmap
cell per keypoint (`keypoints_to_heatmap_labels`), used by a softmax over the HEATMAP_SIZE**2 cells.
Coordinates are compared in original-image pixels (input pixels / image scale), as Detectron does.
"""

import collections

import tensorflow as tf

from tfdet.ops.roi_sampling import check_gt_slots, random_subset

KeypointRois = collections.namedtuple("KeypointRois", ["rois", "valid", "keypoints", "candidate_index"])
KeypointRois.__doc__ = """rois (B, F, 4) input pixels (zeros where invalid); valid (B, F) bool, valid slots
first; keypoints (B, F, K, 3) x, y, visibility of each RoI's ground truth (zeros where invalid);
candidate_index (B, F) int32 (row of RoiCandidates, -1 where invalid)."""


def sample_keypoint_rois(
    candidates, gt_keypoints, image_scale, batch_size_per_im=512, fg_fraction=0.25, fg_thresh=0.5, seed=None
):
    """Detectron's keypoint RoI sampling for every image.

    Args:
      candidates: RoiCandidates from `roi_sampling.label_proposals`.
      gt_keypoints: (B, G, K, 3) x, y (input pixels), visibility v (> 0 labelled) of each ground truth.
      image_scale: (B,) input pixels per original pixel.
      batch_size_per_im, fg_fraction: TRAIN.BATCH_SIZE_PER_IM, TRAIN.FG_FRACTION; at most
        F = round(fg_fraction * batch_size_per_im) keypoint RoIs per image (Detectron's fg_rois_per_image).
      fg_thresh: TRAIN.FG_THRESH.
      seed: optional (2,) integer tensor for stateless sampling.
    Returns:
      KeypointRois, drawn uniformly without replacement among the eligible candidates. A keypoint counts
      as inside a box when x1 <= x <= x2 and y1 <= y <= y2 (`_within_box`). Detectron's
      KRCNN.MIN_KEYPOINT_COUNT_FOR_VALID_MINIBATCH only rejects data-loader minibatches; end-to-end training
      (CollectAndDistributeFpnRpnProposals) ignores it, and so does this function.
    """
    fg_per_image = int(round(fg_fraction * batch_size_per_im))
    scale = tf.cast(image_scale, tf.float32)
    gt_keypoints = tf.cast(gt_keypoints, tf.float32)
    check_gt_slots(gt_keypoints, "gt_keypoints")
    keypoints = tf.gather(gt_keypoints, tf.maximum(candidates.gt_index, 0), batch_dims=1)
    boxes = candidates.boxes / scale[:, None, None]
    x = keypoints[..., 0] / scale[:, None, None]
    y = keypoints[..., 1] / scale[:, None, None]
    within = (
        (x >= boxes[..., 0:1]) & (x <= boxes[..., 2:3]) & (y >= boxes[..., 1:2]) & (y <= boxes[..., 3:4])
    )
    has_visible = tf.reduce_any(within & (keypoints[..., 2] > 0), axis=-1)
    eligible = candidates.valid & (candidates.max_overlaps >= fg_thresh) & (candidates.gt_index >= 0) & has_visible

    index, found = random_subset(eligible, fg_per_image, seed)
    rois = tf.gather(candidates.boxes, index, batch_dims=1)
    picked_keypoints = tf.gather(keypoints, index, batch_dims=1)
    return KeypointRois(
        rois=tf.where(found[..., None], rois, 0.0),
        valid=found,
        keypoints=tf.where(found[..., None, None], picked_keypoints, 0.0),
        candidate_index=tf.where(found, index, -1),
    )


def keypoint_heatmap_targets(rois, keypoints, image_scale, heatmap_size):
    """Detectron's `keypoints_to_heatmap_labels`: the heatmap cell of each keypoint of each RoI.

    Args:
      rois: (B, F, 4) input pixels; keypoints (B, F, K, 3) x, y in input pixels and visibility.
      image_scale: (B,) input pixels per original pixel (the arithmetic runs in original pixels).
      heatmap_size: KRCNN.HEATMAP_SIZE (S).
    Returns:
      indices (B, F, K) int32 = y * S + x with x = floor((kx - x1) * S / (x2 - x1)) (a keypoint exactly on
      x2 maps to S - 1; same for y), 0 where invalid; weights (B, F, K) float32, 1 for a visible keypoint
      (v > 0) that falls in [0, S) x [0, S), else 0.
    """
    scale = tf.cast(image_scale, tf.float32)[:, None, None]
    rois = tf.stop_gradient(tf.cast(rois, tf.float32))[..., None, :] / scale[..., None]
    keypoints = tf.cast(keypoints, tf.float32)
    size = float(heatmap_size)

    def cell(coords, low, high):
        position = tf.floor((coords - low) * (size / (high - low)))
        return tf.where(coords == high, size - 1.0, position)

    x = cell(keypoints[..., 0] / scale, rois[..., 0], rois[..., 2])
    y = cell(keypoints[..., 1] / scale, rois[..., 1], rois[..., 3])
    valid = (x >= 0.0) & (y >= 0.0) & (x < size) & (y < size) & (keypoints[..., 2] > 0)
    indices = tf.where(valid, tf.cast(y * size + x, tf.int32), 0)
    return indices, tf.cast(valid, tf.float32)
