"""An execution cache for local reruns: a page that passed, and has not changed, is not run again.

As Jupyter Book / MyST-NB's execution cache (jupyter-cache) does for notebooks, a page's result
is keyed by its content, here:

* the page's text;
* the code it runs from this repository: every file under ``reference_impl/``, ``examples/``,
  ``tools/`` (the page model and the download the page runs as), the harness
  (``tests/docblocks/``, ``tests/upstream/``, ``conftest.py``) and ``pyproject.toml``. This is
  coarser than the modules a page imports, on purpose: a page reaches that code through
  imports, Ray workers, subprocesses (``python -m reference_impl.rlhf``) and veRL's plugin
  loading, which no import tracer sees whole. Editing any of it reruns every page;
* the pinned versions (``constraints*.txt``) and the Python version;
* the run's options that change what a page does (``--backend``, ``--doc-languages``), and,
  for a page with gpu blocks, whether CUDA is present.

When every item of a page passed (gpu blocks skipped without CUDA count as passed), its key
is stored in pytest's cache directory (``.pytest_cache``, ``config.cache``). On the next run a
page whose key is stored is not run: each of its items is reported as skipped with the reason
``from the cache: ...``, and the summary says how many pages and blocks came from the cache.
Only whole pages are cached or taken from the cache (a ``-k`` that selects part of a page runs
that part).

Test modules (``tests/test_*.py``) are cached the same way, keyed also by which of their tests
are selected, when every selected test passed (a skip, such as a GPU test on a CPU machine,
keeps the module out: what the machine lacks is asked again next run). A module's key is every
file of the checkout that git lists (tracked, or untracked and not ignored) outside ``docs/``,
and of ``docs/`` only the paths its ``reads_docs`` mark names (``pytestmark =
pytest.mark.reads_docs("docs/verl/plan.md")``; no paths: none). A module without the mark is
keyed on all of ``docs/`` too, so editing a page reruns it. A module that opens a file under
``docs/`` that its mark does not name, in the test process, is run but not cached, and the
summary names the file (an audit hook watches ``open``); what a subprocess reads is not
watched, so a module whose subprocesses read pages (a site build) must name them.

Off (everything runs) with ``--no-cache`` (``nox -s tests -- --no-cache``), in CI (the
environment variable ``CI`` set, as GitHub Actions and most CI services do), with
``--update-outputs``, and with ``-p no:cacheprovider``.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from sybil.integration.pytest import SybilItem

import page_blocks
from tests.docblocks.page_scripts import script_scope

OPTION = "--no-cache"
# What a page may run from the checkout, relative to the rootdir (ini: docblocks_cache_code).
CODE = [
    "reference_impl",
    "examples",
    "tools",
    "tests/docblocks",
    "tests/upstream",
    "conftest.py",
    "pyproject.toml",
    "constraints.txt",
    "constraints-verl-run.txt",
]
REASON = "from the cache: the page, the code it runs and the pins are unchanged since it passed"
MODULE_REASON = (
    "from the cache: the module, the checkout outside docs/ and the pages it reads are unchanged "
    "since it passed"
)
READS_DOCS = "reads_docs"  # the mark by which a test module names what it reads under docs/
LABEL = "from the cache"  # the docblock summary's row (plugin.ROWS)
STATE = pytest.StashKey[dict]()


def addoption(parser) -> None:
    parser.addoption(
        OPTION,
        action="store_true",
        default=False,
        help="run every page, even those unchanged since they passed (CI=true does the same)",
    )
    parser.addini(
        "docblocks_cache_code",
        type="linelist",
        default=CODE,
        help="files and folders whose content is part of every page's cache key",
    )


def why_off(config) -> str | None:
    """Why the cache is not used in this run (None: it is)."""
    if config.getoption(OPTION):
        return f"{OPTION}"
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        return "CI is set"
    if config.getoption("--update-outputs", False):
        return "--update-outputs"
    if getattr(config, "cache", None) is None:
        return "no cache provider (-p no:cacheprovider)"
    return None


def code_digest(root: Path, paths: list[str]) -> str:
    """sha256 over every file under ``paths`` (relative to ``root``): names and contents."""
    digest = hashlib.sha256()
    for name in paths:
        top = root / name
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in files:
            parts = path.relative_to(root).parts
            if "__pycache__" in parts or any(part.startswith(".") for part in parts):
                continue
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def unit_key(unit: str, page: Path, code: str, options: str, cuda: bool | None) -> str:
    """The key of ``unit`` (a page, or one of its scripts: ``page_scripts.script_scope``)."""
    digest = hashlib.sha256()
    for part in ("v1", unit, code, options, platform.python_version(), str(cuda)):
        digest.update(part.encode() + b"\0")
    digest.update(page.read_bytes())
    return digest.hexdigest()


def checkout_files(root: Path) -> list[str] | None:
    """The checkout's files as git lists them (tracked, and untracked but not ignored),
    relative to ``root``; None where git cannot list them (then no test module is cached)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, capture_output=True, timeout=60, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return sorted({name for name in os.fsdecode(listed).split("\0") if name})


def files_digest(root: Path, names: list[str]) -> str:
    """sha256 over the names and contents of ``names`` (relative to ``root``); a listed file
    that is gone counts by its name alone."""
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode() + b"\0")
        path = root / name
        if path.is_file():
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def under(name: str, paths: tuple[str, ...]) -> bool:
    """Is ``name`` (relative, with ``/``) one of ``paths`` or inside one of them?"""
    return any(name == p or name.startswith(p.rstrip("/") + "/") for p in paths)


def module_key(module: str, outside: str, inside: str, options: str) -> str:
    """The key of test module ``module`` from the digests of the checkout outside docs/ and of
    the docs/ paths it reads (:func:`files_digest`)."""
    digest = hashlib.sha256()
    for part in ("tests-v1", module, options, platform.python_version(), outside, inside):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def module_of(nodeid: str) -> str | None:
    """``tests/test_x.py`` for an item of that module, else None (pages, other files)."""
    file = nodeid.partition("::")[0]
    name = file.rpartition("/")[2]
    if file.startswith("tests/") and name.startswith("test_") and file.endswith(".py"):
        return file
    return None


def reads_of(items) -> tuple[str, ...] | None:
    """What a module's items name with ``reads_docs``; None if any item has no such mark."""
    reads: set[str] = set()
    for item in items:
        marks = list(item.iter_markers(READS_DOCS))
        if not marks:
            return None
        for mark in marks:
            reads.update(str(path).rstrip("/") for path in mark.args)
    return tuple(sorted(reads))


def entry(unit: str) -> str:
    """The cache entry's name for a page or page script: one each, so workers never share one."""
    return "docblocks/pages/" + unit.replace("::", "/")


def collect(session) -> None:
    """After collection: key each whole page (or page script); skip those whose key is stored."""
    config = session.config
    state = config.stash[STATE] = {
        "keys": {},  # page, page script or test module -> its key, for those that run
        "items": {},  # the same -> its items' node ids
        "modules": set(),  # which of them are test modules
        "undeclared": defaultdict(set),  # test module -> docs/ files it read unnamed
        "off": why_off(config),
    }
    if state["off"] is not None:
        return
    units: dict[str, list] = defaultdict(list)
    modules: dict[str, list] = defaultdict(list)
    for item in session.items:
        if isinstance(item, SybilItem):
            units[script_scope(config.rootpath, item.nodeid)].append(item)
        elif module_of(item.nodeid):
            modules[module_of(item.nodeid)].append(item)
    if modules:
        collect_modules(config, state, modules)
    if not units:
        return
    root = config.rootpath
    code = code_digest(root, config.getini("docblocks_cache_code"))
    options = f"{config.getoption('--backend', '')} {config.getoption('--doc-languages', '')}"
    for unit, items in units.items():
        if len(items) != len(config.stash.get(COLLECTED, {}).get(unit, ())):
            continue  # part of it is selected: run that part, cache nothing
        page = Path(items[0].example.path)
        cuda = None
        if any(block.kind == "gpu" for block in page_blocks.blocks(page)):
            from tests.docblocks.python_blocks import cuda_available

            cuda = cuda_available()
        take_or_track(config, state, unit, items, unit_key(unit, page, code, options, cuda), REASON)


def take_or_track(config, state: dict, unit: str, items: list, key: str, reason: str) -> bool:
    """Skip ``unit``'s items if ``key`` is stored (True); else note the key, to store it if
    they all pass (False)."""
    stored = config.cache.get(entry(unit), None)
    if stored and stored.get("key") == key:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=reason))
            item.stash[STATE] = {"page": unit, "passed": stored.get("passed")}
        return True
    state["keys"][unit] = key
    state["items"][unit] = {item.nodeid for item in items}
    return False


def collect_modules(config, state: dict, modules: dict[str, list]) -> None:
    """Key each test module's selected tests; skip those whose key is stored; watch the
    others' reads."""
    root = config.rootpath
    files = checkout_files(root)
    if files is None:
        return
    options = f"{config.getoption('--backend', '')} {config.getoption('--doc-languages', '')}"
    outside = files_digest(root, [name for name in files if not under(name, ("docs",))])
    inside: dict[tuple[str, ...], str] = {}  # digest of the docs/ paths a module reads
    watched: dict[str, tuple[str, ...]] = {}
    for module, items in modules.items():
        reads = reads_of(items)
        paths = ("docs",) if reads is None else reads
        if paths not in inside:
            inside[paths] = files_digest(root, [name for name in files if under(name, paths)])
        # The tests selected (`-m` deselects some of a module's tests in every run) are part
        # of the key: another selection runs again.
        selected = " ".join(sorted(item.nodeid for item in items))
        key = module_key(module, outside, inside[paths], f"{options} {selected}")
        if take_or_track(config, state, module, items, key, MODULE_REASON):
            continue
        state["modules"].add(module)
        if reads is not None:
            watched[module] = reads
    if watched:
        watch_reads(state, root, watched)


def watch_reads(state: dict, root: Path, reads: dict[str, tuple[str, ...]]) -> None:
    """Note each file under docs/ that a watched module's test opens and its mark does not
    name (``state["undeclared"]``). An audit hook cannot be removed: it checks the state's
    current module (set by :func:`running`), and does nothing outside a watched one."""
    docs = str(root / "docs") + os.sep

    def hook(event: str, args: tuple) -> None:
        module = state.get("current")
        if event != "open" or module not in reads or not isinstance(args[0], (str, bytes)):
            return
        path = os.path.abspath(os.fsdecode(args[0]))
        if path.startswith(docs):
            name = os.path.relpath(path, root).replace(os.sep, "/")
            if not under(name, reads[module]):
                state["undeclared"][module].add(name)

    sys.addaudithook(hook)


def running(config, item) -> None:
    """The test about to run (None: none): which module's reads the audit hook checks."""
    state = config.stash.get(STATE, None)
    if state is not None:
        state["current"] = None if item is None else module_of(item.nodeid)


def undeclared(config) -> dict[str, set[str]]:
    """Files under docs/ that modules opened without naming them (not cached: see store)."""
    state = config.stash.get(STATE, None)
    return {} if state is None else {m: f for m, f in state["undeclared"].items() if f}


COLLECTED = pytest.StashKey[dict]()


def remember_collected(config, items) -> None:
    """Before deselection: every item of every page, to tell a whole page from part of one."""
    found = config.stash.setdefault(COLLECTED, defaultdict(set))
    for item in items:
        if isinstance(item, SybilItem):
            found[script_scope(config.rootpath, item.nodeid)].add(item.nodeid)


def from_cache(item) -> bool:
    return STATE in item.stash


def record(config, report) -> None:
    """Each report of a page's item: a failure (or an error) in any phase spoils the page."""
    state = config.stash.get(STATE, None)
    if state is None or state["off"] is not None:
        return
    results = state.setdefault("results", defaultdict(dict))
    nodeid = report.nodeid
    if report.failed:
        results[nodeid] = "failed"
    elif results.get(nodeid) != "failed" and report.skipped:
        results[nodeid] = "skipped"
    elif results.get(nodeid) != "failed" and report.when == "call":
        results[nodeid] = "done"


def store(config) -> int:
    """At the end of this process's session: store the key of each page that passed whole here.

    Returns how many pages were stored.
    """
    state = config.stash.get(STATE, None)
    if state is None or state["off"] is not None:
        return 0
    results = state.get("results", {})
    today = datetime.date.today().isoformat()
    stored = 0
    for unit, key in state["keys"].items():
        nodeids = state["items"][unit]
        if unit in state["modules"]:
            # every test passed (no skips), and read nothing under docs/ unnamed
            good = ("done",) if not state["undeclared"].get(unit) else ()
        else:
            good = ("done", "skipped")  # a page's gpu blocks skip without CUDA
        if nodeids and all(results.get(nodeid) in good for nodeid in nodeids):
            config.cache.set(entry(unit), {"key": key, "passed": today})
            stored += 1
    return stored
