"""Where datasets live on disk: the data root `$TFDET_DATA_DIR` (default ~/.cache/tfdet/datasets) and the
shapes cache below it. Its own module so that the catalog and the shapes generator both read it."""

import os
import pathlib

DATA_DIR_ENV = "TFDET_DATA_DIR"
DEFAULT_DATA_DIR = "~/.cache/tfdet/datasets"


def data_root():
    """The folder datasets live in: `$TFDET_DATA_DIR`, or ~/.cache/tfdet/datasets."""
    return pathlib.Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).expanduser()


def shapes_root():
    """The cache folder of the synthetic shapes splits."""
    return data_root() / "shapes"
