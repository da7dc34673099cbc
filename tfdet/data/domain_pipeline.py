"""Training batches for domain adaptation: source images with boxes and target images without.

As the DA fork's `do_da_train` (maskrcnn-benchmark, `data/build.py::make_data_loader(is_source)`):
two independent endless streams, one over TRAIN.DATASETS (the source) and one over
TRAIN.TARGET_DATASETS (the target), zipped step by step. The fork gives each GPU
SOLVER.IMS_PER_BATCH / (2 x GPUs) images of each domain (1 + 1 in its configs); with Detectron's
per-GPU TRAIN.IMS_PER_BATCH, each replica's batch holds IMS_PER_BATCH / 2 source images then
IMS_PER_BATCH / 2 target images (Detectron's DA port splits its minibatch the same way), so the
model still sees TRAIN.IMS_PER_BATCH images per replica. Both halves are built by
`tfdet.data.pipeline` (same scales, flips, aspect grouping, resumable with `start_step`), zero-padded
to the larger half's size (the fork's `ImageList.__add__`) and concatenated; the batch dict is the
pipeline's plus `is_source` (B,) bool. The target stream draws its order, scales and flips from
RNG_SEED + TARGET_SEED_OFFSET, so source and target images do not pair up the same way every epoch.

Target images need no annotations (`target_roidb` reads a COCO json's `images` only; the fork needs
a dummy box per image, issue #24): their ground truth is empty (num_gt 0).
"""

import pathlib

import numpy as np
import tensorflow as tf

from tfdet.batch_keys import SOURCE_FLAG
from tfdet.data.catalog import configured_datasets
from tfdet.data.coco_json import check_image_files, checked_images, load_json
from tfdet.data.pipeline import build_train_dataset, replica_dataset_fn
from tfdet.data.roidb import ImageRecord, Roidb

TARGET_SEED_OFFSET = 1
# Keys whose axis 1 is the ground-truth slot axis (the halves may have different slot counts).
_SLOT_KEYS = ("gt_boxes", "gt_classes", "gt_is_crowd")


def target_image_records(annotation_file, image_dir, check_files=True):
    """ImageRecords without ground truth for every image of a COCO json (only its `images` are read and
    checked, `tfdet.data.coco_json`; `check_files` requires each to be in `image_dir`)."""
    annotation_file, image_dir = pathlib.Path(annotation_file), pathlib.Path(image_dir)
    images = checked_images(annotation_file, load_json(annotation_file))
    if check_files:
        check_image_files(annotation_file, images, image_dir)
    return [
        ImageRecord(
            image_id=image_id,
            file_path=str(image_dir / images[image_id]["file_name"]),
            height=images[image_id]["height"],
            width=images[image_id]["width"],
            boxes=np.zeros((0, 4), np.float32),
            classes=np.zeros((0,), np.int32),
            is_crowd=np.zeros((0,), bool),
            keypoints=None,
            mask_rles=None,
        )
        for image_id in sorted(images)
    ]


def target_roidb(cfg, dataset_names=None):
    """The target-domain Roidb of cfg.TRAIN.TARGET_DATASETS (or `dataset_names`): images, no ground truth."""
    names = tuple(dataset_names if dataset_names is not None else cfg.TRAIN.TARGET_DATASETS)
    need = "MODEL.DOMAIN_ADAPTATION_ON needs target-domain images"
    records = []
    for spec in configured_datasets(names, "TRAIN.TARGET_DATASETS", need):
        records += target_image_records(spec.annotation_file, spec.image_dir)  # a json without images is refused
    return Roidb(records, (), ("__background__",), None, (), 0)


def build_domain_dataset(cfg, source_roidb, target_roidb, **kwargs):
    """The endless DA training dataset: per batch, IMS_PER_BATCH / 2 source then as many target images.

    `kwargs` are `build_train_dataset`'s (`start_step`, `batches_per_step`, `num_shards`, `shard_index`, `flip`).
    """
    batch_size = int(cfg.TRAIN.IMS_PER_BATCH)
    if batch_size < 2 or batch_size % 2:
        raise ValueError(
            f"domain adaptation needs an even TRAIN.IMS_PER_BATCH (source + target halves), got {batch_size}"
        )
    half = cfg.clone()
    half.TRAIN.IMS_PER_BATCH = batch_size // 2
    target_cfg = half.clone()
    target_cfg.RNG_SEED = cfg.RNG_SEED + TARGET_SEED_OFFSET
    source = build_train_dataset(half, source_roidb, **kwargs)
    target = build_train_dataset(target_cfg, target_roidb, **kwargs)
    return tf.data.Dataset.zip(source, target).map(
        tf.autograph.experimental.do_not_convert(concatenate_domains), num_parallel_calls=tf.data.AUTOTUNE
    )


def distributed_domain_dataset_fn(cfg, source_roidb, target_roidb, *, start_step=0, **kwargs):
    """`fn(input_context)` for `strategy.distribute_datasets_from_function`: every replica gets its
    source half and target half (`build_domain_dataset`)."""
    return replica_dataset_fn(build_domain_dataset, cfg, source_roidb, target_roidb, start_step=start_step, **kwargs)


def _pad_axes(tensor, sizes):
    """Zero-pad `tensor` at the end of axes 1.. to `sizes` (one entry per padded axis)."""
    shape = tf.shape(tensor)
    paddings = [[0, 0]] + [[0, size - shape[axis]] for axis, size in enumerate(sizes, start=1)]
    paddings += [[0, 0]] * (tensor.shape.rank - 1 - len(sizes))
    return tf.pad(tensor, paddings)


def concatenate_domains(source, target):
    """One batch dict from a source batch and a target batch (keys of the source batch, plus `is_source`)."""
    missing = sorted(set(source) - set(target))
    if missing:
        raise ValueError(f"the target batch lacks {', '.join(missing)} (masks and keypoints are not supported)")
    combined = {}
    for key, source_value in source.items():
        target_value = target[key]
        if key == "images":
            size = tf.maximum(tf.shape(source_value)[1:3], tf.shape(target_value)[1:3])
            source_value, target_value = (_pad_axes(v, [size[0], size[1]]) for v in (source_value, target_value))
        elif key in _SLOT_KEYS:
            slots = tf.maximum(tf.shape(source_value)[1], tf.shape(target_value)[1])
            source_value, target_value = (_pad_axes(v, [slots]) for v in (source_value, target_value))
        combined[key] = tf.concat([source_value, target_value], axis=0)
    flags = [tf.ones_like(source["num_gt"], tf.bool), tf.zeros_like(target["num_gt"], tf.bool)]
    combined[SOURCE_FLAG] = tf.concat(flags, axis=0)
    return combined
