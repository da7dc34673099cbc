"""maskrcnn-benchmark state-dict keys -> Detectron blob names (the reverse of its c2_model_loading).

maskrcnn-benchmark loads Detectron files by renaming blobs (``utils/c2_model_loading.py``:
``_rename_basic_resnet_weights``, ``_rename_fpn_weights``, ``_rename_weights_for_resnet``) and
matching the results to its modules by suffix. Read backwards, over the module names of its
models (``modeling/backbone/resnet.py``, ``fpn.py``, ``rpn/rpn.py``, ``roi_heads/*``):

| state-dict key (after ``module.`` is stripped) | Detectron blob |
|---|---|
| ``backbone.body.stem.conv1.weight`` / ``stem.bn1.{weight,bias}`` | ``conv1_w`` / ``res_conv1_bn_{s,b}`` (GN: ``conv1_gn_{s,b}``) |
| ``backbone.body.layer{k}.{i}.conv{1,2,3}.weight`` | ``res{k+1}_{i}_branch2{a,b,c}_w`` |
| ``backbone.body.layer{k}.{i}.bn{1,2,3}.*`` | ``res{k+1}_{i}_branch2{a,b,c}_bn_{s,b}`` (GN: ``_gn_``) |
| ``backbone.body.layer{k}.{i}.downsample.{0,1}.*`` | ``res{k+1}_{i}_branch1_w`` / ``_branch1_bn_{s,b}`` |
| ``roi_heads.box.feature_extractor.head.layer4.{i}.*`` (C4) | ``res5_{i}_*`` |
| ``backbone.fpn.fpn_inner{j}`` (j = 4 / 1..3) | ``fpn_inner_res5_{n}_sum`` / ``fpn_inner_res{j+1}_{n}_sum_lateral`` |
| ``backbone.fpn.fpn_layer{j}`` | ``fpn_res{j+1}_{n}_sum`` (n: last block of that stage) |
| ``rpn.head.{conv,cls_logits,bbox_pred}`` | ``conv_rpn`` / ``rpn_cls_logits`` / ``rpn_bbox_pred`` (+ ``_fpn2`` with FPN) |
| RetinaNet ``rpn.head.{cls,bbox}_tower.{2i}`` | ``retnet_{cls,bbox}_conv_n{i}_fpn3`` (odd indices: the towers' ReLUs) |
| RetinaNet ``rpn.head.{cls_logits,bbox_pred}`` | ``retnet_cls_pred_fpn3`` / ``retnet_bbox_pred_fpn3`` |
| RetinaNet ``backbone.fpn.top_blocks.{p6,p7}`` | ``fpn_6`` / ``fpn_7`` |
| ``roi_heads.box.feature_extractor.{fc6,fc7}`` / ``.xconvs.{m}`` | ``fc6`` / ``fc7`` / ``head_conv{m//2+1}`` (GN: conv m//3+1, its ``_gn``) |
| ``roi_heads.box.predictor.{cls_score,bbox_pred}`` | ``cls_score`` / ``bbox_pred`` |
| ``roi_heads.mask.feature_extractor.mask_fcn{i}`` | ``_[mask]_fcn{i}`` (GN: ``mask_fcn{i}.0`` -> ``_mask_fcn{i}``, ``.1`` -> ``_mask_fcn{i}_gn``) |
| ``roi_heads.mask.predictor.{conv5_mask,mask_fcn_logits}`` | ``conv5_mask`` / ``mask_fcn_logits`` |
| ``roi_heads.keypoint.feature_extractor.conv_fcn{i}`` / ``predictor.kps_score_lowres`` | ``conv_fcn{i}`` / ``kps_score_lowres`` |

Parameter suffixes: conv/linear ``weight`` -> ``_w``, ``bias`` -> ``_b``; norm ``weight`` -> ``_s``,
``bias`` -> ``_b``. In the FPN and heads a GN-wrapped conv is ``nn.Sequential(conv, GroupNorm)``
(``make_layers.py``), hence the ``.0`` / ``.1``. A norm module with ``running_mean`` /
``running_var`` buffers is a ``FrozenBatchNorm2d`` (Detectron's AffineChannel ``_bn``; its
buffers are folded into ``_bn_s`` / ``_bn_b`` by the loader), one without is a ``GroupNorm``.
The RPN's ``rpn.anchor_generator.cell_anchors.{i}`` buffers map to no blob: they are set apart in
``anchors`` for the loader to check against the config's anchors (``porting.config_checks``).

A RetinaNet checkpoint (``MODEL.RETINANET_ON``: its ``RetinaNetModule`` sits where the RPN does, hence
``rpn.head.*``) is told by its ``rpn.head.cls_tower`` keys. Its head always runs on P3..P7
(``R-50-FPN-RETINANET``: FPN on layer2..layer4, ``LastLevelP6P7``), one module for every level, so its
blobs are Detectron's ``_fpn3`` ones (``modeling/rpn/retinanet/retinanet.py``, ``backbone/fpn.py``).
The names only: the loader converts the prediction layers' anchor order and box coding
(``porting.maskrcnn_benchmark_retinanet``).
"""

from __future__ import annotations

import dataclasses
import re

_PARAM = {"weight": "w", "bias": "b"}
_NORM_PARAM = {"weight": "s", "bias": "b"}
_RUNNING = ("running_mean", "running_var")
_BRANCH = {"1": "2a", "2": "2b", "3": "2c"}

_BLOCK = re.compile(
    r"^(?P<where>backbone\.body|roi_heads\.(?:box|mask)\.feature_extractor\.head)\.layer(?P<stage>[1-4])\."
    r"(?P<block>\d+)\.(?P<part>conv[123]|bn[123]|downsample\.[01])\.(?P<param>\w+)$"
)
_STEM = re.compile(r"^backbone\.body\.stem\.(?P<part>conv1|bn1)\.(?P<param>\w+)$")
_FPN = re.compile(
    r"^backbone\.fpn\.fpn_(?P<kind>inner|layer)(?P<level>[1-4])(?:\.(?P<seq>[01]))?\.(?P<param>weight|bias)$"
)
_RPN = re.compile(r"^rpn\.head\.(?P<part>conv|cls_logits|bbox_pred)\.(?P<param>weight|bias)$")
_RPN_NAMES = {"conv": "conv_rpn", "cls_logits": "rpn_cls_logits", "bbox_pred": "rpn_bbox_pred"}
_RETINANET_TOWER = re.compile(r"^rpn\.head\.(?P<kind>cls|bbox)_tower\.(?P<m>\d+)\.(?P<param>weight|bias)$")
_RETINANET_PREDICTIONS = {"cls_logits": "retnet_cls_pred_fpn3", "bbox_pred": "retnet_bbox_pred_fpn3"}
_TOP_BLOCKS = re.compile(r"^backbone\.fpn\.top_blocks\.p(?P<level>[67])\.(?P<param>weight|bias)$")
RETINANET_TOWER_PREFIX = "rpn.head.cls_tower."
_HEAD_LAYERS = (  # (module, its layer names): these layers keep their name as the Detectron blob's
    ("roi_heads.box.feature_extractor.", r"fc[67]"),
    ("roi_heads.box.predictor.", r"cls_score|bbox_pred"),
    ("roi_heads.mask.predictor.", r"conv5_mask|mask_fcn_logits"),
    ("roi_heads.keypoint.feature_extractor.", r"conv_fcn\d+"),
    ("roi_heads.keypoint.predictor.", r"kps_score_lowres"),
)
_MASK_FCN = re.compile(
    r"^roi_heads\.mask\.feature_extractor\.mask_fcn(?P<i>\d+)(?:\.(?P<seq>[01]))?\.(?P<param>weight|bias)$"
)
_XCONV = re.compile(r"^roi_heads\.box\.feature_extractor\.xconvs\.(?P<m>\d+)\.(?P<param>weight|bias)$")
_ANCHORS = re.compile(r"^rpn\.anchor_generator\.cell_anchors\.\d+$")
_DA_HEADS = "da_heads."  # the DA fork's image- and instance-level domain classifiers


@dataclasses.dataclass
class BlobNames:
    """How the keys of a maskrcnn-benchmark state dict map onto Detectron blobs."""

    blobs: dict = dataclasses.field(default_factory=dict)  # Detectron blob -> state-dict key
    frozen_bn: dict = dataclasses.field(default_factory=dict)  # '<x>_bn' -> FrozenBatchNorm2d module prefix
    shared: dict = dataclasses.field(default_factory=dict)  # key -> key already giving the same blob
    anchors: list = dataclasses.field(default_factory=list)  # RPN anchor buffers, checked against the config
    ignored: dict = dataclasses.field(default_factory=dict)  # key -> why no variable takes it
    unknown: list = dataclasses.field(default_factory=list)  # keys with no Detectron counterpart
    retinanet: bool = False  # a RetinaNet checkpoint (its head's keys under rpn.head.*)


def _norm_module(key):
    return key.rsplit(".", 1)[0]


def _last_blocks(keys):
    """{stage k: index of its last block} of ``backbone.body.layer{k}`` (FPN names use it)."""
    last = {}
    for key in keys:
        match = _BLOCK.match(key)
        if match and match["where"] == "backbone.body":
            stage = int(match["stage"])
            last[stage] = max(last.get(stage, 0), int(match["block"]))
    return last


class _Namer:
    """Names one key at a time; knows which norm modules are frozen BN and the FPN's stage ends."""

    def __init__(self, keys):
        self.frozen = {_norm_module(k) for k in keys if k.endswith(".running_var")}
        self.last_blocks = _last_blocks(keys)
        self.fpn = any(k.startswith("backbone.fpn.") for k in keys)
        self.gn_xconvs = any(_XCONV.match(k) and _XCONV.match(k)["m"] == "1" for k in keys)
        self.is_retinanet = any(k.startswith(RETINANET_TOWER_PREFIX) for k in keys)

    def norm(self, prefix, key, param):
        """`<prefix>_bn_s` (frozen BN) or `<prefix>_gn_s` (GroupNorm) for a norm parameter."""
        kind = "bn" if _norm_module(key) in self.frozen else "gn"
        return f"{prefix}_{kind}_{_NORM_PARAM[param]}" if param in _NORM_PARAM else None

    def block(self, match, key):
        prefix = f"res{int(match['stage']) + 1}_{match['block']}_branch"
        part, param = match["part"], match["param"]
        if part.startswith("conv") and param == "weight":
            return f"{prefix}{_BRANCH[part[-1]]}_w"
        if part == "downsample.0" and param == "weight":
            return f"{prefix}1_w"
        if part.startswith("bn"):
            return self.norm(f"{prefix}{_BRANCH[part[-1]]}", key, param)
        if part == "downsample.1":
            return self.norm(f"{prefix}1", key, param)
        return None

    def stem(self, match, key):
        if match["part"] == "conv1":
            return "conv1_w" if match["param"] == "weight" else None
        # Detectron names the stem's AffineChannel res_conv1_bn, its GroupNorm conv1_gn.
        return self.norm("res_conv1" if _norm_module(key) in self.frozen else "conv1", key, match["param"])

    def fpn_blob(self, match):
        level = int(match["level"])  # FPN level j sits on body stage layer{j}, Detectron's res{j+1}
        if level not in self.last_blocks:
            return None
        sum_name = f"res{level + 1}_{self.last_blocks[level]}_sum"
        lateral = "_lateral" if match["kind"] == "inner" and level < 4 else ""
        prefix = f"fpn_inner_{sum_name}{lateral}" if match["kind"] == "inner" else f"fpn_{sum_name}"
        if match["seq"] == "1":
            return f"{prefix}_gn_{_NORM_PARAM[match['param']]}"
        return f"{prefix}_{_PARAM[match['param']]}"

    def head(self, key):
        for module, layers in _HEAD_LAYERS:
            if key.startswith(module):
                name, _, param = key[len(module) :].rpartition(".")
                if re.fullmatch(layers, name) and param in _PARAM:
                    return f"{name}_{_PARAM[param]}"
        return None

    def mask_fcn(self, match):
        if match["seq"] is None:
            return f"_[mask]_fcn{match['i']}_{_PARAM[match['param']]}"
        if match["seq"] == "1":
            return f"_mask_fcn{match['i']}_gn_{_NORM_PARAM[match['param']]}"
        return f"_mask_fcn{match['i']}_{_PARAM[match['param']]}"

    def xconv(self, match):
        index = int(match["m"])
        per_conv = 3 if self.gn_xconvs else 2  # (conv, GroupNorm, ReLU) or (conv, ReLU)
        conv, position = divmod(index, per_conv)
        if position == 0:
            return f"head_conv{conv + 1}_{_PARAM[match['param']]}"
        if position == 1 and self.gn_xconvs:
            return f"head_conv{conv + 1}_gn_{_NORM_PARAM[match['param']]}"
        return None

    def retinanet_blob(self, key):
        """A RetinaNet head's or P6/P7's blob: tower convs (even Sequential indices), predictions, top blocks."""
        if match := _RETINANET_TOWER.match(key):
            conv, position = divmod(int(match["m"]), 2)  # (conv, ReLU) pairs
            return None if position else f"retnet_{match['kind']}_conv_n{conv}_fpn3_{_PARAM[match['param']]}"
        if (match := _RPN.match(key)) and match["part"] in _RETINANET_PREDICTIONS:
            return f"{_RETINANET_PREDICTIONS[match['part']]}_{_PARAM[match['param']]}"
        if match := _TOP_BLOCKS.match(key):
            return f"fpn_{match['level']}_{_PARAM[match['param']]}"
        return None

    def __call__(self, key):
        """The Detectron blob of a key, or None."""
        if self.is_retinanet and key.startswith(("rpn.head.", "backbone.fpn.top_blocks.")):
            return self.retinanet_blob(key)
        if match := _BLOCK.match(key):
            return self.block(match, key)
        if match := _STEM.match(key):
            return self.stem(match, key)
        if match := _FPN.match(key):
            return self.fpn_blob(match)
        if match := _RPN.match(key):
            return f"{_RPN_NAMES[match['part']]}{'_fpn2' if self.fpn else ''}_{_PARAM[match['param']]}"
        if match := _MASK_FCN.match(key):
            return self.mask_fcn(match)
        if match := _XCONV.match(key):
            return self.xconv(match)
        return self.head(key)


def _ignore_reason(key, namer):
    """Why a key that maps to no blob is expected in a checkpoint, or None for unknown keys."""
    if key.rsplit(".", 1)[-1] in _RUNNING and _norm_module(key) in namer.frozen:
        return "FrozenBatchNorm2d running statistics: folded into the affine scale and bias"
    if key.startswith(_DA_HEADS):
        return "DA fork's domain classifier (its outputs feed only the DA losses: detections do not depend on it)"
    return None


def detectron_blob_names(keys) -> BlobNames:
    """Map the keys of a maskrcnn-benchmark state dict (``module.`` already stripped) to Detectron blobs.

    A Detectron blob reached by two keys (C4 Mask R-CNN with SHARE_BOX_FEATURE_EXTRACTOR: the box
    and mask heads hold the same res5) is taken from the box head's key; the other is listed in
    ``shared`` for the loader to check that both hold the same values.
    """
    keys = sorted(keys)  # 'roi_heads.box' sorts before 'roi_heads.mask': the box head's res5 wins
    namer = _Namer(keys)
    names = BlobNames(retinanet=namer.is_retinanet)
    for key in keys:
        if _ANCHORS.match(key):
            names.anchors.append(key)
            continue
        blob = namer(key)
        if blob is None:
            reason = _ignore_reason(key, namer)
            if reason:
                names.ignored[key] = reason
            else:
                names.unknown.append(key)
            continue
        if blob in names.blobs:
            names.shared[key] = names.blobs[blob]
            continue
        names.blobs[blob] = key
        if blob.endswith("_bn_s") and _norm_module(key) in namer.frozen:
            names.frozen_bn[blob[: -len("_s")]] = _norm_module(key)
    return names
