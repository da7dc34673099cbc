"""Fast R-CNN RoI labelling and sampling vs a numpy transcription of Detectron's roidb + `_sample_rois`."""

import numpy as np
import pytest
import tensorflow as tf

from support import numpy_training_reference as ref
from tfdet.ops.roi_sampling import label_proposals, random_subset, sample_rois

NUM_CLASSES = 4
WEIGHTS = (10.0, 10.0, 5.0, 5.0)
G, P = 4, 10

# Per image: scale, gt boxes (input pixels), classes, crowd flags, proposals (input pixels).
IMAGES = [
    (
        1.5,
        [[15, 15, 60, 60], [75, 15, 120, 60], [0, 90, 45, 135]],
        [1, 3, 2],
        [False, False, True],
        # Good, tied (IoU equal with two gts), crowd-covered, background, no-overlap, duplicate of a gt.
        [[18, 18, 63, 63], [45, 15, 90, 60], [3, 93, 45, 132], [30, 30, 90, 90], [130, 130, 140, 140],
         [75, 15, 120, 60], [10, 20, 55, 70], [0, 80, 40, 140], [60, 0, 140, 80], [12, 12, 66, 66]],
    ),
    # Empty ground truth: proposals only, all background (overlap 0).
    (1.0, [], [], [], [[0, 0, 20, 20], [5, 5, 30, 40], [10, 0, 50, 50]]),
    # Only crowd ground truth: proposals on it become foreground of its class but get no box target.
    (2.0, [[20, 20, 80, 80]], [2], [True], [[22, 22, 80, 78], [0, 0, 10, 10], [20, 30, 70, 80], [40, 40, 99, 99]]),
]


def batch(images=IMAGES):
    b = len(images)
    gt = np.zeros((b, G, 4), np.float32)
    classes = np.zeros((b, G), np.int32)
    crowd = np.zeros((b, G), bool)
    gt_valid = np.zeros((b, G), bool)
    proposals = np.zeros((b, P, 4), np.float32)
    proposal_valid = np.zeros((b, P), bool)
    for i, (_, boxes, cls, is_crowd, props) in enumerate(images):
        n, p = len(boxes), len(props)
        gt[i, :n] = np.reshape(boxes, (-1, 4))
        classes[i, :n] = cls
        crowd[i, :n] = is_crowd
        gt_valid[i, :n] = True
        proposals[i, :p] = props
        proposal_valid[i, :p] = True
    scales = np.array([image[0] for image in images], np.float32)
    return proposals, proposal_valid, gt, classes, crowd, gt_valid, scales


def candidates(cls_agnostic=False, bbox_thresh=0.5, images=IMAGES):
    proposals, proposal_valid, gt, classes, crowd, gt_valid, scales = batch(images)
    return label_proposals(proposals, proposal_valid, gt, classes, crowd, gt_valid, scales, bbox_thresh,
                           WEIGHTS, cls_agnostic)


def reference_entry(i, cls_agnostic=False, bbox_thresh=0.5, images=IMAGES):
    """Detectron's roidb entry of image i, in original pixels (input / scale, in float32 as the graph)."""
    scale, boxes, cls, is_crowd, props = images[i]
    s = np.float32(scale)
    return ref.roidb_entry(np.reshape(boxes, (-1, 4)).astype(np.float32) / s, cls, is_crowd,
                           np.asarray(props, np.float32) / s, NUM_CLASSES, bbox_thresh, WEIGHTS, cls_agnostic)


def reference_rows(i):
    """Rows of the padded candidate table holding image i's ground truth, then its proposals."""
    return np.concatenate([np.arange(len(IMAGES[i][1])), G + np.arange(len(IMAGES[i][4]))])


@pytest.mark.parametrize("cls_agnostic", [False, True])
def test_candidates_equal_detectron_roidb(cls_agnostic):
    c = candidates(cls_agnostic)
    for i in range(len(IMAGES)):
        expected = reference_entry(i, cls_agnostic)
        rows = reference_rows(i)
        assert c.valid.numpy()[i].sum() == len(rows) and c.valid.numpy()[i][rows].all()
        np.testing.assert_array_equal(c.max_overlaps.numpy()[i][rows], expected["max_overlaps"])
        np.testing.assert_array_equal(c.classes.numpy()[i][rows], expected["max_classes"])
        np.testing.assert_array_equal(c.gt_index.numpy()[i][rows], expected["box_to_gt_ind_map"])
        np.testing.assert_array_equal(c.target_classes.numpy()[i][rows], expected["bbox_targets"][:, 0])
        np.testing.assert_allclose(c.target_deltas.numpy()[i][rows], expected["bbox_targets"][:, 1:],
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(c.boxes.numpy()[i][rows],
                                      np.concatenate([np.reshape(IMAGES[i][1], (-1, 4)), IMAGES[i][4]]))


def test_fixture_exercises_crowd_ties_and_thresholds():
    """The hand-made boxes do what the fixture claims (so the comparison above covers those rules)."""
    first = reference_entry(0)
    assert first["max_overlaps"][2] == -1  # crowd gt row
    tied = ref.bbox_overlaps(np.float32([[45, 15, 90, 60]]) / np.float32(1.5),
                             np.float32([[15, 15, 60, 60], [75, 15, 120, 60]]) / np.float32(1.5))
    assert tied[0, 0] > 0 and tied[0, 0] == tied[0, 1]
    assert first["max_classes"][3 + 2] == 2 and first["max_overlaps"][3 + 2] >= 0.5  # proposal 2 on the crowd
    crowd_only = reference_entry(2)
    assert (crowd_only["max_overlaps"] >= 0.5).any() and not crowd_only["bbox_targets"][:, 0].any()


def test_sampling_counts_sets_and_targets():
    batch_size, fg_fraction = 8, 0.25
    c = candidates()
    numpy_c = {k: v.numpy() for k, v in c._asdict().items()}
    for seed in [(1, 1), (2, 5), (9, 3)]:
        s = sample_rois(c, NUM_CLASSES, batch_size, fg_fraction, seed=tf.constant(seed))
        out = {k: v.numpy() for k, v in s._asdict().items()}
        for i in range(len(IMAGES)):
            entry = reference_entry(i)
            fg_set, bg_set = ref.fg_bg_candidates(entry, 0.5, 0.5, 0.0)
            rows = reference_rows(i)
            num_fg = min(round(fg_fraction * batch_size), len(fg_set))
            num_bg = min(batch_size - num_fg, len(bg_set))
            assert out["num_fg"][i] == num_fg
            picked = out["candidate_index"][i]
            fg_rows, bg_rows = picked[:num_fg], picked[num_fg:num_fg + num_bg]
            assert len(set(fg_rows)) == num_fg and set(fg_rows) <= set(rows[fg_set])
            assert len(set(bg_rows)) == num_bg and set(bg_rows) <= set(rows[bg_set])
            assert np.all(picked[num_fg + num_bg:] == -1) and np.all(out["labels"][i][num_fg + num_bg:] == -1)
            # Each sampled slot carries its candidate's class, box and expanded targets (Detectron's rows).
            position = {row: k for k, row in enumerate(rows)}
            ref_rows = [position[r] for r in picked[:num_fg + num_bg]]
            expected_labels = entry["max_classes"][ref_rows].copy()
            expected_labels[num_fg:] = 0
            np.testing.assert_array_equal(out["labels"][i][:num_fg + num_bg], expected_labels)
            targets, inside = ref.expand_bbox_targets(entry["bbox_targets"][ref_rows], NUM_CLASSES)
            np.testing.assert_allclose(out["bbox_targets"][i][:num_fg + num_bg], targets, rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(out["bbox_inside_weights"][i][:num_fg + num_bg], inside)
            np.testing.assert_array_equal(out["bbox_outside_weights"][i][:num_fg + num_bg], inside)
            real = picked[:num_fg + num_bg]
            np.testing.assert_array_equal(out["rois"][i][:num_fg + num_bg], numpy_c["boxes"][i][real])
            np.testing.assert_array_equal(out["gt_index"][i][:num_fg + num_bg], entry["box_to_gt_ind_map"][ref_rows])


def test_class_agnostic_targets_use_the_foreground_column():
    s = sample_rois(candidates(True), NUM_CLASSES, 8, 0.25, cls_agnostic_bbox_reg=True, seed=tf.constant([1, 1]))
    weights = s.bbox_inside_weights.numpy()
    assert weights.shape == (3, 8, 8)
    assert not weights[..., :4].any() and weights[0, 0, 4:].all()


def test_random_subset_is_uniform_without_replacement():
    eligible = tf.constant([[True, False, True, True, False, True]] * 2000)
    indices, found = random_subset(eligible, 2, tf.constant([3, 3]))
    indices, found = indices.numpy(), found.numpy()
    assert found.all() and np.all(indices[:, 0] != indices[:, 1])
    counts = np.bincount(indices.ravel(), minlength=6)
    assert counts[1] == counts[4] == 0
    np.testing.assert_allclose(counts[[0, 2, 3, 5]] / 4000, 0.25, atol=0.03)
    few, found_few = random_subset(tf.constant([[False, True, False]]), 2, tf.constant([1, 1]))
    assert few.numpy()[0, 0] == 1 and found_few.numpy().tolist() == [[True, False]]


def test_graph_mode_and_reproducibility():
    args = batch()

    @tf.function
    def run(*tensors):
        return sample_rois(label_proposals(*tensors), NUM_CLASSES, 8, 0.25, seed=tf.constant([4, 4])).labels

    np.testing.assert_array_equal(run(*args).numpy(), run(*args).numpy())


def test_no_gradient_flows_into_the_proposals():
    proposals, proposal_valid, gt, classes, crowd, gt_valid, scales = batch()
    proposals = tf.Variable(proposals)
    with tf.GradientTape() as tape:
        c = label_proposals(proposals, proposal_valid, gt, classes, crowd, gt_valid, scales)
        s = sample_rois(c, NUM_CLASSES, 8, 0.25, seed=tf.constant([1, 1]))
        total = tf.reduce_sum(s.bbox_targets) + tf.reduce_sum(s.rois)
    assert tape.gradient(total, proposals) is None


def test_zero_ground_truth_slots_are_refused():
    with pytest.raises(ValueError, match="no ground-truth slot"):
        label_proposals(np.zeros((1, 2, 4), np.float32), [[True, True]], np.zeros((1, 0, 4), np.float32),
                        np.zeros((1, 0), np.int32), np.zeros((1, 0), bool), np.zeros((1, 0), bool), [1.0])


def test_overlap_thresholds_at_equality():
    """Detectron's `max_overlaps >= FG_THRESH` (foreground), `BG_THRESH_LO <= max_overlaps < BG_THRESH_HI`
    (background) and `overlaps >= BBOX_THRESH` (a regression target), at IoU exactly 0.5 (100 of 200 pixels,
    +1 sizes); invalid candidates and padding slots carry gt_index -1."""
    gt = tf.constant([[[0.0, 0, 9, 9], [0, 0, 0, 0]]])  # one box, one padded slot
    proposals = tf.constant([[[0.0, 0, 9, 19], [50, 50, 59, 59], [0, 0, 9, 9]]])  # IoU 0.5, 0, invalid
    candidates = label_proposals(proposals, tf.constant([[True, True, False]]), gt, tf.constant([[1, 0]]),
                                 tf.zeros([1, 2], bool), tf.constant([[True, False]]), tf.constant([1.0]))  # fmt: skip
    # Rows: the ground-truth box, its padded slot, then the three proposals.
    assert candidates.max_overlaps.numpy()[0, 2] == 0.5
    assert candidates.target_classes.numpy()[0].tolist() == [1, 0, 1, 0, 0]
    assert candidates.gt_index.numpy()[0].tolist() == [0, -1, 0, -1, -1]
    samples = sample_rois(candidates, 2, batch_size_per_im=8, fg_fraction=1.0, seed=tf.constant([1, 1]))
    labels, chosen = samples.labels.numpy()[0], samples.candidate_index.numpy()[0]
    num_fg = int(samples.num_fg[0])
    assert num_fg == 2 and sorted(chosen[:num_fg]) == [0, 2]  # the ground truth and the IoU-0.5 proposal
    assert labels.tolist() == [1, 1, 0, -1, -1, -1, -1, -1] and chosen[2] == 3  # background: only IoU 0
    assert samples.gt_index.numpy()[0, 3:].tolist() == [-1] * 5
