"""Test-time image preparation against Detectron's prep_im_for_blob + im_list_to_blob."""

import numpy as np
import pytest

from support.numpy_reference import PIXEL_MEANS, detectron_prep
from tfdet.imaging.preprocessing import batch_images, prepare_image, subtract_means


@pytest.mark.parametrize("shape", [(480, 640, 3), (1000, 300, 3), (333, 333, 3), (2, 5000, 3)])
def test_matches_detectron(rng, shape):
    image = rng.integers(0, 256, shape, dtype=np.uint8)
    ours, scale = prepare_image(image, PIXEL_MEANS, 800, 1333)
    want, want_scale = detectron_prep(image.copy(), 800, 1333)
    assert scale == want_scale
    np.testing.assert_array_equal(ours, want)


def test_mean_subtraction_table_gives_detectrons_values_for_every_level():
    """uint8 images go through a per-channel table (cv2.LUT): every level of every channel, in a strided
    view, equals Detectron's float64 subtraction rounded to float32; other dtypes take that subtraction."""
    levels = np.repeat(np.arange(256, dtype=np.uint8)[:, None, None], 3, axis=2)  # (256, 1, 3)
    image = np.concatenate([levels, levels[::-1]], axis=1)[::-1, ::-1]  # reversed: not contiguous
    want = image.astype(np.float32)
    want -= PIXEL_MEANS
    ours = subtract_means(image, PIXEL_MEANS)
    assert ours.dtype == np.float32 and ours.shape == (256, 2, 3)
    np.testing.assert_array_equal(ours, want)
    floats = image.astype(np.float64) + 0.25
    np.testing.assert_array_equal(subtract_means(floats, PIXEL_MEANS), (floats - PIXEL_MEANS).astype(np.float32))


def test_batch_pads_bottom_right_to_stride():
    a, b = np.ones((50, 70, 3), np.float32), np.full((64, 33, 3), 2.0, np.float32)
    blob = batch_images([a, b], 32)
    assert blob.shape == (2, 64, 96, 3)
    assert np.all(blob[0, :50, :70] == 1) and np.all(blob[0, 50:] == 0) and np.all(blob[0, :, 70:] == 0)
    assert np.all(blob[1, :, :33] == 2) and np.all(blob[1, :, 33:] == 0)
    assert batch_images([a], 0).shape == (1, 50, 70, 3)


def test_size_divisibility_pads_every_input_path(tmp_path):
    """TFDET.SIZE_DIVISIBILITY (maskrcnn-benchmark's DATALOADER.SIZE_DIVISIBILITY, for a C4 model): the
    Predictor's blob, the training batches and the serving graph's are padded to its multiples; 0 keeps
    Detectron's rule (the batch's largest image for C4, FPN.COARSEST_STRIDE for FPN); refused with FPN."""
    import tensorflow as tf

    from savedmodel.preprocessing import prepare_batch
    from support.paths import shared_path
    from support.training_fixtures import shapes_roidb
    from tfdet.config import ConfigError, check_supported, load_config
    from tfdet.data.pipeline import build_train_dataset
    from tfdet.imaging.preprocessing import model_inputs, padding_stride

    zoo = shared_path("detectron", "configs", "12_2017_baselines")
    small = ["TRAIN.SCALES", "(100,)", "TRAIN.MAX_SIZE", "150"]
    detectron = load_config(zoo / "e2e_faster_rcnn_R-50-C4_1x.yaml", small)
    padded = load_config(zoo / "e2e_faster_rcnn_R-50-C4_1x.yaml", [*small, "TFDET.SIZE_DIVISIBILITY", "32"])
    assert (padding_stride(detectron), padding_stride(padded)) == (0, 32)
    assert padding_stride(load_config(None, ["FPN.FPN_ON", "True"])) == 32  # FPN.COARSEST_STRIDE's default

    image = np.zeros((70, 90, 3), np.uint8)
    assert model_inputs([image], detectron, 100, 150)["images"].shape[1:3] == (100, 129)  # 90 * 100 / 70 = 128.6
    assert model_inputs([image], padded, 100, 150)["images"].shape[1:3] == (128, 160)

    roidb = shapes_roidb(tmp_path, num_images=2)  # 128 x 128 images at scale 100 / 128: 100 x 100
    for cfg, side in ((detectron, 100), (padded, 128)):
        batch = next(iter(build_train_dataset(cfg, roidb, flip=False)))
        assert batch["images"].shape[1:3] == (side, side)

    def image_at(_):
        return tf.zeros((70, 90, 3), tf.uint8)

    images, _, _ = prepare_batch(1, image_at, (102.98, 115.95, 122.77), 100, 150, padding_stride(padded))
    assert images.shape[1:3] == (128, 160)

    check_supported(padded, "inference")
    with pytest.raises(ConfigError, match="TFDET.SIZE_DIVISIBILITY = 32"):
        fpn = load_config(zoo / "e2e_faster_rcnn_R-50-FPN_1x.yaml", ["TFDET.SIZE_DIVISIBILITY", "32"])
        check_supported(fpn, "inference")
