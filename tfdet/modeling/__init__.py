"""Model assembly: Detectron's generalized R-CNN as a Keras functional model, built from a config."""

from tfdet.modeling.generalized_rcnn import build_model
