"""tfdet.config: Detectron defaults, YAML loading, overrides, strict checks, frozen configs; the Registry."""

import math
import pickle
import subprocess
import sys
import warnings

import pytest

from support.paths import REPO_ROOT, shared_path
from tfdet.config import (
    Config,
    ConfigError,
    ConfigWarning,
    FrozenConfigError,
    get_default_config,
    load_config,
)
from tfdet.config.defaults import DEFAULTS, KEY_DOCS
from tfdet.config.function_names import FUNCTION_NAMES
from tfdet.config.schema import SEQUENCE_RULES
from tfdet.modeling.registry import Registry, UnknownNameError

ZOO_DIR = shared_path("detectron", "configs")
ZOO_CONFIGS = sorted(ZOO_DIR.rglob("*.yaml"))


def zoo(name: str):
    """Path of one of Detectron's 12_2017_baselines configs."""
    return ZOO_DIR / "12_2017_baselines" / name


def load_quietly(path=None, overrides=None) -> Config:
    """load_config with ConfigWarnings silenced (for tests about something else)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return load_config(path, overrides)


# ---- Detectron's model zoo configs ----


def test_zoo_folder_has_configs():
    assert len(ZOO_CONFIGS) > 50


@pytest.mark.parametrize("path", ZOO_CONFIGS, ids=[str(p.relative_to(ZOO_DIR)) for p in ZOO_CONFIGS])
def test_every_zoo_config_loads_unchanged(path):
    cfg = load_quietly(path)
    assert cfg.frozen
    assert cfg.MODEL.NUM_CLASSES > 0


def test_zoo_values_match_the_yaml():
    cfg = load_config(zoo("e2e_mask_rcnn_R-50-C4_1x.yaml"))
    assert cfg.TRAIN.SCALES == (800,) and isinstance(cfg.TRAIN.SCALES, tuple)
    assert cfg.TEST.SCALE == 800 and isinstance(cfg.TEST.SCALE, int)
    assert cfg.MODEL.NUM_CLASSES == 81
    assert cfg.MODEL.CONV_BODY == "ResNet.add_ResNet50_conv4_body"
    assert cfg.MRCNN.ROI_MASK_HEAD == "mask_rcnn_heads.mask_rcnn_fcn_head_v0upshare"
    assert cfg.RPN.SIZES == (32, 64, 128, 256, 512)
    assert cfg.SOLVER.STEPS == [0, 120000, 160000] and isinstance(cfg.SOLVER.STEPS, list)
    assert cfg.TRAIN.DATASETS == ("coco_2014_train", "coco_2014_valminusminival")
    assert cfg.TRAIN.IMS_PER_BATCH == 1
    assert cfg.OUTPUT_DIR == "."
    assert cfg.FAST_RCNN.ROI_XFORM_RESOLUTION == 14  # Detectron's default, not in the file


def test_detectron_inferred_values_are_set():
    cfg = load_config(zoo("e2e_mask_rcnn_R-50-C4_1x.yaml"))  # FASTER_RCNN: True
    assert cfg.RPN.RPN_ON is True
    assert cfg.TEST.PRECOMPUTED_PROPOSALS is False
    fast = load_config(zoo("fast_rcnn_R-50-FPN_1x.yaml"))
    assert fast.RPN.RPN_ON is False and fast.TEST.PRECOMPUTED_PROPOSALS is True


def test_test_time_augmentation_sections_load():
    cfg = load_config(zoo("e2e_mask_rcnn_X-152-32x8d-FPN-IN5k_1.44x.yaml"))
    assert cfg.TEST.BBOX_AUG.SCALES == (400, 500, 600, 700, 900, 1000, 1100, 1200)
    assert cfg.TEST.BBOX_VOTE.VOTE_TH == 0.9
    assert cfg.TEST.MASK_AUG.HEUR == "SOFT_AVG"


# ---- defaults ----


def test_defaults_keep_detectron_types_and_values():
    cfg = get_default_config()
    assert not cfg.frozen
    assert cfg.BBOX_XFORM_CLIP == math.log(1000.0 / 16.0)
    assert cfg.PIXEL_MEANS == (((102.9801, 115.9465, 122.7717),),)
    assert cfg.MODEL.BBOX_REG_WEIGHTS == (10.0, 10.0, 5.0, 5.0)
    assert cfg.TRAIN.SCALES == (600,) and cfg.TRAIN.WEIGHTS == ""
    assert cfg.SOLVER.STEPS == [] and cfg.DEDUP_BOXES == 1 / 16.0
    assert cfg.RESNETS.TRANS_FUNC == "bottleneck_transformation"


def test_domain_adaptation_and_tfdet_defaults():
    cfg = get_default_config()
    assert cfg.MODEL.DOMAIN_ADAPTATION_ON is False
    assert cfg.MODEL.DA_HEADS.to_dict() == {
        "DA_IMG_GRL_WEIGHT": 0.1,
        "DA_INS_GRL_WEIGHT": 0.1,
        "DA_IMG_LOSS_WEIGHT": 1.0,
        "DA_INS_LOSS_WEIGHT": 1.0,
        "DA_CST_LOSS_WEIGHT": 0.1,
    }
    assert cfg.TRAIN.TARGET_DATASETS == ()
    assert cfg.TFDET.to_dict() == {
        "STRATEGY": "", "ROI_ALIGN_ALIGNED": False, "DEVICE_MAP": {}, "MIXED_PRECISION": "", "SIZE_DIVISIBILITY": 0,
        "DA_HEAD_INIT": "fork", "DA_IMG_FEATURES": (), "RECOMPUTE_BODY_STAGES": True,
        "ALLOW_AFFINE_FROM_SCRATCH": False,
    }  # fmt: skip


def test_load_config_without_arguments_gives_the_defaults():
    assert load_config() == get_default_config()


def test_every_key_is_documented():
    keys = list(get_default_config().leaf_keys())
    assert keys == list(KEY_DOCS) and len(DEFAULTS) == len(KEY_DOCS)
    assert all(doc.strip() for doc in KEY_DOCS.values())


def test_schema_tables_name_existing_keys():
    cfg = get_default_config()
    keys = set(cfg.leaf_keys())
    assert set(SEQUENCE_RULES) <= keys and set(FUNCTION_NAMES) <= keys
    sequence_keys = {key for key in keys if isinstance(_value(cfg, key), (list, tuple))}
    assert sequence_keys == set(SEQUENCE_RULES)


def _value(cfg: Config, full_key: str):
    """The value at a dotted key."""
    for part in full_key.split("."):
        cfg = cfg[part]
    return cfg


# ---- overrides ----


def test_list_overrides_are_parsed_as_literals():
    cfg = load_config(
        overrides=[
            "TRAIN.SCALES", "(640, 800)",
            "TEST.NMS", "0.4",
            "SOLVER.BASE_LR", "1e-3",
            "SOLVER.STEPS", "[0, 100, 200]",
            "MODEL.MASK_ON", "True",
            "MODEL.NUM_CLASSES", "3",
            "OUTPUT_DIR", "2018",
            "TRAIN.WEIGHTS", "/weights/model.pkl",
            "TRAIN.DATASETS", "('a', 'b')",
        ]
    )
    assert cfg.TRAIN.SCALES == (640, 800)
    assert cfg.TEST.NMS == 0.4 and cfg.SOLVER.BASE_LR == 0.001
    assert cfg.SOLVER.STEPS == [0, 100, 200]
    assert cfg.MODEL.MASK_ON is True and cfg.MODEL.NUM_CLASSES == 3
    assert cfg.OUTPUT_DIR == "2018"
    assert cfg.TRAIN.WEIGHTS == "/weights/model.pkl"
    assert cfg.TRAIN.DATASETS == ("a", "b")


def test_list_overrides_are_decoded_as_detectrons_merge_cfg_from_list():
    # _decode_cfg_value: literal_eval of the text, the text where that fails; a string literal unquoted
    for text, expected in [("''", ""), ('"a b"', "a b"), ("2018", "2018"), ("1.10", "1.10"), ("out/dir", "out/dir")]:
        assert load_config(overrides=["OUTPUT_DIR", text]).OUTPUT_DIR == expected
    assert load_config(overrides=["TFDET.MIXED_PRECISION", "''"]).TFDET.MIXED_PRECISION == ""
    # a Python literal first, YAML only for text that is none ("[(1, 2, 3)]" is no YAML tuple)
    overrides = ["PIXEL_MEANS", "[[(1.0, 2.0, 3.0)]]", "MODEL.MASK_ON", "true", "TEST.DATASETS", "[a, b]"]
    cfg = load_config(overrides=overrides)
    assert cfg.PIXEL_MEANS == (((1.0, 2.0, 3.0),),) and cfg.MODEL.MASK_ON is True and cfg.TEST.DATASETS == ("a", "b")


def test_dict_overrides_nested_and_dotted():
    cfg = load_config(
        zoo("e2e_mask_rcnn_R-50-FPN_1x.yaml"),
        {
            "TEST": {"SCALE": 600, "BBOX_AUG": {"ENABLED": True}},
            "MODEL.NUM_CLASSES": 9,
            "TRAIN.SCALES": "(500,)",
        },
    )
    assert cfg.TEST.SCALE == 600 and cfg.TEST.BBOX_AUG.ENABLED is True
    assert cfg.MODEL.NUM_CLASSES == 9 and cfg.TRAIN.SCALES == (500,)
    assert cfg.TEST.MAX_SIZE == 1333  # from the file


def test_overrides_win_over_the_file():
    cfg = load_config(zoo("e2e_mask_rcnn_R-50-FPN_1x.yaml"), ["TEST.NMS", "0.6"])
    assert cfg.TEST.NMS == 0.6


def test_odd_override_list_is_an_error():
    with pytest.raises(ConfigError, match="KEY VALUE pairs"):
        load_config(overrides=["TEST.NMS"])


def test_yaml_strings_are_decoded_like_detectron(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(
        "TRAIN:\n  SCALES: (700, 800)\n  DATASETS: ('x',)\n"
        "SOLVER:\n  BASE_LR: 1e-4\n"
        "OUTPUT_DIR: '(1,)'\n"
    )
    cfg = load_config(path)
    assert cfg.TRAIN.SCALES == (700, 800) and cfg.TRAIN.DATASETS == ("x",)
    assert cfg.SOLVER.BASE_LR == 1e-4
    assert cfg.OUTPUT_DIR == "(1,)"  # string keys keep the text


# ---- strict checks ----


def test_unknown_key_names_the_closest_key():
    with pytest.raises(ConfigError) as error:
        load_config(overrides=["MODEL.NUM_CLASS", "3"])
    assert str(error.value) == "Unknown config key 'MODEL.NUM_CLASS'; did you mean 'MODEL.NUM_CLASSES'?"


@pytest.mark.parametrize(
    "key, suggestion",
    [
        ("TRAIN.NMS", "TEST.NMS"),
        ("MODLE.TYPE", "MODEL.TYPE"),
        ("MODEL.ROI_BOX_HEAD", "FAST_RCNN.ROI_BOX_HEAD"),
        ("TFDET.ROI_ALIGN_ALIGN", "TFDET.ROI_ALIGN_ALIGNED"),
    ],
)
def test_unknown_key_suggestions(key, suggestion):
    with pytest.raises(ConfigError, match=f"Unknown config key '{key}'; did you mean '{suggestion}'"):
        load_config(overrides={key: 1})


def test_unknown_key_in_a_yaml_file(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("MODEL:\n  CONV_BDOY: ResNet.add_ResNet50_conv4_body\n")
    with pytest.raises(ConfigError, match="'MODEL.CONV_BDOY'; did you mean 'MODEL.CONV_BODY'"):
        load_config(path)


def test_key_below_a_value_is_an_error():
    with pytest.raises(ConfigError, match="'MODEL.NUM_CLASSES' is a value, not a section"):
        load_config(overrides={"MODEL.NUM_CLASSES.X": 1})


def test_value_for_a_section_is_an_error():
    with pytest.raises(ConfigError, match="'MODEL' is a section"):
        load_config(overrides=["MODEL", "3"])


@pytest.mark.parametrize(
    "key, value, expected, given",
    [
        ("MODEL.NUM_CLASSES", "eighty", "int", "str 'eighty'"),
        ("MODEL.NUM_CLASSES", True, "int", "bool True"),
        ("MODEL.NUM_CLASSES", 81.0, "int", "float 81.0"),
        ("TEST.NMS", False, "float", "bool False"),
        ("MODEL.MASK_ON", 1, "bool", "int 1"),
        ("OUTPUT_DIR", 7, "str", "int 7"),
        ("TRAIN.DATASETS", "coco_2014_train", "tuple", "str 'coco_2014_train'"),
    ],
)
def test_wrong_type_names_key_and_both_types(key, value, expected, given):
    with pytest.raises(ConfigError) as error:
        load_config(overrides={key: value})
    message = str(error.value)
    assert f"'{key}'" in message and f"expects {expected}" in message and f"got {given}" in message


def test_int_is_accepted_for_float_and_sequences_take_the_default_type():
    cfg = load_config(overrides={"TEST.NMS": 1, "TRAIN.SCALES": [700], "SOLVER.STEPS": (0, 5)})
    assert cfg.TEST.NMS == 1.0 and isinstance(cfg.TEST.NMS, float)
    assert cfg.TRAIN.SCALES == (700,) and cfg.SOLVER.STEPS == [0, 5]


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("MODEL.BBOX_REG_WEIGHTS", (10.0, 10.0, 5.0), "expects length 4, got length 3"),
        ("PIXEL_MEANS", [[[102.9, 115.9]]], "expects length 3 at nesting level 3"),
        ("PIXEL_MEANS", [102.9, 115.9, 122.7], "expects length 1 at nesting level 1"),
        ("RPN.ASPECT_RATIOS", [], "expects length at least 1, got length 0"),
        ("TRAIN.SCALES", (), "expects length at least 1, got length 0"),
    ],
)
def test_wrong_length_names_key_and_both_lengths(key, value, expected):
    with pytest.raises(ConfigError, match=f"'{key}' {expected}"):
        load_config(overrides={key: value})


@pytest.mark.parametrize("scales, given", [(("800",), "str '800'"), (((800,),), r"tuple \(800,\)")])
def test_wrong_element_type_is_an_error(scales, given):
    with pytest.raises(ConfigError, match=f"'TRAIN.SCALES' expects int elements, got {given}"):
        load_config(overrides={"TRAIN.SCALES": scales})


def test_numpy_values_are_accepted():
    np = pytest.importorskip("numpy")
    cfg = load_config(
        overrides={
            "PIXEL_MEANS": np.array([[[1.0, 2.0, 3.0]]]),
            "TEST.NMS": np.float32(0.5),
            "RNG_SEED": np.int64(7),
        }
    )
    assert cfg.PIXEL_MEANS == (((1.0, 2.0, 3.0),),) and cfg.TEST.NMS == 0.5 and cfg.RNG_SEED == 7


# ---- Detectron's renamed and deprecated keys ----


def test_renamed_key_is_accepted_with_a_warning():
    with pytest.warns(ConfigWarning, match="'MODEL.ROI_HEAD' was renamed to 'FAST_RCNN.ROI_BOX_HEAD'"):
        cfg = load_config(overrides={"MODEL.ROI_HEAD": "ResNet.add_ResNet_roi_conv5_head"})
    assert cfg.FAST_RCNN.ROI_BOX_HEAD == "ResNet.add_ResNet_roi_conv5_head"


def test_renamed_mask_head_key():
    with pytest.warns(ConfigWarning, match="'MRCNN.MASK_HEAD_NAME' was renamed to 'MRCNN.ROI_MASK_HEAD'"):
        cfg = load_config(overrides={"MRCNN.MASK_HEAD_NAME": "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs"})
    assert cfg.MRCNN.ROI_MASK_HEAD == "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs"


def test_renamed_keys_convert_their_values(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text(
        "TRAIN:\n  DATASET: coco_2014_train:coco_2014_valminusminival\n"
        "  PROPOSAL_FILE: https://host/a.pkl\n"
        "TEST:\n  SCALES: (600,)\n  DATASET: coco_2014_minival\n"
    )
    with pytest.warns(ConfigWarning) as record:
        cfg = load_config(path)
    warned_keys = [str(w.message).split("'")[1] for w in record]  # "Config key 'X' was renamed ..."
    assert warned_keys == ["TRAIN.DATASET", "TRAIN.PROPOSAL_FILE", "TEST.SCALES", "TEST.DATASET"]
    assert cfg.TEST.SCALE == 600
    assert cfg.TRAIN.DATASETS == ("coco_2014_train", "coco_2014_valminusminival")
    assert cfg.TRAIN.PROPOSAL_FILES == ("https://host/a.pkl",)
    assert cfg.TEST.DATASETS == ("coco_2014_minival",)


def test_renamed_key_that_cannot_be_converted_gives_detectron_note():
    note = r"'TEST.SCALES' was renamed to 'TEST.SCALE'.*Note: Also convert from a tuple"
    with pytest.raises(ConfigError, match=note):
        load_config(overrides={"TEST.SCALES": (600, 800)})


def test_old_and_new_name_together_is_an_error():
    with pytest.raises(ConfigError, match="Both 'MODEL.ROI_HEAD' and its new name 'FAST_RCNN.ROI_BOX_HEAD'"):
        load_config(overrides={"MODEL.ROI_HEAD": "", "FAST_RCNN.ROI_BOX_HEAD": ""})


@pytest.mark.parametrize("key", ["FINAL_MSG", "MODEL.DILATION", "ROOT_GPU_ID", "RPN.ON", "TRAIN.DROPOUT",
                                 "USE_GPU_NMS", "TEST.NUM_TEST_IMAGES"])
def test_deprecated_keys_are_ignored_with_a_warning(key):
    with pytest.warns(ConfigWarning, match=f"Deprecated config key '{key}' is ignored"):
        cfg = load_config(overrides=[key, "1"])
    assert cfg == load_config()


# ---- function names ----


def test_legacy_function_names_are_rewritten_with_a_warning():
    renamed = "'head_builder.add_roi_2mlp_head' to 'fast_rcnn_heads.add_roi_2mlp_head'"
    with pytest.warns(ConfigWarning, match=renamed):
        cfg = load_config(zoo("e2e_keypoint_rcnn_R-50-FPN_1x.yaml"))
    assert cfg.FAST_RCNN.ROI_BOX_HEAD == "fast_rcnn_heads.add_roi_2mlp_head"
    with pytest.warns(ConfigWarning, match="ResNet_mask_rcnn_fcn_head_v1up4convs"):
        cfg = load_config(overrides=["MRCNN.ROI_MASK_HEAD", "mask_rcnn_heads.ResNet_mask_rcnn_fcn_head_v1up4convs"])
    assert cfg.MRCNN.ROI_MASK_HEAD == "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs"


def test_deprecated_model_type_becomes_generalized_rcnn():
    with pytest.warns(ConfigWarning, match="'rpn' is deprecated"):
        cfg = load_config(zoo("rpn_R-50-C4_1x.yaml"))
    assert cfg.MODEL.TYPE == "generalized_rcnn" and cfg.MODEL.RPN_ONLY is True


def test_unknown_function_name_lists_the_known_ones():
    with pytest.raises(ConfigError) as error:
        load_config(overrides={"MODEL.CONV_BODY": "FPN.add_fpn_ResNet51_conv5_body"})
    message = str(error.value)
    assert message.startswith(
        "Unknown function name 'FPN.add_fpn_ResNet51_conv5_body' for config key 'MODEL.CONV_BODY'"
    )
    assert "did you mean 'FPN.add_fpn_ResNet50_conv5_body'" in message
    assert "ResNet.add_ResNet50_conv4_body" in message  # the known names are listed


def test_empty_function_name_is_allowed():
    assert load_config(overrides={"MRCNN.ROI_MASK_HEAD": ""}).MRCNN.ROI_MASK_HEAD == ""


def test_zoo_function_names_are_all_known():
    names = {key: set() for key in FUNCTION_NAMES}
    for path in ZOO_CONFIGS:
        cfg = load_quietly(path)
        for key in FUNCTION_NAMES:
            names[key].add(_value(cfg, key))
    for key, used in names.items():
        assert used - {""} <= set(FUNCTION_NAMES[key]), key


# ---- frozen and mutable configs ----


def test_frozen_config_refuses_writes():
    cfg = load_config()
    with pytest.raises(FrozenConfigError, match="Cannot set 'MODEL.NUM_CLASSES': the config is frozen"):
        cfg.MODEL.NUM_CLASSES = 3
    with pytest.raises(FrozenConfigError, match="Cannot set 'MODEL.NEW_KEY'"):
        cfg.MODEL.NEW_KEY = 1
    with pytest.raises(FrozenConfigError):
        cfg["TEST"]["NMS"] = 0.5
    with pytest.raises(FrozenConfigError):
        cfg.TEST.update({"NMS": 0.5})
    with pytest.raises(ConfigError):
        del cfg.TEST["NMS"]
    assert cfg.MODEL.NUM_CLASSES == -1


def test_clone_is_mutable_checked_and_independent():
    cfg = load_config()
    copy = cfg.clone()
    assert not copy.frozen and copy == cfg
    copy.MODEL.NUM_CLASSES = 3
    copy.TRAIN.SCALES = [500]
    assert copy.MODEL.NUM_CLASSES == 3 and copy.TRAIN.SCALES == (500,)
    assert cfg.MODEL.NUM_CLASSES == -1
    with pytest.raises(ConfigError, match="did you mean 'MODEL.NUM_CLASSES'"):
        copy.MODEL.NUM_CLASSE = 3
    with pytest.raises(ConfigError, match="expects int"):
        copy.MODEL.NUM_CLASSES = "3"
    assert copy.freeze() is copy and copy.TEST.frozen


def test_attribute_access_and_mapping_behaviour():
    cfg = load_config()
    assert cfg.MODEL.NUM_CLASSES == cfg["MODEL"]["NUM_CLASSES"]
    assert list(cfg)[:3] == ["TRAIN", "DATA_LOADER", "TEST"]
    assert "MODEL" in cfg and dict(cfg.TFDET) == {
        "STRATEGY": "", "ROI_ALIGN_ALIGNED": False, "DEVICE_MAP": {}, "MIXED_PRECISION": "", "SIZE_DIVISIBILITY": 0,
        "DA_HEAD_INIT": "fork", "DA_IMG_FEATURES": (), "RECOMPUTE_BODY_STAGES": True,
        "ALLOW_AFFINE_FROM_SCRATCH": False,
    }
    assert not hasattr(cfg.MODEL, "NUM_CLASS")
    with pytest.raises(AttributeError, match="did you mean 'MODEL.NUM_CLASSES'"):
        cfg.MODEL.NUM_CLASS
    assert isinstance(cfg.to_dict()["MODEL"], dict)


def test_config_pickles():
    cfg = load_config(zoo("e2e_mask_rcnn_R-50-FPN_1x.yaml"))
    restored = pickle.loads(pickle.dumps(cfg))
    assert restored == cfg and restored.frozen


# ---- dump and load ----


def test_dump_load_round_trip(tmp_path):
    cfg = load_quietly(
        zoo("e2e_keypoint_rcnn_R-50-FPN_1x.yaml"),
        {"OUTPUT_DIR": "2018", "TRAIN.TARGET_DATASETS": ("target",), "TFDET.ROI_ALIGN_ALIGNED": True},
    )
    path = tmp_path / "dumped.yaml"
    path.write_text(cfg.dump())
    assert "&id" not in cfg.dump()  # values shared between keys are written out, not as YAML aliases
    reloaded = load_config(path)
    assert reloaded == cfg
    assert reloaded.to_dict() == cfg.to_dict()
    assert isinstance(reloaded.TRAIN.SCALES, tuple) and isinstance(reloaded.SOLVER.STEPS, list)
    assert reloaded.PIXEL_MEANS == cfg.PIXEL_MEANS and reloaded.BBOX_XFORM_CLIP == cfg.BBOX_XFORM_CLIP


def test_bad_yaml_files_are_config_errors(tmp_path):
    not_a_mapping = tmp_path / "list.yaml"
    not_a_mapping.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(not_a_mapping)
    broken = tmp_path / "broken.yaml"
    broken.write_text("MODEL: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
    boolean_key = tmp_path / "on.yaml"
    boolean_key.write_text("RPN:\n  ON: True\n")
    with pytest.raises(ConfigError, match="quote the key"):
        load_config(boolean_key)


# ---- light import ----


def test_importing_tfdet_config_does_not_import_tensorflow():
    code = "import sys, tfdet.config; print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


# ---- Registry ----


def test_registry_registers_and_gets():
    bodies = Registry("conv body")

    @bodies.register("FPN.add_fpn_ResNet50_conv5_body")
    def build_r50_fpn():
        return "r50-fpn"

    bodies.register("ResNet.add_ResNet50_conv4_body")(lambda: "r50-c4")
    assert bodies.get("FPN.add_fpn_ResNet50_conv5_body") is build_r50_fpn
    assert bodies.names() == ("FPN.add_fpn_ResNet50_conv5_body", "ResNet.add_ResNet50_conv4_body")
    assert "ResNet.add_ResNet50_conv4_body" in bodies and "x" not in bodies


def test_registry_errors():
    heads = Registry("box head")
    heads.register("fast_rcnn_heads.add_roi_2mlp_head")(object)
    with pytest.raises(ValueError, match="already registered"):
        heads.register("fast_rcnn_heads.add_roi_2mlp_head")(object)
    with pytest.raises(UnknownNameError) as error:
        heads.get("fast_rcnn_heads.add_roi_2mlp_heads")
    assert str(error.value) == (
        "Unknown box head 'fast_rcnn_heads.add_roi_2mlp_heads'; did you mean "
        "'fast_rcnn_heads.add_roi_2mlp_head'? Known: fast_rcnn_heads.add_roi_2mlp_head"
    )
