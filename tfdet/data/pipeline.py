"""The training input pipeline: a Roidb -> an endless `tf.data.Dataset` of padded, batched dicts.

Detectron's minibatch construction (`roi_data/loader.py`, `minibatch.py`, `utils/blob.py`) in
pure TensorFlow ops, so that parallel map calls never take the GIL:
- Order: every epoch (one pass over the records) is a seeded permutation. With
  TRAIN.ASPECT_GROUPING, landscape (width >= height) and portrait images are permuted separately,
  each cut to a multiple of the batch size, split into batches and the batches permuted
  (`_shuffle_roidb_inds`), so no batch mixes orientations; without it, one permutation cut to a
  multiple of the batch size. Either way a few images (fewer than a batch per group) sit out each
  epoch, different ones every epoch. The stream repeats forever (training counts iterations).
- Per image: the file read as inference reads it (`tfdet.imaging.image_io.read_image`: OpenCV, EXIF orientation
  applied, any format OpenCV decodes; one decoder for training, evaluation, inference and export), its
  size checked against the json's; one of TRAIN.SCALES at random, capped by TRAIN.MAX_SIZE; a horizontal flip with
  probability 1/2 when TRAIN.USE_FLIPPED (Detectron instead appends flipped copies to the roidb:
  the same expected data, but here one epoch is one pass over the images); the image prepared as
  `tfdet.imaging.preprocessing.prepare_image` does at test time (see `transforms`).
- Batches of TRAIN.IMS_PER_BATCH images, zero-padded bottom-right to the batch's largest size,
  rounded up to FPN.COARSEST_STRIDE when FPN.FPN_ON (`im_list_to_blob`), or to TFDET.SIZE_DIVISIBILITY.
- Parallelism (`input_parallelism`): tf.data's autotuned parallel loading and prefetching when a GPU is
  visible; on CPUs alone one image at a time and one batch ahead, since the training step takes the cores
  and needs an image per seconds (benchmarks/README.md), and every loading buffer would only hold memory.
Every random choice is a stateless function of (RNG_SEED, epoch, image), so a run resumed with
`start_step` sees exactly the batches the interrupted run would have seen next; an iterator of
this dataset can also be saved with `tf.train.Checkpoint(iterator=...)`.

A batch is a dict (B = IMS_PER_BATCH, G = `num_gt_slots`, H, W = padded input size):
  images       (B, H, W, 3) float32  BGR minus PIXEL_MEANS, resized, zero padding
  image_info   (B, 3) float32        original height, original width, scale (the inference model's input)
  gt_boxes     (B, G, 4) float32     x1, y1, x2, y2 in input pixels: Detectron's original-image box
                                     ("+1" convention, flipped as x -> W - x - 1) times scale
  gt_classes   (B, G) int32          contiguous class ids 1..C; 0 marks an empty slot
  gt_is_crowd  (B, G) bool           crowd regions (never foreground; Detectron's gt_overlaps -1)
  num_gt       (B,) int32            filled slots (the first num_gt), crowd included
  image_id     (B,) int64            the json image id
  flipped      (B,) bool             whether the image was flipped
  gt_masks     (B, G, H, W) uint8    MODEL.MASK_ON: full-image binary masks at input size
  gt_keypoints (B, G, K, 3) float32  MODEL.KEYPOINTS_ON: x, y in input pixels (Detectron's flip
                                     x -> W - x - 1 in original pixels, then times scale), v as in
                                     the json (0 unlabelled, then x = y = 0; 1 occluded; 2 visible)
Masks: each segmentation is rasterised by pycocotools at the original size when the roidb is
built (kept as RLE), decoded here with TF ops, mirrored when flipped, and resized to the input
size by nearest neighbour (each output pixel takes the source pixel under its centre). Detectron
instead rasterises polygons straight into each RoI's MxM grid (`polys_to_mask_wrt_box`), and
flips polygons as x -> W - x - 1, a mask one pixel left of the mirrored image (pycocotools
rasterises pixel j as [j, j + 1)); cropping these masks with RoIAlign gives the same targets up to
a pixel at the boundary, without a Python rasteriser in the input pipeline. Full-image masks cost
G x H x W bytes per image (COCO, G ~ 90, 800 x 1333: ~100 MB): lower `max_gt` when memory binds.
G is the most objects an image of the roidb has, capped at `max_gt` (default MAX_GT_PER_IMAGE;
Detectron has no cap): objects past it are dropped, with a warning.
"""

import logging
import os
import re

import numpy as np
import tensorflow as tf

from tfdet.data import transforms
from tfdet.imaging.image_io import UnreadableImage, read_image
from tfdet.imaging.preprocessing import padding_stride

logger = logging.getLogger(__name__)

# Detectron keeps every ground-truth object; a fixed number of slots keeps batch shapes static.
MAX_GT_PER_IMAGE = 100


def num_gt_slots(roidb, max_gt=MAX_GT_PER_IMAGE):
    """G: the most objects an image of the roidb has, capped at `max_gt`."""
    return max(1, min(max_gt, max(len(r.classes) for r in roidb.records)))


def batches_per_epoch(cfg, roidb):
    """Batches in one pass over the roidb (all shards together), after aspect grouping's cut."""
    batch = int(cfg.TRAIN.IMS_PER_BATCH)
    if not cfg.TRAIN.ASPECT_GROUPING:
        return len(roidb.records) // batch
    landscape = sum(r.width >= r.height for r in roidb.records)
    return landscape // batch + (len(roidb.records) - landscape) // batch


def build_train_dataset(
    cfg,
    roidb,
    *,
    start_step=0,
    batches_per_step=1,
    num_shards=1,
    shard_index=0,
    flip=None,
    max_gt=MAX_GT_PER_IMAGE,
):
    """The endless, batched training dataset of `roidb` (see the module docstring for the batch dict).

    `start_step`: training iterations already done; the dataset starts at the batch that follows.
    `batches_per_step`: batches all shards together consume per iteration (the number of replicas).
    `num_shards`, `shard_index`: this input pipeline takes every `num_shards`-th batch.
    `flip`: None draws flips as TRAIN.USE_FLIPPED says; True or False forces every image (tests).
    """
    _check_roidb(cfg, roidb)
    batch_size = int(cfg.TRAIN.IMS_PER_BATCH)
    per_epoch = batches_per_epoch(cfg, roidb)
    if batch_size < 1 or per_epoch < 1:
        raise ValueError(
            f"{len(roidb.records)} training images make no batch of TRAIN.IMS_PER_BATCH={batch_size}"
            + (" per orientation (TRAIN.ASPECT_GROUPING)" if cfg.TRAIN.ASPECT_GROUPING else "")
        )
    if not 0 <= shard_index < num_shards:
        raise ValueError(f"shard_index {shard_index} is not in [0, {num_shards})")
    first_batch = int(start_step) * int(batches_per_step)
    order = _BatchOrder(cfg, roidb)
    loader = _ImageLoader(cfg, roidb, num_gt_slots(roidb, max_gt), flip)
    parallel_calls, prefetch = input_parallelism()
    # The functions use TF control flow explicitly: AutoGraph would only spend seconds converting them.
    dataset = (
        tf.data.Dataset.counter(first_batch // per_epoch)
        .flat_map(tf.autograph.experimental.do_not_convert(order.epoch))
        .skip(first_batch % per_epoch)
        .shard(num_shards, shard_index)
        .unbatch()
        .map(tf.autograph.experimental.do_not_convert(loader.__call__), num_parallel_calls=parallel_calls,
             deterministic=True)
        .padded_batch(batch_size, drop_remainder=True)
    )
    return dataset.prefetch(prefetch)


def input_parallelism():
    """(map parallel calls, batches prefetched): tf.data's AUTOTUNE for both when a GPU is visible (a step takes
    a fraction of a second there), else 1 and 1: on CPUs the step itself uses every core for seconds per image."""
    if tf.config.list_physical_devices("GPU"):
        return tf.data.AUTOTUNE, tf.data.AUTOTUNE
    return 1, 1


def distributed_dataset_fn(cfg, roidb, *, start_step=0, **kwargs):
    """`fn(input_context)` for `strategy.distribute_datasets_from_function`: per-replica batches of
    TRAIN.IMS_PER_BATCH, each input pipeline taking its share of every iteration's batches."""
    return replica_dataset_fn(build_train_dataset, cfg, roidb, start_step=start_step, **kwargs)


def replica_dataset_fn(build_dataset, *args, **kwargs):
    """`fn(input_context)` calling `build_dataset(*args, **kwargs)` with the input context's batches per
    step (replicas in sync) and its shard (input pipeline id of the input pipelines)."""

    def dataset_fn(input_context):
        return build_dataset(
            *args,
            batches_per_step=input_context.num_replicas_in_sync,
            num_shards=input_context.num_input_pipelines,
            shard_index=input_context.input_pipeline_id,
            **kwargs,
        )

    return dataset_fn


def read_annotated_image(path, size):
    """The BGR pixels of an image file as inference reads them (`tfdet.imaging.image_io.read_image`: OpenCV, EXIF
    orientation applied, any format OpenCV decodes), refused unless its (height, width) is the annotated `size`."""
    path = os.fsdecode(path)
    image = read_image(path)
    height, width = (int(v) for v in size)
    if image.shape[:2] != (height, width):
        turned = " (the json gives the size before the EXIF orientation is applied)" if image.shape[:2] == (
            width, height) else ""
        raise UnreadableImage(
            f"{path}: the image is {image.shape[1]}x{image.shape[0]} (width x height, as OpenCV shows it) but "
            f"its annotations say {width}x{height}{turned}"
        )
    return image


_IMAGE_ERROR = re.compile(r"UnreadableImage: (.+)")


def unreadable_image_error(error):
    """The UnreadableImage that `read_annotated_image` raised inside the input pipeline, out of the
    `tf.errors.OpError` that carries it (None when the error is of another cause)."""
    found = _IMAGE_ERROR.search(getattr(error, "message", "") or str(error))
    return UnreadableImage(found.group(1).strip()) if found else None


def _epoch_seed(seed, epoch):
    """The stateless seed of an epoch: every random choice derives from (RNG_SEED, epoch)."""
    return tf.stack([tf.constant(seed, tf.int64), epoch])


class _BatchOrder:
    """Image indices of one epoch's batches: `_shuffle_roidb_inds` with stateless seeds."""

    def __init__(self, cfg, roidb):
        self.batch_size = int(cfg.TRAIN.IMS_PER_BATCH)
        self.seed = int(cfg.RNG_SEED)
        landscape = np.array([r.width >= r.height for r in roidb.records])
        if cfg.TRAIN.ASPECT_GROUPING:
            self.groups = [np.flatnonzero(landscape), np.flatnonzero(~landscape)]
        else:
            self.groups = [np.arange(len(landscape))]
        self.groups = [tf.constant(g, tf.int64) for g in self.groups]

    def epoch(self, epoch):
        """Dataset of (B,) image indices and (B,) epoch numbers, one element per batch."""
        seeds = tf.random.experimental.stateless_split(_epoch_seed(self.seed, epoch), 3)
        rows = []
        for group, seed in zip(self.groups, tf.unstack(seeds)[:2]):
            usable = (group.shape[0] // self.batch_size) * self.batch_size
            shuffled = tf.random.experimental.stateless_shuffle(group, seed)[:usable]
            rows.append(tf.reshape(shuffled, [-1, self.batch_size]))
        rows = tf.random.experimental.stateless_shuffle(tf.concat(rows, 0), seeds[2])
        return tf.data.Dataset.from_tensor_slices((rows, tf.fill(tf.shape(rows), epoch)))


class _ImageLoader:
    """`(image index, epoch) -> per-image dict`: read, flip, resize, ground truth padded to G slots."""

    def __init__(self, cfg, roidb, num_slots, flip):
        records = roidb.records
        self.num_slots = num_slots
        self.seed = int(cfg.RNG_SEED)
        self.scales = tf.constant([int(s) for s in cfg.TRAIN.SCALES], tf.int32)
        self.max_size = int(cfg.TRAIN.MAX_SIZE)
        self.pixel_means = np.asarray(cfg.PIXEL_MEANS, np.float64).reshape(3)
        self.flip = flip
        self.use_flipped = bool(cfg.TRAIN.USE_FLIPPED)
        self.with_masks = bool(cfg.MODEL.MASK_ON)
        self.with_keypoints = bool(cfg.MODEL.KEYPOINTS_ON)
        self.stride = padding_stride(cfg)
        self.flip_pairs = roidb.keypoint_flip_pairs

        counts = np.array([min(len(r.classes), num_slots) for r in records], np.int64)
        truncated = sum(len(r.classes) > num_slots for r in records)
        if truncated:
            logger.warning(
                "%d images have more than %d objects; the first %d are kept", truncated, num_slots, num_slots
            )
        self.splits = tf.constant(np.concatenate([[0], np.cumsum(counts)]), tf.int64)
        self.file_paths = tf.constant([r.file_path for r in records])
        self.sizes = tf.constant([[r.height, r.width] for r in records], tf.int32)
        self.image_ids = tf.constant([r.image_id for r in records], tf.int64)
        kept = [slice(0, n) for n in counts]
        self.boxes = tf.constant(np.concatenate([r.boxes[k] for r, k in zip(records, kept)]).reshape(-1, 4))
        self.classes = tf.constant(np.concatenate([r.classes[k] for r, k in zip(records, kept)]).astype(np.int32))
        self.is_crowd = tf.constant(np.concatenate([r.is_crowd[k] for r, k in zip(records, kept)]).astype(bool))
        if self.with_keypoints:
            keypoints = np.concatenate([r.keypoints[k] for r, k in zip(records, kept)])
            self.keypoints = tf.constant(keypoints.reshape(-1, roidb.num_keypoints, 3), tf.float32)
        if self.with_masks:
            self.mask_rles = tf.constant([rle for r, k in zip(records, kept) for rle in r.mask_rles[k]], tf.string)

    def __call__(self, index, epoch):
        image_seed = tf.random.experimental.stateless_fold_in(_epoch_seed(self.seed, epoch), index)
        scale_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(image_seed, 2))
        target = self.scales[
            tf.random.stateless_uniform([], scale_seed, 0, tf.shape(self.scales)[0], dtype=tf.int32)
        ]
        if self.flip is None:
            flipped = tf.logical_and(self.use_flipped, tf.random.stateless_uniform([], flip_seed) < 0.5)
        else:
            flipped = tf.constant(bool(self.flip))
        height, width = self.sizes[index][0], self.sizes[index][1]
        image = tf.numpy_function(
            read_annotated_image, [self.file_paths[index], self.sizes[index]], tf.uint8, stateful=False
        )
        image = tf.ensure_shape(image, [None, None, 3])
        image = tf.cond(flipped, lambda: tf.reverse(image, axis=[1]), lambda: image)
        scale = transforms.image_scale(height, width, target, self.max_size)
        image = transforms.resize_image_by_scale(transforms.subtract_means(image, self.pixel_means), scale)
        out_size = tf.shape(image)[:2]

        start, stop = self.splits[index], self.splits[index + 1]
        boxes = self.boxes[start:stop]
        boxes = tf.cond(flipped, lambda: transforms.flip_boxes(boxes, width), lambda: boxes)
        scale32 = tf.cast(scale, tf.float32)
        # Padded to the stride here, in parallel: the batch's largest size is then a multiple of it too.
        example = {
            "images": transforms.pad_to_multiple(image, (0, 1), self.stride),
            "image_info": tf.stack([tf.cast(height, tf.float32), tf.cast(width, tf.float32), scale32]),
            "gt_boxes": self._pad(boxes * scale32),
            "gt_classes": self._pad(self.classes[start:stop]),
            "gt_is_crowd": self._pad(self.is_crowd[start:stop]),
            "num_gt": tf.cast(stop - start, tf.int32),
            "image_id": self.image_ids[index],
            "flipped": flipped,
        }
        if self.with_keypoints:
            keypoints = self.keypoints[start:stop]
            keypoints = tf.cond(
                flipped, lambda: transforms.flip_keypoints(keypoints, self.flip_pairs, width), lambda: keypoints
            )
            example["gt_keypoints"] = self._pad(keypoints * tf.stack([scale32, scale32, 1.0]))
        if self.with_masks:
            masks = transforms.decode_rle_masks(self.mask_rles[start:stop], height, width, scale, out_size, flipped)
            example["gt_masks"] = transforms.pad_to_multiple(self._pad(masks), (1, 2), self.stride)
        return example

    def _pad(self, values):
        """Zero-pad the leading (object) axis to G slots."""
        paddings = [[0, self.num_slots - tf.shape(values)[0]]] + [[0, 0]] * (values.shape.rank - 1)
        padded = tf.pad(values, paddings)
        return tf.ensure_shape(padded, [self.num_slots] + values.shape[1:].as_list())


def _check_roidb(cfg, roidb):
    """Clear errors for a roidb that cannot feed this config."""
    if not roidb.records:
        raise ValueError("the roidb holds no training image")
    if cfg.MODEL.MASK_ON and any(r.mask_rles is None for r in roidb.records):
        raise ValueError("MODEL.MASK_ON needs masks: build the roidb with with_masks=True")
    if cfg.MODEL.KEYPOINTS_ON:
        if roidb.keypoint_names is None:
            raise ValueError("MODEL.KEYPOINTS_ON needs a dataset with keypoints")
        if cfg.KRCNN.NUM_KEYPOINTS > 0 and cfg.KRCNN.NUM_KEYPOINTS != roidb.num_keypoints:
            raise ValueError(
                f"KRCNN.NUM_KEYPOINTS is {cfg.KRCNN.NUM_KEYPOINTS} but the dataset has {roidb.num_keypoints} keypoints"
            )
    if not cfg.TRAIN.SCALES:
        raise ValueError("TRAIN.SCALES is empty")
