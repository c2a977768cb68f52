"""A page's python blocks, run as the script a reader downloads from the page.

Every page with executed python blocks offers its blocks as a script
(``tools/take_away.py``; the site's "download as script" link). The suite runs
that script, not the blocks one by one in its own process: what a reader
downloads is what ran, and each page runs once. The script is the downloaded
one plus a marker line printed before each python block
(``script_text(..., markers=True)``), so that its output can be cut into what
each block printed; it runs with ``python -u`` in a fresh process, in an empty
working directory, with a hard time limit that kills its whole process group.
It is started through ``script_launcher.py``, which keeps what Ray's background
thread prints off stdout, so it cannot splice itself into a block's line.

A block that raises ends the script: that block's item fails with the
traceback, and the items of the blocks after it fail as not run.

Not run this way (``python_blocks.run_python`` runs them in-process instead):
pages outside ``docs/`` (the harness's own tests), the veRL backend (which
swaps ``reference_impl`` for veRL inside the process), and every page on a
machine with CUDA, where the ``gpu`` blocks, which the script leaves out as
comments, must run between the others.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.docblocks.python_blocks import RAY_FORWARDED, PythonBlock

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# A page's whole script, Ray's start-up included; pytest's per-item limit is raised to
# this for the item that runs it (plugin.py).
SCRIPT_LIMIT_S = 480
LAUNCHER = Path(__file__).with_name("script_launcher.py")
# The autoscaler's lines: never what a block printed. The script's own driver prints them
# from a background thread (script_launcher.MainThreadOnly sends those to stderr), but a
# driver that a block starts as a subprocess prints them to the shared stdout.
AUTOSCALER = re.compile(r"^(\x1b\[[0-9;]*m)?\(autoscaler \+\d+s\)")


def load_take_away():
    """``tools/take_away.py``: tools/ is not a package (MkDocs loads its hooks by path)."""
    if "take_away" in sys.modules:
        return sys.modules["take_away"]
    spec = importlib.util.spec_from_file_location("take_away", REPO / "tools" / "take_away.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["take_away"] = module  # before running it: its dataclasses look it up there
    spec.loader.exec_module(module)
    return module


take_away = load_take_away()


def runs_as_script(page: Path) -> bool:
    """Does the suite run this page's python blocks as its downloadable script?"""
    if DOCS not in page.parents or not take_away.has_downloads(page):
        return False
    import torch  # here, not at the top: the harness's other modules do not need torch

    return not torch.cuda.is_available()


@dataclass
class PageRun:
    """One run of a page's script: what each python block printed, and how it ended."""

    printed: dict[int, str] = field(default_factory=dict)  # block number (from 1) -> text
    returncode: int = 0
    stderr: str = ""
    last_started: int = 0  # the block running when the script ended

    def outcome(self, number: int) -> tuple[str | None, str | None]:
        """(what block ``number`` printed, why it failed); one of the two is None."""
        if self.returncode != 0 and number == self.last_started:
            return None, f"the page's script raised in this block:\n{self.stderr[-4000:]}"
        if number not in self.printed or (self.returncode != 0 and number > self.last_started):
            return None, f"not run: the page's script stopped in python block {self.last_started}"
        return self.printed[number], None


def cut_at_markers(stdout: str) -> tuple[dict[int, str], int]:
    """Split the script's stdout at its marker lines: block number -> what it printed.

    Lines that Ray forwards from other processes, and the autoscaler's, are dropped.
    """
    printed: dict[int, str] = {}
    current = last = 0
    prefix, suffix = take_away.MARKER_LINE.split("{}")
    for line in stdout.splitlines(keepends=True):
        marker = line.strip()
        if marker.startswith(prefix) and marker.endswith(suffix):
            label = marker.removeprefix(prefix).removesuffix(suffix)
            current = 0 if label == "end" else int(label)
            if current:
                printed[current], last = "", current
        elif current and not (RAY_FORWARDED.match(line) or AUTOSCALER.match(line)):
            printed[current] += line
    return printed, last


def run_page_script(page: Path) -> PageRun:
    """Write the page's script (with marker lines) and run it as a reader would."""
    with tempfile.TemporaryDirectory(prefix="page-script-") as folder:
        script = Path(folder) / (take_away.download_name(page, DOCS) + ".py")
        script.write_text(take_away.script_text(page, DOCS, markers=True), "utf-8")
        work = Path(folder) / "work"  # the reader's empty directory
        work.mkdir()
        # The venv's bin first, as in an activated environment: pages call `ray` and `python`.
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        # -u: the markers and what the page's own subprocesses print reach the pipe in order.
        process = subprocess.Popen(
            [sys.executable, "-u", str(LAUNCHER), str(script)],
            cwd=work,
            env={**os.environ, "PATH": path},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=SCRIPT_LIMIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            stderr += f"\n(killed: the script ran past {SCRIPT_LIMIT_S} s)"
            process.returncode = process.returncode or -9
    sys.stdout.write(stdout)  # visible with `pytest -s`
    printed, last = cut_at_markers(stdout)
    return PageRun(printed, process.returncode, stderr, last)


def run_in_page_script(example) -> str | None:
    """Evaluator of a python block of a page that runs as its script.

    The page's first python block runs the whole script; each block then takes what it
    printed from that run.
    """
    block: PythonBlock = example.parsed
    block.printed = None
    run = example.namespace.get("__page_run__")
    if run is None:
        run = example.namespace["__page_run__"] = run_page_script(Path(example.path))
    printed, failure = run.outcome(block.number)
    if failure is not None:
        return failure
    block.printed = printed
    return None
