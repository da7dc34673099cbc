"""The fenced command blocks of the README and of the task documents in docs/ with their marks, and the scripts
the README test runs for them.

DOCUMENTS lists the Markdown files whose blocks run, in the order they run (later blocks read what earlier ones
wrote: the training document's outputs/tiny in the deployment document). A bash or python block is marked by
the comment on the line before its fence, `<!-- readme-test: MARK -->`:
`runs` (quick: `test_quick_blocks_run` runs these alone, under `-m slow`: each command's parts have cheaper
default tests), `runs slow` (with every block, under `-m slow`), `is what CI runs` (the test command, which
.ci/run repeats) or one of NEEDS, what a test machine lacks. Each need has a pattern of the commands that show
it: a block showing one is never marked to run, and a block marked with a need shows it.
"""

import dataclasses
import pathlib
import re

# Paths relative to the repository root; docs/design.md holds no command block.
DOCUMENTS = (
    "README.md", "docs/porting.md", "docs/inference_and_evaluation.md", "docs/training.md",
    "docs/domain_adaptation.md", "docs/own_data.md", "docs/deployment.md",
)  # fmt: skip
MARK = re.compile(r"^<!-- readme-test: (.+) -->$")
FENCE = re.compile(r"^```(\w*)$")
COMMAND_LANGUAGES = ("bash", "python")
RUNS, RUNS_SLOW, CI = "runs", "runs slow", "is what CI runs"
NEEDS = {
    "needs COCO": r"\bcoco_20\d\d",  # Detectron's COCO dataset names
    "needs a GPU": r"/GPU:\d|NUM_GPUS [2-9]",
    "needs TF Serving": r"localhost:85\d\d|tensorflow_model_server|tensorflow/serving",
    "needs the network": r"https?://(?!localhost)|porting zoo [A-Za-z]",  # a zoo model by name is a download
    "needs the DA datasets": r"tfdet\.data\.convert",  # Cityscapes, Foggy Cityscapes, Sim10k, KITTI
    "needs maskrcnn-benchmark checkpoints": r"\.pth\b",
}
MARKS = (RUNS, RUNS_SLOW, CI, *NEEDS)
# The README says any training command takes a shorter schedule at its end; the test's runs take 2 iterations.
TRAINING = re.compile(r"^python -m tfdet\.(train|demo)\b")
SHORT_SCHEDULE = "SOLVER.MAX_ITER 2"
TRAILING_COMMENT = re.compile(r"\s+#.*$")
# The test's interpreter has the packages: the installation before a command is left out.
INSTALL = re.compile(r"^pip install -e \S+ && ")


@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced block of a document (its path relative to the repository root): the line of its opening fence,
    its language, text and mark (or None)."""

    document: str
    line: int
    language: str
    text: str
    mark: str | None

    @property
    def name(self):
        return f"{self.document}:{self.line}"

    def mark_problem(self):
        """Why the block's mark does not fit it, or None."""
        if self.mark is None:
            return f"{self.name}: no `<!-- readme-test: MARK -->` line before the block"
        if self.mark not in MARKS:
            return f"{self.name}: mark {self.mark!r} is none of {', '.join(MARKS)}"
        shown = [need for need, pattern in NEEDS.items() if re.search(pattern, self.text)]
        if self.mark in (RUNS, RUNS_SLOW) and shown:
            return f"{self.name} is marked '{self.mark}' but {' and '.join(shown)}"
        if self.mark in NEEDS and self.mark not in shown:
            return f"{self.name} is marked '{self.mark}' but no command of it shows that need ({NEEDS[self.mark]})"
        return None


def documentation_blocks(root):
    """Every bash and python block of the DOCUMENTS below the repository root `root`, in the order they run."""
    return [block for document in DOCUMENTS for block in readme_blocks(pathlib.Path(root) / document, root)]


def readme_blocks(path, root=None):
    """Every bash and python block of the Markdown file at `path`, in order; named by the path relative to
    `root` (default: its file name)."""
    path = pathlib.Path(path)
    document = path.relative_to(root).as_posix() if root is not None else path.name
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, start, previous = [], None, ""
    for number, line in enumerate(lines, start=1):
        fence = FENCE.match(line)
        if start is None and fence and fence.group(1):
            start, language, mark = number, fence.group(1), MARK.match(previous)
        elif start is not None and line == "```":
            if language in COMMAND_LANGUAGES:
                text = "\n".join(lines[start:number - 1]) + "\n"
                blocks.append(Block(document, start, language, text, mark.group(1) if mark else None))
            start = None
        if line.strip():
            previous = line
    return blocks


def script(block):
    """What the test runs for `block`: a bash block with its continuation lines joined, the installation left
    out and SHORT_SCHEDULE at the end of each training command; a python block as it is."""
    if block.language == "python":
        return block.text
    commands = []
    for line in block.text.replace("\\\n", " ").splitlines():
        line = INSTALL.sub("", line)
        if TRAINING.match(line):
            line = TRAILING_COMMENT.sub("", line) + " " + SHORT_SCHEDULE
        commands.append(line)
    return "\n".join(commands) + "\n"


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`[^`]*`")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto:, ...


def _prose_lines(path):
    """(line number, line) of the Markdown file at `path` outside fenced blocks."""
    fenced = False
    for number, line in enumerate(pathlib.Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield number, line


def heading_anchors(path):
    """The anchors GitHub gives the headings of the Markdown file at `path`: lower case, punctuation but `-` and
    `_` dropped, spaces as `-`; a repeated one numbered `-1`, `-2`, ..."""
    anchors, seen = set(), {}
    for _, line in _prose_lines(path):
        heading = re.match(r"^#{1,6} (.+?)\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def broken_links(path):
    """`path:line: target (why)` for each link of the Markdown file at `path` to a file of the repository that
    does not exist, or to a heading its file does not have."""
    path = pathlib.Path(path)
    problems = []
    for number, line in _prose_lines(path):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                problems.append(f"{path.name}:{number}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked):
                problems.append(f"{path.name}:{number}: {target} (no such heading)")
    return problems
