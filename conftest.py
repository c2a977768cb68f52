"""Top-level conftest: the doc-block plugin, and a check that no Ray process outlives the suite.

It lives here, outside ``docs_dir``, so MkDocs never publishes it. The plugin that turns
every fenced block in docs/ into a test is ``tests/docblocks/plugin.py``.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

pytest_plugins = ["tests.docblocks.plugin", "pytester"]

RAY_DAEMONS = ("raylet", "gcs_server")
RAY_BEFORE = pytest.StashKey[set]()
RAY_LEFT = pytest.StashKey[list]()  # on the controller: what namespaced workers reported


def pid_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:  # not Linux, or the process is gone
        return None


def ray_daemons() -> set[int]:
    """Pids of the live Ray daemons (zombies excluded) in this process's PID namespace.

    Other namespaces are other machines as far as Ray is concerned: tests/passes.py starts
    each xdist worker in namespaces of its own (tests/namespace.sh).
    """
    ours = pid_namespace("self")
    found = set()
    for process in psutil.process_iter(["name", "status"]):
        if process.info["name"] not in RAY_DAEMONS:
            continue
        if process.info["status"] != psutil.STATUS_ZOMBIE and pid_namespace(process.pid) == ours:
            found.add(process.pid)
    return found


def ray_left_running(before: set[int]) -> list[str]:
    """The Ray daemons started since ``before`` that are still alive after a grace period."""
    deadline = time.monotonic() + 20  # `ray.shutdown()` and `ray stop` take a moment
    while (left := ray_daemons() - before) and time.monotonic() < deadline:
        time.sleep(0.5)
    names = []
    for pid in sorted(left):
        try:
            names.append(f"{psutil.Process(pid).name()} (pid {pid})")
        except psutil.NoSuchProcess:  # it ended after all
            pass
    return names


def in_own_namespace() -> bool:
    """Was this process started by tests/namespace.sh, as tests/passes.py starts each xdist
    worker? Then no other worker shares its process table, and when it exits the kernel
    ends whatever it left running, so the worker itself must look before it goes."""
    return os.environ.get("IN_OWN_NAMESPACES") == "1"


def pytest_configure(config):
    # tests/namespace.sh starts each worker as a background job, and bash starts background
    # jobs with SIGINT ignored; an ignored signal stays ignored across exec, so every command
    # a page runs would ignore Ctrl-C, and run_limited's interrupt (SIGINT, then SIGKILL)
    # would only ever kill. A terminal's processes take SIGINT: give this worker Python's own
    # handler back, so that what it starts begins with SIGINT's default action again.
    if in_own_namespace() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionstart(session):
    session.config.stash[RAY_BEFORE] = ray_daemons()
    session.config.stash[RAY_LEFT] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """On the xdist controller: what a namespaced worker found left running (see below)."""
    left = getattr(node, "workeroutput", {}).get("ray_left_running", [])
    node.config.stash[RAY_LEFT].extend(f"{name} on {node.gateway.id}" for name in left)


def pytest_sessionfinish(session, exitstatus):
    """No Ray process may outlive the suite: fail the run if one started by it is alive.

    A worker in its own namespaces checks its own process table and hands what it found to
    the controller (xdist's ``workeroutput``). Workers that share the controller's
    namespace (plain ``pytest -n auto``) leave the check to the controller, which sees
    every one of them once all have ended.
    """
    config = session.config
    if hasattr(config, "workerinput"):
        if in_own_namespace():
            config.workeroutput["ray_left_running"] = ray_left_running(config.stash[RAY_BEFORE])
        return
    left = config.stash[RAY_LEFT] + ray_left_running(config.stash[RAY_BEFORE])
    if left:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"Ray processes left running by the suite: {', '.join(left)}; "
                "a page or test did not shut down what it started",
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
