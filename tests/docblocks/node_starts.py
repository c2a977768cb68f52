"""A Ray node's start, given the CPU it needs while the rest of the suite runs.

Starting a node is about 16 s of CPU spread over several processes (GCS, dashboard and its
modules, raylet, and the raylet's two Python agents, whose ports it waits for before it
registers: ``NodeManager::WaitForDashboardAgentPorts`` and ``WaitForRuntimeEnvAgentPort``),
and both ``ray start`` and a
driver's ``ray.init()`` give the node 30 s to register with the GCS (``Node.__init__`` in
ray/_private/node.py, a fixed limit). On a 2-core machine with three workers busy, starts
failed ("The current node timed out during startup"; CI, and fresh-clone runs here).

Why ``nice`` alone did not help. Where Linux schedules by autogroup
(``/proc/sys/kernel/sched_autogroup_enabled`` is 1 and no CPU controller of a cgroup
overrides it, as here), every session (``setsid``) is
one group, the groups share the CPUs evenly, and a process's nice counts only against the
other processes of its own group. The harness runs every command and page script in a
session of its own (``run_limited``), and a node's daemons stay in the session that started
them, so a start competes as one group among the suite's others, whatever its processes'
nice. Measured on this 2-core machine, beside six busy loops each in a session of its own
(29 November 2026): ``ray start --head --num-cpus=0`` took 60 s with its group at nice 0,
and 13 s with its group at nice -10, as long as on the idle machine.

So while a node starts, the session it runs in gets a higher priority (NODE_START_NICE, for
the group and, where there are no autogroups, for its processes), and once the node has
registered the group and its processes go back to this worker's own priority: a node's
later work (the raylet's workers, veRL's actors) competes like everything else. Raising a
priority needs CAP_SYS_NICE (or a high enough RLIMIT_NICE); the harness tries only as root
(as on CI), and where it may not, everything runs as typed.

* A console command that types ``ray start`` also takes a turn across the workers (a lock
  file that tests/passes.py names): ``node_start_turn``.
* A page script, or a console command, whose ``ray.init()`` starts a node: ``StartWatch``,
  asked while it runs (CI, 30 November 2026: ``python pipeline.py 1`` on
  docs/cluster/bottleneck.md timed out at load 14 while only ``ray start`` was raised).

Neither changes what a command or script does or prints.
"""

from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
from filelock import FileLock

NODE_START_LOCK = os.environ.get("SUITE_NODE_START_LOCK")
STARTS_A_NODE = re.compile(r"\bray start\b")
# `ray start`'s own limit for a node to register (30 s, counted once its processes are
# started), plus the CLI's import and version check before them (13 s measured beside 8 busy
# loops on 2 cores). Also how long a node's processes count as starting.
NODE_BOOT_S = 60.0
# A group at nice -10 weighs about 9 times one at the default (the kernel's weight table:
# 9548 against 1024), so a start beside eight busy groups gets more than half the machine.
NODE_START_NICE = -10


def may_raise() -> bool:
    """Whether this process tries to raise a priority (lower a nice value): as root only,
    taken to hold CAP_SYS_NICE (a container may drop it; then the attempts fail, harmlessly:
    ``nice`` warns and runs the command, the group's nice stays)."""
    return os.geteuid() == 0


def how_starts_run() -> str:
    """How node starts get their CPU here, in words (the suite's summary and a failed
    command's message say it)."""
    if not may_raise():
        return "node starts run at the default priority (raising one is tried as root only)"
    raised = "their session's group and processes" if autogroup(os.getpid()) else "their processes"
    return f"node starts run at nice {NODE_START_NICE} until registered: {raised}"


def autogroup(pid: int) -> tuple[str, int] | None:
    """The autogroup of process ``pid`` and its nice (``/proc/<pid>/autogroup`` reads
    ``/autogroup-12 nice 0``), or None where the kernel has none or the process is gone."""
    try:
        name, _, nice = Path(f"/proc/{pid}/autogroup").read_text().split()
    except (OSError, ValueError):
        return None
    return name, int(nice)


def set_group_nice(pid: int, nice: int) -> None:
    """Give the autogroup of ``pid`` the nice value ``nice``, unless it is this process's
    own group (which would change the whole worker's share). Gone or no group: nothing."""
    group, own = autogroup(pid), autogroup(os.getpid())
    if group is None or (own is not None and group[0] == own[0]) or group[1] == nice:
        return
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except OSError:
        pass


def raylets_here() -> set[int]:
    """PIDs of the raylets among this process's descendants (the page's nodes)."""
    return {pid for pid, name in node_processes_here().items() if name == "raylet"}


def node_processes_here() -> dict[int, str]:
    """PID -> name of the GCS servers and raylets among this process's descendants."""
    found = {}
    for process in psutil.Process().children(recursive=True):
        try:
            if (name := process.name()) in ("raylet", "gcs_server"):
                found[process.pid] = name
        except psutil.NoSuchProcess:
            pass
    return found


def registered(raylet: int) -> bool:
    """Whether the GCS has told this raylet that its own node is alive, so the node's start
    is over.

    A raylet logs each node it hears of (``Received address and liveness notification for
    node, IsAlive = 1 node_id=<id>``, as Ray 2.60's raylet writes it: accessor.cc) in its own log:
    its ``--stdout_filepath`` argument (``raylet.out`` for a session's first node on this
    machine, ``raylet.1.out`` for the next one sharing its log folder), else ``raylet.out``
    in its ``--log_dir``. Its own id is its ``--node_id`` argument (Ray 2.60). Unreadable
    means no.
    """
    try:
        args = dict(a[2:].split("=", 1) for a in psutil.Process(raylet).cmdline() if "=" in a)
        log = Path(args.get("stdout_filepath") or Path(args["log_dir"]) / "raylet.out")
        return f"IsAlive = 1 node_id={args['node_id']}" in log.read_text(errors="replace")
    except (psutil.NoSuchProcess, KeyError, OSError):
        return False


@contextmanager
def node_start_turn(command: str):
    """Hold the suite's node-start lock while ``command`` starts a Ray node; yields the
    prefix to run it with (``nice``, or nothing). The caller raises the command's session
    group once it runs (``set_group_nice(pid, NODE_START_NICE)``), where the prefix is not
    empty.

    A node started in the background (``ray start --block &``) is still booting when the
    command returns, so the lock is kept until a new raylet here has registered with the
    GCS, for at most NODE_BOOT_S. The wait only orders the workers: what the page shows and
    checks does not depend on it.
    """
    if not NODE_START_LOCK or not STARTS_A_NODE.search(command):
        yield []
        return
    prefix = ["nice", "-n", str(NODE_START_NICE)] if may_raise() else []
    with FileLock(NODE_START_LOCK):  # the same kind of lock as heavy.turn's
        try:
            before = raylets_here()
            yield prefix
            if "--block" in command:
                deadline = time.monotonic() + NODE_BOOT_S
                while time.monotonic() < deadline:
                    if any(registered(pid) for pid in raylets_here() - before):
                        break
                    time.sleep(0.5)
        finally:
            if prefix:
                back_to_default_priority()


def back_to_default_priority() -> None:
    """Once a node has started, give its daemons (and this worker's other descendants that
    were raised) this worker's own priority again, and their groups this worker's group's.

    Every process a node starts later inherits the daemon's priority: the raylet's worker
    processes, for one, import Ray at it before Ray lowers them (``RAY_worker_niceness``).
    Left raised, each page's whole cluster, veRL's runs included, competed with the next
    node's start at the raised priority (a fresh-clone run, 29 November 2026:
    ``docs/cluster/cloud.md``'s start at ``nice -10`` timed out at CPU pressure 75 %).
    """
    own = os.nice(0)  # this worker's priority: the default for what it runs
    own_group = autogroup(os.getpid())
    for process in psutil.Process().children(recursive=True):
        try:
            if process.nice() < own:
                process.nice(own)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
        if own_group is not None:
            group = autogroup(process.pid)
            if group is not None and group[1] < own_group[1]:
                set_group_nice(process.pid, own_group[1])


class StartWatch:
    """Raises a page script's session group while a node of its starts (its ``ray.init()``,
    a ``ray.cluster_utils.Cluster``), and lowers it again once every node has registered.

    Call ``check(process)`` as often as you like while the script or command runs
    (``run_limited``'s ``waiting``); it looks at most every ``look_every_s``, since each look
    walks this worker's process tree. A node is starting while one of its raylets here has
    not registered, or a GCS here has no raylet beside it yet; a process older than
    NODE_BOOT_S no longer counts (a node that never registers fails on its own). Only the
    group is raised: a page's script raises no process's own nice, so where there are no
    autogroups it runs as typed. A console command that runs a script whose ``ray.init()``
    starts a node (``python pipeline.py``) is watched the same way; one that types
    ``ray start`` takes ``node_start_turn`` instead.
    """

    def __init__(self, look_every_s: float = 0.5) -> None:
        self.look_every_s = look_every_s
        self.settled: set[int] = set()  # raylets that have registered
        self.raised = False
        self.next_look = 0.0

    def starting(self) -> bool:
        nodes = node_processes_here()
        now = time.time()
        for pid, name in nodes.items():
            if name != "raylet" or pid in self.settled:
                continue
            if registered(pid):
                self.settled.add(pid)
            elif now - psutil.Process(pid).create_time() < NODE_BOOT_S:
                return True
        if "raylet" in nodes.values():
            return False
        return any(now - psutil.Process(pid).create_time() < NODE_BOOT_S for pid in nodes)

    def check(self, process) -> None:
        if not may_raise() or time.monotonic() < self.next_look:
            return
        self.next_look = time.monotonic() + self.look_every_s
        try:
            starting = self.starting()
        except psutil.NoSuchProcess:  # one ended while we looked: ask again next time
            return
        if starting != self.raised:
            own = autogroup(os.getpid())
            set_group_nice(process.pid, NODE_START_NICE if starting else own[1] if own else 0)
            self.raised = starting
