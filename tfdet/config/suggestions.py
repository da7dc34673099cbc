"""'Did you mean' hints for misspelled config keys and function names."""

import difflib
from collections.abc import Iterable


def closest(word: str, candidates: Iterable[str], limit: int = 3, cutoff: float = 0.6) -> list[str]:
    """The candidates most similar to `word` (difflib ratio at least `cutoff`), best first."""
    return difflib.get_close_matches(word, list(candidates), n=limit, cutoff=cutoff)


def did_you_mean(names: list[str]) -> str:
    """'; did you mean 'A' or 'B'?' for a non-empty list, '' otherwise."""
    if not names:
        return ""
    quoted = [f"'{name}'" for name in names]
    listed = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f"; did you mean {listed}?"


def similar_keys(full_key: str, valid_keys: Iterable[str]) -> list[str]:
    """Valid full keys close to `full_key`: close in its section, same leaf elsewhere, close overall.

    Whole keys must match more closely than leaves, since a shared section prefix inflates their
    similarity ('MODEL.NUM_CLASS' is not meant to be 'MODEL.MASK_ON').
    """
    valid_keys = list(valid_keys)
    section, _, leaf = full_key.rpartition(".")
    same_leaf = [key for key in valid_keys if key.rpartition(".")[2] == leaf]
    in_section = {key.rpartition(".")[2]: key for key in valid_keys if key.rpartition(".")[0] == section}
    same_section = [in_section[name] for name in closest(leaf, in_section)]
    found = same_section + same_leaf + closest(full_key, valid_keys, cutoff=0.8)
    return list(dict.fromkeys(key for key in found if key != full_key))[:4]


def unknown_key_message(full_key: str, valid_keys: Iterable[str]) -> str:
    """The error text for a key that is not in the config, with the closest valid keys."""
    return f"Unknown config key '{full_key}'" + did_you_mean(similar_keys(full_key, valid_keys))
