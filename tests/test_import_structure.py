"""The package's layering, read from its source: no import circle among tfdet, porting and savedmodel, and
`tfdet.modeling` never imports `tfdet.data` (at any level, lazy imports included); `tfdet.imaging` imports neither
TensorFlow nor Keras nor a tfdet module outside it (the runner without TensorFlow uses it); what serves a model
(`tfdet.inference`, `savedmodel.export`) loads neither pycocotools nor the training data pipeline or the shapes
generator, checked in a fresh interpreter. The tests' own layout: what they share lives in tests/support/, and no
test module or support module imports a test module or conftest."""

import ast
import pathlib
import subprocess
import sys

from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "tfdet"
PACKAGES = ("tfdet", "porting", "savedmodel")
TESTS = REPO_ROOT / "tests"


def module_files():
    """{dotted module name: path} of every module of our packages (a package by its own name)."""
    files = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imported_modules(path, known=()):
    """Every module an `import` or `from ... import` statement of `path` names, wherever it stands. With `known`
    (module names), `from package import module` names the module alone, not the package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            members = {f"{node.module}.{alias.name}" for alias in node.names}
            names.update(members)
            if not members & set(known):
                names.add(node.module)
    return names


def import_circles(graph):
    """The groups of modules that import each other, directly or through others (Tarjan's strongly connected
    components of more than one module, or a module importing itself)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1 or module in graph[module]:
                circles.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return circles


def test_import_circles_are_found():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    files = module_files()
    graph = {name: imported_modules(path, files) & set(files) - {name} for name, path in files.items()}
    assert import_circles(graph) == []


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


def outside_imaging(name):
    """Whether an imported module is one `tfdet.imaging` may not import: TensorFlow, Keras, tfdet outside imaging/."""
    top = name.split(".")[0]
    return top in ("tensorflow", "keras") or (top == "tfdet" and not name.startswith("tfdet.imaging"))


def test_imaging_imports_no_tensorflow():
    """`tfdet.imaging` is the image code `savedmodel.run` shares with the Predictor, where TensorFlow may not be
    installed: none of its modules imports TensorFlow or Keras, or a tfdet module outside the folder."""
    offenders = {
        str(path.relative_to(REPO_ROOT)): sorted(filter(outside_imaging, imported_modules(path)))
        for path in sorted((PACKAGE / "imaging").rglob("*.py"))
    }
    assert offenders and {path: names for path, names in offenders.items() if names} == {}


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


def imports_of_tests_or_conftest(path):
    """The test modules (`test_*`) and conftest that the file at `path` imports, wherever the import stands."""
    names = imported_modules(path)
    return sorted(name for name in names if name.split(".")[0] == "conftest" or name.startswith("test_"))


def test_imports_of_tests_or_conftest_are_found(tmp_path):
    source = tmp_path / "test_sample.py"
    source.write_text("from conftest import REPO_ROOT\nfrom support.paths import shared_path\n\n"
                      "def f():\n    import test_roi_align\n    from test_nms import clustered_boxes\n")
    expected = ["conftest", "conftest.REPO_ROOT", "test_nms", "test_nms.clustered_boxes", "test_roi_align"]
    assert imports_of_tests_or_conftest(source) == expected


def test_tests_share_code_through_support_only():
    """Every shared helper of the tests is a module of tests/support/ (beside the test modules, only conftest.py,
    which keeps pytest's hooks and fixtures); no test module or support module imports a test module or conftest."""
    assert sorted(path.name for path in TESTS.glob("*.py") if not path.name.startswith("test_")) == ["conftest.py"]
    files = sorted(TESTS.glob("test_*.py")) + sorted((TESTS / "support").glob("*.py"))
    offenders = {str(path.relative_to(REPO_ROOT)): imports_of_tests_or_conftest(path) for path in files}
    assert {path: names for path, names in offenders.items() if names} == {}
