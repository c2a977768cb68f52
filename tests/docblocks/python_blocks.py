"""Python, output and data blocks: how each is run or checked.

``python`` blocks run with ``exec`` in the page's namespace, with their printed
output captured. ``output`` blocks are compared (``match.py``) with what the
python or bash block above them printed. ``data`` blocks are parsed. The rules
a page follows are in ``collect.py``; how pytest collects them, in ``plugin.py``.
"""

from __future__ import annotations

import io
import json
import re
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


@dataclass
class PythonBlock:
    """A python block. ``printed`` is what its last run wrote to stdout (None: not run)."""

    source: str
    gpu: bool = False  # marked `<!-- block: gpu -->`: runs only where CUDA is present
    number: int = 0  # among the page's (non-gpu) python blocks, from 1
    in_script: bool = False  # run as part of the page's script (page_scripts.py)
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


def run_gpu_python(example) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is False on this machine")
    run_python(example)


def check_output(example) -> str | None:
    expected: ExpectedOutput = example.parsed
    if expected.source_block is None:
        return "an `output` block must come right after a `python` or `bash` block"
    printed = expected.source_block.printed
    if printed is None and getattr(expected.source_block, "gpu", False):
        import torch

        if not torch.cuda.is_available():
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
