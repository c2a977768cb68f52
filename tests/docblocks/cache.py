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
that part). Tests under ``tests/`` always run.

Off (everything runs) with ``--no-cache`` (``nox -s tests -- --no-cache``), in CI (the
environment variable ``CI`` set, as GitHub Actions and most CI services do), with
``--update-outputs``, and with ``-p no:cacheprovider``.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
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


def entry(unit: str) -> str:
    """The cache entry's name for a page or page script: one each, so workers never share one."""
    return "docblocks/pages/" + unit.replace("::", "/")


def collect(session) -> None:
    """After collection: key each whole page (or page script); skip those whose key is stored."""
    config = session.config
    state = config.stash[STATE] = {"keys": {}, "items": {}, "off": why_off(config)}
    if state["off"] is not None:
        return
    units: dict[str, list] = defaultdict(list)
    for item in session.items:
        if isinstance(item, SybilItem):
            units[script_scope(config.rootpath, item.nodeid)].append(item)
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
        key = unit_key(unit, page, code, options, cuda)
        stored = config.cache.get(entry(unit), None)
        if stored and stored.get("key") == key:
            for item in items:
                item.add_marker(pytest.mark.skip(reason=REASON))
                item.stash[STATE] = {"page": unit, "passed": stored.get("passed")}
            continue
        state["keys"][unit] = key
        state["items"][unit] = {item.nodeid for item in items}


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
    elif results.get(nodeid) != "failed" and (report.when == "call" or report.skipped):
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
    for page, key in state["keys"].items():
        nodeids = state["items"][page]
        if nodeids and all(results.get(nodeid) == "done" for nodeid in nodeids):
            config.cache.set(entry(page), {"key": key, "passed": today})
            stored += 1
    return stored
