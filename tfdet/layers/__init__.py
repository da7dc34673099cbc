"""Keras layers: weight-carrying layers named after Detectron blobs, and wrappers of tfdet.ops."""

from tfdet.layers.affine_channel import AffineChannel
from tfdet.layers.caffe_conv import CaffeConv2D
from tfdet.layers.flatten_dense import FlattenDense
from tfdet.layers.group_norm import GroupNormalization
from tfdet.layers.initialization import placeholder_initialization
from tfdet.layers.roi_feature_transform import RoIFeatureTransform
