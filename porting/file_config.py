"""The config a trained Detectron file was saved with, as a tfdet Config (for `--cfg`-less porting).

Trained files carry `yaml.dump(cfg)` of the whole Detectron config. Keys tfdet knows are merged
over the defaults; keys it does not know (other Detectron versions, forks) are dropped and named in
a warning, since they cannot change the architecture tfdet builds. A file without a config, or
one lacking the keys that decide the architecture, raises with a message telling to pass --cfg.
"""

import warnings

import numpy as np

from porting.embedded_cfg import parse_embedded_cfg
from tfdet.config import get_default_config, load_config
from tfdet.config.errors import ConfigError
from tfdet.config.loader import flatten_keys
from tfdet.config.renamed_keys import DEPRECATED_KEYS, RENAMED_KEYS

# Without these the file's config cannot say which model to build.
ARCHITECTURE_KEYS = ("MODEL.TYPE", "MODEL.CONV_BODY", "MODEL.NUM_CLASSES")


class FileConfigError(ValueError):
    """The weight file's own config cannot describe the model: the user must pass --cfg."""


def _plain_value(full_key, value):
    """Numpy-array values (PIXEL_MEANS) arrive as nested lists of any depth; the rest as is."""
    if full_key == "PIXEL_MEANS" and value is not None:
        return np.asarray(value, np.float64).reshape(1, 1, 3).tolist()
    return value


def _usable(full_key, value):
    """Whether one file value is accepted by tfdet's checks (None or a wrong type is not)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_config({full_key: value})
    except (ConfigError, ValueError):
        return False
    return True


def config_from_cfg_text(cfg_text, path, overrides=None):
    """A Config built from the `cfg` string of the weight file at `path`, then `overrides`.

    Unknown keys and values tfdet refuses are dropped with one warning naming them; the keys that
    decide the architecture must be present and usable.
    """
    if cfg_text is None:
        raise FileConfigError(f"{path} holds no config (an ImageNet or bare-blobs file): pass --cfg")
    try:
        flat = dict(flatten_keys(parse_embedded_cfg(cfg_text)))
    except ValueError as error:
        reason = " ".join(str(error).split())  # YAML errors span lines; keep the message on one
        raise FileConfigError(f"{path}: its config is unreadable ({reason}): pass --cfg") from None
    known = set(get_default_config().leaf_keys()) | set(RENAMED_KEYS) | DEPRECATED_KEYS
    values = {key: _plain_value(key, value) for key, value in flat.items() if key in known}
    refused = sorted(key for key, value in values.items() if not _usable(key, value))
    unusable = [key for key in ARCHITECTURE_KEYS if key not in values or key in refused]
    if unusable:
        raise FileConfigError(f"{path}: its config lacks a usable {', '.join(unusable)}, so the model is unknown: pass --cfg")
    dropped = sorted(set(flat) - set(values)) + refused
    if dropped:
        warnings.warn(f"{path}: config keys ignored (unknown to tfdet or unusable values): {', '.join(dropped)}")
    return load_config({key: value for key, value in values.items() if key not in refused}, overrides)
