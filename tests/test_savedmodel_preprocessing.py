"""The SavedModel's in-graph image preparation against tfdet.imaging.preprocessing (Detectron's
prep_im_for_blob + im_list_to_blob with cv2), which the Predictor uses, and its pieces against
OpenCV: JPEG decoding and `resize_linear_cv2` by scale."""

import cv2
import numpy as np
import pytest
import tensorflow as tf

from savedmodel.preprocessing import prepare_batch, prepare_image, prepare_same_size_batch
from support.paths import shared_path
from tfdet.data.transforms import decode_bgr
from tfdet.imaging import preprocessing
from tfdet.ops.resize import resize_linear_cv2

MEANS = np.array([[[102.9801, 115.9465, 122.7717]]])


def assert_close_to_opencv(got, want):
    """Within one float32 ulp of the image's magnitude (< 256) of OpenCV's IPP kernel: bit-exact in
    most pixels, IPP rounds some source coordinates differently. OpenCV's own kernel (builds
    without IPP) computes its weights in float32 and lies up to ~1e-2 away."""
    assert got.shape == want.shape
    if cv2.ipp.useIPP():
        np.testing.assert_allclose(got, want, rtol=0, atol=np.spacing(np.float32(256)))
        assert np.mean(got == want) > 0.5
    else:
        np.testing.assert_allclose(got, want, atol=2e-2)


@pytest.mark.parametrize(
    "shape, target, max_size",
    [
        ((600, 906, 3), 320, 512),  # 906 * 320 / 600 = 483.2: OpenCV samples at the given scale
        ((600, 1116, 3), 800, 1333),  # the longer side caps the scale
        ((480, 640, 3), 800, 1333),  # integral sizes
        ((37, 51, 3), 320, 512),  # upscaling
        ((2, 500, 3), 800, 1333),
    ],
)
def test_prepare_image_matches_tfdet(rng, shape, target, max_size):
    image = rng.integers(0, 256, shape, dtype=np.uint8)
    want, want_scale = preprocessing.prepare_image(image, MEANS, target, max_size)
    got, scale = prepare_image(tf.constant(image), MEANS.reshape(3).tolist(), target, max_size)
    assert scale.dtype == tf.float64 and float(scale) == want_scale
    assert_close_to_opencv(got.numpy(), want)


def test_resize_linear_cv2_by_scale_samples_as_opencv_does(rng):
    image = rng.normal(0.0, 50.0, (61, 90)).astype(np.float32)
    scale = 320 / 61  # 90 * scale = 472.1: by size, cv2 would sample at 90 / 472 instead
    want = cv2.resize(image, None, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
    got = resize_linear_cv2(image, scale=scale).numpy()
    assert_close_to_opencv(got, want)
    by_size = resize_linear_cv2(image, *want.shape).numpy()
    assert np.abs(by_size - want).max() > 1.0  # the sampling positions are what the scale changes
    np.testing.assert_array_equal(resize_linear_cv2(image, scale=tf.constant(scale, tf.float64)).numpy(), got)
    for arguments in ({}, {"height": 5}, {"height": 5, "width": 5, "scale": 2.0}):
        with pytest.raises(ValueError, match="either height and width, or scale"):
            resize_linear_cv2(image, **arguments)


@pytest.mark.parametrize("stride", [32, 0])
def test_prepare_batch_matches_batch_images(rng, stride):
    images = [rng.integers(0, 256, s, dtype=np.uint8) for s in [(90, 130, 3), (140, 61, 3), (75, 75, 3)]]
    prepared = [preprocessing.prepare_image(im, MEANS, 100, 160) for im in images]
    want = preprocessing.batch_images([p[0] for p in prepared], stride)
    encoded = tf.constant([cv2.imencode(".png", im)[1].tobytes() for im in images])  # as serving_default gets them

    @tf.function
    def prepare(encoded):
        image_at = lambda i: decode_bgr(encoded[i])  # noqa: E731
        return prepare_batch(tf.shape(encoded)[0], image_at, MEANS.reshape(3).tolist(), 100, 160, stride)

    blob, info, sizes = prepare(encoded)
    assert_close_to_opencv(blob.numpy(), want)
    np.testing.assert_array_equal(sizes.numpy(), [im.shape[:2] for im in images])
    np.testing.assert_array_equal(
        info.numpy(), [[*im.shape[:2], np.float32(s)] for im, (_, s) in zip(images, prepared)]
    )


@pytest.mark.parametrize("shape, stride", [((90, 130), 32), ((140, 61), 0), ((37, 51), 32), ((75, 75), 0)])
def test_same_size_batch_is_prepare_batch_without_the_loop(rng, shape, stride):
    """The image_tensor signature's loop-free preparation: bit for bit `prepare_batch`'s blob, info and sizes."""
    images = rng.integers(0, 256, (3, *shape, 3), dtype=np.uint8)
    means = MEANS.reshape(3).tolist()

    @tf.function
    def both(images):
        looped = prepare_batch(tf.shape(images)[0], lambda i: images[i], means, 100, 160, stride)
        return looped, prepare_same_size_batch(images, means, 100, 160, stride)

    looped, batched = both(images)
    for got, want in zip(batched, looped):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_decode_bgr_gives_what_cv2_imread_gives(rng):
    """The served graph decodes JPEGs pixel for pixel as OpenCV (TF's default DCT would not)."""
    for path in sorted(shared_path("data", "detectron_demo").glob("*.jpg"))[:3]:
        np.testing.assert_array_equal(decode_bgr(tf.constant(path.read_bytes())).numpy(), cv2.imread(str(path)))
    image = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    png = cv2.imencode(".png", image)[1].tobytes()
    np.testing.assert_array_equal(decode_bgr(tf.constant(png)).numpy(), image)
    gray = cv2.imencode(".png", image[:, :, 0])[1].tobytes()
    np.testing.assert_array_equal(decode_bgr(tf.constant(gray)).numpy(), np.repeat(image[:, :, :1], 3, axis=2))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Unknown image file format"):
        decode_bgr(tf.constant(b"not an image"))
