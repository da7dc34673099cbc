"""Turning raw config values (YAML scalars, command-line text) into Python values, never with eval.

Detectron runs `ast.literal_eval` on every string so that '(800,)' becomes a tuple; tfdet does the same
except for keys whose default is a string, which keep the text as written (so an OUTPUT_DIR of
'2018' stays a string and dumped strings read back identically).
"""

import ast

import yaml


def literal_or_text(text: str) -> object:
    """The Python literal `text` spells ('(800,)', '1e-4', "'a'"), else `text` itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text


def decode_mapping_value(value: object, expects_str: bool) -> object:
    """A value from a YAML file or an override dict: strings are decoded as Detectron does."""
    if isinstance(value, str) and not expects_str:
        return literal_or_text(value)
    return value


def decode_override_text(value: object, expects_str: bool) -> object:
    """A value from a KEY VALUE override list: a YAML literal, else a Python literal, else the text."""
    if not isinstance(value, str) or expects_str:
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return literal_or_text(value)
    return literal_or_text(parsed) if isinstance(parsed, str) else parsed
