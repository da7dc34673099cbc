"""The builders of each configurable part, registered under Detectron's function names, and the
`Registry` (names -> objects) that holds them (also the ResNet variants' STEM/TRANS/SHORTCUT_FUNC).

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
import difflib
from collections.abc import Callable


class UnknownNameError(LookupError):
    """A name that nothing was registered under; the message lists the known names."""


class Registry:
    """Names -> objects, filled with the `register(name)` decorator and read with `get(name)`."""

    def __init__(self, kind: str):
        self._kind = kind
        self._entries: dict[str, object] = {}

    def register(self, name: str) -> Callable[[object], object]:
        """A decorator registering its target under `name` (each name once) and returning it unchanged."""

        def add(target: object) -> object:
            if name in self._entries:
                raise ValueError(f"{self._kind} '{name}' is already registered")
            self._entries[name] = target
            return target

        return add

    def get(self, name: str) -> object:
        """The object registered under `name`; UnknownNameError naming the closest and all known names."""
        try:
            return self._entries[name]
        except KeyError:
            pass
        close = difflib.get_close_matches(name, list(self._entries), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."
        known = ", ".join(self.names()) or "none"
        raise UnknownNameError(f"Unknown {self._kind} '{name}'{hint} Known: {known}")

    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        return tuple(sorted(self._entries))

    def __contains__(self, name: object) -> bool:
        return name in self._entries


BODIES = Registry("MODEL.CONV_BODY")
BOX_HEADS = Registry("FAST_RCNN.ROI_BOX_HEAD")
MASK_HEADS = Registry("MRCNN.ROI_MASK_HEAD")
KEYPOINT_HEADS = Registry("KRCNN.ROI_KEYPOINTS_HEAD")


@dataclasses.dataclass
class BodyOutput:
    """A conv body's outputs: feature maps by level (stride 2**level) sharing one channel count.

    C4 bodies give {4: res4_5_sum}; FPN bodies give {2: P2, ..., 6: P6} (P6 only for the RPN).
    `stages` are the ResNet stage outputs under them by stage name ({"res2": res2_2_sum, ...}), for
    heads that read the backbone itself (domain adaptation's TFDET.DA_IMG_FEATURES).
    """

    features: dict
    dim: int
    stages: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RoIHeadOutput:
    """An RoI head's per-RoI features, their channel count, and layers other heads may share."""

    features: object
    dim: int
    shared: dict = dataclasses.field(default_factory=dict)
