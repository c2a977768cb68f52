"""pytest plugin: every fenced block under ``docs/`` becomes a checked test item.

Loaded from the repository's top-level ``conftest.py`` (kept out of
``docs_dir`` so MkDocs never publishes it). Pages are Sybil documents: all
python blocks of a page share one namespace and run in order, so pages must
run whole on one xdist worker (``--dist loadfile``, set in pyproject.toml).

After each page, whatever the page started is torn down, even when one of
its blocks failed: Ray is shut down and any torch.distributed process group
is destroyed.

Languages. A page and its Chinese twin carry byte-identical code and output
blocks (``tests/test_docs_pages.py`` enforces it). By default the English page
is executed and each block of the ``.zh.md`` twin becomes an item that checks
it is identical to the English block at the same position, which ran: the
snippet a reader copies from either language is the one that was executed,
and the suite starts Ray once per page instead of twice. ``pytest
--doc-languages=all`` executes the Chinese pages as well.

Backends. ``pytest --backend=verl`` runs the single-controller chapter a second time on
veRL 0.9.1 itself: ``reference_impl`` is replaced by veRL's objects under the same names
(``tests/upstream/backend.py``), and the blocks listed in the chapter's table of
differences must differ there. ``nox -s upstream`` does this.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
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
    output_matches,
    report_problem,
    run_gpu_python,
    run_python,
)
from tests.docblocks.shell import (
    FileBlock,
    ShellBlock,
    end_page,
    options_of,
    parse_console,
    run_bash,
    run_console,
    write_file,
)
from tests.upstream.backend import (
    BLOCK_LIMIT_S,
    CHAPTER,
    CHAPTER_PAGES,
    HANG_S,
    Hung,
    listed_differences,
    reference_impl_is_verl,
    time_limit,
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


# "en": execute English pages, check Chinese blocks against them; "all": execute both.
EXECUTE_LANGUAGES = {"value": "en"}
# "reference_impl": the pages as written; "verl": the veRL chapter on veRL 0.9.1 itself.
BACKEND = {"value": "reference_impl"}


def pytest_addoption(parser):
    parser.addoption(
        "--doc-languages",
        choices=("en", "all"),
        default="en",
        help="en (default): run English pages and check that each Chinese block is identical "
        "to the English block that ran; all: run the Chinese pages too.",
    )
    parser.addoption(
        "--backend",
        choices=("reference_impl", "verl"),
        default="reference_impl",
        help="verl: run the single-controller chapter (docs/verl/) and the tutorial notebook "
        "with reference_impl's imports replaced by veRL 0.9.1's (tests/upstream/backend.py); "
        "other pages are not collected.",
    )


def pytest_configure(config):
    EXECUTE_LANGUAGES["value"] = config.getoption("--doc-languages")
    BACKEND["value"] = config.getoption("--backend")


def english_twin(page: Path) -> Path:
    return page.with_name(page.name[: -len(".zh.md")] + ".md")


@dataclass
class TwinBlock:
    """A block of a ``.zh.md`` page, checked against its executed English twin."""

    info: str
    source: str
    twin_page: Path
    index: int
    kind: str


def check_twin(example) -> str | None:
    block: TwinBlock = example.parsed
    if not block.twin_page.exists():
        return f"no English twin {block.twin_page.name} to check this block against"
    twins = [r for r, _ in census(DOC_SYBIL.parse(block.twin_page))]
    if block.index >= len(twins):
        return f"{block.twin_page.name} has only {len(twins)} blocks; this is {block.index + 1}"
    twin = twins[block.index]
    if (str(twin.lexemes["info"]), str(twin.lexemes["source"])) != (block.info, block.source):
        return (
            f"block {block.index + 1} differs from block {block.index + 1} of "
            f"{block.twin_page.name}, which is the one executed; the two languages must carry "
            "identical code and output blocks"
        )
    return None


def runs_on_verl(path: Path) -> bool:
    """Pages run a second time on veRL: the single-controller chapter's English pages."""
    return path.parent == CHAPTER and path.name in CHAPTER_PAGES


def parse_blocks(document: Document) -> Iterator[Region]:
    """The Sybil parser: one region (one pytest item) per block that is checked."""
    path = Path(document.path)
    if BACKEND["value"] == "verl":
        if runs_on_verl(path):
            yield from parse_blocks_on_verl(document)
        return
    if path.name.endswith(".zh.md") and EXECUTE_LANGUAGES["value"] == "en":
        yield from parse_twin_blocks(document, english_twin(path))
        return
    previous_python: PythonBlock | ShellBlock | None = None
    for region, verdict in census(document):
        source = str(region.lexemes["source"])
        follows_python, previous_python = previous_python, None
        if verdict.kind in ("console", "bash"):
            try:
                block = ShellBlock(
                    source, verdict.kind, kind=verdict.kind, **options_of(verdict.note)
                )
            except (TypeError, ValueError) as error:
                yield Region(region.start, region.end, Problem(str(error)), report_problem)
                continue
            if verdict.kind == "bash":
                previous_python = block
            run = run_console if verdict.kind == "console" else run_bash
            yield Region(region.start, region.end, block, run)
        elif verdict.kind == "file":
            yield Region(region.start, region.end, FileBlock(verdict.note, source), write_file)
        elif verdict.kind == "python":
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
            yield Region(region.start, region.end, unmarked(verdict), report_problem)
        # "illustration" blocks, and data in languages we cannot parse, are
        # accounted for by census() and counted in the summary; nothing runs.


def parse_blocks_on_verl(document: Document) -> Iterator[Region]:
    """The page's python and output blocks, for a run on veRL; listed blocks must differ."""
    listed = {d.block: d for d in listed_differences() if d.page == Path(document.path).name}
    previous: PythonBlock | None = None
    number = 0
    for region, verdict in census(document):
        source = str(region.lexemes["source"])
        follows, previous = previous, None
        if verdict.kind == "python":
            number += 1
            difference = listed.pop(number, None)
            if difference is None:
                previous = PythonBlock(source, kind="python on veRL")
                yield Region(region.start, region.end, previous, run_on_verl)
            else:
                previous = ListedBlock(source, kind="python, listed difference", row=difference)
                yield Region(region.start, region.end, previous, run_listed)
        elif verdict.kind == "output" and follows is not None:
            if isinstance(follows, ListedBlock):
                follows.has_output = True
                output = ExpectedOutput(source, follows, kind="output, listed difference")
                yield Region(region.start, region.end, output, check_listed_output)
            else:
                output = ExpectedOutput(source, follows, kind="output on veRL")
                yield Region(region.start, region.end, output, check_output)
    for difference in listed.values():  # a row naming a block the page does not have
        problem = Problem(
            f"the table of differences lists python block {difference.block} of "
            f"{difference.page}, which has only {number} python blocks",
            kind="python, listed difference",
        )
        yield Region(len(document.text), len(document.text), problem, report_problem)


@dataclass
class ListedBlock(PythonBlock):
    """A python block listed in the table of differences: on veRL it must not hold."""

    row: object = None
    has_output: bool = False
    raised: str | None = None


def run_on_verl(example) -> str | None:
    """An unlisted block on veRL: it must hold, and it may not hang (veRL waits without
    timeouts, and pytest-timeout's alarm does not interrupt ``ray.get``)."""
    try:
        with time_limit(BLOCK_LIMIT_S):
            run_python(example)
    except Hung as error:
        return f"on veRL 0.9.1 this block {error}; list it in docs/verl/differences.md or fix it"
    return None


def run_listed(example) -> str | None:
    block: ListedBlock = example.parsed
    block.raised = None
    try:
        with time_limit(HANG_S):
            run_python(example)
    except Hung as error:
        block.raised = f"hung: {error}"
    except Exception as error:  # noqa: BLE001 - any failure is the listed difference
        first_line = str(error).splitlines()[0] if str(error) else ""
        block.raised = f"{type(error).__name__}: {first_line}"
    if block.raised is None and not block.has_output:
        return (
            f"listed in docs/verl/differences.md ({block.row.what}), but it runs on veRL "
            "0.9.1 without error and shows no output to differ: remove the row"
        )
    sys.stdout.write(f"\n[differs on veRL as listed: {block.raised or 'prints otherwise'}]\n")
    return None


def check_listed_output(example) -> str | None:
    expected: ExpectedOutput = example.parsed
    block: ListedBlock = expected.source_block
    if block.raised is not None:
        return None  # the python block already differed
    if block.printed is not None and output_matches(expected.text, block.printed):
        return (
            f"listed in docs/verl/differences.md ({block.row.what}), but on veRL 0.9.1 "
            "it prints what the page shows: remove the row"
        )
    return None


def unmarked(verdict: BlockKind) -> Problem:
    return Problem(
        f"this `{verdict.language or 'plain'}` block is neither run nor marked"
        f"{': ' + verdict.note if verdict.note else ''}. Make it a python block, "
        "or put <!-- block: illustration --> or <!-- block: data --> on the line above it."
    )


def parse_twin_blocks(document: Document, twin_page: Path) -> Iterator[Region]:
    for index, (region, verdict) in enumerate(census(document)):
        if verdict.kind == "unmarked":
            yield Region(region.start, region.end, unmarked(verdict), report_problem)
        elif verdict.kind != "illustration":
            info, source = str(region.lexemes["info"]), str(region.lexemes["source"])
            twin = TwinBlock(info, source, twin_page, index, kind=f"{verdict.kind} (zh twin)")
            yield Region(region.start, region.end, twin, check_twin)


def start_page(namespace: dict) -> None:
    # Functions and classes defined on a page behave as in a script run with
    # `python page.py`: cloudpickle ships __main__ objects to Ray by value.
    namespace["__name__"] = "__main__"
    stop_what_the_page_started(namespace)
    if BACKEND["value"] == "verl":
        switch = reference_impl_is_verl()
        switch.__enter__()
        namespace["__reference_impl_is_verl__"] = switch


def stop_what_the_page_started(namespace: dict) -> None:
    switch = namespace.pop("__reference_impl_is_verl__", None)
    if switch is not None:
        switch.__exit__(None, None, None)
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    end_page(namespace)  # the page's terminal: what its commands left running, its temp dirs


DOC_SYBIL = Sybil(
    parsers=[parse_blocks],
    path=str(DOCS),
    patterns=["*.md"],
    setup=start_page,
    teardown=stop_what_the_page_started,
    name="docs",
)

pytest_collect_file = DOC_SYBIL.pytest()


SHELL_KINDS = ("console", "bash", "file")
SHELL_PAGES: dict[Path, bool] = {}


def runs_shell(page: Path) -> bool:
    """Does the page type into a terminal? Its commands may `ray stop` the whole machine."""
    if page not in SHELL_PAGES:
        kinds = {verdict.kind for _, verdict in census(DOC_SYBIL.parse(page))}
        SHELL_PAGES[page] = bool(kinds & set(SHELL_KINDS))
    return SHELL_PAGES[page]


# Pages that need the machine to themselves: data_plane moves 512 MiB through the object
# store and TransferQueue (about 4 GB resident at its peak). Marker `alone`: serial pass.
ALONE_PAGES = (DOCS / "verl" / "transferqueue.md",)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # Before `-m` deselects: every item of a page with shell blocks is marked `shell`,
    # so the whole page runs in the serial pass (see noxfile.py, session tests).
    for item in items:
        if isinstance(item, SybilItem) and runs_shell(Path(item.example.path)):
            item.add_marker(pytest.mark.shell)
        elif isinstance(item, SybilItem) and Path(item.example.path) in ALONE_PAGES:
            item.add_marker(pytest.mark.alone)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if isinstance(item, SybilItem):
        outcome.get_result().user_properties.append(("docblock", item.example.parsed.kind))


def docs_census() -> Counter:
    """Blocks of each kind on the site, plus ``commands``: the `$` lines of console blocks."""
    counts: Counter = Counter()
    for page in sorted(DOCS.rglob("*.md")):
        for region, verdict in census(DOC_SYBIL.parse(page)):
            counts[verdict.kind] += 1
            if verdict.kind == "console" and not page.name.endswith(".zh.md"):
                counts["commands"] += len(parse_console(str(region.lexemes["source"])))
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
        ("console blocks (every command run, output compared)", "console"),
        ("bash blocks (run)", "bash"),
        ("file blocks (written for the commands that use them)", "file"),
        ("data blocks (parsed)", "data"),
    ]
    for label, kind in rows:
        line = f"{label}: {blocks[kind]} on the site; this run: {ran(kind) or 'none'}"
        if ran(f"{kind} (zh twin)"):
            line += f"; zh blocks identical to the block that ran: {ran(f'{kind} (zh twin)')}"
        terminalreporter.write_line(line)
    terminalreporter.write_line(
        f"shell commands in the English console blocks: {blocks['commands']} "
        "(each run, output compared; zh blocks identical)"
    )
    terminalreporter.write_line(f"illustration blocks (shown, not run): {blocks['illustration']}")
    if EXECUTE_LANGUAGES["value"] == "en":
        terminalreporter.write_line(
            "zh pages: each block checked identical to its English twin, which ran "
            "(--doc-languages=all runs them too)"
        )
    if BACKEND["value"] == "verl":
        terminalreporter.write_line(
            f"blocks run on veRL 0.9.1 (--backend=verl): python {ran('python on veRL') or 'none'}; "
            f"output {ran('output on veRL') or 'none'}; listed differences "
            f"{ran('python, listed difference') or 'none'} (each must differ on veRL)"
        )
    if blocks["unmarked"]:
        terminalreporter.write_line(f"UNMARKED blocks (failing): {blocks['unmarked']}", red=True)
