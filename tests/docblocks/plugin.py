"""pytest plugin: every fenced block under ``docs/`` becomes a checked test item.

Loaded from the repository's top-level ``conftest.py`` (kept out of
``docs_dir`` so MkDocs never publishes it). Pages are Sybil documents whose
blocks run in order: a page's python blocks as one script (``page_scripts.py``),
its shell blocks in one terminal (``shell_blocks.py``), so pages must run whole
on one xdist worker (``--dist loadfile``, set in pyproject.toml).
``tools/page_blocks.py`` (the page model) says what each block is;
``python_blocks.py`` checks outputs and data; ``match.py`` compares what blocks printed.

After each page, whatever the page started is torn down, even when one of
its blocks failed: Ray is shut down, any torch.distributed process group is
destroyed, and the page's terminal is closed with what it left running.

Languages. A page and its Chinese twin carry the same code
(``tests/test_docs_pages.py`` checks it, with ``page_blocks.twin_mismatch``). By
default the English page is executed and the Chinese page yields no items:
the snippet a reader copies from either language is the one that ran, and the
suite starts Ray once per page instead of twice. ``pytest
--doc-languages=all`` executes the Chinese pages as well.

Backends. ``pytest --backend=verl`` runs the single-controller chapter a second time on
veRL 0.9.1 itself (``on_verl.py``). ``nox -s upstream`` does this.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from sybil import Document, Region, Sybil
from sybil.integration.pytest import SybilItem

import page_blocks
import take_away
from page_blocks import DATA_LANGUAGES, EXECUTED_PYTHON
from tests.docblocks import cache, heavy, longest_first, node_starts, update_outputs
from tests.docblocks.on_verl import ListedBlock, parse_blocks_on_verl, runs_on_verl
from tests.docblocks.page_scripts import (
    SCRIPT_LIMIT_S,
    PageScript,
    ScriptBlock,
    run_in_page_script,
    script_scope,
)
from tests.docblocks.python_blocks import (
    DataBlock,
    ExpectedOutput,
    Problem,
    PythonBlock,
    check_data,
    report_problem,
)
from tests.docblocks.shell_blocks import (
    FileBlock,
    ShellBlock,
    end_page,
    options_of,
    parse_console,
    run_bash,
    run_console,
    write_file,
)
from tests.upstream.backend import reference_impl_is_verl

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"

# "en": execute English pages only; "all": execute the Chinese pages too.
EXECUTE_LANGUAGES = {"value": "en"}
# "reference_impl": the pages as written; "verl": the veRL chapter on veRL 0.9.1 itself.
BACKEND = {"value": "reference_impl"}


def pytest_addoption(parser):
    parser.addoption(
        "--doc-languages",
        choices=("en", "all"),
        default="en",
        help="en (default): run the English pages (tests/test_docs_pages.py checks that the "
        "Chinese pages carry the same code); all: run the Chinese pages too.",
    )
    parser.addoption(
        "--backend",
        choices=("reference_impl", "verl"),
        default="reference_impl",
        help="verl: run the single-controller chapter (docs/verl/) and the tutorial notebook "
        "with reference_impl's imports replaced by veRL 0.9.1's (tests/upstream/backend.py); "
        "other pages are not collected.",
    )

    update_outputs.addoption(parser)
    cache.addoption(parser)


CONFIG: dict = {}  # the running session's config, for hooks that are not given it


def pytest_configure(config):
    # A pytester run inside a test configures this module again: restore the outer values.
    saved = (dict(EXECUTE_LANGUAGES), dict(BACKEND), dict(update_outputs.ENABLED), dict(CONFIG))
    config.stash[SAVED] = saved
    EXECUTE_LANGUAGES["value"] = config.getoption("--doc-languages")
    update_outputs.ENABLED["value"] = config.getoption(update_outputs.OPTION)
    CONFIG["value"] = config
    BACKEND["value"] = config.getoption("--backend")
    config.addinivalue_line(
        "markers",
        f"{cache.READS_DOCS}(*paths): the files or folders under docs/ that a test module "
        "reads; its execution-cache key holds these, not all of docs/ (tests/docblocks/cache.py)",
    )


SAVED = pytest.StashKey[tuple]()


def pytest_unconfigure(config):
    saved = config.stash.get(SAVED, None)
    if saved is not None:
        for target, values in zip(
            (EXECUTE_LANGUAGES, BACKEND, update_outputs.ENABLED, CONFIG), saved, strict=True
        ):
            target.clear()
            target.update(values)


def parse_blocks(document: Document) -> Iterator[Region]:
    """The Sybil parser: one region (one pytest item) per block that is checked."""
    path = Path(document.path)
    if BACKEND["value"] == "verl":
        if runs_on_verl(path):
            yield from parse_blocks_on_verl(document)
        return
    if page_blocks.language(path) == "zh" and EXECUTE_LANGUAGES["value"] == "en":
        return
    page = [b for b in page_blocks.parse(document.text) if isinstance(b, page_blocks.Block)]
    scripts = PageScripts(path, document.text)
    number = 0
    refused = None
    if any(block.kind in EXECUTED_PYTHON for block in page):
        try:
            take_away.has_downloads(path)
        except take_away.TakeAwayError as error:  # python and shell blocks on one page
            refused = Problem(str(error))
    # The block whose printed text an `output` block right after it shows.
    previous: PythonBlock | ShellBlock | None = None
    for block in page:
        follows, previous = previous, None
        where = (block.start, block.end)
        if block.kind in ("console", "bash"):
            try:
                shell = ShellBlock(block.source, block.kind, **options_of(block.note))
            except (TypeError, ValueError) as error:
                yield Region(*where, Problem(str(error)), report_problem)
                continue
            if block.kind == "bash":
                previous = shell
            run = run_console if block.kind == "console" else run_bash
            yield Region(*where, shell, run)
        elif block.kind == "file":
            yield Region(*where, FileBlock(block.note, block.source), write_file)
        elif block.kind in EXECUTED_PYTHON:
            if refused is not None:
                yield Region(*where, refused, report_problem)
                continue
            number += 1
            script = scripts.add(number, block)
            gpu = block.kind == "gpu"
            previous = ScriptBlock(block.source, script=script, number=number, gpu=gpu)
            yield Region(*where, previous, run_in_page_script)
        elif block.kind == "output":
            expected = ExpectedOutput(block.source, follows)
            yield Region(*where, expected, update_outputs.check_or_update)
        elif block.kind == "data" and block.language in DATA_LANGUAGES:
            yield Region(*where, DataBlock(block.source, block.language), check_data)
        elif block.kind == "unmarked":
            yield Region(*where, unmarked(block), report_problem)
        # "illustration" blocks, and data in languages we cannot parse, are shown, not run.


class PageScripts:
    """The scripts a page's python blocks run as: one, or one per group of sections on a page
    with ``<!-- page: scripts=N -->`` (``page_blocks.script_parts``). The page's set-up
    blocks (before its first ``##``) run in each of them; their items report from the first."""

    def __init__(self, path: Path, text: str) -> None:
        self.parts = page_blocks.script_parts(text)
        count = page_blocks.script_count(text)
        self.scripts = [PageScript(path, part=count > 1) for _ in range(count)]

    def add(self, number: int, block: page_blocks.Block) -> PageScript:
        """Put block ``number`` in its script(s); returns the script its item reports from."""
        part = self.parts[number]
        for script in self.scripts if part is None else [self.scripts[part]]:
            script.where[number] = (block.line, block.source.count("\n"))
        return self.scripts[part or 0]


def unmarked(block: page_blocks.Block) -> Problem:
    return Problem(
        f"this `{block.language or 'plain'}` block is neither run nor marked"
        f"{': ' + block.note if block.note else ''}. Make it a python block, "
        "or put <!-- block: illustration --> or <!-- block: data --> on the line above it."
    )


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


# Pages that need the machine to themselves: data_plane moves 512 MiB through the object
# store and TransferQueue (about 4 GB resident at its peak). Marker `alone`: serial pass.
ALONE_PAGES = (DOCS / "verl" / "transferqueue.md",)
# Pages that run veRL's trainer on a simulated cluster (minutes of every core): marker
# `heavy`, so that they take turns with tests/test_plan.py's plans (heavy.py).
HEAVY_PAGES = (DOCS / "verl" / "plan.md",)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    cache.remember_collected(config, items)  # before `-m` and `-k` deselect
    longest_first.reorder(config, items)
    # Before `-m` deselects: every item of a page with shell blocks is marked `shell`,
    # so the whole page runs in a shell pass (see tests/passes.py).
    shell_pages: dict[Path, bool] = {}
    for item in items:
        if not isinstance(item, SybilItem):
            continue
        page = Path(item.example.path)
        if page not in shell_pages:
            shell_pages[page] = page_blocks.runs_shell(page)
        if shell_pages[page]:
            item.add_marker(pytest.mark.shell)
        elif page in ALONE_PAGES:
            item.add_marker(pytest.mark.alone)
        if page in HEAVY_PAGES:
            item.add_marker(pytest.mark.heavy)
        if isinstance(item.example.parsed, ScriptBlock):
            # Any of these items may be the one that runs the page's whole script
            # (page_scripts.py), which has its own limit.
            item.add_marker(pytest.mark.timeout(SCRIPT_LIMIT_S + 60))
        elif isinstance(item.example.parsed, ShellBlock):
            # A block's `timeout=` and `retry=` are its own limits; pytest-timeout's default
            # (300 s) must not end it sooner (a 2 x 8 plan with timeout=600 was killed at 300 s).
            limit = item.example.parsed.limit_s()
            if limit > float(config.getini("timeout") or 0):
                item.add_marker(pytest.mark.timeout(limit))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, with a page run as several scripts spread as several files."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ScriptScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return script_scope(config.rootpath, nodeid)

        def schedule(self) -> None:
            # The workers collected the files longest first (longest_first.py): keep that
            # order rather than xdist's (most items first).
            self.config.option.loadscopereorder = False
            super().schedule()

    return ScriptScopeScheduling(config, log)


def pytest_collection_finish(session):
    """Pages unchanged since they passed are skipped (cache.py); each page's script runs
    only up to the last block that a selected item needs."""
    cache.collect(session)
    needed: dict[int, tuple[PageScript, int]] = {}
    for item in session.items:
        parsed = getattr(getattr(item, "example", None), "parsed", None)
        if isinstance(parsed, ExpectedOutput):  # an output needs the block it shows
            parsed = parsed.source_block
        if isinstance(parsed, ScriptBlock):
            script = parsed.script
            _, last = needed.get(id(script), (script, 0))
            needed[id(script)] = (script, max(last, parsed.number))
    for script, last in needed.values():
        script.stop_after = last


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Wait for a heavy item's turn (heavy.py), before pytest-timeout's clock starts; tell
    the cache which test runs, for its watch on what test modules read (cache.py)."""
    with heavy.turn(item):
        cache.running(item.config, item)
        yield
        cache.running(item.config, None)


def pytest_runtest_logreport(report):
    if "value" in CONFIG:
        longest_first.record(CONFIG["value"], report)  # the xdist controller's reports


def label(parsed) -> str:
    """The summary's name for a block of the kind ``parsed`` is."""
    if isinstance(parsed, ListedBlock):
        return "python, listed difference"
    if isinstance(parsed, ScriptBlock):
        return "gpu-only python" if parsed.gpu else "python"
    if isinstance(parsed, PythonBlock):
        return "python, on veRL"
    if isinstance(parsed, ExpectedOutput):
        listed = isinstance(parsed.source_block, ListedBlock)
        return "output, listed difference" if listed else "output"
    if isinstance(parsed, ShellBlock):
        return parsed.language  # "console" or "bash"
    if isinstance(parsed, FileBlock):
        return "file"
    if isinstance(parsed, DataBlock):
        return "data"
    return "unmarked"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    # The item's own config, not CONFIG: a pytester run inside a test may leave CONFIG set to
    # its own session's, and this session's results would then be lost to the cache.
    cache.record(item.config, outcome.get_result())
    if not isinstance(item, SybilItem):
        properties = outcome.get_result().user_properties
        if cache.from_cache(item):
            properties.append(("cached module", item.stash[cache.STATE]["page"]))
        module = cache.module_of(item.nodeid)
        if call.when == "teardown" and module in cache.undeclared(item.config):
            read = sorted(cache.undeclared(item.config)[module])
            properties.append(("undeclared docs reads", (module, read)))
        return
    if isinstance(item, SybilItem):
        parsed = item.example.parsed
        properties = outcome.get_result().user_properties
        if cache.from_cache(item):
            properties.append(("docblock", cache.LABEL))
            properties.append(("cached page", item.stash[cache.STATE]["page"]))
        else:
            properties.append(("docblock", label(parsed)))
        if isinstance(parsed, ShellBlock) and parsed.language == "console":
            properties.append(("commands", len(parse_console(parsed.source))))
        place = (str(item.example.path), item.example.region.start)
        if call.when == "call" and place in update_outputs.UPDATED:
            properties.append(("output updated", update_outputs.UPDATED[place]))


def pytest_sessionfinish(session, exitstatus):
    """--update-outputs: write what this process's pages queued (update_outputs.py); and
    store the cache keys of the pages that passed whole here (cache.py)."""
    update_outputs.write_pending()
    cache.store(session.config)
    longest_first.store(session.config)  # what each file took, for the next run's order


ROWS = (
    ("python", "python blocks run as their page's downloadable script"),
    ("python, on veRL", "python blocks run on veRL, one by one in the test process"),
    ("output", "output blocks compared"),
    ("gpu-only python", "gpu-only python blocks"),
    ("console", "console blocks run, each command's output compared"),
    ("bash", "bash blocks run"),
    ("file", "file blocks written for the commands that use them"),
    ("data", "data blocks parsed"),
    ("python, listed difference", "listed differences (each must differ on veRL)"),
    ("output, listed difference", "their output blocks (each must differ, or its block raise)"),
    ("unmarked", "unmarked blocks (each fails)"),
    (
        cache.LABEL,
        "blocks not run: their page passed, and it is unchanged (tests/docblocks/cache.py)",
    ),
)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """What this pass ran, by kind of block. Deselected blocks are not counted."""
    if hasattr(config, "workerinput"):
        return
    results: Counter = Counter()
    commands = 0
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            properties = dict(getattr(report, "user_properties", ()))
            if "docblock" in properties and (report.when == "call" or outcome != "passed"):
                results[properties["docblock"], outcome] += 1
                if outcome == "passed":
                    commands += properties.get("commands", 0)
    updated = [
        dict(report.user_properties)["output updated"]
        for report in terminalreporter.stats.get("passed", [])
        if "output updated" in dict(getattr(report, "user_properties", ()))
    ]
    if updated:
        terminalreporter.write_sep("=", f"{update_outputs.OPTION}: output blocks rewritten")
        for where in updated:
            terminalreporter.write_line(where)
    if not results:
        cache_line(terminalreporter, config, pages_ran=False)
        return
    where = " on veRL 0.9.1 (--backend=verl)" if BACKEND["value"] == "verl" else ""
    terminalreporter.write_sep("=", f"doc blocks this pass ran{where}")
    for kind, text in ROWS:
        counts = [f"{results[kind, o]} {o}" for o in ("passed", "failed", "skipped", "error")]
        counts = [c for c in counts if not c.startswith("0 ")]
        if counts:
            terminalreporter.write_line(f"{text}: {', '.join(counts)}")
    if commands:
        terminalreporter.write_line(f"shell commands run and compared: {commands}")
    terminalreporter.write_line(f"Ray {node_starts.how_starts_run()}")
    cache_line(terminalreporter, config)
    if EXECUTE_LANGUAGES["value"] == "en" and BACKEND["value"] != "verl":
        terminalreporter.write_line(
            "Chinese pages: not run; tests/test_docs_pages.py checks they carry the same "
            "code (--doc-languages=all runs them)"
        )


def cache_line(terminalreporter, config, pages_ran: bool = True) -> None:
    """One line: how many pages and test modules the cache gave this run, or why it was off
    (said only where pages ran); then each test module not cached for what it read."""
    pages = {
        dict(report.user_properties)["cached page"]
        for report in terminalreporter.stats.get("skipped", [])
        if "cached page" in dict(getattr(report, "user_properties", ()))
    }
    off = cache.why_off(config)
    if off is not None:
        ran = terminalreporter.stats.get("passed") or terminalreporter.stats.get("failed")
        if pages_ran and ran:
            terminalreporter.write_line(f"execution cache off ({off}): every page ran")
        return
    blocks = sum(
        1
        for report in terminalreporter.stats.get("skipped", [])
        if "cached page" in dict(getattr(report, "user_properties", ()))
    )
    modules = [
        dict(report.user_properties)["cached module"]
        for report in terminalreporter.stats.get("skipped", [])
        if "cached module" in dict(getattr(report, "user_properties", ()))
    ]
    also = f", {len(set(modules))} test modules ({len(modules)} tests)" if modules else ""
    if pages_ran or modules:
        terminalreporter.write_line(
            f"execution cache: {len(pages)} pages ({blocks} blocks){also} taken from the cache, "
            f"unchanged since they passed; `{cache.OPTION}` runs them"
        )
    unnamed: dict[str, set[str]] = defaultdict(set)
    for reports in terminalreporter.stats.values():
        for report in reports:
            found = dict(getattr(report, "user_properties", ())).get("undeclared docs reads")
            if found:
                unnamed[found[0]].update(found[1])
    for module, files in sorted(unnamed.items()):
        terminalreporter.write_line(
            f"execution cache: not caching {module}: it read {', '.join(sorted(files))}, "
            f"which its `{cache.READS_DOCS}` mark does not name"
        )
