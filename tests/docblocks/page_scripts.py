"""The one way a page's python blocks run: as the script a reader downloads from the page.

The script is ``take_away.script_text(page, docs, markers=True)``: the download plus a
marker line printed before each block, so that its output can be cut into what each
block printed. Where CUDA is present it is made with ``gpu=True``, so the ``gpu`` blocks
run in their places; elsewhere they stay comments and their items are skipped. It runs
with ``python -u`` in a fresh process and an empty working directory, through
``script_launcher.py`` (which keeps what Ray's background thread prints off stdout), with
a time limit that kills its whole process group (``tools/run_limited.py``).

A block that raises ends the script: its item fails with the traceback, whose lines in
the script are given as the page's (``docs/x.md, line N``); the items of the blocks after
it fail as not run. A script killed at its limit, or by a signal, fails the block it was in,
saying so (``killed by SIGKILL``).

The only other path is ``--backend=verl`` (``on_verl.py``), which swaps ``reference_impl``
for veRL inside the test process and so runs blocks there.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import page_blocks
import take_away
from run_limited import run_limited
from tests.docblocks.node_starts import StartWatch
from tests.docblocks.python_blocks import RAY_FORWARDED, PythonBlock, cuda_available

# A page's whole script, Ray's start-up included; pytest's per-item limit is raised to
# this for the item that runs it (plugin.py). The harness's own tests lower it.
SCRIPT_LIMIT_S = 480
LAUNCHER = Path(__file__).with_name("script_launcher.py")
# The autoscaler's lines: never what a block printed. The script's own driver prints them
# from a background thread (script_launcher.MainThreadOnly sends those to stderr), but a
# driver that a block starts as a subprocess prints them to the shared stdout.
AUTOSCALER = re.compile(r"^(\x1b\[[0-9;]*m)?\(autoscaler \+\d+s\)")
MARKER_PREFIX, MARKER_SUFFIX = take_away.MARKER_LINE.split("{}")


@dataclass
class PageRun:
    """One run of a page's script: what each block printed, and how it ended."""

    printed: dict[int, str] = field(default_factory=dict)  # block number (from 1) -> text
    returncode: int = 0
    stderr: str = ""
    last_started: int = 0  # the block running when the script ended
    killed_after_s: int | None = None  # the limit, if the script was killed at it
    fence_lines: dict[int, int] = field(default_factory=dict)  # block number -> page line

    def outcome(self, number: int) -> tuple[str | None, str | None]:
        """(what block ``number`` printed, why it failed); one of the two is None."""
        if self.killed_after_s is not None and number == self.last_started:
            return None, (
                f"the page's script was killed at its time limit ({self.killed_after_s} s) "
                f"while this block ran:\n{self.stderr[-4000:]}"
            )
        if self.returncode != 0 and number == self.last_started:
            # A negative code is the signal that ended it: out of memory, a segfault.
            how = (
                f"was killed by {signal.Signals(-self.returncode).name}"
                if self.returncode < 0
                else "raised"
            )
            return None, f"the page's script {how} in this block:\n{self.stderr[-4000:]}"
        if number not in self.printed or (self.returncode != 0 and number > self.last_started):
            stopped = self.fence_lines.get(self.last_started, "?")
            return None, f"not run: the page's script stopped in the block at line {stopped}"
        return self.printed[number], None


def cut_at_markers(stdout: str) -> tuple[dict[int, str], int]:
    """Split the script's stdout at its marker lines: block number -> what it printed.

    Lines that Ray forwards from other processes, and the autoscaler's, are dropped.
    """
    printed: dict[int, str] = {}
    current = last = 0
    for line in stdout.splitlines(keepends=True):
        marker = line.strip()
        if marker.startswith(MARKER_PREFIX) and marker.endswith(MARKER_SUFFIX):
            label = marker.removeprefix(MARKER_PREFIX).removesuffix(MARKER_SUFFIX)
            current = 0 if label == "end" else int(label)
            if current:
                printed[current], last = "", current
        elif current and not (RAY_FORWARDED.match(line) or AUTOSCALER.match(line)):
            printed[current] += line
    return printed, last


def page_lines(script: str, where: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Script line -> page line, for every line of code that came from a block.

    ``where``: block number -> (the page line of its opening fence, its number of lines).
    In the script a block's code starts on the line after its marker line
    (``take_away.script_text``). Lines are counted from 1.
    """
    marker = re.compile(
        r"print\('" + re.escape(MARKER_PREFIX) + r"(\d+)" + re.escape(MARKER_SUFFIX) + r"'"
    )
    mapping: dict[int, int] = {}
    for index, line in enumerate(script.splitlines()):
        found = marker.match(line)
        if found is None or int(found[1]) not in where:
            continue
        fence, length = where[int(found[1])]
        for offset in range(1, length + 1):
            mapping[index + 1 + offset] = fence + offset
    return mapping


def with_page_lines(stderr: str, script: Path, page: str, mapping: dict[int, int]) -> str:
    """The traceback with each frame in the script given as the page's file and line."""

    def replace(match: re.Match) -> str:
        line = mapping.get(int(match[1]))
        return f'File "{page}", line {line}' if line else match[0]

    frame = r'File "(?:' + re.escape(str(script)) + "|" + re.escape(str(script.resolve())) + ")"
    return re.sub(frame + r'", line (\d+)', replace, stderr)


def only_blocks(script: str, numbers: set[int]) -> str:
    """The page's script (with marker lines) cut down to the blocks ``numbers``.

    For a page run as several scripts (``page_blocks.script_parts``): what comes before the
    first marker line (comments) and from the ``end`` marker on (Ray's shutdown) is kept,
    and each block in ``numbers`` from its marker line to the next marker line (so the
    prose comments before a block go with the block above it).
    """
    marker = re.compile(
        r"print\('" + re.escape(MARKER_PREFIX) + r"(\w+)" + re.escape(MARKER_SUFFIX) + r"'"
    )
    kept, keep = [], True
    for line in script.splitlines(keepends=True):
        found = marker.match(line)
        if found is not None:
            keep = found[1] == "end" or int(found[1]) in numbers
        if keep:
            kept.append(line)
    return "".join(kept)


def cut_after(script: str, number: int) -> str:
    """The script up to the end of block ``number``, then its end marker and Ray's shutdown.

    What the selected items need when none after block ``number`` is selected (``pytest
    PAGE --deselect ...``, the GPU kit's docs check): the rest of the page does not run.
    """
    marker = re.compile(
        r"^print\('" + re.escape(MARKER_PREFIX) + r"(\d+)" + re.escape(MARKER_SUFFIX) + r"'",
        re.MULTILINE,
    )
    later = next((m for m in marker.finditer(script) if int(m[1]) > number), None)
    if later is None:
        return script
    end = f"print({take_away.MARKER_LINE.format('end')!r}, flush=True)"
    shutdown = "import sys\nif 'ray' in sys.modules and sys.modules['ray'].is_initialized():"
    return script[: later.start()] + f"\n{end}\n{shutdown}\n    sys.modules['ray'].shutdown()\n"


def run_page_script(
    page: Path,
    where: dict[int, tuple[int, int]],
    part: bool = False,
    stop_after: int | None = None,
) -> PageRun:
    """Write the page's script (with marker lines) and run it as a reader would.

    ``where``: block number -> (its fence's page line, its length), to report page lines.
    ``part``: run only the blocks in ``where``, one of the page's scripts (``only_blocks``).
    ``stop_after``: the last block any selected item needs; the script ends after it.
    """
    docs = next((p for p in page.parents if p.name == "docs"), page.parent)
    with tempfile.TemporaryDirectory(prefix="page-script-") as folder:
        script = Path(folder) / (take_away.download_name(page, docs) + ".py")
        text = take_away.script_text(page, docs, markers=True, gpu=cuda_available())
        if part:
            text = only_blocks(text, set(where))
        if stop_after is not None:
            text = cut_after(text, stop_after)
        script.write_text(text, "utf-8")
        work = Path(folder) / "work"  # the reader's empty directory
        work.mkdir()
        # The venv's bin first, as in an activated environment: pages call `ray` and `python`.
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        limit = SCRIPT_LIMIT_S
        # -u: the markers and what the page's own subprocesses print reach the pipe in order.
        command = [sys.executable, "-u", str(LAUNCHER), str(script)]
        # While the script's ray.init() starts a node, its session goes first (node_starts.py).
        done = run_limited(
            command, limit, capture=True, cwd=work, env={**os.environ, "PATH": path},
            waiting=StartWatch().check,
        )  # fmt: skip
        stdout, stderr = done.stdout, done.stderr
        killed = limit if done.killed else None
        shown = str(page.relative_to(docs.parent)) if docs.name == "docs" else page.name
        stderr = with_page_lines(stderr, script, shown, page_lines(text, where))
    sys.stdout.write(stdout)  # visible with `pytest -s`
    printed, last = cut_at_markers(stdout)
    fence_lines = {number: fence for number, (fence, _) in where.items()}
    code = -signal.SIGKILL if done.killed else done.returncode  # as subprocess reports a kill
    return PageRun(printed, code, stderr, last, killed, fence_lines)


@dataclass
class PageScript:
    """What a page's python and gpu blocks share: the page, and the one run of its script."""

    page: Path
    where: dict[int, tuple[int, int]] = field(default_factory=dict)  # see run_page_script
    run: PageRun | None = None
    part: bool = False  # one of several scripts of the page (page_blocks.script_parts)
    stop_after: int | None = None  # the last block a selected item needs (plugin.py)


@dataclass
class ScriptBlock(PythonBlock):
    """A python or gpu block, run as part of its page's script."""

    script: PageScript | None = None
    number: int = 0  # among the page's python and gpu blocks, from 1
    gpu: bool = False  # marked `<!-- block: gpu -->`: runs only where CUDA is present


def run_in_page_script(example) -> str | None:
    """Evaluator of a python or gpu block: its part of the page's one script run.

    The first block that needs the run starts it; each block then takes what it printed.
    Without CUDA a gpu block is skipped (the script has it as comments).
    """
    block: ScriptBlock = example.parsed
    block.printed = None
    if block.gpu and not cuda_available():
        pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is False on this machine")
    shared = block.script
    if shared.run is None:
        shared.run = run_page_script(shared.page, shared.where, shared.part, shared.stop_after)
    printed, failure = shared.run.outcome(block.number)
    if failure is not None:
        return failure
    block.printed = printed
    return None


def page_text(path: Path) -> str:
    stat = path.stat()
    return _page_text(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _page_text(path: Path, mtime_ns: int, size: int) -> str:  # read again once changed
    return path.read_text("utf-8")


def script_scope(root: Path, nodeid: str) -> str:
    """The items that must run in one process, in one go: a page, or one of its scripts.

    pytest-xdist's ``--dist loadfile`` sends each file's items to one worker; a page run as
    several scripts (``page_blocks.script_parts``) is split here into one scope per script
    (``docs/errata.md::script1``), which workers take up as they would files (plugin.py's
    scheduler). The execution cache (cache.py) keys and stores the same scopes.
    """
    file, _, rest = nodeid.partition("::")
    line = re.search(r"line:(\d+)", rest)
    if not file.endswith(".md") or line is None or not (root / file).is_file():
        return file
    text = page_text(root / file)
    if page_blocks.script_count(text) == 1:
        return file
    return f"{file}::script{page_blocks.script_of_line(text, int(line[1]))}"
