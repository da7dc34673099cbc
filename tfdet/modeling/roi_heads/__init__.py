"""RoI heads: box, mask and keypoint heads registered under Detectron's function names, and their outputs.

Importing this package fills BOX_HEADS, MASK_HEADS and KEYPOINT_HEADS (tfdet.modeling.registry).
"""

from tfdet.modeling.roi_heads.box_heads import FastRCNNOutputs, add_fast_rcnn_outputs
from tfdet.modeling.roi_heads.keypoint_heads import add_keypoint_outputs
from tfdet.modeling.roi_heads.mask_heads import MaskOutputs, add_mask_rcnn_outputs
