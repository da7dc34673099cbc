"""The builders of each configurable part, registered under Detectron's function names.

Contracts (KerasTensors in, KerasTensors out; every layer named after its Detectron blob):

* BODIES[MODEL.CONV_BODY](cfg, images) -> BodyOutput. `images` is (B, H, W, 3) BGR minus
  PIXEL_MEANS, H and W multiples of FPN.COARSEST_STRIDE for FPN bodies.
* BOX_HEADS[FAST_RCNN.ROI_BOX_HEAD](cfg, body, rois, box_indices) -> RoIHeadOutput with
  `features` (R, dim). `rois` (R, 4) x1,y1,x2,y2 in input pixels; `box_indices` (R,) int32.
* MASK_HEADS[MRCNN.ROI_MASK_HEAD](cfg, body, rois, box_indices, box_head) -> RoIHeadOutput with
  `features` (R, M, M, dim); `box_head` is the box head's RoIHeadOutput (C4's v0upshare reuses
  the res5 layers it carries in `shared`).
* KEYPOINT_HEADS[KRCNN.ROI_KEYPOINTS_HEAD](cfg, body, rois, box_indices) -> RoIHeadOutput with
  `features` (R, h, w, dim).
"""

import dataclasses

from tfdet.utils.registry import Registry

BODIES = Registry("MODEL.CONV_BODY")
BOX_HEADS = Registry("FAST_RCNN.ROI_BOX_HEAD")
MASK_HEADS = Registry("MRCNN.ROI_MASK_HEAD")
KEYPOINT_HEADS = Registry("KRCNN.ROI_KEYPOINTS_HEAD")


@dataclasses.dataclass
class BodyOutput:
    """A conv body's outputs: feature maps by level (stride 2**level) sharing one channel count.

    C4 bodies give {4: res4_5_sum}; FPN bodies give {2: P2, ..., 6: P6} (P6 only for the RPN).
    """

    features: dict
    dim: int


@dataclasses.dataclass
class RoIHeadOutput:
    """An RoI head's per-RoI features, their channel count, and layers other heads may share."""

    features: object
    dim: int
    shared: dict = dataclasses.field(default_factory=dict)
