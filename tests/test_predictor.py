"""Predictor end to end on real photos with random weights: the output contract of DESIGN.md §3."""

import cv2
import keras
import numpy as np
import pytest

from support.paths import shared_path
from support.training_fixtures import ONE_SAMPLE_ROI_ALIGN
from tfdet.config import load_config
from tfdet.inference import Predictor

# Small test scale keeps the suite fast; the contract does not depend on it. A zero score threshold
# gives random-weight models detections to check (Detectron's init makes every score ~1/81). 8 detections
# per image, 4 for Keypoint R-CNN: random-weight boxes cover most of the image, and Detectron's keypoint
# decoding resizes each heatmap to its box (on the 3000 x 4000 image, 20 detections took 22 s of CPU, 8 about
# 10 s). One RoIAlign sample per bin: see training_fixtures.
FAST = ["TEST.SCALE", "320", "TEST.MAX_SIZE", "512", "TEST.SCORE_THRESH", "0.0", "TEST.RPN_PRE_NMS_TOP_N", "300",
        "TEST.RPN_POST_NMS_TOP_N", "200", "TEST.DETECTIONS_PER_IM", "8", *ONE_SAMPLE_ROI_ALIGN]  # fmt: skip


def demo_images():
    folder = shared_path("data", "detectron_demo")
    return [cv2.imread(str(p)) for p in sorted(folder.glob("*.jpg"))[:3]]


@pytest.fixture(scope="module", params=["e2e_mask_rcnn_R-50-FPN_1x.yaml", "e2e_keypoint_rcnn_R-50-FPN_1x.yaml"])
def predictor(request):
    with pytest.warns() if "keypoint" in request.param else _no_warning():
        fewer = ["TEST.DETECTIONS_PER_IM", "4"] if "keypoint" in request.param else []
        cfg = load_config(shared_path("detectron", "configs", "12_2017_baselines", request.param), FAST + fewer)
    keras.utils.set_random_seed(0)  # random weights, the same ones on every run
    return Predictor(cfg)


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def check_contract(result, image, cfg):
    height, width = image.shape[:2]
    n = len(result["scores"])
    assert 0 < n <= cfg.TEST.DETECTIONS_PER_IM
    assert result["boxes"].dtype == np.float32 and result["boxes"].shape == (n, 4)
    assert result["scores"].dtype == np.float32 and result["classes"].dtype == np.int32
    assert np.all(np.diff(result["scores"]) <= 0), "scores must be sorted, descending"
    assert np.all(result["classes"] >= 1) and np.all(result["classes"] < cfg.MODEL.NUM_CLASSES)
    boxes = result["boxes"]
    assert np.all(boxes[:, [0, 2]] >= 0) and np.all(boxes[:, [0, 2]] <= width - 1)
    assert np.all(boxes[:, [1, 3]] >= 0) and np.all(boxes[:, [1, 3]] <= height - 1)
    if cfg.MODEL.MASK_ON:
        assert result["masks"].dtype == bool and result["masks"].shape == (n, height, width)
        # A pasted mask lies inside its box grown by Detectron's (M+2)/M padding (one pixel of rounding).
        resolution = cfg.MRCNN.RESOLUTION
        for mask, box in zip(result["masks"], boxes):
            ys, xs = np.nonzero(mask)
            centre, half = (box[:2] + box[2:]) / 2, (box[2:] - box[:2]) / 2 * (resolution + 2) / resolution
            assert np.all(xs >= centre[0] - half[0] - 1) and np.all(xs <= centre[0] + half[0] + 1)
            assert np.all(ys >= centre[1] - half[1] - 1) and np.all(ys <= centre[1] + half[1] + 1)
        # A one-pixel image may get no mask pixel at random weights; a real photo gets some.
        assert height * width == 1 or result["masks"].any()
    else:
        assert "masks" not in result
    if cfg.MODEL.KEYPOINTS_ON:
        kps = result["keypoints"]
        assert kps.dtype == np.float32 and kps.shape == (n, 17, 3)
        # Keypoints fall inside their box (the argmax pixel of the box-sized heatmap).
        assert np.all(kps[:, :, 0] >= boxes[:, None, 0] - 1) and np.all(kps[:, :, 0] <= boxes[:, None, 2] + 1)
        assert np.all(kps[:, :, 1] >= boxes[:, None, 1] - 1) and np.all(kps[:, :, 1] <= boxes[:, None, 3] + 1)
    else:
        assert "keypoints" not in result


def test_demo_photos(predictor):
    for image in demo_images():
        check_contract(predictor.predict(image), image, predictor.cfg)


def test_traced_once_at_construction_for_every_size(predictor):
    """The graph is traced when the Predictor is made, so no predict() call traces it again, whatever the
    image sizes and batch sizes (the first call's cost is the first run, not the trace)."""
    traced = predictor._run.experimental_get_tracing_count()
    assert traced == 1
    images = demo_images()[:2]
    predictor.predict(images[0][:200, :300])
    predictor.predict(images)
    assert predictor._run.experimental_get_tracing_count() == traced


def test_batch_of_different_sizes(predictor):
    images = demo_images()[:2]
    images[1] = images[1][:300, :400]
    batch = predictor.predict(images)
    assert len(batch) == 2
    for image, result in zip(images, batch):
        check_contract(result, image, predictor.cfg)
    # The larger image fixes the batch blob's size, so its detections are those it gets alone
    # (the smaller one sees more zero padding, which changes border features as in Detectron).
    # Batched convolutions round differently and random weights amplify it: compare the top 5.
    single = predictor.predict(images[0])
    np.testing.assert_array_equal(batch[0]["classes"][:5], single["classes"][:5])
    np.testing.assert_allclose(batch[0]["scores"][:5], single["scores"][:5], atol=1e-2)
    np.testing.assert_allclose(batch[0]["boxes"][:5], single["boxes"][:5], atol=1.0)


@pytest.mark.parametrize("shape", [(1, 1, 3), (3000, 4000, 3)])
def test_extreme_sizes(predictor, shape):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, shape, dtype=np.uint8)
    check_contract(predictor.predict(image), image, predictor.cfg)


def test_grayscale_stacked_and_two_dimensional(predictor):
    gray = cv2.cvtColor(demo_images()[0], cv2.COLOR_BGR2GRAY)
    stacked = np.stack([gray] * 3, axis=-1)
    result = predictor.predict(stacked)
    check_contract(result, stacked, predictor.cfg)
    flat = predictor.predict(gray)
    np.testing.assert_array_equal(flat["boxes"], result["boxes"])


def test_bad_images_are_refused_clearly(predictor, tmp_path):
    with pytest.raises(ValueError, match="H x W x 3"):
        predictor.predict(np.zeros((5, 5, 4), np.uint8))
    with pytest.raises(ValueError, match="H x W x 3"):
        predictor.predict(np.zeros((0, 5, 3), np.uint8))
    missing = cv2.imread(str(tmp_path / "no_such_photo.jpg"))  # None, as for any file OpenCV cannot read
    for images in (missing, [demo_images()[0], missing]):
        with pytest.raises(ValueError, match=r"^Expected an H x W x 3 BGR image, got None: cv2.imread returns None "
                           r"for a missing or unreadable file \(check its path\)$"):
            predictor.predict(images)


@pytest.mark.parametrize("name", ["e2e_keypoint_rcnn_R-50-FPN_1x.yaml", "e2e_mask_rcnn_R-50-C4_1x.yaml"])
def test_no_detection_gives_empty_results(name):
    """Heads that change width (Keypoint R-CNN's 512-channel convs, C4's res5) on zero RoIs: TF 2.21's oneDNN
    Conv2D returns the input's channel count on an empty batch, so the heads always see at least one RoI."""
    # 50 proposals: the box head's work on them (C4's res5 on Detectron's 1000 took 7 s) is not the point.
    overrides = ["TEST.SCALE", "64", "TEST.MAX_SIZE", "96", "TEST.SCORE_THRESH", "1.0", "TEST.RPN_PRE_NMS_TOP_N", "200",
                 "TEST.RPN_POST_NMS_TOP_N", "50", *ONE_SAMPLE_ROI_ALIGN]
    if "C4" in name:  # 8-wide bottlenecks: res5 still changes width (1024 -> 64 -> 2048), at a third of the time
        overrides += ["RESNETS.WIDTH_PER_GROUP", "8"]
    with pytest.warns() if "keypoint" in name else _no_warning():
        cfg = load_config(shared_path("detectron", "configs", "12_2017_baselines", name), overrides)
    image = np.full((60, 80, 3), 110, np.uint8)
    result = Predictor(cfg).predict(image)
    assert result["boxes"].shape == (0, 4) and result["scores"].shape == (0,)
    if cfg.MODEL.KEYPOINTS_ON:
        assert result["keypoints"].shape == (0, 17, 3) and result["keypoint_probs"].shape == (0, 17)
    else:
        assert result["masks"].shape == (0, 60, 80)
