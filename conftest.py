"""Top-level conftest: the doc-block plugin, and a check that no Ray process outlives the suite.

It lives here, outside ``docs_dir``, so MkDocs never publishes it. The plugin that turns
every fenced block in docs/ into a test is ``tests/docblocks/plugin.py``.
"""

from __future__ import annotations

import os
import time

import psutil
import pytest

pytest_plugins = ["tests.docblocks.plugin", "pytester"]

RAY_DAEMONS = ("raylet", "gcs_server")
RAY_BEFORE = pytest.StashKey[set]()


def pid_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:  # not Linux, or the process is gone
        return None


def ray_daemons() -> set[int]:
    """Pids of the live Ray daemons (zombies excluded) in this process's PID namespace.

    Other namespaces are other machines as far as Ray is concerned: tests/passes.py runs
    the shell pages in namespaces of their own, at the same time as the parallel pass.
    """
    ours = pid_namespace("self")
    found = set()
    for process in psutil.process_iter(["name", "status"]):
        if process.info["name"] not in RAY_DAEMONS:
            continue
        if process.info["status"] != psutil.STATUS_ZOMBIE and pid_namespace(process.pid) == ours:
            found.add(process.pid)
    return found


def pytest_sessionstart(session):
    session.config.stash[RAY_BEFORE] = ray_daemons()


def pytest_sessionfinish(session, exitstatus):
    """No Ray process may outlive the suite: fail the run if one started by it is alive."""
    if hasattr(session.config, "workerinput"):
        return
    before = session.config.stash.get(RAY_BEFORE, set())
    deadline = time.monotonic() + 20  # `ray.shutdown()` and `ray stop` take a moment
    while (left := ray_daemons() - before) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left:
        names = sorted(psutil.Process(pid).name() for pid in left if psutil.pid_exists(pid))
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"Ray processes left running by the suite: {names} (pids {sorted(left)}); "
                "a page or test did not shut down what it started",
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
