"""Test-time augmentation in Predictor against Detectron's core/test.py restated in NumPy
(tests/support/numpy_detectron_test_time.py), on a demo photo with a seeded random-weight tiny Mask + Keypoint
R-CNN (17 COCO keypoints, so that heatmap flips use Detectron's COCO flip map). The network is the
oracle: the reference gets its raw outputs (rois, cls_prob, bbox_pred; the heads' outputs for given
boxes) and does every transform, inversion, decoding, combination and the NMS itself.

End to end: the transforms of TEST.*_AUG (flip, two scales with flips — the larger capped by MAX_SIZE —
and an aspect ratio with its flip), linear soft-NMS with IoU-weighted box voting, SOFT_AVG masks, HM_AVG
heatmaps with SCALE_SIZE_DEP; under -m slow also NMS, LOGIT_AVG and HM_MAX, and the zoo's X-152 TEST section
on an R-50-FPN Detectron file. Every mask and heatmap heuristic is also checked on the combination itself;
gaussian soft-NMS and the other voting methods in tests/test_soft_nms_and_voting.py.
"""

import cv2
import keras
import numpy as np
import pytest

from support import numpy_detectron_test_time as det
from support.numpy_reference import detectron_heatmaps_to_keypoints
from support.paths import shared_path
from support.training_fixtures import AFFINE_BODY, tiny_cfg
from tfdet.config import ConfigError, load_config
from tfdet.inference import Predictor
from tfdet.modeling import build_model
from tfdet.test_time_augmentation import Transform, combine_heatmaps, combine_masks

TRANSFORMS = ("H_FLIP", "True", "SCALES", "(96, 160)", "SCALE_H_FLIP", "True", "MAX_SIZE", "200",
              "ASPECT_RATIOS", "(0.75,)", "ASPECT_RATIO_H_FLIP", "True")  # fmt: skip
# AffineChannel body and plain-conv box and mask heads instead of GroupNorm: the transforms, inversions and
# combinations under test do not depend on the network, and half the ops make its many traced functions faster.
MODEL = ("KRCNN.NUM_KEYPOINTS", "17", "TEST.SCORE_THRESH", "0.2", "TEST.DETECTIONS_PER_IM", "20",
         "TEST.RPN_PRE_NMS_TOP_N", "300", "TEST.RPN_POST_NMS_TOP_N", "100", *AFFINE_BODY)  # fmt: skip
CONFIGS = {
    "soft_linear_iou_avg_vote": ("TEST.SOFT_NMS.ENABLED", "True", "TEST.BBOX_VOTE.ENABLED", "True",
                                 "TEST.BBOX_VOTE.SCORING_METHOD", "IOU_AVG", "TEST.MASK_AUG.HEUR", "SOFT_AVG",
                                 "TEST.KPS_AUG.HEUR", "HM_AVG", "TEST.KPS_AUG.SCALE_SIZE_DEP", "True",
                                 "TEST.KPS_AUG.AREA_TH", "3000"),
    "nms_logit_avg_hm_max": ("TEST.MASK_AUG.HEUR", "LOGIT_AVG", "TEST.KPS_AUG.HEUR", "HM_MAX"),
}  # fmt: skip


def tta_cfg(*extra):
    augment = [f"TEST.{section}.{key}" if i % 2 == 0 else key for section in ("BBOX_AUG", "MASK_AUG", "KPS_AUG")
               for i, key in enumerate(("ENABLED", "True", *TRANSFORMS))]  # fmt: skip
    return tiny_cfg(*MODEL, *augment, *extra)


def demo_image():
    image = cv2.imread(str(sorted(shared_path("data", "detectron_demo").glob("*.jpg"))[0]))
    return cv2.resize(image, (200, 150), interpolation=cv2.INTER_AREA)


def oracle(predictor):
    """The network of the Predictor's test-time models as Detectron's workspace exposes it: the raw box head
    inputs and outputs, and the heads' outputs for given boxes (the Predictor's own traced functions)."""
    augmentation = predictor._augmentation

    def boxes_net(blob, im_info):
        outputs = augmentation._boxes({"images": blob, "image_info": im_info})
        count = int(outputs["num_rois"][0])
        return (outputs["rois"].numpy()[0, :count], outputs["cls_prob"].numpy()[:count],
                outputs["bbox_pred"].numpy()[:count])  # fmt: skip

    def heads_net(blob, im_info, boxes, classes):
        outputs = augmentation._heads({
            "images": blob, "image_info": im_info, "detection_boxes": boxes[None].astype(np.float32),
            "detection_classes": classes[None], "num_detections": np.array([len(boxes)], np.int32),
        })  # fmt: skip
        return {name: np.asarray(value)[0, : len(boxes)] for name, value in outputs.items()}

    return det.Network(boxes_net, heads_net, predictor.cfg.FPN.COARSEST_STRIDE)


# The second config repeats the whole pipeline with the other heuristics: -m slow (its heuristics are also
# checked on the combinations themselves below).
@pytest.fixture(scope="module", params=[
    "soft_linear_iou_avg_vote", pytest.param("nms_logit_avg_hm_max", marks=pytest.mark.slow),
])  # fmt: skip
def compared(request):
    keras.utils.set_random_seed(0)
    predictor = Predictor(tta_cfg(*CONFIGS[request.param]))
    image = demo_image()
    got = predictor.predict(image)
    want = det.im_detect_all(oracle(predictor), predictor.cfg, image)
    return request.param, predictor, got, want


def test_bbox_aug_matches_numpy_reference(compared):
    _, _, got, want = compared
    rows = want["rows"]
    assert len(rows) >= 5 and len(got["scores"]) == len(rows)
    np.testing.assert_array_equal(got["classes"], [r[1] for r in rows])
    np.testing.assert_allclose(got["scores"], [r[0] for r in rows], rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["boxes"], np.array([r[2] for r in rows]), rtol=0, atol=1e-3)


def test_mask_aug_matches_numpy_reference(compared):
    _, predictor, got, want = compared
    height, width = demo_image().shape[:2]
    pasted = predictor._mask_paster((height, width))(want["mask_probs"], got["boxes"])
    assert pasted.shape == got["masks"].shape and pasted.any()
    for ours, theirs in zip(got["masks"], pasted):
        assert (ours & theirs).sum() >= 0.99 * (ours | theirs).sum()


def test_keypoint_aug_matches_numpy_reference(compared):
    _, _, got, want = compared
    boxes = np.array([r[2] for r in want["rows"]], np.float32)
    expected = detectron_heatmaps_to_keypoints(want["heatmaps"], boxes)
    np.testing.assert_allclose(got["keypoints"][..., :2], expected[..., :2], atol=1e-2)
    np.testing.assert_allclose(got["keypoints"][..., 2], expected[..., 2], atol=1e-3)
    np.testing.assert_allclose(got["keypoint_probs"], expected[..., 3], atol=1e-4)


def test_augmentation_changes_the_result(compared):
    """The comparisons mean something: without the transforms, the same network gives other detections."""
    _, predictor, got, _ = compared
    plain = det.im_detect_all(oracle(predictor), tiny_cfg(*MODEL), demo_image())["rows"]
    assert len(plain) != len(got["scores"]) or not np.allclose([r[2] for r in plain], got["boxes"], atol=1)


@pytest.mark.parametrize("heuristic", ["SOFT_AVG", "SOFT_MAX", "LOGIT_AVG"])
def test_mask_heuristics_combine_as_detectron(rng, heuristic):
    masks = rng.uniform(0, 1, (4, 3, 14, 14)).astype(np.float32)
    masks[0, 0, 0, :3] = [0.0, 1.0, 1e-30]  # logit's clamps
    got = combine_masks(list(masks), heuristic)
    np.testing.assert_allclose(got, det.combine_masks(list(masks), heuristic), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("heuristic, size_dependent", [("HM_AVG", False), ("HM_MAX", False), ("HM_AVG", True),
                                                      ("HM_MAX", True)])  # fmt: skip
def test_heatmap_heuristics_combine_as_detectron(rng, heuristic, size_dependent):
    cfg = tiny_cfg("TEST.KPS_AUG.HEUR", heuristic, "TEST.KPS_AUG.SCALE_SIZE_DEP", str(size_dependent),
                   "TEST.KPS_AUG.AREA_TH", "900")  # fmt: skip
    tags = [(False, False), (True, False), (False, True), (True, False)]  # identity, downscaled, upscaled, ...
    heatmaps = rng.normal(0, 2, (len(tags), 3, 8, 8, 5)).astype(np.float32)
    boxes = np.array([[0, 0, 9, 9], [0, 0, 29, 29], [5, 5, 40, 60]], np.float32)  # areas 100, 900, 2232
    transforms = [Transform(128, 128, downscale=down, upscale=up) for down, up in tags]
    got = combine_heatmaps(list(heatmaps), transforms, boxes, cfg)
    want = det.combine_heatmaps([(h, down, up) for h, (down, up) in zip(heatmaps, tags)], boxes, cfg)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_keypoint_flips_need_coco_keypoints():
    with pytest.raises(ConfigError, match="TEST.KPS_AUG flips: .*KRCNN.NUM_KEYPOINTS 5"):
        Predictor(tiny_cfg("TEST.KPS_AUG.ENABLED", "True", "TEST.KPS_AUG.H_FLIP", "True"))




@pytest.mark.slow
def test_x152_test_section_on_a_detectron_file_matches_numpy_reference(tmp_path):
    """The zoo's X-152 1.44x TEST section (scales 400-1200 with flips, MAX_SIZE 2000, SOFT_AVG masks, voting
    at 0.9) on Mask R-CNN R-50-FPN loaded from a Detectron .pkl, on a full-size demo photo (minutes on CPU)."""
    import warnings

    import yaml

    from porting.detectron_writer import model_to_blobs, write_detectron_pkl

    zoo = shared_path("detectron", "configs", "12_2017_baselines")
    test = yaml.safe_load((zoo / "e2e_mask_rcnn_X-152-32x8d-FPN-IN5k_1.44x.yaml").read_text())["TEST"]
    overrides = {f"TEST.{s}": test[s] for s in ("BBOX_AUG", "MASK_AUG", "BBOX_VOTE")}
    overrides.update({"MODEL.NUM_CLASSES": 5, "TEST.SCORE_THRESH": 0.2})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_config(zoo / "e2e_mask_rcnn_R-50-FPN_1x.yaml", overrides)
    keras.utils.set_random_seed(0)
    model = build_model(cfg)  # Detectron's random initialisation, written as a Detectron file
    classifier = model.get_layer("cls_score")  # spread its near-uniform scores (see test_savedmodel)
    classifier.kernel.assign(classifier.kernel * 30.0)
    weights = tmp_path / "model_final.pkl"
    write_detectron_pkl(weights, model_to_blobs(model, cfg.MRCNN.ROI_MASK_HEAD), cfg.dump())
    predictor = Predictor(cfg, weights)
    image = cv2.imread(str(sorted(shared_path("data", "detectron_demo").glob("*.jpg"))[0]))
    got = predictor.predict(image)
    want = det.im_detect_all(oracle(predictor), cfg, image)
    rows = want["rows"]
    assert len(rows) >= 3 and len(got["scores"]) == len(rows)
    np.testing.assert_array_equal(got["classes"], [r[1] for r in rows])
    np.testing.assert_allclose(got["scores"], [r[0] for r in rows], rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["boxes"], np.array([r[2] for r in rows]), rtol=0, atol=1e-2)


def test_a_missing_image_is_one_line_with_augmentation_too(compared):
    _, predictor, _, _ = compared
    with pytest.raises(ValueError, match="got None: cv2.imread returns None for a missing or unreadable file"):
        predictor.predict(None)
