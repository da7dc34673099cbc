"""Writing a conversion's results all or nothing: image links first, then the json files, each atomically."""

import json
import os
import pathlib
import tempfile


class ConversionError(ValueError):
    """An input the converter cannot read, or an output it cannot place; the message names the file."""


def _check_link(destination, source):
    """Whether `destination` must be made (False: it already is `source`); ConversionError when another file is."""
    if os.path.lexists(destination):
        if destination.resolve() == source.resolve():
            return False
        raise ConversionError(f"{destination} exists and is not {source}: remove it or choose another --data-root")
    if not source.exists():
        raise ConversionError(f"image not found: {source}")
    return True


def write_outputs(jsons, links=None):
    """Write `jsons` ({path: COCO dict}) and make `links` ({link path: existing file or folder}), or nothing.

    Every link is checked before any is made; the json files are written to temporary files beside their
    destination and renamed into place at the end. On any error what this call made is removed again.
    """
    links = {pathlib.Path(d): pathlib.Path(s) for d, s in (links or {}).items()}
    to_make = {destination: source for destination, source in links.items() if _check_link(destination, source)}
    made, temporaries = [], []
    try:
        for destination, source in to_make.items():
            destination.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(source.resolve(), destination)
            made.append(destination)
        for path, content in jsons.items():
            path = pathlib.Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as stream:
                temporaries.append((pathlib.Path(stream.name), path))
                json.dump(content, stream)
        for temporary, path in temporaries:
            os.replace(temporary, path)
    except BaseException:
        for temporary, _ in temporaries:
            temporary.unlink(missing_ok=True)
        for destination in made:
            destination.unlink(missing_ok=True)
        raise
