"""Items that keep every core busy for minutes take turns across the suite's workers.

The layout planner (``python -m reference_impl.plan``, ``docs/verl/plan.md``) puts veRL's
real trainer on a simulated Ray cluster: a raylet per declared node, TransferQueue's storage
units (each imports ``transfer_queue``: 6-7 CPU-s) and dozens of actors (51 for a 2 x 8
plan), each a new worker process. ``docs/verl/plan.md`` and ``tests/test_plan.py`` run it.
On a 2-core machine two of these at once leave a shell page on a third worker too little CPU
to start a Ray node: ``ray start`` gives a node 30 s to register with the GCS
(``Node.__init__`` in ray/_private/node.py, Ray 2.60), and a page's first ``ray start
--head`` exited 1 (CI, 29 November 2026: ``docs/cluster/faults.md``; a fresh-clone run the
same day: ``docs/troubleshooting/gpus.md``, load average 37). Measured beside two 2 x 8
plans, a ``ray start --head`` at ``nice -5`` took 11 s at load 13 and 26 s at load 43.

So an item marked ``heavy`` (a test with ``pytest.mark.heavy``, or any block of a page in
``plugin.HEAVY_PAGES``) holds a lock file that every namespaced worker sees, from its setup
to its teardown: at most one heavy item runs at a time. The lock is taken before the item's
timeout starts (``plugin.pytest_runtest_protocol`` runs first), so waiting for a turn never
counts against the item. ``tests/passes.py`` names the file (``SUITE_HEAVY_LOCK``); without
it (one worker, or a plain ``pytest``) nothing is held.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from filelock import FileLock

LOCK_VARIABLE = "SUITE_HEAVY_LOCK"


def is_heavy(item: pytest.Item) -> bool:
    return item.get_closest_marker("heavy") is not None


@contextmanager
def turn(item: pytest.Item) -> Iterator[None]:
    """Hold the suite's heavy-item lock while ``item`` runs, if it is heavy and the suite
    named a lock file; otherwise hold nothing."""
    path = os.environ.get(LOCK_VARIABLE)
    if not path or not is_heavy(item):
        yield
        return
    with FileLock(path):  # an flock(2) underneath: the kernel frees it if the worker dies
        yield
