"""Helpers of the training tests: the tiny config, a few shapes images as a roidb, one real batch."""

import pathlib

from tfdet.config import load_config
from tfdet.data import shapes
from tfdet.data.pipeline import build_train_dataset
from tfdet.data.roidb import load_coco_roidb

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
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
# random weights its losses grow too fast for longer runs).
AFFINE_BODY = (
    "RESNETS.STEM_FUNC", "basic_bn_stem", "RESNETS.TRANS_FUNC", "bottleneck_transformation",
    "RESNETS.SHORTCUT_FUNC", "basic_bn_shortcut", "FPN.USE_GN", "False",
    "FAST_RCNN.ROI_BOX_HEAD", "fast_rcnn_heads.add_roi_Xconv1fc_head",
    "MRCNN.ROI_MASK_HEAD", "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs",
)  # fmt: skip


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
