"""Turning raw config values (YAML scalars, command-line text) into Python values, never with eval.

Command-line text is decoded as Detectron's merge_cfg_from_list decodes it (`_decode_cfg_value`):
`ast.literal_eval` of the text, the text itself where that fails; so '(800,)' is a tuple and "''" the
empty string. Values of a YAML file or an override dict are decoded the same way, except for keys whose
default is a string: YAML has already unquoted those, so they keep the value as read (an OUTPUT_DIR of
'2018' stays a string and dumped strings read back identically).
"""

import ast

import yaml

_NOT_A_LITERAL = (ValueError, TypeError, SyntaxError, MemoryError, RecursionError)


def literal_or_text(text: str) -> object:
    """The Python literal `text` spells ('(800,)', '1e-4', "'a'"), else `text` itself."""
    try:
        return ast.literal_eval(text)
    except _NOT_A_LITERAL:
        return text


def decode_mapping_value(value: object, expects_str: bool) -> object:
    """A value from a YAML file or an override dict: strings are decoded as Detectron does."""
    if isinstance(value, str) and not expects_str:
        return literal_or_text(value)
    return value


def decode_override_text(value: object, expects_str: bool) -> object:
    """A value from a KEY VALUE override list: the Python literal the text spells, else the text.

    For a key whose default is a string only a string literal is taken ("''" is ''); other text stays
    as typed, where Detectron's str() of the literal would respell it ('1.10' as '1.1'). For other keys,
    text that is no Python literal is read as YAML ('true', 'null', '[a, b]'), values Detectron refuses.
    """
    if not isinstance(value, str):
        return value
    try:
        decoded = ast.literal_eval(value)
    except _NOT_A_LITERAL:
        return value if expects_str else _yaml_or_text(value)
    if expects_str and not isinstance(decoded, str):
        return value
    return decoded


def _yaml_or_text(text: str) -> object:
    """The value YAML reads from `text`, else `text` itself."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text
