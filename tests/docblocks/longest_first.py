"""Longest first: the suite's pages and test files start in the order of what they took last time.

pytest-xdist hands each worker a file (a page, or one of a page's scripts) at a time, by
default the files with the most items first. The run ends when the last file does, so a
long file handed out late leaves the other workers idle at the end. Here the controller
records what each file took (summed over its items, in pytest's cache directory,
``docblocks/durations``) and the next run's workers collect the files longest first
(the classic longest-processing-time rule); files never timed keep their place after them.
The scheduler (plugin.py) then keeps that order.

A fresh clone (and CI) has no cache directory: it takes the order from ``tests/durations.json``,
a copy of that record from a whole run, if the checkout has one. To refresh it after a whole
run: ``cp .pytest_cache/v/docblocks/durations tests/durations.json``. A stale copy only
changes the order in which files start, never what runs.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from tests.docblocks.page_scripts import script_scope

ENTRY = "docblocks/durations"
SHIPPED = "tests/durations.json"  # relative to the rootdir
TOOK = pytest.StashKey[dict]()


def reorder(config, items: list) -> None:
    """On an xdist worker, sort ``items`` in place: files (scopes) by their recorded time,
    longest first. Elsewhere the order is left as collected."""
    if not hasattr(config, "workerinput"):
        return
    cache = getattr(config, "cache", None)
    took = cache.get(ENTRY, {}) if cache is not None else {}
    shipped = config.rootpath / SHIPPED
    if not took and shipped.is_file():
        took = json.loads(shipped.read_text("utf-8"))
    if not took:
        return
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(script_scope(config.rootpath, item.nodeid), len(first_seen))

    def place(item) -> tuple[float, int]:
        scope = script_scope(config.rootpath, item.nodeid)
        return -took.get(scope, 0.0), first_seen[scope]

    items.sort(key=place)  # stable: a file's items keep their order


def record(config, report) -> None:
    """On the controller (or a run without workers): add up what each file's items took."""
    if hasattr(config, "workerinput"):
        return
    took = config.stash.setdefault(TOOK, defaultdict(float))
    took[script_scope(config.rootpath, report.nodeid)] += report.duration  # every phase


def store(config) -> None:
    """Merge this run's times into the record; a file that took under a second here (say, all
    of it from the execution cache) keeps the time it took when it last ran."""
    cache = getattr(config, "cache", None)
    took = config.stash.get(TOOK, None)
    if cache is None or not took or hasattr(config, "workerinput"):
        return
    recorded = cache.get(ENTRY, {})
    recorded.update({scope: round(s, 1) for scope, s in took.items() if s >= 1.0})
    cache.set(ENTRY, recorded)
