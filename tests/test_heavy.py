"""Heavy items take turns across the suite's workers (tests/docblocks/heavy.py)."""

from __future__ import annotations

import fcntl
import threading
import time

import pytest

pytestmark = pytest.mark.reads_docs()

HELD_S = 8  # how long "another worker" keeps the turn: longer than the item's own limit
ITEMS = """
import pytest

from tests.test_node_starts import lock_is_free


@pytest.mark.heavy
@pytest.mark.timeout(5)
def test_heavy():
    assert not lock_is_free({lock!r})  # this item holds the turn


def test_light():
    assert lock_is_free({lock!r})  # an item that is not heavy holds nothing
"""


def test_a_heavy_item_waits_for_its_turn_untimed_and_holds_it_while_it_runs(
    pytester, monkeypatch, tmp_path
):
    lock = tmp_path / "heavy.lock"
    monkeypatch.setenv("SUITE_HEAVY_LOCK", str(lock))
    pytester.makepyfile(test_items=ITEMS.format(lock=str(lock)))
    # Another worker's heavy item holds the turn for HELD_S, longer than test_heavy's limit.
    holder = open(lock, "a")  # noqa: SIM115 (released by the timer)
    fcntl.flock(holder, fcntl.LOCK_EX)
    threading.Timer(HELD_S, holder.close).start()
    started = time.monotonic()
    result = pytester.runpytest_inprocess(
        "-p", "tests.docblocks.plugin", "-p", "no:xdist", "-p", "no:cacheprovider", "-q"
    )
    result.assert_outcomes(passed=2)
    assert time.monotonic() - started >= HELD_S  # test_heavy waited for the turn
