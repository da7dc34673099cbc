"""The model an export writes: built from the config, every weight loaded from the file, and its classes."""

from tfdet.config.support import check_supported
from tfdet.weights.weights_file import load_weights, weights_file


def check_exportable(cfg):
    """ValueError (or tfdet.config.ConfigError for a key export does not implement) unless `cfg`'s model
    returns detections from its own proposals."""
    check_supported(cfg, "export")
    if cfg.MODEL.TYPE == "generalized_rcnn" and (not cfg.RPN.RPN_ON or cfg.MODEL.RPN_ONLY):
        raise ValueError(
            "only models that return detections from their own proposals can be exported (RetinaNet, "
            "Faster/Mask/Keypoint R-CNN; not RPN-only or Fast R-CNN)"
        )


def load_model_for_export(cfg, weights, dataset_json=None):
    """(keras model, ModelCategories) of `cfg` with `weights` (ours, a Detectron .pkl, a URL or catalog:// name).

    The classes are `model_categories`' choice: the weights' stored classes, else `dataset_json`'s categories,
    else COCO's for 81 classes, else ids. Raises FileNotFoundError for missing weights, ValueError for a bad
    `dataset_json` or one that disagrees with the classes the weights store.
    """
    from tfdet.data.model_labels import weights_categories
    from tfdet.layers import placeholder_initialization
    from tfdet.modeling import build_model

    source = weights_file(weights, cfg.DOWNLOAD_CACHE)  # a URL or catalog:// name: the checked download
    categories = weights_categories(cfg.MODEL.NUM_CLASSES, cfg.MODEL.KEYPOINTS_ON, source.path, dataset_json)
    with placeholder_initialization():  # every weight comes from the file
        model = build_model(cfg)
    load_weights(model, cfg, source)  # resolved above: checked once
    return model, categories
