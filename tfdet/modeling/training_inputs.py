"""The training graphs' inputs, shared by the model families: the training pipeline's batch dict (see
`tfdet.modeling.training_graph`'s docstring) plus the per-image sampling `seeds`."""

import keras

from tfdet.modeling.domain_adaptation import domain_inputs


def training_inputs(cfg):
    """The keras.Input dict a training graph of `cfg` takes (gt_masks with MASK_ON, gt_keypoints with KEYPOINTS_ON,
    is_source with DOMAIN_ADAPTATION_ON)."""
    inputs = {
        "images": keras.Input((None, None, 3), name="images"),
        "image_info": keras.Input((3,), name="image_info"),
        "gt_boxes": keras.Input((None, 4), name="gt_boxes"),
        "gt_classes": keras.Input((None,), dtype="int32", name="gt_classes"),
        "gt_is_crowd": keras.Input((None,), dtype="bool", name="gt_is_crowd"),
        "num_gt": keras.Input((), dtype="int32", name="num_gt"),
        "seeds": keras.Input((2,), dtype="int64", name="seeds"),
    }
    if cfg.MODEL.MASK_ON:
        inputs["gt_masks"] = keras.Input((None, None, None), dtype="uint8", name="gt_masks")
    if cfg.MODEL.KEYPOINTS_ON:
        inputs["gt_keypoints"] = keras.Input((None, cfg.KRCNN.NUM_KEYPOINTS, 3), name="gt_keypoints")
    if cfg.MODEL.DOMAIN_ADAPTATION_ON:
        inputs.update(domain_inputs())
    return inputs
