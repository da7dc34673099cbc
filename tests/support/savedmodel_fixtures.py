"""Helpers of the SavedModel tests: the tiny shapes model with seeded weights whose detections are easy
to compare (written once per test process), shapes images, and the comparison of served detections with
the Predictor's."""

import pathlib

import keras
import numpy as np

from support.training_fixtures import TINY_CONFIG
from tfdet.config import load_config
from tfdet.data import shapes
from tfdet.data.coco_classes import ModelCategories
from tfdet.data.model_labels import write_model_categories
from tfdet.inference import Predictor

# The tiny model's test settings: Detectron's default score threshold.
TINY_TEST = ("TEST.SCORE_THRESH", "0.05")
# The shapes dataset's classes (json ids 1..3), as training on it stores them in the weights.
SHAPES_CATEGORIES = ModelCategories(("__background__", *shapes.CATEGORY_NAMES), (0, 1, 2, 3))
# Detectron's initialisation (cls_score std 0.01) scores every class ~1/4 on any input, so the order of
# detections would rest on differences of 1e-5; a 30x classifier kernel spreads the scores over 0.05-0.8
# (65-116 detections above 0.05 on shapes val images and a blank one, from 50 proposals; measured).
CLASSIFIER_SCALE = 30.0
# The tiny model with Detectron's AffineChannel (frozen BN) ResNet body: GroupNorm stays in FPN and the heads (14
# layers; each runtime still computes its statistics), the body's 53 GroupNorm layers go. Its raw detection graph
# has a third fewer ops (5,400 instead of 8,300), which tf2onnx, OpenVINO and LiteRT convert in half the time or
# less: the runtime export tests' default model (the tiny config itself: under -m slow).
AFFINE_BODY_EXPORT = (
    "RESNETS.STEM_FUNC", "basic_bn_stem", "RESNETS.TRANS_FUNC", "bottleneck_transformation",
    "RESNETS.SHORTCUT_FUNC", "basic_bn_shortcut",
)  # fmt: skip


class TinyModel:
    """configs/shapes_tiny_mask_keypoint.yaml's model (with KEY VALUE `overrides`, such as AFFINE_BODY_EXPORT) with
    seeded Detectron-initialised weights and a spread classifier (CLASSIFIER_SCALE), as a training run on shapes
    leaves it: `config` (config.yaml) and `weights` (model_final.weights.h5, storing the shapes classes), written
    under pytest's base temporary folder of this test process, in a folder of its own for each `name`."""

    def __init__(self, tmp_path_factory, overrides=(), name="savedmodel_tiny_model"):
        self.directory = tmp_path_factory.getbasetemp() / name
        self.config = self.directory / "config.yaml"
        self.weights = self.directory / "model_final.weights.h5"
        if self.weights.is_file():  # an earlier module of this process wrote it
            return
        self.directory.mkdir(exist_ok=True)
        cfg = load_config(TINY_CONFIG, list(overrides))
        keras.utils.set_random_seed(0)
        model = Predictor(cfg).model
        classifier = model.get_layer("cls_score")
        classifier.kernel.assign(classifier.kernel.numpy() * CLASSIFIER_SCALE)
        self.config.write_text(cfg.dump())
        model.save_weights(str(self.weights))
        write_model_categories(self.weights, SHAPES_CATEGORIES)

    def test_config(self, *overrides):
        """The model's config with the tests' TEST settings and KEY VALUE `overrides`."""
        return load_config(self.config, [*TINY_TEST, *overrides])


def shapes_val_images(directory, count):
    """{"shapes0": path, ...}: `count` shapes val images (192 x 192 JPEGs, a seed training did not use)."""
    json_path = shapes.generate(directory, count, seed=1, split_name="val")
    image_dir = shapes.split_paths(directory, "val")[1]
    assert pathlib.Path(json_path).is_file()
    return {f"shapes{i}": str(path) for i, path in enumerate(sorted(pathlib.Path(image_dir).glob("*.jpg")))}


def assert_same_detections(
    served, expected, class_names=None, box_atol=0.5, keypoint_atol=0.5, score_atol=1e-4, logit_atol=1e-3
):
    """Same detections as matched sets: class, boxes within `box_atol` px, scores within `score_atol`, masks IoU >= 0.99
    (or 2 pixels apart; at most 1 in 50 otherwise), keypoints on heatmap cell centres within a cell of each other (`heatmap_cell_size`;
    over `keypoint_atol` px apart for at most 1 in 50), logits within `logit_atol` (order may differ only between
    near-equal scores). With `class_names` (the name of each class id), the served `class_names` name each
    served class."""
    n = len(expected["scores"])
    assert len(served["scores"]) == n, f"{len(served['scores'])} served detections, {n} from the Predictor"
    assert sorted(set(served) - {"class_names"}) == sorted(expected)
    if class_names is not None:
        assert served["class_names"] == [class_names[c] for c in served["classes"]]
    unmatched = list(range(n))
    moved = far = keypoints = masks_moved = 0
    for i in range(n):
        match = [
            j
            for j in unmatched
            if served["classes"][i] == expected["classes"][j]
            and np.abs(served["boxes"][i] - expected["boxes"][j]).max() <= box_atol
            and abs(served["scores"][i] - expected["scores"][j]) <= score_atol
        ]
        nearest = np.abs(np.asarray(expected["boxes"]).reshape(-1, 4) - served["boxes"][i]).max(axis=1).argmin()
        assert match, (
            f"served detection {i} ({served['classes'][i]}, {served['scores'][i]}) has no match; nearest box "
            f"{np.abs(expected['boxes'][nearest] - served['boxes'][i]).max():.4g} px, score {expected['scores'][nearest]}"
        )
        j = match[0]
        unmatched.remove(j)
        if "masks" in expected:
            a, b = served["masks"][i], expected["masks"][j]
            assert a.shape == b.shape and a.dtype == b.dtype == bool
            # IoU >= 0.99, or 2 pixels apart: boxes differ by up to 2e-3 px between the paths (float noise), which
            # moves a pasted mask's values by as much, so a pixel at the 0.5 threshold can flip on a small mask.
            # Rarely, the noise straddles an integer of the paste's rounded box and a small mask moves by a pixel.
            masks_moved += int((a ^ b).sum() > max(2, 0.01 * (a | b).sum()))
        if "keypoints" in expected:
            got, want = served["keypoints"][i][:, :2], expected["keypoints"][j][:, :2]
            cell = np.maximum(heatmap_cell_size(got, served["boxes"][i]), heatmap_cell_size(want, expected["boxes"][j]))
            moved += int((np.abs(got - want) > keypoint_atol).any(axis=1).sum())
            far += int((np.abs(got - want) > cell + 1e-3).any(axis=1).sum())
            keypoints += len(got)
            np.testing.assert_allclose(served["keypoints"][i][:, 2], expected["keypoints"][j][:, 2], atol=logit_atol)
            np.testing.assert_allclose(served["keypoint_probs"][i], expected["keypoint_probs"][j], atol=1e-4)
    # within one cell, not 0.5 px: Detectron's heatmap side is ceil(box size), so boxes 173.0002 and 172.9996 px
    # wide (float noise between the two graphs) resize to 174 and 173 cells and move keypoints up to a cell;
    # float noise can also move a maximum to the neighbouring cell. Both are rare.
    assert moved <= max(4, keypoints // 50), f"{moved} of {keypoints} keypoints more than {keypoint_atol} px apart"
    assert far <= max(1, keypoints // 200), f"{far} of {keypoints} keypoints more than a heatmap cell apart"
    assert masks_moved <= max(2, n // 50), f"{masks_moved} of {n} masks differ by more than 2 pixels and 1 %"


def heatmap_cell_size(keypoints, box, min_size=0):
    """(2,) width and height in pixels of the resized heatmap's cells of `box`, by Detectron's rule restated
    (`heatmaps_to_keypoints`: x = (column + 0.5) * w / max(ceil(w), min_size) + x1, w = max(x2 - x1, 1));
    asserts that each keypoint lies on a cell centre, as the rule places it."""
    origin = np.asarray(box[:2], np.float64)
    sizes = np.maximum(np.asarray(box[2:], np.float64) - origin, 1.0)
    cell = sizes / np.maximum(np.ceil(sizes), min_size)
    cells = (np.asarray(keypoints[:, :2], np.float64) - origin) / cell - 0.5
    assert np.abs(cells - np.round(cells)).max() < 0.01, f"keypoints off their heatmap cells' centres: {cells}"
    return cell
