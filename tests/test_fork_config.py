"""The DA fork's YAML files (krumo/Domain-Adaptive-Faster-RCNN-PyTorch, configs/da_faster_rcnn/, copied in
support/fork_configs.py) load through `load_config` as our Detectron config, with a report line for each of
their keys; what they cannot honour is refused one line per key; the LR schedule and the SGD update of a
translated config equal the fork's (`solver/lr_scheduler.py`, `engine/trainer.py` and torch's SGD, restated in
NumPy); and `python -m tfdet.train --cfg <fork yaml>` trains on datasets made by `python -m tfdet.data.convert`."""

import bisect
import json

import numpy as np
import pytest

from support.dataset_sources import KITTI_LABELS, run as convert, voc_xml, write_gtfine, write_kitti, write_sim10k
from support.fork_configs import FORK_YAMLS, quiet_load, write_yaml
from support.paths import REPO_ROOT
from tfdet.config import load_config
from tfdet.config.errors import ConfigError
from tfdet.config.maskrcnn_benchmark.defaults import FORK_DEFAULTS
from tfdet.config.maskrcnn_benchmark.rules import IGNORED, MAPPED, REFUSED, RULES
from tfdet.config.maskrcnn_benchmark.translation import translate
from tfdet.engine.lr_schedule import lr_at_iter

FILE_KEYS = 25  # keys each of the four files sets

# Our keys as the fork's defaults.py and code give them for these files (R-50-C4, its res5 box head).
EXPECTED = {
    "MODEL.TYPE": "generalized_rcnn", "MODEL.CONV_BODY": "ResNet.add_ResNet50_conv4_body", "FPN.FPN_ON": False,
    "FAST_RCNN.ROI_BOX_HEAD": "ResNet.add_ResNet_roi_conv5_head", "FAST_RCNN.ROI_XFORM_METHOD": "RoIAlign",
    "FAST_RCNN.ROI_XFORM_RESOLUTION": 14, "FAST_RCNN.ROI_XFORM_SAMPLING_RATIO": 0, "MODEL.FASTER_RCNN": True,
    "MODEL.DOMAIN_ADAPTATION_ON": True, "MODEL.DA_HEADS.DA_IMG_GRL_WEIGHT": 0.1,
    "MODEL.DA_HEADS.DA_INS_GRL_WEIGHT": 0.1, "MODEL.DA_HEADS.DA_IMG_LOSS_WEIGHT": 1.0,
    "MODEL.DA_HEADS.DA_INS_LOSS_WEIGHT": 1.0, "MODEL.DA_HEADS.DA_CST_LOSS_WEIGHT": 0.1,
    "MODEL.BBOX_REG_WEIGHTS": (10.0, 10.0, 5.0, 5.0), "MODEL.CLS_AGNOSTIC_BBOX_REG": False, "RPN.SIZES": (32, 64, 128, 256, 512), "RPN.STRIDE": 16,
    "RPN.ASPECT_RATIOS": (0.5, 1.0, 2.0), "TRAIN.RPN_PRE_NMS_TOP_N": 12000, "TRAIN.RPN_POST_NMS_TOP_N": 2000,
    "TEST.RPN_PRE_NMS_TOP_N": 6000, "TEST.RPN_POST_NMS_TOP_N": 1000, "TRAIN.RPN_NMS_THRESH": 0.7,
    "TEST.RPN_NMS_THRESH": 0.7, "TRAIN.RPN_MIN_SIZE": 0, "TEST.RPN_MIN_SIZE": 0, "TRAIN.RPN_STRADDLE_THRESH": 0,
    "TRAIN.RPN_POSITIVE_OVERLAP": 0.7, "TRAIN.RPN_NEGATIVE_OVERLAP": 0.3, "TRAIN.RPN_BATCH_SIZE_PER_IM": 256,
    "TRAIN.RPN_FG_FRACTION": 0.5, "TRAIN.FG_THRESH": 0.5, "TRAIN.BG_THRESH_HI": 0.5, "TRAIN.BG_THRESH_LO": 0.0,
    "TRAIN.BATCH_SIZE_PER_IM": 256, "TRAIN.FG_FRACTION": 0.25, "TEST.SCORE_THRESH": 0.05, "TEST.NMS": 0.3,
    "TEST.DETECTIONS_PER_IM": 100, "TRAIN.SCALES": (600,), "TRAIN.MAX_SIZE": 1200, "TEST.SCALE": 600,
    "TEST.MAX_SIZE": 1200, "TRAIN.USE_FLIPPED": True, "TRAIN.ASPECT_GROUPING": True,
    "PIXEL_MEANS": (((102.9801, 115.9465, 122.7717),),), "RESNETS.NUM_GROUPS": 1, "RESNETS.WIDTH_PER_GROUP": 64,
    "RESNETS.STRIDE_1X1": True, "RESNETS.TRANS_FUNC": "bottleneck_transformation", "RESNETS.STEM_FUNC": "basic_bn_stem",
    "RESNETS.SHORTCUT_FUNC": "basic_bn_shortcut", "TRAIN.FREEZE_AT": 2,
    "TRAIN.WEIGHTS": "https://dl.fbaipublicfiles.com/detectron/ImageNetPretrained/MSRA/R-50.pkl",
    "SOLVER.BASE_LR": 0.001, "SOLVER.BIAS_LR_FACTOR": 2.0, "SOLVER.WEIGHT_DECAY": 0.0005,
    "SOLVER.WEIGHT_DECAY_BIAS": 0.0,
    "SOLVER.MOMENTUM": 0.9, "SOLVER.SCALE_MOMENTUM": True, "SOLVER.SCALE_MOMENTUM_THRESHOLD": 1.0,
    "SOLVER.LR_POLICY": "steps_with_decay", "SOLVER.STEPS": [0, 50000], "SOLVER.GAMMA": 0.1, "SOLVER.MAX_ITER": 70000,
    "SOLVER.WARM_UP_ITERS": 500, "SOLVER.WARM_UP_FACTOR": 1.0 / 3, "SOLVER.WARM_UP_METHOD": "linear",
    "TRAIN.IMS_PER_BATCH": 2, "TRAIN.SNAPSHOT_ITERS": 2500, "OUTPUT_DIR": ".",
}  # fmt: skip


def value(cfg, key):
    node = cfg
    for part in key.split("."):
        node = node[part]
    return node


@pytest.mark.parametrize("name", FORK_YAMLS)
def test_the_forks_yamls_translate_key_by_key(tmp_path, name):
    path = write_yaml(tmp_path, name)
    cfg, report = quiet_load(path)
    source, target, test = (value(cfg, key)[0] for key in ("TRAIN.DATASETS", "TRAIN.TARGET_DATASETS", "TEST.DATASETS"))
    assert f'SOURCE_TRAIN: ("{source}",)' in FORK_YAMLS[name] and f'TARGET_TRAIN: ("{target}",)' in FORK_YAMLS[name]
    assert f'TEST: ("{test}",)' in FORK_YAMLS[name] and cfg.TEST.FORCE_JSON_DATASET_EVAL  # the fork's COCO evaluation
    assert cfg.MODEL.NUM_CLASSES == (9 if "foggy" in name else 2)
    for key, expected in EXPECTED.items():
        assert value(cfg, key) == expected, key
    lines = report.splitlines()
    assert lines[0].startswith(f"{path}: a maskrcnn-benchmark")
    assert lines[-1].startswith(f"  and {len(FORK_DEFAULTS) - FILE_KEYS} keys at the fork's defaults")
    keys = [line.split(" = ")[0].strip() for line in lines[1:-1]]
    assert len(keys) == len(set(keys)) == FILE_KEYS  # one line per key of the file
    assert "  DATALOADER.SIZE_DIVISIBILITY = 32 -> TFDET.SIZE_DIVISIBILITY 32 (inputs padded to its multiples" in report
    assert cfg.TFDET.SIZE_DIVISIBILITY == 32
    assert "  DATASETS.TRAIN = " in report and "ignored: read only with MODEL.DOMAIN_ADAPTATION_ON False" in report
    assert "SOLVER.IMS_PER_BATCH = 2 -> TRAIN.IMS_PER_BATCH 2 (the fork's is the global batch" in report


def test_unknown_and_untranslatable_keys_are_refused_one_line_each(tmp_path):
    text = FORK_YAMLS["e2e_da_faster_rcnn_R_50_C4_sim10k.yaml"]
    text = text.replace("  BASE_LR: 0.001", "  BASE_LRR: 0.001").replace("  IMS_PER_BATCH: 1", "  IMS_PER_BATCH: 4")
    text += "TRAIN:\n  SCALES: (800,)\n"
    path = write_yaml(tmp_path, "broken.yaml", text)
    with pytest.raises(ConfigError) as error:
        load_config(path, ["MODEL.RPN.MIN_SIZE", "2", "MODEL.BACKBONE.CONV_BODY", "R-50-C5"])
    lines = str(error.value).splitlines()[1:]
    assert lines[0].startswith("SOLVER.BASE_LRR = 0.001: not a key of the fork's config; did you mean 'SOLVER.BASE_LR'")
    assert lines[1].startswith("TRAIN.SCALES = '(800,)': not a key of the fork's config")
    assert "it is a Detectron key" in lines[1]
    assert any(line.startswith("TEST.IMS_PER_BATCH = 4: the fork pads each test batch") for line in lines)
    assert any(line.startswith("MODEL.RPN.MIN_SIZE = 2: the fork's minimum is in network-input") for line in lines)
    assert any(line.startswith("MODEL.BACKBONE.CONV_BODY = 'R-50-C5': no translation") for line in lines)
    assert len(lines) == 5, lines


def test_a_value_of_the_wrong_type_is_refused_showing_it():
    translation = translate({"MODEL": {"DOMAIN_ADAPTATION_ON": "yes"}, "SOLVER": {"MAX_ITER": 1.5}})
    assert translation.refusals()[:2] == ["MODEL.DOMAIN_ADAPTATION_ON = 'yes': expects True or False, got 'yes'",
                                          "SOLVER.MAX_ITER = 1.5: expects an int, got 1.5"]  # fmt: skip


def test_detectron_yamls_are_not_translated():
    cfg, report = quiet_load(REPO_ROOT / "configs" / "shapes_tiny_da_faster.yaml")
    assert report == "" and cfg.TRAIN.TARGET_DATASETS == ("shapes_target_train",)


def test_every_fork_key_has_one_rule_and_the_defaults_translate():
    assert set(RULES) == {key for key, _ in FORK_DEFAULTS}
    translation = translate({})  # the fork's defaults alone: R-50-C4, not domain-adaptive
    assert translation.refusals() == ["TEST.IMS_PER_BATCH = 8: the fork pads each test batch to its largest image; "
                                      "tfdet evaluates one image at a time: set it to 1"]  # fmt: skip
    assert {outcome.status for outcome in translation.outcomes.values()} == {MAPPED, IGNORED, REFUSED}
    translation.settings()  # no two keys set one Detectron key differently


# The fork's DA heads on an FPN body (its README's variant), with maskrcnn-benchmark's R-50-FPN keys.
FPN_YAML = """MODEL:
  META_ARCHITECTURE: "GeneralizedRCNN"
  DOMAIN_ADAPTATION_ON: True
  BACKBONE:
    CONV_BODY: "R-50-FPN"
    OUT_CHANNELS: 256
  RPN:
    USE_FPN: True
    ANCHOR_STRIDE: (4, 8, 16, 32, 64)
    PRE_NMS_TOP_N_TRAIN: 2000
    PRE_NMS_TOP_N_TEST: 1000
    POST_NMS_TOP_N_TEST: 1000
    FPN_POST_NMS_TOP_N_TEST: 1000
  ROI_HEADS:
    USE_FPN: True
  ROI_BOX_HEAD:
    NUM_CLASSES: 2
    POOLER_RESOLUTION: 7
    POOLER_SCALES: (0.25, 0.125, 0.0625, 0.03125)
    POOLER_SAMPLING_RATIO: 2
    FEATURE_EXTRACTOR: "FPN2MLPFeatureExtractor"
    PREDICTOR: "FPNPredictor"
DATALOADER:
  SIZE_DIVISIBILITY: 32
TEST:
  IMS_PER_BATCH: 1
"""


def test_fpn_body_translates_to_detectrons_fpn(tmp_path):
    path = write_yaml(tmp_path, "fpn.yaml", FPN_YAML)
    cfg, _ = quiet_load(path)
    expected = {
        "MODEL.CONV_BODY": "FPN.add_fpn_ResNet50_conv5_body",
        "FAST_RCNN.ROI_BOX_HEAD": "fast_rcnn_heads.add_roi_2mlp_head",
        "FPN.FPN_ON": True, "FPN.MULTILEVEL_RPN": True, "FPN.MULTILEVEL_ROIS": True, "FPN.RPN_MIN_LEVEL": 2,
        "FPN.RPN_MAX_LEVEL": 6, "FPN.ROI_MIN_LEVEL": 2, "FPN.ROI_MAX_LEVEL": 5, "FPN.RPN_ANCHOR_START_SIZE": 32,
        "FPN.RPN_ASPECT_RATIOS": (0.5, 1.0, 2.0), "FPN.DIM": 256, "FPN.COARSEST_STRIDE": 32, "FPN.USE_GN": False,
        "FAST_RCNN.ROI_XFORM_RESOLUTION": 7, "FAST_RCNN.ROI_XFORM_SAMPLING_RATIO": 2, "FAST_RCNN.MLP_HEAD_DIM": 1024,
        "TRAIN.RPN_PRE_NMS_TOP_N": 2000, "TRAIN.RPN_POST_NMS_TOP_N": 2000, "TEST.RPN_PRE_NMS_TOP_N": 1000,
        "TEST.RPN_POST_NMS_TOP_N": 1000, "RPN.SIZES": (64, 128, 256, 512),  # RPN.SIZES: Detectron's default, unused
    }  # fmt: skip
    for key, expected_value in expected.items():
        assert value(cfg, key) == expected_value, key
    # Detectron keeps one top-N per level and over the levels: the fork's default 2000 over the levels is refused.
    with pytest.raises(ConfigError, match=r"MODEL.RPN.FPN_POST_NMS_TOP_N_TEST = 2000: Detectron keeps"):
        load_config(path, ["MODEL.RPN.FPN_POST_NMS_TOP_N_TEST", "2000"])
    with pytest.raises(ConfigError, match=r"DATALOADER.SIZE_DIVISIBILITY = 0: Detectron pads FPN inputs"):
        load_config(path, ["DATALOADER.SIZE_DIVISIBILITY", "0"])


# ---- the LR schedule and the update, against the fork's code restated in NumPy --------------------------


def fork_lr(base_lr, it, milestones, gamma, warmup_factor, warmup_iters, warmup_method):
    """WarmupMultiStepLR.get_lr at last_epoch `it` (solver/lr_scheduler.py)."""
    factor, alpha = 1.0, it / warmup_iters
    if it < warmup_iters:
        factor = warmup_factor if warmup_method == "constant" else warmup_factor * (1 - alpha) + alpha
    return base_lr * factor * gamma ** bisect.bisect_right(milestones, it)


def fork_lrs(num_iters, domain_adaptation, **schedule):
    """The LR of each update: do_da_train calls scheduler.step() after optimizer.step() (last_epoch = iteration),
    do_train before it (last_epoch = iteration + 1; the constructor's step made it 0)."""
    shift = 0 if domain_adaptation else 1
    return np.array([fork_lr(it=it + shift, **schedule) for it in range(num_iters)])


SCHEDULE_OVERRIDES = [
    "SOLVER.WARMUP_ITERS", "5", "SOLVER.STEPS", "(8, 12)", "SOLVER.MAX_ITER", "16", "SOLVER.GAMMA", "0.5"
]  # fmt: skip


@pytest.mark.parametrize("domain_adaptation", [True, False], ids=["do_da_train", "do_train"])
@pytest.mark.parametrize("method", ["linear", "constant"])
def test_lr_schedule_is_the_forks(tmp_path, domain_adaptation, method):
    path = write_yaml(tmp_path, "e2e_da_faster_rcnn_R_50_C4_sim10k.yaml")
    overrides = [*SCHEDULE_OVERRIDES, "SOLVER.WARMUP_METHOD", method,
                 "MODEL.DOMAIN_ADAPTATION_ON", str(domain_adaptation)]  # fmt: skip
    cfg, _ = quiet_load(path, overrides)
    ours = np.array([lr_at_iter(cfg, it) for it in range(16)], np.float64)
    fork = fork_lrs(16, domain_adaptation, base_lr=0.001, milestones=[8, 12], gamma=0.5, warmup_factor=1 / 3,
                    warmup_iters=5, warmup_method=method)  # fmt: skip
    np.testing.assert_allclose(ours, fork, rtol=1e-6)
    assert len(set(np.round(fork, 12))) >= 4  # warm-up and both milestones really change the LR


def torch_sgd(params, grads, lrs, momentum, weight_decays, lr_factors):
    """torch.optim.SGD (dampening 0, no Nesterov) over param groups: d = g + wd p; v = mu v + d (v = d at first);
    p -= lr v, the group's lr being the scheduler's LR times its factor (maskrcnn-benchmark's make_optimizer)."""
    params, buffers = [p.astype(np.float64) for p in params], [None] * len(params)
    for step, lr in enumerate(lrs):
        for index, (param, decay, factor) in enumerate(zip(params, weight_decays, lr_factors)):
            d = grads[step][index] + decay * param
            buffers[index] = d if buffers[index] is None else momentum * buffers[index] + d
            params[index] = param - lr * factor * buffers[index]
    return params


def detectron_sgd_run(cfg, start, grads):
    """The variables after our Detectron SGD (with cfg's schedule and momentum correction) applies `grads`."""
    import keras

    from tfdet.engine.lr_schedule import DetectronLRSchedule
    from tfdet.engine.optimizer import ROLE_BIAS, ROLE_WEIGHT, DetectronSGD, update_rules

    variables = [keras.Variable(start[0], name="weight"), keras.Variable(start[1], name="bias")]
    roles = {variables[0].path: ROLE_WEIGHT, variables[1].path: ROLE_BIAS}
    optimizer = DetectronSGD(DetectronLRSchedule.from_cfg(cfg), update_rules(cfg, roles), cfg.SOLVER.MOMENTUM,
                             cfg.SOLVER.SCALE_MOMENTUM, cfg.SOLVER.SCALE_MOMENTUM_THRESHOLD)  # fmt: skip
    for step_grads in grads:
        optimizer.apply(step_grads, variables)
    return [variable.numpy() for variable in variables]


@pytest.mark.parametrize("domain_adaptation", [True, False], ids=["do_da_train", "do_train"])
def test_sgd_updates_are_the_forks(tmp_path, domain_adaptation, rng):
    """A weight and a bias through a slow warm-up (LR changes of 3 % per step) and an LR step: our SGD with the
    translated config vs torch's SGD; with Detectron's own threshold (10 %) they part."""
    path = write_yaml(tmp_path, "e2e_da_faster_rcnn_R_50_C4_sim10k.yaml")
    schedule = ["SOLVER.WARMUP_ITERS", "20", "SOLVER.STEPS", "(22,)", "SOLVER.MAX_ITER", "24", "SOLVER.GAMMA", "0.5"]
    overrides = [*schedule, "MODEL.DOMAIN_ADAPTATION_ON", str(domain_adaptation)]
    start = [rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=(2,)).astype(np.float32)]
    grads = [[rng.normal(size=p.shape).astype(np.float32) for p in start] for _ in range(24)]
    lrs = fork_lrs(24, domain_adaptation, base_lr=0.001, milestones=[22], gamma=0.5, warmup_factor=1 / 3,
                   warmup_iters=20, warmup_method="linear")  # fmt: skip
    expected = torch_sgd(start, grads, lrs, 0.9, weight_decays=(0.0005, 0.0), lr_factors=(1.0, 2.0))
    ours = detectron_sgd_run(quiet_load(path, overrides)[0], start, grads)
    for actual, reference in zip(ours, expected):
        np.testing.assert_allclose(actual, reference, rtol=2e-5, atol=1e-7)
    detectron_threshold = quiet_load(path, [*overrides, "SOLVER.SCALE_MOMENTUM_THRESHOLD", "1.1"])[0]
    threshold = detectron_sgd_run(detectron_threshold, start, grads)
    assert not np.allclose(threshold[0], expected[0], rtol=1e-4, atol=0)


# ---- training on converted datasets ---------------------------------------------------------------------

# A small R-50-C4 for one CPU step: 8-channel bottlenecks, 64-pixel images, few RoIs; from scratch.
TINY = [
    "SOLVER.MAX_ITER", "1", "MODEL.WEIGHT", "", "INPUT.MIN_SIZE_TRAIN", "(48,)",
    "INPUT.MAX_SIZE_TRAIN", "64", "MODEL.RESNETS.WIDTH_PER_GROUP", "8", "MODEL.RPN.PRE_NMS_TOP_N_TRAIN", "100",
    "MODEL.RPN.POST_NMS_TOP_N_TRAIN", "50", "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", "16",
    "MODEL.RPN.BATCH_SIZE_PER_IMAGE", "32", "TFDET.ALLOW_AFFINE_FROM_SCRATCH", "True",
]  # fmt: skip


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    """Every dataset the four files name, converted from small hand-made inputs."""
    sources, root = tmp_path_factory.mktemp("sources"), tmp_path_factory.mktemp("datasets")
    write_gtfine(sources / "cityscapes")
    gtfine = sources / "cityscapes" / "gtFine"
    write_kitti(sources / "kitti", KITTI_LABELS)
    write_sim10k(sources / "sim10k", voc_xml([("car", 0, (2, 2, 7, 7))]))
    for command in (
        ["cityscapes", "--gtfine", gtfine, "--images", sources / "cityscapes" / "leftImg8bit"],
        ["foggy-cityscapes", "--gtfine", gtfine, "--images", sources / "cityscapes" / "leftImg8bit_foggy"],
        ["kitti", "--kitti", sources / "kitti"],
        ["sim10k", "--sim10k", sources / "sim10k"],
    ):
        assert convert(*command, "--data-root", root)[0] == 0, command
    return root


@pytest.mark.parametrize("name", FORK_YAMLS)
def test_every_dataset_named_resolves_and_the_run_is_accepted(tmp_path, data_root, monkeypatch, name):
    from tfdet.data.catalog import get_dataset
    from tfdet.train import check_uses

    monkeypatch.setenv("TFDET_DATA_DIR", str(data_root))
    cfg, _ = quiet_load(write_yaml(tmp_path, name), ["MODEL.WEIGHT", "R-50.pkl"])
    check_uses(cfg, test=True)  # training, inference and the COCO evaluation of TEST.DATASETS
    for dataset in (*cfg.TRAIN.DATASETS, *cfg.TRAIN.TARGET_DATASETS, *cfg.TEST.DATASETS):
        spec = get_dataset(dataset)
        images = json.loads(spec.annotation_file.read_text())["images"]
        assert images and all((spec.image_dir / image["file_name"]).is_file() for image in images)


def test_train_cli_trains_a_fork_yaml_on_converted_datasets(tmp_path, data_root, monkeypatch, capsys):
    from tfdet.train import main

    monkeypatch.setenv("TFDET_DATA_DIR", str(data_root))
    path = write_yaml(tmp_path, "e2e_da_faster_rcnn_R_50_C4_cityscapes_to_foggy_cityscapes.yaml")
    assert main(["--cfg", str(path), "--skip-test", *TINY, "OUTPUT_DIR", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr()
    assert "a maskrcnn-benchmark (DA fork) config, translated" in printed.err
    stats = json.loads(next(line for line in printed.out.splitlines() if line.startswith("json_stats: "))[12:])
    assert {"loss_da_image", "loss_da_instance", "loss_da_consistency", "loss_rpn_cls", "loss_cls"} <= set(stats)
    assert (tmp_path / "out" / "model_final.weights.h5").is_file()
    saved = load_config(tmp_path / "out" / "config.yaml")  # the translated config, as Detectron keys
    assert saved.TRAIN.TARGET_DATASETS == ("foggy_cityscapes_fine_instanceonly_seg_train_cocostyle",)
    assert saved.MODEL.CONV_BODY == "ResNet.add_ResNet50_conv4_body" and saved.RESNETS.WIDTH_PER_GROUP == 8
