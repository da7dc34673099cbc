"""RPN anchor labelling vs a numpy transcription of Detectron's `_get_rpn_blobs`."""

import numpy as np
import pytest
import tensorflow as tf

from support import numpy_training_reference as ref
from tfdet.ops.anchors import generate_anchors, shifted_anchors
from tfdet.ops.rpn_targets import _inside_image, rpn_anchor_targets, scaled_image_size, split_rpn_targets

POS, NEG = 0.7, 0.3
# Two levels (strides 8 and 16) over a 48 x 64 input: 6 x 8 x 3 + 3 x 4 x 3 anchors.
LEVELS = [(8, 6, 8, generate_anchors(8, (16,), (0.5, 1, 2))), (16, 3, 4, generate_anchors(16, (32,), (0.5, 1, 2)))]


def all_anchors():
    return np.concatenate([shifted_anchors(cell, stride, h, w).numpy() for stride, h, w, cell in LEVELS])


# Per image: (original height, original width, scale), then gt boxes (input pixels), crowd flags.
IMAGES = [
    # Two boxes whose best anchors tie, a crowd box that must change nothing, one padded slot.
    ((48, 64, 1.0), [[8, 8, 23, 23], [24, 8, 39, 23], [0, 0, 40, 40]], [False, False, True]),
    # No ground truth at all.
    ((40, 60, 1.0), [], []),
    # Only a crowd box.
    ((48, 64, 1.0), [[10, 10, 30, 30]], [True]),
    # A scaled image (round(30 * 1.5) = 45 rows, 60 columns): a corner box no inside anchor overlaps (its
    # best IoU is 0, so Detectron makes every inside anchor of IoU 0 with it positive) and a large box.
    ((30, 40, 1.5), [[0, 0, 2, 2], [20, 10, 55, 40]], [False, False]),
]
G = 4


def batch():
    boxes = np.zeros((len(IMAGES), G, 4), np.float32)
    crowd = np.zeros((len(IMAGES), G), bool)
    valid = np.zeros((len(IMAGES), G), bool)
    for i, (_, gt, is_crowd) in enumerate(IMAGES):
        boxes[i, : len(gt)] = np.reshape(gt, (-1, 4))
        crowd[i, : len(gt)] = is_crowd
        valid[i, : len(gt)] = True
    info = np.array([image[0] for image in IMAGES], np.float32)
    return boxes, crowd, valid, info


def reference_pre(image_index, straddle_thresh=0):
    (h, w, scale), gt, crowd = IMAGES[image_index]
    usable = [box for box, c in zip(gt, crowd) if not c]
    return ref.rpn_labels_before_sampling(
        np.round(h * scale), np.round(w * scale), all_anchors(), usable, POS, NEG, straddle_thresh
    )


def run(batch_size_per_im, fg_fraction=0.5, straddle_thresh=0, seed=(1, 2)):
    boxes, crowd, valid, info = batch()
    targets = rpn_anchor_targets(
        all_anchors(), boxes, crowd, valid, info, POS, NEG, straddle_thresh, batch_size_per_im, fg_fraction,
        seed=tf.constant(seed),
    )
    return [t.numpy() for t in targets]


@pytest.mark.parametrize("straddle_thresh", [0, -1])
def test_without_subsampling_equals_detectron_exactly(straddle_thresh):
    """A batch size above the anchor count makes Detectron deterministic: every candidate positive is kept
    and, having fewer background candidates than background slots, no anchor is labelled background."""
    labels, targets, inside, outside = run(10_000, straddle_thresh=straddle_thresh)
    for i in range(len(IMAGES)):
        expected = ref.rpn_blobs(*_image_args(i, straddle_thresh), 10_000, 0.5, np.random.default_rng(0))
        np.testing.assert_array_equal(labels[i], expected["labels"])
        np.testing.assert_allclose(targets[i], expected["bbox_targets"], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(inside[i], expected["inside"])
        np.testing.assert_allclose(outside[i], expected["outside"], rtol=1e-6)


def _image_args(i, straddle_thresh):
    (h, w, scale), gt, crowd = IMAGES[i]
    usable = [box for box, c in zip(gt, crowd) if not c]
    return np.round(h * scale), np.round(w * scale), all_anchors(), usable, POS, NEG, straddle_thresh


def test_reference_cases_cover_ties_straddling_and_the_zero_overlap_rule():
    """The fixtures exercise what they claim: tied best anchors, anchors dropped at the border, and the
    corner box whose zero best IoU turns many anchors positive."""
    tie = reference_pre(0)
    first_gt = ref.bbox_overlaps(all_anchors(), [[8, 8, 23, 23]])[:, 0] * tie["inside"]
    assert np.sum(first_gt == first_gt.max()) >= 2
    assert not tie["inside"].all()
    corner = reference_pre(3)
    assert corner["fg_candidates"].sum() > 20


def test_subsampled_labels_follow_detectron_rules():
    batch_size, fg_fraction = 24, 0.25
    num_fg_max = int(fg_fraction * batch_size)
    for seed in [(1, 2), (3, 4), (5, 6)]:
        labels, targets, inside, outside = run(batch_size, fg_fraction, seed=seed)
        for i in range(len(IMAGES)):
            pre = reference_pre(i)
            fg, bg = labels[i] == 1, labels[i] == 0
            assert fg.sum() <= min(pre["fg_candidates"].sum(), num_fg_max)
            assert not np.any(fg & ~pre["fg_candidates"])
            assert not np.any(bg & ~pre["bg_candidates"])
            assert np.all(labels[i][~pre["inside"]] == -1)
            num_bg_slots = batch_size - min(pre["fg_candidates"].sum(), num_fg_max)
            if pre["bg_candidates"].sum() > num_bg_slots:
                # Draws with replacement may overwrite drawn positives; together they fill at most the batch.
                assert 1 <= bg.sum() <= num_bg_slots
                assert fg.sum() + bg.sum() <= batch_size
            else:
                assert bg.sum() == 0
            np.testing.assert_allclose(targets[i][fg], pre["targets"][fg], rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(inside[i], np.repeat(fg[:, None], 4, 1).astype(np.float32))
            labelled = labels[i] >= 0
            np.testing.assert_allclose(outside[i][labelled], 1.0 / labelled.sum(), rtol=1e-6)
            assert np.all(outside[i][~labelled] == 0)


def test_positives_are_capped_and_all_kept_below_the_cap():
    """With no background candidates (negative overlap 0) the positives are exactly the drawn ones: twelve of
    the corner image's 65 candidates, every one of the first image's 8."""
    boxes, crowd, valid, info = batch()
    labels = rpn_anchor_targets(all_anchors(), boxes, crowd, valid, info, POS, 0.0, 0, 24, 0.5,
                                seed=tf.constant([4, 2])).labels.numpy()
    corner = reference_pre(3)
    assert np.sum(labels[3] == 1) == 12 and not np.any((labels[3] == 1) & ~corner["fg_candidates"])
    np.testing.assert_array_equal(labels[0] == 1, reference_pre(0)["fg_candidates"])
    assert not np.any(labels == 0)


def test_images_without_usable_ground_truth_get_background_only():
    labels, targets, inside, _ = run(24, 0.25)
    for i in (1, 2):
        assert not np.any(labels[i] == 1)
        assert np.sum(labels[i] == 0) >= 1
        assert not targets[i].any() and not inside[i].any()


def test_background_is_drawn_with_replacement():
    """24 draws among 30 candidates: with replacement about 16.5 distinct anchors are expected, never 24."""
    anchors = np.array([[x, 0, x + 9, 9] for x in range(0, 300, 10)], np.float32)
    counts = []
    for seed in range(20):
        t = rpn_anchor_targets(anchors, np.zeros((1, 1, 4), np.float32), [[False]], [[False]], [[10, 300, 1.0]],
                               batch_size_per_im=24, seed=tf.constant([seed, 0]))
        counts.append(int(np.sum(t.labels.numpy() == 0)))
    assert max(counts) < 24
    assert 14 <= np.mean(counts) <= 19


def test_seeded_sampling_is_reproducible_and_seeds_differ():
    first = run(24, 0.25, seed=(7, 7))[0]
    np.testing.assert_array_equal(first, run(24, 0.25, seed=(7, 7))[0])
    assert any(not np.array_equal(first, run(24, 0.25, seed=(s, 1))[0]) for s in range(3))


def test_split_per_level_matches_the_rpn_output_layout():
    boxes, crowd, valid, info = batch()
    targets = rpn_anchor_targets(all_anchors(), boxes, crowd, valid, info, seed=tf.constant([1, 1]))
    levels = split_rpn_targets(targets, [(h, w, len(cell)) for _, h, w, cell in LEVELS])
    assert levels[0].labels.shape == (4, 6, 8, 3) and levels[1].bbox_targets.shape == (4, 3, 4, 12)
    np.testing.assert_array_equal(levels[1].labels.numpy().reshape(4, -1), targets.labels.numpy()[:, 144:])
    # Anchor a of cell (y, x) owns channels 4a..4a+3, as the NHWC `rpn_bbox_pred` reshaped to (-1, 4).
    np.testing.assert_array_equal(
        levels[0].bbox_targets.numpy()[2, 1, 3, 8:12], targets.bbox_targets.numpy()[2, (1 * 8 + 3) * 3 + 2]
    )


def test_graph_mode_with_unknown_sizes():
    spec = [tf.TensorSpec([None, 4]), tf.TensorSpec([None, None, 4]), tf.TensorSpec([None, None], tf.bool),
            tf.TensorSpec([None, None], tf.bool), tf.TensorSpec([None, 3])]
    fn = tf.function(lambda a, b, c, v, i: rpn_anchor_targets(a, b, c, v, i, batch_size_per_im=24,
                                                              seed=tf.constant([1, 2])).labels,
                     input_signature=spec)
    boxes, crowd, valid, info = batch()
    eager = run(24, 0.5)[0]
    np.testing.assert_array_equal(fn(all_anchors(), boxes, crowd, valid, info).numpy(), eager)


def test_scaled_image_size_rounds_like_numpy():
    height, width = scaled_image_size(tf.constant([[30.0, 41.0, 1.5], [333.0, 500.0, 2.4024024]]))
    np.testing.assert_array_equal(height.numpy(), np.round(np.array([30.0, 333.0]) * np.array([1.5, 2.4024024])))
    np.testing.assert_array_equal(width.numpy(), [62.0, 1201.0])


@pytest.mark.parametrize("t", [0, 2])
def test_inside_image_at_the_margins(t):
    """Detectron's inds_inside: x1, y1 >= -STRADDLE_THRESH and x2 < width + STRADDLE_THRESH (likewise y2 with
    the height), on the edges themselves; a negative margin keeps every anchor."""
    anchors = tf.constant([
        [-t, -t, 63 + t, 47 + t],  # on every inclusive edge: inside
        [-t - 0.5, 0, 10, 10], [0, -t - 0.5, 10, 10],  # just past the left, the top
        [0, 0, 64 + t, 10], [0, 0, 10, 48 + t],  # x2 = width + t, y2 = height + t: outside (strict)
    ], tf.float32)  # fmt: skip
    image_info = tf.constant([[48.0, 64.0, 1.0]])
    assert _inside_image(anchors, image_info, t).numpy().tolist() == [[True, False, False, False, False]]
    assert _inside_image(anchors, image_info, -1).numpy().all()


def boundary_labels(anchors, gt, positive_overlap=0.7, negative_overlap=0.3, batch_size_per_im=8, fg_fraction=0.5):
    """Labels of hand-made anchors on one 100 x 100 image with one ground-truth box."""
    targets = rpn_anchor_targets(
        tf.constant(anchors, tf.float32), tf.constant([[gt]], tf.float32), tf.zeros([1, 1], bool),
        tf.ones([1, 1], bool), tf.constant([[100.0, 100.0, 1.0]]), positive_overlap, negative_overlap, 0,
        batch_size_per_im, fg_fraction, seed=tf.constant([1, 2]),
    )  # fmt: skip
    return targets.labels.numpy()[0].tolist()


def test_labelling_at_the_overlap_thresholds():
    """Detectron's `labels[max_overlaps >= RPN_POSITIVE_OVERLAP] = 1`: an anchor of IoU exactly 0.7 (70 of 100
    pixels, +1 sizes) is positive though it is not the ground truth's best anchor; one of IoU exactly 0.3 is
    not a background candidate (`< RPN_NEGATIVE_OVERLAP`): beside three others, with num_bg 3, no anchor is
    labelled background (three candidates are not more than num_bg)."""
    gt = [0, 0, 9, 6]  # 10 x 7
    anchors = [[0, 0, 9, 6], [0, 0, 9, 9], [50, 50, 59, 59]]  # IoU 1 (the best), 0.7, 0
    assert boundary_labels(anchors, gt) == [1, 1, -1]  # one background candidate: not more than num_bg (6)
    # IoU 21 / 70 = 0.3 exactly: [0, 0, 2, 6] is 3 x 7 inside the 10 x 7 box.
    anchors = [[0, 0, 9, 6], [0, 0, 2, 6]] + [[50 + 5 * k, 50, 54 + 5 * k, 54] for k in range(3)]
    assert boundary_labels(anchors, gt, batch_size_per_im=4) == [1, -1, -1, -1, -1]


def test_background_is_labelled_only_when_candidates_outnumber_num_bg():
    """Detectron's `if len(bg_inds) > num_bg`: with one positive and batch 4, num_bg is 3; three background
    candidates label none, four label some (drawn with replacement)."""
    gt = [0, 0, 9, 9]
    far = [[50 + 5 * k, 50, 54 + 5 * k, 54] for k in range(4)]
    assert boundary_labels([gt] + far[:3], gt, batch_size_per_im=4) == [1, -1, -1, -1]
    labels = boundary_labels([gt] + far, gt, batch_size_per_im=4)
    assert labels[0] == 1 and 1 <= labels[1:].count(0) <= 3


def test_no_positive_when_the_fg_fraction_allows_none():
    """int(RPN_FG_FRACTION * RPN_BATCH_SIZE_PER_IM) = 0: Detectron disables every positive."""
    gt = [0, 0, 9, 9]
    assert 1 not in boundary_labels([gt, [50, 50, 59, 59]], gt, batch_size_per_im=8, fg_fraction=0.1)
