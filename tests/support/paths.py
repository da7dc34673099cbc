"""Where the tests find the repository and the project's shared/ folder beside it."""

import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS_DIR = REPO_ROOT / "tests"
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
