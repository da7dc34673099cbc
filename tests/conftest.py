"""Shared test fixtures: locating ../shared from the repository root."""

import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"


def shared_path(*parts: str) -> pathlib.Path:
    """Path under ../shared; fails (never skips) with a clear message when it is absent."""
    path = SHARED_DIR.joinpath(*parts)
    if not path.exists():
        pytest.fail(
            f"{path} is missing: tests expect the project's shared/ folder beside the repository "
            f"root ({SHARED_DIR}); CI always provides it."
        )
    return path


@pytest.fixture
def rng():
    """A fresh, seeded numpy generator for each test."""
    import numpy as np

    return np.random.default_rng(0)
