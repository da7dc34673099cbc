"""Keypoint decoding against Detectron's `heatmaps_to_keypoints`, run literally with numpy + cv2.

cv2 resizes Detectron's 17-channel heatmaps with OpenCV's own INTER_CUBIC kernel (IPP takes only
1, 3 or 4 channels); our resize reproduces it bit for bit, so the argmax, the positions and the
logits are identical, and the softmax probabilities differ only by summation order (~1e-8).
A tiny rounding difference could still move an argmax between two equal-to-1e-6 pixels; the
checks allow that only at such genuine ties (never observed).
"""

import cv2
import numpy as np
import pytest
import tensorflow as tf

from support.numpy_reference import detectron_heatmaps_to_keypoints
from support.savedmodel_fixtures import heatmap_cell_size
from tfdet.imaging.keypoint_decoding import heatmaps_to_keypoints as numpy_heatmaps_to_keypoints
from tfdet.ops.keypoints import heatmaps_to_keypoints
from tfdet.ops.resize import resize_cubic_cv2

NUM_KEYPOINTS = 17
HEATMAP_SIZE = 56
POSITION_TOLERANCE = 1e-4
LOGIT_TOLERANCE = 1e-4
PROB_TOLERANCE = 1e-6
TIE_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def decode():
    """The decoder in a graph with unknown N, as the model runs it."""

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, HEATMAP_SIZE, HEATMAP_SIZE, NUM_KEYPOINTS], tf.float32),
            tf.TensorSpec([None, 4], tf.float32),
        ]
    )
    def run(heatmaps, boxes):
        return heatmaps_to_keypoints(heatmaps, boxes)

    return lambda heatmaps, boxes: run(heatmaps, boxes).numpy()


def random_heatmaps(rng, n):
    """(n, 56, 56, 17) float32 standard-normal logits."""
    shape = (n, HEATMAP_SIZE, HEATMAP_SIZE, NUM_KEYPOINTS)
    return rng.standard_normal(shape).astype(np.float32)


def random_boxes(rng, n, low, high):
    """Float32 boxes with sides uniform in [low, high) px, anywhere around a 640 x 480 image."""
    x1 = rng.uniform(-50, 640, n)
    y1 = rng.uniform(-50, 480, n)
    x2 = x1 + rng.uniform(low, high, n)
    y2 = y1 + rng.uniform(low, high, n)
    return np.stack([x1, y1, x2, y2], axis=1).astype(np.float32)


def assert_matches_detectron(keypoints, reference):
    """Equal up to the tolerances; a moved argmax must be a tie in Detectron's own resized map."""
    assert keypoints.shape == reference.shape and keypoints.dtype == np.float32
    moved = np.abs(keypoints[..., :2] - reference[..., :2]).max(axis=-1) > POSITION_TOLERANCE
    for i, k in zip(*np.nonzero(moved)):
        assert abs(keypoints[i, k, 2] - reference[i, k, 2]) <= TIE_TOLERANCE, (i, k)
    kept = ~moved
    assert moved.sum() <= 2  # observed 0
    positions, reference_positions = keypoints[kept][:, :2], reference[kept][:, :2]
    np.testing.assert_allclose(positions, reference_positions, rtol=0, atol=POSITION_TOLERANCE)
    np.testing.assert_allclose(keypoints[..., 2], reference[..., 2], rtol=0, atol=LOGIT_TOLERANCE)
    probs, reference_probs = keypoints[kept][:, 3], reference[kept][:, 3]
    np.testing.assert_allclose(probs, reference_probs, rtol=0, atol=PROB_TOLERANCE)


def test_random_heatmaps_match_detectron(rng, decode):
    heatmaps = random_heatmaps(rng, 40)
    boxes = random_boxes(rng, 40, 1.5, 300)
    reference = detectron_heatmaps_to_keypoints(heatmaps, boxes)
    assert_matches_detectron(decode(heatmaps, boxes), reference)


def test_peaked_heatmaps_give_exact_positions(rng, decode):
    """One clear maximum per map: positions and logits must be exactly Detectron's."""
    n = 20
    heatmaps = 0.1 * random_heatmaps(rng, n)
    rows = rng.integers(0, HEATMAP_SIZE, (n, NUM_KEYPOINTS))
    cols = rng.integers(0, HEATMAP_SIZE, (n, NUM_KEYPOINTS))
    heatmaps[np.arange(n)[:, None], rows, cols, np.arange(NUM_KEYPOINTS)[None, :]] += 8.0
    boxes = random_boxes(rng, n, 20, 400)
    keypoints = decode(heatmaps, boxes)
    reference = detectron_heatmaps_to_keypoints(heatmaps, boxes)
    np.testing.assert_array_equal(keypoints[..., :3], reference[..., :3])
    np.testing.assert_allclose(keypoints[..., 3], reference[..., 3], rtol=0, atol=PROB_TOLERANCE)


def test_tied_maxima_resolve_to_the_first_as_numpy_does(decode):
    """Flat heatmaps resize to maps whose maximum recurs at every pixel with the same interpolation
    phase (hundreds of exact ties per map, some far apart): the first in row-major order wins."""
    heatmaps = np.full((3, HEATMAP_SIZE, HEATMAP_SIZE, NUM_KEYPOINTS), 0.37, np.float32)
    heatmaps[1] = -2.5
    heatmaps[2, :, :28] = 1.0  # ties along the left half only
    boxes = np.array([[0, 0, 1333, 999], [3.5, 7.25, 700.5, 390.75], [10, 10, 600, 610]], np.float32)
    reference = detectron_heatmaps_to_keypoints(heatmaps, boxes)
    keypoints = decode(heatmaps, boxes)
    np.testing.assert_array_equal(keypoints[..., :3], reference[..., :3])
    np.testing.assert_allclose(keypoints[..., 3], reference[..., 3], rtol=0, atol=PROB_TOLERANCE)


def test_small_and_degenerate_boxes(rng, decode):
    """Sides under 1 px, zero and negative are raised to 1 px (a 1 x 1 map) as Detectron does."""
    boxes = np.array(
        [
            [10.2, 20.7, 10.9, 21.1],
            [5.0, 5.0, 5.0, 5.0],
            [30.0, 40.0, 29.0, 38.5],
            [0.0, 0.0, 1.5, 0.25],
            [100.25, 7.5, 101.0, 60.0],
        ],
        np.float32,
    )
    heatmaps = random_heatmaps(rng, len(boxes))
    reference = detectron_heatmaps_to_keypoints(heatmaps, boxes)
    assert_matches_detectron(decode(heatmaps, boxes), reference)


def test_inference_min_size(rng):
    """cfg.KRCNN.INFERENCE_MIN_SIZE > 0 resizes small boxes' maps to at least that size."""
    heatmaps = random_heatmaps(rng, 6)
    boxes = random_boxes(rng, 6, 2, 120)
    reference = detectron_heatmaps_to_keypoints(heatmaps, boxes, min_size=64)
    keypoints = heatmaps_to_keypoints(heatmaps, boxes, min_size=64).numpy()
    assert_matches_detectron(keypoints, reference)


def test_no_boxes(rng, decode):
    keypoints = decode(random_heatmaps(rng, 0), np.zeros((0, 4), np.float32))
    assert keypoints.shape == (0, NUM_KEYPOINTS, 4)


@pytest.mark.parametrize(
    "out_height, out_width",
    [(300, 211), (57, 56), (17, 9), (1, 1), (2, 130)],
    ids=["up", "up-by-one", "down", "to-one-pixel", "mixed"],
)
def test_resize_cubic_matches_cv2(rng, out_height, out_width):
    """The resize op alone equals cv2 INTER_CUBIC exactly (observed max |error| 0)."""
    heatmap = rng.standard_normal((HEATMAP_SIZE, HEATMAP_SIZE, NUM_KEYPOINTS)).astype(np.float32)
    expected = cv2.resize(heatmap, (out_width, out_height), interpolation=cv2.INTER_CUBIC)
    resized = resize_cubic_cv2(heatmap, out_height, out_width).numpy()
    np.testing.assert_array_equal(resized, expected.reshape(out_height, out_width, NUM_KEYPOINTS))


def test_keypoints_of_float_noise_boxes_lie_within_a_cell():
    """What the served-vs-Predictor comparison allows (`heatmap_cell_size`): boxes 173.0002 and 172.9996 px wide
    (float noise between two graphs) resize heatmaps to 174 and 173 cells, so the same peaks land up to a
    cell apart, each on a cell centre. A position off a cell centre is refused."""
    heatmaps = np.random.default_rng(3).normal(size=(2, 8, 8, 5)).astype(np.float32)
    heatmaps[1] = heatmaps[0]
    boxes = np.array([[50.0, 20.0, 223.0002, 40.0], [50.0006, 20.0, 223.0002, 40.0]], np.float32)
    keypoints = heatmaps_to_keypoints(heatmaps, boxes).numpy()[..., :2]
    cells = [heatmap_cell_size(keypoints[i], boxes[i]) for i in range(2)]
    assert cells[0][0] < 0.995 < 0.999 < cells[1][0]  # 173.0002 / 174 and 172.9996 / 173
    apart = np.abs(keypoints[0] - keypoints[1])
    assert apart.max() > 0.3 and (apart <= np.maximum(*cells) + 1e-3).all()
    moved = keypoints[0].copy()
    moved[2, 0] += 0.5
    with pytest.raises(AssertionError, match="off their heatmap cells"):
        heatmap_cell_size(moved, boxes[0])


@pytest.mark.parametrize("num_keypoints, min_size", [(17, 0), (5, 0), (4, 0), (1, 0), (17, 64)])
def test_numpy_decoding_matches_the_graphs(rng, num_keypoints, min_size):
    """`tfdet.imaging.keypoint_decoding` (what runners without TensorFlow decode with) gives the model's decoding: the
    same positions, logits within a float32 step and probabilities within summation order, for any keypoint
    count (cv2 takes IPP's cubic kernel for 1, 3 or 4 channels, OpenCV's own otherwise, whose vector code rounds
    a 5-channel map's sums in another order than a 17-channel one's; the graph reproduces OpenCV's own)."""
    heatmaps = rng.standard_normal((30, HEATMAP_SIZE, HEATMAP_SIZE, num_keypoints)).astype(np.float32)
    boxes = random_boxes(rng, 30, 0.5, 300)
    expected = heatmaps_to_keypoints(heatmaps, boxes, min_size=min_size).numpy()
    decoded = numpy_heatmaps_to_keypoints(heatmaps, boxes, min_size=min_size)
    assert decoded.shape == expected.shape and decoded.dtype == np.float32
    np.testing.assert_array_equal(decoded[..., :2], expected[..., :2])
    np.testing.assert_allclose(decoded[..., 2], expected[..., 2], rtol=2e-7, atol=0)
    np.testing.assert_allclose(decoded[..., 3], expected[..., 3], rtol=0, atol=PROB_TOLERANCE)
    assert numpy_heatmaps_to_keypoints(heatmaps[:0], boxes[:0]).shape == (0, num_keypoints, 4)
