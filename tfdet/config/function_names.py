"""The Detectron function names that config keys may hold, and Detectron's legacy spellings of them.

Detectron resolves these strings with `getattr` on its modeling modules; tfdet checks them against the
names Detectron defines (modeling/model_builder.py, ResNet.py, FPN.py, VGG16.py, VGG_CNN_M_1024.py,
fast_rcnn_heads.py, mask_rcnn_heads.py, keypoint_rcnn_heads.py). Every name Detectron defines is
accepted here, VGG ones included; whether tfdet can build a name is the model builder's registry's
business. '' (Detectron's default) means "none".
"""

import warnings

from tfdet.config.errors import ConfigError, ConfigWarning
from tfdet.config.suggestions import closest, did_you_mean

FUNCTION_NAMES = {
    "MODEL.TYPE": ("generalized_rcnn", "retinanet", "rfcn"),
    "MODEL.CONV_BODY": (
        "ResNet.add_ResNet50_conv4_body",
        "ResNet.add_ResNet50_conv5_body",
        "ResNet.add_ResNet101_conv4_body",
        "ResNet.add_ResNet101_conv5_body",
        "ResNet.add_ResNet152_conv5_body",
        "FPN.add_fpn_ResNet50_conv5_body",
        "FPN.add_fpn_ResNet50_conv5_P2only_body",
        "FPN.add_fpn_ResNet101_conv5_body",
        "FPN.add_fpn_ResNet101_conv5_P2only_body",
        "FPN.add_fpn_ResNet152_conv5_body",
        "FPN.add_fpn_ResNet152_conv5_P2only_body",
        "VGG16.add_VGG16_conv5_body",
        "VGG_CNN_M_1024.add_VGG_CNN_M_1024_conv5_body",
    ),
    "FAST_RCNN.ROI_BOX_HEAD": (
        "fast_rcnn_heads.add_roi_2mlp_head",
        "fast_rcnn_heads.add_roi_Xconv1fc_head",
        "fast_rcnn_heads.add_roi_Xconv1fc_gn_head",
        "ResNet.add_ResNet_roi_conv5_head",
        "VGG16.add_VGG16_roi_fc_head",
        "VGG_CNN_M_1024.add_VGG_CNN_M_1024_roi_fc_head",
    ),
    "MRCNN.ROI_MASK_HEAD": (
        "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs",
        "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs_gn",
        "mask_rcnn_heads.mask_rcnn_fcn_head_v1up",
        "mask_rcnn_heads.mask_rcnn_fcn_head_v0upshare",
        "mask_rcnn_heads.mask_rcnn_fcn_head_v0up",
    ),
    "KRCNN.ROI_KEYPOINTS_HEAD": (
        "keypoint_rcnn_heads.add_roi_pose_head_v1convX",
        "keypoint_rcnn_heads.add_ResNet_roi_conv5_head_for_keypoints",
    ),
    "RESNETS.TRANS_FUNC": ("bottleneck_transformation", "bottleneck_gn_transformation"),
    "RESNETS.STEM_FUNC": ("basic_bn_stem", "basic_gn_stem"),
    "RESNETS.SHORTCUT_FUNC": ("basic_bn_shortcut", "basic_gn_shortcut"),
}

# Detectron's modeling/name_compat.py: functions that were renamed or moved.
RENAMED_FUNCTIONS = {
    "mask_rcnn_heads.ResNet_mask_rcnn_fcn_head_v1up4convs": "mask_rcnn_heads.mask_rcnn_fcn_head_v1up4convs",
    "mask_rcnn_heads.ResNet_mask_rcnn_fcn_head_v1up": "mask_rcnn_heads.mask_rcnn_fcn_head_v1up",
    "mask_rcnn_heads.ResNet_mask_rcnn_fcn_head_v0upshare": "mask_rcnn_heads.mask_rcnn_fcn_head_v0upshare",
    "mask_rcnn_heads.ResNet_mask_rcnn_fcn_head_v0up": "mask_rcnn_heads.mask_rcnn_fcn_head_v0up",
    "head_builder.add_roi_2mlp_head": "fast_rcnn_heads.add_roi_2mlp_head",
}

# Detectron's model_builder.py: deprecated model types that only call generalized_rcnn; value: its hint.
DEPRECATED_MODEL_TYPES = {
    "fast_rcnn": "",
    "faster_rcnn": "with MODEL.FASTER_RCNN: True",
    "mask_rcnn": "with MODEL.MASK_ON: True",
    "keypoint_rcnn": "with MODEL.KEYPOINTS_ON: True",
    "mask_and_keypoint_rcnn": "with MODEL.MASK_ON: True and MODEL.KEYPOINTS_ON: True",
    "rpn": "with MODEL.RPN_ONLY: True",
    "fpn_rpn": "with MODEL.RPN_ONLY: True and FPN enabled",
}


def resolve_function_name(full_key: str, name: str) -> str:
    """The current Detectron name for `name` under `full_key`; warns on legacy names, raises on unknown."""
    if name == "":
        return name
    if full_key == "MODEL.TYPE" and name in DEPRECATED_MODEL_TYPES:
        hint = DEPRECATED_MODEL_TYPES[name]
        new_name = "generalized_rcnn"
        warnings.warn(
            f"{full_key}: '{name}' is deprecated in Detectron; using '{new_name}'"
            + (f" (set it {hint})" if hint else ""),
            ConfigWarning,
            stacklevel=4,
        )
        return new_name
    if name in RENAMED_FUNCTIONS:
        new_name = RENAMED_FUNCTIONS[name]
        warnings.warn(
            f"{full_key}: Detectron renamed '{name}' to '{new_name}'; using '{new_name}'",
            ConfigWarning,
            stacklevel=4,
        )
        name = new_name
    known = FUNCTION_NAMES[full_key]
    if name not in known:
        hint = did_you_mean(closest(name, known)) or "."
        raise ConfigError(
            f"Unknown function name '{name}' for config key '{full_key}'{hint} Known names: "
            + ", ".join(known)
        )
    return name
