"""COCO result writers and evaluation: ground truth turned into results scores AP 1.0, perturbations less.

The ground truth of a shapes split goes through `detections_to_coco` the way a Predictor's output
would (boxes x1, y1, x2, y2 with Detectron's x2 = x + w - 1, bool masks, keypoints with a score),
which pins the writers' +1 widths, mask encoding and keypoint layout.
"""

import json

import cv2
import numpy as np
import pytest
import pycocotools.mask as mask_util
from pycocotools.coco import COCO

from tfdet.data import shapes
from tfdet.evaluation import (
    contiguous_to_json_ids,
    detections_to_coco,
    evaluate_results,
    read_results,
    split_by_iou_type,
    write_results,
)
from tfdet.evaluation.coco_evaluator import COCO_PERSON_OKS_SIGMAS, oks_sigmas
from tfdet.evaluation.results import encode_mask, xywh_to_xyxy


@pytest.fixture(scope="module")
def coco_gt(tmp_path_factory):
    json_path = shapes.generate(tmp_path_factory.mktemp("gt"), 16, seed=11, image_size=128, split_name="val")
    return COCO(str(json_path))


def gt_detections(coco, image_id, box_shift=0.0, erosion=0, keypoint_jitter=0.0, box_end_offset=-1.0):
    """Predictor-style detections equal to an image's ground truth, optionally perturbed."""
    anns = coco.loadAnns(coco.getAnnIds(imgIds=image_id))
    xywh = np.array([a["bbox"] for a in anns], np.float64).reshape(-1, 4)
    boxes = np.hstack([xywh[:, :2], xywh[:, :2] + xywh[:, 2:] + box_end_offset]) + box_shift
    masks = np.stack([coco.annToMask(a) for a in anns]).astype(np.uint8) if anns else np.zeros((0, 1, 1), np.uint8)
    if erosion:
        masks = np.stack([cv2.erode(m, np.ones((3, 3), np.uint8), iterations=erosion) for m in masks])
    keypoints = np.array([a["keypoints"] for a in anns], np.float32).reshape(len(anns), -1, 3)
    directions = np.random.default_rng(image_id).uniform(0, 2 * np.pi, size=keypoints.shape[:2])
    keypoints[..., 0] += keypoint_jitter * np.cos(directions)
    keypoints[..., 1] += keypoint_jitter * np.sin(directions)
    keypoints[..., 2] = 3.0  # a heatmap logit
    json_to_contiguous = {j: c for c, j in enumerate(contiguous_to_json_ids(coco))}
    return {
        "boxes": boxes.astype(np.float32),
        "scores": np.linspace(0.9, 0.5, len(anns)).astype(np.float32),
        "classes": np.array([json_to_contiguous[a["category_id"]] for a in anns], np.int32),
        "masks": masks.astype(bool),
        "keypoints": keypoints,
    }


def results_of(coco, **perturbation):
    category_ids = contiguous_to_json_ids(coco)
    results = []
    for image_id in coco.getImgIds():
        results += detections_to_coco(gt_detections(coco, image_id, **perturbation), image_id, category_ids)
    return results


def test_ground_truth_as_results_scores_one(coco_gt, tmp_path):
    path = tmp_path / "results.json"
    write_results(path, results_of(coco_gt))  # through json, as the CLI does
    metrics = evaluate_results(coco_gt, read_results(path))
    for iou_type in ("bbox", "segm", "keypoints"):
        assert metrics[iou_type]["AP"] == 1.0, iou_type
        assert metrics[iou_type]["AP-triangle"] == 1.0


def test_boxes_without_detectron_minus_one_score_less(coco_gt):
    # x2 = x + w (no -1) is what a writer without the +1 in w = x2 - x1 + 1 would score like
    metrics = evaluate_results(coco_gt, results_of(coco_gt, box_end_offset=0.0), iou_types=["bbox"])
    assert metrics["bbox"]["AP"] < 1.0
    assert metrics["bbox"]["AP50"] == 1.0


@pytest.mark.parametrize(
    "iou_type, name, sizes",
    [
        ("bbox", "box_shift", (0, 1, 3, 6)),
        ("segm", "erosion", (0, 1, 2, 4)),
        ("keypoints", "keypoint_jitter", (0, 1, 3, 6)),
    ],
)
def test_ap_falls_with_the_perturbation(coco_gt, iou_type, name, sizes):
    aps = [evaluate_results(coco_gt, results_of(coco_gt, **{name: s}), [iou_type])[iou_type]["AP"] for s in sizes]
    assert aps[0] == 1.0
    assert all(a > b for a, b in zip(aps, aps[1:])), aps


def test_entry_layout_matches_detectron():
    masks = np.zeros((1, 6, 8), bool)
    masks[0, 1:3, 2:5] = True
    detections = {
        "boxes": np.array([[2.0, 1.0, 4.0, 2.0]], np.float32),
        "scores": np.array([0.75], np.float32),
        "classes": np.array([2], np.int32),
        "masks": masks,
        "keypoints": np.array([[[1.5, 2.5, 4.0], [3.0, 1.0, 2.0]]], np.float32),
        "keypoint_probs": np.array([[0.25, 0.75]], np.float32),
    }
    (entry,) = detections_to_coco(detections, image_id=42, category_ids=[0, 5, 9])
    assert entry["category_id"] == 9 and entry["image_id"] == 42 and entry["score"] == 0.75
    assert entry["bbox"] == [2.0, 1.0, 3.0, 2.0]  # w = x2 - x1 + 1
    assert entry["keypoints"] == [1.5, 2.5, 1.0, 3.0, 1.0, 1.0]  # visibility 1, as Detectron writes
    assert isinstance(entry["segmentation"]["counts"], str) and entry["segmentation"]["size"] == [6, 8]
    json.dumps(entry)
    (logit_entry,) = detections_to_coco(detections, 42, [0, 5, 9], keypoint_confidence="logit")
    assert logit_entry["keypoints_score"] == 3.0  # mean heatmap logit
    split = split_by_iou_type([logit_entry])
    assert split["keypoints"][0]["score"] == 3.0 and split["bbox"][0]["score"] == 0.75
    assert set(split["segm"][0]) == {"image_id", "category_id", "segmentation", "score"}
    (prob_entry,) = detections_to_coco(detections, 42, [0, 5, 9], keypoint_confidence="prob")
    assert prob_entry["keypoints_score"] == 0.5  # mean heatmap probability


def test_bad_inputs_are_refused(coco_gt):
    detections = {"boxes": np.zeros((1, 4)), "scores": np.ones(1), "classes": np.array([4])}
    with pytest.raises(ValueError, match="class 4 is outside 1..3"):
        detections_to_coco(detections, 1, contiguous_to_json_ids(coco_gt))
    with pytest.raises(ValueError, match="keypoint_confidence"):
        detections_to_coco(detections, 1, [0, 1, 2, 3, 4], keypoint_confidence="max")
    with pytest.raises(ValueError, match="images not in the annotations"):
        evaluate_results(coco_gt, [{"image_id": 999, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 1.0}])


def test_no_detections_score_zero(coco_gt):
    metrics = evaluate_results(coco_gt, [], iou_types=["bbox", "keypoints"])
    assert metrics["bbox"]["AP"] == 0.0 and metrics["keypoints"]["AP"] == 0.0


def test_read_results_refuses_other_json(tmp_path):
    path = tmp_path / "not_results.json"
    path.write_text(json.dumps({"images": []}))
    with pytest.raises(ValueError, match="not a COCO results file"):
        read_results(path)


def test_oks_sigmas():
    np.testing.assert_array_equal(oks_sigmas(17), COCO_PERSON_OKS_SIGMAS)
    assert oks_sigmas(17)[0] == pytest.approx(0.026)
    np.testing.assert_array_equal(oks_sigmas(len(shapes.KEYPOINT_NAMES)), [0.05] * 5)


def test_box_conversions_invert():
    xywh = np.array([[3.0, 4.0, 10.0, 1.0]])
    np.testing.assert_array_equal(xywh_to_xyxy(xywh), [[3.0, 4.0, 12.0, 4.0]])
    np.testing.assert_array_equal(
        detections_to_coco({"boxes": xywh_to_xyxy(xywh), "scores": [1.0], "classes": [1]}, 1, [0, 1])[0]["bbox"],
        xywh[0],
    )


def test_encode_mask_is_pycocotools_encode():
    """The NumPy RLE encoder (results need no pycocotools) gives pycocotools' compressed RLE, string for string:
    empty, full, one pixel, a first pixel set, runs past 31 and past 1023 (several 5-bit groups, negative
    differences to the run two before), random masks."""
    rng = np.random.default_rng(7)
    large = np.zeros((800, 1333), bool)
    large[100:700, 200:900] = True
    large[300:310, ::3] = False
    masks = [np.zeros((5, 7), bool), np.ones((5, 7), bool), np.eye(6, dtype=bool), np.ones((1, 1), bool), large]
    masks += [rng.random(rng.integers(1, 60, 2)) < rng.random() for _ in range(100)]
    for mask in masks:
        expected = mask_util.encode(np.asfortranarray(mask.astype(np.uint8)))
        assert encode_mask(mask) == {"size": list(expected["size"]), "counts": expected["counts"].decode("ascii")}
