"""AffineChannel: Detectron's frozen batch norm, exactly y = x * scale + bias per channel."""

import keras


class AffineChannel(keras.layers.Layer):
    """Per-channel `x * scale + bias` with no epsilon or statistics (BN folded into scale/bias).

    Detectron trains with these frozen, so the weights are non-trainable by default. Porting maps
    the blobs `<name>_s` and `<name>_b` onto `scale` and `bias`. `folded` (set by
    CaffeConv2D.fold_affine) means the preceding convolution applies them: the layer passes through.
    """

    def __init__(self, trainable=False, **kwargs):
        super().__init__(trainable=trainable, **kwargs)
        self.folded = False

    def build(self, input_shape):
        channels = input_shape[-1]
        self.scale = self.add_weight(name="scale", shape=(channels,), initializer="ones")
        self.bias = self.add_weight(name="bias", shape=(channels,), initializer="zeros")

    def call(self, inputs):
        if self.folded:
            return inputs
        return inputs * keras.ops.cast(self.scale, inputs.dtype) + keras.ops.cast(self.bias, inputs.dtype)
