"""RoIFeatureTransform: Detectron's RoI pooling step (RoIAlign on one level, or FPN multi-level)."""

import keras

from tfdet.ops.fpn_levels import multilevel_roi_align
from tfdet.ops.roi_align import roi_align


class RoIFeatureTransform(keras.layers.Layer):
    """RoIAlign of `rois` from feature maps of the given pyramid `levels` (stride 2**level).

    Called on `[map_level_0, ..., map_level_n, rois (R, 4), box_indices (R,)]`. One level: plain
    RoIAlign at scale 1/2**level (C4). Several: each RoI is pooled from the level Detectron's
    `map_rois_to_fpn_levels` picks, results returned in the RoIs' order. `sampling_ratio` 0 is
    the adaptive grid; `aligned` selects detectron2's half-pixel variant.

    Inputs are not cast to the layer's compute dtype (autocast off): under a mixed precision policy
    the feature maps arrive in 16 bits and are read as such, while the RoIs stay float32, so the
    sampling positions and bilinear weights are computed in float32.
    """

    def __init__(
        self,
        resolution,
        sampling_ratio,
        levels,
        canonical_scale=224,
        canonical_level=4,
        aligned=False,
        **kwargs,
    ):
        super().__init__(autocast=False, **kwargs)
        self.resolution = int(resolution)
        self.sampling_ratio = int(sampling_ratio)
        self.levels = tuple(int(level) for level in levels)
        self.canonical_scale = canonical_scale
        self.canonical_level = canonical_level
        self.aligned = bool(aligned)

    def call(self, inputs):
        *feature_maps, rois, box_indices = inputs
        if len(self.levels) == 1:
            return roi_align(
                feature_maps[0],
                rois,
                box_indices,
                self.resolution,
                1.0 / 2 ** self.levels[0],
                self.sampling_ratio,
                aligned=self.aligned,
            )
        return multilevel_roi_align(
            feature_maps,
            rois,
            box_indices,
            self.resolution,
            self.sampling_ratio,
            self.levels[0],
            self.levels[-1],
            canonical_scale=self.canonical_scale,
            canonical_level=self.canonical_level,
            aligned=self.aligned,
        )

    def compute_output_shape(self, input_shapes):
        channels = input_shapes[0][-1]
        return (input_shapes[-2][0], self.resolution, self.resolution, channels)

    def get_config(self):
        config = super().get_config()
        config.update(
            resolution=self.resolution,
            sampling_ratio=self.sampling_ratio,
            levels=self.levels,
            canonical_scale=self.canonical_scale,
            canonical_level=self.canonical_level,
            aligned=self.aligned,
        )
        return config
