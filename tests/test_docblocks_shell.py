"""The shell-block runner (tests/docblocks/shell_blocks.py): commands run, outputs compared,
state carried from block to block, and nothing left running after a page.

Like tests/test_docblocks.py, each test writes a small page and runs pytest on it
in-process with the harness's own parser, setup and teardown.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time

import psutil
import pytest

from tests.docblocks import shell_blocks
from tests.docblocks.match import clean
from tests.docblocks.shell_blocks import node_start_turn, options_of, parse_console
from tests.test_docblocks import run_page

pytestmark = pytest.mark.reads_docs()


def test_console_commands_run_and_outputs_match_with_placeholders(pytester):
    result = run_page(
        pytester,
        """
        ~~~console
        $ echo "node 10.0.0.7 has 8 CPUs, id 1f3a9c"
        node <ip> has <n> CPUs, id <id>
        $ printf 'a\\nb\\nc\\n'
        a
        ...
        $ true
        ~~~
        """,
    )
    result.assert_outcomes(passed=1)


def test_wrong_output_fails_and_shows_both(pytester):
    result = run_page(
        pytester,
        """
        ~~~console
        $ echo 42
        41
        ~~~
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*output of `echo 42` differs*", "*page shows*", "41", "*printed*", "42"]
    )


def test_failing_command_fails_the_block_with_its_exit_code(pytester):
    result = run_page(pytester, "~~~console\n$ ls /no/such/dir\n~~~\n")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*`ls /no/such/dir` exited with code 2*",
            "*(load average * on * CPUs; waited for *: cpu *",
        ]
    )


def test_a_bash_block_fails_at_a_failing_command_that_is_not_its_last(pytester):
    # A bash block is a script: it stops at the first command that fails (`set -e`), as
    # a reader running it would want, and the block fails with that command's code.
    result = run_page(
        pytester,
        """
        ~~~bash
        echo before
        ls /no/such/dir
        echo after
        ~~~
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the script exited with code 2*", "*before*"])
    result.stdout.no_fnmatch_line("after")


def test_state_and_files_carry_over_like_one_terminal(pytester):
    result = run_page(
        pytester,
        """
        <!-- block: file src/hello.py -->
        ~~~python
        import os
        print("hello from", os.environ["WHO"])
        ~~~

        ~~~console
        $ export WHO=page
        $ cd src
        ~~~

        ~~~bash
        python hello.py
        ~~~

        ~~~output
        hello from page
        ~~~
        """,
    )
    result.assert_outcomes(passed=4)


def test_pwd_follows_cd_from_command_to_command(pytester):
    # The saved state holds PWD as well; a later command must still see the directory it is in.
    result = run_page(
        pytester,
        """
        ~~~console
        $ basename "$PWD"
        work
        $ mkdir -p sub && cd sub
        $ basename "$PWD"
        sub
        ~~~
        """,
    )
    result.assert_outcomes(passed=1)


def test_sandbox_has_its_own_home_and_ray_tmpdir(pytester, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # must not leak into the page
    result = run_page(
        pytester,
        """
        ~~~console
        $ test ! -e ~/.ray/auth_token && echo "fresh home"
        fresh home
        $ echo "${RAY_TMPDIR#/tmp/page-}" "${RAY_ADDRESS:-unset}"
        <id>/ray unset
        ~~~
        """,
    )
    result.assert_outcomes(passed=1)


def test_sandbox_does_not_inherit_what_ray_init_set_in_the_worker(pytester, monkeypatch):
    # What `ray.init()` in an earlier python block of this process leaves behind.
    monkeypatch.setenv("PYTHONBREAKPOINT", "ray.util.rpdb._driver_set_trace")
    result = run_page(
        pytester,
        """
        ~~~console
        $ echo "${PYTHONBREAKPOINT:-unset}"
        unset
        ~~~
        """,
    )
    result.assert_outcomes(passed=1)


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


def test_commands_that_start_a_node_take_turns_across_workers(monkeypatch, tmp_path):
    lock = tmp_path / "node-start.lock"
    monkeypatch.setattr(shell_blocks, "NODE_START_LOCK", str(lock))
    with node_start_turn("ray start --head --port=6379") as prefix:
        assert not lock_is_free(lock)  # another worker's `ray start` waits
        if os.geteuid() == 0:  # and this one goes first
            assert prefix == ["nice", "-n", str(shell_blocks.NODE_START_NICE)]
        # a daemon the start leaves behind, at the raised priority (once it prints, `nice`
        # has set it and become it)
        sleeper = "import time; print('up', flush=True); time.sleep(60)"
        daemon = subprocess.Popen([*prefix, sys.executable, "-c", sleeper], stdout=subprocess.PIPE)
        assert daemon.stdout.readline() == b"up\n"
    try:
        assert lock_is_free(lock)
        # once the node is up, what it runs competes at the default priority again
        assert psutil.Process(daemon.pid).nice() == os.nice(0)
    finally:
        daemon.kill()
        daemon.wait()
    with node_start_turn("ray status") as prefix:  # starts no node: holds nothing
        assert lock_is_free(lock) and prefix == []


def stand_in_raylet(args: list[str]) -> subprocess.Popen:
    """A process whose arguments name a log and a node id, as a raylet's do.

    Returned once its arguments can be read: right after ``Popen`` returns, a busy machine
    can still show an empty ``/proc/<pid>/cmdline`` (the child is in the middle of exec).
    """
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *args])
    deadline = time.monotonic() + 30
    while psutil.Process(process.pid).cmdline()[-len(args) :] != args:
        assert time.monotonic() < deadline, "the stand-in raylet's arguments never showed"
        time.sleep(0.01)
    return process


def test_a_raylet_counts_as_registered_once_the_gcs_has_told_it_of_its_own_node(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    raylet = stand_in_raylet([f"--log_dir={log_dir}", "--node_id=abc123"])
    try:
        (log_dir / "raylet.out").write_text("main.cc: Setting node ID node_id=abc123\n")
        assert not shell_blocks.registered(raylet.pid)
        with (log_dir / "raylet.out").open("a") as out:  # the GCS has told it of another node
            out.write("accessor.cc: ... for node, IsAlive = 1 node_id=fff999\n")
        assert not shell_blocks.registered(raylet.pid)
        with (log_dir / "raylet.out").open("a") as out:  # ... and of its own
            out.write("accessor.cc: ... for node, IsAlive = 1 node_id=abc123\n")
        assert shell_blocks.registered(raylet.pid)
    finally:
        raylet.kill()
        raylet.wait()
    assert not shell_blocks.registered(raylet.pid)  # gone: no


def test_a_raylet_that_names_its_log_file_is_read_there(tmp_path):
    # The second node of a session on one machine writes raylet.1.out, and says so.
    own_log = tmp_path / "raylet.1.out"
    own_log.write_text("accessor.cc: ... for node, IsAlive = 1 node_id=def456\n")
    (tmp_path / "raylet.out").write_text("the head's log, nothing about def456\n")
    raylet = stand_in_raylet(
        [f"--log_dir={tmp_path}", f"--stdout_filepath={own_log}", "--node_id=def456"]
    )
    try:
        assert shell_blocks.registered(raylet.pid)
    finally:
        raylet.kill()
        raylet.wait()


def test_a_failure_shows_the_logs_that_background_commands_wrote(pytester):
    page = (
        "~~~console\n"
        "$ (echo starting; echo 'node timed out during startup') > node2.log 2>&1 &\n"
        "$ sleep 1; grep -q 'ran on' demand.log\n"
        "~~~\n"
    )
    result = run_page(pytester, page)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*exited with code 2*", "*last lines of node2.log*", "starting", "*timed out*"]
    )


def test_timeout_fails_instead_of_hanging(pytester):
    result = run_page(pytester, "<!-- block: run timeout=1 -->\n~~~console\n$ sleep 30\n~~~\n")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*`sleep 30` did not finish within 1 s*"])


def test_retry_reruns_until_the_output_matches(pytester):
    result = run_page(
        pytester,
        """
        <!-- block: run retry=10 -->
        ~~~console
        $ n=$(( $(cat count 2>/dev/null || echo 0) + 1 )); echo $n > count; echo $n
        3
        ~~~
        """,
    )
    result.assert_outcomes(passed=1)


def test_retry_reruns_a_command_that_fails_until_it_succeeds(pytester):
    # No output to compare: only the exit code decides, and a failure is retried too.
    result = run_page(
        pytester,
        """
        <!-- block: run retry=10 -->
        ~~~console
        $ n=$(( $(cat count 2>/dev/null || echo 0) + 1 )); echo $n > count; [ $n -ge 3 ]
        ~~~
        """,
    )
    result.assert_outcomes(passed=1)


def test_detached_processes_are_killed_when_the_page_ends(pytester, tmp_path):
    pidfile = tmp_path / "pid"
    result = run_page(
        pytester,
        f"""
        ~~~console
        $ setsid sleep 300 > /dev/null 2>&1 & echo $! > {pidfile}
        ~~~
        """,
    )
    result.assert_outcomes(passed=1)
    pid = int(pidfile.read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_bad_run_option_is_reported():
    with pytest.raises(ValueError, match="unknown run option"):
        options_of("timeout=5 retries=3")


def test_console_parsing_and_cleaning():
    commands = parse_console("$ ray start \\\n  --head\nRay runtime started.\n$ ray status\n")
    assert [c.text for c in commands] == ["ray start \\\n  --head", "ray status"]
    assert commands[0].expected == "Ray runtime started."
    with pytest.raises(ValueError, match="no `\\$ command` above it"):
        parse_console("output first\n$ true\n")
    with pytest.raises(ValueError, match="line 2 of a console block is output"):  # 1-based
        parse_console("\noutput after a blank line\n$ true\n")
    # blank lines between commands are skipped, not the end of the block
    assert [c.text for c in parse_console("\n$ true\n\n$ false\n")] == ["true", "false"]
    raw = (
        "2026-11-21 09:35:16,478\tSUCC scripts.py:1085 -- \x1b[32mRay runtime started.\x1b[39m  \n"
    )
    assert clean(raw) == "Ray runtime started."
