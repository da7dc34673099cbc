"""Model assembly: Detectron's models as Keras functional models, built from a config."""

from tfdet.modeling.builder import build_model
