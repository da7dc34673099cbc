"""Checking a new value against the key's current value (its default's type) and the schema tables.

Like Detectron's `_check_and_coerce_cfg_value_type` (tuple and list interchange and take the default's
type; an int is accepted for a float), but stricter: a bool is never an int or a float, a number is
never a string, and sequence keys are checked for element type and, where SEQUENCE_RULES fixes it,
length. Mapping-valued keys (MAPPING_RULES) take a mapping whose keys and values are checked; the
string keys of BOOLEAN_TEXT_KEYS also take a boolean, kept as 'true' / 'false'. Numpy arrays and
scalars are accepted through their `tolist()` without importing numpy.
"""

from collections.abc import Mapping

from tfdet.config.errors import ConfigError
from tfdet.config.function_names import FUNCTION_NAMES, resolve_function_name
from tfdet.config.schema import BOOLEAN_TEXT_KEYS, MAPPING_RULES, NON_EMPTY, SEQUENCE_RULES, SequenceRule


def _is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _described(value: object) -> str:
    """'str '81'' style text naming a value's type and the value."""
    return f"{type(value).__name__} {value!r}"


def _as_container(value: object, container: type) -> object:
    """Nested lists and tuples rebuilt with `container` at every level."""
    if isinstance(value, (list, tuple)):
        return container(_as_container(item, container) for item in value)
    return value


def _elements(full_key: str, value: object, shape: tuple) -> list:
    """The items at the element depth of `value` (one level below `shape`'s), checking each level's length."""
    level = [value]
    for depth in range(max(len(shape), 1)):
        length = shape[depth] if shape else None
        for sequence in level:
            size = len(sequence) if isinstance(sequence, (list, tuple)) else None
            fits = size is not None and (
                length is None or (size >= 1 if length == NON_EMPTY else size == length)
            )
            if not fits:
                where = f" at nesting level {depth + 1} (shape {shape})" if len(shape) > 1 else ""
                given = "not a sequence" if size is None else f"length {size}"
                raise ConfigError(
                    f"Config key '{full_key}' expects length {length}{where}, got {given}: {value!r}"
                )
        level = [item for sequence in level for item in sequence]
    return level


_ELEMENT_CHECKS = {int: _is_int, float: _is_number, str: lambda item: isinstance(item, str)}


def _check_sequence_rule(full_key: str, value: object, rule: SequenceRule) -> None:
    """Raise unless `value` has the rule's shape and every element its type (float admits int)."""
    fits = _ELEMENT_CHECKS.get(rule.element, lambda item: True)
    for item in _elements(full_key, value, rule.shape):
        if not fits(item):
            raise ConfigError(
                f"Config key '{full_key}' expects {rule.element.__name__} elements, "
                f"got {_described(item)} in {value!r}"
            )


def _coerce_sequence(full_key: str, value: object, current: object) -> object:
    """`value` as the container type of `current`, checked against SEQUENCE_RULES."""
    if not isinstance(value, (list, tuple)):
        hint = f" (write a sequence, e.g. ({value!r},))" if isinstance(value, str) else ""
        raise ConfigError(
            f"Config key '{full_key}' expects {type(current).__name__}, got {_described(value)}{hint}"
        )
    value = _as_container(value, type(current))
    rule = SEQUENCE_RULES.get(full_key)
    if rule is not None:
        _check_sequence_rule(full_key, value, rule)
    return value


def _coerce_mapping(full_key: str, value: object) -> dict:
    """`value` as a dict, its keys and values checked against MAPPING_RULES."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"Config key '{full_key}' expects a mapping, got {_described(value)}")
    rule = MAPPING_RULES[full_key]
    for key, item in value.items():
        for part, expected in ((key, rule.key), (item, rule.value)):
            if not isinstance(part, expected):
                raise ConfigError(
                    f"Config key '{full_key}' expects {rule.key.__name__}: {rule.value.__name__} entries, "
                    f"got {_described(part)} in {dict(value)!r}"
                )
    return dict(value)


def coerce_value(full_key: str, value: object, current: object) -> object:
    """`value` made to fit the key whose value is now `current`; ConfigError naming key and types if it cannot."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, bool) and full_key in BOOLEAN_TEXT_KEYS:
        value = "true" if value else "false"
    if isinstance(current, dict):
        return _coerce_mapping(full_key, value)
    if isinstance(current, bool):
        fits = isinstance(value, bool)
    elif isinstance(current, int):
        fits = _is_int(value)
    elif isinstance(current, float):
        fits = _is_number(value)
        value = float(value) if fits else value
    elif isinstance(current, str):
        fits = isinstance(value, str)
    elif isinstance(current, (list, tuple)):
        return _coerce_sequence(full_key, value, current)
    else:
        raise TypeError(f"Config key '{full_key}' has a default of unsupported type {type(current).__name__}")
    if not fits:
        raise ConfigError(f"Config key '{full_key}' expects {type(current).__name__}, got {_described(value)}")
    if full_key in FUNCTION_NAMES:
        return resolve_function_name(full_key, value)
    return value
