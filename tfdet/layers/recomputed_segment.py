"""A functional sub-model whose activations are recomputed in the backward pass instead of kept."""

import keras
import tensorflow as tf


class RecomputedSegment(keras.layers.Layer):
    """Calls `segment` (a functional keras.Model of existing layers, sharing their weights) under
    `tf.recompute_grad`: the forward pass keeps only the segment's input, and the backward pass runs the
    segment again to get its gradients. The same numbers for one more forward pass of the segment; the memory
    its activations took from the forward to the backward pass is free meanwhile."""

    def __init__(self, segment, **kwargs):
        super().__init__(autocast=False, **kwargs)
        self.segment = segment

    def call(self, inputs, training=None):
        return tf.recompute_grad(lambda features: self.segment(features, training=training))(inputs)

    def compute_output_spec(self, inputs, training=None):
        return self.segment.compute_output_spec(inputs)
