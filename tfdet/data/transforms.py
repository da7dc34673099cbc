"""Training-image transforms as TensorFlow ops (no Python callbacks), with Detectron's numerics.

The image path reproduces `tfdet.imaging.preprocessing.prepare_image` (Detectron's `prep_im_for_blob`) on the
pixels `cv2.imread` gives (the pipeline reads files with `tfdet.imaging.image_io.read_image`; `decode_bgr`
gives the same pixels from encoded bytes with TF ops, for the SavedModel), optional horizontal flip
of the original image (Detectron flips before resizing), mean subtraction, then
`cv2.resize(im, None, fx=scale, fy=scale)` INTER_LINEAR (`tfdet.ops.resize_linear_cv2` by scale:
OpenCV's sampling, within one float32 ulp). Training subtracts the means in float32 (within one ulp
of Detectron's float64, at a quarter of the cost); the exported SavedModel, which must match
`Predictor` output for output, subtracts them in float64. Ground truth follows
Detectron's flip conventions in original pixels (boxes and keypoints `x -> W - x - 1`; masks
mirrored pixel for pixel) and is then multiplied by the scale.
"""

import tensorflow as tf

from tfdet.data.exif_orientation import apply_orientation, exif_orientation
from tfdet.ops.resize import resize_linear_cv2

# COCO's compressed RLE: 5 payload bits per character, offset by 48, bit 5 = more characters follow,
# bit 4 of a number's last character = negative (`rleFrString` in pycocotools' maskApi.c).
_RLE_CHAR_OFFSET = 48
_RLE_MORE_BIT = 0x20
_RLE_SIGN_BIT = 0x10
_RLE_PAYLOAD_BITS = 5


def decode_bgr(encoded):
    """Image bytes -> (H, W, 3) uint8 BGR, pixel for pixel what `cv2.imdecode(IMREAD_COLOR)` gives, with
    TensorFlow ops only (the SavedModel's decoder; everything else reads with `tfdet.imaging.image_io.read_image`).

    JPEG uses libjpeg's accurate integer DCT as OpenCV does (TF's default, the fast one, is off by a few
    levels); PNG (16-bit, grey, palette, alpha), BMP, GIF and WebP go through `decode_image`; the EXIF
    Orientation tag of JPEG, PNG and WebP is applied as OpenCV applies it. TIFF and other formats TensorFlow
    lacks raise InvalidArgumentError ("Unknown image file format"); a CMYK JPEG may differ by one level.
    """
    rgb = tf.cond(
        tf.io.is_jpeg(encoded),
        lambda: tf.io.decode_jpeg(encoded, channels=3, dct_method="INTEGER_ACCURATE"),
        lambda: tf.io.decode_image(encoded, channels=3, dtype=tf.uint8, expand_animations=False),
    )
    bgr = tf.reverse(tf.ensure_shape(rgb, [None, None, 3]), axis=[-1])
    return apply_orientation(bgr, exif_orientation(encoded))


def subtract_means(image_bgr, pixel_means, compute_dtype=tf.float32):
    """uint8 BGR minus PIXEL_MEANS as a float32 image, computed in `compute_dtype`: float32 is within
    one float32 ulp of Detectron's subtraction (`prepare_image`) at a quarter of its cost; float64 is
    Detectron's (float64 means, the difference rounded to float32)."""
    means = tf.constant(pixel_means, compute_dtype, shape=[1, 1, 3])
    return tf.cast(tf.cast(image_bgr, compute_dtype) - means, tf.float32)


def image_scale(height, width, target_size, max_size):
    """`tfdet.imaging.preprocessing.image_scale` (float64): shorter side to target unless the longer passes max."""
    short = tf.cast(tf.minimum(height, width), tf.float64)
    long = tf.cast(tf.maximum(height, width), tf.float64)
    scale = tf.cast(target_size, tf.float64) / short
    capped = tf.cast(max_size, tf.float64) / long
    return tf.where(tf.round(scale * long) > tf.cast(max_size, tf.float64), capped, scale)


def resize_image_by_scale(image, scale):
    """`cv2.resize(image, None, fx=scale, fy=scale)` INTER_LINEAR of an (H, W, C) float32 image
    (`tfdet.ops.resize_linear_cv2` by scale; `scale` float64 or a Python float)."""
    return resize_linear_cv2(image, scale=scale)


def _float64(value):
    """A float64 tensor of `value`; Python floats are not rounded through float32 on the way (tf.cast does that)."""
    return tf.cast(tf.convert_to_tensor(value, dtype_hint=tf.float64), tf.float64)


def flip_boxes(boxes, width):
    """Detectron's flip of x1, y1, x2, y2 boxes (inclusive pixel indices): x1' = W - x2 - 1, x2' = W - x1 - 1."""
    width = tf.cast(width, boxes.dtype)
    x1, y1, x2, y2 = tf.unstack(boxes, axis=-1)
    return tf.stack([width - x2 - 1.0, y1, width - x1 - 1.0, y2], axis=-1)


def flip_keypoints(keypoints, flip_pairs, width):
    """Detectron's `flip_keypoints` of (G, K, 3) x, y, v: left/right swapped, x' = W - x - 1, x = 0 where v = 0."""
    permutation = list(range(keypoints.shape[1]))
    for i, j in flip_pairs:
        permutation[i], permutation[j] = j, i
    keypoints = tf.gather(keypoints, permutation, axis=1)
    x, y, v = tf.unstack(keypoints, axis=-1)
    x = tf.where(v > 0, tf.cast(width, keypoints.dtype) - x - 1.0, tf.zeros_like(x))
    return tf.stack([x, y, v], axis=-1)


def decode_rle_masks(counts, height, width, scale=1.0, out_size=None, flip=False):
    """(G,) COCO compressed RLE strings of (height, width) masks -> (G, out_h, out_w) uint8 in {0, 1}.

    Each mask is decoded, mirrored when `flip` and resized by `scale` to `out_size` (default: the
    original size) by nearest neighbour: output pixel x takes the source pixel under its centre,
    `floor((x + 0.5) / scale)`, the geometry of the image's resize. Only the columns a mask's
    foreground spans are decoded (RLE is column-major), so the cost follows the objects' boxes.
    """
    spans, first_column, last_column, span_offset = _decode_spanned_columns(counts, height)
    scale = _float64(scale)
    out_size = tf.stack([height, width]) if out_size is None else out_size
    source_column = tf.cast(_nearest_source(width, out_size[1], scale), tf.int64)
    if flip is not False:
        source_column = tf.where(flip, tf.cast(width, tf.int64) - 1 - source_column, source_column)
    source_column = source_column[None, :]
    inside = (source_column >= first_column[:, None]) & (source_column <= last_column[:, None])
    empty_column = tf.shape(spans, out_type=tf.int64)[0] - 1
    span_column = tf.where(inside, span_offset[:, None] + source_column - first_column[:, None], empty_column)
    columns = tf.gather(spans, span_column)  # (G, out_w, height)
    return tf.gather(tf.transpose(columns, [0, 2, 1]), _nearest_source(height, out_size[0], scale), axis=1)


def _decode_spanned_columns(counts, height):
    """The columns each mask's foreground spans, decoded side by side.

    Returns `spans` (total columns + 1, height) uint8, the last row an empty column; each mask's
    first and last spanned column (0 and -1 when it is empty) and the row of its first column in
    `spans`.
    """
    runs, mask_of_run, first_run, odd = _rle_runs(counts)
    num_masks = tf.shape(counts, out_type=tf.int64)[0]
    height = tf.cast(height, tf.int64)
    run_end = _cumsum_per_mask(runs, first_run, mask_of_run)
    foreground = tf.logical_and(odd, runs > 0)
    start = tf.boolean_mask(run_end - runs, foreground)
    end = tf.boolean_mask(run_end, foreground)
    mask_of_start = tf.boolean_mask(mask_of_run, foreground)
    has_foreground = tf.math.unsorted_segment_max(tf.ones_like(start), mask_of_start, num_masks) > 0
    first_column = tf.math.unsorted_segment_min(start // height, mask_of_start, num_masks)
    last_column = tf.math.unsorted_segment_max((end - 1) // height, mask_of_start, num_masks)
    first_column = tf.where(has_foreground, first_column, 0)
    last_column = tf.where(has_foreground, last_column, -1)
    num_columns = last_column - first_column + 1
    span_offset = tf.cumsum(num_columns, exclusive=True)
    total_columns = tf.reduce_sum(num_columns)
    # Column-major: +1 where a foreground run starts, -1 where it ends; the running sum is the mask.
    shift = tf.gather((span_offset - first_column) * height, mask_of_start)
    edges = tf.scatter_nd(
        tf.concat([start + shift, end + shift], 0)[:, None],
        tf.concat([tf.ones_like(start, tf.int8), -tf.ones_like(end, tf.int8)], 0),
        [total_columns * height + 1],
    )
    spans = tf.reshape(tf.cast(tf.cumsum(edges[:-1]), tf.uint8), tf.stack([total_columns, height]))
    spans = tf.concat([spans, tf.zeros(tf.stack([1, height]), tf.uint8)], 0)
    return spans, first_column, last_column, span_offset


def _nearest_source(in_size, out_size, scale):
    """Source pixel under the centre of each output pixel, `floor((x + 0.5) / scale)`, clamped."""
    coord = tf.floor((tf.range(out_size, dtype=tf.float64) + 0.5) / scale)
    return tf.clip_by_value(tf.cast(coord, tf.int32), 0, tf.cast(in_size, tf.int32) - 1)


def _rle_runs(counts):
    """Run lengths of COCO compressed RLE strings (pycocotools' `rleFrString` as vectorised ops).

    Characters -> signed numbers (5 bits per character) -> runs, each after the third stored as a
    difference to the run two before. Returns the runs of all masks concatenated (int64), the mask
    of each run, each mask's first run index and whether a run is odd (foreground) in its mask.
    """
    codes = tf.strings.unicode_decode(counts, "UTF-8")
    chars = tf.cast(codes.flat_values, tf.int64) - _RLE_CHAR_OFFSET
    last_char = tf.equal(tf.bitwise.bitwise_and(chars, _RLE_MORE_BIT), 0)
    number_of_char = tf.cumsum(tf.cast(last_char, tf.int64), exclusive=True)
    char_index = tf.range(tf.size(chars, out_type=tf.int64))
    position = char_index - tf.gather(tf.math.segment_min(char_index, number_of_char), number_of_char)
    payload = tf.bitwise.left_shift(tf.bitwise.bitwise_and(chars, 0x1F), _RLE_PAYLOAD_BITS * position)
    numbers = tf.math.segment_sum(payload, number_of_char)
    negative = tf.not_equal(tf.bitwise.bitwise_and(tf.boolean_mask(chars, last_char), _RLE_SIGN_BIT), 0)
    length = tf.boolean_mask(position, last_char) + 1
    sign_bit = tf.bitwise.left_shift(tf.ones_like(numbers), _RLE_PAYLOAD_BITS * length)
    numbers = tf.where(negative, numbers - sign_bit, numbers)

    mask_of_run = tf.boolean_mask(codes.value_rowids(), last_char)
    run_index = tf.range(tf.size(numbers, out_type=tf.int64))
    first_run = tf.math.unsorted_segment_min(run_index, mask_of_run, tf.shape(counts, out_type=tf.int64)[0])
    run = run_index - tf.gather(first_run, mask_of_run)  # index of the run within its mask
    odd = tf.equal(run % 2, 1)
    even_after_first = tf.logical_and(tf.logical_not(odd), run > 0)
    odd_runs = _cumsum_per_mask(tf.where(odd, numbers, 0), first_run, mask_of_run)
    even_runs = _cumsum_per_mask(tf.where(even_after_first, numbers, 0), first_run, mask_of_run)
    runs = tf.where(run == 0, numbers, tf.where(odd, odd_runs, even_runs))
    return runs, mask_of_run, first_run, odd


def _cumsum_per_mask(values, first_run, mask_of_run):
    """Inclusive running sum of `values` restarting at each mask's first run."""
    before = tf.cumsum(values, exclusive=True)
    # (a mask without runs has first_run = int64 max; no run refers to it)
    start = tf.gather(before, tf.minimum(first_run, tf.size(values, tf.int64) - 1))
    return tf.cumsum(values) - tf.gather(start, mask_of_run)


def pad_to_multiple(tensor, axes, multiple):
    """Zero-pad `tensor` at the end of `axes` up to a multiple of `multiple` (no-op when multiple <= 0)."""
    if multiple <= 0:
        return tensor
    shape = tf.shape(tensor)
    paddings = [[0, 0] for _ in range(tensor.shape.rank)]
    for axis in axes:
        paddings[axis][1] = (multiple - shape[axis] % multiple) % multiple
    return tf.pad(tensor, paddings)
