"""Converters for the DA fork's datasets: `python -m tfdet.data.convert cityscapes|foggy-cityscapes|sim10k|kitti`.

Each writes the COCO json that the fork's converters write (`tools/cityscapes/*.py`, `tools/kitti/*.py` of
krumo/Domain-Adaptive-Faster-RCNN-PyTorch; Sim10k, which has no converter there, the way the fork reads VOC
boxes) where the catalog's fork names look for it (`tfdet.data.catalog.dataset_paths`), and links the images
into the catalog's image folders. A malformed input file stops the conversion with an error naming it, and
nothing is written then.
"""
