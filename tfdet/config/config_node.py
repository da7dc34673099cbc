"""Config: a nested mapping with attribute access, checked writes and a frozen state."""

import copy
from collections.abc import Iterator, Mapping, MutableMapping

import yaml

from tfdet.config.coercion import coerce_value
from tfdet.config.errors import ConfigError, FrozenConfigError
from tfdet.config.schema import MAPPING_RULES
from tfdet.config.suggestions import unknown_key_message


class _ConfigDumper(yaml.SafeDumper):
    """YAML with block-style sections and one-line sequences, like Detectron's config files; values shared
    between keys are written out at each key, never as YAML anchors (&id001) and aliases."""

    def ignore_aliases(self, data):
        return True


def _one_line_sequence(dumper: yaml.SafeDumper, data: list | tuple) -> yaml.SequenceNode:
    """A list or tuple written as a flow sequence, [a, b]."""
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


_ConfigDumper.add_representer(list, _one_line_sequence)
_ConfigDumper.add_representer(tuple, _one_line_sequence)


class Config(MutableMapping):
    """One config section: `cfg.MODEL.NUM_CLASSES` or `cfg["MODEL"]["NUM_CLASSES"]`.

    Its keys are fixed when it is built (from the defaults): a write to an existing key is checked and
    coerced like a merged value, a new key is an error naming the closest keys, and a frozen config
    refuses every write. Lists inside (SOLVER.STEPS, ...) keep Detectron's type and are not frozen, nor
    are the dicts of mapping-valued keys (schema.MAPPING_RULES), which are values, not sections.
    """

    def __init__(self, values: Mapping | None = None, *, path: str = ""):
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_frozen", False)
        object.__setattr__(self, "_values", {})
        for key, value in (values or {}).items():
            if isinstance(value, Mapping) and self._full_key(key) not in MAPPING_RULES:
                self._values[key] = Config(value, path=self._full_key(key))
            else:
                self._values[key] = copy.deepcopy(value)

    def _full_key(self, key: str) -> str:
        """The dotted name of one of this section's keys."""
        return f"{self._path}.{key}" if self._path else key

    def _unknown_key_message(self, key: str) -> str:
        """The error text for a key this section does not have."""
        return unknown_key_message(self._full_key(key), map(self._full_key, self._values))

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(self._unknown_key_message(name)) from None

    def __setattr__(self, name: str, value: object) -> None:
        self[name] = value

    def __getitem__(self, key: str) -> object:
        return self._values[key]

    def __setitem__(self, key: str, value: object) -> None:
        full_key = self._full_key(key)
        if self._frozen:
            also = "" if key in self._values else f" ({self._unknown_key_message(key)})"
            raise FrozenConfigError(
                f"Cannot set '{full_key}': the config is frozen; use cfg.clone() for a mutable copy{also}"
            )
        if key not in self._values:
            raise ConfigError(self._unknown_key_message(key))
        current = self._values[key]
        if isinstance(current, Config):
            raise ConfigError(f"Config key '{full_key}' is a section; set its keys one by one")
        self._values[key] = coerce_value(full_key, value, current)

    def __delitem__(self, key: str) -> None:
        raise ConfigError(f"Cannot delete '{self._full_key(key)}': config keys are fixed by the defaults")

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({self.to_dict()!r})"

    @property
    def frozen(self) -> bool:
        """Whether writes are refused."""
        return self._frozen

    def freeze(self) -> "Config":
        """Refuse every later write to this section and its subsections; returns self."""
        object.__setattr__(self, "_frozen", True)
        for value in self._values.values():
            if isinstance(value, Config):
                value.freeze()
        return self

    def clone(self) -> "Config":
        """A mutable deep copy."""
        return Config(self._values, path=self._path)

    def to_dict(self) -> dict:
        """Nested plain dicts holding copies of the values (tuples stay tuples)."""
        return {
            key: value.to_dict() if isinstance(value, Config) else copy.deepcopy(value)
            for key, value in self._values.items()
        }

    def leaf_keys(self) -> Iterator[str]:
        """The full dotted names of all values (not sections), in definition order."""
        for key, value in self._values.items():
            if isinstance(value, Config):
                yield from value.leaf_keys()
            else:
                yield self._full_key(key)

    def dump(self) -> str:
        """This section as YAML (tuples written as lists); load_config reads a whole config's dump back equal."""
        return yaml.dump(self.to_dict(), Dumper=_ConfigDumper, sort_keys=False, default_flow_style=False)
