"""FlattenDense: a fully connected layer over a flattened (h, w, c) RoI feature map (fc6)."""

import keras

from tfdet.layers.initialization import initializer_for


class FlattenDense(keras.layers.Layer):
    """Dense over `inputs` (R, h, w, c) flattened in NHWC order, with `kernel` (h*w*c, units).

    Detectron's fc6 flattens NCHW feature maps, so its weight columns are in (c, y, x) order;
    ours are in (y, x, c) order and porting reorders them. The layer records (h, w, c) so the
    reordering needs nothing but the layer itself.
    """

    def __init__(self, units, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        self.input_hwc = tuple(int(d) for d in input_shape[1:])
        height, width, channels = self.input_hwc
        self.kernel = self.add_weight(
            name="kernel", shape=(height * width * channels, self.units), initializer=initializer_for(self.kernel_initializer)
        )
        self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")

    def call(self, inputs):
        flat = keras.ops.reshape(inputs, (-1, self.kernel.shape[0]))
        return keras.ops.matmul(flat, keras.ops.cast(self.kernel, flat.dtype)) + keras.ops.cast(
            self.bias, flat.dtype
        )

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.units)

    def get_config(self):
        config = super().get_config()
        config.update(units=self.units, kernel_initializer=keras.initializers.serialize(self.kernel_initializer))
        return config
