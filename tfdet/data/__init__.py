"""Datasets: `catalog` (named COCO-format datasets and where they live) and `shapes` (the built-in
synthetic dataset). Submodules are imported by name, so that `python -m tfdet.data.shapes` runs cleanly;
`register_coco_dataset` imports the catalog only when called, so importing this package stays cheap."""


def register_coco_dataset(name, annotations, image_dir):
    """Name a COCO-format dataset (its annotation json and image folder) for this process, so that
    TRAIN.DATASETS, TEST.DATASETS and `python -m tfdet.evaluate --dataset` in it accept `name`
    (`tfdet.data.catalog.register_coco_dataset`; built-in names are refused)."""
    from tfdet.data.catalog import register_coco_dataset as register

    register(name, annotations, image_dir)
