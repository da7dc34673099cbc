"""How each key of the DA fork's config acts in our Detectron config: RULES, one `rule(value, fork) -> Outcome`
per key of `maskrcnn_benchmark.defaults.FORK_DEFAULTS`.

Read from the fork's source (krumo/Domain-Adaptive-Faster-RCNN-PyTorch, maskrcnn-benchmark e60f4ec): its
`config/defaults.py`, `paths_catalog.py`, the modules that read each key, and the train loops of
`engine/trainer.py` (`do_da_train` steps the LR scheduler after each update, so its schedule is Detectron's;
`do_train` steps it before, so its schedule runs one iteration ahead, which the translation shifts back).
Translated: Faster R-CNN (domain-adaptive or not) with a frozen-BN ResNet body, R-{50,101}-C4 with the res5
box head or R-{50,101,152}-FPN with the 2-MLP head. Outcomes:

* mapped: the Detectron keys that act as the fork's key does (units converted, said in the note);
* ignored: keys that change no result (loader workers, the torch device, heads of modes that are off);
* refused: the value cannot be honoured (why, and what to do).
"""

import dataclasses

from tfdet.config.maskrcnn_benchmark.defaults import FORK_DEFAULTS
from tfdet.weights.download import CATALOG_PREFIX, DownloadError, catalog_url

MAPPED, IGNORED, REFUSED = "mapped", "ignored", "refused"

# Fork body -> (Detectron body, box head feature extractor, its Detectron box head, predictor).
_C4_HEAD = ("ResNet50Conv5ROIFeatureExtractor", "ResNet.add_ResNet_roi_conv5_head", "FastRCNNPredictor")
_MLP_HEAD = ("FPN2MLPFeatureExtractor", "fast_rcnn_heads.add_roi_2mlp_head", "FPNPredictor")
_BODIES = {
    "R-50-C4": ("ResNet.add_ResNet50_conv4_body", _C4_HEAD),
    "R-101-C4": ("ResNet.add_ResNet101_conv4_body", _C4_HEAD),
    "R-50-FPN": ("FPN.add_fpn_ResNet50_conv5_body", _MLP_HEAD),
    "R-101-FPN": ("FPN.add_fpn_ResNet101_conv5_body", _MLP_HEAD),
    "R-152-FPN": ("FPN.add_fpn_ResNet152_conv5_body", _MLP_HEAD),
}
# The fork's FPN: P2..P6 (LastLevelMaxPool), RoIs pooled from P2..P5.
_FPN_ANCHOR_STRIDES = (4, 8, 16, 32, 64)
_FPN_POOLER_SCALES = (0.25, 0.125, 0.0625, 0.03125)
_FPN_SETTINGS = {
    "FPN.FPN_ON": True, "FPN.MULTILEVEL_RPN": True, "FPN.MULTILEVEL_ROIS": True, "FPN.RPN_MIN_LEVEL": 2,
    "FPN.RPN_MAX_LEVEL": 6, "FPN.EXTRA_CONV_LEVELS": False, "FPN.ROI_CANONICAL_SCALE": 224,
    "FPN.ROI_CANONICAL_LEVEL": 4,
}  # fmt: skip
_NOT_TRANSLATED = "no translation is written for it (Faster R-CNN with a frozen-BN ResNet-C4 or -FPN body only)"
_ONE_IMAGE_EVALUATION = "tfdet evaluates one image at a time"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What became of one fork key: its status, the Detectron settings it makes and a one-line note."""

    status: str
    settings: tuple = ()  # ((Detectron key, value), ...)
    note: str = ""


def mapped(settings=None, note=""):
    """The key acts as these Detectron `settings` ({key: value}; empty when Detectron does it without a key)."""
    return Outcome(MAPPED, tuple((settings or {}).items()), note)


def ignored(reason):
    """The key changes no result here (said why)."""
    return Outcome(IGNORED, (), reason)


def refused(reason):
    """The key's value cannot be honoured (reason and what to do, one line)."""
    return Outcome(REFUSED, (), reason)


class ForkConfig(dict):
    """The fork's effective config, flat (full key -> value): its defaults with the file and overrides merged."""

    @property
    def domain_adaptation(self):
        """MODEL.DOMAIN_ADAPTATION_ON: train_net.py then runs do_da_train on SOURCE_TRAIN + TARGET_TRAIN."""
        return bool(self["MODEL.DOMAIN_ADAPTATION_ON"])

    @property
    def body(self):
        """(Detectron body, its box head parts) of a translated CONV_BODY, else None."""
        return _BODIES.get(self["MODEL.BACKBONE.CONV_BODY"])

    @property
    def fpn(self):
        """Whether the body is an FPN."""
        return self["MODEL.BACKBONE.CONV_BODY"].endswith("-FPN")


# ---- rule builders: each rule is `rule(value, fork) -> Outcome` ----------------------------------------


def _to(*targets, note=""):
    """The value under Detectron's name(s)."""
    return lambda value, fork: mapped({target: value for target in targets}, note)


def _never(reason):
    """An ignored key (`reason`: why it changes no result)."""
    return lambda value, fork: ignored(reason)


def _only(expected, note, why=_NOT_TRANSLATED, settings=None):
    """Mapped (to `settings`, or no key) when the value is `expected`, else refused."""

    def rule(value, fork):
        if value == expected:
            return mapped(settings, note)
        return refused(f"only {expected!r} is translated: {why}")

    return rule


def _flag(target, refuse_true):
    """A boolean fork switch: False -> `target` False; True refused (`refuse_true` says why)."""
    return lambda value, fork: refused(refuse_true) if value else mapped({target: False})


def _weight(value, fork):
    """MODEL.WEIGHT: the training start (the fork's catalog names as the Detectron URLs its ModelCatalog gives)."""
    if value.startswith(CATALOG_PREFIX):
        try:
            url = catalog_url(value)
        except DownloadError as error:
            return refused(f"{error}: give a catalog name or the local path of the Detectron .pkl")
        return mapped({"TRAIN.WEIGHTS": url}, "the fork's ModelCatalog URL, downloaded and md5-checked when training "
                      "starts (tfdet.weights.download, $TFDET_CACHE)")  # fmt: skip
    if value.endswith(".pth"):
        return refused("a maskrcnn-benchmark checkpoint: port it first (python -m porting maskrcnn-benchmark --cfg "
                       "<this yaml> --weights X.pth --out DIR) and set MODEL.WEIGHT DIR/model.weights.h5")  # fmt: skip
    if "://" in value:
        return mapped({"TRAIN.WEIGHTS": value}, "a URL: downloaded and md5-checked when training starts if it is "
                      "Detectron's (tfdet.weights.download), refused then otherwise")  # fmt: skip
    return mapped({"TRAIN.WEIGHTS": value}, "the training start; evaluation and inference take --weights")


def _pixel_mean(value, fork):
    """INPUT.PIXEL_MEAN (BGR with TO_BGR255) as Detectron's (1, 1, 3) PIXEL_MEANS."""
    if len(value) != 3:
        return refused(f"expects 3 channel means, got {len(value)}")
    return mapped({"PIXEL_MEANS": ((tuple(float(v) for v in value),),)}, "BGR order, as TO_BGR255 feeds the network")


def _datasets(mode_on, target):
    """A dataset list read only when DOMAIN_ADAPTATION_ON is `mode_on`."""

    def rule(value, fork):
        if fork.domain_adaptation != mode_on:
            return ignored(f"read only with MODEL.DOMAIN_ADAPTATION_ON {mode_on}")
        return mapped({target: tuple(value)})

    return rule


def _test_datasets(value, fork):
    """DATASETS.TEST; the fork evaluates '*coco*' datasets with the COCO API, as FORCE_JSON does."""
    coco_style = bool(value) and all("coco" in name for name in value)
    settings = {"TEST.DATASETS": tuple(value), "TEST.FORCE_JSON_DATASET_EVAL": coco_style}
    note = "the fork evaluates every dataset named '*coco*' with the COCO API" if coco_style else ""
    return mapped(settings, note)


def _size_divisibility(value, fork):
    """DATALOADER.SIZE_DIVISIBILITY: FPN.COARSEST_STRIDE for FPN bodies (Detectron pads them to 32); for C4
    bodies TFDET.SIZE_DIVISIBILITY (Detectron pads C4 inputs only to the batch's largest image)."""
    if fork.fpn:
        if value == 32:
            return mapped({"FPN.COARSEST_STRIDE": 32}, "Detectron pads FPN inputs to a multiple of 32")
        return refused("Detectron pads FPN inputs to a multiple of FPN.COARSEST_STRIDE 32: set it to 32")
    if value <= 0:
        return mapped(None, "no padding beyond the batch's largest image, as Detectron's C4 models")
    return mapped({"TFDET.SIZE_DIVISIBILITY": value}, "inputs padded to its multiples, in training and at test time")


def _conv_body(value, fork):
    """MODEL.BACKBONE.CONV_BODY as Detectron's body (and its FPN levels)."""
    if fork.body is None:
        return refused(f"{_NOT_TRANSLATED}; translated bodies: {', '.join(_BODIES)}")
    settings = {"MODEL.CONV_BODY": fork.body[0], **(_FPN_SETTINGS if fork.fpn else {"FPN.FPN_ON": False})}
    return mapped(settings)


def _out_channels(value, fork):
    """MODEL.BACKBONE.OUT_CHANNELS: FPN.DIM, or res4's fixed 1024 for C4."""
    if fork.fpn:
        return mapped({"FPN.DIM": value})
    return _only(1024, "Detectron's res4 has 1024 channels")(value, fork)


def _fpn_only(rule):
    """`rule` for FPN bodies; ignored with C4 bodies, where the fork never reads the key."""

    def wrapped(value, fork):
        return rule(value, fork) if fork.fpn else ignored("read only by FPN bodies")

    return wrapped


def _use_fpn(value, fork):
    """RPN.USE_FPN / ROI_HEADS.USE_FPN: must agree with the body."""
    if bool(value) != fork.fpn:
        return refused(f"must be {fork.fpn} with MODEL.BACKBONE.CONV_BODY {fork['MODEL.BACKBONE.CONV_BODY']}")
    return mapped(None, "follows from the body")


def _anchor_sizes(value, fork):
    """RPN.ANCHOR_SIZES: RPN.SIZES (C4) or FPN.RPN_ANCHOR_START_SIZE (one doubling size per level)."""
    if not fork.fpn:
        return mapped({"RPN.SIZES": tuple(value)})
    doubling = len(value) == len(_FPN_ANCHOR_STRIDES) and all(b == 2 * a for a, b in zip(value, value[1:]))
    if not doubling:
        return refused("Detectron's FPN RPN has one anchor size per level P2..P6, doubling from level to level")
    return mapped({"FPN.RPN_ANCHOR_START_SIZE": value[0]}, "sizes doubling over P2..P6")


def _anchor_stride(value, fork):
    """RPN.ANCHOR_STRIDE: the body's stride (C4: 16; FPN: P2..P6)."""
    if fork.fpn:
        return _only(_FPN_ANCHOR_STRIDES, "P2..P6", "the fork's FPN has levels P2..P6")(tuple(value), fork)
    return _only((16,), "", "C4 bodies have stride 16", {"RPN.STRIDE": 16})(tuple(value), fork)


def _aspect_ratios(value, fork):
    """RPN.ASPECT_RATIOS for the body's RPN."""
    return mapped({"FPN.RPN_ASPECT_RATIOS" if fork.fpn else "RPN.ASPECT_RATIOS": tuple(value)})


def _post_nms(phase):
    """RPN.POST_NMS_TOP_N_<phase>: Detectron's <phase>.RPN_POST_NMS_TOP_N (same units, said)."""
    def rule(value, fork):
        unit = "per level and image, then per batch" if phase == "TRAIN" else "per level, then per image"
        return mapped({f"{phase}.RPN_POST_NMS_TOP_N": value}, unit if fork.fpn else "per image, as Detectron's")

    return rule


def _fpn_post_nms(phase):
    """RPN.FPN_POST_NMS_TOP_N_<phase>: Detectron has one top-N for each level and over them."""
    def rule(value, fork):
        post = fork[f"MODEL.RPN.POST_NMS_TOP_N_{phase}"]
        if value != post:
            return refused(
                f"Detectron keeps {phase}.RPN_POST_NMS_TOP_N proposals both per level and over the levels: set it "
                f"to MODEL.RPN.POST_NMS_TOP_N_{phase} ({post})"
            )
        return mapped(None, f"with MODEL.RPN.POST_NMS_TOP_N_{phase}")

    return _fpn_only(rule)


def _rpn_min_size(value, fork):
    """RPN.MIN_SIZE: only 0 means the same in both (their units differ)."""
    if value == 0:
        return mapped({"TRAIN.RPN_MIN_SIZE": 0, "TEST.RPN_MIN_SIZE": 0})
    return refused("the fork's minimum is in network-input pixels, Detectron's in original-image pixels: only 0 is "
                   "the same")  # fmt: skip


def _fg_fraction(value, fork):
    """maskrcnn-benchmark samples int(B * f) foreground RoIs, Detectron round(B * f)."""
    batch = fork["MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE"]
    if int(batch * value) != round(batch * value):
        return refused(f"the fork samples int({batch} x {value}) foreground RoIs, Detectron round(): they differ")
    return mapped({"TRAIN.FG_FRACTION": value})


def _box_head_part(index):
    """FEATURE_EXTRACTOR (0) or PREDICTOR (2): must be the body's head (FEATURE_EXTRACTOR sets the Detectron head)."""

    def rule(value, fork):
        if fork.body is None:
            return ignored("its body is refused")
        expected = fork.body[1][index]
        if value != expected:
            return refused(f"{_NOT_TRANSLATED}: {fork['MODEL.BACKBONE.CONV_BODY']} takes {expected}")
        if index:
            return mapped(None, "the box head's class and box outputs")
        return mapped({"FAST_RCNN.ROI_BOX_HEAD": fork.body[1][1], "FAST_RCNN.ROI_XFORM_METHOD": "RoIAlign"})

    return rule


def _pooler_resolution(value, fork):
    """ROI_BOX_HEAD.POOLER_RESOLUTION (the C4 res5 head needs 14)."""
    if fork.fpn:
        return mapped({"FAST_RCNN.ROI_XFORM_RESOLUTION": value})
    return _only(14, "", "the fork's res5 head has stride 2 and a 7x7 average pool",
                 {"FAST_RCNN.ROI_XFORM_RESOLUTION": 14})(value, fork)  # fmt: skip


def _pooler_scales(value, fork):
    """ROI_BOX_HEAD.POOLER_SCALES: the body's levels (C4: 1/16; FPN: P2..P5)."""
    if fork.fpn:
        return _only(_FPN_POOLER_SCALES, "P2..P5", "the fork's FPN heads pool P2..P5",
                     {"FPN.ROI_MIN_LEVEL": 2, "FPN.ROI_MAX_LEVEL": 5})(tuple(value), fork)  # fmt: skip
    return _only((0.0625,), "res4's stride 16", "C4 bodies have stride 16")(tuple(value), fork)


def _mlp_head(rule):
    """`rule` with the 2-MLP head; with the C4 head the fork reads the key nowhere (its DA heads only for VGG)."""
    return lambda value, fork: rule(value, fork) if fork.fpn else ignored("read only by the MLP box heads")


def _res5_dilation(value, fork):
    """RESNETS.RES5_DILATION: read by the C4 res5 box head, which Detectron never dilates."""
    if fork.fpn:
        return ignored("read only by the C4 res5 box head")
    return _only(1, "", "Detectron's C4 res5 head is not dilated")(value, fork)


def _resnet_block(expected, settings):
    """RESNETS.TRANS_FUNC / STEM_FUNC: the frozen-BN blocks only."""
    return _only(expected, "", "GroupNorm ResNets are not translated", settings)


def _lr_steps(value, fork):
    """SOLVER.STEPS (milestones) as Detectron's steps_with_decay steps, shifted for do_train."""
    steps = list(value)
    if steps != sorted(steps):
        return refused("the fork's WarmupMultiStepLR needs increasing milestones")
    if fork.domain_adaptation:
        return mapped({"SOLVER.LR_POLICY": "steps_with_decay", "SOLVER.STEPS": [0, *steps]},
                      "Detectron's steps start at 0")  # fmt: skip
    shifted = [0, *(max(step - 1, 0) for step in steps)]
    return mapped({"SOLVER.LR_POLICY": "steps_with_decay", "SOLVER.STEPS": shifted},
                  "do_train steps the scheduler before each update: milestones one iteration earlier")  # fmt: skip


def _warmup_iters(value, fork):
    """SOLVER.WARMUP_ITERS, one fewer for do_train (its schedule runs one iteration ahead)."""
    if fork.domain_adaptation:
        return mapped({"SOLVER.WARM_UP_ITERS": value})
    return mapped({"SOLVER.WARM_UP_ITERS": max(value - 1, 0)}, "do_train runs the schedule one iteration ahead")


def _warmup_factor(value, fork):
    """SOLVER.WARMUP_FACTOR, for do_train's linear warm-up the factor of its iteration 1."""
    iters, linear = fork["SOLVER.WARMUP_ITERS"], fork["SOLVER.WARMUP_METHOD"] == "linear"
    if fork.domain_adaptation or not linear or iters <= 1:
        return mapped({"SOLVER.WARM_UP_FACTOR": value})
    return mapped({"SOLVER.WARM_UP_FACTOR": value + (1 - value) / iters},
                  "do_train's first LR is the linear warm-up's at iteration 1")  # fmt: skip


def _warmup_method(value, fork):
    """SOLVER.WARMUP_METHOD: constant or linear, as Detectron's."""
    if value not in ("constant", "linear"):
        return refused("the fork accepts only 'constant' or 'linear'")
    return mapped({"SOLVER.WARM_UP_METHOD": value})


def _momentum(value, fork):
    """SOLVER.MOMENTUM, with the momentum correction that makes Detectron's update torch's."""
    settings = {"SOLVER.MOMENTUM": value, "SOLVER.SCALE_MOMENTUM": True, "SOLVER.SCALE_MOMENTUM_THRESHOLD": 1.0}
    return mapped(settings, "torch's SGD keeps the velocity without the LR: Detectron's is rescaled at every LR change")


def _weight_decay(value, fork):
    """SOLVER.WEIGHT_DECAY, also for GroupNorm scales (the fork decays every 'weight')."""
    return mapped({"SOLVER.WEIGHT_DECAY": value, "SOLVER.WEIGHT_DECAY_GN": value}, "GroupNorm scales decay as weights")


def _ims_per_batch(value, fork):
    """SOLVER.IMS_PER_BATCH (global) as TRAIN.IMS_PER_BATCH (per GPU) on one GPU."""
    if fork.domain_adaptation and value % 2:
        return refused("the fork splits it into source and target halves: it must be even")
    note = (
        "the fork's is the global batch (source + target with DA), Detectron's per GPU: equal with NUM_GPUS 1; "
        f"on N GPUs set NUM_GPUS N and TRAIN.IMS_PER_BATCH {value}/N"
    )
    return mapped({"TRAIN.IMS_PER_BATCH": value}, note)


def _test_ims_per_batch(value, fork):
    """TEST.IMS_PER_BATCH: 1 is what tfdet does; larger batches pad images together."""
    if value == 1:
        return mapped(None, _ONE_IMAGE_EVALUATION)
    return refused(f"the fork pads each test batch to its largest image; {_ONE_IMAGE_EVALUATION}: set it to 1")


def _expected_results(value, fork):
    """TEST.EXPECTED_RESULTS: only empty (tfdet checks none)."""
    if not value:
        return mapped({"EXPECTED_RESULTS": []})
    return refused("tfdet does not check expected results (Detectron's EXPECTED_RESULTS are refused too)")


def _paths_catalog(value, fork):
    """PATHS_CATALOG: the fork's catalog file; tfdet's catalog has its names."""
    if value is None:
        return ignored("tfdet.data.catalog holds the fork's dataset names and folders")
    return refused("tfdet reads dataset names from tfdet.data.catalog, under $TFDET_DATA_DIR")


def _checkpoint_period(value, fork):
    """SOLVER.CHECKPOINT_PERIOD as TRAIN.SNAPSHOT_ITERS."""
    return mapped({"TRAIN.SNAPSHOT_ITERS": value}, "Detectron divides it by NUM_GPUS (1); checkpoints change no result")


_HEAD_KEYS_OFF = {
    "MODEL.ROI_MASK_HEAD.": "MODEL.MASK_ON",
    "MODEL.ROI_KEYPOINT_HEAD.": "MODEL.KEYPOINT_ON",
    "MODEL.RETINANET.": "MODEL.RETINANET_ON",
}

RULES = {
    "MODEL.RPN_ONLY": lambda value, fork: mapped({"MODEL.RPN_ONLY": value, "MODEL.FASTER_RCNN": not value}),
    "MODEL.MASK_ON": _flag("MODEL.MASK_ON", "mask heads: " + _NOT_TRANSLATED),
    "MODEL.DOMAIN_ADAPTATION_ON": _to("MODEL.DOMAIN_ADAPTATION_ON"),
    "MODEL.RETINANET_ON": _flag("RETINANET.RETINANET_ON", "RetinaNet: " + _NOT_TRANSLATED),
    "MODEL.KEYPOINT_ON": _flag("MODEL.KEYPOINTS_ON", "keypoint heads: " + _NOT_TRANSLATED),
    "MODEL.DEVICE": _never("the torch device; tfdet uses the visible devices (NUM_GPUS, TFDET.DEVICE_MAP)"),
    "MODEL.META_ARCHITECTURE": _only("GeneralizedRCNN", "", settings={"MODEL.TYPE": "generalized_rcnn"}),
    "MODEL.CLS_AGNOSTIC_BBOX_REG": _to("MODEL.CLS_AGNOSTIC_BBOX_REG"),
    "MODEL.WEIGHT": _weight,
    "INPUT.MIN_SIZE_TRAIN": lambda value, fork: mapped(
        {"TRAIN.SCALES": tuple(value), "TRAIN.USE_FLIPPED": True},
        "one drawn per image; the fork's training transforms also flip half the images",
    ),
    "INPUT.MAX_SIZE_TRAIN": _to("TRAIN.MAX_SIZE"),
    "INPUT.MIN_SIZE_TEST": _to("TEST.SCALE"),
    "INPUT.MAX_SIZE_TEST": _to("TEST.MAX_SIZE"),
    "INPUT.PIXEL_MEAN": _pixel_mean,
    "INPUT.PIXEL_STD": lambda value, fork: _only((1.0, 1.0, 1.0), "Detectron divides by no std")(tuple(value), fork),
    "INPUT.TO_BGR255": _only(True, "Detectron's networks take BGR 0-255, as tfdet feeds them"),
    "DATASETS.TRAIN": _datasets(False, "TRAIN.DATASETS"),
    "DATASETS.SOURCE_TRAIN": _datasets(True, "TRAIN.DATASETS"),
    "DATASETS.TARGET_TRAIN": _datasets(True, "TRAIN.TARGET_DATASETS"),
    "DATASETS.TEST": _test_datasets,
    "DATALOADER.NUM_WORKERS": _never("loader processes: how fast batches are made, not which"),
    "DATALOADER.SIZE_DIVISIBILITY": _size_divisibility,
    "DATALOADER.ASPECT_RATIO_GROUPING": _to("TRAIN.ASPECT_GROUPING"),
    "MODEL.BACKBONE.CONV_BODY": _conv_body,
    "MODEL.BACKBONE.FREEZE_CONV_BODY_AT": _to("TRAIN.FREEZE_AT"),
    "MODEL.BACKBONE.OUT_CHANNELS": _out_channels,
    "MODEL.BACKBONE.USE_GN": _never("never read by the fork"),
    "MODEL.FPN.USE_GN": _fpn_only(_only(False, "", settings={"FPN.USE_GN": False})),
    "MODEL.FPN.USE_RELU": _fpn_only(_only(False, "", "Detectron's FPN has no ReLU")),
    **{f"MODEL.GROUP_NORM.{key}": _never("read only by GroupNorm layers, which translated configs do not have")
       for key in ("DIM_PER_GP", "NUM_GROUPS", "EPSILON")},  # fmt: skip
    "MODEL.RPN.USE_FPN": _use_fpn,
    "MODEL.RPN.ANCHOR_SIZES": _anchor_sizes,
    "MODEL.RPN.ANCHOR_STRIDE": _anchor_stride,
    "MODEL.RPN.ASPECT_RATIOS": _aspect_ratios,
    "MODEL.RPN.STRADDLE_THRESH": _to("TRAIN.RPN_STRADDLE_THRESH"),
    "MODEL.RPN.FG_IOU_THRESHOLD": _to("TRAIN.RPN_POSITIVE_OVERLAP"),
    "MODEL.RPN.BG_IOU_THRESHOLD": _to("TRAIN.RPN_NEGATIVE_OVERLAP"),
    "MODEL.RPN.BATCH_SIZE_PER_IMAGE": _to("TRAIN.RPN_BATCH_SIZE_PER_IM"),
    "MODEL.RPN.POSITIVE_FRACTION": _to("TRAIN.RPN_FG_FRACTION"),
    "MODEL.RPN.PRE_NMS_TOP_N_TRAIN": _to("TRAIN.RPN_PRE_NMS_TOP_N", note="per image (and level), as Detectron's"),
    "MODEL.RPN.PRE_NMS_TOP_N_TEST": _to("TEST.RPN_PRE_NMS_TOP_N", note="per image (and level), as Detectron's"),
    "MODEL.RPN.POST_NMS_TOP_N_TRAIN": _post_nms("TRAIN"),
    "MODEL.RPN.POST_NMS_TOP_N_TEST": _post_nms("TEST"),
    "MODEL.RPN.NMS_THRESH": _to("TRAIN.RPN_NMS_THRESH", "TEST.RPN_NMS_THRESH"),
    "MODEL.RPN.MIN_SIZE": _rpn_min_size,
    "MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN": _fpn_post_nms("TRAIN"),
    "MODEL.RPN.FPN_POST_NMS_TOP_N_TEST": _fpn_post_nms("TEST"),
    "MODEL.RPN.RPN_HEAD": _only("SingleConvRPNHead", "Detectron's RPN head"),
    "MODEL.ROI_HEADS.USE_FPN": _use_fpn,
    "MODEL.ROI_HEADS.FG_IOU_THRESHOLD": _to("TRAIN.FG_THRESH"),
    "MODEL.ROI_HEADS.BG_IOU_THRESHOLD": lambda value, fork: mapped(
        {"TRAIN.BG_THRESH_HI": value, "TRAIN.BG_THRESH_LO": 0.0}, "background: IoU below it, down to 0"
    ),
    "MODEL.ROI_HEADS.BBOX_REG_WEIGHTS": lambda value, fork: mapped({"MODEL.BBOX_REG_WEIGHTS": tuple(value)}),
    "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE": _to("TRAIN.BATCH_SIZE_PER_IM"),
    "MODEL.ROI_HEADS.POSITIVE_FRACTION": _fg_fraction,
    "MODEL.ROI_HEADS.SCORE_THRESH": _to("TEST.SCORE_THRESH"),
    "MODEL.ROI_HEADS.NMS": _to("TEST.NMS"),
    "MODEL.ROI_HEADS.DETECTIONS_PER_IMG": _to("TEST.DETECTIONS_PER_IM"),
    "MODEL.ROI_BOX_HEAD.FEATURE_EXTRACTOR": _box_head_part(0),
    "MODEL.ROI_BOX_HEAD.PREDICTOR": _box_head_part(2),
    "MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION": _pooler_resolution,
    "MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO": _to("FAST_RCNN.ROI_XFORM_SAMPLING_RATIO"),
    "MODEL.ROI_BOX_HEAD.POOLER_SCALES": _pooler_scales,
    "MODEL.ROI_BOX_HEAD.NUM_CLASSES": _to("MODEL.NUM_CLASSES", note="background included in both"),
    "MODEL.ROI_BOX_HEAD.MLP_HEAD_DIM": _mlp_head(_to("FAST_RCNN.MLP_HEAD_DIM")),
    "MODEL.ROI_BOX_HEAD.USE_GN": _mlp_head(_only(False, "", "GroupNorm heads are not translated")),
    **{f"MODEL.ROI_BOX_HEAD.{key}": _never("read only by the Xconv1fc box head, which is not translated")
       for key in ("DILATION", "CONV_HEAD_DIM", "NUM_STACKED_CONVS")},  # fmt: skip
    **{f"MODEL.DA_HEADS.{key}": _to(f"MODEL.DA_HEADS.{key}")
       for key in ("DA_IMG_GRL_WEIGHT", "DA_INS_GRL_WEIGHT", "DA_IMG_LOSS_WEIGHT", "DA_INS_LOSS_WEIGHT",
                   "DA_CST_LOSS_WEIGHT")},  # fmt: skip
    "MODEL.RESNETS.NUM_GROUPS": _to("RESNETS.NUM_GROUPS"),
    "MODEL.RESNETS.WIDTH_PER_GROUP": _to("RESNETS.WIDTH_PER_GROUP"),
    "MODEL.RESNETS.STRIDE_IN_1X1": _to("RESNETS.STRIDE_1X1"),
    "MODEL.RESNETS.TRANS_FUNC": _resnet_block(
        "BottleneckWithFixedBatchNorm",
        {"RESNETS.TRANS_FUNC": "bottleneck_transformation", "RESNETS.SHORTCUT_FUNC": "basic_bn_shortcut"},
    ),
    "MODEL.RESNETS.STEM_FUNC": _resnet_block("StemWithFixedBatchNorm", {"RESNETS.STEM_FUNC": "basic_bn_stem"}),
    "MODEL.RESNETS.RES5_DILATION": _res5_dilation,
    "MODEL.RESNETS.RES2_OUT_CHANNELS": _only(256, "Detectron's fixed res2 width"),
    "MODEL.RESNETS.STEM_OUT_CHANNELS": _only(64, "Detectron's fixed stem width"),
    "SOLVER.MAX_ITER": _to("SOLVER.MAX_ITER"),
    "SOLVER.BASE_LR": _to("SOLVER.BASE_LR"),
    "SOLVER.BIAS_LR_FACTOR": _to("SOLVER.BIAS_LR_FACTOR"),
    "SOLVER.MOMENTUM": _momentum,
    "SOLVER.WEIGHT_DECAY": _weight_decay,
    "SOLVER.WEIGHT_DECAY_BIAS": _to("SOLVER.WEIGHT_DECAY_BIAS"),
    "SOLVER.GAMMA": _to("SOLVER.GAMMA"),
    "SOLVER.STEPS": _lr_steps,
    "SOLVER.WARMUP_FACTOR": _warmup_factor,
    "SOLVER.WARMUP_ITERS": _warmup_iters,
    "SOLVER.WARMUP_METHOD": _warmup_method,
    "SOLVER.CHECKPOINT_PERIOD": _checkpoint_period,
    "SOLVER.IMS_PER_BATCH": _ims_per_batch,
    "TEST.EXPECTED_RESULTS": _expected_results,
    "TEST.EXPECTED_RESULTS_SIGMA_TOL": _never("read only with TEST.EXPECTED_RESULTS, which must be empty"),
    "TEST.IMS_PER_BATCH": _test_ims_per_batch,
    "TEST.DETECTIONS_PER_IMG": _never("read only by RetinaNet's post-processing (boxes: ROI_HEADS.DETECTIONS_PER_IMG)"),
    "OUTPUT_DIR": _to("OUTPUT_DIR"),
    "PATHS_CATALOG": _paths_catalog,
}
RULES.update({
    key: _never(f"read only with {switch} True, which is not translated")
    for key, _ in FORK_DEFAULTS for prefix, switch in _HEAD_KEYS_OFF.items() if key.startswith(prefix)
})  # fmt: skip


