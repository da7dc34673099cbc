"""build_model: a Detectron config -> its Keras model, chosen by MODEL.TYPE as Detectron's model_builder does."""

from tfdet.modeling.device_map import apply_device_map
from tfdet.modeling.generalized_rcnn import build_generalized_rcnn
from tfdet.modeling.mixed_precision import dtype_policy_scope, keep_float32
from tfdet.modeling.retinanet import build_retinanet

_BUILDERS = {"generalized_rcnn": build_generalized_rcnn, "retinanet": build_retinanet}


def build_model(cfg, training=False):
    """The model of `cfg` as a keras.Model: the inference graph, or with `training` the training graph.

    In both, the layers compute under TFDET.MIXED_PRECISION's Keras policy
    (`tfdet.modeling.mixed_precision`) and the parts TFDET.DEVICE_MAP names run on their devices
    (`tfdet.modeling.device_map`).
    """
    builder = _BUILDERS.get(cfg.MODEL.TYPE)
    if builder is None:
        known = ", ".join(repr(name) for name in _BUILDERS)
        raise ValueError(f"MODEL.TYPE {cfg.MODEL.TYPE!r} is not supported; tfdet builds {known}")
    with dtype_policy_scope(cfg):
        model = builder(cfg, training=training)
    return apply_device_map(cfg, keep_float32(cfg, model))
