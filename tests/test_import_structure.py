"""The package's layering, read from its source: `tfdet.modeling` never imports `tfdet.data` (at any level, lazy
imports included), and what serves a model (`tfdet.inference`, `savedmodel.export`) loads neither pycocotools nor
the training data pipeline or the shapes generator, checked in a fresh interpreter."""

import ast
import pathlib
import subprocess
import sys

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "tfdet"


def imported_modules(path):
    """Every module an `import` or `from ... import` statement of `path` names, wherever it stands."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_imported_modules_sees_lazy_imports(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text("import os\n\ndef f():\n    from tfdet.data import shapes\n    import tfdet.data.roidb\n")
    assert {"os", "tfdet.data", "tfdet.data.shapes", "tfdet.data.roidb"} <= imported_modules(source)


def test_modeling_never_imports_data():
    offenders = {
        str(path.relative_to(REPO_ROOT)): sorted(name for name in imported_modules(path) if name.startswith("tfdet.data"))
        for path in sorted((PACKAGE / "modeling").rglob("*.py"))
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_serving_imports_no_training_data_code():
    """A fresh interpreter imports the Predictor and the SavedModel export: no pycocotools, no shapes generator, no
    training pipeline."""
    unwanted = ("pycocotools", "tfdet.data.shapes", "tfdet.data.pipeline", "tfdet.data.roidb",
                "tfdet.data.domain_pipeline", "tfdet.data.catalog")  # fmt: skip
    code = (
        "import sys\n"
        "import tfdet.inference, savedmodel.export\n"
        f"print([name for name in {unwanted!r} if name in sys.modules])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
