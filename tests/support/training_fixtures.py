"""Helpers of the training tests: the tiny config, a few shapes images as a roidb, one real batch."""

import contextlib
import warnings

import tensorflow as tf

from support.paths import REPO_ROOT
from tfdet.config import load_config
from tfdet.data import shapes
from tfdet.data.pipeline import build_train_dataset
from tfdet.data.roidb import load_coco_roidb
from tfdet.modeling.detectron_names import model_blobs

TINY_CONFIG = REPO_ROOT / "configs" / "shapes_tiny_mask_keypoint.yaml"
# One bilinear sample per RoIAlign bin instead of the configs' 2 x 2, for tests whose point (strategies,
# resuming, CLIs, output contracts) does not depend on the sampling grid: a quarter of the samples to crop
# and to scatter back in the gradient.
ONE_SAMPLE_ROI_ALIGN = (
    "FAST_RCNN.ROI_XFORM_SAMPLING_RATIO", "1", "MRCNN.ROI_XFORM_SAMPLING_RATIO", "1",
    "KRCNN.ROI_XFORM_SAMPLING_RATIO", "1",
)  # fmt: skip

# The tiny config with Detectron's AffineChannel (frozen BN) body and plain-conv heads instead of GroupNorm:
# half the ops of a training step (GroupNorm's statistics and their gradients), half its graph optimisation
# time. For single-step tests of strategies and device placement, where GroupNorm is not the point (from
# random weights its losses grow too fast for longer runs, hence TFDET.ALLOW_AFFINE_FROM_SCRATCH).
AFFINE_BODY = (
    "RESNETS.STEM_FUNC", "basic_bn_stem", "RESNETS.TRANS_FUNC", "bottleneck_transformation",
    "RESNETS.SHORTCUT_FUNC", "basic_bn_shortcut", "FPN.USE_GN", "False", "TFDET.ALLOW_AFFINE_FROM_SCRATCH", "True",
    "FAST_RCNN.ROI_BOX_HEAD", "fast_rcnn_heads.add_roi_Xconv1fc_head",
    "MRCNN.ROI_MASK_HEAD", "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs",
)  # fmt: skip
# The tiny config without keypoints, GroupNorm (AffineChannel and plain convs instead) and with 1x1 RoIAlign
# grids: a graph a third the size, traced faster (the device-map and mixed-precision steps).
SMALL_GRAPH = ("MODEL.KEYPOINTS_ON", "False", *ONE_SAMPLE_ROI_ALIGN, *AFFINE_BODY)


def tiny_cfg(*overrides):
    """configs/shapes_tiny_mask_keypoint.yaml with KEY VALUE overrides."""
    return load_config(TINY_CONFIG, list(overrides))


def shapes_images(directory, num_images=8, seed=0):
    """Write `num_images` shapes images with their COCO json; returns (json path, image folder)."""
    json_path = shapes.generate(directory, num_images, seed, split_name="train")
    return json_path, shapes.split_paths(directory, "train")[1]


def shapes_roidb(directory, num_images=8, seed=0, min_objects=1, generate=True):
    """The training Roidb (masks, keypoints) of a few shapes images with at least `min_objects` objects,
    written into `directory` first unless `generate` is False (already there)."""
    paths = shapes_images(directory, num_images, seed) if generate else shapes.split_paths(directory, "train")
    roidb = load_coco_roidb(*paths, with_masks=True, keypoints_required=True)
    roidb.records = [r for r in roidb.records if (~r.is_crowd).sum() >= min_objects]
    return roidb


def first_batch(cfg, roidb):
    """The first training batch of `roidb` without flips, as a dict of tensors."""
    return next(iter(build_train_dataset(cfg, roidb, flip=False)))


# The tiny config as a C4 Mask R-CNN: ResNet-50 conv4 body, the res5 box head shared with the mask head.
C4_MASK_RCNN = (
    "MODEL.CONV_BODY", "ResNet.add_ResNet50_conv4_body", "MODEL.KEYPOINTS_ON", "False", "FPN.FPN_ON", "False",
    "FPN.MULTILEVEL_ROIS", "False", "FPN.MULTILEVEL_RPN", "False", "RPN.SIZES", "(32, 64, 128)",
    "FAST_RCNN.ROI_BOX_HEAD", "ResNet.add_ResNet_roi_conv5_head", "FAST_RCNN.ROI_XFORM_RESOLUTION", "14",
    "FAST_RCNN.ROI_XFORM_SAMPLING_RATIO", "0", "MRCNN.ROI_MASK_HEAD", "mask_rcnn_heads.mask_rcnn_fcn_head_v0upshare",
    "MRCNN.ROI_XFORM_RESOLUTION", "14", "MRCNN.ROI_XFORM_SAMPLING_RATIO", "0", "MRCNN.RESOLUTION", "14",
    "TRAIN.BATCH_SIZE_PER_IM", "8", "TRAIN.RPN_POST_NMS_TOP_N", "100",
)


def model_inputs(model, batch, seeds=((3, 0), (3, 1))):
    """The inputs of training `model` from `batch`, with fixed per-image sampling seeds."""
    inputs = {name: batch[name] for name in model.input if name != "seeds"}
    inputs["seeds"] = tf.constant(seeds, tf.int64)
    return inputs


# The RPN's output layers, zeroed by the strategy-equivalence tests: every objectness is exactly 0.5 and every
# delta 0, so the proposals are the anchors, ranked by index, on any split of the batch. (From random RPN
# weights, rounding differences can swap near-tied proposal scores and so change which RoIs are sampled: a
# different, equally valid step.)
RPN_OUTPUT_LAYERS = ("rpn_cls_logits_fpn2", "rpn_bbox_pred_fpn2")


def weights_by_blob(model, mask_head=""):
    """{Detectron blob name: numpy value} of `model`'s weights."""
    return {name: variable.numpy() for name, variable, _, _ in model_blobs(model, mask_head)}


def zeroed_rpn_step(trainer, dataset, mask_head=""):
    """One training step of `trainer` on `dataset` (one element per replica) from its weights with the RPN
    output layers zeroed: npz entries initial/<blob>, updated/<blob>, output/<term> and replicas."""
    for name in RPN_OUTPUT_LAYERS:
        for variable in trainer.model.get_layer(name).weights:
            variable.assign(tf.zeros_like(variable))
    initial = weights_by_blob(trainer.model, mask_head)
    distributed = trainer.strategy.distribute_datasets_from_function(lambda context: dataset)
    outputs = trainer.train_step(next(iter(distributed)))
    return {**{f"initial/{n}": v for n, v in initial.items()},
            **{f"updated/{n}": v for n, v in weights_by_blob(trainer.model, mask_head).items()},
            **{f"output/{n}": v for n, v in outputs.items()}, "replicas": trainer.strategy.num_replicas_in_sync}


@contextlib.contextmanager
def functions_run_eagerly(enabled=True):
    """Within the block tf.functions (a Trainer's step) run op by op when `enabled`, the same kernels without a
    trace: the one-device reference of a step comparison costs ~1 s instead of the ~4 s its trace and first run
    took. With `enabled` False the block runs as it would without it (the traced side of a comparison)."""
    previous = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(enabled or previous)
    try:
        with warnings.catch_warnings():  # the input pipeline's functions stay traced, as TensorFlow warns
            warnings.filterwarnings("ignore", "Even though the `tf.config.experimental_run_functions_eagerly`")
            yield
    finally:
        tf.config.run_functions_eagerly(previous)
