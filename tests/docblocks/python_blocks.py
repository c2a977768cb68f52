"""Python, output and data blocks: what each holds, and how it is checked.

``python`` blocks run as their page's script (``page_scripts.py``); only under
``--backend=verl`` (``on_verl.py``) do they run here, with :func:`run_python`, in the
test process. ``output`` blocks are compared (``match.py``) with what the python or bash
block above them printed. ``data`` blocks are parsed. The rules a page follows are in
``tools/page_blocks.py``; how pytest collects them, in ``plugin.py``.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import json
import re
import subprocess
import sys
from contextlib import redirect_stdout
from dataclasses import dataclass

import pytest
import yaml

from tests.docblocks.match import clean, matches
from tests.docblocks.script_launcher import MainThreadOnly

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# A line Ray's driver forwards from another process: `(raylet) ...`, `(pid=123) ...`,
# `(Actor pid=123) ...`, perhaps coloured. They arrive at unpredictable times, and
# `ray.shutdown()` inside a block flushes them from the block's own thread, so they are
# never part of what a block printed.
RAY_FORWARDED = re.compile(r"^(\x1b\[[0-9;]*m)?\((raylet|pid=\d+|\w+ pid=\d+)\)")


@functools.cache
def cuda_available() -> bool:
    """Do ``gpu`` blocks run here? Asked once, of a fresh interpreter, the page scripts' own.

    Not imported here: torch cannot be imported twice in one process, and the harness's
    self-tests (pytester) drop what a test run imported.
    """
    if importlib.util.find_spec("torch") is None:
        return False
    probe = "import torch; print(torch.cuda.is_available())"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip() == "True"


@dataclass
class PythonBlock:
    """A python block. ``printed`` is what its last run wrote to stdout (None: not run)."""

    source: str
    printed: str | None = None


@dataclass
class ExpectedOutput:
    """An ``output`` block and the python block whose printed text it shows."""

    text: str
    source_block: (
        PythonBlock | None
    )  # or a bash block (shell_blocks.ShellBlock): both have .printed


@dataclass
class DataBlock:
    source: str
    language: str


@dataclass
class Problem:
    """A block the author must fix (unmarked, misplaced output, ...): its item fails."""

    message: str


def run_python(example) -> None:
    """Run a block in the test process, in the page's namespace (``--backend=verl`` only)."""
    block: PythonBlock = example.parsed
    block.printed = None
    # Leading newlines make tracebacks point at the right line of the .md file.
    code = compile("\n" * example.line + block.source, example.path, "exec")
    captured = io.StringIO()
    # Ray's driver prints worker logs (``(pid=123) ...``) from a background thread at
    # unpredictable times: they go to the real stdout, not into what the block printed.
    with redirect_stdout(MainThreadOnly(captured, sys.stdout)):
        exec(code, example.namespace)
    printed = captured.getvalue()
    sys.stdout.write(printed)  # visible with `pytest -s`
    kept = [line for line in printed.splitlines(keepends=True) if not RAY_FORWARDED.match(line)]
    block.printed = "".join(kept)


def check_output(example) -> str | None:
    expected: ExpectedOutput = example.parsed
    if expected.source_block is None:
        return "an `output` block must come right after a `python` or `bash` block"
    printed = expected.source_block.printed
    if printed is None and getattr(expected.source_block, "gpu", False) and not cuda_available():
        pytest.skip("shows what a gpu block printed: torch.cuda.is_available() is False here")
    if printed is None:
        return "the python block above this output did not run, or it failed"
    if matches(expected.text, printed):
        return None
    return (
        "printed output differs from the page's `output` block\n"
        f"--- page shows ---\n{clean(expected.text)}\n"
        f"--- block printed ---\n{clean(printed)}"
    )


def check_data(example) -> None:
    block: DataBlock = example.parsed
    if block.language in ("yaml", "yml"):
        list(yaml.safe_load_all(block.source))
    elif block.language == "json":
        json.loads(block.source)
    elif block.language == "toml":
        tomllib.loads(block.source)


def report_problem(example) -> str:
    return example.parsed.message
