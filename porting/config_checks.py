"""What a weight file says about its model's config, checked against the config tfdet builds the model from.

A port fills the model's variables; some fields of the file change no variable yet decide what the weights
compute, and a config that contradicts them gives a model that runs, wrongly. Two such fields exist:

* maskrcnn-benchmark's ``rpn.anchor_generator.cell_anchors.{i}`` buffers (``modeling/rpn/anchor_generator.py``):
  one (A, 4) x1,y1,x2,y2 float32 tensor per RPN feature map, made by Detectron's own ``generate_anchors``
  (aspect ratios outer, sizes inner). FPN: tensor i is level RPN_MIN_LEVEL + i, one size each
  (ANCHOR_SIZES[i] at ANCHOR_STRIDE[i]); C4: one tensor, every size at the single stride. They are compared
  with ``tfdet.modeling.rpn.rpn_levels`` (FPN.RPN_ANCHOR_START_SIZE doubling per level, FPN.RPN_ASPECT_RATIOS;
  or RPN.SIZES x RPN.ASPECT_RATIOS at RPN.STRIDE).
* the ``cfg`` a trained Detectron ``.pkl`` saves: its keys that decide what the weights compute without
  changing any blob's name or shape (anchors, pyramid levels, RoI resolutions, head dilations, the ResNet
  stride placement, GroupNorm, pixel means) are compared with the config's. Test-time settings (TEST.*,
  thresholds, RoIAlign sampling ratios) are the user's to choose and are not compared; keys that change a
  blob's shape or name are checked by the port itself.

Each check gives ``checked`` entries ``(field, how)`` and ``conflicts`` ``(field, difference, remedy)``.
"""

from __future__ import annotations

import math

import numpy as np

from tfdet.config.loader import flatten_keys
from tfdet.modeling.rpn import rpn_levels

ANCHORS_PREFIX = "rpn.anchor_generator.cell_anchors."
ANCHORS_EQUAL = "equal to the config's anchors"
ANCHORS_REMEDY = "set the config's anchor keys to the ones the model was trained with"
SAVED_CFG_EQUAL = "the saved config's value equals the config's"
SAVED_CFG_REMEDY = "set these keys to the file's values, the ones the model was trained with"


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
    (lambda cfg: not cfg.MODEL.RPN_ONLY, ("FAST_RCNN.ROI_XFORM_METHOD", "FAST_RCNN.ROI_XFORM_RESOLUTION")),
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
    """Which of the config's RPN levels the anchors are for, and the keys (with values) that make them."""
    if _fpn_rpn(cfg):
        size = cfg.FPN.RPN_ANCHOR_START_SIZE * 2 ** (level - cfg.FPN.RPN_MIN_LEVEL)
        return (
            f"RPN level {level} (stride {stride}, size {size:g}: FPN.RPN_ANCHOR_START_SIZE "
            f"{cfg.FPN.RPN_ANCHOR_START_SIZE} at FPN.RPN_MIN_LEVEL {cfg.FPN.RPN_MIN_LEVEL}, "
            f"FPN.RPN_ASPECT_RATIOS {tuple(cfg.FPN.RPN_ASPECT_RATIOS)})"
        )
    return f"its RPN (RPN.SIZES {tuple(cfg.RPN.SIZES)}, RPN.ASPECT_RATIOS {tuple(cfg.RPN.ASPECT_RATIOS)}, RPN.STRIDE {stride})"


def _anchor_difference(found, expected, cfg, level, stride):
    """Why a file's anchor tensor is not the config's for this level, or None when they are equal."""
    array = np.asarray(found)
    if array.ndim != 2 or array.shape[1] != 4 or array.dtype.kind not in "iuf":
        return f"is not an (A, 4) array of anchors (shape {array.shape}, dtype {array.dtype})"
    array = array.astype(np.float64)
    if array.shape == expected.shape and np.allclose(array, expected, rtol=0, atol=1e-3):
        return None
    return (
        f"holds {len(array)} anchors (w x h) {_boxes_text(array)}; the config makes {len(expected)} for "
        f"{_level_keys_text(cfg, level, stride)}: {_boxes_text(expected)}"
    )


def _levels_text(cfg):
    """How many RPN levels the config has, and the keys that say so."""
    if _fpn_rpn(cfg):
        first, last = cfg.FPN.RPN_MIN_LEVEL, cfg.FPN.RPN_MAX_LEVEL
        return f"{last - first + 1} levels (FPN.RPN_MIN_LEVEL {first} to FPN.RPN_MAX_LEVEL {last})"
    return "1 level (single-level RPN)"


def check_cell_anchors(tensors, cfg):
    """(checked, conflicts) of a checkpoint's `rpn.anchor_generator.cell_anchors.*` tensors {key: array}
    against the anchors the config's RPN levels use, tensor i for level i."""
    keys = sorted(tensors, key=_anchor_index)
    if not keys:
        return [], []
    if not cfg.RPN.RPN_ON:
        return [(key, "not used: the config's model has no RPN (it takes proposals)") for key in keys], []
    levels = rpn_levels(cfg)
    checked, conflicts = [], []
    for index, key in enumerate(keys):
        if index >= len(levels) or _anchor_index(key) != index:
            detail = f"has no RPN level in the config, whose RPN has {_levels_text(cfg)}"
            conflicts.append((key, detail, ANCHORS_REMEDY))
            continue
        level, stride, expected = levels[index]
        difference = _anchor_difference(tensors[key], expected, cfg, level, stride)
        if difference is None:
            checked.append((key, ANCHORS_EQUAL))
        else:
            conflicts.append((key, difference, ANCHORS_REMEDY))
    if len(keys) < len(levels):
        detail = f"are {len(keys)} tensors, the config's RPN has {_levels_text(cfg)}"
        conflicts.append((ANCHORS_PREFIX + "*", detail, ANCHORS_REMEDY))
    return checked, conflicts


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
