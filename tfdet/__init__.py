"""tfdet: Detectron's generalized R-CNN family in TensorFlow 2 + Keras 3.

Importing this package is cheap on purpose: it does not import TensorFlow, build models or touch
the network. Subpackages (`tfdet.ops`, `tfdet.modeling`, ...) import TensorFlow when used.
"""

__version__ = "0.1.0"
