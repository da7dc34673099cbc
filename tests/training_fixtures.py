"""Helpers of the training tests: the tiny config, a few shapes images as a roidb, one real batch."""

import pathlib

from tfdet.config import load_config
from tfdet.data import shapes
from tfdet.data.pipeline import build_train_dataset
from tfdet.data.roidb import load_coco_roidb

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY_CONFIG = REPO_ROOT / "configs" / "shapes_tiny_mask_keypoint.yaml"
# One bilinear sample per RoIAlign bin instead of the configs' 2 x 2 (RoIAlign's taps are unrolled: 16
# gathers per FPN level and head become 4): a tiny training step traces in ~60% of the time, an R-50-FPN
# inference model in ~75%. For tests whose point (strategies, resuming, CLIs, output contracts) does not
# depend on the sampling grid.
ONE_SAMPLE_ROI_ALIGN = (
    "FAST_RCNN.ROI_XFORM_SAMPLING_RATIO", "1", "MRCNN.ROI_XFORM_SAMPLING_RATIO", "1",
    "KRCNN.ROI_XFORM_SAMPLING_RATIO", "1",
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
