"""Conv2D with Caffe2's explicit symmetric padding and channel groups (ResNeXt)."""

import keras
import tensorflow as tf

from tfdet.layers.initialization import initializer_for


class CaffeConv2D(keras.layers.Layer):
    """Convolution padded by `padding` pixels on every side, as Caffe2's `Conv(pad=p)`.

    TensorFlow's 'SAME' pads stride-2 convolutions asymmetrically (more at the bottom/right),
    which shifts every feature by half a pixel against Detectron; explicit padding does not.
    `groups` > 1 splits channels into groups (ResNeXt's grouped 3x3); `split_groups` (default:
    when no GPU is visible) runs one convolution per group. The kernel is HWIO with
    I = in_channels / groups; porting transposes Caffe2's OIHW blobs with (2, 3, 1, 0).
    `fold_affine` makes it apply the AffineChannel that follows it (see there).
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding=0,
        dilation_rate=1,
        groups=1,
        use_bias=True,
        kernel_initializer="he_normal",
        bias_initializer="zeros",
        split_groups=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # One conv per group then concat: faster than TF's grouped kernel on CPU
        # (benchmarks/grouped_conv_benchmark.py); GPUs have a fast native grouped kernel.
        self.split_groups = (
            not tf.config.list_physical_devices("GPU") if split_groups is None else bool(split_groups)
        )
        self.filters = filters
        self.kernel_size = kernel_size
        self.strides = strides
        self.padding = padding
        self.dilation_rate = dilation_rate
        self.groups = groups
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self._folded_affine = None

    def build(self, input_shape):
        in_channels = input_shape[-1]
        if in_channels % self.groups or self.filters % self.groups:
            raise ValueError(
                f"{self.name}: channels in {in_channels} / out {self.filters} not divisible by groups {self.groups}"
            )
        self.kernel = self.add_weight(
            name="kernel",
            shape=(self.kernel_size, self.kernel_size, in_channels // self.groups, self.filters),
            initializer=initializer_for(self.kernel_initializer),
        )
        self.bias = (
            self.add_weight(name="bias", shape=(self.filters,), initializer=self.bias_initializer)
            if self.use_bias
            else None
        )

    def fold_affine(self, affine):
        """Compute `affine(self(x))` here as conv(x, kernel * scale) + bias, `affine` passing through.

        Exact for Detectron's frozen AffineChannel (up to float rounding), and one Conv2D + BiasAdd
        (+ ReLU) is what TensorFlow fuses into a single kernel: the separate multiply and add were
        two extra passes over every backbone activation. Gradients still reach every weight.
        """
        if self.use_bias:
            raise ValueError(f"{self.name}: only a convolution without bias can take {affine.name}'s bias")
        affine.folded = True
        self._folded_affine = lambda: (affine.scale, affine.bias)  # a function: Keras does not track it

    def call(self, inputs):
        kernel = self.kernel
        if self._folded_affine is not None:
            scale, shift = self._folded_affine()
            # Folded once the inputs exist: a recomputed segment's backward pass (tf.recompute_grad) would otherwise
            # fold all its kernels when the step starts, as nothing else holds them back, and keep them until then.
            with tf.control_dependencies([inputs]):
                kernel = kernel * scale
        kernel = tf.cast(kernel, inputs.dtype)
        if self.groups > 1 and self.split_groups:
            outputs = tf.concat(
                [
                    self._convolve(part, part_kernel)
                    for part, part_kernel in zip(
                        tf.split(inputs, self.groups, axis=-1), tf.split(kernel, self.groups, axis=-1)
                    )
                ],
                axis=-1,
            )
        else:
            outputs = self._convolve(inputs, kernel)
        if self.bias is not None:
            outputs = tf.nn.bias_add(outputs, tf.cast(self.bias, inputs.dtype))
        if self._folded_affine is not None:
            outputs = tf.nn.bias_add(outputs, tf.cast(shift, inputs.dtype))
        return outputs

    def _convolve(self, inputs, kernel):
        padding = self._tf_padding()
        if self.dilation_rate > 1 and padding == "SAME":
            # The same convolution through space-to-batch: TensorFlow's Eigen CPU kernels (oneDNN off, as on AVX2
            # CPUs) have no gradient for a dilated Conv2D, so such heads could not train there.
            return tf.nn.atrous_conv2d(inputs, kernel, self.dilation_rate, padding)
        return tf.nn.conv2d(inputs, kernel, strides=self.strides, padding=padding, dilations=self.dilation_rate)

    def _tf_padding(self):
        """TensorFlow's padding argument for Caffe2's symmetric `padding`: 'VALID' without padding, 'SAME' where
        that is the same symmetric padding (stride 1, padding = half the dilated kernel's extent), else explicit.

        The same numbers either way; but TensorFlow's oneDNN rewrite skips the gradients of explicitly padded
        convolutions, which then run Eigen's kernels: a slower filter gradient, through an im2col buffer of
        kernel-area times the input (benchmarks/README.md, the training step).
        """
        pad = self.padding
        if not pad:
            return "VALID"
        if self.strides == 1 and 2 * pad == self.dilation_rate * (self.kernel_size - 1):
            return "SAME"
        return [[0, 0], [pad, pad], [pad, pad], [0, 0]]

    def compute_output_shape(self, input_shape):
        def out_size(size):
            if size is None:
                return None
            span = self.dilation_rate * (self.kernel_size - 1) + 1
            return (size + 2 * self.padding - span) // self.strides + 1

        return (input_shape[0], out_size(input_shape[1]), out_size(input_shape[2]), self.filters)

    def get_config(self):
        config = super().get_config()
        config.update(
            filters=self.filters,
            kernel_size=self.kernel_size,
            strides=self.strides,
            padding=self.padding,
            dilation_rate=self.dilation_rate,
            groups=self.groups,
            use_bias=self.use_bias,
            split_groups=self.split_groups,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config
