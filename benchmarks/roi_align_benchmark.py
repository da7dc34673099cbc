"""Time tfdet's RoIAlign against alternative formulations on the head shapes Detectron uses.

    python benchmarks/roi_align_benchmark.py [--repeats 5] [--cases fpn_box fpn_mask c4_300 c4_1000]

Prints milliseconds per call (median, tf.function graph mode, CPU) for the forward pass and for
forward + gradient w.r.t. the features. Numbers are never asserted anywhere. On CPU, TensorFlow's
default allocator returns large buffers to the OS, so every big temporary pays page faults; run once
more with TF_CPU_ALLOCATOR_USE_BFC=true to see the formulations without that cost.

Formulations (XLA: whether it compiles under jit_compile=True):
  tfdet            tfdet.ops.roi_align: tap-pair gathers (fixed grid) / dense per-axis GEMMs (adaptive)
  patch_gather     one gather of the (R, out_h*2g, out_w*2g, C) tap patch, then two contractions
  dense_gemm       the adaptive formulation (dense per-axis weights, GEMMs) applied to a fixed grid
  sparse_matmul    one SparseTensor of all bilinear weights times the (N*H*W, C) table (no XLA)
  crop_and_resize  tf.image.crop_and_resize on an edge-padded map + avg_pool (no XLA, fixed grid only)
  batch_max_grid   adaptive grid as tap pairs at the batch's largest grid, extra samples masked
                   (grid read from the data before tracing, so not usable inside a model; no XLA)
dense_gemm and batch_max_grid are timed forward only: their backward passes take minutes or tens of GB.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfdet.ops import roi_align as ra  # noqa: E402

CASES = {
    # name: (rois, output, sampling_ratio, channels, (height, width), stride, (min, max) box side px)
    "fpn_box": (1000, 7, 2, 256, (200, 336), 4, (16, 224)),
    "fpn_mask": (100, 14, 2, 256, (200, 336), 4, (16, 224)),
    "c4_300": (300, 14, 0, 1024, (50, 84), 16, (16, 800)),
    "c4_1000": (1000, 14, 0, 1024, (50, 84), 16, (16, 800)),
}


def make_inputs(rois, channels, size, stride, side_range, seed=0):
    """Random N=1 features and boxes inside the image, with sides drawn uniformly from side_range."""
    rng = np.random.default_rng(seed)
    height, width = size
    features = rng.standard_normal((1, height, width, channels), dtype=np.float32)
    sides = rng.uniform(*side_range, size=(rois, 2))
    image_size = np.array([width, height]) * stride
    corners = rng.uniform(0, 1, size=(rois, 2)) * np.maximum(image_size - sides, 0)
    boxes = np.concatenate([corners, np.minimum(corners + sides, image_size - 1)], 1)
    return (tf.constant(features), tf.constant(boxes.astype(np.float32)),
            tf.zeros([rois], tf.int32))


def tfdet_roi_align(features, boxes, box_indices, output, scale, sampling_ratio):
    """The formulation under test: tfdet.ops.roi_align."""
    return ra.roi_align(features, boxes, box_indices, output, scale, sampling_ratio)


def _fixed_taps(features, boxes, output, scale, sampling_ratio):
    """Row and column taps of tfdet's fixed-grid path."""
    shape = tf.shape(features)
    rows = ra._axis_taps(boxes[:, 1], boxes[:, 3], scale, output, sampling_ratio, shape[1], False)
    cols = ra._axis_taps(boxes[:, 0], boxes[:, 2], scale, output, sampling_ratio, shape[2], False)
    return rows, cols


def patch_gather(features, boxes, box_indices, output, scale, sampling_ratio):
    """Gather every (row tap, column tap) pixel of every RoI at once, then contract rows and columns."""
    (rows, row_w), (cols, col_w) = _fixed_taps(features, boxes, output, scale, sampling_ratio)
    shape = tf.shape(features)
    taps = 2 * sampling_ratio
    pixels = ((box_indices * shape[1] * shape[2])[:, None, None, None, None]
              + rows[:, :, :, None, None] * shape[2] + cols[:, None, None, :, :])
    patch = tf.gather(ra._pixel_table(features), pixels)  # (R, out, taps, out, taps, C)
    num_rois = tf.shape(boxes)[0]
    rows_done = tf.matmul(row_w[:, :, None, :], tf.reshape(patch, [num_rois, output, taps, -1]))
    rows_done = tf.reshape(rows_done, [num_rois, output, output, taps, features.shape[-1]])
    return tf.matmul(col_w[:, None, :, None, :], rows_done)[:, :, :, 0, :]


def dense_gemm(features, boxes, box_indices, output, scale, sampling_ratio):
    """Fixed-grid taps scattered into dense (R, out, H) / (R, out, W) weights, then tfdet's GEMMs."""
    (rows, row_w), (cols, col_w) = _fixed_taps(features, boxes, output, scale, sampling_ratio)
    shape = tf.shape(features)
    dense_rows = tf.einsum("rpt,rpth->rph", row_w, tf.one_hot(rows, shape[1]))
    dense_cols = tf.einsum("rpt,rptw->rpw", col_w, tf.one_hot(cols, shape[2]))
    return ra._contract_dense(features, dense_rows, dense_cols, box_indices)


def sparse_matmul(features, boxes, box_indices, output, scale, sampling_ratio):
    """All bilinear weights as one SparseTensor (R*out*out, N*H*W) times the pixel table."""
    (rows, row_w), (cols, col_w) = _fixed_taps(features, boxes, output, scale, sampling_ratio)
    shape = tf.shape(features)
    num_rois = tf.shape(boxes)[0]
    pixels = ((box_indices * shape[1] * shape[2])[:, None, None, None, None]
              + rows[:, :, None, :, None] * shape[2] + cols[:, None, :, None, :])
    bins = tf.broadcast_to(tf.reshape(tf.range(num_rois * output * output), [-1, output, output, 1, 1]),
                           tf.shape(pixels))
    weights = row_w[:, :, None, :, None] * col_w[:, None, :, None, :]
    indices = tf.cast(tf.stack([tf.reshape(bins, [-1]), tf.reshape(pixels, [-1])], 1), tf.int64)
    dense_shape = tf.cast(tf.stack([num_rois * output * output, shape[0] * shape[1] * shape[2]]), tf.int64)
    matrix = tf.SparseTensor(indices, tf.reshape(weights, [-1]), dense_shape)
    pooled = tf.sparse.sparse_dense_matmul(matrix, ra._pixel_table(features))
    return tf.reshape(pooled, [-1, output, output, features.shape[-1]])


def crop_and_resize(features, boxes, box_indices, output, scale, sampling_ratio):
    """Caffe2 semantics from crop_and_resize: pad one edge pixel (the clamped [-1, 0] and [H-1, H]
    bands), sample the out*g regular grid, average g x g blocks."""
    shape = tf.shape(features)
    padded = tf.pad(features, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="SYMMETRIC")
    corners = []
    for low, high, size in ((1, 3, shape[1]), (0, 2, shape[2])):
        start, bin_size, _ = ra._axis_geometry(boxes[:, low], boxes[:, high], scale, output, False)
        first = start + 0.5 * bin_size / sampling_ratio + 1.0
        last = start + (output * sampling_ratio - 0.5) * bin_size / sampling_ratio + 1.0
        corners.append((first / tf.cast(size + 1, first.dtype), last / tf.cast(size + 1, last.dtype)))
    (y1, y2), (x1, x2) = corners
    grid = output * sampling_ratio
    samples = tf.image.crop_and_resize(padded, tf.stack([y1, x1, y2, x2], 1), box_indices, [grid, grid])
    return tf.nn.avg_pool2d(samples, sampling_ratio, sampling_ratio, "VALID")


def batch_max_grid(features, boxes, box_indices, output, scale, max_grid):
    """Adaptive grid as tap pairs at `max_grid` samples per bin, samples beyond each RoI's grid masked."""
    shape = tf.shape(features)
    row_taps = _masked_adaptive_taps(boxes[:, 1], boxes[:, 3], scale, output, max_grid, shape[1])
    col_taps = _masked_adaptive_taps(boxes[:, 0], boxes[:, 2], scale, output, max_grid, shape[2])
    table = ra._pixel_table(features)
    offsets = (box_indices * shape[1] * shape[2])[:, None, None]
    pooled = 0.0
    for a in range(2 * max_grid):
        for b in range(2 * max_grid):
            pixels = offsets + row_taps[0][:, :, None, a] * shape[2] + col_taps[0][:, None, :, b]
            weights = row_taps[1][:, :, None, a] * col_taps[1][:, None, :, b]
            pooled += tf.gather(table, pixels) * weights[..., None]
    return pooled


def _masked_adaptive_taps(low, high, scale, output, max_grid, length):
    """Bilinear taps of up to `max_grid` samples per bin, each RoI using its own ceil(extent/out)."""
    start, bin_size, extent = ra._axis_geometry(low, high, scale, output, False)
    grid = tf.math.ceil(extent / output)[:, None, None]
    index = tf.range(max_grid, dtype=start.dtype)[None, None, :]
    samples = ra._sample_position(start[:, None, None], bin_size[:, None, None],
                                  tf.range(output, dtype=start.dtype)[None, :, None], index, grid)
    size = tf.cast(length, samples.dtype)
    keep = tf.cast((index < grid) & (samples >= -1.0) & (samples <= size), samples.dtype) / grid
    clamped = tf.clip_by_value(samples, 0.0, size - 1.0)
    low_tap = tf.minimum(tf.floor(clamped), size - 1.0)
    high_tap = tf.minimum(low_tap + 1.0, size - 1.0)
    frac = clamped - low_tap
    taps = tf.reshape(tf.stack([low_tap, high_tap], -1), [-1, output, 2 * max_grid])
    weights = tf.reshape(tf.stack([(1.0 - frac) * keep, frac * keep], -1), [-1, output, 2 * max_grid])
    return tf.cast(taps, tf.int32), weights


FIXED = {"tfdet": tfdet_roi_align, "patch_gather": patch_gather, "dense_gemm": dense_gemm,
         "sparse_matmul": sparse_matmul, "crop_and_resize": crop_and_resize}
ADAPTIVE = {"tfdet": tfdet_roi_align, "batch_max_grid": batch_max_grid}
FORWARD_ONLY = {"dense_gemm", "batch_max_grid"}


def largest_grid(boxes, output, scale):
    """Largest adaptive grid over the RoIs and both axes (the oracle batch_max_grid needs)."""
    sides = np.maximum((boxes[:, 2:] - boxes[:, :2]).numpy() * scale, 1.0)
    return int(np.ceil(sides / output).max())


def time_ms(fn, args, repeats):
    """Median wall time of fn(*args) in ms, after one warm-up call that traces it."""
    fn(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)


def forward_and_backward(pool):
    """A function returning the gradient of sum(pool(features)**2) w.r.t. the features."""
    def run(features, boxes, box_indices):
        with tf.GradientTape() as tape:
            tape.watch(features)
            loss = tf.reduce_sum(tf.square(pool(features, boxes, box_indices)))
        return tape.gradient(loss, features)
    return run


def run_case(name, repeats):
    """Print forward and forward+backward timings of every formulation for one case."""
    rois, output, sampling_ratio, channels, size, stride, sides = CASES[name]
    args = make_inputs(rois, channels, size, stride, sides)
    scale = 1.0 / stride
    if sampling_ratio > 0:
        formulations, last_arg = FIXED, sampling_ratio
    else:
        formulations, last_arg = ADAPTIVE, 0
    print(f"\n{name}: R={rois} out={output}x{output} sampling_ratio={sampling_ratio} C={channels} "
          f"features {size[0]}x{size[1]} (1/{stride})")
    for label, formulation in formulations.items():
        arg = largest_grid(args[1], output, scale) if label == "batch_max_grid" else last_arg

        def pool(f, b, i, formulation=formulation, arg=arg):
            return formulation(f, b, i, output, scale, arg)

        forward = time_ms(tf.function(pool), args, repeats)
        if label in FORWARD_ONLY:
            both = "not timed"
        else:
            both = f"{time_ms(tf.function(forward_and_backward(pool)), args, repeats):.1f} ms"
        note = f" (grid {arg})" if label == "batch_max_grid" else ""
        print(f"  {label:16s} forward {forward:9.1f} ms   forward+backward {both:>12s}{note}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    options = parser.parse_args()
    allocator = "BFC" if os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").lower() == "true" else "default"
    print(f"tensorflow {tf.__version__}, {os.cpu_count()} CPUs, CPU allocator: {allocator}")
    for name in options.cases:
        run_case(name, options.repeats)


if __name__ == "__main__":
    main()
