"""maskrcnn-benchmark checkpoints made from Detectron blobs, the way maskrcnn-benchmark itself names Detectron
weights: the renaming of ``maskrcnn_benchmark/utils/c2_model_loading.py`` replayed from its source
(`c2_renamed`), the names placed in its module tree (`module_key`: ``backbone.body``, ``backbone.fpn``,
``rpn.head``, ``roi_heads.*``), FrozenBatchNorm2d buffers and the RPN's cell anchors from a NumPy replica of its
``modeling/rpn/anchor_generator.py`` `generate_anchors` (`benchmark_state`); `random_blobs` and
`assert_model_holds` for a tfdet model's blobs; `torch_writer` (tests/fixtures/torch_writer.py) writes the file
in torch's zip / legacy format."""

import importlib.util
import re

import numpy as np

from support.paths import TESTS_DIR
from support.porting_fixtures import assert_same, held
from tfdet.modeling.detectron_names import model_blobs

spec = importlib.util.spec_from_file_location("torch_writer", TESTS_DIR / "fixtures" / "torch_writer.py")
torch_writer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_writer)

R50_STAGES = ["1.2", "2.3", "3.5", "4.2"]  # c2_model_loading._C2_STAGE_NAMES["R-50"]
FIXED_UPSAMPLING = ("kps_score_w", "kps_score_b")  # Detectron's bilinear kps_score: no maskrcnn-benchmark weights


def c2_renamed(detectron_names, stage_names=R50_STAGES):
    """{Detectron blob: name} as maskrcnn-benchmark's _rename_weights_for_resnet renames C2 blobs."""
    keys = ["fc1000_b" if k == "pred_b" else "fc1000_w" if k == "pred_w" else k for k in detectron_names]
    basic = [("_", "."), (".w", ".weight"), (".bn", "_bn"), (".b", ".bias"), ("_bn.s", "_bn.scale"),
             (".biasranch", ".branch"), ("bbox.pred", "bbox_pred"), ("cls.score", "cls_score"),
             ("res.conv1_", "conv1_"), (".biasbox", ".bbox"), ("conv.rpn", "rpn.conv"),
             ("rpn.bbox.pred", "rpn.bbox_pred"), ("rpn.cls.logits", "rpn.cls_logits"), ("_bn.scale", "_bn.weight"),
             ("conv1_bn.", "bn1."), ("res2.", "layer1."), ("res3.", "layer2."), ("res4.", "layer3."),
             ("res5.", "layer4."), (".branch2a.", ".conv1."), (".branch2a_bn.", ".bn1."), (".branch2b.", ".conv2."),
             (".branch2b_bn.", ".bn2."), (".branch2c.", ".conv3."), (".branch2c_bn.", ".bn3."),
             (".branch1.", ".downsample.0."), (".branch1_bn.", ".downsample.1."),
             ("conv1.gn.s", "bn1.weight"), ("conv1.gn.bias", "bn1.bias"), ("conv2.gn.s", "bn2.weight"),
             ("conv2.gn.bias", "bn2.bias"), ("conv3.gn.s", "bn3.weight"), ("conv3.gn.bias", "bn3.bias"),
             ("downsample.0.gn.s", "downsample.1.weight"), ("downsample.0.gn.bias", "downsample.1.bias")]  # fmt: skip
    for old, new in basic:
        keys = [k.replace(old, new) for k in keys]
    for index, stage in enumerate(stage_names, 1):
        suffix = ".lateral" if index < 4 else ""
        keys = [k.replace(f"fpn.inner.layer{stage}.sum{suffix}", f"fpn_inner{index}") for k in keys]
        keys = [k.replace(f"fpn.layer{stage}.sum", f"fpn_layer{index}") for k in keys]
    last = [("rpn.conv.fpn2", "rpn.conv"), ("rpn.bbox_pred.fpn2", "rpn.bbox_pred"), ("rpn.cls_logits.fpn2", "rpn.cls_logits"),
            ("mask.fcn.logits", "mask_fcn_logits"), (".[mask].fcn", "mask_fcn"), ("conv5.mask", "conv5_mask"),
            ("kps.score.lowres", "kps_score_lowres"), ("kps.score", "kps_score"), ("conv.fcn", "conv_fcn"),
            ("rpn.", "rpn.head.")]  # fmt: skip
    for old, new in last:
        keys = [k.replace(old, new) for k in keys]
    return dict(zip(detectron_names, keys))


_HEAD_MODULES = {"fc6": "roi_heads.box.feature_extractor", "fc7": "roi_heads.box.feature_extractor",
                 "cls_score": "roi_heads.box.predictor", "bbox_pred": "roi_heads.box.predictor",
                 "conv5_mask": "roi_heads.mask.predictor", "mask_fcn_logits": "roi_heads.mask.predictor",
                 "kps_score_lowres": "roi_heads.keypoint.predictor"}  # fmt: skip


def module_key(name, c4):
    """The full state-dict key of a c2-renamed name in maskrcnn-benchmark's GeneralizedRCNN."""
    layer = name.split(".")[0]
    if layer in ("conv1", "bn1"):
        return f"backbone.body.stem.{name}"
    if layer == "layer4" and c4:
        return f"roi_heads.box.feature_extractor.head.{name}"
    if layer.startswith("layer"):
        return f"backbone.body.{name}"
    if layer.startswith("fpn_"):
        return f"backbone.fpn.{name}"
    if layer == "rpn":
        return name
    if layer in _HEAD_MODULES:
        return f"{_HEAD_MODULES[layer]}.{name}"
    if re.fullmatch(r"mask_fcn\d+", layer):
        return f"roi_heads.mask.feature_extractor.{name}"
    if re.fullmatch(r"conv_fcn\d+", layer):
        return f"roi_heads.keypoint.feature_extractor.{name}"
    raise AssertionError(f"no maskrcnn-benchmark module for {name}")


def config_anchors(c4=False):
    """The cell_anchors buffers maskrcnn-benchmark saves for the Detectron baselines' RPN (sizes 32-512, aspect
    ratios 0.5, 1, 2): one per FPN level P2-P6, or C4's one; from the replica of its generate_anchors below."""
    return c4_anchor_state() if c4 else fpn_anchor_state()


def benchmark_state(blobs, c4=False):
    """A maskrcnn-benchmark state dict holding `blobs`: FrozenBatchNorm2d buffers (mean 0, var 1), the
    baselines' RPN anchors."""
    renamed = c2_renamed(list(blobs))
    state = {module_key(renamed[b], c4): v for b, v in blobs.items() if b not in FIXED_UPSAMPLING}
    for key in [k for k in state if re.search(r"(bn\d|downsample\.1)\.weight$", k)]:
        module = key[: -len(".weight")]
        state[f"{module}.running_mean"] = np.zeros_like(state[key])
        state[f"{module}.running_var"] = np.ones_like(state[key])
    state.update(config_anchors(c4))
    return state


def random_blobs(model, mask_head):
    """Detectron blobs (Caffe2 layouts) of seeded random values for every variable of `model`.

    The fixed bilinear `kps_score` upsampling keeps the model's own value (no checkpoint holds it).
    """
    rng = np.random.default_rng(0)
    blobs = {}
    for name, variable, to_caffe2, _ in model_blobs(model, mask_head):
        current = to_caffe2(held(variable))
        fixed = name in FIXED_UPSAMPLING
        blobs[name] = np.array(current) if fixed else rng.standard_normal(current.shape, dtype=np.float32)
    return blobs


def assert_model_holds(model, mask_head, blobs, close=()):
    """Every variable of `model` is its blob (bit-equal; blobs named in `close` to float32 rounding)."""
    for name, variable, to_caffe2, _ in model_blobs(model, mask_head):
        if name in close:
            np.testing.assert_allclose(to_caffe2(held(variable)), blobs[name], rtol=2e-6, atol=1e-6, err_msg=name)
        else:
            assert_same(to_caffe2(held(variable)), blobs[name], name)


# --------------------------------------------------------------------------- maskrcnn-benchmark's anchors

FPN_STRIDES = (4, 8, 16, 32, 64)  # maskrcnn-benchmark's MODEL.RPN.ANCHOR_STRIDE for P2..P6
FIRST = "rpn.anchor_generator.cell_anchors.0"


def benchmark_generate_anchors(stride, sizes, aspect_ratios):
    """maskrcnn-benchmark's generate_anchors: the (0, 0, stride-1, stride-1) window enumerated over aspect
    ratios (_ratio_enum, rounded widths), each of those over sizes/stride (_scale_enum); float32 x1,y1,x2,y2."""

    def whctrs(anchor):
        w, h = anchor[2] - anchor[0] + 1, anchor[3] - anchor[1] + 1
        return w, h, anchor[0] + 0.5 * (w - 1), anchor[1] + 0.5 * (h - 1)

    def mkanchors(ws, hs, x_ctr, y_ctr):
        return np.stack([x_ctr - 0.5 * (ws - 1), y_ctr - 0.5 * (hs - 1), x_ctr + 0.5 * (ws - 1), y_ctr + 0.5 * (hs - 1)], 1)

    w, h, x_ctr, y_ctr = whctrs(np.array([1, 1, stride, stride], np.float64) - 1)
    ratios = np.array(aspect_ratios, np.float64)
    ws = np.round(np.sqrt(w * h / ratios))
    ratio_anchors = mkanchors(ws, np.round(ws * ratios), x_ctr, y_ctr)
    scales = np.array(sizes, np.float64) / stride
    rows = []
    for anchor in ratio_anchors:
        w, h, x_ctr, y_ctr = whctrs(anchor)
        rows.append(mkanchors(w * scales, h * scales, x_ctr, y_ctr))
    return np.vstack(rows).astype(np.float32)  # AnchorGenerator keeps `.float()` buffers


def fpn_anchor_state(sizes=(32, 64, 128, 256, 512), aspect_ratios=(0.5, 1.0, 2.0)):
    """The cell_anchors buffers of an FPN AnchorGenerator (one size per level, ANCHOR_STRIDE 4..64)."""
    return {
        f"rpn.anchor_generator.cell_anchors.{i}": benchmark_generate_anchors(stride, (size,), aspect_ratios)
        for i, (stride, size) in enumerate(zip(FPN_STRIDES, sizes))
    }


def c4_anchor_state(sizes=(32, 64, 128, 256, 512), aspect_ratios=(0.5, 1.0, 2.0)):
    """The single cell_anchors buffer of a C4 AnchorGenerator (ANCHOR_STRIDE (16,))."""
    return {FIRST: benchmark_generate_anchors(16, sizes, aspect_ratios)}
