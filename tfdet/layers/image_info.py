"""ImInfo: Detectron's `im_info` (input blob height, width, image scale) for each image of a batch."""

import keras
import tensorflow as tf


class ImInfo(keras.layers.Layer):
    """(B, 3) = (padded input height, padded input width, scale), from the images and image_info.

    Detectron's test-time im_info uses the padded blob's size (kept, in its words, to make results
    exactly reproducible); `image_info` (B, 3) holds (original height, original width, scale).
    """

    def call(self, images, image_info):
        shape = tf.cast(tf.shape(images)[1:3], tf.float32)
        batch = tf.shape(images)[0]
        sizes = tf.broadcast_to(shape[None, :], tf.stack([batch, 2]))
        return tf.concat([sizes, tf.cast(image_info[:, 2:3], tf.float32)], axis=1)

    def compute_output_shape(self, images_shape, image_info_shape):
        return (images_shape[0], 3)
