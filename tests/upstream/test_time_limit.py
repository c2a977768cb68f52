"""The hang watchdog of the upstream tests (tests/upstream/backend.py `time_limit`) fires even in
a process that ignores SIGINT, as one started in the background by a non-interactive shell
does; before the fix, the pin tests that wait on a placement group hung there for ever."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.reads_docs()


REPO = Path(__file__).resolve().parents[2]

SLEEPER = """
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
from tests.upstream.backend import Hung, time_limit
try:
    with time_limit(1):
        while True:  # short sleeps, like ray.get's polling: a pending interrupt runs between them
            time.sleep(0.05)
except Hung as error:
    print("Hung:", error)
print("SIGINT ignored again:", signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
"""


def test_time_limit_fires_where_sigint_is_ignored():
    result = subprocess.run(
        [sys.executable, "-c", SLEEPER], cwd=REPO, capture_output=True, text=True, timeout=25
    )
    assert result.stdout.splitlines() == [
        "Hung: still waiting after 1 s",
        "SIGINT ignored again: True",
    ], result.stderr[-2000:]
