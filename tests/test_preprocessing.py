"""Test-time image preparation against Detectron's prep_im_for_blob + im_list_to_blob."""

import cv2
import numpy as np
import pytest

from tfdet.preprocessing import batch_images, prepare_image

MEANS = np.array([[[102.9801, 115.9465, 122.7717]]])


def detectron_prep(im, target_size, max_size):
    """Detectron's utils/blob.py::prep_im_for_blob, line for line."""
    im = im.astype(np.float32, copy=False)
    im -= MEANS
    im_size_min, im_size_max = np.min(im.shape[0:2]), np.max(im.shape[0:2])
    im_scale = float(target_size) / float(im_size_min)
    if np.round(im_scale * im_size_max) > max_size:
        im_scale = float(max_size) / float(im_size_max)
    return cv2.resize(im, None, None, fx=im_scale, fy=im_scale, interpolation=cv2.INTER_LINEAR), im_scale


@pytest.mark.parametrize("shape", [(480, 640, 3), (1000, 300, 3), (333, 333, 3), (2, 5000, 3)])
def test_matches_detectron(rng, shape):
    image = rng.integers(0, 256, shape, dtype=np.uint8)
    ours, scale = prepare_image(image, MEANS, 800, 1333)
    want, want_scale = detectron_prep(image.copy(), 800, 1333)
    assert scale == want_scale
    np.testing.assert_array_equal(ours, want)


def test_batch_pads_bottom_right_to_stride():
    a, b = np.ones((50, 70, 3), np.float32), np.full((64, 33, 3), 2.0, np.float32)
    blob = batch_images([a, b], 32)
    assert blob.shape == (2, 64, 96, 3)
    assert np.all(blob[0, :50, :70] == 1) and np.all(blob[0, 50:] == 0) and np.all(blob[0, :, 70:] == 0)
    assert np.all(blob[1, :, :33] == 2) and np.all(blob[1, :, 33:] == 0)
    assert batch_images([a], 0).shape == (1, 50, 70, 3)
