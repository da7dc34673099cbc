"""In-graph test-time image preparation for the SavedModel: `tfdet.imaging.preprocessing` (Detectron's
prep_im_for_blob and im_list_to_blob, which the Predictor runs with numpy and cv2) as TensorFlow
ops, so that the served graph takes encoded or raw images.

Built from the training pipeline's pure-TF pieces (`tfdet.data.transforms`: cv2-exact JPEG
decoding, the scale rule) and `tfdet.ops.resize_linear_cv2` by scale; the means are subtracted in
float64, as Detectron does, so that the served detections equal the Predictor's.
"""

import tensorflow as tf

from tfdet.data.transforms import image_scale, pad_to_multiple, subtract_means
from tfdet.ops.resize import resize_linear_cv2


def prepare_image(image_bgr, pixel_means, target_size, max_size):
    """`tfdet.imaging.preprocessing.prepare_image` as ops: (resized float32 image minus means, float64 scale)."""
    image = subtract_means(image_bgr, pixel_means, tf.float64)
    scale = image_scale(tf.shape(image)[0], tf.shape(image)[1], target_size, max_size)
    resized = resize_linear_cv2(image, scale=scale)
    tf.debugging.assert_positive(
        tf.reduce_min(tf.shape(resized)[:2]), message="image too elongated: it resizes to zero pixels"
    )
    return resized, scale


def prepare_batch(count, image_at, pixel_means, target_size, max_size, stride):
    """Prepare `count` BGR images `image_at(i)` (sizes may differ) into the model's inputs.

    Returns `images` (B, H, W, 3) float32 zero-padded bottom-right, H and W rounded up to `stride`
    when > 0 (`tfdet.imaging.preprocessing.batch_images`), `image_info` (B, 3) float32 = (original height,
    original width, scale) and `image_sizes` (B, 2) int32 = original (height, width).
    """
    tf.debugging.assert_positive(count, message="the request holds no image")

    def prepare(i, resized, info, sizes, largest):
        image = image_at(i)
        prepared, scale = prepare_image(image, pixel_means, target_size, max_size)
        size = tf.shape(image)[:2]
        image_info = tf.concat([tf.cast(size, tf.float32), [tf.cast(scale, tf.float32)]], axis=0)
        largest = tf.maximum(largest, tf.shape(prepared)[:2])
        return i + 1, resized.write(i, prepared), info.write(i, image_info), sizes.write(i, size), largest

    _, resized, info, sizes, largest = tf.while_loop(
        lambda i, *_: i < count,
        prepare,
        (
            tf.constant(0),
            tf.TensorArray(tf.float32, size=count, infer_shape=False, element_shape=[None, None, 3]),
            tf.TensorArray(tf.float32, size=count, element_shape=[3]),
            tf.TensorArray(tf.int32, size=count, element_shape=[2]),
            tf.zeros([2], tf.int32),
        ),
    )

    def pad(i, padded):
        image = resized.read(i)
        room = largest - tf.shape(image)[:2]
        return i + 1, padded.write(i, tf.pad(image, [[0, room[0]], [0, room[1]], [0, 0]]))

    _, padded = tf.while_loop(
        lambda i, _: i < count,
        pad,
        (tf.constant(0), tf.TensorArray(tf.float32, size=count, element_shape=[None, None, 3])),
    )
    images = pad_to_multiple(tf.ensure_shape(padded.stack(), [None, None, None, 3]), (1, 2), stride)
    return images, info.stack(), sizes.stack()


def prepare_same_size_batch(images_bgr, pixel_means, target_size, max_size, stride):
    """`prepare_batch` of a (B, H, W, 3) uint8 BGR batch, whose images share one size: the same outputs
    without a loop over the images. Every image has the same scale and resized size, so the batch is
    resized as one (H, W, B * 3) image: `resize_linear_cv2` treats each channel alike, so each image's
    pixels are computed as `prepare_image` computes them, bit for bit. Graph loops over a request's images
    (TensorArrays) are what other runtimes' converters handle worst (OpenVINO's ONNX reader refuses them).
    """
    tf.debugging.assert_positive(tf.shape(images_bgr)[0], message="the request holds no image")
    shape = tf.shape(images_bgr)
    batch, height, width = shape[0], shape[1], shape[2]
    images = subtract_means(images_bgr, pixel_means, tf.float64)  # (B, H, W, 3), per pixel as prepare_image
    scale = image_scale(height, width, target_size, max_size)
    side_by_side = tf.reshape(tf.transpose(images, [1, 2, 0, 3]), tf.stack([height, width, batch * 3]))
    resized = resize_linear_cv2(side_by_side, scale=scale)
    tf.debugging.assert_positive(
        tf.reduce_min(tf.shape(resized)[:2]), message="image too elongated: it resizes to zero pixels"
    )
    resized_shape = tf.shape(resized)
    resized = tf.transpose(tf.reshape(resized, tf.stack([resized_shape[0], resized_shape[1], batch, 3])), [2, 0, 1, 3])
    resized = pad_to_multiple(tf.ensure_shape(resized, [None, None, None, 3]), (1, 2), stride)
    size = tf.stack([height, width])
    info = tf.concat([tf.cast(size, tf.float32), [tf.cast(scale, tf.float32)]], axis=0)
    return resized, tf.tile(info[None], tf.stack([batch, 1])), tf.tile(size[None], tf.stack([batch, 1]))
