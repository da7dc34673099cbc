"""RetinaNet anchor labelling vs hand-made cases and a numpy transcription of Detectron's roi_data/retinanet.py."""

import math

import numpy as np
import pytest
import tensorflow as tf

from support import numpy_retinanet_training as ref
from support.numpy_reference import anchors as generate_anchors
from support.numpy_reference import bbox_transform_inv
from tfdet.ops.retinanet_targets import (
    FieldLevel,
    RetinaNetTargets,
    crop_to_feature_maps,
    field_anchors,
    field_size,
    retinanet_anchor_targets,
    retinanet_normalizers,
)

POS, NEG = 0.5, 0.4


def test_field_size_is_the_padded_max_size_over_the_stride():
    # The zoo's RetinaNet: TRAIN.MAX_SIZE 1333, COARSEST_STRIDE 128 -> a 1408 px field on every level.
    assert [field_size(2**k, 1333, 128) for k in range(3, 8)] == [176, 88, 44, 22, 11]
    assert field_size(8, 1000, 32) == 128  # 1024 / 8
    assert field_size(128, 100, 32) == 1  # ceil(128 / 128)
    for stride, max_size, coarsest in [(8, 1333, 128), (32, 96, 32), (64, 100, 32)]:
        assert field_size(stride, max_size, coarsest) == ref.field_of_anchors(stride, 32, 1.0, max_size, coarsest)[1]


# A small RetinaNet: levels 3..5, two octaves, three aspect ratios (A = 6), anchor scale 4, a 96 px field
# (TRAIN.MAX_SIZE 90, COARSEST_STRIDE 32), so fields of 12, 6 and 3 cells.
MIN_LEVEL, MAX_LEVEL, OCTAVES, ASPECTS, ANCHOR_SCALE, MAX_SIZE, COARSEST = 3, 5, 2, (1.0, 2.0, 0.5), 4, 90, 32
NUM_CLASSES = 4  # three classes and background


def field_levels():
    levels = []
    for level in range(MIN_LEVEL, MAX_LEVEL + 1):
        stride = 2**level
        cells = [
            generate_anchors(stride, (stride * 2 ** (octave / OCTAVES) * ANCHOR_SCALE,), (aspect,))[0]
            for octave in range(OCTAVES)
            for aspect in ASPECTS
        ]
        levels.append(FieldLevel(stride, np.array(cells), field_size(stride, MAX_SIZE, COARSEST)))
    return levels


def test_field_anchors_are_detectrons_foas_in_order():
    expected = ref.all_foas(MIN_LEVEL, MAX_LEVEL, OCTAVES, ASPECTS, ANCHOR_SCALE, MAX_SIZE, COARSEST)
    anchors = field_anchors(field_levels()).numpy()
    assert anchors.dtype == np.float32
    np.testing.assert_array_equal(anchors, np.concatenate([f["anchors"] for f in expected]))
    assert len(anchors) == 6 * (12 * 12 + 6 * 6 + 3 * 3)


# A 64 x 96 input blob (levels 3..5 maps of 8x12, 4x6, 2x3): the field's rows 8..11 at stride 8 lie below it.
BLOB_H, BLOB_W = 64, 96
IMAGES = [
    # (gt boxes in input pixels, classes, crowd)
    (
        [[4, 4, 40, 30], [50, 10, 90, 60], [0, 56, 31, 63], [60, 0, 70, 8]],  # [0, 56, 31, 63]: at the bottom
        [1, 2, 3, 2],
        [False, False, False, False],
    ),
    (
        [[10, 20, 60, 50], [0, 0, 95, 63], [30, 30, 40, 40]],
        [3, 1, 2],
        [False, True, False],  # a crowd box covering the image changes nothing
    ),
]
G = 5


def batch(images):
    boxes = np.zeros((len(images), G, 4), np.float32)
    classes = np.zeros((len(images), G), np.int32)
    crowd = np.zeros((len(images), G), bool)
    valid = np.zeros((len(images), G), bool)
    for i, (gt, cls, is_crowd) in enumerate(images):
        boxes[i, : len(gt)] = np.reshape(gt, (-1, 4))
        classes[i, : len(gt)] = cls
        crowd[i, : len(gt)] = is_crowd
        valid[i, : len(gt)] = True
    return boxes, classes, crowd, valid


def detectron_blobs(class_specific=False):
    return ref.retinanet_blobs(
        IMAGES, BLOB_H, BLOB_W, MIN_LEVEL, MAX_LEVEL, OCTAVES, ASPECTS, ANCHOR_SCALE, MAX_SIZE, COARSEST,
        NUM_CLASSES, POS, NEG, class_specific,
    )


def tfdet_targets():
    levels = field_levels()
    targets = retinanet_anchor_targets(field_anchors(levels), *batch(IMAGES), POS, NEG)
    return targets, crop_to_feature_maps(targets, levels, tf.constant(BLOB_H), tf.constant(BLOB_W))


def test_labels_counts_and_normalizers_equal_detectrons():
    blobs = detectron_blobs()
    targets, per_level = tfdet_targets()
    for image, debug in enumerate(blobs["debug"]):
        np.testing.assert_array_equal(targets.labels[image].numpy(), debug["labels"].astype(np.int32))
        assert targets.num_fg[image].numpy() == debug["num_fg"]
        assert targets.num_bg[image].numpy() == debug["num_bg"]
    for level, cropped in zip(range(MIN_LEVEL, MAX_LEVEL + 1), per_level):
        expected = blobs[f"retnet_cls_labels_fpn{level}"]  # (N, A, h, w)
        assert expected.shape[2:] == (BLOB_H // 2**level, BLOB_W // 2**level)
        np.testing.assert_array_equal(cropped.labels.numpy(), expected.transpose(0, 2, 3, 1))
    fg_num, bg_num = retinanet_normalizers(targets.num_fg, targets.num_bg, NUM_CLASSES)
    assert fg_num.numpy() == blobs["retnet_fg_num"][0]
    assert bg_num.numpy() == blobs["retnet_bg_num"][0]


def test_anchors_of_the_field_outside_the_blob_count_but_leave_the_labels():
    """The box at the bottom edge ties (best IoU 0.24) with anchors of the field's rows below the 64 px blob:
    Detectron counts them in num_fg (and, reset to 0, in num_bg), and its cropped labels do not hold them."""
    blobs = detectron_blobs()
    levels = field_levels()
    outside = []
    for level in levels:
        rows, columns = np.meshgrid(np.arange(level.field_size), np.arange(level.field_size), indexing="ij")
        beyond = (rows >= BLOB_H // level.stride) | (columns >= BLOB_W // level.stride)
        outside.append(np.tile(beyond.ravel(), len(level.cell_anchors)))
    outside = np.concatenate(outside)
    assert outside[blobs["debug"][0]["fg_inds"]].any()
    targets, per_level = tfdet_targets()
    fg_before_reset = targets.bbox_targets[0].numpy().any(axis=1)  # the anchors that got box targets
    np.testing.assert_array_equal(np.flatnonzero(fg_before_reset), blobs["debug"][0]["fg_inds"])
    cropped = sum(level_targets.labels[0].numpy().size for level_targets in per_level)
    assert cropped == len(outside) - outside.sum()


@pytest.mark.parametrize("class_specific", [False, True])
def test_box_targets_equal_detectrons_on_the_feature_maps(class_specific):
    """Every fg location Detectron makes (all on the maps here) has our target at that anchor; ours has no other."""
    blobs = detectron_blobs(class_specific)
    _, per_level = tfdet_targets()
    loc_stride = 4 * (NUM_CLASSES - 1 if class_specific else 1)
    for level, cropped in zip(range(MIN_LEVEL, MAX_LEVEL + 1), per_level):
        locs = blobs[f"retnet_roi_fg_bbox_locs_fpn{level}"].astype(int)
        expected = blobs[f"retnet_roi_bbox_targets_fpn{level}"]
        labels, boxes = cropped.labels.numpy(), cropped.bbox_targets.numpy()
        image, channel, y, x = locs.T
        anchor = channel // loc_stride
        assert np.all(labels[image, y, x, anchor] >= 1)
        if class_specific:
            np.testing.assert_array_equal((channel % loc_stride) // 4, labels[image, y, x, anchor] - 1)
        assert np.sum(labels >= 1) == len(locs)
        np.testing.assert_allclose(boxes[image, y, x, anchor], expected, rtol=1e-5, atol=1e-6)


def test_crop_keeps_the_top_left_cells_of_each_field():
    """A positive of the field past the blob's map is cropped away with its box target (Detectron would still
    make it a box location, past the map, which its SelectSmoothL1Loss reads as other cells)."""
    levels = [FieldLevel(8, np.zeros((2, 4)), 4), FieldLevel(16, np.zeros((1, 4)), 2)]
    labels = np.arange(2 * 16 + 4, dtype=np.int32)[None]  # each anchor labelled with its own index
    boxes = np.repeat(labels[..., None], 4, axis=-1).astype(np.float32)
    targets = RetinaNetTargets(tf.constant(labels), tf.constant(boxes), None, None)
    level3, level4 = crop_to_feature_maps(targets, levels, tf.constant(24), tf.constant(16))  # maps 3x2, 1x1
    field3 = labels[0, :32].reshape(2, 4, 4)  # (A, y, x)
    np.testing.assert_array_equal(level3.labels.numpy()[0], field3[:, :3, :2].transpose(1, 2, 0))
    np.testing.assert_array_equal(level3.bbox_targets.numpy()[0, ..., 2], field3[:, :3, :2].transpose(1, 2, 0))
    np.testing.assert_array_equal(level4.labels.numpy(), [[[[32]]]])


def run_single(anchors, gt, classes, crowd=None):
    crowd = [False] * len(gt) if crowd is None else crowd
    targets = retinanet_anchor_targets(
        np.array(anchors, np.float32), *batch([(gt, classes, crowd)]), POS, NEG
    )
    return (targets.labels[0].numpy(), targets.bbox_targets[0].numpy(), int(targets.num_fg[0]),
            int(targets.num_bg[0]))


# Hand-made anchors around 10 x 10 ground-truth boxes (+1 widths), with their IoUs.
HAND_ANCHORS = [
    [0, 0, 9, 9],  # 0: IoU 1 with gt 0 (class 2)
    [0, 0, 9, 19],  # 1: 100 / 200 = 0.5 exactly: POSITIVE_OVERLAP is a positive
    [0, 0, 9, 20],  # 2: 100 / 210 = 0.476: ignored
    [0, 0, 9, 24],  # 3: 100 / 250 = 0.4 exactly: NEGATIVE_OVERLAP is ignored, not background
    [0, 0, 9, 25],  # 4: 100 / 260 = 0.385: background
    [100, 100, 109, 109],  # 5: overlaps nothing (but a crowd box equals it)
    [200, 0, 209, 21],  # 6: gt 1's best anchor, 100 / 220 = 0.455: stays positive (class 1)
    [300, 0, 309, 29],  # 7: gt 2's best anchor, 100 / 300 = 0.333: counted fg, then background
    [500, 0, 509, 21],  # 8: ties with 9 as gt 3's best anchor, 0.455 each: both positive (class 3)
    [500, -12, 509, 9],  # 9
    [500, 0, 509, 22],  # 10: 100 / 230 = 0.435 with gt 3, not its best: ignored
]
HAND_GT = [[0, 0, 9, 9], [200, 0, 209, 9], [300, 0, 309, 9], [500, 0, 509, 9], [100, 100, 109, 109]]
HAND_CLASSES = [2, 1, 3, 3, 1]
HAND_CROWD = [False, False, False, False, True]


def test_hand_made_thresholds_best_anchors_ties_and_crowd():
    labels, targets, num_fg, num_bg = run_single(HAND_ANCHORS, HAND_GT, HAND_CLASSES, HAND_CROWD)
    np.testing.assert_array_equal(labels, [2, 2, -1, -1, 0, 0, 1, 0, 3, 3, -1])
    assert num_fg == 6  # anchors 0, 1, 6, 8, 9 and 7 (a best anchor below NEGATIVE_OVERLAP still counts)
    assert num_bg == 3  # anchors 4, 5, 7
    # Anchor 7 keeps the box target it got as a best anchor: (0, (5 - 15) / 30, 0, log(10 / 30)).
    np.testing.assert_allclose(targets[7], [0.0, -1.0 / 3.0, 0.0, math.log(1.0 / 3.0)], rtol=1e-6)
    # Anchor 1: centre (5, 10) -> (5, 5) over a 10 x 20 box.
    np.testing.assert_allclose(targets[1], [0.0, -0.25, 0.0, math.log(0.5)], rtol=1e-6)
    assert not targets[[2, 3, 4, 5, 10]].any()


def test_a_best_anchor_takes_the_class_of_the_ground_truth_it_overlaps_most():
    """Anchor 1 is gt b's best anchor (IoU 0.4) but overlaps gt a more (0.45, below POSITIVE_OVERLAP): it gets
    gt a's class, and gt b (class 3) gets no anchor of its own class (`gt_inds = anchor_to_gt_argmax[...]`)."""
    anchors = [[0, 0, 19, 8], [0, 0, 19, 19]]
    labels, targets, num_fg, _ = run_single(anchors, [[0, 0, 19, 8], [0, 12, 19, 19]], [1, 3])
    np.testing.assert_array_equal(labels, [1, 1])
    assert num_fg == 2
    expected = bbox_transform_inv(np.array(anchors[1:], np.float32), np.array([[0, 0, 19, 8]], np.float32))
    np.testing.assert_allclose(targets[1], expected[0], rtol=1e-6)


def test_two_images_sum_their_normalizers():
    boxes, classes, crowd, valid = batch([(HAND_GT, HAND_CLASSES, HAND_CROWD), ([[0, 0, 9, 19]], [1], [False])])
    targets = retinanet_anchor_targets(np.array(HAND_ANCHORS, np.float32), boxes, classes, crowd, valid, POS, NEG)
    # Image 2: anchors 0 (IoU 0.5), 1 (IoU 1), 2 (200 / 210) and 3 (0.8) are positive; 4 (200 / 260 = 0.77) too.
    np.testing.assert_array_equal(targets.num_fg.numpy(), [6, 5])
    np.testing.assert_array_equal(targets.num_bg.numpy(), [3, 6])
    fg_num, bg_num = retinanet_normalizers(targets.num_fg, targets.num_bg, NUM_CLASSES)
    assert fg_num.numpy() == (6 + 1) + (5 + 1)
    assert bg_num.numpy() == (3 + 1) * 3 + (6 + 1) * 2 + (6 + 1) * 3 + (5 + 1) * 2


def test_images_without_usable_ground_truth_are_all_background():
    """Detectron asserts on such images; we label every anchor background (num_fg 0, so fg_num 1)."""
    for gt, classes, crowd in [([], [], []), ([[0, 0, 9, 9]], [2], [True])]:
        labels, targets, num_fg, num_bg = run_single(HAND_ANCHORS, gt, classes, crowd)
        assert np.all(labels == 0) and not targets.any()
        assert (num_fg, num_bg) == (0, len(HAND_ANCHORS))
