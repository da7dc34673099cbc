"""RoIAlign as a composite of stock TensorFlow ops (no custom kernel, loads in TF Serving, runs under XLA).

Semantics are those of Caffe2's ``RoIAlign`` (the kernel Detectron's weights were trained with, also
maskrcnn-benchmark's ``ROIAlign_cpu.cpp``) and, with ``aligned=True``, of detectron2's ROIAlignV2:

* RoI start ``x1 * scale - offset``, end ``x2 * scale - offset`` (``offset`` 0.5 when aligned, else 0);
  legacy RoIs are at least 1x1 (``max(end - start, 1)``), aligned RoIs keep their size (even 0);
* ``bin = size / pooled``; grid ``sampling_ratio`` per axis, or ``ceil(size / pooled)`` per RoI and axis
  when ``sampling_ratio == 0``; samples at ``start + p * bin + (i + 0.5) * bin / grid``;
* bilinear sampling: 0 when ``y < -1 or y > H`` (same for x), ``y <= 0 -> 0``, ``y >= H - 1 -> H - 1``;
* each bin is the plain average of its ``grid_h * grid_w`` samples (invalid samples count as zeros);
  an aligned RoI of size 0 with an adaptive grid has no samples and pools to 0.

Both formulations use that the bilinear weight of a sample, its validity and the average over the
grid all factor into a row part and a column part:

* fixed grid (``sampling_ratio > 0``): the samples of a RoI are an evenly spaced (out * grid)^2 lattice,
  which is exactly what TF's native ``CropAndResize`` kernel samples bilinearly; the feature map gets one
  edge-replicated cell on each side so that its out-of-range rule (0 outside the map) becomes Caffe2's
  (0 outside [-1, H], clamped to the border inside), then each bin's grid is average-pooled. Float64 inputs
  (CropAndResize computes in float32) and ``xla=True`` (it has no XLA kernel) use the composite instead:
  each bin reads ``2 * grid`` row taps and ``2 * grid`` column taps, and for every (row tap, column tap)
  pair one gather of an (R, out_h, out_w, C) block is weighted and summed;
* adaptive grid (``sampling_ratio == 0``): the number of samples depends on the data, which XLA cannot
  shape statically. Instead the exact per-axis weight matrices (R, out_h, H) and (R, out_w, W) are built
  (a pixel receives at most four samples of one bin, found arithmetically), and ``rows @ F @ cols^T`` is
  evaluated with matrix products over chunks of RoIs. Exact for RoIs of any size, static shapes, no
  ``max_sampling_ratio`` bound; cost O(R * out * N * H * W * C) (the image is picked by a one-hot over
  the N images), which suits C4 heads on stride-16 maps with one or two images.
"""

import contextlib
import numbers
import threading

import tensorflow as tf

from tfdet.ops.boxes import coordinates
from tfdet.ops.custom_gradient import custom_gradient
from tfdet.ops.map_fn import map_fn

# Per-pixel window of consecutive samples examined by the adaptive path: a pixel receives at most 4
# samples of one bin (adaptive spacing > 0.5 px), plus one of slack on each side for rounding.
_ADAPTIVE_SAMPLE_WINDOW = 6
# Elements of the (chunk, out_h, W, C) intermediate of the adaptive path: 64 MB in float32.
_DENSE_CHUNK_ELEMENTS = 1 << 24
# Parts of the boxes CropAndResize crops one after the other (`_in_box_parts`).
_CROP_PARTS = 4
# Set by `portable_crop_and_resize` on the thread that traces.
_PORTABLE = threading.local()


@contextlib.contextmanager
def portable_crop_and_resize():
    """Within it, graphs traced crop with `gathered_crop_and_resize` instead of TF's CropAndResize kernel: the
    same numbers bit for bit, from Gather and arithmetic ops that every converter maps (tf2onnx turns
    CropAndResize into a loop over the boxes of ONNX Resize in tf_crop_and_resize mode, which OpenVINO does not
    read). Slower than the kernel in TensorFlow on a CPU (benchmarks/README.md): for exports to other runtimes."""
    previous = getattr(_PORTABLE, "on", False)
    _PORTABLE.on = True
    try:
        yield
    finally:
        _PORTABLE.on = previous


def gathered_crop_and_resize(image, boxes, box_indices, crop_size):
    """`tf.image.crop_and_resize(image, boxes, box_indices, crop_size)` (bilinear, 0 outside) as its CPU kernel
    computes it, with gathers: each sample's position, corners and lerps in the kernel's float32 order.
    `crop_size`: Python ints."""
    shape = tf.shape(image)
    height, width = shape[1], shape[2]
    starts = tf.cast(box_indices, tf.int32) * height * width
    return _gathered_crops(_pixel_table(image), boxes, starts, height, width, crop_size)


def _gathered_crops_of_levels(images, boxes, box_indices, levels, crop_size):
    """`gathered_crop_and_resize` of box r from `images[levels[r]]`, every box in one pass over the images'
    pixels as one table (no partition by level: a level without boxes gives no empty batch to any op)."""
    shapes = [tf.shape(image) for image in images]
    sizes = tf.stack([shape[0] * shape[1] * shape[2] for shape in shapes])
    heights = tf.gather(tf.stack([shape[1] for shape in shapes]), levels)
    widths = tf.gather(tf.stack([shape[2] for shape in shapes]), levels)
    starts = tf.gather(tf.cumsum(sizes, exclusive=True), levels) + tf.cast(box_indices, tf.int32) * heights * widths
    table = tf.concat([_pixel_table(image) for image in images], axis=0)
    return _gathered_crops(table, boxes, starts, heights, widths, crop_size)


def _gathered_crops(table, boxes, starts, height, width, crop_size):
    """CropAndResize's crops (R, crop_h, crop_w, C) from pixels `table` (P, C): box r reads the image of
    `height` x `width` pixels (scalars, or (R,) per box) whose pixel (0, 0) is row `starts[r]`."""
    crop_h, crop_w = crop_size
    y1, x1, y2, x2 = coordinates(boxes)
    rows, row_inside = _kernel_positions(y1, y2, crop_h, height)
    cols, col_inside = _kernel_positions(x1, x2, crop_w, width)
    top, left = tf.floor(rows), tf.floor(cols)
    row_lerp = (rows - top)[:, :, None, None]
    col_lerp = (cols - left)[:, None, :, None]
    height, width = _per_box_column(height), _per_box_column(width)
    top, bottom = _clamped_index(top, height), _clamped_index(tf.math.ceil(rows), height)
    left, right = _clamped_index(left, width), _clamped_index(tf.math.ceil(cols), width)
    starts = starts[:, None]

    def pixels(row, col):  # (R, crop_h, crop_w, C)
        return tf.gather(table, (starts + row * width)[:, :, None] + col[:, None, :])

    top_left, top_right = pixels(top, left), pixels(top, right)
    bottom_left, bottom_right = pixels(bottom, left), pixels(bottom, right)
    upper = top_left + (top_right - top_left) * col_lerp
    lower = bottom_left + (bottom_right - bottom_left) * col_lerp
    crops = upper + (lower - upper) * row_lerp
    inside = tf.logical_and(row_inside[:, :, None, None], col_inside[:, None, :, None])
    return tf.where(inside, crops, tf.zeros_like(crops))


def _per_box_column(length):
    """A scalar, or (R,) per-box lengths, shaped to broadcast against (R, count)."""
    return tf.reshape(length, [-1, 1])


def _kernel_positions(first, last, count, length):
    """CropAndResize's sample coordinates (R, count) along one axis of an image `length` long (a scalar, or (R,)
    per box), and whether each lies inside [0, length - 1] (else the kernel writes 0):
    y1 * (H - 1) + y * ((y2 - y1) * (H - 1) / (n - 1)), or the box's centre for n = 1, in float32."""
    span = _per_box_column(tf.cast(length - 1, tf.float32))
    first, last = first[:, None], last[:, None]
    if count > 1:
        # divide_no_nan by a nonzero count is the kernel's division: grappler's constant folding rewrites a
        # division by a constant as a multiplication by its reciprocal, which rounds differently
        step = tf.math.divide_no_nan((last - first) * span, tf.constant(count - 1, tf.float32))
        positions = first * span + tf.range(count, dtype=tf.float32)[None, :] * step
    else:
        positions = 0.5 * (first + last) * span
    return positions, tf.logical_and(positions >= 0.0, positions <= span)


def _clamped_index(position, length):
    """An integral float position as an index into [0, length), clamped (samples outside read any pixel)."""
    return tf.clip_by_value(tf.cast(position, tf.int32), 0, length - 1)


def roi_align(features, boxes, box_indices, output_size, spatial_scale, sampling_ratio, aligned=False,
              xla=False):
    """Pool each box of `boxes` (R, 4: x1, y1, x2, y2 in input pixels) from image `box_indices` of
    `features` (N, H, W, C) into (R, out_h, out_w, C) with Detectron's RoIAlign.

    `output_size` is an int or (out_h, out_w); `spatial_scale` maps input pixels to feature cells
    (1/stride); `sampling_ratio` (a Python int) is the sampling grid per bin and axis, 0 for adaptive.
    `xla=True` keeps to ops XLA compiles. Differentiable w.r.t. `features`; boxes are constants.
    """
    out_h, out_w = _pair(output_size)
    features = tf.convert_to_tensor(features)
    boxes = tf.stop_gradient(tf.convert_to_tensor(boxes))
    box_indices = tf.cast(box_indices, tf.int32)
    if uses_crop_and_resize(features.dtype, sampling_ratio, xla):
        shape = tf.shape(features)
        lattices = crop_lattices(boxes, spatial_scale, shape[1], shape[2], (out_h, out_w), sampling_ratio, aligned)
        return pool_crop_lattices([features], lattices, box_indices, None, (out_h, out_w), sampling_ratio)
    if sampling_ratio > 0:
        return _roi_align_fixed_grid(features, boxes, box_indices, (out_h, out_w), spatial_scale,
                                     sampling_ratio, aligned)
    return _roi_align_adaptive(features, boxes, box_indices, (out_h, out_w), spatial_scale, aligned)


def _pair(output_size):
    """(out_h, out_w) from an int or a pair."""
    if isinstance(output_size, numbers.Integral):
        return int(output_size), int(output_size)
    out_h, out_w = output_size
    return int(out_h), int(out_w)


def _pixel_table(features):
    """Features (N, H, W, C) (or crops (R, h, w, C)) as a (N*H*W, C) table, keeping C static when it is known."""
    channels = features.shape[-1] if features.shape[-1] is not None else tf.shape(features)[-1]
    return tf.reshape(features, [-1, channels])


def uses_crop_and_resize(dtype, sampling_ratio, xla=False):
    """Whether `roi_align` pools by CropAndResize (`crop_lattices` + `pool_crop_lattices`): a fixed grid,
    no XLA, and features in at most 32 bits."""
    return sampling_ratio > 0 and not xla and tf.as_dtype(dtype) != tf.float64


def crop_lattices(boxes, spatial_scale, height, width, output_size, sampling_ratio, aligned):
    """(R, 4) CropAndResize boxes (y1, x1, y2, x2) whose (out * grid)^2 lattices on the edge-padded map
    are the RoIAlign samples of `boxes`. `spatial_scale`, `height` and `width` (the map's) may be scalars
    or per box (R,), so that every FPN level's boxes are computed at once."""
    out_h, out_w = _pair(output_size)
    y_first, y_last = _lattice_ends(boxes[:, 1], boxes[:, 3], spatial_scale, out_h, sampling_ratio, height, aligned)
    x_first, x_last = _lattice_ends(boxes[:, 0], boxes[:, 2], spatial_scale, out_w, sampling_ratio, width, aligned)
    return tf.stack([y_first, x_first, y_last, x_last], axis=1)


def pool_crop_lattices(features_by_level, lattices, box_indices, levels, output_size, sampling_ratio):
    """RoIAlign with a fixed grid: CropAndResize of each box's `crop_lattices` on its map, edge-padded, then
    the mean of each bin. Box r is read from `features_by_level[levels[r]]` (`levels` None: one map)."""
    out_h, out_w = _pair(output_size)
    maps = [tf.cast(features, tf.float32) for features in features_by_level]
    bins = crop_and_resize_levels(maps, lattices, box_indices, levels, (out_h * sampling_ratio, out_w * sampling_ratio),
                                  pool=sampling_ratio, edge_pad=True)
    return tf.cast(bins, features_by_level[0].dtype)


def crop_and_resize(image, boxes, box_indices, crop_size):
    """`tf.image.crop_and_resize` (bilinear, 0 outside) of a float32 `image`, with an exact gradient w.r.t.
    the image (boxes are constants): `crop_and_resize_levels` of one image."""
    return crop_and_resize_levels([image], boxes, box_indices, None, crop_size)


def crop_and_resize_levels(images, boxes, box_indices, levels, crop_size, pool=1, edge_pad=False):
    """`tf.image.crop_and_resize` of box r from `images[levels[r]]` (float32 maps of any sizes, e.g. a
    pyramid's; `levels` None: `images` holds one), crops in the boxes' order, with an exact gradient w.r.t.
    the images (boxes are constants). `pool` > 1 averages each crop's pool x pool cells (RoIAlign's bins)
    before the levels' crops are put back in order: a pool**2 smaller tensor to stitch. `edge_pad`: the boxes
    are on the images edge-padded by one cell per side (RoIAlign's border rule), padded here once the boxes
    exist; the gradient adds a border sample's share straight into the edge pixel it copies.

    TF's CPU gradient kernel shards the boxes over threads that add into the same pixels without
    synchronisation, so where boxes overlap it loses updates, a different part on every run. This gradient
    takes the kernel's sample positions and multiplies the crops' gradient by each image's transposed sampling (a
    sparse matrix of its boxes' samples' four bilinear corner weights) into that image's pixels: deterministic,
    nothing lost.
    """
    num_images = len(images)
    # boxes, box_indices and levels are arguments whose gradient is None: nothing flows back into the boxes.
    @custom_gradient
    def crop(boxes, box_indices, levels, *images):
        if edge_pad:
            # Padded once the boxes are known: a padded copy of every map would otherwise wait in memory, from
            # the moment the maps exist, for RoIs that come much later (a training step's mask RoIs).
            with tf.control_dependencies([boxes]):
                images = [tf.pad(image, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="SYMMETRIC") for image in images]

        def pool_cells(crops):
            return tf.nn.avg_pool2d(crops, pool, pool, "VALID") if pool > 1 else crops

        def pooled_crops(image, boxes, box_indices):
            return _in_box_parts(
                lambda part_boxes, part_indices: pool_cells(
                    tf.image.crop_and_resize(image, part_boxes, part_indices, crop_size)),
                boxes, box_indices)

        image_levels = levels if num_images > 1 else None
        parts = None  # each image's boxes, when the forward pass partitions them: the gradient reuses them
        if getattr(_PORTABLE, "on", False):
            if num_images == 1:
                crops = pool_cells(gathered_crop_and_resize(images[0], boxes, box_indices, crop_size))
            else:
                crops = pool_cells(_gathered_crops_of_levels(images, boxes, box_indices, levels, crop_size))
        elif num_images == 1:
            crops = pooled_crops(images[0], boxes, box_indices)
        else:
            parts = _boxes_by_image(boxes, box_indices, levels, num_images)
            crops = tf.dynamic_stitch([positions for positions, _, _ in parts], [
                pooled_crops(image, image_boxes, image_indices)
                for (_, image_boxes, image_indices), image in zip(parts, images)
            ])

        # Taken here: the gradient then holds the images' shapes, not the images (a pyramid's worth of memory
        # kept from the forward pass to the backward).
        image_shapes = [tf.shape(image) for image in images]

        def gradient(upstream):
            image_gradients = _crop_and_resize_images_gradient(
                upstream, crop_size, parts or _boxes_by_image(boxes, box_indices, image_levels, num_images),
                image_shapes, pool, border=1 if edge_pad else 0,
            )
            return (None, None, None, *image_gradients)

        return crops, gradient

    # custom_gradient takes tensors only: one image gets a placeholder scalar that `crop` never reads.
    levels = tf.zeros([], tf.int32) if levels is None else tf.cast(levels, tf.int32)
    return crop(boxes, box_indices, levels, *images)


def _in_box_parts(crop, boxes, box_indices):
    """`crop(boxes, box_indices)` over `_CROP_PARTS` consecutive parts of the boxes, one after the other, the
    results concatenated in order: one part's full-resolution crops in memory at a time (512 RoIs' 14 x 14 crops
    of a 256-channel map are 0.1 GB), each pooled before the next part is cropped."""
    count = tf.shape(boxes)[0]
    part = (count + _CROP_PARTS - 1) // _CROP_PARTS
    sizes = tf.stack([tf.clip_by_value(count - i * part, 0, part) for i in range(_CROP_PARTS)])
    results = []
    for part_boxes, part_indices in zip(tf.split(boxes, sizes, num=_CROP_PARTS),
                                        tf.split(box_indices, sizes, num=_CROP_PARTS)):
        with tf.control_dependencies(results[-1:]):
            results.append(crop(part_boxes, part_indices))
    return tf.concat(results, axis=0)


def _boxes_by_image(boxes, box_indices, levels, num_images):
    """[(positions among all boxes, boxes, box indices)] of each image's boxes, box r's image being `levels[r]`
    (None: one image, every box)."""
    positions = tf.range(tf.shape(boxes)[0])
    if levels is None:
        return [(positions, boxes, box_indices)]
    return list(zip(*(tf.dynamic_partition(values, levels, num_images) for values in (positions, boxes, box_indices))))


def _crop_and_resize_images_gradient(upstream, crop_size, parts, image_shapes, pool=1, border=0):
    """The transpose of CropAndResize for the (N, H, W, C) images of `image_shapes`, given the gradient
    (R, crop_h / pool, crop_w / pool, C) of its crops (`crop_size`) averaged over pool x pool cells (each of
    a cell's samples gets 1 / pool**2 of its gradient); `parts`: each image's boxes (`_boxes_by_image`). Each
    image's gradient is its own tensor, made by `_image_gradient`.
    `border` > 0: the crops were taken from the images edge-padded by `border` cells per side, whose
    gradient is that of the unpadded images (each padding pixel's share goes to the edge pixel it copies)."""
    cell_gradients = _pixel_table(upstream)
    return [_image_gradient(cell_gradients, positions, image_boxes, image_indices, shape, crop_size, pool, border)
            for (positions, image_boxes, image_indices), shape in zip(parts, image_shapes)]


def _image_gradient(cell_gradients, positions, boxes, box_indices, padded_shape, crop_size, pool, border):
    """The gradient of one (N, H, W, C) image (`padded_shape` with `border` cells more per side) from its
    `boxes`, whose cells are rows `positions[i] * cells + cell` of `cell_gradients` (every box's cells, C).
    The sampling is a sparse (cells, pixels) matrix of bilinear weights (four corners per sample) whose transpose
    multiplies the cells' gradient into the image's pixels: no block of per-sample contributions, and a serial,
    deterministic sum."""
    crop_h, crop_w = crop_size
    cells_h, cells_w = crop_h // pool, crop_w // pool
    shape = padded_shape - tf.constant([0, 2 * border, 2 * border, 0])  # the unpadded image's
    height, width = shape[1], shape[2]
    y1, x1, y2, x2 = tf.unstack(boxes, axis=1)
    rows, row_weights = _lattice_corners(y1, y2, crop_h, padded_shape[1])
    cols, col_weights = _lattice_corners(x1, x2, crop_w, padded_shape[2])
    if border:
        rows = tf.clip_by_value(rows - border, 0, height - 1)
        cols = tf.clip_by_value(cols - border, 0, width - 1)
    row_starts = (_per_box(box_indices) * height + rows) * width
    # (boxes, cells_h, pool, row corner, cells_w, pool, column corner): every sample's four corners, by its cell
    row_axes, col_axes = [-1, cells_h, pool, 2, 1, 1, 1], [-1, 1, 1, 1, cells_w, pool, 2]
    pixels = tf.reshape(row_starts, row_axes) + tf.reshape(cols, col_axes)
    weights = tf.reshape(row_weights, row_axes) * tf.reshape(col_weights, col_axes)
    if pool > 1:
        weights = weights / float(pool * pool)
    cells = (tf.reshape(positions, [-1, 1, 1, 1, 1, 1, 1]) * (cells_h * cells_w)
             + tf.reshape(tf.range(cells_h * cells_w), [1, cells_h, 1, 1, cells_w, 1, 1]))
    cells = tf.broadcast_to(cells, tf.shape(pixels))
    sampling = tf.sparse.SparseTensor(
        tf.cast(tf.stack([tf.reshape(cells, [-1]), tf.reshape(pixels, [-1])], axis=1), tf.int64),
        tf.reshape(weights, [-1]),
        tf.cast(tf.stack([tf.shape(cell_gradients)[0], tf.reduce_prod(shape[:3])]), tf.int64))
    return tf.reshape(tf.sparse.sparse_dense_matmul(sampling, cell_gradients, adjoint_a=True), shape)


def _per_box(values):
    """(R,) per-box values (or one scalar for every box) shaped to broadcast against (R, count, 2)."""
    return tf.reshape(values, [-1, 1, 1])


def _lattice_corners(first, last, count, length):
    """CropAndResize's `count` samples per box along one axis (normalised ends `first`, `last` (R,), image
    `length` per box or one for all), computed as its kernel does: the two pixels around each sample (floor,
    ceil) and their bilinear weights, both weights 0 (and the pixels 0) for a sample outside
    [0, length - 1], which the kernel skips."""
    scale = tf.reshape(tf.cast(length - 1, tf.float32), [-1, 1])
    first, last = tf.reshape(first, [-1, 1]), tf.reshape(last, [-1, 1])
    if count > 1:
        step = (last - first) * scale / (count - 1)
        positions = first * scale + tf.range(count, dtype=tf.float32) * step
    else:
        positions = 0.5 * (first + last) * scale
    inside = tf.expand_dims((positions >= 0.0) & (positions <= scale), -1)
    low = tf.floor(positions)
    lerp = positions - low
    corners = tf.where(inside, tf.stack([low, tf.math.ceil(positions)], -1), 0.0)
    weights = tf.where(inside, tf.stack([1.0 - lerp, lerp], -1), 0.0)
    return tf.cast(corners, tf.int32), weights


def _lattice_ends(low, high, spatial_scale, pooled, grid, length, aligned):
    """First and last sample of a RoI along one axis as CropAndResize's normalised coordinates on the
    map padded by one cell per side (sample y sits at y + 1, and the padded map spans length + 1)."""
    start, bin_size, _ = _axis_geometry(low, high, spatial_scale, pooled, aligned)
    first = _sample_position(start, bin_size, 0.0, 0.0, grid)
    last = _sample_position(start, bin_size, pooled - 1.0, grid - 1.0, grid)
    span = tf.cast(length, start.dtype) + 1.0
    return (first + 1.0) / span, (last + 1.0) / span


def _roi_align_fixed_grid(features, boxes, box_indices, output_size, spatial_scale, sampling_ratio,
                          aligned):
    """RoIAlign with a fixed grid: for each (row tap, column tap) pair, one gather of an
    (R, out_h, out_w, C) block of pixels, weighted and accumulated."""
    out_h, out_w = output_size
    shape = tf.shape(features)
    height, width = shape[1], shape[2]
    rows, row_weights = _axis_taps(boxes[:, 1], boxes[:, 3], spatial_scale, out_h, sampling_ratio,
                                   height, aligned)
    cols, col_weights = _axis_taps(boxes[:, 0], boxes[:, 2], spatial_scale, out_w, sampling_ratio,
                                   width, aligned)
    row_starts = (box_indices * height * width)[:, None, None] + rows * width
    row_weights = tf.cast(row_weights, features.dtype)
    col_weights = tf.cast(col_weights, features.dtype)
    table = _pixel_table(features)
    pooled = None
    for a in range(2 * sampling_ratio):
        for b in range(2 * sampling_ratio):
            pixels = row_starts[:, :, None, a] + cols[:, None, :, b]
            weights = row_weights[:, :, None, a] * col_weights[:, None, :, b]
            term = tf.gather(table, pixels) * weights[..., None]
            pooled = term if pooled is None else pooled + term
    return pooled


def _axis_geometry(low, high, spatial_scale, pooled, aligned):
    """Per-RoI start, bin size and extent along one axis, in feature cells, as the kernels compute them."""
    offset = 0.5 if aligned else 0.0
    start = low * spatial_scale - offset
    extent = (high * spatial_scale - offset) - start
    if not aligned:
        extent = tf.maximum(extent, 1.0)
    return start, extent / pooled, extent


def _sample_position(start, bin_size, bin_index, sample_index, grid):
    """Coordinate of sample `sample_index` of bin `bin_index`, in the kernels' order of operations."""
    return start + bin_index * bin_size + (sample_index + 0.5) * bin_size / grid


def _axis_taps(low, high, spatial_scale, pooled, grid, length, aligned):
    """Fixed-grid pixel taps along one axis: indices (R, pooled, 2*grid) int32 and their bilinear
    weights, divided by the grid and zeroed for samples outside [-1, length]."""
    start, bin_size, _ = _axis_geometry(low, high, spatial_scale, pooled, aligned)
    dtype = start.dtype
    samples = _sample_position(
        start[:, None, None], bin_size[:, None, None],
        tf.range(pooled, dtype=dtype)[None, :, None], tf.range(grid, dtype=dtype)[None, None, :], grid)
    length = tf.cast(length, dtype)
    valid = tf.cast((samples >= -1.0) & (samples <= length), dtype) / grid
    clamped = tf.maximum(samples, 0.0)
    low_tap = tf.floor(clamped)
    at_last = low_tap >= length - 1.0
    low_tap = tf.where(at_last, length - 1.0, low_tap)
    high_tap = tf.where(at_last, low_tap, low_tap + 1.0)
    high_weight = tf.where(at_last, tf.zeros_like(clamped), clamped - low_tap)
    taps = tf.reshape(tf.stack([low_tap, high_tap], -1), [-1, pooled, 2 * grid])
    weights = tf.stack([(1.0 - high_weight) * valid, high_weight * valid], -1)
    return tf.cast(taps, tf.int32), tf.reshape(weights, [-1, pooled, 2 * grid])


def _roi_align_adaptive(features, boxes, box_indices, output_size, spatial_scale, aligned):
    """RoIAlign with Caffe2's adaptive grid, as rows @ features @ cols^T with exact dense weights."""
    out_h, out_w = output_size
    shape = tf.shape(features)
    row_weights = _adaptive_axis_weights(boxes[:, 1], boxes[:, 3], spatial_scale, out_h, shape[1], aligned)
    col_weights = _adaptive_axis_weights(boxes[:, 0], boxes[:, 2], spatial_scale, out_w, shape[2], aligned)
    return _contract_dense(features, tf.cast(row_weights, features.dtype),
                           tf.cast(col_weights, features.dtype), box_indices)


def _adaptive_axis_weights(low, high, spatial_scale, pooled, length, aligned):
    """Dense (R, pooled, length) weights of every pixel in every bin along one axis, adaptive grid.

    A pixel h only receives samples in [h - 1, h + 1] (the clamped border pixels included), and
    adaptive samples are more than 0.5 px apart, so a window of consecutive sample indices starting
    just before the first sample >= h - 1 covers all of them.
    """
    start, bin_size, extent = _axis_geometry(low, high, spatial_scale, pooled, aligned)
    dtype = start.dtype
    grid = tf.math.ceil(extent / pooled)[:, None, None, None]
    bins = tf.range(pooled, dtype=dtype)[None, :, None, None]
    pixels = tf.range(tf.cast(length, dtype), dtype=dtype)[None, None, :, None]
    start = start[:, None, None, None]
    bin_size = bin_size[:, None, None, None]
    spacing = tf.math.divide_no_nan(bin_size, grid)
    first_reaching = tf.math.ceil(
        tf.math.divide_no_nan(pixels - 1.0 - (start + bins * bin_size), spacing) - 0.5)
    window_start = tf.clip_by_value(first_reaching - 1.0, 0.0,
                                    tf.maximum(grid - _ADAPTIVE_SAMPLE_WINDOW, 0.0))
    sample_index = window_start + tf.range(_ADAPTIVE_SAMPLE_WINDOW, dtype=dtype)
    samples = _sample_position(start, bin_size, bins, sample_index, grid)
    last_pixel = tf.cast(length, dtype) - 1.0
    counted = (sample_index < grid) & (samples >= -1.0) & (samples <= last_pixel + 1.0)
    hat = tf.nn.relu(1.0 - tf.abs(tf.clip_by_value(samples, 0.0, last_pixel) - pixels))
    weights = tf.reduce_sum(tf.where(counted, hat, tf.zeros_like(hat)), axis=-1)
    return weights / tf.maximum(grid[..., 0], 1.0)


def _contract_dense(features, row_weights, col_weights, box_indices):
    """out[r] = row_weights[r] @ features[box_indices[r]] @ col_weights[r]^T per channel, by GEMMs over
    chunks of RoIs; the image is selected by a one-hot over the batch. The gradient is the transposed
    contraction, also chunked, so that training keeps no per-chunk intermediate."""
    shape = tf.shape(features)
    num_images, height, width = shape[0], shape[1], shape[2]
    channels = features.shape[-1] if features.shape[-1] is not None else shape[3]
    out_h, out_w = row_weights.shape[1], col_weights.shape[1]
    num_rois = tf.shape(row_weights)[0]
    image_one_hot = tf.one_hot(box_indices, num_images, dtype=row_weights.dtype)
    image_rows = tf.reshape(row_weights[:, :, None, :] * image_one_hot[:, None, :, None],
                            [num_rois, out_h, num_images * height])
    chunk = tf.clip_by_value(_DENSE_CHUNK_ELEMENTS // (out_h * width * channels), 1,
                             tf.maximum(num_rois, 1))
    num_chunks = tf.maximum((num_rois + chunk - 1) // chunk, 1)

    def in_chunks(weights):
        padded = tf.pad(weights, [[0, num_chunks * chunk - num_rois], [0, 0], [0, 0]])
        return tf.reshape(padded, tf.concat([[num_chunks, chunk], tf.shape(weights)[1:]], 0))

    rows, cols = in_chunks(image_rows), in_chunks(col_weights)

    @custom_gradient
    def contract(table):
        def pool_chunk(chunk_weights):
            chunk_rows, chunk_cols = chunk_weights
            row_pooled = tf.matmul(tf.reshape(chunk_rows, [-1, num_images * height]), table)
            return tf.matmul(chunk_cols[:, None], tf.reshape(row_pooled, [-1, out_h, width, channels]))

        def table_gradient(upstream):
            def add_chunk(total, chunk_args):
                chunk_rows, chunk_cols, chunk_upstream = chunk_args
                row_gradient = tf.matmul(chunk_cols[:, None], chunk_upstream, transpose_a=True)
                return total + tf.matmul(tf.reshape(chunk_rows, [-1, num_images * height]),
                                         tf.reshape(row_gradient, [-1, width * channels]), transpose_a=True)
            return tf.foldl(add_chunk, (rows, cols, upstream), initializer=tf.zeros_like(table))

        return map_fn(pool_chunk, (rows, cols), fn_output_signature=table.dtype), table_gradient

    pooled = contract(tf.reshape(features, [num_images * height, width * channels]))
    return tf.reshape(pooled, [-1, out_h, out_w, channels])[:num_rois]
