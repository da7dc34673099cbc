"""Keypoint decoding: Detectron's `heatmaps_to_keypoints`, as TensorFlow ops.

Each box's heatmaps are resized with `cv2.resize` INTER_CUBIC (reproduced exactly by
`resize_cubic_cv2`) to ceil(box size) pixels, no "+1" in the box size; the first maximum of each
keypoint's map, in row-major order as `np.argmax` finds it, gives the keypoint at the centre of
that pixel (Heckbert's c = d + 0.5), scaled back to the box.
"""

import tensorflow as tf

from tfdet.ops.map_fn import map_fn
from tfdet.ops.resize import resize_cubic_cv2


def heatmaps_to_keypoints(heatmaps, boxes, min_size=0):
    """(N, K, 4) keypoints (x, y, logit, prob) from (N, S, S, K) heatmap logits and (N, 4) boxes.

    Heatmaps are NHWC (Detectron's are NCHW); boxes x1, y1, x2, y2 in image pixels. `logit` is
    the resized heatmap's maximum, `prob` its spatial softmax there (Detectron's newest version;
    older ones had no softmax). Detectron returns (N, 4, K); this is its transpose. `min_size`
    is cfg.KRCNN.INFERENCE_MIN_SIZE: when positive, maps are resized to at least that size.
    """
    heatmaps = tf.convert_to_tensor(heatmaps, tf.float32)
    boxes = tf.convert_to_tensor(boxes, tf.float32)
    num_keypoints = tf.shape(heatmaps)[-1]
    x1, y1, x2, y2 = tf.unstack(boxes, axis=-1)
    widths = tf.maximum(x2 - x1, 1.0)
    heights = tf.maximum(y2 - y1, 1.0)
    map_widths = _heatmap_size(widths, min_size)
    map_heights = _heatmap_size(heights, min_size)
    map_widths_int = tf.cast(map_widths, tf.int32)

    def peaks_of_all():
        return map_fn(
            lambda args: _heatmap_peaks(*args),
            (heatmaps, tf.cast(map_heights, tf.int32), map_widths_int),
            fn_output_signature=(
                tf.TensorSpec([None], tf.int32),
                tf.TensorSpec([None], tf.float32),
                tf.TensorSpec([None], tf.float32),
            ),
        )

    def no_peaks():
        return (
            tf.zeros([0, num_keypoints], tf.int32),
            tf.zeros([0, num_keypoints]),
            tf.zeros([0, num_keypoints]),
        )

    # map_fn cannot stack zero results of unknown size: no boxes get an explicit empty result.
    peak_index, logits, probs = tf.cond(tf.shape(boxes)[0] > 0, peaks_of_all, no_peaks)
    x = _pixel_centre_to_image(peak_index % map_widths_int[:, None], widths / map_widths, x1)
    y = _pixel_centre_to_image(peak_index // map_widths_int[:, None], heights / map_heights, y1)
    keypoints = tf.stack([x, y, logits, probs], axis=-1)
    keypoints.set_shape([None, heatmaps.shape[-1], 4])
    return keypoints


def _heatmap_size(box_size, min_size):
    """The resized heatmap's side: ceil(box size), raised to `min_size` when that is positive."""
    size = tf.math.ceil(box_size)
    return tf.maximum(size, float(min_size)) if min_size > 0 else size


def _heatmap_peaks(heatmap, height, width):
    """Per keypoint: flat row-major index of the first maximum, its logit and its softmax prob.

    TF's ArgMax breaks ties towards the lower index, as `np.argmax` does (tested on tied maps,
    on CPU); the scores stay (height * width, K), never transposed: at a large box each pass
    over them moves K floats per pixel.
    """
    resized = resize_cubic_cv2(heatmap, height, width)  # (height, width, K)
    scores = tf.reshape(resized, [height * width, -1])
    first_best = tf.argmax(scores, axis=0, output_type=tf.int32)
    best = tf.gather_nd(scores, tf.stack([first_best, tf.range(tf.shape(scores)[1])], axis=1))
    # Detectron's softmax at the maximum: exp(0) / sum(exp(scores - best)).
    probs = 1.0 / tf.reduce_sum(tf.exp(scores - best), axis=0)
    return first_best, best, probs


def _pixel_centre_to_image(pixel, correction, offset):
    """(pixel + 0.5) * correction + offset in float64, then float32, as Detectron's numpy does."""
    position = (tf.cast(pixel, tf.float64) + 0.5) * tf.cast(correction, tf.float64)[:, None]
    return tf.cast(position + tf.cast(offset, tf.float64)[:, None], tf.float32)
