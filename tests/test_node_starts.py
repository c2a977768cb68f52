"""A node's start goes first, then back in line (tests/docblocks/node_starts.py): the
node-start lock, the raised priority of the start's session group and processes, the
return to the worker's own priority once the node has registered, and how a raylet's
registration is read from its log.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.docblocks import node_starts
from tests.docblocks.node_starts import StartWatch, autogroup, node_start_turn, set_group_nice
from tests.test_docblocks import CONFTEST, run_page

pytestmark = pytest.mark.reads_docs()

SLEEPER = "import time; print('up', flush=True); time.sleep(60)"


def needs_autogroups() -> None:
    if not node_starts.may_raise():
        pytest.skip("only root may raise a priority")
    if autogroup(os.getpid()) is None:
        pytest.skip("this kernel schedules without autogroups (sched_autogroup_enabled)")


def lock_is_free(path) -> bool:
    """Could another worker take the node-start lock now? (flock conflicts between two
    open files even within one process.)"""
    with open(path, "a") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(other, fcntl.LOCK_UN)
        return True


def started(command: list[str], **options) -> subprocess.Popen:
    """``command`` (which prints ``up`` once running), returned once it has printed."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, **options)
    assert process.stdout.readline() == b"up\n"
    return process


def test_commands_that_start_a_node_take_turns_across_workers(monkeypatch, tmp_path):
    lock = tmp_path / "node-start.lock"
    monkeypatch.setattr(node_starts, "NODE_START_LOCK", str(lock))
    with node_start_turn("ray start --head --port=6379") as prefix:
        assert not lock_is_free(lock)  # another worker's `ray start` waits
        if node_starts.may_raise():  # and this one goes first
            assert prefix == ["nice", "-n", str(node_starts.NODE_START_NICE)]
        # a daemon the start leaves behind, at the raised priority (once it prints, `nice`
        # has set it and become it)
        daemon = started([*prefix, sys.executable, "-c", SLEEPER])
    try:
        assert lock_is_free(lock)
        # once the node is up, what it runs competes at the default priority again
        assert psutil.Process(daemon.pid).nice() == os.nice(0)
    finally:
        daemon.kill()
        daemon.wait()
    with node_start_turn("ray status") as prefix:  # starts no node: holds nothing
        assert lock_is_free(lock) and prefix == []


def test_a_node_starts_with_its_session_group_raised_then_back_in_line(monkeypatch, tmp_path):
    # Under autogroup scheduling a process's own nice counts only inside its session's group,
    # and a start's daemons stay in the session of the command that started them.
    needs_autogroups()
    monkeypatch.setattr(node_starts, "NODE_START_LOCK", str(tmp_path / "node-start.lock"))
    own = autogroup(os.getpid())
    with node_start_turn("ray start --head") as prefix:
        daemon = started([*prefix, sys.executable, "-c", SLEEPER], start_new_session=True)
        set_group_nice(daemon.pid, node_starts.NODE_START_NICE)  # as the shell runner does
        assert autogroup(daemon.pid) == (autogroup(daemon.pid)[0], node_starts.NODE_START_NICE)
        assert autogroup(os.getpid()) == own  # the worker's own group is never raised
    try:
        assert autogroup(daemon.pid)[1] == own[1]
    finally:
        daemon.kill()
        daemon.wait()


def test_the_workers_own_group_is_never_raised():
    needs_autogroups()
    own = autogroup(os.getpid())
    try:
        set_group_nice(os.getpid(), node_starts.NODE_START_NICE)
        assert autogroup(os.getpid()) == own
    finally:  # where it was raised after all, the rest of the suite is not
        Path(f"/proc/{os.getpid()}/autogroup").write_text(str(own[1]))


def stand_in_raylet(args: list[str], named: str = "python") -> subprocess.Popen:
    """A process whose arguments name a log and a node id, as a raylet's do; with
    ``named="raylet"`` its process name is ``raylet`` too (run through a link of that name).

    Returned once its arguments can be read: right after ``Popen`` returns, a busy machine
    can still show an empty ``/proc/<pid>/cmdline`` (the child is in the middle of exec).
    """
    process = subprocess.Popen([named, "-c", "import time; time.sleep(60)", *args])
    deadline = time.monotonic() + 30
    while psutil.Process(process.pid).cmdline()[-len(args) :] != args:
        assert time.monotonic() < deadline, "the stand-in raylet's arguments never showed"
        time.sleep(0.01)
    return process


def test_a_page_scripts_group_goes_first_while_its_node_registers(tmp_path):
    needs_autogroups()
    (tmp_path / "raylet").symlink_to(sys.executable)
    script = started([sys.executable, "-c", SLEEPER], start_new_session=True)  # a page script
    log = tmp_path / "raylet.out"
    log.write_text("main.cc: Setting node ID node_id=abc123\n")
    watch = StartWatch(look_every_s=0)  # looks on every call
    args = [f"--log_dir={tmp_path}", "--node_id=abc123"]
    raylet = stand_in_raylet(args, named=str(tmp_path / "raylet"))
    try:
        watch.check(script)  # the script's ray.init() is starting a node
        assert autogroup(script.pid)[1] == node_starts.NODE_START_NICE
        watch.check(script)
        assert autogroup(script.pid)[1] == node_starts.NODE_START_NICE
        with log.open("a") as out:  # the GCS has told the raylet that its node is alive
            out.write("accessor.cc: ... for node, IsAlive = 1 node_id=abc123\n")
        watch.check(script)
        assert autogroup(script.pid)[1] == autogroup(os.getpid())[1]  # back in line
        # the script starts another node (a second cluster, a worker node): first again
        args = [f"--log_dir={tmp_path / 'second'}", "--node_id=def456"]
        (tmp_path / "second").mkdir()
        (tmp_path / "second" / "raylet.out").write_text("")
        second = stand_in_raylet(args, named=str(tmp_path / "raylet"))
        watch.check(script)
        assert autogroup(script.pid)[1] == node_starts.NODE_START_NICE
        (tmp_path / "second" / "raylet.out").write_text("IsAlive = 1 node_id=def456\n")
        watch.check(script)
        assert autogroup(script.pid)[1] == autogroup(os.getpid())[1]
    finally:
        second.kill()
        second.wait()
        for process in (raylet, script):
            process.kill()
            process.wait()


def test_a_raylet_counts_as_registered_once_the_gcs_has_told_it_of_its_own_node(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    raylet = stand_in_raylet([f"--log_dir={log_dir}", "--node_id=abc123"], sys.executable)
    try:
        (log_dir / "raylet.out").write_text("main.cc: Setting node ID node_id=abc123\n")
        assert not node_starts.registered(raylet.pid)
        with (log_dir / "raylet.out").open("a") as out:  # the GCS has told it of another node
            out.write("accessor.cc: ... for node, IsAlive = 1 node_id=fff999\n")
        assert not node_starts.registered(raylet.pid)
        with (log_dir / "raylet.out").open("a") as out:  # ... and of its own
            out.write("accessor.cc: ... for node, IsAlive = 1 node_id=abc123\n")
        assert node_starts.registered(raylet.pid)
    finally:
        raylet.kill()
        raylet.wait()
    assert not node_starts.registered(raylet.pid)  # gone: no


def test_a_raylet_that_names_its_log_file_is_read_there(tmp_path):
    # The second node of a session on one machine writes raylet.1.out, and says so.
    own_log = tmp_path / "raylet.1.out"
    own_log.write_text("accessor.cc: ... for node, IsAlive = 1 node_id=def456\n")
    (tmp_path / "raylet.out").write_text("the head's log, nothing about def456\n")
    raylet = stand_in_raylet(
        [f"--log_dir={tmp_path}", f"--stdout_filepath={own_log}", "--node_id=def456"],
        sys.executable,
    )
    try:
        assert node_starts.registered(raylet.pid)
    finally:
        raylet.kill()
        raylet.wait()


# How long the pages below wait for their group's nice to change: the harness changes it
# when it next looks (every 0.1 s for a command, 0.5 s for a page's script).
WAIT_FOR_NICE = (
    "for i in $(seq 300); do grep -q 'nice {n}$' /proc/self/autogroup && break; sleep 0.1; done"
)


def test_a_console_command_that_starts_a_node_runs_in_a_raised_group(monkeypatch, pytester):
    needs_autogroups()
    monkeypatch.setattr(node_starts, "NODE_START_LOCK", str(pytester.path / "node-start.lock"))
    nice = node_starts.NODE_START_NICE
    # The command names `ray start`, so it counts as one; it prints its own group's nice.
    wait = WAIT_FOR_NICE.format(n=nice)
    result = run_page(
        pytester,
        f"""
        ~~~console
        $ echo ray start; {wait}; sed 's/.* nice/nice/' /proc/self/autogroup
        ray start
        nice {nice}
        $ sed 's/.* nice/nice/' /proc/self/autogroup
        nice {autogroup(os.getpid())[1]}
        ~~~
        """,
    )
    result.assert_outcomes(passed=1)


# A script that starts a stand-in raylet (a process named `raylet` whose log has not yet
# said its node is alive), prints its own group's nice once it is {nice}, lets the raylet
# register, and prints the nice again once it is {own}. Indented as the pages below are.
STARTS_A_NODE = """\
        import subprocess, sys, tempfile, time
        from pathlib import Path

        def group_nice(wanted):
            for _ in range(300):
                nice = int(Path("/proc/self/autogroup").read_text().split()[-1])
                if nice == wanted:
                    break
                time.sleep(0.1)
            return nice

        folder = Path(tempfile.mkdtemp())
        (folder / "raylet").symlink_to(sys.executable)
        (folder / "raylet.out").write_text("")
        raylet = subprocess.Popen(
            [str(folder / "raylet"), "-c", "import time; time.sleep(60)",
             f"--log_dir={{folder}}", "--node_id=abc123"]
        )
        print("starting:", group_nice({nice}))
        (folder / "raylet.out").write_text("IsAlive = 1 node_id=abc123\\n")
        print("registered:", group_nice({own}))
        raylet.kill()
"""


# The two ways a page runs such a script: as the page's own script (its python block, the
# output compared), and from a console command (`python pipeline.py` types no `ray start`,
# but its ray.init() starts a node: on CI that start timed out at load 14 while it ran at
# the default priority, 30 November 2026).
RUNS_IT = {
    "page script": "~~~python\n{script}        ~~~\n\n        ~~~output\n",
    "console command": (
        "<!-- block: file starts_a_node.py -->\n        ~~~python\n{script}        ~~~\n\n"
        "        ~~~console\n        $ python starts_a_node.py\n"
    ),
}


@pytest.mark.parametrize("how", RUNS_IT)
def test_a_script_runs_raised_while_its_node_registers(pytester, how):
    needs_autogroups()
    nice, own = node_starts.NODE_START_NICE, autogroup(os.getpid())[1]
    runs_it = RUNS_IT[how].format(script=STARTS_A_NODE.format(nice=nice, own=own))
    result = run_page(
        pytester,
        f"""
        {runs_it}        starting: {nice}
        registered: {own}
        ~~~
        """,
    )
    result.assert_outcomes(passed=2)


def test_the_summary_says_how_node_starts_get_their_cpu(pytester):
    pytester.makeconftest(CONFTEST)  # the harness's collection, and its summary below
    pytester.makefile(".md", page="```console\n$ true\n```\n")
    result = pytester.runpytest_inprocess(
        "-p", "tests.docblocks.plugin", "-p", "no:xdist", "-p", "no:cacheprovider", "-q"
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"Ray {node_starts.how_starts_run()}"])
    if node_starts.may_raise() and autogroup(os.getpid()) is not None:
        assert "nice -10 until registered: their session's group" in node_starts.how_starts_run()
