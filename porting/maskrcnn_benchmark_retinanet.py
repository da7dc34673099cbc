"""maskrcnn-benchmark's RetinaNet in Detectron's conventions: the prediction layers converted exactly.

Both heads lay their prediction channels out anchor-major (``permute_and_flatten`` views (A*C, H, W) as
(A, C, H, W), test_retinanet reshapes to (A, C, H, W) too: class channel a*C + c, box channel a*4 + k), and
both decode with the +1 box convention and clip dw, dh at log(1000/16) after dividing by the weights. Two
things differ, and each is converted in the weights so the ported model computes what the checkpoint did:

* the anchor order within a cell: maskrcnn-benchmark's ``make_anchor_generator_retinanet`` passes every
  octave size of a level to ``generate_anchors`` at once (aspect ratios outer, octave scales inner, ratios in
  its MODEL.RETINANET.ASPECT_RATIOS order); Detectron's ``_create_cell_anchors`` is octave-major over
  RETINANET.ASPECT_RATIOS. The checkpoint's ``cell_anchors`` are matched one to one with the config's
  (``porting.config_checks.retinanet_anchor_order``) and the A channel groups of ``retnet_cls_pred_fpn3``
  and ``retnet_bbox_pred_fpn3`` (weights and biases) are permuted so that group a is the config's anchor a.
* box coding: ``RetinaNetModule`` decodes with ``BoxCoder(weights=(10, 10, 5, 5))`` (dx = code / 10, ...),
  Detectron's RetinaNet with ``bbox_transform``'s (1, 1, 1, 1) whatever MODEL.BBOX_REG_WEIGHTS says. A code
  is linear in its conv's weights and bias, so the dx, dy, dw, dh rows are divided by (10, 10, 5, 5): the
  ported conv gives the divided codes directly (float32 rounding apart).

``LastLevelP6P7`` makes P6 from C5 (MODEL.RETINANET.USE_C5, the default) as Detectron's ``fpn_6`` does, or
from P5 (its input then has FPN's width); a P5 one is refused, tfdet's ``fpn_6`` takes C5.

Not ported: maskrcnn-benchmark's RetinaNet post-processing (``retinanet/inference.py``: PRE_NMS_TOP_N after
one threshold on every level, NMS_TH, FPN_POST_NMS_TOP_N over all levels, its own image clipping). The ported
model runs Detectron's ``test_retinanet`` with the config's TEST.NMS, RETINANET.INFERENCE_TH (0 on the
coarsest level), RETINANET.PRE_NMS_TOP_N and TEST.DETECTIONS_PER_IM, so its detections can differ from
maskrcnn-benchmark's where those rules differ; its head outputs are the checkpoint's.
"""

import numpy as np

BOX_CODER_WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # RetinaNetModule's BoxCoder (retinanet.py)
CLS_PRED = "retnet_cls_pred_fpn3"
BOX_PRED = "retnet_bbox_pred_fpn3"
P6_KEY = "backbone.fpn.top_blocks.p6.weight"
ASSUMED_ORDER = "maskrcnn-benchmark's generation order, assumed: no cell_anchors confirm it"
INFERENCE_NOTE = (
    "maskrcnn-benchmark's RetinaNet post-processing is not ported (its NMS_TH, FPN_POST_NMS_TOP_N over all "
    "levels, one INFERENCE_TH on every level): the model runs Detectron's test_retinanet with the config's "
    "TEST.NMS, RETINANET.INFERENCE_TH (0 on the coarsest level), RETINANET.PRE_NMS_TOP_N, TEST.DETECTIONS_PER_IM"
)


def generation_order(cfg):
    """order[a]: the index maskrcnn-benchmark's generator gives the config's anchor a (Detectron's a = octave *
    R + ratio) when it makes the same anchors: ratio * SCALES_PER_OCTAVE + octave."""
    scales, ratios = cfg.RETINANET.SCALES_PER_OCTAVE, len(cfg.RETINANET.ASPECT_RATIOS)
    return np.array([ratio * scales + octave for octave in range(scales) for ratio in range(ratios)])


def check_p6_input(state, path):
    """Raise ValueError when the checkpoint's P6 conv takes P5 (USE_C5 False) rather than C5 as Detectron's."""
    weight = state.get(P6_KEY)
    if weight is not None and weight.ndim == 4 and weight.shape[0] == weight.shape[1]:
        raise ValueError(
            f"{path}: {P6_KEY} {tuple(weight.shape)} takes P5 (maskrcnn-benchmark's MODEL.RETINANET.USE_C5 False); "
            "Detectron's fpn_6, and tfdet's, is a conv on C5: this checkpoint's P6 and P7 cannot be ported"
        )


def _permuted_groups(array, order):
    """`array` whose first axis is A equal groups, reordered: group a of the result is group order[a] of `array`."""
    return array.reshape(len(order), -1, *array.shape[1:])[order].reshape(array.shape)


def _divided_codes(array, weights):
    """A box prediction's (A*4, ...) rows with row a*4 + k divided by weights[k]."""
    grouped = array.reshape(-1, 4, *array.shape[1:])
    divisor = np.asarray(weights, np.float32).reshape(1, 4, *([1] * (array.ndim - 1)))
    return (grouped / divisor).reshape(array.shape).astype(np.float32)


def convert_predictions(blobs, order, cfg):
    """Convert `blobs`' RetinaNet prediction blobs in place to Detectron's anchor order and box coding; returns
    [(blob, how)]. `order` is `retinanet_anchor_order`'s; None (no anchors in the checkpoint, or anchors in
    conflict) takes maskrcnn-benchmark's generation order over the config's anchors. A blob whose first axis
    is not A class groups (or A boxes) is left as it is: the port then reports its shape as mismatched."""
    confirmed = order is not None
    order = np.asarray(order) if confirmed else generation_order(cfg)
    anchors = len(order)
    source = "its cell_anchors matched to the config's" if confirmed else ASSUMED_ORDER
    reorder = None
    if not np.array_equal(order, np.arange(anchors)):
        reorder = (
            f"anchor groups permuted to the config's order: group a takes the checkpoint's group order[a], "
            f"order {order.tolist()} ({source})"
        )
    decode = f"dx, dy, dw, dh rows divided by the BoxCoder weights {BOX_CODER_WEIGHTS} (Detectron's RetinaNet decodes with 1s)"
    converted = []
    predictions = ((f"{CLS_PRED}_w", False), (f"{CLS_PRED}_b", False), (f"{BOX_PRED}_w", True), (f"{BOX_PRED}_b", True))
    for name, is_box in predictions:
        value = blobs.get(name)
        if value is None or (value.shape[0] != 4 * anchors if is_box else value.shape[0] % anchors):
            continue
        steps = []
        if reorder:
            value = _permuted_groups(value, order)
            steps.append(reorder)
        if is_box:
            value = _divided_codes(value, BOX_CODER_WEIGHTS)
            steps.append(decode)
        blobs[name] = value
        if steps:
            converted.append((name, "; ".join(steps)))
    return converted
