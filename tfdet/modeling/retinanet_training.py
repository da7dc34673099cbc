"""RetinaNet's training graph: Detectron's `build_generic_retinanet_model` in training, one Keras model.

`build_retinanet_training_model(cfg)` (also `build_model(cfg, training=True)` for MODEL.TYPE retinanet)
builds the body and `add_retinanet_heads` as the inference model does, so every weight-carrying layer has
the same Detectron name in both (`copy_weights_by_blob_name` moves weights between them), and adds
Detectron's targets and losses (`RetinaNetLosses`).

Inputs: the R-CNN training model's (`training_graph.training_inputs`; `seeds` is unused: RetinaNet draws
nothing). Outputs, float32 scalars named as Detectron's json_stats: `loss_retnet_cls` (the sum over levels
of `fl_fpn<k>`), `loss_retnet_bbox` (of `retnet_loss_bbox_fpn<k>`), and the metrics `retnet_fg_num`,
`retnet_bg_num`. The loss to minimise is the sum of the `loss_*` terms (`training_graph.loss_terms`).
"""

import keras

from tfdet.config.errors import ConfigError
from tfdet.layers.retinanet_training_targets import RetinaNetLosses
from tfdet.layers.training_targets import GroundTruthValid
from tfdet.modeling.registry import BODIES
from tfdet.modeling.retinanet import add_retinanet_heads, retinanet_cell_anchors, retinanet_levels
from tfdet.modeling.training_inputs import training_inputs
from tfdet.ops.retinanet_targets import field_size


def _refusals(cfg):
    """One line per config value Detectron's RetinaNet training does not honour or cannot run with."""
    problems = []
    if not cfg.RETINANET.RETINANET_ON:
        problems.append("RETINANET.RETINANET_ON = False: Detectron's data loader builds RetinaNet blobs only with "
                        "it True; set it True for MODEL.TYPE retinanet")
    if cfg.RPN.RPN_ON:
        problems.append("MODEL.FASTER_RCNN / MODEL.RPN_ONLY: an RPN takes precedence over RetinaNet in Detectron's "
                        "data loader (roi_data/minibatch.py); set both False for MODEL.TYPE retinanet")
    if not cfg.FPN.FPN_ON:
        problems.append("FPN.FPN_ON = False: RetinaNet uses FPN (Detectron asserts it); set it True")
    coarsest = 2**cfg.FPN.RPN_MAX_LEVEL
    if cfg.FPN.COARSEST_STRIDE % coarsest:
        problems.append(f"FPN.COARSEST_STRIDE = {cfg.FPN.COARSEST_STRIDE}: RetinaNet training needs a multiple of "
                        f"2**FPN.RPN_MAX_LEVEL = {coarsest}, else level {cfg.FPN.RPN_MAX_LEVEL}'s map is larger than "
                        f"Detectron's cropped labels (int(size / stride)); set it to {coarsest}, as the zoo configs do")
    if cfg.TRAIN.FREEZE_CONV_BODY:
        problems.append("TRAIN.FREEZE_CONV_BODY = True: Detectron's RetinaNet builder ignores it and trains the body "
                        "(modeling/model_builder.py: retinanet); set it False")
    for key, value in (("MODEL.MASK_ON", cfg.MODEL.MASK_ON), ("MODEL.KEYPOINTS_ON", cfg.MODEL.KEYPOINTS_ON),
                       ("MODEL.DOMAIN_ADAPTATION_ON", cfg.MODEL.DOMAIN_ADAPTATION_ON)):
        if value:
            problems.append(f"{key} = True: a RetinaNet has no such heads; set it False")
    return problems


def build_retinanet_training_model(cfg):
    """The RetinaNet training graph of `cfg` as a keras.Model (inputs and outputs in the module docstring).

    Raises ConfigError, one line per key, for what Detectron's RetinaNet training would not do.
    """
    problems = _refusals(cfg)
    if problems:
        raise ConfigError("\n".join(problems))
    inputs = training_inputs(cfg)
    body = BODIES.get(cfg.MODEL.CONV_BODY)(cfg, inputs["images"])
    heads = add_retinanet_heads(cfg, body)
    gt_valid = GroundTruthValid(name="gt_valid")(inputs["gt_classes"], inputs["num_gt"])

    levels = retinanet_levels(cfg)
    cell_anchors = retinanet_cell_anchors(cfg)
    retina = cfg.RETINANET
    losses = RetinaNetLosses(
        strides=[2**level for level in levels],
        cell_anchors=[cell_anchors[level] for level in levels],
        field_sizes=[field_size(2**level, cfg.TRAIN.MAX_SIZE, cfg.FPN.COARSEST_STRIDE) for level in levels],
        num_classes=cfg.MODEL.NUM_CLASSES,
        positive_overlap=retina.POSITIVE_OVERLAP,
        negative_overlap=retina.NEGATIVE_OVERLAP,
        gamma=retina.LOSS_GAMMA,
        alpha=retina.LOSS_ALPHA,
        softmax=retina.SOFTMAX,
        bbox_reg_beta=retina.BBOX_REG_BETA,
        bbox_reg_weight=retina.BBOX_REG_WEIGHT,
        class_specific_bbox=retina.CLASS_SPECIFIC_BBOX,
        name="retnet_losses",
    )([
        *(t for level in levels for t in heads[level]),
        inputs["images"], inputs["gt_boxes"], inputs["gt_classes"], inputs["gt_is_crowd"], gt_valid,
    ])
    names = ("loss_retnet_cls", "loss_retnet_bbox", "retnet_fg_num", "retnet_bg_num")
    return keras.Model(inputs, dict(zip(names, losses)), name="retinanet_training")
