"""Image resizing that reproduces `cv2.resize` on float32 input bit for bit.

Detectron post-processes masks and keypoint heatmaps with `cv2.resize`, and no TF resize matches
it: `tf.image.resize` bilinear is off by up to ~2e-5 (float32 scale, unfused lerp); TF's bicubic
is Keys' a = -0.5 (`tf.image.resize`, `ResizeBicubic(half_pixel_centers=True)`) or a
table-quantised a = -0.75 without half-pixel centres (the legacy `ResizeBicubic`), off by 0.4
and more. OpenCV itself runs two different float32 code paths:

* Intel IPP (x86 builds, the default for 1, 3 and 4 channels): `resize_linear_cv2` reproduces its
  single-channel INTER_LINEAR, the path Detectron's mask paste takes (IPP's 3-channel kernel
  rounds differently in ~1% of pixels).
* OpenCV's own `resizeGeneric_` (every other channel count, and builds without IPP):
  `resize_cubic_cv2` reproduces its INTER_CUBIC, the path Detectron's 17-channel keypoint
  heatmaps take.

Both are separable: the horizontal pass runs first, then the vertical one; borders replicate.
Images are (H, W) or channels-last (H, W, C); output sizes may be dynamic scalar tensors.

`cv2.resize` given a size samples output pixel x at `(x + 0.5) * in / out - 0.5`; given a scale
factor (`fx = fy = scale`, as Detectron's `prep_im_for_blob` calls it) at `(x + 0.5) / scale - 0.5`,
into `scaled_size` pixels. Whenever `size * scale` is not an integer the two differ, by up to half
an output pixel at the far edge; `resize_linear_cv2` takes either.
"""

import tensorflow as tf

# OpenCV's bicubic parameter (`interpolateCubic`); Keys' classic kernel would be -0.5.
CUBIC_A = -0.75

# Floats per SIMD register in OpenCV's baseline (SSE / NEON) vertical cubic loop.
_OPENCV_SIMD_LANES = 4


def resize_linear_cv2(image, height=None, width=None, scale=None):
    """INTER_LINEAR `cv2.resize` as OpenCV's IPP path computes it, to a size or by a scale factor.

    `height` and `width`: `cv2.resize(image, (width, height))`. `scale` instead:
    `cv2.resize(image, None, fx=scale, fy=scale)`, output `scaled_size` (bit-exact in most pixels,
    one float32 ulp away in the others, where IPP rounds a source coordinate differently). Give
    `scale` as a Python float or a float64 tensor: a float32 scale moves the samples.
    """
    if (height is None) != (width is None) or (height is None) == (scale is None):
        raise ValueError("resize_linear_cv2 takes either height and width, or scale")
    image = tf.convert_to_tensor(image, tf.float32)
    rank = image.shape.rank
    if scale is not None:
        scale = tf.cast(tf.convert_to_tensor(scale, dtype_hint=tf.float64), tf.float64)
        height, width = tf.unstack(scaled_size(tf.shape(image)[0], tf.shape(image)[1], scale))
    lo, hi, frac = _ipp_linear_taps(tf.shape(image)[1], width, scale)
    rows = _fma_lerp(
        tf.gather(image, lo, axis=1), tf.gather(image, hi, axis=1), _broadcastable(frac, 1, rank)
    )
    lo, hi, frac = _ipp_linear_taps(tf.shape(image)[0], height, scale)
    return _fma_lerp(tf.gather(rows, lo), tf.gather(rows, hi), _broadcastable(frac, 0, rank))


def scaled_size(height, width, scale):
    """(2,) int32 output size of `cv2.resize` with fx = fy = `scale` (float64):
    `saturate_cast<int>(size * scale)`, which rounds half to even."""
    size = tf.cast(tf.stack([height, width]), tf.float64) * tf.cast(scale, tf.float64)
    return tf.cast(tf.round(size), tf.int32)


def resize_cubic_cv2(image, height, width):
    """`cv2.resize(image, (width, height), interpolation=cv2.INTER_CUBIC)` (OpenCV's own path)."""
    image = tf.convert_to_tensor(image, tf.float32)
    rank = image.shape.rank
    indices, weights = _opencv_cubic_taps(tf.shape(image)[1], width)
    taps = tf.gather(image, indices, axis=1)  # (in_height, width, 4, ...)
    p = [taps[:, :, k] * _broadcastable(weights[:, k], 1, rank) for k in range(4)]
    rows = ((p[0] + p[1]) + p[2]) + p[3]
    flat_rows = tf.reshape(rows, [tf.shape(rows)[0], -1])  # OpenCV's rows: width * channels floats
    resized = _vertical_cubic_pass(flat_rows, *_opencv_cubic_taps(tf.shape(image)[0], height))
    return tf.reshape(resized, tf.concat([[height], tf.shape(rows)[1:]], axis=0))


def _vertical_cubic_pass(rows, indices, weights):
    """OpenCV's vertical cubic pass over (in_height, row_length) rows: (height, row_length).

    Its SIMD loop sums the 4 weighted taps last-to-first over whole registers; the row's last
    row_length % 4 floats are summed first-to-last by scalar code. Each part is summed in its own
    order from its own columns, so that no output-sized tensor is computed twice.
    """
    row_length = tf.shape(rows)[1]
    simd_length = row_length - row_length % _OPENCV_SIMD_LANES

    def weighted_taps(columns):
        return [tf.gather(columns, indices[:, k]) * weights[:, k, None] for k in range(4)]

    p = weighted_taps(rows[:, :simd_length])
    simd_part = p[0] + (p[1] + (p[2] + p[3]))
    p = weighted_taps(rows[:, simd_length:])
    scalar_part = ((p[0] + p[1]) + p[2]) + p[3]
    return tf.concat([simd_part, scalar_part], axis=1)


def _ipp_linear_taps(in_size, out_size, scale=None):
    """IPP's linear taps: float64 source coordinate (at the size ratio, or at float64 `scale` when
    given), float32 fraction, edges replicated."""
    in_size = tf.cast(in_size, tf.int32)
    out_size = tf.cast(out_size, tf.int32)
    centres = tf.range(out_size, dtype=tf.float64) + 0.5
    if scale is None:
        coord = centres * (tf.cast(in_size, tf.float64) / tf.cast(out_size, tf.float64)) - 0.5
    else:
        coord = centres / scale - 0.5
    floor = tf.floor(coord)
    lo = tf.cast(floor, tf.int32)
    outside = (lo < 0) | (lo >= in_size - 1)
    frac = tf.where(outside, tf.zeros_like(coord), coord - floor)
    lo = tf.clip_by_value(lo, 0, in_size - 1)
    hi = tf.minimum(lo + 1, in_size - 1)
    return lo, hi, tf.cast(frac, tf.float32)


def _fma_lerp(a, b, t):
    """a + (b - a) * t rounded once, like IPP's fused multiply-add (float64 holds the product)."""
    diff = tf.cast(b - a, tf.float64)
    return tf.cast(tf.cast(a, tf.float64) + diff * tf.cast(t, tf.float64), tf.float32)


def _opencv_cubic_taps(in_size, out_size):
    """`resizeGeneric_`'s cubic taps: 4 clamped indices and float32 weights per output pixel."""
    in_size = tf.cast(in_size, tf.int32)
    out_size = tf.cast(out_size, tf.int32)
    # OpenCV: inv_scale = dst / src, scale = 1 / inv_scale, both in double; fx rounded to float.
    scale = 1.0 / (tf.cast(out_size, tf.float64) / tf.cast(in_size, tf.float64))
    coord = tf.cast((tf.range(out_size, dtype=tf.float64) + 0.5) * scale - 0.5, tf.float32)
    floor = tf.floor(coord)
    frac = coord - floor
    indices = tf.cast(floor, tf.int32)[:, None] + tf.range(-1, 3)[None, :]
    return tf.clip_by_value(indices, 0, in_size - 1), _cubic_weights(frac)


def _cubic_weights(x):
    """OpenCV's `interpolateCubic` in float32, operation for operation (rounding included)."""
    a = CUBIC_A
    w0 = ((a * (x + 1.0) - 5.0 * a) * (x + 1.0) + 8.0 * a) * (x + 1.0) - 4.0 * a
    w1 = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    w2 = ((a + 2.0) * (1.0 - x) - (a + 3.0)) * (1.0 - x) * (1.0 - x) + 1.0
    w3 = 1.0 - w0 - w1 - w2
    return tf.stack([w0, w1, w2, w3], axis=-1)


def _broadcastable(vector, axis, rank):
    """Reshape a per-position vector so that it broadcasts along `axis` of a rank-`rank` image."""
    return tf.reshape(vector, [-1] + [1] * (rank - 1 - axis))
