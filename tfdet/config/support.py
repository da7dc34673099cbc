"""What tfdet does with every config key, and `check_supported(cfg, use)`, which refuses what it does not do.

Each key of tfdet.config.defaults has one status in SUPPORT:

* Implemented(test): the key acts as in Detectron; `test` ("tests/<file>.py::<function>") exercises it.
  Its `limits` refuse the values tfdet does not implement (RoIPoolF, values outside Detectron's).
* NoEffect(reason): a Detectron execution detail that cannot change a result in Detectron either.
* OnlyWith(condition, reason): Detectron reads the key only in a mode tfdet refuses (Fast R-CNN on
  precomputed proposals, ...), so that mode's refusal covers it.
* Refused(reason, uses, fix): not implemented; a non-default value is refused for those uses.

Refusals happen at the point of use, not at load time, so every Detectron zoo YAML still loads:
`check_supported(cfg, "inference" | "training" | "export" | "evaluation")` raises one ConfigError
listing every offending key, one line each: `<KEY> = <value>: <reason>; <what to do>`.
"""

import dataclasses
import math
from collections.abc import Callable, Iterable

from tfdet.config.defaults import DEFAULTS
from tfdet.config.errors import ConfigError

USES = ("inference", "training", "export", "evaluation")
MODEL_USES = ("inference", "training", "export")  # everything that builds a model from the config
PREDICTION_USES = ("inference", "export")  # everything that runs the inference model

_DEFAULT_VALUES = {key: value for key, value, _ in DEFAULTS}


@dataclasses.dataclass(frozen=True)
class When:
    """A condition on another key, `key` equal to `value`: where Detectron reads the key a rule is about."""

    key: str
    value: object

    def holds(self, cfg) -> bool:
        """Whether `cfg` has `key` at `value`."""
        return _same(_value(cfg, self.key), self.value)


@dataclasses.dataclass(frozen=True)
class Check:
    """What a Limit may read besides the key's value: the config and the datasets an evaluation runs on."""

    cfg: object
    datasets: tuple


@dataclasses.dataclass(frozen=True)
class Limit:
    """Values of an implemented key that tfdet refuses for `uses` (when every `when` holds): those `accepts`
    rejects. `accepts(value, check)` also sees the whole config and the datasets being evaluated (a `Check`),
    for rules that relate keys (FPN.COARSEST_STRIDE and FPN.RPN_MAX_LEVEL, TEST.FORCE_JSON_DATASET_EVAL).
    """

    accepts: Callable[[object, "Check"], bool]
    reason: str
    fix: str
    uses: tuple
    when: tuple = ()


@dataclasses.dataclass(frozen=True)
class Implemented:
    """The key acts as Detectron's; `test` exercises it; `limits` refuse the values tfdet does not implement."""

    test: str
    limits: tuple = ()


@dataclasses.dataclass(frozen=True)
class NoEffect:
    """A Detectron execution detail: no value changes a result in Detectron either."""

    reason: str


@dataclasses.dataclass(frozen=True)
class OnlyWith:
    """Detectron reads the key only under `condition`, a mode that tfdet refuses on its own."""

    condition: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Refused:
    """Not implemented: any value but the default is refused for `uses` (when every `when` holds)."""

    reason: str
    uses: tuple
    fix: str
    when: tuple = ()


# TFDET.MIXED_PRECISION's values, as tfdet.modeling.mixed_precision.policy_name reads them (stripped, lower case).
_MIXED_PRECISIONS = ("", "false", "float32", "true", "mixed_float16", "mixed_bfloat16")


# ---- rules shared by several keys ----------------------------------------------------------------------

def _one_of(values, uses, when=(), reason="not one of Detectron's values", fix=None):
    """Refuse values outside `values`, naming them."""
    return Limit(lambda value, _: value in values, reason, fix or "use one of " + ", ".join(values), uses, when)


def _not_in(names, fix, uses):
    """Refuse Detectron function names that tfdet has no builder for."""
    return Limit(lambda value, _: value not in names, "Detectron defines it, tfdet does not build it", fix, uses)


def _roi_align_only(section, when):
    """Refuse RoIPoolF, Detectron's default RoI transform, which tfdet does not have."""
    return _one_of(
        ("RoIAlign",), MODEL_USES, when,
        reason=f"Detectron's RoIPoolF (max pooling) is not implemented for {section}",
        fix="set it to RoIAlign, as every Detectron zoo R-CNN config does",
    )  # fmt: skip


def _looks_like_other_evaluator(name: str) -> bool:
    """Dataset names that Detectron evaluates with its PASCAL VOC or Cityscapes evaluator, not the COCO API
    (a `coco:ANNOTATIONS:IMAGES` name is a COCO json by definition, whatever its paths say)."""
    if name.startswith("coco:"):
        return False
    return "coco_" not in name and (name.startswith("voc_") or "cityscapes_" in name)


_FORCE_JSON = Limit(
    lambda value, check: value or not any(_looks_like_other_evaluator(name) for name in check.datasets),
    "Detectron evaluates 'voc_' and 'cityscapes_' datasets with its PASCAL VOC / Cityscapes evaluators, which "
    "tfdet does not have (tfdet always uses the COCO API)",
    "set TEST.FORCE_JSON_DATASET_EVAL True to evaluate them with the COCO API, as Detectron then does",
    ("evaluation",),
)

_TTA_EXPORT = Limit(
    lambda value, _: not value,
    "the SavedModel does not carry test-time augmentation: it runs the network at every scale and flip, "
    "10-40x the cost of one request",
    "export with it False, or run test-time augmentation with tfdet.infer / Predictor",
    ("export",),
)

_UNION_ONLY = _one_of(
    ("UNION",), ("inference",), (When("TEST.BBOX_AUG.ENABLED", True),),
    reason="Detectron asserts that SCORE_HEUR is UNION exactly when COORD_HEUR is, and that Faster R-CNN "
    "models (the only ones tfdet runs) use UNION",
)  # fmt: skip

_FAST_RCNN_MODE = "Fast R-CNN on precomputed proposals (MODEL.FASTER_RCNN and MODEL.RPN_ONLY False)"
_PROPOSAL_FILES_TRAINING = "TRAIN.PROPOSAL_FILES (training on precomputed proposals)"
_RETINANET_ON = (When("RETINANET.RETINANET_ON", True),)
_RETINANET_LOSSES = "tests/test_retinanet_training.py::test_training_graph_losses_equal_detectron_on_a_real_batch"
_RETINANET_DETECTIONS = "tests/test_retinanet.py::test_detections_match_detectron"
_RETINANET_ANCHORS = "tests/test_retinanet.py::test_cell_anchors_match_detectron_and_hand_values"
_RETINANET_HEADS = "tests/test_retinanet.py::test_head_variants_and_initialisation"


def _not_with_retinanet(uses, what):
    """Refuse True for a RetinaNet: Detectron's core/test.py returns test_retinanet's boxes before `what`."""
    return Limit(
        lambda value, _: not value,
        f"Detectron's RetinaNet inference (core/test.py im_detect_all) returns test_retinanet's boxes without {what}",
        "set it False for a RetinaNet config", uses, _RETINANET_ON,
    )  # fmt: skip


def _not_in_retinanet_training(reason, fix="set it False for MODEL.TYPE retinanet"):
    """Refuse True when training a RetinaNet: Detectron's RetinaNet training would not do it (`reason`)."""
    return Limit(lambda value, _: not value, reason, fix, ("training",), _RETINANET_ON)


def _divides_coarsest_level(stride, check) -> bool:
    """Whether FPN.COARSEST_STRIDE is a multiple of the coarsest RetinaNet level's stride."""
    return stride % 2 ** _value(check.cfg, "FPN.RPN_MAX_LEVEL") == 0


_RPN_BEFORE_RETINANET = _not_in_retinanet_training(
    "an RPN takes precedence over RetinaNet in Detectron's data loader (roi_data/minibatch.py)",
    "set MODEL.FASTER_RCNN and MODEL.RPN_ONLY False for MODEL.TYPE retinanet",
)
_RETINANET_COARSEST_STRIDE = Limit(
    _divides_coarsest_level,
    "RetinaNet training needs a multiple of 2**FPN.RPN_MAX_LEVEL, else the coarsest level's map is larger than "
    "Detectron's cropped labels (int(size / stride))",
    "set it to 2**FPN.RPN_MAX_LEVEL (128 for level 7), as the zoo configs do", ("training",), _RETINANET_ON,
)  # fmt: skip

_VOC_EVALUATOR = OnlyWith(
    "Detectron's PASCAL VOC evaluator (a 'voc_' dataset without TEST.FORCE_JSON_DATASET_EVAL)",
    "read only by datasets/voc_dataset_evaluator.py, which tfdet refuses for TEST.FORCE_JSON_DATASET_EVAL",
)
_EXPECTED_ONLY = OnlyWith(
    "EXPECTED_RESULTS non-empty", "read only by task_evaluation.check_expected_results, which tfdet refuses"
)
_NEVER_READ = "never read by Detectron"
_TRAINING_WIRING = "tests/test_config_support.py::test_training_keys_reach_the_training_graph"
_INFERENCE_WIRING = "tests/test_config_support.py::test_inference_keys_reach_the_inference_model"
_INIT_WIRING = "tests/test_config_support.py::test_initialisation_keys_reach_the_layers"
_MODEL_INVENTORY = "tests/test_generalized_rcnn.py::test_zoo_architecture_inventory"
_BBOX_AUG = "tests/test_test_time_augmentation.py::test_bbox_aug_matches_numpy_reference"
_MASK_AUG = "tests/test_test_time_augmentation.py::test_mask_aug_matches_numpy_reference"
_KPS_AUG = "tests/test_test_time_augmentation.py::test_keypoint_aug_matches_numpy_reference"
_SOFT_NMS = "tests/test_soft_nms_and_voting.py::test_soft_nms_matches_numpy_reference"
_BOX_VOTING = "tests/test_soft_nms_and_voting.py::test_box_voting_matches_numpy_reference"
_RPN_VS_CAFFE2 = "tests/test_rpn.py::test_rpn_head_and_proposals_match_caffe2"
_KEYPOINT_HEAD = "tests/test_roi_heads.py::test_keypoint_head_matches_caffe2_with_fresh_bilinear_kps_score"
_FPN_VS_CAFFE2 = "tests/test_backbones.py::test_fpn_matches_caffe2_reference"
_BLOCK_VS_CAFFE2 = "tests/test_backbones.py::test_residual_block_matches_caffe2_reference"
_OURS = "tests/test_config_support.py::"


def _tta_refused(section, key, reason):
    """Refuse a test-time augmentation key that Detectron asserts against when the augmentation is on."""
    enabled = (When(f"TEST.{section}.ENABLED", True),)
    return Refused(reason, ("inference",), f"set TEST.{section}.{key} to its default", enabled)


# ---- the table ------------------------------------------------------------------------------------------

SUPPORT = {
    # ---- TRAIN ----
    "TRAIN.WEIGHTS": Implemented("tests/test_trainer.py::test_train_weights_from_our_final_weights_file"),
    "TRAIN.DATASETS": Implemented("tests/test_roidb.py::test_training_roidb_reads_the_catalog"),
    "TRAIN.TARGET_DATASETS": Implemented("tests/test_domain_adaptation.py::test_target_images_need_no_annotations"),
    "TRAIN.SCALES": Implemented("tests/test_data_pipeline.py::test_images_are_prepared_as_at_test_time"),
    "TRAIN.MAX_SIZE": Implemented("tests/test_data_pipeline.py::test_images_are_prepared_as_at_test_time"),
    "TRAIN.IMS_PER_BATCH": Implemented("tests/test_data_pipeline.py::test_aspect_grouping_and_epochs"),
    "TRAIN.BATCH_SIZE_PER_IM": Implemented(_TRAINING_WIRING),
    "TRAIN.FG_FRACTION": Implemented(_TRAINING_WIRING),
    "TRAIN.FG_THRESH": Implemented(_TRAINING_WIRING),
    "TRAIN.BG_THRESH_HI": Implemented(_TRAINING_WIRING),
    "TRAIN.BG_THRESH_LO": Implemented(_TRAINING_WIRING),
    "TRAIN.USE_FLIPPED": Implemented("tests/test_data_pipeline.py::test_no_flips_without_use_flipped"),
    "TRAIN.BBOX_THRESH": Implemented(_TRAINING_WIRING),
    "TRAIN.SNAPSHOT_ITERS": Implemented("tests/test_checkpoint.py::test_snapshot_period_is_detectrons"),
    "TRAIN.PROPOSAL_FILES": Refused(
        "Detectron adds these precomputed proposals to every training image's RoIs (Fast R-CNN training); tfdet "
        "trains on its own RPN's proposals only", ("training",),
        "leave it empty and train end to end (MODEL.FASTER_RCNN True)",
    ),  # fmt: skip
    "TRAIN.ASPECT_GROUPING": Implemented("tests/test_data_pipeline.py::test_aspect_grouping_and_epochs"),
    "TRAIN.GENERATE_PROPOSALS_ON_GPU": NoEffect(
        "modeling/detector.py picks Caffe2's GenerateProposals CUDA op instead of the Python op, with the same "
        "anchors, top-N, NMS and min-size arguments"
    ),
    "TRAIN.RPN_POSITIVE_OVERLAP": Implemented(_TRAINING_WIRING),
    "TRAIN.RPN_NEGATIVE_OVERLAP": Implemented(_TRAINING_WIRING),
    "TRAIN.RPN_FG_FRACTION": Implemented(_TRAINING_WIRING),
    "TRAIN.RPN_BATCH_SIZE_PER_IM": Implemented(_TRAINING_WIRING),
    "TRAIN.RPN_NMS_THRESH": Implemented(_TRAINING_WIRING),
    "TRAIN.RPN_PRE_NMS_TOP_N": Implemented(_TRAINING_WIRING),
    "TRAIN.RPN_POST_NMS_TOP_N": Implemented(_TRAINING_WIRING),
    "TRAIN.RPN_STRADDLE_THRESH": Implemented(_TRAINING_WIRING),
    "TRAIN.RPN_MIN_SIZE": Implemented(_TRAINING_WIRING),
    "TRAIN.CROWD_FILTER_THRESH": OnlyWith(
        _PROPOSAL_FILES_TRAINING,
        "datasets/roidb.py filters crowd proposals of proposal files only; end-to-end training labels its RPN "
        "proposals with crowd_thresh 0 (ops/generate_proposal_labels.py)",
    ),
    "TRAIN.GT_MIN_AREA": Implemented("tests/test_roidb.py::test_gt_min_area_drops_small_objects"),
    "TRAIN.FREEZE_CONV_BODY": Implemented("tests/test_training_graph.py::test_freeze_at_and_freeze_conv_body", (
        _not_in_retinanet_training(
            "Detectron's RetinaNet builder ignores it and trains the body (modeling/model_builder.py: retinanet)"
        ),
    )),  # fmt: skip
    "TRAIN.AUTO_RESUME": Implemented("tests/test_train_cli.py::test_train_end_to_end_then_resume_from_a_checkpoint"),
    "TRAIN.COPY_WEIGHTS": Implemented(_OURS + "test_copy_weights_copies_the_initial_weights_file"),
    "TRAIN.FREEZE_AT": Implemented("tests/test_backbones.py::test_freeze_at_freezes_stem_and_stages_up_to_it"),
    # ---- DATA_LOADER ----
    "DATA_LOADER.NUM_THREADS": NoEffect(
        "threads of Detectron's RoIDataLoader (roi_data/loader.py): how fast minibatches are made, not which; "
        "tfdet's tf.data pipeline picks its own parallelism"
    ),
    "DATA_LOADER.MINIBATCH_QUEUE_SIZE": NoEffect("capacity of RoIDataLoader's Python minibatch queue"),
    "DATA_LOADER.BLOBS_QUEUE_CAPACITY": NoEffect("capacity of RoIDataLoader's per-GPU Caffe2 blobs queues"),
    # ---- TEST ----
    "TEST.WEIGHTS": Implemented(_OURS + "test_evaluate_reads_test_weights"),
    "TEST.DATASETS": Implemented(_OURS + "test_evaluate_runs_every_test_dataset"),
    "TEST.SCALE": Implemented(_INFERENCE_WIRING),
    "TEST.MAX_SIZE": Implemented(_INFERENCE_WIRING),
    "TEST.NMS": Implemented(_INFERENCE_WIRING),
    "TEST.BBOX_REG": Implemented(_INFERENCE_WIRING),
    "TEST.PROPOSAL_FILES": OnlyWith(
        _FAST_RCNN_MODE, "core/test_engine.py reads proposal files only when TEST.PRECOMPUTED_PROPOSALS"
    ),
    "TEST.GENERATE_PROPOSALS_ON_GPU": NoEffect(
        "modeling/detector.py picks Caffe2's GenerateProposals CUDA op instead of the Python op, with the same "
        "anchors, top-N, NMS and min-size arguments"
    ),
    "TEST.PROPOSAL_LIMIT": OnlyWith(_FAST_RCNN_MODE, "core/test_engine.py caps the proposals read from files"),
    "TEST.RPN_NMS_THRESH": Implemented(_RPN_VS_CAFFE2),
    "TEST.RPN_PRE_NMS_TOP_N": Implemented(_RPN_VS_CAFFE2),
    "TEST.RPN_POST_NMS_TOP_N": Implemented(_RPN_VS_CAFFE2),
    "TEST.RPN_MIN_SIZE": Implemented(_RPN_VS_CAFFE2),
    "TEST.DETECTIONS_PER_IM": Implemented(_INFERENCE_WIRING),
    "TEST.SCORE_THRESH": Implemented(_INFERENCE_WIRING),
    "TEST.COMPETITION_MODE": Implemented(_OURS + "test_competition_mode_false_deletes_the_results_file"),
    "TEST.FORCE_JSON_DATASET_EVAL": Implemented(
        _OURS + "test_force_json_dataset_eval_admits_voc_and_cityscapes_names", (_FORCE_JSON,)
    ),
    "TEST.PRECOMPUTED_PROPOSALS": Implemented("tests/test_config.py::test_detectron_inferred_values_are_set"),
    "TEST.BBOX_AUG.ENABLED": Implemented(
        _BBOX_AUG, (_TTA_EXPORT, _not_with_retinanet(("inference",), "test-time augmentation"))
    ),
    "TEST.BBOX_AUG.SCORE_HEUR": Implemented(_BBOX_AUG, (_UNION_ONLY,)),
    "TEST.BBOX_AUG.COORD_HEUR": Implemented(_BBOX_AUG, (_UNION_ONLY,)),
    "TEST.BBOX_AUG.H_FLIP": Implemented(_BBOX_AUG),
    "TEST.BBOX_AUG.SCALES": Implemented(_BBOX_AUG),
    "TEST.BBOX_AUG.MAX_SIZE": Implemented(_BBOX_AUG),
    "TEST.BBOX_AUG.SCALE_H_FLIP": Implemented(_BBOX_AUG),
    "TEST.BBOX_AUG.SCALE_SIZE_DEP": _tta_refused(
        "BBOX_AUG", "SCALE_SIZE_DEP", "Detectron asserts 'Size dependent scaling not implemented'"
    ),
    "TEST.BBOX_AUG.AREA_TH_LO": Refused(_NEVER_READ, ("inference",), "leave it at its default"),
    "TEST.BBOX_AUG.AREA_TH_HI": Refused(_NEVER_READ, ("inference",), "leave it at its default"),
    "TEST.BBOX_AUG.ASPECT_RATIOS": Implemented(_BBOX_AUG),
    "TEST.BBOX_AUG.ASPECT_RATIO_H_FLIP": Implemented(_BBOX_AUG),
    "TEST.MASK_AUG.ENABLED": Implemented(_MASK_AUG, (_TTA_EXPORT,)),
    "TEST.MASK_AUG.HEUR": Implemented(
        _MASK_AUG,
        (_one_of(("SOFT_AVG", "SOFT_MAX", "LOGIT_AVG"), ("inference",), (When("TEST.MASK_AUG.ENABLED", True),)),),
    ),
    "TEST.MASK_AUG.H_FLIP": Implemented(_MASK_AUG),
    "TEST.MASK_AUG.SCALES": Implemented(_MASK_AUG),
    "TEST.MASK_AUG.MAX_SIZE": Implemented(_MASK_AUG),
    "TEST.MASK_AUG.SCALE_H_FLIP": Implemented(_MASK_AUG),
    "TEST.MASK_AUG.SCALE_SIZE_DEP": _tta_refused(
        "MASK_AUG", "SCALE_SIZE_DEP", "Detectron asserts 'Size dependent scaling not implemented'"
    ),
    "TEST.MASK_AUG.AREA_TH": Refused(_NEVER_READ, ("inference",), "leave it at its default"),
    "TEST.MASK_AUG.ASPECT_RATIOS": Implemented(_MASK_AUG),
    "TEST.MASK_AUG.ASPECT_RATIO_H_FLIP": Implemented(_MASK_AUG),
    "TEST.KPS_AUG.ENABLED": Implemented(_KPS_AUG, (_TTA_EXPORT,)),
    "TEST.KPS_AUG.HEUR": Implemented(
        _KPS_AUG, (_one_of(("HM_AVG", "HM_MAX"), ("inference",), (When("TEST.KPS_AUG.ENABLED", True),)),)
    ),
    "TEST.KPS_AUG.H_FLIP": Implemented(_KPS_AUG),
    "TEST.KPS_AUG.SCALES": Implemented(_KPS_AUG),
    "TEST.KPS_AUG.MAX_SIZE": Implemented(_KPS_AUG),
    "TEST.KPS_AUG.SCALE_H_FLIP": Implemented(_KPS_AUG),
    "TEST.KPS_AUG.SCALE_SIZE_DEP": Implemented(_KPS_AUG),
    "TEST.KPS_AUG.AREA_TH": Implemented(_KPS_AUG),
    "TEST.KPS_AUG.ASPECT_RATIOS": Implemented(_KPS_AUG),
    "TEST.KPS_AUG.ASPECT_RATIO_H_FLIP": Implemented(_KPS_AUG),
    "TEST.SOFT_NMS.ENABLED": Implemented(_SOFT_NMS),
    "TEST.SOFT_NMS.METHOD": Implemented(
        _SOFT_NMS, (_one_of(("linear", "gaussian", "hard"), PREDICTION_USES, (When("TEST.SOFT_NMS.ENABLED", True),)),)
    ),
    "TEST.SOFT_NMS.SIGMA": Implemented(_SOFT_NMS),
    "TEST.BBOX_VOTE.ENABLED": Implemented(_BOX_VOTING, (_not_with_retinanet(PREDICTION_USES, "box voting"),)),
    "TEST.BBOX_VOTE.VOTE_TH": Implemented(_BOX_VOTING),
    "TEST.BBOX_VOTE.SCORING_METHOD": Implemented(_BOX_VOTING, (_one_of(
        ("ID", "TEMP_AVG", "AVG", "IOU_AVG", "GENERALIZED_AVG", "QUASI_SUM"), PREDICTION_USES,
        (When("TEST.BBOX_VOTE.ENABLED", True),),
    ),)),  # fmt: skip
    "TEST.BBOX_VOTE.SCORING_METHOD_BETA": Refused(
        "Detectron's box_results_with_nms_and_limit never passes it to box_voting, which always uses beta 1.0",
        PREDICTION_USES, "leave it at 1.0",
    ),  # fmt: skip
    # ---- MODEL ----
    "MODEL.TYPE": Implemented(_MODEL_INVENTORY, (
        _one_of(
            ("generalized_rcnn",), MODEL_USES, (When("RETINANET.RETINANET_ON", False),),
            reason="tfdet builds generalized_rcnn models, and retinanet ones with RETINANET.RETINANET_ON True "
            "(R-FCN is not implemented)",
            fix="use a generalized_rcnn config, or a retinanet one with RETINANET.RETINANET_ON True",
        ),
        _one_of(
            ("retinanet",), MODEL_USES, _RETINANET_ON,
            reason="with RETINANET.RETINANET_ON True Detectron's data loader and core/test.py expect a RetinaNet",
            fix="set MODEL.TYPE retinanet, or RETINANET.RETINANET_ON False",
        ),
    )),  # fmt: skip
    "MODEL.CONV_BODY": Implemented(_MODEL_INVENTORY, (_not_in(
        ("VGG16.add_VGG16_conv5_body", "VGG_CNN_M_1024.add_VGG_CNN_M_1024_conv5_body"),
        "use a ResNet or FPN body", MODEL_USES,
    ),)),  # fmt: skip
    "MODEL.NUM_CLASSES": Implemented(_MODEL_INVENTORY),
    "MODEL.CLS_AGNOSTIC_BBOX_REG": Implemented(
        "tests/test_roi_heads.py::test_class_agnostic_bbox_pred_has_bg_and_fg_rows"
    ),
    "MODEL.BBOX_REG_WEIGHTS": Implemented(_INFERENCE_WIRING),
    "MODEL.FASTER_RCNN": Implemented(_MODEL_INVENTORY, (Limit(
        lambda value, _: value,
        "a Fast R-CNN model reads precomputed proposals (TEST.PROPOSAL_FILES, TRAIN.PROPOSAL_FILES), which tfdet "
        "does not implement", "set MODEL.FASTER_RCNN True to compute proposals with the model's own RPN",
        MODEL_USES, (When("TEST.PRECOMPUTED_PROPOSALS", True),),
    ), _RPN_BEFORE_RETINANET)),  # fmt: skip
    "MODEL.MASK_ON": Implemented(_MODEL_INVENTORY, (_not_with_retinanet(MODEL_USES, "mask heads"),)),
    "MODEL.KEYPOINTS_ON": Implemented(_MODEL_INVENTORY, (_not_with_retinanet(MODEL_USES, "keypoint heads"),)),
    "MODEL.RPN_ONLY": Implemented("tests/test_training_graph.py::test_c4_and_rpn_only_training_graphs", (Limit(
        lambda value, _: not value,
        "tfdet trains RPN-only models but runs no proposal inference (Detectron's rpn_generator and its AR "
        "evaluation are not implemented)", "infer and export models with detection heads", PREDICTION_USES,
    ), _RPN_BEFORE_RETINANET)),  # fmt: skip
    "MODEL.EXECUTION_TYPE": NoEffect(
        "the Caffe2 net executor ('dag' or 'simple', modeling/detector.py): the same ops in another schedule"
    ),
    "MODEL.DOMAIN_ADAPTATION_ON": Implemented(
        "tests/test_domain_adaptation.py::test_detection_losses_come_from_the_source_half_only",
        (_not_in_retinanet_training(
            "domain-adaptive training (the DA fork) adapts a Faster R-CNN: a RetinaNet has no RoI head for its "
            "instance-level classifier"
        ),),
    ),  # fmt: skip
    **{
        f"MODEL.DA_HEADS.{key}": Implemented(_TRAINING_WIRING)
        for key in (
            "DA_IMG_GRL_WEIGHT", "DA_INS_GRL_WEIGHT", "DA_IMG_LOSS_WEIGHT", "DA_INS_LOSS_WEIGHT", "DA_CST_LOSS_WEIGHT",
        )
    },  # fmt: skip
    # ---- RETINANET ----
    "RETINANET.RETINANET_ON": Implemented(_RETINANET_DETECTIONS),  # MODEL.TYPE must agree with it
    "RETINANET.ASPECT_RATIOS": Implemented(_RETINANET_ANCHORS),
    "RETINANET.SCALES_PER_OCTAVE": Implemented(_RETINANET_ANCHORS),
    "RETINANET.ANCHOR_SCALE": Implemented(_RETINANET_ANCHORS),
    "RETINANET.NUM_CONVS": Implemented("tests/test_retinanet.py::test_zoo_retinanet_inventory"),
    "RETINANET.PRIOR_PROB": Implemented(_RETINANET_HEADS),
    "RETINANET.SHARE_CLS_BBOX_TOWER": Implemented(_RETINANET_HEADS),
    "RETINANET.SOFTMAX": Implemented(_RETINANET_DETECTIONS),
    "RETINANET.PRE_NMS_TOP_N": Implemented(_RETINANET_DETECTIONS),
    "RETINANET.INFERENCE_TH": Implemented(_RETINANET_DETECTIONS),
    "RETINANET.CLASS_SPECIFIC_BBOX": Refused(
        "Detectron trains class-specific RetinaNet boxes but its test_retinanet cannot decode them (it reshapes "
        "the box blob to 4 deltas per anchor, which fails), so a model trained with it could never be tested",
        MODEL_USES, "set it False to train, run or export a RetinaNet", _RETINANET_ON,
    ),  # fmt: skip
    "RETINANET.POSITIVE_OVERLAP": Implemented(
        "tests/test_retinanet_targets.py::test_hand_made_thresholds_best_anchors_ties_and_crowd"
    ),
    "RETINANET.NEGATIVE_OVERLAP": Implemented(
        "tests/test_retinanet_targets.py::test_hand_made_thresholds_best_anchors_ties_and_crowd"
    ),
    "RETINANET.LOSS_GAMMA": Implemented("tests/test_focal_loss.py::test_sigmoid_focal_loss_and_gradient_equal_caffe2s"),
    "RETINANET.LOSS_ALPHA": Implemented("tests/test_focal_loss.py::test_sigmoid_focal_loss_and_gradient_equal_caffe2s"),
    "RETINANET.BBOX_REG_BETA": Implemented(_RETINANET_LOSSES),
    "RETINANET.BBOX_REG_WEIGHT": Implemented(_RETINANET_LOSSES),
    # ---- SOLVER ----
    **{
        f"SOLVER.{key}": Implemented("tests/test_lr_schedule.py::test_python_lr_matches_hand_values")
        for key in (
            "BASE_LR", "LR_POLICY", "GAMMA", "STEP_SIZE", "STEPS", "LRS", "MAX_ITER", "WARM_UP_ITERS",
            "WARM_UP_FACTOR", "WARM_UP_METHOD",
        )
    },  # fmt: skip
    "SOLVER.MOMENTUM": Implemented("tests/test_optimizer.py::test_three_steps_match_hand_computed_detectron_update"),
    "SOLVER.WEIGHT_DECAY": Implemented(
        "tests/test_optimizer.py::test_rules_default_to_detectron_and_follow_maskrcnn_benchmark_keys_when_present"
    ),
    "SOLVER.WEIGHT_DECAY_GN": Implemented(
        "tests/test_optimizer.py::test_rules_default_to_detectron_and_follow_maskrcnn_benchmark_keys_when_present"
    ),
    "SOLVER.BIAS_LR_FACTOR": Implemented(
        "tests/test_optimizer.py::test_bias_decay_and_factor_apply_as_in_maskrcnn_benchmark"
    ),
    "SOLVER.WEIGHT_DECAY_BIAS": Implemented(
        "tests/test_optimizer.py::test_bias_decay_and_factor_apply_as_in_maskrcnn_benchmark"
    ),
    "SOLVER.SCALE_MOMENTUM": Implemented(
        "tests/test_optimizer.py::test_without_scale_momentum_the_step_keeps_the_old_velocity"
    ),
    "SOLVER.SCALE_MOMENTUM_THRESHOLD": Implemented(
        "tests/test_optimizer.py::test_three_steps_match_hand_computed_detectron_update"
    ),
    "SOLVER.LOG_LR_CHANGE_THRESHOLD": Implemented(_OURS + "test_lr_changes_are_logged_above_the_threshold"),
    # ---- FAST_RCNN ----
    "FAST_RCNN.ROI_BOX_HEAD": Implemented(_MODEL_INVENTORY, (_not_in(
        ("VGG16.add_VGG16_roi_fc_head", "VGG_CNN_M_1024.add_VGG_CNN_M_1024_roi_fc_head"),
        "use a ResNet, 2mlp or Xconv1fc box head", MODEL_USES,
    ),)),  # fmt: skip
    "FAST_RCNN.MLP_HEAD_DIM": Implemented(
        "tests/test_roi_heads.py::test_2mlp_head_and_outputs_match_caffe2_with_nchw_fc6"
    ),
    "FAST_RCNN.CONV_HEAD_DIM": Implemented("tests/test_roi_heads.py::test_xconv1fc_head_matches_caffe2"),
    "FAST_RCNN.NUM_STACKED_CONVS": Implemented("tests/test_roi_heads.py::test_xconv1fc_head_matches_caffe2"),
    "FAST_RCNN.ROI_XFORM_METHOD": Implemented(
        "tests/test_roi_heads.py::test_fpn_2mlp_head_end_to_end_with_multilevel_roi_align",
        (_roi_align_only("the box head", (When("MODEL.RPN_ONLY", False), When("RETINANET.RETINANET_ON", False))),),
    ),
    "FAST_RCNN.ROI_XFORM_SAMPLING_RATIO": Implemented(
        "tests/test_roi_heads.py::test_fpn_2mlp_head_end_to_end_with_multilevel_roi_align"
    ),
    "FAST_RCNN.ROI_XFORM_RESOLUTION": Implemented(
        "tests/test_roi_heads.py::test_c4_heads_end_to_end_with_adaptive_roi_align"
    ),
    # ---- RPN ----
    "RPN.RPN_ON": Implemented("tests/test_config.py::test_detectron_inferred_values_are_set"),
    "RPN.SIZES": Implemented(_RPN_VS_CAFFE2),
    "RPN.STRIDE": Implemented(_RPN_VS_CAFFE2),
    "RPN.ASPECT_RATIOS": Implemented(_RPN_VS_CAFFE2),
    # ---- FPN ----
    "FPN.FPN_ON": Implemented(_RPN_VS_CAFFE2, (Limit(
        lambda value, _: value, "RetinaNet uses FPN (Detectron asserts it)", "set it True", ("training",),
        _RETINANET_ON,
    ),)),  # fmt: skip
    "FPN.DIM": Implemented(_FPN_VS_CAFFE2),
    "FPN.ZERO_INIT_LATERAL": Implemented(_INIT_WIRING),
    "FPN.COARSEST_STRIDE": Implemented(_INFERENCE_WIRING, (_RETINANET_COARSEST_STRIDE,)),
    "FPN.MULTILEVEL_ROIS": Implemented(
        "tests/test_roi_heads.py::test_fpn_2mlp_head_end_to_end_with_multilevel_roi_align"
    ),
    "FPN.ROI_CANONICAL_SCALE": Implemented(_INFERENCE_WIRING),
    "FPN.ROI_CANONICAL_LEVEL": Implemented(_INFERENCE_WIRING),
    "FPN.ROI_MAX_LEVEL": Implemented(_INFERENCE_WIRING),
    "FPN.ROI_MIN_LEVEL": Implemented(_INFERENCE_WIRING),
    "FPN.MULTILEVEL_RPN": Implemented(_RPN_VS_CAFFE2),
    "FPN.RPN_MAX_LEVEL": Implemented(_FPN_VS_CAFFE2),
    "FPN.RPN_MIN_LEVEL": Implemented(_FPN_VS_CAFFE2),
    "FPN.RPN_ASPECT_RATIOS": Implemented(_RPN_VS_CAFFE2),
    "FPN.RPN_ANCHOR_START_SIZE": Implemented(_RPN_VS_CAFFE2),
    "FPN.EXTRA_CONV_LEVELS": Implemented(_FPN_VS_CAFFE2),
    "FPN.USE_GN": Implemented(_FPN_VS_CAFFE2),
    # ---- MRCNN ----
    "MRCNN.ROI_MASK_HEAD": Implemented(_MODEL_INVENTORY, (_not_in(
        ("mask_rcnn_heads.mask_rcnn_fcn_head_v0up",), "use mask_rcnn_fcn_head_v0upshare or a v1up head", MODEL_USES,
    ),)),  # fmt: skip
    "MRCNN.RESOLUTION": Implemented(_TRAINING_WIRING),
    "MRCNN.ROI_XFORM_METHOD": Implemented(
        _INFERENCE_WIRING, (_roi_align_only("the mask head", (When("MODEL.MASK_ON", True),)),)
    ),
    "MRCNN.ROI_XFORM_RESOLUTION": Implemented(_INFERENCE_WIRING),
    "MRCNN.ROI_XFORM_SAMPLING_RATIO": Implemented(_INFERENCE_WIRING),
    "MRCNN.DIM_REDUCED": Implemented("tests/test_roi_heads.py::test_fcn_mask_head_matches_caffe2"),
    "MRCNN.DILATION": Implemented("tests/test_roi_heads.py::test_fcn_mask_head_matches_caffe2"),
    "MRCNN.UPSAMPLE_RATIO": Implemented(
        "tests/test_roi_heads.py::test_mask_outputs_upsampled_and_fc_variants_match_caffe2"
    ),
    "MRCNN.USE_FC_OUTPUT": Implemented(
        "tests/test_roi_heads.py::test_mask_outputs_upsampled_and_fc_variants_match_caffe2"
    ),
    "MRCNN.CONV_INIT": Implemented(_INIT_WIRING),
    "MRCNN.CLS_SPECIFIC_MASK": Implemented(
        "tests/test_losses.py::test_mask_loss_uses_the_class_channel_and_skips_ignored_cells"
    ),
    "MRCNN.WEIGHT_LOSS_MASK": Implemented(_TRAINING_WIRING),
    "MRCNN.THRESH_BINARIZE": Implemented("tests/test_masks.py::test_other_mask_resolution_and_threshold"),
    # ---- KRCNN ----
    "KRCNN.ROI_KEYPOINTS_HEAD": Implemented("tests/test_roi_heads.py::test_keypoint_rcnn_head_inventory", (_not_in(
        ("keypoint_rcnn_heads.add_ResNet_roi_conv5_head_for_keypoints",),
        "use keypoint_rcnn_heads.add_roi_pose_head_v1convX", MODEL_USES,
    ),)),  # fmt: skip
    "KRCNN.HEATMAP_SIZE": Implemented(_TRAINING_WIRING),
    "KRCNN.UP_SCALE": Implemented(_KEYPOINT_HEAD),
    "KRCNN.USE_DECONV": Implemented(_KEYPOINT_HEAD),
    "KRCNN.DECONV_DIM": Implemented(_KEYPOINT_HEAD),
    "KRCNN.USE_DECONV_OUTPUT": Implemented(_KEYPOINT_HEAD),
    "KRCNN.DILATION": OnlyWith(
        "KRCNN.ROI_KEYPOINTS_HEAD keypoint_rcnn_heads.add_ResNet_roi_conv5_head_for_keypoints",
        "Detectron dilates only that head's res5 stage (keypoint_rcnn_heads.py); tfdet refuses that head",
    ),
    "KRCNN.DECONV_KERNEL": Implemented(_KEYPOINT_HEAD),
    "KRCNN.NUM_KEYPOINTS": Implemented(_KEYPOINT_HEAD),
    "KRCNN.NUM_STACKED_CONVS": Implemented(_KEYPOINT_HEAD),
    "KRCNN.CONV_HEAD_DIM": Implemented(_KEYPOINT_HEAD),
    "KRCNN.CONV_HEAD_KERNEL": Implemented(_INIT_WIRING),
    "KRCNN.CONV_INIT": Implemented(_INIT_WIRING),
    "KRCNN.NMS_OKS": Refused(
        "Detectron's keypoint_results (core/test.py) then drops person detections by keypoint OKS NMS at 0.3, "
        "which tfdet does not implement", PREDICTION_USES, "set it False", (When("MODEL.KEYPOINTS_ON", True),),
    ),  # fmt: skip
    "KRCNN.KEYPOINT_CONFIDENCE": Implemented(
        "tests/test_evaluation.py::test_entry_layout_matches_detectron",
        (_one_of(("bbox", "logit", "prob"), ("inference", "evaluation")),),
    ),
    "KRCNN.ROI_XFORM_METHOD": Implemented(
        _INFERENCE_WIRING, (_roi_align_only("the keypoint head", (When("MODEL.KEYPOINTS_ON", True),)),)
    ),
    "KRCNN.ROI_XFORM_RESOLUTION": Implemented(_INFERENCE_WIRING),
    "KRCNN.ROI_XFORM_SAMPLING_RATIO": Implemented(_INFERENCE_WIRING),
    "KRCNN.MIN_KEYPOINT_COUNT_FOR_VALID_MINIBATCH": OnlyWith(
        _PROPOSAL_FILES_TRAINING,
        "only Detectron's data loader rejects minibatches with it; end-to-end training labels RoIs in-graph "
        "(ops/collect_and_distribute_fpn_rpn_proposals.py) and discards that validity",
    ),
    "KRCNN.INFERENCE_MIN_SIZE": Implemented(_INFERENCE_WIRING),
    "KRCNN.LOSS_WEIGHT": Implemented(_TRAINING_WIRING),
    "KRCNN.NORMALIZE_BY_VISIBLE_KEYPOINTS": Implemented(_TRAINING_WIRING),
    # ---- RFCN ----
    "RFCN.PS_GRID_SIZE": OnlyWith(
        "MODEL.TYPE rfcn", "read only by modeling/rfcn_heads.py; tfdet refuses MODEL.TYPE rfcn"
    ),
    # ---- RESNETS ----
    "RESNETS.NUM_GROUPS": Implemented(_BLOCK_VS_CAFFE2),
    "RESNETS.WIDTH_PER_GROUP": Implemented(_MODEL_INVENTORY),
    "RESNETS.STRIDE_1X1": Implemented(_BLOCK_VS_CAFFE2),
    "RESNETS.TRANS_FUNC": Implemented(_BLOCK_VS_CAFFE2),
    "RESNETS.STEM_FUNC": Implemented("tests/test_backbones.py::test_stem_matches_caffe2_reference"),
    "RESNETS.SHORTCUT_FUNC": Implemented(_BLOCK_VS_CAFFE2),
    "RESNETS.RES5_DILATION": Implemented("tests/test_backbones.py::test_resnet_body_output_level_and_shape"),
    # ---- GROUP_NORM ----
    "GROUP_NORM.DIM_PER_GP": Implemented(_BLOCK_VS_CAFFE2),
    "GROUP_NORM.NUM_GROUPS": Implemented(_FPN_VS_CAFFE2),
    "GROUP_NORM.EPSILON": Implemented(_INIT_WIRING),
    # ---- top level ----
    "NUM_GPUS": Implemented("tests/test_strategy.py::test_build_strategy_checks_replicas_and_environment"),
    "USE_NCCL": NoEffect(
        "modeling/optimizer.py all-reduces the gradients with NCCL or Caffe2's own ops: the same sums"
    ),
    "DEDUP_BOXES": OnlyWith(
        _FAST_RCNN_MODE, "core/test.py merges duplicate RoIs only when not MODEL.FASTER_RCNN (given proposals)"
    ),
    "BBOX_XFORM_CLIP": Refused(
        "tfdet decodes boxes with Detectron's default clip, log(1000 / 16)", MODEL_USES, "leave it at its default"
    ),
    "PIXEL_MEANS": Implemented(_INFERENCE_WIRING),
    "RNG_SEED": Implemented("tests/test_trainer.py::test_image_seeds_number_images_across_replicas"),
    "EPS": Refused(_NEVER_READ, MODEL_USES, "leave it at its default"),
    "ROOT_DIR": _VOC_EVALUATOR,
    "OUTPUT_DIR": Implemented("tests/test_train_cli.py::test_train_end_to_end_then_resume_from_a_checkpoint"),
    "MATLAB": _VOC_EVALUATOR,
    "MEMONGER": NoEffect("utils/train.py shares Caffe2 gradient blobs to save GPU memory: the same values"),
    "MEMONGER_SHARE_ACTIVATIONS": NoEffect("memonger also shares activation blobs: memory only"),
    "VIS": Implemented(_OURS + "test_vis_writes_detectron_pictures"),
    "VIS_TH": Implemented(_OURS + "test_vis_writes_detectron_pictures"),
    "EXPECTED_RESULTS": Refused(
        "Detectron's test_net compares metrics with these after testing and logs PASS/FAIL (with the scalar "
        "comparison inverted); tfdet does not implement that check", ("evaluation",),
        "leave it empty and compare metrics_<dataset>.json yourself",
    ),  # fmt: skip
    "EXPECTED_RESULTS_RTOL": _EXPECTED_ONLY,
    "EXPECTED_RESULTS_ATOL": _EXPECTED_ONLY,
    "EXPECTED_RESULTS_SIGMA_TOL": _EXPECTED_ONLY,
    "EXPECTED_RESULTS_EMAIL": _EXPECTED_ONLY,
    # Weight URLs are cached there (tfdet.weights.download); its default, Detectron's /tmp/detectron-download-cache,
    # means tfdet's cache ($TFDET_CACHE/detectron). PROPOSAL_FILES, Detectron's other URL keys, are refused.
    "DOWNLOAD_CACHE": Implemented("tests/test_download.py::test_download_cache_key_moves_the_cache"),
    "CLUSTER.ON_CLUSTER": NoEffect(
        "only moves the Cityscapes evaluator's temporary results file to /tmp (cityscapes_json_dataset_evaluator.py)"
    ),
    # ---- TFDET ----
    "TFDET.STRATEGY": Implemented(
        "tests/test_strategy.py::test_strategy_name_defaults_by_num_gpus_and_rejects_unknown_names"
    ),
    "TFDET.ROI_ALIGN_ALIGNED": Implemented(_INFERENCE_WIRING),
    "TFDET.DEVICE_MAP": Implemented("tests/test_device_map.py::test_inference_model_runs_mapped_parts_on_device_1"),
    "TFDET.MIXED_PRECISION": Implemented(
        "tests/test_mixed_precision.py::test_bfloat16_detections_agree_with_float32_within_the_stated_tolerance",
        (
            Limit(
                lambda value, _: value.strip().lower() in _MIXED_PRECISIONS,
                "not a precision tfdet.modeling.mixed_precision knows",
                "use '' or false (float32), true (the device's own), mixed_float16 or mixed_bfloat16", MODEL_USES,
            ),
        ),
    ),  # fmt: skip
    "TFDET.SIZE_DIVISIBILITY": Implemented(
        "tests/test_preprocessing.py::test_size_divisibility_pads_every_input_path",
        (
            Limit(
                lambda value, _: value <= 0,
                "FPN models pad their inputs to FPN.COARSEST_STRIDE (Detectron's im_list_to_blob)",
                "leave it 0 and set FPN.COARSEST_STRIDE", MODEL_USES, (When("FPN.FPN_ON", True),),
            ),
        ),
    ),  # fmt: skip
    "TFDET.DA_HEAD_INIT": Implemented(
        "tests/test_domain_adaptation.py::test_classifier_heads_shapes_names_and_initialisation"
    ),
    "TFDET.DA_IMG_FEATURES": Implemented(
        "tests/test_domain_adaptation.py::test_image_level_classifiers_on_resnet_stages"
    ),
    "TFDET.RECOMPUTE_BODY_STAGES": Implemented(
        "tests/test_rematerialization.py::test_recomputed_stages_give_the_same_losses_and_gradients"
    ),
    "TFDET.ALLOW_AFFINE_FROM_SCRATCH": Implemented(
        "tests/test_train_refusal.py::test_affine_body_trains_with_initial_weights_or_opt_out"
    ),
}


# ---- the check ------------------------------------------------------------------------------------------

def check_supported(cfg, use: str, datasets: Iterable[str] = ()) -> None:
    """Raise ConfigError naming every key whose value tfdet does not implement for `use`.

    `use` is one of USES; `datasets` are the dataset names an evaluation runs on. One line per key:
    `<KEY> = <value>: <reason>; <what to do>`.
    """
    if use not in USES:
        raise ValueError(f"use must be one of {', '.join(USES)}, got {use!r}")
    problems = [
        f"{key} = {_show(value)}: {rule.reason}; {rule.fix}"
        for key, rule, value in _rules_that_refuse(cfg, use, Check(cfg, tuple(datasets)))
    ]
    if problems:
        raise ConfigError("\n".join(problems))


def _rules_that_refuse(cfg, use, check):
    """(key, rule, value) of every rule for `use` that refuses the config's value."""
    for key, status in SUPPORT.items():
        value = _value(cfg, key)
        for rule, accepts in _rules(key, status):
            if use in rule.uses and all(when.holds(cfg) for when in rule.when) and not accepts(value, check):
                yield key, rule, value


def _rules(key, status):
    """(rule, accepts) pairs of a status: a Refused key accepts its default only, an Implemented one its limits."""
    if isinstance(status, Refused):
        yield status, lambda value, _: _same(value, _DEFAULT_VALUES[key])
    elif isinstance(status, Implemented):
        for limit in status.limits:
            yield limit, limit.accepts


_MISSING = object()


def _value(cfg, key):
    """The value of dotted `key` in `cfg`; the default when a section or key is absent (older configs)."""
    node = cfg
    for part in key.split("."):
        node = node.get(part, _MISSING) if hasattr(node, "get") else _MISSING
        if node is _MISSING:
            return _DEFAULT_VALUES[key]
    return node


def _same(a, b) -> bool:
    """Equal values; floats within rounding (a YAML round trip of log(1000 / 16) must still be the default)."""
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    return a == b


def _show(value) -> str:
    """A value as a config file would hold it: strings bare (empty as ''), sequences as (a, b)."""
    if isinstance(value, str):
        return value if value else "''"
    return str(value)
