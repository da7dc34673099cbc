"""load_config: the defaults, merged with a YAML file and overrides, checked, inferred and frozen."""

import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence

import yaml

from tfdet.config.config_node import Config
from tfdet.config.decoding import decode_mapping_value, decode_override_text
from tfdet.config.defaults import default_tree
from tfdet.config.errors import ConfigError, ConfigWarning
from tfdet.config.maskrcnn_benchmark.defaults import is_maskrcnn_benchmark_config
from tfdet.config.maskrcnn_benchmark.translation import translate_file
from tfdet.config.renamed_keys import DEPRECATED_KEYS, RENAMED_KEYS, renamed_value
from tfdet.config.schema import MAPPING_RULES
from tfdet.config.suggestions import unknown_key_message

Overrides = Sequence[object] | Mapping[str, object]


def get_default_config() -> Config:
    """A fresh, mutable config holding every default."""
    return Config(default_tree())


def load_config(path: str | os.PathLike | Mapping | None = None, overrides: Overrides | None = None) -> Config:
    """Defaults, then the YAML file at `path` (or a mapping already read), then `overrides`; frozen.

    `overrides` is a flat list ["KEY.SUB", "VALUE", ...] (command-line style: each VALUE decoded as
    Detectron's merge_cfg_from_list decodes it, `tfdet.config.decoding.decode_override_text`) or a dict
    with nested sections or dotted keys. Detectron's renamed keys and legacy function names are accepted with a
    ConfigWarning; its deprecated keys are ignored with one. A maskrcnn-benchmark / DA-fork YAML is
    translated first, with a report on stderr (`tfdet.config.maskrcnn_benchmark.translation`).
    """
    cfg = get_default_config()
    mapping = path if isinstance(path, Mapping) or path is None else _read_yaml_mapping(path)
    if mapping is not None and is_maskrcnn_benchmark_config(mapping):  # a DA-fork YAML: translated, reported
        mapping, overrides = translate_file(mapping, overrides, "<mapping>" if mapping is path else path)
    if mapping is not None:
        _merge(cfg, flatten_keys(mapping), decode_mapping_value)
    if isinstance(overrides, Mapping):
        _merge(cfg, flatten_keys(overrides), decode_mapping_value)
    elif overrides is not None:
        _merge(cfg, _pairs(overrides), decode_override_text)
    _infer_detectron_values(cfg)
    return cfg.freeze()


def _read_yaml_mapping(path: str | os.PathLike) -> Mapping:
    """The top-level mapping of a YAML file (safe_load: no Python object tags)."""
    try:
        with open(path, encoding="utf-8") as stream:
            content = yaml.safe_load(stream)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML for a config: {error}") from None
    if content is None:
        return {}
    if not isinstance(content, Mapping):
        raise ConfigError(f"{path} must hold a mapping of config keys, got {type(content).__name__}")
    return content


def flatten_keys(mapping: Mapping, prefix: str = "") -> Iterator[tuple[str, object]]:
    """(full dotted key, value) for every value of nested mappings (the dict of a mapping-valued key is one value)."""
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ConfigError(
                f"Config key {prefix}{key!r} is not a string (YAML reads unquoted ON, OFF, YES, NO, "
                "numbers and null as other types; quote the key)"
            )
        if isinstance(value, Mapping) and f"{prefix}{key}" not in MAPPING_RULES:
            yield from flatten_keys(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _pairs(overrides: Sequence[object]) -> Iterator[tuple[str, object]]:
    """(key, value) pairs of a flat ["KEY", "VALUE", ...] list."""
    keys = [] if isinstance(overrides, str) else overrides[0::2]
    flags = [key for key in keys if isinstance(key, str) and key.startswith("-")]
    if isinstance(overrides, str) or len(overrides) % 2 or flags:
        hint = ""
        if flags:
            hint = f"; {flags[0]!r} in a KEY's place looks like a flag: give flags before the KEY VALUE pairs"
        raise ConfigError(f"Overrides must be a list of KEY VALUE pairs, got {overrides!r}{hint}")
    for key, value in zip(overrides[0::2], overrides[1::2]):
        if not isinstance(key, str):
            raise ConfigError(f"Override key {key!r} is not a string (in {overrides!r})")
        yield key, value


def _merge(
    cfg: Config, items: Iterator[tuple[str, object]], decode: Callable[[object, bool], object]
) -> None:
    """Set each (full key, raw value) of one source on `cfg`, handling Detectron's old keys."""
    items = list(items)
    given_keys = {key for key, _ in items}
    for full_key, raw_value in items:
        if full_key in DEPRECATED_KEYS:
            warnings.warn(f"Deprecated config key '{full_key}' is ignored", ConfigWarning, stacklevel=3)
            continue
        key = RENAMED_KEYS[full_key].new_key if full_key in RENAMED_KEYS else full_key
        if key != full_key and key in given_keys:
            raise ConfigError(f"Both '{full_key}' and its new name '{key}' are given; keep only '{key}'")
        section, leaf = _section_of(cfg, key)
        value = decode(raw_value, isinstance(section[leaf], str))
        if key != full_key:
            value = renamed_value(full_key, value)
        section[leaf] = value


def _section_of(cfg: Config, full_key: str) -> tuple[Config, str]:
    """The section holding `full_key` and the key's last part; ConfigError if the key does not exist."""
    *path, leaf = full_key.split(".")
    section = cfg
    for depth, part in enumerate(path):
        child = section.get(part)
        if child is not None and not isinstance(child, Config):
            value_key = ".".join(path[: depth + 1])
            raise ConfigError(f"Unknown config key '{full_key}': '{value_key}' is a value, not a section")
        if child is None:
            raise ConfigError(unknown_key_message(full_key, cfg.leaf_keys()))
        section = child
    if leaf not in section:
        raise ConfigError(unknown_key_message(full_key, cfg.leaf_keys()))
    return section, leaf


def _infer_detectron_values(cfg: Config) -> None:
    """Detectron's assert_and_infer_cfg (without URL caching): keys marked 'inferred' in the defaults."""
    if cfg.MODEL.RPN_ONLY or cfg.MODEL.FASTER_RCNN:
        cfg.RPN.RPN_ON = True
    if cfg.RPN.RPN_ON or cfg.RETINANET.RETINANET_ON:
        cfg.TEST.PRECOMPUTED_PROPOSALS = False
