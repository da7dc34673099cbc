"""Every config key has a status in tfdet.config.support, and check_supported refuses, at the point of use,
the values tfdet does not implement; the keys implemented alongside it (TRAIN.COPY_WEIGHTS,
SOLVER.LOG_LR_CHANGE_THRESHOLD, TEST.WEIGHTS, TEST.DATASETS, TEST.COMPETITION_MODE, VIS) act as Detectron's.

The `*_reach_*` tests check that keys whose ops are compared with Detectron elsewhere (test_roi_sampling,
test_rpn_targets, test_proposals, test_detection_output, test_keypoints, test_losses, test_fpn_levels,
test_roi_align, test_preprocessing) reach those ops from the config.
"""

import json
import pathlib
import warnings

import numpy as np
import pytest

from support.paths import REPO_ROOT, shared_path
from tfdet.config import ConfigError, check_supported, load_config
from tfdet.config.defaults import DEFAULTS
from tfdet.data.coco_classes import model_categories
from tfdet.config.support import SUPPORT, USES, Implemented, NoEffect, OnlyWith, Refused

TINY = REPO_ROOT / "configs" / "shapes_tiny_mask_keypoint.yaml"
TINY_DA = REPO_ROOT / "configs" / "shapes_tiny_da_faster.yaml"
DEFAULT_VALUES = {key: value for key, value, _ in DEFAULTS}


# Refused keys whose non-default sample cannot be derived from the default.
REFUSED_SAMPLES = {
    "TRAIN.PROPOSAL_FILES": ("rpn_proposals.pkl",),
    "EXPECTED_RESULTS": [["shapes_val", "box", "AP", 0.5]],
}

# A refused value of every key with limits, and the datasets evaluated (TEST.FORCE_JSON_DATASET_EVAL); a list
# where the key's limits refuse different values.
LIMIT_SAMPLES = {
    "TEST.FORCE_JSON_DATASET_EVAL": (False, ("voc_2007_test",)),
    "TEST.BBOX_AUG.ENABLED": (True, ()),
    "TEST.BBOX_AUG.SCORE_HEUR": ("AVG", ()),
    "TEST.BBOX_AUG.COORD_HEUR": ("ID", ()),
    "TEST.MASK_AUG.ENABLED": (True, ()),
    "TEST.MASK_AUG.HEUR": ("FOO", ()),
    "TEST.KPS_AUG.ENABLED": (True, ()),
    "TEST.KPS_AUG.HEUR": ("FOO", ()),
    "TEST.SOFT_NMS.METHOD": ("cubic", ()),
    "TEST.BBOX_VOTE.SCORING_METHOD": ("MEDIAN", ()),
    "TEST.BBOX_VOTE.ENABLED": (True, ()),
    "MODEL.TYPE": ("rfcn", ()),
    "TFDET.SIZE_DIVISIBILITY": (32, ()),
    "TFDET.MIXED_PRECISION": ("float8", ()),
    "MODEL.MASK_ON": (True, ()),
    "MODEL.KEYPOINTS_ON": (True, ()),
    "MODEL.CONV_BODY": ("VGG16.add_VGG16_conv5_body", ()),
    "MODEL.FASTER_RCNN": [(False, ()), (True, ())],
    "TRAIN.FREEZE_CONV_BODY": (True, ()),
    "FPN.FPN_ON": (False, ()),
    "FPN.COARSEST_STRIDE": (48, ()),
    "MODEL.DOMAIN_ADAPTATION_ON": (True, ()),
    "MODEL.RPN_ONLY": (True, ()),
    "FAST_RCNN.ROI_BOX_HEAD": ("VGG16.add_VGG16_roi_fc_head", ()),
    "FAST_RCNN.ROI_XFORM_METHOD": ("RoIPoolF", ()),
    "MRCNN.ROI_MASK_HEAD": ("mask_rcnn_heads.mask_rcnn_fcn_head_v0up", ()),
    "MRCNN.ROI_XFORM_METHOD": ("RoIPoolF", ()),
    "KRCNN.ROI_KEYPOINTS_HEAD": ("keypoint_rcnn_heads.add_ResNet_roi_conv5_head_for_keypoints", ()),
    "KRCNN.KEYPOINT_CONFIDENCE": ("max", ()),
    "KRCNN.ROI_XFORM_METHOD": ("RoIPoolF", ()),
}


def tiny(*overrides):
    return load_config(TINY, list(overrides))


def refusal(cfg, use, datasets=()):
    """check_supported's message for `use`, or None when it passes."""
    try:
        check_supported(cfg, use, datasets)
    except ConfigError as error:
        return str(error)
    return None


def named(message, key):
    """Whether a check_supported message refuses `key`."""
    return message is not None and any(line.startswith(f"{key} = ") for line in message.splitlines())


def derived_sample(key):
    """A non-default value of `key`: bools flipped, numbers + 1, strings and sequences changed."""
    if key in REFUSED_SAMPLES:
        return REFUSED_SAMPLES[key]
    default = DEFAULT_VALUES[key]
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 1
    raise AssertionError(f"give {key} an explicit sample in REFUSED_SAMPLES")


def with_conditions(key, rule, value):
    """Overrides setting `key` to `value` and the keys of the rule's conditions to theirs."""
    overrides = [key, repr(value) if isinstance(value, (tuple, list)) else str(value)]
    for when in rule.when:
        overrides += [when.key, str(when.value)]
    return overrides


def test_every_key_has_exactly_one_status():
    keys = [key for key, _, _ in DEFAULTS]
    assert set(SUPPORT) == set(keys), (set(keys) - set(SUPPORT), set(SUPPORT) - set(keys))
    for key, status in SUPPORT.items():
        assert isinstance(status, (Implemented, NoEffect, OnlyWith, Refused)), key


def _defines(path, function):
    file = REPO_ROOT / path
    return file.is_file() and f"\ndef {function}(" in file.read_text()


def test_implemented_keys_name_an_existing_test():
    tests = {status.test for status in SUPPORT.values() if isinstance(status, Implemented)}
    missing = [test for test in sorted(tests) if not _defines(*test.split("::"))]
    assert not missing, missing


def test_statuses_give_reasons():
    for key, status in SUPPORT.items():
        if isinstance(status, NoEffect):
            assert len(status.reason) > 20, key
        elif isinstance(status, OnlyWith):
            assert status.condition and len(status.reason) > 20, key
        elif isinstance(status, Refused):
            assert status.reason and status.fix and set(status.uses) <= set(USES), key
        for limit in getattr(status, "limits", ()):
            assert limit.reason and limit.fix and set(limit.uses) <= set(USES), key


def test_the_tiny_config_passes_every_use():
    cfg = tiny()
    for use in USES:
        check_supported(cfg, use, cfg.TEST.DATASETS)


@pytest.mark.parametrize("key", [key for key, status in SUPPORT.items() if isinstance(status, Refused)])
def test_refused_keys_are_refused_for_their_uses_only(key):
    rule = SUPPORT[key]
    value = derived_sample(key)
    cfg = tiny(*with_conditions(key, rule, value))
    for use in USES:
        message = refusal(cfg, use)
        assert named(message, key) == (use in rule.uses), (use, message)
        if use in rule.uses:
            assert f"{key} = {value}: {rule.reason}; {rule.fix}" in message.splitlines(), message
    cfg = tiny(*with_conditions(key, rule, DEFAULT_VALUES[key]))
    assert not any(named(refusal(cfg, use), key) for use in USES)


def limit_samples(key):
    """[(value, datasets)] of LIMIT_SAMPLES[key]."""
    samples = LIMIT_SAMPLES[key]
    return samples if isinstance(samples, list) else [samples]


@pytest.mark.parametrize("key", sorted(LIMIT_SAMPLES))
def test_limits_refuse_what_tfdet_does_not_implement(key):
    for limit in SUPPORT[key].limits:
        refused_for_every_use = []
        for value, datasets in limit_samples(key):
            messages = [refusal(tiny(*with_conditions(key, limit, value)), use, datasets) for use in limit.uses]
            refused_for_every_use.append(all(named(m, key) and limit.fix in m for m in messages))
        assert any(refused_for_every_use), (key, limit.reason)


def test_every_limit_has_a_sample():
    with_limits = {key for key, status in SUPPORT.items() if getattr(status, "limits", ())}
    assert with_limits == set(LIMIT_SAMPLES)


@pytest.mark.parametrize(
    "key, value, valid",
    [
        ("TEST.MASK_AUG.HEUR", "FOO", "SOFT_AVG, SOFT_MAX, LOGIT_AVG"),
        ("TEST.KPS_AUG.HEUR", "HM_MEDIAN", "HM_AVG, HM_MAX"),
        ("TEST.SOFT_NMS.METHOD", "cubic", "linear, gaussian, hard"),
        ("TEST.BBOX_VOTE.SCORING_METHOD", "MEDIAN", "ID, TEMP_AVG, AVG, IOU_AVG, GENERALIZED_AVG, QUASI_SUM"),
        ("KRCNN.KEYPOINT_CONFIDENCE", "max", "bbox, logit, prob"),
    ],
)
def test_invalid_enumerated_values_list_the_valid_ones(key, value, valid):
    section = key.rsplit(".", 1)[0]
    enable = [f"{section}.ENABLED", "True"] if section.startswith("TEST.") else []
    message = refusal(tiny(key, value, *enable), "inference")
    assert message == f"{key} = {value}: not one of Detectron's values; use one of {valid}"


def test_every_offending_key_gets_its_own_line():
    cfg = tiny("KRCNN.NMS_OKS", "True", "TEST.BBOX_VOTE.SCORING_METHOD_BETA", "2.0", "BBOX_XFORM_CLIP", "3.0")
    lines = refusal(cfg, "export").splitlines()
    assert [line.split(" = ")[0] for line in lines] == [
        "TEST.BBOX_VOTE.SCORING_METHOD_BETA", "KRCNN.NMS_OKS", "BBOX_XFORM_CLIP",
    ]  # fmt: skip
    assert lines[0] == (
        "TEST.BBOX_VOTE.SCORING_METHOD_BETA = 2.0: Detectron's box_results_with_nms_and_limit never passes it to "
        "box_voting, which always uses beta 1.0; leave it at 1.0"
    )


def test_force_json_dataset_eval_admits_voc_and_cityscapes_names():
    cfg = tiny()
    for name in ("voc_2007_test", "cityscapes_fine_instanceonly_seg_val"):
        message = refusal(cfg, "evaluation", ["shapes_val", name])
        assert message.startswith("TEST.FORCE_JSON_DATASET_EVAL = False: Detectron evaluates 'voc_'"), message
        assert refusal(tiny("TEST.FORCE_JSON_DATASET_EVAL", "True"), "evaluation", [name]) is None
    for name in ("coco_2014_minival", "keypoints_coco_2014_val", "shapes_val", "instances_val2017", "coco_voc_x"):
        assert refusal(cfg, "evaluation", [name]) is None


def test_a_detectron_float_round_trip_is_still_the_default():
    cfg = tiny("BBOX_XFORM_CLIP", "4.135166556742356")  # log(1000 / 16) as Detectron's YAML dumps write it
    assert refusal(cfg, "inference") is None


# ---- Detectron's zoo ----------------------------------------------------------------------------------------

def zoo_configs():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # legacy names in some zoo files warn, as they should
        return {path.name: load_config(path) for path in sorted(shared_path("detectron", "configs").rglob("*.yaml"))}


def test_zoo_configs_load_and_their_detectors_pass_inference():
    configs = zoo_configs()
    assert len(configs) == 85
    expected = {}
    for name, cfg in configs.items():
        if name.startswith("rpn_"):
            expected[name] = {"MODEL.RPN_ONLY"}
        elif cfg.TRAIN.PROPOSAL_FILES or cfg.TEST.PROPOSAL_FILES:
            expected[name] = {"MODEL.FASTER_RCNN"}
        else:
            expected[name] = set()
    assert sum(not keys for keys in expected.values()) == 47  # the end-to-end (and getting_started) R-CNN and RetinaNet configs
    for name, cfg in configs.items():
        message = refusal(cfg, "inference") or ""
        assert {line.split(" = ")[0] for line in message.splitlines()} == expected[name], (name, message)


def test_x152_with_test_time_augmentation_infers_but_does_not_export():
    cfg = zoo_configs()["e2e_mask_rcnn_X-152-32x8d-FPN-IN5k_1.44x.yaml"]
    assert refusal(cfg, "inference") is None
    message = refusal(cfg, "export")
    assert [line.split(" = ")[0] for line in message.splitlines()] == ["TEST.BBOX_AUG.ENABLED", "TEST.MASK_AUG.ENABLED"]
    assert "the SavedModel does not carry test-time augmentation" in message


def test_zoo_training_accepts_weight_urls():
    """Detectron's URLs are downloaded when training starts (tfdet.weights.download, tests/test_download.py)."""
    cfg = zoo_configs()["e2e_mask_rcnn_R-50-FPN_1x.yaml"]
    assert cfg.TRAIN.WEIGHTS.startswith("https://dl.fbaipublicfiles.com/detectron/")
    assert refusal(cfg, "training") is None


# ---- the command lines --------------------------------------------------------------------------------------

def test_train_refuses_before_building_with_exit_status_1(tmp_path, capsys):
    from tfdet.train import main

    out = tmp_path / "out"
    assert main(["--cfg", str(TINY), "OUTPUT_DIR", str(out), "TRAIN.PROPOSAL_FILES", "('p.pkl',)"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: TRAIN.PROPOSAL_FILES = ('p.pkl',): Detectron adds") and error.count("\n") == 1
    # the final test's keys are checked before training too, unless --skip-test
    assert main(["--cfg", str(TINY), "OUTPUT_DIR", str(out), "KRCNN.NMS_OKS", "True"]) == 1
    assert capsys.readouterr().err.startswith("error: KRCNN.NMS_OKS = True: Detectron's keypoint_results")
    assert not out.exists()


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """(annotation json, image folder) of 3 shapes images of 96 x 96; beside them the weights stand-ins: empty
    HDF5 files named as weights (FakePredictor loads nothing), tiny.weights.h5 and tiny_da.weights.h5."""
    import h5py

    from tfdet.data import shapes

    out = tmp_path_factory.mktemp("split")
    for name in STAND_INS:
        h5py.File(out / name, "w").close()
    return shapes.generate(out, 3, seed=5, image_size=96, split_name="tiny"), out / "tiny"


STAND_INS = ("tiny.weights.h5", "tiny_da.weights.h5")


def stand_in(split, name):
    """The path of weights stand-in `name` (one of STAND_INS) of the `split` fixture."""
    return str(pathlib.Path(split[0]).parent / name)


def test_evaluate_refuses_with_exit_status_1(split, tmp_path, capsys):
    from tfdet.evaluate import main

    json_path, image_dir = split
    base = ["--cfg", str(TINY), "--weights", "none.h5", "--images", str(image_dir), "--output", str(tmp_path)]
    assert main([*base, "--annotations", str(json_path), "TEST.BBOX_VOTE.SCORING_METHOD_BETA", "2"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: TEST.BBOX_VOTE.SCORING_METHOD_BETA = 2.0: ") and error.count("\n") == 1
    voc = tmp_path / "voc_2007_test.json"  # Detectron would evaluate this dataset with its VOC evaluator
    voc.write_text(pathlib.Path(json_path).read_text())
    assert main([*base, "--annotations", str(voc)]) == 1
    assert capsys.readouterr().err.startswith("error: TEST.FORCE_JSON_DATASET_EVAL = False: ")


class FakePredictor:
    """Predictor's interface without a model: one detection per image, scoring 0.95 on the first image only."""

    weights = []

    def __init__(self, cfg, weights):
        FakePredictor.weights.append(weights)
        self.cfg, self.calls = cfg, 0
        self.categories = model_categories(cfg.MODEL.NUM_CLASSES, cfg.MODEL.KEYPOINTS_ON)

    @classmethod
    def from_checked(cls, cfg, weights, categories):  # how tfdet.evaluate builds one: weights a WeightsFile
        return cls(cfg, weights.path)

    def predict(self, images):
        results = []
        for image in images:
            height, width = image.shape[:2]
            masks = np.zeros((1, height, width), bool)
            masks[0, 10:40, 10:40] = True
            score = 0.95 if self.calls == 0 else 0.5
            results.append({
                "boxes": np.array([[10, 10, 39, 39]], np.float32), "scores": np.array([score], np.float32),
                "classes": np.array([1], np.int32), "masks": masks, "keypoints": np.full((1, 5, 3), 20, np.float32),
                "keypoint_probs": np.ones((1, 5), np.float32),
            })  # fmt: skip
            self.calls += 1
        return results


@pytest.fixture
def fake_predictor(monkeypatch):
    import tfdet.inference

    FakePredictor.weights = []
    monkeypatch.setattr(tfdet.inference, "Predictor", FakePredictor)
    return FakePredictor


def evaluate(split, output, *overrides, weights=True):
    from tfdet.evaluate import main

    json_path, image_dir = split
    args = ["--cfg", str(TINY), "--annotations", str(json_path), "--images", str(image_dir), "--output", str(output)]
    return main(args + ["--weights", stand_in(split, "tiny.weights.h5")] * weights + list(overrides))


def test_evaluate_reads_test_weights(split, tmp_path, fake_predictor, capsys):
    tiny_weights, da_weights = (stand_in(split, name) for name in STAND_INS)
    assert evaluate(split, tmp_path, "TEST.WEIGHTS", da_weights, weights=False) == 0
    assert evaluate(split, tmp_path, "TEST.WEIGHTS", da_weights) == 0  # --weights wins, as train_net's final test
    assert fake_predictor.weights == [da_weights, tiny_weights]
    capsys.readouterr()
    # Detectron's URLs are downloaded (tests/test_download.py); others, as in Detectron, are refused in one line
    assert evaluate(split, tmp_path, "TEST.WEIGHTS", "https://example.com/model.pkl", weights=False) == 2
    assert capsys.readouterr().err.startswith("error: https://example.com/model.pkl: only Detectron's files")


def test_evaluate_runs_every_test_dataset(split, tmp_path, fake_predictor, monkeypatch):
    import tfdet.evaluate
    from tfdet.data.catalog import DatasetSpec

    json_path, image_dir = split
    monkeypatch.setattr(tfdet.evaluate, "get_dataset", lambda name: DatasetSpec(name, image_dir, json_path))
    args = ["--cfg", str(TINY), "--weights", stand_in(split, "tiny.weights.h5"), "--output", str(tmp_path)]
    datasets = ["TEST.DATASETS", "('a', 'b')"]
    assert tfdet.evaluate.main([*args, *datasets]) == 0
    assert {path.name for path in tmp_path.glob("metrics_*.json")} == {"metrics_a.json", "metrics_b.json"}
    results = ["--results", str(tmp_path / "results_b.json")]
    assert tfdet.evaluate.main([*args, *results, "--dataset", "b", *datasets]) == 0
    assert tfdet.evaluate.main([*args, *results, *datasets]) == 2  # which dataset are they of?


def test_competition_mode_false_deletes_the_results_file(split, tmp_path, fake_predictor):
    assert evaluate(split, tmp_path / "kept") == 0
    assert json.loads((tmp_path / "kept" / "results_tiny.json").read_text())
    assert evaluate(split, tmp_path / "cleaned", "TEST.COMPETITION_MODE", "False") == 0
    assert not (tmp_path / "cleaned" / "results_tiny.json").exists()
    assert (tmp_path / "cleaned" / "metrics_tiny.json").is_file()


def test_vis_writes_detectron_pictures(split, tmp_path, fake_predictor):
    assert evaluate(split, tmp_path / "off") == 0
    assert not (tmp_path / "off" / "vis").exists()
    assert evaluate(split, tmp_path / "on", "VIS", "True", "VIS_TH", "0.9") == 0
    # test_net's <index>_<image name>.pdf, only for images with a detection scoring >= VIS_TH (the first)
    pictures = sorted(path.name for path in (tmp_path / "on" / "vis").iterdir())
    assert pictures == ["0_tiny_000000.pdf"]
    assert (tmp_path / "on" / "vis" / pictures[0]).read_bytes().startswith(b"%PDF")
    assert evaluate(split, tmp_path / "low", "VIS", "True", "VIS_TH", "0.4") == 0
    assert len(list((tmp_path / "low" / "vis").iterdir())) == 3


# ---- training keys implemented with the table ---------------------------------------------------------------

def test_copy_weights_copies_the_initial_weights_file(tmp_path):
    from tfdet.engine.checkpoint import FINAL_WEIGHTS
    from tfdet.engine.weights import copy_initial_weights

    weights = tmp_path / "init" / "R-50.pkl"
    weights.parent.mkdir()
    weights.write_bytes(b"weights")
    out = tmp_path / "out"
    assert copy_initial_weights(tiny("TRAIN.WEIGHTS", str(weights)), out) is None  # COPY_WEIGHTS False
    assert copy_initial_weights(tiny("TRAIN.WEIGHTS", str(weights), "TRAIN.COPY_WEIGHTS", "True"), out) == str(
        out / "R-50.pkl"
    )
    assert (out / "R-50.pkl").read_bytes() == b"weights"
    no_resume = tiny("TRAIN.WEIGHTS", str(weights), "TRAIN.COPY_WEIGHTS", "True", "TRAIN.AUTO_RESUME", "False")
    assert copy_initial_weights(no_resume, tmp_path / "other") is None  # Detectron copies only when auto-resuming
    (out / FINAL_WEIGHTS).write_bytes(b"")
    assert copy_initial_weights(tiny("TRAIN.WEIGHTS", str(weights), "TRAIN.COPY_WEIGHTS", "True"), out) is None
    with pytest.raises(FileNotFoundError, match="TRAIN.COPY_WEIGHTS"):
        copy_initial_weights(tiny("TRAIN.COPY_WEIGHTS", "True"), tmp_path / "none")


def test_lr_changes_are_logged_above_the_threshold():
    from tfdet.engine.lr_schedule import lr_at_iter
    from tfdet.engine.metrics_log import LearningRateLog

    cfg = tiny("SOLVER.WARM_UP_ITERS", "100", "SOLVER.STEPS", "[0, 150, 200]", "SOLVER.MAX_ITER", "250")
    log = LearningRateLog(cfg.SOLVER.LOG_LR_CHANGE_THRESHOLD)
    lines = {i: log.update(i, lr_at_iter(cfg, i)) for i in range(250)}
    logged = {i: line for i, line in lines.items() if line}
    assert logged == {  # the warm-up's small steps stay below the 1.1 ratio
        0: "Changing learning rate 0.000000 -> 0.006667 at iter 0",
        150: "Changing learning rate 0.020000 -> 0.002000 at iter 150",
        200: "Changing learning rate 0.002000 -> 0.000200 at iter 200",
    }
    quiet = LearningRateLog(20.0)
    assert [i for i in range(250) if quiet.update(i, lr_at_iter(cfg, i))] == [0]


# ---- config keys reach the ops compared with Detectron elsewhere --------------------------------------------

TRAINING_KEYS = {  # key: (value, layer, attribute)
    "TRAIN.BATCH_SIZE_PER_IM": (32, "sampled_roi_targets", "batch_size_per_im"),
    "TRAIN.FG_FRACTION": (0.3, "sampled_roi_targets", "fg_fraction"),
    "TRAIN.FG_THRESH": (0.6, "sampled_roi_targets", "fg_thresh"),
    "TRAIN.BG_THRESH_HI": (0.45, "sampled_roi_targets", "bg_thresh_hi"),
    "TRAIN.BG_THRESH_LO": (0.05, "sampled_roi_targets", "bg_thresh_lo"),
    "TRAIN.BBOX_THRESH": (0.55, "sampled_roi_targets", "bbox_thresh"),
    "KRCNN.HEATMAP_SIZE": (28, "sampled_roi_targets", "heatmap_size"),
    "TRAIN.RPN_POSITIVE_OVERLAP": (0.65, "rpn_losses", "positive_overlap"),
    "TRAIN.RPN_NEGATIVE_OVERLAP": (0.25, "rpn_losses", "negative_overlap"),
    "TRAIN.RPN_FG_FRACTION": (0.4, "rpn_losses", "fg_fraction"),
    "TRAIN.RPN_BATCH_SIZE_PER_IM": (48, "rpn_losses", "batch_size_per_im"),
    "TRAIN.RPN_STRADDLE_THRESH": (5, "rpn_losses", "straddle_thresh"),
    "TRAIN.RPN_NMS_THRESH": (0.65, "rpn_rois", "nms_threshold"),
    "TRAIN.RPN_PRE_NMS_TOP_N": (150, "rpn_rois", "pre_nms_top_n"),
    "TRAIN.RPN_POST_NMS_TOP_N": (120, "rpn_rois", "post_nms_top_n"),
    "TRAIN.RPN_MIN_SIZE": (2, "rpn_rois", "min_size"),
    "MRCNN.RESOLUTION": (28, "mask_loss", "resolution"),
    "MRCNN.WEIGHT_LOSS_MASK": (0.5, "mask_loss", "loss_weight"),
    "KRCNN.LOSS_WEIGHT": (2.0, "keypoint_loss", "loss_weight"),
    "KRCNN.NORMALIZE_BY_VISIBLE_KEYPOINTS": (False, "keypoint_loss", "normalize_by_visible"),
}
DOMAIN_KEYS = {
    "MODEL.DA_HEADS.DA_IMG_GRL_WEIGHT": (0.2, "da_img_grl", "weight"),
    "MODEL.DA_HEADS.DA_INS_GRL_WEIGHT": (0.3, "da_ins_grl", "weight"),
    "MODEL.DA_HEADS.DA_IMG_LOSS_WEIGHT": (0.5, "da_image_loss", "loss_weight"),
    "MODEL.DA_HEADS.DA_INS_LOSS_WEIGHT": (0.6, "da_instance_loss", "loss_weight"),
    "MODEL.DA_HEADS.DA_CST_LOSS_WEIGHT": (0.7, "da_consistency_loss", "loss_weight"),
}
INFERENCE_KEYS = {
    "TEST.NMS": (0.4, "detections", "nms_threshold"),
    "TEST.SCORE_THRESH": (0.1, "detections", "score_threshold"),
    "TEST.DETECTIONS_PER_IM": (15, "detections", "detections_per_image"),
    "TEST.BBOX_REG": (False, "detections", "apply_regression"),
    "MODEL.BBOX_REG_WEIGHTS": ((5.0, 5.0, 2.0, 2.0), "detections", "bbox_reg_weights"),
    "KRCNN.INFERENCE_MIN_SIZE": (8, "roi_keypoints", "min_size"),
    "FPN.ROI_CANONICAL_SCALE": (200, "roi_feat", "canonical_scale"),
    "FPN.ROI_CANONICAL_LEVEL": (3, "roi_feat", "canonical_level"),
    "TFDET.ROI_ALIGN_ALIGNED": (True, "roi_feat", "aligned"),
    "MRCNN.ROI_XFORM_RESOLUTION": (6, "mask_roi_feat", "resolution"),
    "MRCNN.ROI_XFORM_SAMPLING_RATIO": (1, "mask_roi_feat", "sampling_ratio"),
    "KRCNN.ROI_XFORM_RESOLUTION": (6, "keypoint_roi_feat", "resolution"),
    "KRCNN.ROI_XFORM_SAMPLING_RATIO": (1, "keypoint_roi_feat", "sampling_ratio"),
}


def overrides_of(keys):
    return [item for key, (value, _, _) in keys.items() for item in (key, repr(value))]


def check_layers(model, cfg_keys):
    for key, (value, layer, attribute) in cfg_keys.items():
        assert getattr(model.get_layer(layer), attribute) == value, key
        assert value != DEFAULT_VALUES[key], key


def test_training_keys_reach_the_training_graph():
    from tfdet.modeling import build_model

    check_layers(build_model(tiny(*overrides_of(TRAINING_KEYS)), training=True), TRAINING_KEYS)
    da_cfg = load_config(TINY_DA, overrides_of(DOMAIN_KEYS))
    check_layers(build_model(da_cfg, training=True), DOMAIN_KEYS)


def test_inference_keys_reach_the_inference_model():
    from types import SimpleNamespace

    from tfdet.inference import Predictor
    from tfdet.modeling import build_model

    overrides = overrides_of(INFERENCE_KEYS) + ["FPN.ROI_MIN_LEVEL", "3", "FPN.ROI_MAX_LEVEL", "4"]
    model = build_model(tiny(*overrides))
    check_layers(model, INFERENCE_KEYS)
    assert model.get_layer("roi_feat").levels == (3, 4)  # FPN.ROI_MIN_LEVEL .. ROI_MAX_LEVEL
    # TEST.SCALE, TEST.MAX_SIZE, PIXEL_MEANS, FPN.COARSEST_STRIDE prepare Predictor's inputs
    cfg = tiny("TEST.SCALE", "100", "TEST.MAX_SIZE", "120", "PIXEL_MEANS", "[[[100.0, 110.0, 120.0]]]",
               "FPN.COARSEST_STRIDE", "64")  # fmt: skip
    image = np.full((50, 80, 3), 200, np.uint8)
    inputs = Predictor.model_inputs(SimpleNamespace(cfg=cfg), [image])
    np.testing.assert_array_equal(inputs["image_info"], [[50, 80, 1.5]])  # 100 / 50 = 2 would make 160 > 120
    assert inputs["images"].shape == (1, 128, 128, 3)  # 75 x 120 padded to 64
    np.testing.assert_allclose(inputs["images"][0, 0, 0], [100, 90, 80])


def test_initialisation_keys_reach_the_layers():
    from tfdet.modeling import build_model

    cfg = tiny("FPN.ZERO_INIT_LATERAL", "True", "GROUP_NORM.EPSILON", "0.001", "MRCNN.CONV_INIT", "GaussianFill",
               "KRCNN.CONV_INIT", "GaussianFill", "KRCNN.CONV_HEAD_KERNEL", "5")  # fmt: skip
    model = build_model(cfg)
    assert not model.get_layer("fpn_inner_res4_5_sum_lateral").kernel.numpy().any()
    assert model.get_layer("conv1_gn").epsilon == 0.001
    assert model.get_layer("mask_fcn1").kernel_initializer.get_config()["stddev"] == 0.001
    assert model.get_layer("conv_fcn1").kernel_initializer.get_config()["stddev"] == 0.01
    assert model.get_layer("conv_fcn1").kernel.shape[:2] == (5, 5)
    msra = build_model(tiny())  # the tiny config's MSRAFill, no zero laterals
    assert msra.get_layer("fpn_inner_res4_5_sum_lateral").kernel.numpy().any()
    assert msra.get_layer("mask_fcn1").kernel_initializer.get_config()["mode"] == "fan_out"
