"""Our ops in the forms that convert to ONNX exactly: each converted by tf2onnx (standard opset 18) and run in
ONNX Runtime gives TensorFlow's numbers. Each case is one that a plainer form of the op got wrong there:
tf2onnx 1.17 built the condition of the greedy NMS's fixed-point loop from the wrong tensors (one step, boxes
kept that a kept box suppresses), lowered `tf.where` on floats to Mul/Add (0 * -inf: NaN in padding rows),
had no UpperBound (`tf.searchsorted`) and lost the rank of an ellipsis slice inside nested loops; float32
GroupNorm statistics are summed in another order there. Skipped where tf2onnx or onnxruntime is missing."""

import numpy as np
import pytest
import tensorflow as tf

from tfdet.ops import nms as nms_ops
from tfdet.ops.group_norm import group_norm
from tfdet.ops.map_fn import map_fn
from tfdet.ops.masks import paste_masks

tf2onnx = pytest.importorskip("tf2onnx")
onnxruntime = pytest.importorskip("onnxruntime")

OPSET = 18


def in_onnx_runtime(function, signature):
    """`function` (a tf.function of `signature`) converted by tf2onnx and run by ONNX Runtime on the CPU."""
    model, _ = tf2onnx.convert.from_function(function, input_signature=signature, opset=OPSET)
    assert {opset.domain for opset in model.opset_import} <= {"", "ai.onnx", "ai.onnx.ml"}
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda *args: session.run(None, {name: np.asarray(value) for name, value in zip(names, args)})


def chain_boxes(count):
    """Boxes 0..count-1, each overlapping the next by IoU 0.6 and no other: greedy NMS at 0.5 keeps every other
    one, and reaching that takes one fixed-point step per box of the chain."""
    x1 = np.arange(count, dtype=np.float32) * 25.0
    return np.stack([x1, np.zeros(count, np.float32), x1 + 99.0, np.full(count, 99.0, np.float32)], axis=1)


def test_greedy_nms_iterates_to_its_fixed_point():
    boxes = chain_boxes(9)[None]
    scores = np.linspace(0.9, 0.1, 9, dtype=np.float32)[None]
    signature = [tf.TensorSpec([None, None, 4], tf.float32), tf.TensorSpec([None, None], tf.float32)]
    function = tf.function(lambda b, s: nms_ops.batched_nms(b, s, 0.5, 9), input_signature=signature, autograph=False)
    want = [t.numpy() for t in function(boxes, scores)]
    np.testing.assert_array_equal(want[0][0, : want[1][0]], [0, 2, 4, 6, 8])
    for got, expected in zip(in_onnx_runtime(function, signature)(boxes, scores), want):
        np.testing.assert_array_equal(got, expected)


def test_per_class_nms_pads_with_zeros():
    rng = np.random.default_rng(0)
    boxes = np.stack([chain_boxes(6) + rng.uniform(0, 5, (6, 4)).astype(np.float32) for _ in range(3)], axis=1)
    scores = rng.dirichlet(np.ones(3), 6).astype(np.float32)
    signature = [tf.TensorSpec([None, 3, 4], tf.float32), tf.TensorSpec([None, 3], tf.float32)]
    function = tf.function(
        lambda b, s: nms_ops.per_class_nms(b, s, 0.05, 0.5, 20), input_signature=signature, autograph=False
    )
    want = [t.numpy() for t in function(boxes, scores)]
    assert want[3] < 20  # padding rows to check
    for got, expected in zip(in_onnx_runtime(function, signature)(boxes, scores), want):
        np.testing.assert_array_equal(got, expected)


def test_grouped_nms_per_image_in_a_loop():
    """RetinaNet's per-class NMS, one image per step of a map (loops inside a loop, as the model runs it)."""
    rng = np.random.default_rng(1)
    boxes = np.stack([np.concatenate([chain_boxes(8), chain_boxes(8) + 3.0]) for _ in range(2)])
    scores = rng.uniform(0, 1, (2, 16)).astype(np.float32)
    groups = rng.integers(0, 3, (2, 16)).astype(np.int32)
    valid = scores > 0.2
    signature = [tf.TensorSpec([None, None, 4], tf.float32), tf.TensorSpec([None, None], tf.float32),
                 tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.bool)]  # fmt: skip

    def per_image(b, s, g, v):
        return map_fn(lambda args: nms_ops.grouped_nms(*args, 0.5, 10), (b, s, g, v),
                      fn_output_signature=(tf.TensorSpec([10], tf.int32), tf.TensorSpec([], tf.int32)))  # fmt: skip

    function = tf.function(per_image, input_signature=signature, autograph=False)
    want = [t.numpy() for t in function(boxes, scores, groups, valid)]
    for got, expected in zip(in_onnx_runtime(function, signature)(boxes, scores, groups, valid), want):
        np.testing.assert_array_equal(got, expected)


def test_mask_paste_on_a_canvas():
    rng = np.random.default_rng(2)
    masks = rng.random((5, 14, 14), dtype=np.float32)
    boxes = np.array([[3, 4, 30, 20], [-5, -5, 10, 12], [20, 30, 80, 70], [0, 0, 0.5, 0.5], [40, 2, 52, 9]], np.float32)
    heights, widths = np.array([37, 37, 60, 60, 60], np.int32), np.array([53, 53, 41, 41, 41], np.int32)
    signature = [tf.TensorSpec([None, 14, 14], tf.float32), tf.TensorSpec([None, 4], tf.float32),
                 tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32)]  # fmt: skip
    function = tf.function(
        lambda m, b, h, w: tf.cast(paste_masks(m, b, h, w, 0.5, canvas_size=[60, 53]), tf.uint8),
        input_signature=signature,
        autograph=False,
    )
    run = in_onnx_runtime(function, signature)
    for count in (5, 0):
        args = masks[:count], boxes[:count], heights[:count], widths[:count]
        np.testing.assert_array_equal(run(*args)[0], function(*args).numpy())


def test_group_norm_statistics_agree():
    """A flat map far from zero: with compensated statistics TensorFlow and ONNX Runtime agree within float32
    rounding of the normalisation's products (x * gamma / std); plain float32 statistics, summed in different
    orders, were 0.04 apart on outputs of magnitude 9."""
    rng = np.random.default_rng(3)
    x = rng.normal(300.0, 0.05, size=(1, 48, 48, 32)).astype(np.float32)
    gamma = rng.normal(1.0, 0.5, size=32).astype(np.float32)
    beta = rng.normal(size=32).astype(np.float32)
    signature = [tf.TensorSpec([None, None, None, 32], tf.float32)]
    function = tf.function(
        lambda x: group_norm(x, gamma, beta, 8, 1e-5), input_signature=signature, autograph=False
    )
    products = np.abs(x).max() * np.abs(gamma).max() / x.std()
    np.testing.assert_allclose(in_onnx_runtime(function, signature)(x)[0], function(x).numpy(), rtol=0,
                               atol=np.spacing(np.float32(products)))  # fmt: skip
