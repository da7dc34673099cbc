"""Conv bodies (ResNet/ResNeXt C4 and C5, FPN), registered in BODIES under Detectron's names on import."""

from tfdet.modeling.backbones import fpn, resnet
from tfdet.modeling.backbones.fpn import add_fpn, pyramid_levels
from tfdet.modeling.backbones.resnet import add_residual_block, add_stage, resnet_stages

__all__ = ["add_fpn", "add_residual_block", "add_stage", "fpn", "pyramid_levels", "resnet", "resnet_stages"]
