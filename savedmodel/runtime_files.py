"""What every runtime's export and opener share: the metadata entry's name, their one-line errors, and the
protocol an opener returns (`Opened`)."""

METADATA_KEY = "tfdet"


class RuntimeExportError(ValueError):
    """An export to another runtime that cannot proceed, in one line."""


class ModelFileError(ValueError):
    """A model file the runner cannot use, in one line naming it."""


class Opened:
    """A model file opened by its runtime: its `metadata` text, and `compile(precision)` -> (run, precision
    computed in), run(inputs) -> dict of outputs."""

    def __init__(self, metadata, compile):
        self.metadata, self.compile = metadata, compile


def first_line(error):
    """The first line of a runtime's error message (its type's name when it has none)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
