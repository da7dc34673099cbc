"""build_model: a Detectron config -> its Keras model, chosen by MODEL.TYPE as Detectron's model_builder does."""

from tfdet.config.errors import ConfigError
from tfdet.modeling.device_map import apply_device_map
from tfdet.modeling.generalized_rcnn import build_generalized_rcnn
from tfdet.modeling.mixed_precision import dtype_policy_scope, keep_float32
from tfdet.modeling.retinanet import build_retinanet
from tfdet.modeling.retinanet_training import build_retinanet_training_model
from tfdet.modeling.training_graph import build_training_model

# MODEL.TYPE -> (inference graph builder, training graph builder): the model families, side by side.
MODEL_FAMILIES = {
    "generalized_rcnn": (build_generalized_rcnn, build_training_model),
    "retinanet": (build_retinanet, build_retinanet_training_model),
}


def build_model(cfg, training=False):
    """The model of `cfg` as a keras.Model: the inference graph, or with `training` the training graph.

    In both, the layers compute under TFDET.MIXED_PRECISION's Keras policy
    (`tfdet.modeling.mixed_precision`) and the parts TFDET.DEVICE_MAP names run on their devices
    (`tfdet.modeling.device_map`).

    Raises ConfigError when the config's values cannot be built: the builders' ValueError or KeyError
    (GroupNorm groups that do not divide the channels, ...) is the config's, named in one line.
    """
    builders = MODEL_FAMILIES.get(cfg.MODEL.TYPE)
    if builders is None:
        known = ", ".join(repr(name) for name in MODEL_FAMILIES)
        raise ConfigError(f"MODEL.TYPE {cfg.MODEL.TYPE!r} is not supported; tfdet builds {known}")
    try:
        with dtype_policy_scope(cfg):
            model = builders[1](cfg) if training else builders[0](cfg)
    except ConfigError:
        raise
    except (ValueError, KeyError) as error:  # the config is the builders' only input
        raise ConfigError(f"this config's model cannot be built: {type(error).__name__}: {error}") from error
    return apply_device_map(cfg, keep_float32(cfg, model))
