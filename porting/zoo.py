"""Detectron's zoo by name, for the Python API: a model ported once into $TFDET_CACHE/zoo/NAME/ and reused.

`ported_zoo_model(name)` downloads the model's model_final.pkl (md5-checked, tfdet.weights.download: its errors are
DownloadError, one line) and ports it as `python -m porting zoo NAME --out DIR` does, into a temporary folder
renamed to the cache's only when the port succeeded, so a folder there always holds a whole port
(model.weights.h5 and config.yaml). An unknown name is porting.zoo_models.ZooError (one line, closest names).
"""

import os
import pathlib
import shutil
import sys
import uuid

from porting.commands import port_zoo_model
from porting.zoo_models import zoo_model
from tfdet.weights.download import cache_folder, resolve_weights

PORTED_FILES = ("model.weights.h5", "config.yaml")


class ZooPortError(ValueError):
    """The zoo model's file did not port (its report, printed before, says why)."""


def zoo_port_folder(name) -> pathlib.Path:
    """Where the port of zoo model `name` is kept: $TFDET_CACHE/zoo/NAME."""
    return cache_folder() / "zoo" / zoo_model(name).name


def ported_zoo_model(name) -> pathlib.Path:
    """The folder holding zoo model `name` ported (model.weights.h5, config.yaml): ported now unless cached."""
    folder = zoo_port_folder(name)
    if _complete(folder):
        print(f"using the port of {folder.name} cached in {folder}", file=sys.stderr)
        return folder
    weights = resolve_weights(zoo_model(name).url)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = folder.with_name(f".{folder.name}.{uuid.uuid4().hex}.part")
    try:
        status = port_zoo_model(folder.name, staging, weights=weights)
        if status != 0:
            raise ZooPortError(f"{weights}: zoo model {folder.name} did not port (its report is above)")
        if folder.exists() and not _complete(folder):
            shutil.rmtree(folder)  # a port's files removed by hand
        try:
            os.replace(staging, folder)
        except OSError:
            if not _complete(folder):
                raise  # else another process's port got there first: as good as ours
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def ported_zoo_files(name):
    """(config.yaml, model.weights.h5) paths of zoo model `name`, ported now unless cached (`ported_zoo_model`)."""
    folder = ported_zoo_model(name)
    return str(folder / "config.yaml"), str(folder / "model.weights.h5")


def _complete(folder):
    return all((folder / file).is_file() for file in PORTED_FILES)
