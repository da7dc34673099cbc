"""The commands of the README and of the task documents in docs/ run as written. Every bash and python block is
marked with what it needs (`readme_blocks`), CI runs the README's test command, and the blocks marked to run do,
in a fresh folder with stand-ins for the files they name (`readme_stand_ins`), under `-m slow`: the quick ones
(`runs`) alone, or every one, in the order of `readme_blocks.DOCUMENTS` and of each document (later blocks
read what earlier ones wrote). A block fails on an exit status other than 0 or on a Python traceback in its
output. Every document with a command block is one of DOCUMENTS, and every link of the documentation names a
file (and heading) that exists."""

import subprocess
import sys

import pytest
from support.paths import REPO_ROOT
from support.readme_blocks import (
    CI,
    DOCUMENTS,
    RUNS,
    RUNS_SLOW,
    Block,
    broken_links,
    documentation_blocks,
    readme_blocks,
    script,
)
from support.readme_stand_ins import checkout, stand_ins

BLOCKS = documentation_blocks(REPO_ROOT)
MARKDOWN = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
RUNNABLE = [block for block in BLOCKS if block.mark in (RUNS, RUNS_SLOW)]
TRACEBACK = "Traceback (most recent call last)"
BLOCK_TIMEOUT_S = 1500


def run_block(block, workspace, environment):
    """Run `block` in `workspace` (bash: -e, each command echoed); the test fails with the block's output (only:
    no traceback of the test, no environment) if a command fails or prints a traceback."""
    if block.language == "bash":
        command = ["bash", "-e", "-x", "-o", "pipefail", "-c", script(block)]
    else:
        command = [sys.executable, "-c", script(block)]
    done = subprocess.run(command, cwd=workspace, env=environment, capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT_S)  # fmt: skip
    output = done.stdout + done.stderr
    if done.returncode or TRACEBACK in output:
        pytest.fail(f"{block.name} ({block.mark}): exit status {done.returncode}\n{output[-5000:]}", pytrace=False)


def test_every_command_block_is_marked_with_what_it_needs():
    problems = [block.mark_problem() for block in BLOCKS]
    assert [problem for problem in problems if problem] == []
    assert {block.mark for block in RUNNABLE} == {RUNS, RUNS_SLOW}


def test_every_document_with_commands_is_run_and_every_link_exists():
    documents = {path.relative_to(REPO_ROOT).as_posix() for path in MARKDOWN}
    assert set(DOCUMENTS) <= documents
    assert [name for name in sorted(documents - set(DOCUMENTS)) if readme_blocks(REPO_ROOT / name)] == []
    assert {block.document for block in BLOCKS} == set(DOCUMENTS)
    assert [problem for path in MARKDOWN for problem in broken_links(path)] == []


def test_ci_runs_the_readmes_test_command():
    (ci,) = [block for block in BLOCKS if block.mark == CI]
    assert ci.document == "README.md"
    ci_script = (REPO_ROOT / ".ci" / "run").read_text()
    assert all(line in ci_script.splitlines() for line in ci.text.splitlines()), ci.text


def test_a_failing_command_or_a_traceback_fails_its_block(tmp_path):
    environment = {"PATH": "/usr/bin:/bin"}
    run_block(Block("README.md", 1, "bash", "true\n", RUNS), tmp_path, environment)
    for text in (f"{sys.executable} -c 'import no_such_module_here'\n", "exit 3\n",
                 f"echo '{TRACEBACK}:' && true\n"):  # fmt: skip
        with pytest.raises(pytest.fail.Exception, match="README.md:1"):
            run_block(Block("README.md", 1, "bash", text, RUNS), tmp_path, environment)


# Slow (a training run and an export in fresh processes, ~30 s of a core): each part has a cheaper default test.
# The tiny config's `python -m tfdet.train` (training.md): test_train_cli.py's end-to-end run of `main` (checkpoints,
# config.yaml, final weights with their classes, evaluation), the tiny config's training step in
# test_training_graph.py; its export from config.yaml and model_final.weights.h5 (deployment.md):
# test_savedmodel_client.py's `model` fixture (and test_savedmodel.py's export served in a fresh interpreter);
# `savedmodel.serving_config`: test_savedmodel.py::test_serving_config_lists_every_model_and_version. By default the
# blocks' marks and the links between the documents are checked (the first two tests above).
@pytest.mark.slow
def test_quick_blocks_run(tmp_path):
    workspace = tmp_path / "checkout"
    environment = checkout(workspace)
    for block in RUNNABLE:
        if block.mark == RUNS:
            run_block(block, workspace, environment)


@pytest.fixture(scope="module")
def slow_checkout(tmp_path_factory):
    """(folder, environment) of a checkout with every stand-in, shared by the module's slow blocks in order."""
    workspace = tmp_path_factory.mktemp("readme") / "checkout"
    environment = checkout(workspace)
    stand_ins(workspace)
    return workspace, environment


@pytest.mark.slow
@pytest.mark.parametrize("block", RUNNABLE, ids=[block.name for block in RUNNABLE])
def test_block_runs(slow_checkout, block):
    run_block(block, *slow_checkout)
