"""RetinaNet's training graph: Detectron's `build_generic_retinanet_model` in training, one Keras model.

`build_retinanet_training_model(cfg)` (also `build_model(cfg, training=True)` for MODEL.TYPE retinanet)
builds the body and `add_retinanet_heads` as the inference model does, so every weight-carrying layer has
the same Detectron name in both (`blob_transfer.copy_weights_by_blob_name` moves weights between them),
and adds Detectron's targets and losses (`RetinaNetLosses`).

Inputs: the R-CNN training model's (`training_inputs.training_inputs`; `seeds` is unused: RetinaNet draws
nothing). Outputs, float32 scalars named as Detectron's json_stats: `loss_retnet_cls` (the sum over levels
of `fl_fpn<k>`), `loss_retnet_bbox` (of `retnet_loss_bbox_fpn<k>`), and the metrics `retnet_fg_num`,
`retnet_bg_num`. The loss to minimise is the sum of the `loss_*` terms (`training_graph.loss_terms`).
"""

import keras

from tfdet.layers.retinanet_training_targets import RetinaNetLosses
from tfdet.layers.training_targets import GroundTruthValid
from tfdet.modeling.registry import BODIES
from tfdet.modeling.retinanet import add_retinanet_heads, retinanet_cell_anchors, retinanet_levels
from tfdet.modeling.training_inputs import training_inputs
from tfdet.ops.retinanet_targets import field_size


def build_retinanet_training_model(cfg):
    """The RetinaNet training graph of `cfg` as a keras.Model (inputs and outputs in the module docstring).

    It checks nothing, as the R-CNN training builder: what Detectron's RetinaNet training would not do is
    refused by `config.support` at the point of use (the Trainer, `tfdet.train`).
    """
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
