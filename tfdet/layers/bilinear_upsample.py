"""Detectron's `BilinearInterpolation`: a transposed conv with a fixed bilinear kernel (kps_score).

Detectron upsamples heatmaps by an even factor s with a ConvTranspose of kernel 2s, stride s,
padding s/2 whose weights are the FCN bilinear filter on the channel diagonal and zero bias; the
weights are saved in its files (`kps_score_w`, `kps_score_b`) but never trained. Here it is a plain
`keras.layers.Conv2DTranspose` (so porting's ConvTranspose rule applies) initialised with
`BilinearKernel` and frozen.
"""

import keras
import numpy as np


def bilinear_filter(size):
    """The (size, size) FCN bilinear upsampling filter, as Detectron's `upsample_filt` builds it."""
    factor = (size + 1) // 2
    center = factor - 1 if size % 2 == 1 else factor - 0.5
    taps = 1 - np.abs(np.arange(size) - center) / factor
    return np.outer(taps, taps)


def bilinear_kernel(channels, up_scale):
    """Keras Conv2DTranspose kernel (2s, 2s, C, C): the bilinear filter from channel c to c only."""
    size = 2 * up_scale
    kernel = np.zeros((size, size, channels, channels), dtype=np.float32)
    kernel[:, :, np.arange(channels), np.arange(channels)] = bilinear_filter(size)[:, :, None]
    return kernel


@keras.saving.register_keras_serializable(package="tfdet")
class BilinearKernel(keras.initializers.Initializer):
    """Initialises a square (2s, 2s, C, C) transposed-conv kernel to Detectron's fixed bilinear one."""

    def __call__(self, shape, dtype=None):
        size, width, channels_out, channels_in = shape
        if size != width or channels_out != channels_in:
            raise ValueError(f"BilinearKernel needs a (2s, 2s, C, C) kernel, got {tuple(shape)}")
        return keras.ops.convert_to_tensor(bilinear_kernel(channels_in, size // 2), dtype=dtype)

    def get_config(self):
        return {}
