"""The repository's one way to run a command with a time limit and end it, whole, at the limit.

    from run_limited import run_limited
    done = run_limited(["python", "page.py"], 480, capture=True)
    done.killed, done.returncode, done.wall_s, done.stdout

The command starts a session of its own (``start_new_session``), so its process group holds
what it starts, Ray's daemons included; at the limit the whole group is killed (SIGKILL), or
first interrupted (SIGINT, ``grace_s`` to finish) where the command prints a report when
interrupted, as pytest does. With ``sweep=True`` the caller is also made a child subreaper
(Linux ``prctl``), so a process that left the group (``setsid``, a daemon) is adopted by the
caller instead of by init, and is killed too when the command ends: nothing it started
outlives it. Used by the page runner (tests/docblocks/page_scripts.py), the shell pages'
terminal (tests/docblocks/shell_blocks.py), the suite's outer limit (tests/passes.py), the GPU
checks (tools/gpu_kit/checks.py), the GPU learning run (benchmarks/rlhf_gpu.py) and veRL's trainer
on the CPU (examples/verl_on_cpu/run.py).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Finished:
    """How a command ended. ``returncode`` is None where it was killed at its limit; a
    negative one is a signal's number (``subprocess``'s convention)."""

    returncode: int | None
    wall_s: float
    stdout: str | None = None  # with capture=True
    stderr: str | None = None

    @property
    def killed(self) -> bool:
        return self.returncode is None


def become_subreaper() -> None:
    """Adopt the orphans of our descendants (Linux), so that detached daemons stay findable."""
    if sys.platform.startswith("linux"):
        PR_SET_CHILD_SUBREAPER = 36
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def descendants(pid: int | None = None) -> set[int]:
    """The pids below ``pid`` (default: this process), read from /proc (Linux; else empty)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # after "pid (name) state"
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [os.getpid() if pid is None else pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def kill_all(pids: set[int]) -> None:
    """SIGKILL each pid, then reap those that are our children."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:  # not ours to reap: its parent does
            pass


def run_limited(
    command: list[str],
    limit_s: float,
    *,
    capture: bool = False,
    log: Path | None = None,
    cwd: Path | str | None = None,
    env: dict[str, str] | None = None,
    grace_s: float = 0,
    sweep: bool = False,
    waiting: Callable[[subprocess.Popen], None] | None = None,
) -> Finished:
    """Run ``command``; at ``limit_s`` seconds end its process group; return how it ended.

    Output: with ``capture``, stdout and stderr come back as text; with ``log``, both go
    to that file; otherwise they are inherited. ``grace_s`` > 0: SIGINT first, SIGKILL
    after ``grace_s``. ``sweep``: see the module docstring. ``waiting(process)`` is called
    about every 0.1 s while the command runs (0.5 s with ``capture``). With ``sweep``,
    adopted processes that exit are reaped while it runs.
    If waiting is interrupted (Ctrl-C), the group is killed before the exception goes on.
    Raises ValueError for ``capture`` with ``log``.
    """
    if capture and log is not None:
        raise ValueError("capture=True and log: choose one")
    if sweep:
        become_subreaper()
        before = descendants()
    start = time.monotonic()
    sink = open(log, "w") if log is not None else None  # noqa: SIM115 (closed below)
    out = subprocess.PIPE if capture else sink
    err = subprocess.PIPE if capture else (subprocess.STDOUT if sink else None)
    stdout = stderr = None
    try:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=out, stderr=err, text=True,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        if sweep:  # reap what we adopt while the command runs, then call the caller's
            outer = waiting

            def waiting(process, outer=outer):
                reap_adopted(keep=process.pid)
                if outer is not None:
                    outer(process)

        try:
            code, printed = wait(process, limit_s, capture, waiting)
            if code is None and grace_s > 0:  # the limit: interrupt first where asked
                signal_group(process, signal.SIGINT)
                code, printed = wait(process, grace_s, capture, None)
            if code is None:
                # A captured command may have exited while a child it left holds the pipes.
                code = process.poll()
                signal_group(process, signal.SIGKILL)
                if sweep:  # before reading: a detached process may hold the pipes open
                    kill_all(descendants() - before - {process.pid})
                printed = process.communicate() if capture else (None, None)
                process.wait()
            stdout, stderr = printed
        except BaseException:  # Ctrl-C, or an error in ``waiting``: nothing may be left running
            if grace_s > 0:
                signal_group(process, signal.SIGINT)
                try:
                    process.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    pass
            signal_group(process, signal.SIGKILL)
            process.wait()
            raise
    finally:
        if sink is not None:
            sink.close()
        if sweep:
            kill_all(descendants() - before)
    return Finished(code, time.monotonic() - start, stdout, stderr)


def wait(process, seconds, capture, waiting):
    """(exit code, or None if still running at ``seconds``; (stdout, stderr) if captured)."""
    deadline = time.monotonic() + seconds
    while True:
        if waiting is not None:
            waiting(process)
        step = min(0.5 if capture else 0.1, max(deadline - time.monotonic(), 0.01))
        if capture:
            try:  # what was read so far stays for the next call
                return process.returncode, process.communicate(timeout=step)
            except subprocess.TimeoutExpired:
                pass
        elif (code := process.poll()) is not None:
            return code, (None, None)
        else:
            time.sleep(step)
        if time.monotonic() >= deadline:
            return None, (None, None)


def reap_adopted(keep: int | None = None) -> None:
    """Collect our exited children except ``keep``: orphans adopted as a subreaper.

    An adopted daemon that has exited stays a zombie until we reap it, and a command that
    waits for it to vanish (``ray.shutdown()``, ``ray stop``) would wait until its limit.
    Only zombies, one pid at a time: ``os.waitpid(-1)`` would steal ``keep``'s status.
    """
    for pid in descendants():
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            if pid != keep and fields[0] == "Z" and int(fields[1]) == os.getpid():
                os.waitpid(pid, os.WNOHANG)
        except (OSError, ChildProcessError, ValueError):
            pass


def signal_group(process: subprocess.Popen, number: int) -> None:
    try:
        os.killpg(process.pid, number)
    except ProcessLookupError:  # the group has ended
        pass
