"""pytest plugin: every fenced block under ``docs/`` becomes a checked test item.

Loaded from the repository's top-level ``conftest.py`` (kept out of
``docs_dir`` so MkDocs never publishes it). Pages are Sybil documents: all
python blocks of a page share one namespace and run in order, so pages must
run whole on one xdist worker (``--dist loadfile``, set in pyproject.toml).

After each page, whatever the page started is torn down, even when one of
its blocks failed: Ray is shut down and any torch.distributed process group
is destroyed.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sybil import Document, Region, Sybil
from sybil.integration.pytest import SybilItem
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

from tests.docblocks.blocks import DATA_LANGUAGES, BlockKind, classify, marker_before
from tests.docblocks.evaluators import (
    DataBlock,
    ExpectedOutput,
    Problem,
    PythonBlock,
    check_data,
    check_output,
    report_problem,
    run_gpu_python,
    run_python,
)

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"

# The whole info string, attributes included: Sybil's stock lexer wants the
# language alone on the line and silently drops `python title="x.py"`.
LEXER = RawFencedCodeBlockLexer(
    info_pattern=re.compile(r"(?P<info>[^\n]*)$\n", re.MULTILINE),
    mapping={"info": "info", "source": "source"},
)


def census(document: Document) -> Iterator[tuple[Region, BlockKind]]:
    """Every fenced block of a page with its verdict, in page order."""
    for region in LEXER(document):
        marker = marker_before(document.text, region.start)
        yield region, classify(region.lexemes["info"], marker)


def parse_blocks(document: Document) -> Iterator[Region]:
    """The Sybil parser: one region (one pytest item) per block that is checked."""
    previous_python: PythonBlock | None = None
    for region, verdict in census(document):
        source = str(region.lexemes["source"])
        follows_python, previous_python = previous_python, None
        if verdict.kind == "python":
            previous_python = PythonBlock(source)
            yield Region(region.start, region.end, previous_python, run_python)
        elif verdict.kind == "gpu":
            previous_python = PythonBlock(source, kind="gpu")
            yield Region(region.start, region.end, previous_python, run_gpu_python)
        elif verdict.kind == "output":
            yield Region(
                region.start, region.end, ExpectedOutput(source, follows_python), check_output
            )
        elif verdict.kind == "data" and verdict.language in DATA_LANGUAGES:
            yield Region(region.start, region.end, DataBlock(source, verdict.language), check_data)
        elif verdict.kind == "unmarked":
            message = (
                f"this `{verdict.language or 'plain'}` block is neither run nor marked"
                f"{': ' + verdict.note if verdict.note else ''}. Make it a python block, "
                "or put <!-- block: illustration --> or <!-- block: data --> on the line above it."
            )
            yield Region(region.start, region.end, Problem(message), report_problem)
        # "illustration" blocks, and data in languages we cannot parse, are
        # accounted for by census() and counted in the summary; nothing runs.


def start_page(namespace: dict) -> None:
    # Functions and classes defined on a page behave as in a script run with
    # `python page.py`: cloudpickle ships __main__ objects to Ray by value.
    namespace["__name__"] = "__main__"
    stop_what_the_page_started(namespace)


def stop_what_the_page_started(namespace: dict) -> None:
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


DOC_SYBIL = Sybil(
    parsers=[parse_blocks],
    path=str(DOCS),
    patterns=["*.md"],
    setup=start_page,
    teardown=stop_what_the_page_started,
    name="docs",
)

pytest_collect_file = DOC_SYBIL.pytest()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if isinstance(item, SybilItem):
        outcome.get_result().user_properties.append(("docblock", item.example.parsed.kind))


def docs_census() -> Counter:
    counts: Counter = Counter()
    for page in sorted(DOCS.rglob("*.md")):
        counts.update(verdict.kind for _, verdict in census(DOC_SYBIL.parse(page)))
    return counts


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput"):
        return
    results: Counter = Counter()
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            kind = dict(getattr(report, "user_properties", ())).get("docblock")
            if kind and (report.when == "call" or outcome in ("skipped", "error")):
                results[kind, outcome] += 1
    if not results:
        return
    blocks = docs_census()
    pages = len(list(DOCS.rglob("*.md")))

    def ran(kind: str) -> str:
        parts = [f"{results[kind, o]} {o}" for o in ("passed", "failed", "skipped", "error")]
        return ", ".join(p for p in parts if not p.startswith("0 "))

    terminalreporter.write_sep("=", "doc blocks")
    terminalreporter.write_line(f"pages: {pages} ({pages // 2} per language)")
    rows = [
        ("python blocks (executed)", "python"),
        ("output blocks (compared)", "output"),
        ("gpu-only python blocks", "gpu"),
        ("data blocks (parsed)", "data"),
    ]
    for label, kind in rows:
        terminalreporter.write_line(
            f"{label}: {blocks[kind]} on the site; this run: {ran(kind) or 'none'}"
        )
    terminalreporter.write_line(f"illustration blocks (shown, not run): {blocks['illustration']}")
    if blocks["unmarked"]:
        terminalreporter.write_line(f"UNMARKED blocks (failing): {blocks['unmarked']}", red=True)
