"""Domain-adaptive Faster R-CNN in the training graph (MODEL.DOMAIN_ADAPTATION_ON).

Chen et al., "Domain Adaptive Faster R-CNN for Object Detection in the Wild" (CVPR 2018), as
krumo's maskrcnn-benchmark fork builds it (`modeling/da_heads/`, `do_da_train`):
- The training model gets one more input, `is_source` (B,) bool: each replica's batch holds source
  images (TRAIN.DATASETS, with boxes) and target images (TRAIN.TARGET_DATASETS, images only),
  `tfdet.data.domain_pipeline`.
- Detection losses come from the source images only: the RPN losses on their rows, the Fast R-CNN
  losses on their sampled RoIs (`tfdet.layers.domain_selection`). Target images go through the
  same RPN, proposals and RoI sampling; without ground truth their RoIs are uniform random
  proposals labelled background, as the fork samples them.
- Image level: a gradient reversal (-DA_IMG_GRL_WEIGHT) on every body output (C4: res4; FPN:
  P2..P6), the shared image-level classifier on each, `loss_da_image`. With TFDET.DA_IMG_FEATURES
  (e.g. [res2, res3]) the reversal and classifiers sit on those ResNet stages' outputs instead, one
  classifier per stage (`res2_conv1_da`, ...: the channel counts differ): under an FPN the pyramid's
  normalised convs hide a low-level shift such as fog from a P-level classifier (docs/design.md).
- Instance level: a gradient reversal (-DA_INS_GRL_WEIGHT) on the box head's features of the
  sampled RoIs of every image (C4: res5 pooled, 2048-d; FPN: fc7/fc6), the instance-level
  classifier, `loss_da_instance`. (The fork's `subsample_for_da` re-draws BATCH_SIZE_PER_IMAGE
  RoIs from the already sampled ones, so its DA RoIs are the detection samples.)
- Consistency: the same two classifiers on +weight gradient-scaled copies of those features,
  sigmoid, `loss_da_consistency`.
- A loss is added only when its DA_*_LOSS_WEIGHT is > 0 (the fork's ablation switch); with the
  image / instance loss come the metrics `da_img_acc` / `da_ins_acc`, its classifier's accuracy.
The inference model (`build_model(cfg)`) has none of this: the DA layers live only here.
"""

import keras

from tfdet.batch_keys import SOURCE_FLAG
from tfdet.layers.domain_classifiers import (
    DomainConsistencyLoss,
    FoldSeeds,
    ImageDomainAccuracy,
    ImageDomainLoss,
    InstanceDomainAccuracy,
    InstanceDomainLoss,
    check_head_init,
    image_domain_classifier,
    instance_domain_classifier,
)
from tfdet.layers.domain_selection import SelectSourceImages, SourceRoILabels
from tfdet.layers.gradient_reversal import GradientReversal, GradientScale

RESNET_STAGES = ("res2", "res3", "res4", "res5")

# Dropout streams of the instance classifier's two passes (the detection draws use streams 0..2 of
# the same per-image seeds, `tfdet.layers.training_targets`).
ADVERSARIAL_STREAM, CONSISTENCY_STREAM = 3, 4


def is_domain_classifier_blob(name):
    """Whether a Detectron blob name belongs to the DA heads (the fork's `*_da` layers: conv1_da_w, fc3_da_b),
    which only domain-adaptive training models have."""
    return name.rsplit("_", 1)[0].endswith("_da")


def domain_inputs():
    """The extra keras.Input of the DA training model: `is_source` (B,) bool."""
    return {SOURCE_FLAG: keras.Input((), dtype="bool", name=SOURCE_FLAG)}


def check_domain_adaptation(cfg):
    """Clear errors for configs the DA training graph does not cover (the fork trains Faster R-CNN)."""
    model = cfg.MODEL
    if model.RPN_ONLY or not model.FASTER_RCNN:
        raise ValueError("MODEL.DOMAIN_ADAPTATION_ON needs Faster R-CNN (MODEL.FASTER_RCNN True, RPN_ONLY False)")
    if model.MASK_ON or model.KEYPOINTS_ON:
        raise NotImplementedError(
            "MODEL.DOMAIN_ADAPTATION_ON trains box detection only: set MASK_ON and KEYPOINTS_ON False"
        )
    if cfg.TRAIN.IMS_PER_BATCH < 2 or cfg.TRAIN.IMS_PER_BATCH % 2:
        raise ValueError(
            f"MODEL.DOMAIN_ADAPTATION_ON splits TRAIN.IMS_PER_BATCH into source and target halves: it must be even, "
            f"got {cfg.TRAIN.IMS_PER_BATCH}"
        )
    check_head_init(cfg.TFDET.DA_HEAD_INIT)
    _check_image_features(cfg)
    heads = model.DA_HEADS
    keys = ("DA_IMG_GRL_WEIGHT", "DA_INS_GRL_WEIGHT", "DA_IMG_LOSS_WEIGHT", "DA_INS_LOSS_WEIGHT", "DA_CST_LOSS_WEIGHT")
    for key in keys:
        if heads[key] < 0:
            raise ValueError(f"MODEL.DA_HEADS.{key} must be >= 0, got {heads[key]}")


def _check_image_features(cfg):
    """Clear errors for TFDET.DA_IMG_FEATURES entries that are no ResNet stage, repeat, or are frozen."""
    stages = tuple(cfg.TFDET.DA_IMG_FEATURES)
    for stage in stages:
        if stage not in RESNET_STAGES:
            raise ValueError(
                f"TFDET.DA_IMG_FEATURES: {stage!r} is not a ResNet stage; use some of {', '.join(RESNET_STAGES)}"
            )
        # A frozen stage passes no reversed gradient on: its classifier would learn and adapt nothing.
        if RESNET_STAGES.index(stage) + 2 <= cfg.TRAIN.FREEZE_AT or cfg.TRAIN.FREEZE_CONV_BODY:
            raise ValueError(
                f"TFDET.DA_IMG_FEATURES: {stage} is frozen (TRAIN.FREEZE_AT {cfg.TRAIN.FREEZE_AT}, "
                f"FREEZE_CONV_BODY {cfg.TRAIN.FREEZE_CONV_BODY}): the reversal could not adapt it"
            )
    if len(set(stages)) != len(stages):
        raise ValueError(f"TFDET.DA_IMG_FEATURES names a stage twice: {list(stages)}")


def image_level_features(cfg, body):
    """{key: (B, H, W, C) tensor} the image-level classifiers see: the body's outputs by level (the fork),
    or the ResNet stages of TFDET.DA_IMG_FEATURES by name."""
    stages = tuple(cfg.TFDET.DA_IMG_FEATURES)
    if not stages:
        return {level: body.features[level] for level in sorted(body.features)}
    missing = [stage for stage in stages if stage not in body.stages]
    if missing:
        raise ValueError(
            f"TFDET.DA_IMG_FEATURES: {cfg.MODEL.CONV_BODY} has no stage {', '.join(missing)} "
            f"(it has {', '.join(body.stages) or 'no ResNet stages'})"
        )
    return {stage: body.stages[stage] for stage in stages}


def _image_classifiers(cfg, body, features):
    """{name: image-level classifier} for `image_level_features`: one shared by the body's levels (they
    have one channel count, the fork's `conv1_da`), or one per ResNet stage (`res2_conv1_da`)."""
    init = cfg.TFDET.DA_HEAD_INIT
    if not cfg.TFDET.DA_IMG_FEATURES:
        shared = image_domain_classifier(body.dim, init)
        return dict.fromkeys(features, shared)
    return {
        stage: image_domain_classifier(tensor.shape[-1], init, name=f"da_img_head_{stage}", prefix=f"{stage}_")
        for stage, tensor in features.items()
    }


def source_images_only(inputs, tensors):
    """The source images' rows of `tensors` (each images first)."""
    return SelectSourceImages(name="da_source_images")([inputs[SOURCE_FLAG], *tensors])


def source_roi_labels(inputs, labels):
    """The sampled RoIs' labels with the target images' RoIs set to padding (-1)."""
    return SourceRoILabels(name="da_source_roi_labels")([labels, inputs[SOURCE_FLAG]])


def add_domain_adaptation_losses(cfg, body, box_head, roi_labels, inputs):
    """{name: scalar} of the DA heads' losses and metrics (see the module docstring).

    `roi_labels` (B, R): the labels of the sampled RoIs of every image (-1 padding), whose box-head
    features `box_head.features` (B*R, dim) are, image-major.
    """
    heads = cfg.MODEL.DA_HEADS
    is_source, seeds = inputs[SOURCE_FLAG], inputs["seeds"]
    image_features = image_level_features(cfg, body)
    image_heads = _image_classifiers(cfg, body, image_features)
    instance_head = instance_domain_classifier(box_head.dim, cfg.TFDET.DA_HEAD_INIT)
    losses = {}

    if heads.DA_IMG_LOSS_WEIGHT > 0:
        reverse = GradientReversal(heads.DA_IMG_GRL_WEIGHT, name="da_img_grl")
        logits = [image_heads[name](reverse(tensor)) for name, tensor in image_features.items()]
        losses["loss_da_image"] = ImageDomainLoss(heads.DA_IMG_LOSS_WEIGHT, name="da_image_loss")([*logits, is_source])
        losses["da_img_acc"] = ImageDomainAccuracy(name="da_image_accuracy")([*logits, is_source])

    if heads.DA_INS_LOSS_WEIGHT > 0:
        reversed_features = GradientReversal(heads.DA_INS_GRL_WEIGHT, name="da_ins_grl")(box_head.features)
        logits = instance_head([reversed_features, FoldSeeds(ADVERSARIAL_STREAM, name="da_ins_seeds")(seeds)])
        losses["loss_da_instance"] = InstanceDomainLoss(heads.DA_INS_LOSS_WEIGHT, name="da_instance_loss")(
            [logits, roi_labels, is_source]
        )
        losses["da_ins_acc"] = InstanceDomainAccuracy(name="da_instance_accuracy")([logits, roi_labels, is_source])

    if heads.DA_CST_LOSS_WEIGHT > 0:
        scale = GradientScale(heads.DA_IMG_GRL_WEIGHT, name="da_img_consistency_grl")
        image_probs = [
            keras.layers.Activation("sigmoid", name=f"da_img_prob_{name}")(image_heads[name](scale(tensor)))
            for name, tensor in image_features.items()
        ]
        scaled_features = GradientScale(heads.DA_INS_GRL_WEIGHT, name="da_ins_consistency_grl")(box_head.features)
        instance_logits = instance_head([scaled_features, FoldSeeds(CONSISTENCY_STREAM, name="da_cst_seeds")(seeds)])
        instance_probs = keras.layers.Activation("sigmoid", name="da_ins_prob")(instance_logits)
        losses["loss_da_consistency"] = DomainConsistencyLoss(heads.DA_CST_LOSS_WEIGHT, name="da_consistency_loss")(
            [*image_probs, instance_probs, roi_labels]
        )
    return losses
