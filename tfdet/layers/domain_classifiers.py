"""DA Faster R-CNN's domain classifiers and their losses, as Keras layers.

The heads of krumo's maskrcnn-benchmark fork (`modeling/da_heads/da_heads.py`):
- image level (`DAImgHead`): conv 1x1 to 512 -> ReLU -> conv 1x1 to 1, one domain logit per
  feature-map location; both convs drawn from N(0, 0.001^2), zero biases.
- instance level (`DAInsHead`): fc 1024 -> ReLU -> dropout 0.5 -> fc 1024 -> ReLU -> dropout 0.5
  -> fc 1, one domain logit per RoI; fc1/fc2 N(0, 0.01^2), fc3 N(0, 0.05^2), zero biases.
`init` "he_normal" (TFDET.DA_HEAD_INIT) draws every weight of both heads from Keras' HeNormal instead
(truncated normal, std sqrt(2 / fan_in)): the fork's tiny stds suit its ImageNet-pretrained 1024-channel
res4 over 70k iterations; on a narrow network trained from scratch they leave the image-level
classifier at chance for hundreds of iterations (measured: docs/design.md, domain adaptation).
Both are nested Keras models of Detectron-named layers (`conv1_da`, `fc1_da`, ...), so they can be
called on several inputs with shared weights and `model_blobs` lists their variables.

Dropout draws are stateless, from each image's sampling seed (as every other random draw of the
training graph, `tfdet.layers.training_targets`): the RoIs of an image get the same masks whether
it is trained on one device or on a replica.

Losses (`modeling/da_heads/loss.py`, `layers/consistency_loss.py`), domain label 1 = source:
- `ImageDomainLoss`: BCE of every location of every level (padding included, as the fork), mean.
- `InstanceDomainLoss`: BCE of every sampled RoI (padding slots excluded), mean.
- `DomainConsistencyLoss`: |mean over an image's locations of the image-level probability - the
  probability of each of its RoIs|, mean over RoIs and levels (the fork asserts two images, one
  per domain; here each RoI is compared with its own image, for any batch).
The classifiers' accuracies over the same elements (`ImageDomainAccuracy`, `InstanceDomainAccuracy`,
logit > 0 read as "source") are training metrics: 0.5 is chance, and the gradient reversal should
hold them near it once the features stop telling the domains apart.
"""

import keras
import tensorflow as tf

from tfdet.layers.caffe_conv import CaffeConv2D
from tfdet.ops.map_fn import map_fn
from tfdet.ops.roi_sampling import sub_seed

IMAGE_HEAD_DIM = 512
INSTANCE_HEAD_DIM = 1024
INSTANCE_DROPOUT_RATE = 0.5
IMAGE_HEAD_INIT_STD = 0.001
INSTANCE_HIDDEN_INIT_STD = 0.01
INSTANCE_OUTPUT_INIT_STD = 0.05


HEAD_INITS = ("fork", "he_normal")


def check_head_init(init):
    """A clear error unless `init` (TFDET.DA_HEAD_INIT) is one of HEAD_INITS."""
    if init not in HEAD_INITS:
        raise ValueError(f"TFDET.DA_HEAD_INIT must be one of {', '.join(HEAD_INITS)}, got {init!r}")


def _initializer(init, fork_std):
    """The weight initializer of a DA head layer: the fork's N(0, fork_std^2), or Keras' HeNormal."""
    check_head_init(init)
    return keras.initializers.RandomNormal(stddev=fork_std) if init == "fork" else keras.initializers.HeNormal()


def image_domain_classifier(dim_in, init="fork", name="da_img_head", prefix=""):
    """The image-level domain classifier: (B, H, W, dim_in) features -> (B, H, W, 1) domain logits.

    Its layers are `<prefix>conv1_da`, `<prefix>conv2_da` (a prefix tells several heads' blobs apart).
    """
    features = keras.Input((None, None, dim_in), name=f"{name}_features")
    initializer = _initializer(init, IMAGE_HEAD_INIT_STD)
    hidden = CaffeConv2D(IMAGE_HEAD_DIM, 1, kernel_initializer=initializer, name=f"{prefix}conv1_da")(features)
    hidden = keras.layers.ReLU(name=f"{prefix}conv1_da_relu")(hidden)
    output_initializer = _initializer(init, IMAGE_HEAD_INIT_STD)
    logits = CaffeConv2D(1, 1, kernel_initializer=output_initializer, name=f"{prefix}conv2_da")(hidden)
    return keras.Model(features, logits, name=name)


def instance_domain_classifier(dim_in, init="fork", name="da_ins_head"):
    """The instance-level domain classifier: [(B*R, dim_in) RoI features, (B, 2) image seeds] -> (B*R, 1) logits.

    The RoIs are image-major, R per image (`FlattenRoIs`); the seeds drive the dropout masks.
    """
    features = keras.Input((dim_in,), name=f"{name}_features")
    seeds = keras.Input((2,), dtype="int64", name=f"{name}_seeds")
    x = features
    for stream, layer_name in enumerate(("fc1_da", "fc2_da")):
        initializer = _initializer(init, INSTANCE_HIDDEN_INIT_STD)
        x = keras.layers.Dense(INSTANCE_HEAD_DIM, kernel_initializer=initializer, name=layer_name)(x)
        x = keras.layers.ReLU(name=f"{layer_name}_relu")(x)
        x = SeededDropout(INSTANCE_DROPOUT_RATE, stream=stream, name=f"{layer_name}_dropout")([x, seeds])
    logits = keras.layers.Dense(1, kernel_initializer=_initializer(init, INSTANCE_OUTPUT_INIT_STD), name="fc3_da")(x)
    return keras.Model([features, seeds], logits, name=name)


class FoldSeeds(keras.layers.Layer):
    """(B, 2) int64 seeds -> the seeds of draw stream `stream` (a stateless fold-in per image)."""

    def __init__(self, stream, **kwargs):
        super().__init__(**kwargs)
        self.stream = int(stream)

    def call(self, seeds):
        def fold(seed):
            return tf.cast(sub_seed(seed, self.stream), tf.int64)

        return map_fn(fold, tf.cast(seeds, tf.int64))

    def compute_output_spec(self, seeds):
        return keras.KerasTensor(seeds.shape, "int64")

    def get_config(self):
        config = super().get_config()
        config.update(stream=self.stream)
        return config


class SeededDropout(keras.layers.Layer):
    """Inverted dropout of image-major rows (R per image) with masks drawn from each image's seed.

    Called on `[x (B*R, D), seeds (B, 2)]`; identity unless training.
    """

    def __init__(self, rate, stream=0, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= float(rate) < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        self.rate = float(rate)
        self.stream = int(stream)

    def call(self, inputs, training=None):
        x, seeds = inputs
        if not training or self.rate == 0.0:
            return x
        rows_per_image = tf.shape(x)[0] // tf.shape(seeds)[0]
        width = tf.shape(x)[1]

        def draws(seed):
            return tf.random.stateless_uniform([rows_per_image, width], sub_seed(seed, self.stream), dtype=x.dtype)

        noise = map_fn(draws, tf.cast(seeds, tf.int64), fn_output_signature=tf.TensorSpec([None, None], x.dtype))
        keep = tf.reshape(noise, tf.shape(x)) >= self.rate
        return tf.where(keep, x / (1.0 - self.rate), tf.zeros_like(x))

    def compute_output_spec(self, inputs, training=None):
        return keras.KerasTensor(inputs[0].shape, inputs[0].dtype)

    def get_config(self):
        config = super().get_config()
        config.update(rate=self.rate, stream=self.stream)
        return config


class _WeightedLoss(keras.layers.Layer):
    """A scalar loss times `loss_weight` (the DA fork's DA_*_LOSS_WEIGHT)."""

    def __init__(self, loss_weight=1.0, **kwargs):
        super().__init__(**kwargs)
        self.loss_weight = float(loss_weight)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor((), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(loss_weight=self.loss_weight)
        return config


def _domain_labels(is_source, like):
    """1.0 for source images, 0.0 for target images, broadcast to `like` (images first)."""
    labels = tf.cast(is_source, like.dtype)
    return tf.broadcast_to(tf.reshape(labels, [-1] + [1] * (like.shape.rank - 1)), tf.shape(like))


class ImageDomainLoss(_WeightedLoss):
    """Called on `[logits of level 1 (B, H1, W1, 1), ..., is_source (B,)]`: per-location BCE, mean."""

    def call(self, inputs):
        *levels, is_source = inputs
        total, count = 0.0, 0.0
        for logits in levels:
            logits = tf.cast(logits, tf.float32)
            losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=_domain_labels(is_source, logits), logits=logits)
            total += tf.reduce_sum(losses)
            count += tf.cast(tf.size(losses), tf.float32)
        return self.loss_weight * tf.math.divide_no_nan(total, count)


class InstanceDomainLoss(_WeightedLoss):
    """Called on `[logits (B*R, 1), labels (B, R) of the sampled RoIs (-1: padding), is_source (B,)]`:
    per-RoI BCE over the real RoIs, mean."""

    def call(self, inputs):
        logits, labels, is_source = inputs
        real = tf.reshape(labels >= 0, [-1])
        logits = tf.reshape(tf.cast(logits, tf.float32), [-1])
        domains = tf.reshape(_domain_labels(is_source, tf.cast(labels, tf.float32)), [-1])
        losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=domains, logits=logits)
        return self.loss_weight * tf.math.divide_no_nan(
            tf.reduce_sum(tf.where(real, losses, 0.0)), tf.reduce_sum(tf.cast(real, tf.float32))
        )


class DomainConsistencyLoss(_WeightedLoss):
    """Called on `[probabilities of level 1 (B, H1, W1, 1), ..., instance probabilities (B*R, 1),
    labels (B, R)]`: |image mean - RoI probability| over real RoIs and levels, mean."""

    def call(self, inputs):
        *levels, instance_probs, labels = inputs
        real = labels >= 0
        instance_probs = tf.reshape(tf.cast(instance_probs, tf.float32), tf.shape(labels))
        total = 0.0
        for probs in levels:
            image_mean = tf.reduce_mean(tf.cast(probs, tf.float32), axis=[1, 2, 3])
            total += tf.reduce_sum(tf.where(real, tf.abs(image_mean[:, None] - instance_probs), 0.0))
        count = len(levels) * tf.reduce_sum(tf.cast(real, tf.float32))
        return self.loss_weight * tf.math.divide_no_nan(total, count)


def _correct(logits, domains):
    """1.0 where the logit's side (> 0: source) is the domain label, else 0.0."""
    return tf.cast(tf.equal(tf.cast(logits > 0, tf.float32), domains), tf.float32)


class ImageDomainAccuracy(keras.layers.Layer):
    """Called as `ImageDomainLoss`: the fraction of locations (all levels) classified to their image's domain."""

    def call(self, inputs):
        *levels, is_source = inputs
        correct, count = 0.0, 0.0
        for logits in levels:
            logits = tf.cast(logits, tf.float32)
            correct += tf.reduce_sum(_correct(logits, _domain_labels(is_source, logits)))
            count += tf.cast(tf.size(logits), tf.float32)
        return tf.math.divide_no_nan(correct, count)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor((), "float32")


class InstanceDomainAccuracy(keras.layers.Layer):
    """Called as `InstanceDomainLoss`: the fraction of real sampled RoIs classified to their image's domain."""

    def call(self, inputs):
        logits, labels, is_source = inputs
        real = tf.cast(tf.reshape(labels >= 0, [-1]), tf.float32)
        logits = tf.reshape(tf.cast(logits, tf.float32), [-1])
        domains = tf.reshape(_domain_labels(is_source, tf.cast(labels, tf.float32)), [-1])
        return tf.math.divide_no_nan(tf.reduce_sum(real * _correct(logits, domains)), tf.reduce_sum(real))

    def compute_output_spec(self, inputs):
        return keras.KerasTensor((), "float32")
