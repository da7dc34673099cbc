"""Keys of the training batches that the data pipelines write and the training graphs read. A module without
imports, so that `tfdet.modeling` names them without importing `tfdet.data` (and its pycocotools)."""

# Domain-adaptive batches: per image, True for a source-domain image (labelled), False for a target-domain one.
SOURCE_FLAG = "is_source"
