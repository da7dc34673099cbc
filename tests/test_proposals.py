"""RPN proposal generation against a numpy version of Detectron's GenerateProposalsOp + collect."""

import numpy as np
import pytest
import tensorflow as tf

from support import numpy_reference as ref
from tfdet.ops import anchors as anchor_ops
from tfdet.ops import proposals as proposal_ops


def rpn_level(rng, height, width, num_anchors):
    """Random but plausible RPN outputs: distinct scores and modest deltas, NHWC."""
    scores = rng.permutation(height * width * num_anchors).astype(np.float32)
    scores = (scores / scores.size).reshape(height, width, num_anchors)
    deltas = rng.normal(0, 0.3, (height, width, 4 * num_anchors)).astype(np.float32)
    return scores, deltas


def reference_fpn(levels, im_info, pre_n, post_n, nms_thresh, min_size, final_n):
    boxes, scores = [], []
    for s, d, cell, stride in levels:
        b, sc = ref.proposals_one_image(s, d, cell, stride, im_info, pre_n, post_n, nms_thresh, min_size)
        boxes.append(b)
        scores.append(sc)
    boxes = np.concatenate(boxes)
    scores = np.concatenate(scores)
    order = np.argsort(-scores, kind="stable")[:final_n]
    return boxes[order], scores[order]


@pytest.mark.parametrize("scale, pre_nms_top_n", [(1.0, 600), (1.6, 600), (1.0, 0)])
def test_single_level_c4_style(rng, scale, pre_nms_top_n):
    """pre_nms_top_n 0 (or less) takes every anchor, as Detectron's `pre_nms_topN <= 0`."""
    height, width = 12, 17
    cell = anchor_ops.generate_anchors(16, (32, 64, 128, 256, 512), (0.5, 1, 2))
    im_info = np.array([height * 16, width * 16, scale], np.float32)
    s, d = rpn_level(rng, height, width, len(cell))
    want_boxes, want_scores = ref.proposals_one_image(s, d, cell, 16, im_info, pre_nms_top_n, 100, 0.7, 0)
    anchors = anchor_ops.shifted_anchors(cell, 16, height, width)
    boxes, scores, num = proposal_ops.generate_proposals(
        [(s[None], d[None], anchors)], im_info[None], pre_nms_top_n, 100, 0.7, min_size=0
    )
    num = int(num[0])
    assert num == len(want_boxes)
    np.testing.assert_allclose(boxes.numpy()[0, :num], want_boxes, atol=1e-3)
    np.testing.assert_array_equal(scores.numpy()[0, :num], want_scores)


def test_fpn_levels_and_batch(rng):
    levels_shape = {2: (32, 40), 3: (16, 20), 4: (8, 10), 5: (4, 5), 6: (2, 3)}
    im_infos = np.array([[128, 160, 1.0], [120, 150, 0.5]], np.float32)
    per_image_levels = [[], []]
    tf_levels = []
    for lvl, (h, w) in levels_shape.items():
        cell = anchor_ops.fpn_level_anchors(lvl, 2, 32, (0.5, 1, 2))
        outs = [rpn_level(rng, h, w, 3) for _ in range(2)]
        for i in range(2):
            per_image_levels[i].append((outs[i][0], outs[i][1], cell, 2**lvl))
        tf_levels.append(
            (np.stack([o[0] for o in outs]), np.stack([o[1] for o in outs]), anchor_ops.shifted_anchors(cell, 2**lvl, h, w))
        )
    boxes, scores, num = proposal_ops.generate_proposals(tf_levels, im_infos, 300, 200, 0.7, min_size=2, final_top_n=250)
    assert boxes.shape == (2, 250, 4)
    for i in range(2):
        want_boxes, want_scores = reference_fpn(per_image_levels[i], im_infos[i], 300, 200, 0.7, 2, 250)
        n = int(num[i])
        assert n == len(want_boxes)
        np.testing.assert_allclose(boxes.numpy()[i, :n], want_boxes, atol=1e-3)
        np.testing.assert_array_equal(scores.numpy()[i, :n], want_scores)
        assert np.all(boxes.numpy()[i, n:] == 0)


def test_min_size_and_centre_filter():
    # Three anchors at one position; deltas make one tiny, one centred outside, one fine.
    anchors = tf.constant([[0.0, 0, 1, 1], [90.0, 0, 130, 40], [10.0, 10, 40, 40]])
    scores = np.array([[[[0.9, 0.8, 0.7]]]], np.float32)
    deltas = np.zeros((1, 1, 1, 12), np.float32)
    im_info = np.array([[100, 100, 2.0]], np.float32)
    boxes, out_scores, num = proposal_ops.generate_proposals(
        [(scores, deltas, anchors)], im_info, 10, 10, 0.7, min_size=1.5
    )
    # Box 0: 2 px at scale 2 is 1.5 original px: kept (>=). Box 1 is clipped to x1=90..99, centre
    # 95 < 100 is inside: kept. With min_size 2 box 0 goes.
    assert int(num[0]) == 3
    _, _, num = proposal_ops.generate_proposals([(scores, deltas, anchors)], im_info, 10, 10, 0.7, min_size=2)
    assert int(num[0]) == 2


def test_keep_mask_centre_outside():
    boxes = tf.constant([[[95.0, 0, 99, 10], [99.0, 0, 99, 10]]])
    mask = proposal_ops.proposal_keep_mask(boxes, 0, tf.constant([[100.0, 100.0, 1.0]]))
    # Centres: 95 + 5/2 = 97.5 inside; 99 + 1/2 = 99.5 inside.
    assert mask.numpy().tolist() == [[True, True]]
    mask = proposal_ops.proposal_keep_mask(boxes, 0, tf.constant([[100.0, 99.0, 1.0]]))
    assert mask.numpy().tolist() == [[True, False]]


def test_keep_mask_centre_exactly_on_the_far_edge_is_outside():
    """Detectron's centre x1 + (x2 - x1 + 1) / 2 must be < the input width (and likewise in y), strictly. Boxes
    are clipped before this filter, so only unclipped boxes reach the edge; the op takes them as they are."""
    boxes = tf.constant([[[98.0, 0, 99, 10], [97.0, 0, 99, 10], [0, 98.0, 10, 99], [0, 97.0, 10, 99]]])
    # x centres 99 and 98.5 against width 99; y centres 99 and 98.5 against height 99.
    mask = proposal_ops.proposal_keep_mask(boxes, 0, tf.constant([[99.0, 99.0, 1.0]]))
    assert mask.numpy().tolist() == [[False, True, False, True]]


def test_tf_function_unknown_sizes(rng):
    cell = anchor_ops.generate_anchors(16, (64, 128), (0.5, 1, 2))

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 6]), tf.TensorSpec([None, None, None, 24]), tf.TensorSpec([None, 3])])
    def fn(s, d, info):
        anchors = anchor_ops.shifted_anchors(cell, 16, tf.shape(s)[1], tf.shape(s)[2])
        return proposal_ops.generate_proposals([(s, d, anchors)], info, 50, 20, 0.7)

    s, d = rpn_level(rng, 5, 7, 6)
    im_info = np.array([80, 112, 1.0], np.float32)
    boxes, scores, num = fn(s[None], d[None], im_info[None])
    want_boxes, _ = ref.proposals_one_image(s, d, cell, 16, im_info, 50, 20, 0.7, 0)
    assert int(num[0]) == len(want_boxes)
    np.testing.assert_allclose(boxes.numpy()[0, : len(want_boxes)], want_boxes, atol=1e-3)
