"""What a weight file says about its model's config, checked against the config tfdet builds the model from.

A port fills the model's variables; some fields of the file change no variable yet decide what the weights
compute, and a config that contradicts them gives a model that runs, wrongly. Two such fields exist:

* maskrcnn-benchmark's ``rpn.anchor_generator.cell_anchors.{i}`` buffers (``modeling/rpn/anchor_generator.py``):
  one (A, 4) x1,y1,x2,y2 float32 tensor per RPN feature map, made by Detectron's own ``generate_anchors``
  (aspect ratios outer, sizes inner). FPN: tensor i is level RPN_MIN_LEVEL + i, one size each
  (ANCHOR_SIZES[i] at ANCHOR_STRIDE[i]); C4: one tensor, every size at the single stride. They are compared
  with ``tfdet.modeling.rpn.rpn_levels`` (FPN.RPN_ANCHOR_START_SIZE doubling per level, FPN.RPN_ASPECT_RATIOS;
  or RPN.SIZES x RPN.ASPECT_RATIOS at RPN.STRIDE).
  A RetinaNet checkpoint holds one tensor per level P3..P7 (``make_anchor_generator_retinanet``: sizes
  ANCHOR_SIZES[i] * OCTAVE**(s / SCALES_PER_OCTAVE), aspect ratios outer, octave scales inner), compared with
  ``tfdet.modeling.retinanet.retinanet_cell_anchors`` (Detectron's octave-major order) as a set: the same
  anchors in another order are matched one to one (``retinanet_anchor_order``), and the loader permutes
  the prediction channels by that matching; different anchors are a conflict.
* the ``cfg`` a trained Detectron ``.pkl`` saves: its keys that decide what the weights compute without
  changing any blob's name or shape (anchors, pyramid levels, RoI resolutions, head dilations, the ResNet
  stride placement, GroupNorm, pixel means; RetinaNet's anchors, levels and head variants) are compared
  with the config's. Test-time settings (TEST.*, thresholds, RoIAlign sampling ratios, RetinaNet's
  INFERENCE_TH and PRE_NMS_TOP_N) are the user's to choose and are not compared; keys that change a
  blob's shape or name are checked by the port itself (RetinaNet's head variants are compared anyway:
  their shapes can coincide).

Each check gives ``checked`` entries ``(field, how)`` and ``conflicts`` ``(field, difference, remedy)``.
"""

from __future__ import annotations

import math
import re

import numpy as np

from tfdet.config.loader import flatten_keys
from tfdet.modeling.retinanet import retinanet_cell_anchors
from tfdet.modeling.rpn import rpn_levels

ANCHORS_PREFIX = "rpn.anchor_generator.cell_anchors."
ANCHORS_EQUAL = "equal to the config's anchors"
ANCHORS_REORDERED = "the config's anchors in another order (the prediction channels are permuted to the config's)"
ANCHORS_REMEDY = "set the config's anchor keys to the ones the model was trained with"
SAVED_CFG_EQUAL = "the saved config's value equals the config's"
SAVED_CFG_REMEDY = "set these keys to the file's values, the ones the model was trained with"
RETINANET_BLOB = re.compile(r"^(retnet_|fpn_\d+_)")
RETINANET_LAYOUT_REMEDY = (
    "set RETINANET.NUM_CONVS, RETINANET.SHARE_CLS_BBOX_TOWER and FPN.RPN_MIN_LEVEL / RPN_MAX_LEVEL to the file's model"
)


def is_retinanet(cfg):
    """Whether the config builds RetinaNet (Detectron's model_builder chooses by MODEL.TYPE)."""
    return cfg.MODEL.TYPE == "retinanet"


def _fpn_rpn(cfg):
    return cfg.RPN.RPN_ON and cfg.FPN.FPN_ON and cfg.FPN.MULTILEVEL_RPN


def _single_level_rpn(cfg):
    return cfg.RPN.RPN_ON and not _fpn_rpn(cfg)


def _group_norm(cfg):
    functions = (cfg.RESNETS.TRANS_FUNC, cfg.RESNETS.STEM_FUNC, cfg.FAST_RCNN.ROI_BOX_HEAD, cfg.MRCNN.ROI_MASK_HEAD)
    return cfg.FPN.USE_GN or any("_gn" in name for name in functions)


# (does the config's model use them?, saved-cfg keys that change what its weights compute, not their shapes)
SAVED_CFG_KEYS = (
    (lambda cfg: True, ("PIXEL_MEANS", "RESNETS.STRIDE_1X1", "RESNETS.RES5_DILATION", "TFDET.ROI_ALIGN_ALIGNED")),
    (_group_norm, ("GROUP_NORM.DIM_PER_GP", "GROUP_NORM.NUM_GROUPS", "GROUP_NORM.EPSILON")),
    (_single_level_rpn, ("RPN.SIZES", "RPN.STRIDE", "RPN.ASPECT_RATIOS")),
    (_fpn_rpn, ("FPN.RPN_ANCHOR_START_SIZE", "FPN.RPN_ASPECT_RATIOS", "FPN.RPN_MIN_LEVEL", "FPN.RPN_MAX_LEVEL")),
    (lambda cfg: cfg.FPN.FPN_ON, ("FPN.MULTILEVEL_RPN", "FPN.MULTILEVEL_ROIS")),
    (
        lambda cfg: cfg.FPN.FPN_ON and cfg.FPN.MULTILEVEL_ROIS,
        ("FPN.ROI_MIN_LEVEL", "FPN.ROI_MAX_LEVEL", "FPN.ROI_CANONICAL_SCALE", "FPN.ROI_CANONICAL_LEVEL"),
    ),
    (
        is_retinanet,
        (
            "RETINANET.ASPECT_RATIOS", "RETINANET.SCALES_PER_OCTAVE", "RETINANET.ANCHOR_SCALE", "FPN.RPN_MIN_LEVEL",
            "FPN.RPN_MAX_LEVEL", "FPN.EXTRA_CONV_LEVELS", "RETINANET.SOFTMAX", "RETINANET.CLASS_SPECIFIC_BBOX",
            "RETINANET.SHARE_CLS_BBOX_TOWER", "RETINANET.NUM_CONVS",
        ),
    ),  # fmt: skip
    (
        lambda cfg: not cfg.MODEL.RPN_ONLY and not is_retinanet(cfg),
        ("FAST_RCNN.ROI_XFORM_METHOD", "FAST_RCNN.ROI_XFORM_RESOLUTION"),
    ),
    (
        lambda cfg: cfg.MODEL.MASK_ON,
        ("MRCNN.ROI_XFORM_METHOD", "MRCNN.ROI_XFORM_RESOLUTION", "MRCNN.RESOLUTION", "MRCNN.DILATION", "MRCNN.UPSAMPLE_RATIO"),
    ),
    (
        lambda cfg: cfg.MODEL.KEYPOINTS_ON,
        ("KRCNN.ROI_XFORM_METHOD", "KRCNN.ROI_XFORM_RESOLUTION", "KRCNN.HEATMAP_SIZE", "KRCNN.UP_SCALE", "KRCNN.DILATION"),
    ),
)


# --------------------------------------------------------------------------- anchors of .pth files


def _anchor_index(key):
    """N of `rpn.anchor_generator.cell_anchors.N`, for ordering the tensors as the RPN levels are."""
    suffix = key[len(ANCHORS_PREFIX) :]
    return int(suffix) if suffix.isdigit() else math.inf


def _boxes_text(anchors):
    """'24x12 16x16 12x24 centred at (1.5, 1.5)': the anchors' widths x heights, their centre(s)."""
    widths, heights = anchors[:, 2] - anchors[:, 0] + 1, anchors[:, 3] - anchors[:, 1] + 1
    sizes = " ".join(f"{w:g}x{h:g}" for w, h in zip(widths, heights))
    centres = sorted({(float(x), float(y)) for x, y in zip((anchors[:, 0] + anchors[:, 2]) / 2, (anchors[:, 1] + anchors[:, 3]) / 2)})
    where = ", ".join(f"({x:g}, {y:g})" for x, y in centres[:3]) + (" ..." if len(centres) > 3 else "")
    return f"{sizes} centred at {where}"


def _level_keys_text(cfg, level, stride):
    """Which of the config's RPN or RetinaNet levels the anchors are for, and the keys (with values) that make them."""
    if is_retinanet(cfg):
        retina = cfg.RETINANET
        return (
            f"RetinaNet level {level} (stride {stride}: RETINANET.ANCHOR_SCALE {retina.ANCHOR_SCALE}, "
            f"RETINANET.SCALES_PER_OCTAVE {retina.SCALES_PER_OCTAVE}, RETINANET.ASPECT_RATIOS {tuple(retina.ASPECT_RATIOS)})"
        )
    if _fpn_rpn(cfg):
        size = cfg.FPN.RPN_ANCHOR_START_SIZE * 2 ** (level - cfg.FPN.RPN_MIN_LEVEL)
        return (
            f"RPN level {level} (stride {stride}, size {size:g}: FPN.RPN_ANCHOR_START_SIZE "
            f"{cfg.FPN.RPN_ANCHOR_START_SIZE} at FPN.RPN_MIN_LEVEL {cfg.FPN.RPN_MIN_LEVEL}, "
            f"FPN.RPN_ASPECT_RATIOS {tuple(cfg.FPN.RPN_ASPECT_RATIOS)})"
        )
    return f"its RPN (RPN.SIZES {tuple(cfg.RPN.SIZES)}, RPN.ASPECT_RATIOS {tuple(cfg.RPN.ASPECT_RATIOS)}, RPN.STRIDE {stride})"


def _one_to_one(found, expected):
    """`order` with found[order[a]] == expected[a] for every a, each file anchor used once; None if there is none."""
    order, free = [], list(range(len(found)))
    for anchor in expected:
        match = next((j for j in free if np.allclose(found[j], anchor, rtol=0, atol=1e-3)), None)
        if match is None:
            return None
        free.remove(match)
        order.append(match)
    return np.array(order)


def _anchor_match(found, expected, cfg, level, stride, reorder):
    """(order, None) when a file's anchor tensor is the config's for this level (in the same order, or with
    `reorder` in any order: found[order] == expected), else (None, why not)."""
    array = np.asarray(found)
    if array.ndim != 2 or array.shape[1] != 4 or array.dtype.kind not in "iuf":
        return None, f"is not an (A, 4) array of anchors (shape {array.shape}, dtype {array.dtype})"
    array = array.astype(np.float64)
    if array.shape == expected.shape:
        if np.allclose(array, expected, rtol=0, atol=1e-3):
            return np.arange(len(array)), None
        order = _one_to_one(array, expected) if reorder else None
        if order is not None:
            return order, None
    return None, (
        f"holds {len(array)} anchors (w x h) {_boxes_text(array)}; the config makes {len(expected)} for "
        f"{_level_keys_text(cfg, level, stride)}: {_boxes_text(expected)}"
    )


def _levels_text(cfg):
    """How many RPN (or RetinaNet) levels the config has, and the keys that say so."""
    if _fpn_rpn(cfg) or is_retinanet(cfg):
        first, last = cfg.FPN.RPN_MIN_LEVEL, cfg.FPN.RPN_MAX_LEVEL
        return f"{last - first + 1} levels (FPN.RPN_MIN_LEVEL {first} to FPN.RPN_MAX_LEVEL {last})"
    return "1 level (single-level RPN)"


def _compare_levels(tensors, cfg, levels, reorder):
    """(checked, conflicts, orders) of the anchor tensors, tensor i against levels[i] = (level, stride, anchors);
    `orders`: per matching tensor, the order of its anchors that gives the config's (`_anchor_match`)."""
    head = "RetinaNet" if is_retinanet(cfg) else "RPN"
    keys = sorted(tensors, key=_anchor_index)
    checked, conflicts, orders = [], [], []
    for index, key in enumerate(keys):
        if index >= len(levels) or _anchor_index(key) != index:
            detail = f"has no {head} level in the config, whose {head} has {_levels_text(cfg)}"
            conflicts.append((key, detail, ANCHORS_REMEDY))
            continue
        level, stride, expected = levels[index]
        order, difference = _anchor_match(tensors[key], expected, cfg, level, stride, reorder)
        if difference is None:
            orders.append(order)
            checked.append((key, ANCHORS_EQUAL if np.array_equal(order, np.arange(len(order))) else ANCHORS_REORDERED))
        else:
            conflicts.append((key, difference, ANCHORS_REMEDY))
    if len(keys) < len(levels):
        detail = f"are {len(keys)} tensors, the config's {head} has {_levels_text(cfg)}"
        conflicts.append((ANCHORS_PREFIX + "*", detail, ANCHORS_REMEDY))
    return checked, conflicts, orders


def check_cell_anchors(tensors, cfg):
    """(checked, conflicts) of a checkpoint's `rpn.anchor_generator.cell_anchors.*` tensors {key: array}
    against the anchors the config's RPN levels use, tensor i for level i (RetinaNet: `retinanet_anchor_order`)."""
    if is_retinanet(cfg):
        return retinanet_anchor_order(tensors, cfg)[1:]
    if not tensors:
        return [], []
    if not cfg.RPN.RPN_ON:
        unused = "not used: the config's model has no RPN (it takes proposals)"
        return [(key, unused) for key in sorted(tensors, key=_anchor_index)], []
    return _compare_levels(tensors, cfg, rpn_levels(cfg), reorder=False)[:2]


def retinanet_anchor_order(tensors, cfg):
    """(order, checked, conflicts) of a RetinaNet checkpoint's anchor tensors against the config's RetinaNet
    anchors, tensor i for level RPN_MIN_LEVEL + i. `order` (A,): the checkpoint's anchor matching the config's
    anchor a (Detectron's octave-major order) at every level; None without tensors or with a conflict (also when
    levels order their anchors differently: their one shared head cannot match them all)."""
    if not tensors:
        return None, [], []
    levels = [(level, 2**level, anchors) for level, anchors in retinanet_cell_anchors(cfg).items()]
    checked, conflicts, orders = _compare_levels(tensors, cfg, levels, reorder=True)
    if len({tuple(order) for order in orders}) > 1:
        detail = "order the same anchors differently from level to level: one head shared by all levels cannot follow"
        conflicts.append((ANCHORS_PREFIX + "*", detail, ANCHORS_REMEDY))
    if conflicts:
        return None, checked, conflicts
    return orders[0], checked, conflicts


def unused_head_conflicts(unused, cfg):
    """Conflicts for a RetinaNet config's unused file blobs of RetinaNet's towers or extra levels: a tower conv or
    a pyramid level the model lacks changes what the loaded ones compute (R-CNN files may hold unused heads)."""
    if not is_retinanet(cfg):
        return []
    blobs = [name for name in unused if RETINANET_BLOB.match(name)]
    if not blobs:
        return []
    detail = (
        f"fill no layer of the config's RetinaNet (RETINANET.NUM_CONVS {cfg.RETINANET.NUM_CONVS}, SHARE_CLS_BBOX_TOWER "
        f"{cfg.RETINANET.SHARE_CLS_BBOX_TOWER}, levels {cfg.FPN.RPN_MIN_LEVEL} to {cfg.FPN.RPN_MAX_LEVEL}): the file's model has more"
    )
    return [(", ".join(blobs), detail, RETINANET_LAYOUT_REMEDY)]


# --------------------------------------------------------------------------- the cfg saved in .pkl files


def _same(a, b):
    """Whether two config values are equal: sequences item by item, numbers to float rounding (float32 means)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    numbers = (int, float, np.integer, np.floating)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)
    return a == b


def _value_of(cfg, key):
    node = cfg
    for part in key.split("."):
        node = node[part]
    return node


def _plain(value):
    """A value as a config spells it: sequences as tuples (the saved cfg's numpy means arrive as lists)."""
    return tuple(_plain(v) for v in value) if isinstance(value, (list, tuple)) else value


def check_saved_cfg(saved_cfg, cfg):
    """(checked, conflicts) of a Detectron file's saved config (plain nested dicts) against `cfg`: the keys
    of SAVED_CFG_KEYS that apply to the config's model and that the file holds; one conflict names them all."""
    saved = dict(flatten_keys(saved_cfg))
    checked, differences = [], []
    for applies, keys in SAVED_CFG_KEYS:
        if not applies(cfg):
            continue
        for key in (k for k in keys if k in saved):
            if _same(saved[key], _value_of(cfg, key)):
                checked.append((f"saved cfg {key}", SAVED_CFG_EQUAL))
            else:
                differences.append(f"{key} {_plain(saved[key])!r} (the config: {_plain(_value_of(cfg, key))!r})")
    if not differences:
        return checked, []
    detail = f"says the model was trained with {'; '.join(differences)}"
    return checked, [("saved cfg", detail, SAVED_CFG_REMEDY)]


def conflict_error(conflicts, path):
    """A one-line refusal: the first conflict in full, the other fields by name, what to do."""
    field, detail, remedy = conflicts[0]
    others = [other for other, _, _ in conflicts[1:]]
    also = f" (also in conflict: {', '.join(others)})" if others else ""
    return f"{path}: {field} {detail}{also}; {remedy}"
