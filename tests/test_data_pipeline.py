"""The tf.data training pipeline: batch contract, Detectron's image preparation, flips, grouping, resume."""

import dataclasses

import cv2
import numpy as np
import pycocotools.mask as mask_util
import pytest
import tensorflow as tf

from tfdet.config import load_config
from tfdet.data import pipeline, shapes
from tfdet.data import roidb as roidb_lib
from tfdet.data.transforms import decode_rle_masks
from tfdet.imaging.preprocessing import image_scale, prepare_image

HEIGHT, WIDTH = 96, 128  # landscape shapes images


@pytest.fixture(scope="module")
def roidb(tmp_path_factory):
    out = tmp_path_factory.mktemp("shapes")
    json_path = shapes.generate(out, 12, seed=0, image_size=(HEIGHT, WIDTH), split_name="landscape")
    return roidb_lib.load_coco_roidb(json_path, out / "landscape", with_masks=True, keypoints_required=True)


@pytest.fixture(scope="module")
def mixed_roidb(tmp_path_factory, roidb):
    """The landscape images plus 7 portrait ones (7: a remainder that aspect grouping leaves out)."""
    out = tmp_path_factory.mktemp("portrait")
    json_path = shapes.generate(out, 7, seed=5, image_size=(WIDTH, HEIGHT), split_name="portrait")
    portrait = roidb_lib.load_coco_roidb(json_path, out / "portrait", with_masks=True, keypoints_required=True)
    return roidb_lib.concatenate_roidbs([roidb, portrait])


def _cfg(**overrides):
    values = {
        "TRAIN.SCALES": (96,),
        "TRAIN.MAX_SIZE": 1000,
        "TRAIN.IMS_PER_BATCH": 2,
        "MODEL.MASK_ON": True,
        "MODEL.KEYPOINTS_ON": True,
        "FPN.FPN_ON": True,
    }
    values.update(overrides)
    return load_config(None, values)


def _batches(dataset, count):
    return [{k: v.numpy() for k, v in batch.items()} for batch in dataset.take(count)]


def _records(roidb):
    return {r.image_id: r for r in roidb.records}


@pytest.fixture(scope="module")
def random_batches(roidb):
    """8 batches (6 per epoch) with random scales (100 capped by MAX_SIZE) and flips."""
    cfg = _cfg(**{"TRAIN.SCALES": (80, 100), "TRAIN.MAX_SIZE": 120})
    return cfg, _batches(pipeline.build_train_dataset(cfg, roidb), 8)


@pytest.fixture(scope="module")
def upscaled_batches(roidb):
    """{flip: 3 batches} at scale 1.25 with every image flipped or none."""
    cfg = _cfg(**{"TRAIN.SCALES": (120,)})
    return cfg, {flip: _batches(pipeline.build_train_dataset(cfg, roidb, flip=flip), 3) for flip in (False, True)}


def test_batch_contract(roidb, random_batches):
    _, batches = random_batches
    slots = max(len(r.classes) for r in roidb.records)
    assert pipeline.num_gt_slots(roidb) == slots
    expected_scales = {image_scale(HEIGHT, WIDTH, s, 120) for s in (80, 100)}
    seen_scales = set()
    for batch in batches:
        assert set(batch) == {
            "images", "image_info", "gt_boxes", "gt_classes", "gt_is_crowd", "num_gt", "image_id",
            "flipped", "gt_masks", "gt_keypoints",
        }  # fmt: skip
        b, h, w, _ = batch["images"].shape
        assert b == 2 and h % 32 == 0 and w % 32 == 0
        assert batch["images"].dtype == np.float32
        assert batch["image_info"].shape == (2, 3) and batch["image_info"].dtype == np.float32
        assert batch["gt_boxes"].shape == (2, slots, 4) and batch["gt_boxes"].dtype == np.float32
        assert batch["gt_classes"].shape == (2, slots) and batch["gt_classes"].dtype == np.int32
        assert batch["gt_is_crowd"].dtype == bool and batch["num_gt"].dtype == np.int32
        assert batch["image_id"].dtype == np.int64 and batch["flipped"].dtype == bool
        assert batch["gt_masks"].shape == (2, slots, h, w) and batch["gt_masks"].dtype == np.uint8
        assert batch["gt_keypoints"].shape == (2, slots, 5, 3) and batch["gt_keypoints"].dtype == np.float32
        for i in range(2):
            height, width, scale = batch["image_info"][i]
            assert (height, width) == (HEIGHT, WIDTH)
            match = [s for s in expected_scales if abs(s - scale) < 1e-6]
            assert match, f"scale {scale} is none of {expected_scales}"
            seen_scales |= set(match)
            content_h, content_w = round(HEIGHT * match[0]), round(WIDTH * match[0])
            assert not batch["images"][i, content_h:].any() and not batch["images"][i, :, content_w:].any()
            assert batch["images"][i, content_h - 1, content_w - 1].any()
            n = batch["num_gt"][i]
            assert (batch["gt_classes"][i, :n] >= 1).all() and not batch["gt_classes"][i, n:].any()
            assert not batch["gt_boxes"][i, n:].any() and not batch["gt_masks"][i, n:].any()
    assert seen_scales == expected_scales
    flips = np.concatenate([b["flipped"] for b in batches])
    assert flips.any() and not flips.all()  # TRAIN.USE_FLIPPED: random flips


@pytest.mark.parametrize("flip", [False, True])
def test_images_are_prepared_as_at_test_time(roidb, upscaled_batches, flip):
    cfg, batches = upscaled_batches
    records = _records(roidb)
    for batch in batches[flip]:
        for i, image_id in enumerate(batch["image_id"]):
            image = cv2.imread(records[image_id].file_path)
            expected, scale = prepare_image(image[:, ::-1] if flip else image, cfg.PIXEL_MEANS, 120, 1000)
            h, w = expected.shape[:2]
            np.testing.assert_allclose(batch["images"][i, :h, :w], expected, rtol=0, atol=1e-3)
            assert batch["image_info"][i, 2] == np.float32(scale)
            assert batch["flipped"][i] == flip


def _tight_box(mask):
    ys, xs = np.nonzero(mask)
    return np.array([xs.min(), ys.min(), xs.max(), ys.max()], np.float32)


def test_flipped_ground_truth_matches_a_mirrored_image(roidb):
    """At scale 1 a flip is an exact mirror: images, masks and boxes (x -> W - x - 1) agree pixel for pixel."""
    cfg = _cfg(**{"TRAIN.SCALES": (HEIGHT,), "FPN.FPN_ON": False})
    plain = _batches(pipeline.build_train_dataset(cfg, roidb, flip=False), 3)
    flipped = _batches(pipeline.build_train_dataset(cfg, roidb, flip=True), 3)
    for a, b in zip(plain, flipped):
        assert a["images"].shape == (2, HEIGHT, WIDTH, 3)  # without FPN: the batch's largest image, unrounded
        np.testing.assert_array_equal(a["image_id"], b["image_id"])
        np.testing.assert_array_equal(b["images"], a["images"][:, :, ::-1])
        np.testing.assert_array_equal(b["gt_masks"], a["gt_masks"][:, :, :, ::-1])
        x1, y1, x2, y2 = np.moveaxis(a["gt_boxes"], -1, 0)
        valid = a["gt_classes"] > 0
        mirrored = np.stack([WIDTH - x2 - 1, y1, WIDTH - x1 - 1, y2], axis=-1)
        np.testing.assert_array_equal(b["gt_boxes"][valid], mirrored[valid])
        for batch in (a, b):
            for i, g in zip(*np.nonzero(valid)):
                # shapes' json boxes are the masks' tight boxes, so the "+1" box is the extreme pixels
                np.testing.assert_array_equal(_tight_box(batch["gt_masks"][i, g]), batch["gt_boxes"][i, g])


def test_keypoints_follow_detectron_flip(roidb, upscaled_batches):
    _, batches = upscaled_batches
    records = _records(roidb)
    assert roidb.keypoint_flip_pairs == ((1, 2),)  # shapes' left <-> right
    swap = [0, 2, 1, 3, 4]
    for flip in (False, True):
        for batch in batches[flip]:
            for i, image_id in enumerate(batch["image_id"]):
                scale = batch["image_info"][i, 2]
                source = records[image_id].keypoints
                n = len(source)
                expected = source.copy()
                if flip:
                    expected = source[:, swap]
                    expected[..., 0] = np.where(expected[..., 2] > 0, WIDTH - expected[..., 0] - 1, 0)
                expected[..., :2] *= scale
                np.testing.assert_allclose(batch["gt_keypoints"][i, :n], expected, rtol=1e-6, atol=1e-4)
                assert not batch["gt_keypoints"][i, n:].any()


def test_resized_masks_lie_on_their_boxes(upscaled_batches):
    _, batches = upscaled_batches
    for flip in (False, True):
        for batch in batches[flip]:
            for i, g in zip(*np.nonzero(batch["gt_classes"])):
                box = batch["gt_boxes"][i, g]
                assert np.abs(_tight_box(batch["gt_masks"][i, g]) - box).max() <= 1.0, (box, flip)


def test_no_flips_without_use_flipped(roidb):
    cfg = _cfg(**{"TRAIN.USE_FLIPPED": False, "MODEL.MASK_ON": False})
    assert not any(b["flipped"].any() for b in _batches(pipeline.build_train_dataset(cfg, roidb), 6))


def test_aspect_grouping_and_epochs(mixed_roidb):
    cfg = _cfg(**{"TRAIN.IMS_PER_BATCH": 3, "MODEL.MASK_ON": False})
    per_epoch = pipeline.batches_per_epoch(cfg, mixed_roidb)
    landscape = sum(r.width >= r.height for r in mixed_roidb.records)
    assert per_epoch == landscape // 3 + (len(mixed_roidb.records) - landscape) // 3
    batches = _batches(pipeline.build_train_dataset(cfg, mixed_roidb), 2 * per_epoch)
    for batch in batches:
        landscape_flags = batch["image_info"][:, 1] >= batch["image_info"][:, 0]
        assert landscape_flags.all() or not landscape_flags.any()
    # image ids repeat across the two splits; (id, orientation) names an image
    orientation = [(b["image_info"][:, 1] >= b["image_info"][:, 0]).tolist() for b in batches]
    keys = [list(zip(b["image_id"].tolist(), o)) for b, o in zip(batches, orientation)]
    epochs = [sum(keys[e * per_epoch : (e + 1) * per_epoch], []) for e in (0, 1)]
    for images in epochs:
        assert len(set(images)) == 3 * per_epoch  # no image twice in an epoch
    assert epochs[0] != epochs[1]  # reshuffled


def test_resume_from_a_step_gives_the_same_batches(roidb, random_batches):
    cfg, stream = random_batches  # 8 batches, 6 per epoch
    for start_step in (4, 7):  # across the epoch boundary, and inside the second epoch
        resumed = _batches(pipeline.build_train_dataset(cfg, roidb, start_step=start_step), 8 - start_step)
        for expected, got in zip(stream[start_step:], resumed, strict=True):
            for key in expected:
                np.testing.assert_array_equal(got[key], expected[key], err_msg=key)


def test_iterator_checkpoint_restores_the_position(roidb, tmp_path):
    cfg = _cfg(**{"MODEL.MASK_ON": False, "MODEL.KEYPOINTS_ON": False})
    iterator = iter(pipeline.build_train_dataset(cfg, roidb))
    next(iterator)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    path = checkpoint.save(str(tmp_path / "ckpt"))
    expected = [next(iterator)["image_id"].numpy() for _ in range(2)]
    checkpoint.restore(path)
    np.testing.assert_array_equal([next(iterator)["image_id"].numpy() for _ in range(2)], expected)


def test_input_pipelines_share_each_step(roidb):
    cfg = _cfg(**{"MODEL.MASK_ON": False, "MODEL.KEYPOINTS_ON": False})
    stream = [b["image_id"] for b in _batches(pipeline.build_train_dataset(cfg, roidb), 10)]
    # two input pipelines, one replica each: step s takes batches 2s (pipeline 0) and 2s + 1 (pipeline 1)
    for start_step, pipeline_id in ((0, 0), (2, 1)):
        dataset_fn = pipeline.distributed_dataset_fn(cfg, roidb, start_step=start_step)
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=2
        )
        got = [b["image_id"] for b in _batches(dataset_fn(context), 3)]
        np.testing.assert_array_equal(got, stream[2 * start_step + pipeline_id :: 2][:3])


def test_decode_rle_masks_matches_pycocotools(rng):
    height, width = 37, 23
    masks = [
        np.zeros((height, width), np.uint8),
        np.ones((height, width), np.uint8),
        (rng.uniform(size=(height, width)) < 0.3).astype(np.uint8),
        (rng.uniform(size=(height, width)) < 0.9).astype(np.uint8),
        shapes.polygon_mask(np.array([[2.5, 3.0], [20.0, 5.5], [9.0, 30.0]]), height, width).astype(np.uint8),
    ]
    masks.append(np.zeros((height, width), np.uint8))
    masks[-1][:, [0, width - 1]] = 1  # the first and last columns only
    counts = tf.constant([mask_util.encode(np.asfortranarray(m))["counts"] for m in masks])
    decoded = decode_rle_masks(counts, height, width).numpy()
    assert decoded.dtype == np.uint8
    np.testing.assert_array_equal(decoded, np.stack(masks))
    assert decode_rle_masks(tf.constant([], tf.string), height, width).shape == (0, height, width)
    # flipped and resized: each output pixel is the source pixel under its centre, floor((x + 0.5) / scale)
    for scale, out_size in ((1.37, (51, 32)), (0.6, (22, 14))):
        rows = np.minimum(((np.arange(out_size[0]) + 0.5) / scale).astype(int), height - 1)
        cols = np.minimum(((np.arange(out_size[1]) + 0.5) / scale).astype(int), width - 1)
        for flip in (False, True):
            expected = np.stack(masks)[:, :, ::-1] if flip else np.stack(masks)
            got = decode_rle_masks(counts, height, width, scale, out_size, tf.constant(flip)).numpy()
            np.testing.assert_array_equal(got, expected[:, rows][:, :, cols])


def test_bad_inputs_are_clear_errors(roidb, tmp_path):
    with pytest.raises(ValueError, match="make no batch"):
        pipeline.build_train_dataset(_cfg(**{"TRAIN.IMS_PER_BATCH": 13}), roidb)
    no_masks = dataclasses.replace(roidb, records=[dataclasses.replace(r, mask_rles=None) for r in roidb.records])
    with pytest.raises(ValueError, match="MODEL.MASK_ON needs masks"):
        pipeline.build_train_dataset(_cfg(), no_masks)
    with pytest.raises(ValueError, match="NUM_KEYPOINTS is 17"):
        pipeline.build_train_dataset(_cfg(**{"KRCNN.NUM_KEYPOINTS": 17}), roidb)
    # an image whose size is not the one its annotations give
    record = roidb.records[0]
    small = tmp_path / "small.jpg"
    cv2.imwrite(str(small), np.zeros((10, 10, 3), np.uint8))
    wrong = dataclasses.replace(roidb, records=[dataclasses.replace(record, file_path=str(small))] * 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="annotations say"):
        next(iter(pipeline.build_train_dataset(_cfg(**{"MODEL.MASK_ON": False}), wrong)))


def test_cpu_pipeline_loads_one_image_at_a_time_one_batch_ahead():
    """On CPUs alone the step takes the cores for seconds per image: no parallel loading, one batch ahead."""
    assert pipeline.input_parallelism() == (1, 1)  # no GPU is visible to the tests
