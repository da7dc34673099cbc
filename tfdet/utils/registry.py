"""Registry: names (such as Detectron's function names in configs) mapped to the objects that build them."""

import difflib
from collections.abc import Callable


class UnknownNameError(LookupError):
    """A name that nothing was registered under; the message lists the known names."""


class Registry:
    """Names -> objects, filled with the `register(name)` decorator and read with `get(name)`."""

    def __init__(self, kind: str):
        self._kind = kind
        self._entries: dict[str, object] = {}

    def register(self, name: str) -> Callable[[object], object]:
        """A decorator registering its target under `name` (each name once) and returning it unchanged."""

        def add(target: object) -> object:
            if name in self._entries:
                raise ValueError(f"{self._kind} '{name}' is already registered")
            self._entries[name] = target
            return target

        return add

    def get(self, name: str) -> object:
        """The object registered under `name`; UnknownNameError naming the closest and all known names."""
        try:
            return self._entries[name]
        except KeyError:
            pass
        close = difflib.get_close_matches(name, list(self._entries), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."
        known = ", ".join(self.names()) or "none"
        raise UnknownNameError(f"Unknown {self._kind} '{name}'{hint} Known: {known}")

    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        return tuple(sorted(self._entries))

    def __contains__(self, name: object) -> bool:
        return name in self._entries
