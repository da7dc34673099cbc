"""Detectron's deprecated and renamed config keys (core/config.py `_DEPRECATED_KEYS`, `_RENAMED_KEYS`).

Detectron refuses renamed keys; tfdet accepts them with a ConfigWarning, converting the value the way
Detectron's note tells users to, and raises with that note when the value cannot be converted.
Detectron's dummy entry 'EXAMPLE.RENAMED.KEY' is left out.
"""

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from tfdet.config.errors import ConfigError, ConfigWarning

DEPRECATED_KEYS = frozenset(
    {
        "FINAL_MSG",
        "MODEL.DILATION",
        "ROOT_GPU_ID",
        "RPN.ON",
        "TRAIN.BBOX_NORMALIZE_TARGETS_PRECOMPUTED",
        "TRAIN.DROPOUT",
        "USE_GPU_NMS",
        "TEST.NUM_TEST_IMAGES",
    }
)


def _unchanged(value: object) -> object:
    """The value as given (the key was renamed, its type was not)."""
    return value


def _split_on_colons(value: object) -> object:
    """'a:b' -> ('a', 'b'), the old colon-joined list; '://' in URLs is not a separator."""
    return tuple(re.split(r":(?!//)", value)) if isinstance(value, str) else value


def _split_dataset_list(value: object) -> object:
    """'a:b' -> ('a', 'b') as _split_on_colons, keeping each 'coco:ANNOTATIONS.json:IMAGE_DIR' name whole:
    'coco:x.json:imgs:a' -> ('coco:x.json:imgs', 'a')."""
    if not isinstance(value, str):
        return value
    parts, names = value.split(":"), []
    while parts:
        take = 3 if parts[0] == "coco" else 1
        names.append(":".join(parts[:take]))
        del parts[:take]
    return tuple(names)


def _only_element(value: object) -> object:
    """(600,) -> 600; raises ValueError for several values, which have no single-value equivalent."""
    if not isinstance(value, (tuple, list)):
        return value
    if len(value) != 1:
        raise ValueError(f"{value!r} holds {len(value)} values, not one")
    return value[0]


@dataclass(frozen=True)
class RenamedKey:
    """The new name of a key, Detectron's note on converting its value, and that conversion."""

    new_key: str
    note: str = ""
    convert: Callable[[object], object] = _unchanged


RENAMED_KEYS = {
    "MODEL.PS_GRID_SIZE": RenamedKey("RFCN.PS_GRID_SIZE"),
    "MODEL.ROI_HEAD": RenamedKey("FAST_RCNN.ROI_BOX_HEAD"),
    "MRCNN.MASK_HEAD_NAME": RenamedKey("MRCNN.ROI_MASK_HEAD"),
    "TRAIN.DATASET": RenamedKey(
        "TRAIN.DATASETS",
        "Also convert to a tuple, e.g. 'coco_2014_train' -> ('coco_2014_train',) or "
        "'coco_2014_train:coco_2014_valminusminival' -> ('coco_2014_train', 'coco_2014_valminusminival').",
        _split_dataset_list,
    ),
    "TRAIN.PROPOSAL_FILE": RenamedKey(
        "TRAIN.PROPOSAL_FILES",
        "Also convert to a tuple, e.g. 'path/to/file' -> ('path/to/file',) or "
        "'path/to/file1:path/to/file2' -> ('path/to/file1', 'path/to/file2').",
        _split_on_colons,
    ),
    "TEST.SCALES": RenamedKey(
        "TEST.SCALE",
        "Also convert from a tuple, e.g. (600,), to an integer, e.g. 600 "
        "(test at several scales with TEST.BBOX_AUG.SCALES).",
        _only_element,
    ),
    "TEST.DATASET": RenamedKey(
        "TEST.DATASETS",
        "Also convert from a string, e.g. 'coco_2014_minival', to a tuple, e.g. ('coco_2014_minival',).",
        _split_dataset_list,
    ),
    "TEST.PROPOSAL_FILE": RenamedKey(
        "TEST.PROPOSAL_FILES",
        "Also convert from a string, e.g. '/path/to/props.pkl', to a tuple, e.g. ('/path/to/props.pkl',).",
        _split_on_colons,
    ),
}


def renamed_value(old_key: str, value: object) -> object:
    """The value of a renamed key converted for its new key, with a ConfigWarning naming both keys."""
    renamed = RENAMED_KEYS[old_key]
    try:
        converted = renamed.convert(value)
    except ValueError as error:
        raise ConfigError(
            f"Config key '{old_key}' was renamed to '{renamed.new_key}' and its value cannot be "
            f"converted: {error}. Note: {renamed.note}"
        ) from None
    warnings.warn(
        f"Config key '{old_key}' was renamed to '{renamed.new_key}'; using "
        f"{renamed.new_key}: {converted!r}. Please update your config.",
        ConfigWarning,
        stacklevel=4,
    )
    return converted
