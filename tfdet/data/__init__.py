"""Datasets: `catalog` (named COCO-format datasets and where they live) and `shapes` (the built-in
synthetic dataset). Submodules are imported by name, so that `python -m tfdet.data.shapes` runs cleanly."""
