"""A maskrcnn-benchmark / DA-fork YAML (krumo's Domain-Adaptive-Faster-RCNN-PyTorch) as our Detectron config.

`load_config(path)` hands a fork YAML here (`is_maskrcnn_benchmark_config`): the file is merged over the
fork's defaults (`maskrcnn_benchmark.defaults`), as the fork's `cfg.merge_from_file` does, and every key of
the result gets one outcome, written on stderr for the keys the file (or an override) sets:

* mapped: the Detectron keys that act as the fork's key does (units converted, said on the line);
* ignored: keys that change no result (data-loader workers, the torch device, heads of modes that are off);
* refused: one line naming the key and why; any refusal makes the load a ConfigError listing them all.
  Unknown keys are refused with the closest fork keys.

Overrides (`KEY VALUE` after the file) that name a fork key act on the fork's config before translation,
as on the fork's own command line; other keys (Detectron's, TFDET.*) act on the translated config.

What each key does is `maskrcnn_benchmark.rules.RULES`.
"""

import dataclasses
import sys
from collections.abc import Mapping

from tfdet.config.decoding import decode_mapping_value, decode_override_text
from tfdet.config.defaults import KEY_DOCS
from tfdet.config.errors import ConfigError
from tfdet.config.maskrcnn_benchmark.defaults import FORK_DEFAULT_VALUES
from tfdet.config.maskrcnn_benchmark.rules import IGNORED, REFUSED, RULES, ForkConfig, refused
from tfdet.config.suggestions import did_you_mean, similar_keys


def _type_error(value, default):
    """Why `value` cannot stand for a key whose default is `default` (None when it can), as yacs checks."""
    if default is None:
        return None if isinstance(value, str) else f"expects a string, got {value!r}"
    if isinstance(default, bool):
        return None if isinstance(value, bool) else f"expects True or False, got {value!r}"
    if isinstance(default, (int, float)):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        whole = isinstance(value, int) or not isinstance(default, int)
        kind = "an int" if isinstance(default, int) else "a number"
        return None if number and whole else f"expects {kind}, got {value!r}"
    if isinstance(default, (tuple, list)):
        return None if isinstance(value, (tuple, list)) else f"expects a sequence, got {value!r}"
    return None if isinstance(value, str) else f"expects a string, got {value!r}"


def _flatten(mapping, prefix=""):
    """(full dotted key, value) of nested mappings."""
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def split_overrides(overrides):
    """(fork items [(key, raw, decode)], the other overrides in their own form): fork keys go to the fork's config."""
    if overrides is None:
        return [], None
    if isinstance(overrides, Mapping):
        items = list(_flatten(overrides))
        fork = [(key, value, decode_mapping_value) for key, value in items if key in FORK_DEFAULT_VALUES]
        return fork, {key: value for key, value in items if key not in FORK_DEFAULT_VALUES}
    if isinstance(overrides, str) or len(overrides) % 2:
        return [], overrides  # the Detectron merge reports the malformed list
    pairs = list(zip(overrides[0::2], overrides[1::2]))
    fork = [(key, value, decode_override_text) for key, value in pairs if key in FORK_DEFAULT_VALUES]
    rest = [part for key, value in pairs if key not in FORK_DEFAULT_VALUES for part in (key, value)]
    return fork, rest


@dataclasses.dataclass
class Translation:
    """A fork config translated: every key's outcome, which keys were given, and the Detectron settings."""

    source: str
    values: ForkConfig
    given: list  # fork keys the file or an override sets, in that order
    outcomes: dict  # fork key (known or not) -> Outcome
    rejected: dict  # keys whose given value was not taken (not a fork key, wrong type) -> that value

    def settings(self):
        """{Detectron key: value} of every mapped key (two keys never set one Detectron key differently)."""
        settings, origin = {}, {}
        for key, outcome in self.outcomes.items():
            for target, value in outcome.settings:
                if target in settings and settings[target] != value:
                    raise AssertionError(f"{origin[target]} and {key} set {target} differently")
                settings[target], origin[target] = value, key
        return settings

    def refusals(self):
        """One line per refused key: `<KEY> = <value>: <why>`."""
        return [self._line(key) for key, outcome in self.outcomes.items() if outcome.status == REFUSED]

    def _line(self, key):
        """The report line of one key."""
        outcome = self.outcomes[key]
        value = self.rejected[key] if key in self.rejected else self.values[key]
        if outcome.status == REFUSED:
            return f"{key} = {value!r}: {outcome.note}"
        if outcome.status == IGNORED:
            return f"{key} = {value!r}: ignored: {outcome.note}"
        targets = ", ".join(f"{target} {target_value!r}" for target, target_value in outcome.settings) or "no key"
        return f"{key} = {value!r} -> {targets}" + (f" ({outcome.note})" if outcome.note else "")

    def report(self):
        """The report: a line for every given key, then how many defaults of the fork were translated."""
        lines = [f"{self.source}: a maskrcnn-benchmark (DA fork) config, translated to tfdet's Detectron keys:"]
        lines += [f"  {self._line(key)}" for key in self.given]
        defaults = [key for key in self.outcomes if key not in self.given]
        made = sorted({target for key in defaults for target, _ in self.outcomes[key].settings})
        lines.append(f"  and {len(defaults)} keys at the fork's defaults, which set {', '.join(made)}")
        return "\n".join(lines)


def translate(mapping, fork_overrides=(), source="<config>"):
    """The Translation of a fork YAML mapping, with fork-side overrides [(key, raw value, decode)] applied."""
    values = ForkConfig(FORK_DEFAULT_VALUES)
    given, outcomes, rejected = [], {}, {}
    raw_items = [(key, value, decode_mapping_value) for key, value in _flatten(mapping)]
    for key, raw, decode in raw_items + list(fork_overrides):
        given = [k for k in given if k != key] + [key]
        if key not in FORK_DEFAULT_VALUES:
            outcomes[key], rejected[key] = refused(_unknown_key_note(key)), raw
            continue
        default = FORK_DEFAULT_VALUES[key]
        value = decode(raw, isinstance(default, str) or default is None)
        problem = _type_error(value, default)
        if problem:
            outcomes[key], rejected[key] = refused(problem), value
            continue
        values[key] = type(default)(value) if isinstance(default, (tuple, list)) else value
    for key in FORK_DEFAULT_VALUES:
        if key not in outcomes:
            outcomes[key] = RULES[key](values[key], values)
    return Translation(str(source), values, given, outcomes, rejected)


def _unknown_key_note(key):
    """Why a key is refused that the fork's config does not have, with the closest fork keys."""
    hint = did_you_mean(similar_keys(key, FORK_DEFAULT_VALUES))
    if key in KEY_DOCS:
        hint += " (it is a Detectron key: give it after the file as an override, KEY VALUE)"
    return "not a key of the fork's config" + hint


def translate_file(mapping, overrides, source):
    """(Detectron settings, the remaining overrides) for `load_config`; prints the report on stderr.

    Raises ConfigError with one line per refused key.
    """
    fork_overrides, rest = split_overrides(overrides)
    translation = translate(mapping, fork_overrides, source)
    refusals = translation.refusals()
    if refusals:
        raise ConfigError(f"{source}: maskrcnn-benchmark keys tfdet cannot honour:\n" + "\n".join(refusals))
    print(translation.report(), file=sys.stderr)
    return translation.settings(), rest
