"""Mask paste: Detectron's `segm_results` for one image, as TensorFlow ops.

Each M x M mask is zero-padded to (M+2)^2, its box is grown by (M+2)/M about the centre and
truncated to integers (`expand_boxes(...).astype(np.int32)`), the padded mask is resized to the
integer box with `cv2.resize` INTER_LINEAR (reproduced exactly by `resize_linear_cv2`),
thresholded with `>` and pasted into the image, clipped at its borders. The padding keeps the
mask from bleeding its border values outwards ("top hat" artefacts, says Detectron).
"""

import tensorflow as tf

from tfdet.ops.map_fn import map_fn
from tfdet.ops.resize import resize_linear_cv2


def paste_masks(masks, boxes, image_height, image_width, threshold=0.5, canvas_size=None):
    """Binary (N, H, W) image masks from (N, M, M) probabilities and (N, 4) x1,y1,x2,y2 boxes.

    `threshold` is cfg.MRCNN.THRESH_BINARIZE; a pixel is on when its probability is above it.
    `image_height` and `image_width` are scalars, or (N,) each mask's own image size. `canvas_size`
    (height, width), at least every image's size, gives (N, height, width) masks instead: each mask clipped
    to its own image and zero-padded bottom-right (the masks of a batch of images of different sizes).
    """
    return _paste(masks, boxes, image_height, image_width, threshold, canvas_size)


def paste_masks_soft(masks, boxes, image_height, image_width):
    """(N, H, W) float32 probabilities that `paste_masks` thresholds; 0 outside each box."""
    return _paste(masks, boxes, image_height, image_width, None)


def _paste(masks, boxes, image_height, image_width, threshold, canvas_size=None):
    """One `tf.map_fn` step per detection: boxes differ in size, so each gets its own resize."""
    masks = tf.convert_to_tensor(masks, tf.float32)
    image_height = tf.cast(image_height, tf.int32)
    image_width = tf.cast(image_width, tf.int32)
    if canvas_size is None:
        canvas_height, canvas_width = image_height, image_width
    else:
        canvas_height, canvas_width = tf.unstack(tf.cast(canvas_size, tf.int32), num=2)
    count = tf.shape(masks)[0]
    # every mask's own image size (the map's elements): one size for all, or (N,) sizes
    image_sizes = tf.stack(
        [tf.broadcast_to(image_height, tf.reshape(count, [1])), tf.broadcast_to(image_width, tf.reshape(count, [1]))],
        axis=1,
    )
    reference_boxes = _reference_boxes(boxes, tf.shape(masks)[-1])
    dtype = tf.float32 if threshold is None else tf.bool

    def paste_one(args):
        mask, box, size = args
        region = _resize_into_box(mask, box)
        if threshold is not None:
            region = region > threshold
        return _place_in_image(region, box, size[0], size[1], canvas_height, canvas_width)

    def paste_all():
        signature = tf.TensorSpec([None, None], dtype)
        return map_fn(paste_one, (masks, reference_boxes, image_sizes), fn_output_signature=signature)

    # map_fn cannot stack zero masks of unknown size: no detections get an explicit empty result.
    return tf.cond(count > 0, paste_all, lambda: tf.zeros(tf.stack([0, canvas_height, canvas_width]), dtype))


def _reference_boxes(boxes, mask_size):
    """Detectron's `expand_boxes(boxes, (M+2)/M).astype(np.int32)`, in float32 like Detectron."""
    boxes = tf.convert_to_tensor(boxes, tf.float32)
    mask_size = tf.cast(mask_size, tf.float64)
    scale = tf.cast((mask_size + 2.0) / mask_size, tf.float32)
    x1, y1, x2, y2 = tf.unstack(boxes, axis=-1)
    half_width = (x2 - x1) * 0.5 * scale
    half_height = (y2 - y1) * 0.5 * scale
    center_x = (x2 + x1) * 0.5
    center_y = (y2 + y1) * 0.5
    expanded = [
        center_x - half_width,
        center_y - half_height,
        center_x + half_width,
        center_y + half_height,
    ]
    return tf.cast(tf.stack(expanded, axis=-1), tf.int32)  # truncates towards 0 like astype


def _resize_into_box(mask, box):
    """The zero-padded mask resized to the integer box, `w = x2 - x1 + 1` at least 1 pixel."""
    padded = tf.pad(mask, [[1, 1], [1, 1]])
    x1, y1, x2, y2 = tf.unstack(box)
    return resize_linear_cv2(padded, tf.maximum(y2 - y1 + 1, 1), tf.maximum(x2 - x1 + 1, 1))


def _place_in_image(region, box, image_height, image_width, canvas_height, canvas_width):
    """Put the box-sized `region` at the box's top-left corner of an empty image, clipped to the image,
    on an empty canvas (the image padded bottom-right)."""
    x1, y1, x2, y2 = tf.unstack(box)
    x_start, x_end = _visible_span(x1, x2, image_width)
    y_start, y_end = _visible_span(y1, y2, image_height)
    # Spans outside the image are empty; clipping keeps their (unused) offsets inside `region`.
    offset = tf.clip_by_value(tf.stack([y_start - y1, x_start - x1]), 0, tf.shape(region))
    visible = tf.slice(region, offset, [y_end - y_start, x_end - x_start])
    return tf.pad(visible, [[y_start, canvas_height - y_end], [x_start, canvas_width - x_end]])


def _visible_span(first, last, size):
    """The pixels [start, end) of the inclusive span first..last that lie inside [0, size)."""
    start = tf.clip_by_value(first, 0, size)
    return start, tf.clip_by_value(last + 1, start, size)
