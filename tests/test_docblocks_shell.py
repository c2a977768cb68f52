"""The shell-block runner (tests/docblocks/shell_blocks.py): commands run, outputs compared,
state carried from block to block, and nothing left running after a page.

Like tests/test_docblocks.py, each test writes a small page and runs pytest on it
in-process with the harness's own parser, setup and teardown.
"""

from __future__ import annotations

import time

import psutil
import pytest

from tests.docblocks.match import clean
from tests.docblocks.node_starts import NODE_BOOT_S
from tests.docblocks.shell_blocks import DEFAULT_TIMEOUT_S, options_of, parse_console, pressure
from tests.test_docblocks import CONFTEST, run_page

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
            "*(load average * on * CPUs; waited for *: cpu *; node starts run at *)",
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


def test_a_timeout_shows_what_the_command_printed_so_far(pytester):
    page = '<!-- block: run timeout=1 -->\n~~~console\n$ echo "$((6 * 7))"; sleep 30\n~~~\n'
    result = run_page(pytester, page)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*did not finish within 1 s; its output so far:*", "*42"])


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


def test_retry_gives_up_at_its_limit(pytester):
    # A command that never succeeds is retried for `retry` seconds, then fails: it does not
    # run until pytest's own limit.
    start = time.monotonic()
    result = run_page(pytester, "<!-- block: run retry=2 -->\n~~~console\n$ false\n~~~\n")
    result.assert_outcomes(failed=1)
    assert time.monotonic() - start < 60


def failure_message(result) -> str:
    """A failed item's message, without the sections pytest adds after it (the block's
    whole output is in "Captured stdout call")."""
    return result.stdout.str().split("Captured stdout call")[0]


def test_a_failure_shows_the_end_of_a_long_output(pytester):
    # 1 to 3000, one a line: about 14,000 characters, of which the message keeps the last
    # 3000 (2400 to 3000), enough to read and short enough to scroll past.
    result = run_page(pytester, "~~~console\n$ seq 1 3000; false\n~~~\n")
    result.assert_outcomes(failed=1)
    message = failure_message(result)
    assert "\n3000\n" in message and "\n2999\n" in message
    assert "\n2000\n" not in message


def test_file_blocks_write_into_folders_they_share(pytester):
    # The first makes pkg/sub/ (and pkg/); the second writes into it, now there.
    result = run_page(
        pytester,
        """
        <!-- block: file pkg/sub/a.txt -->
        ~~~text
        first
        ~~~

        <!-- block: file pkg/sub/b.txt -->
        ~~~text
        second
        ~~~

        ~~~console
        $ cat pkg/sub/a.txt pkg/sub/b.txt
        first
        second
        ~~~
        """,
    )
    result.assert_outcomes(passed=3)


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
    with pytest.raises(ValueError, match="line 3 of a console block is output"):
        parse_console("\n\noutput after two blank lines\n$ true\n")
    # blank lines between commands are skipped, not the end of the block
    assert [c.text for c in parse_console("\n$ true\n\n$ false\n")] == ["true", "false"]
    raw = (
        "2026-11-21 09:35:16,478\tSUCC scripts.py:1085 -- \x1b[32mRay runtime started.\x1b[39m  \n"
    )
    assert clean(raw) == "Ray runtime started."


def test_a_blocks_own_limits_are_not_cut_short_by_pytests_default(pytester):
    # A 2 x 8 plan, `timeout=600`, was ended by pytest-timeout's default 300 s.
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".md", page="<!-- block: run timeout=600 -->\n```console\n$ sleep 1\n```\n")
    items, _ = pytester.inline_genitems("-p", "tests.docblocks.plugin", "-p", "no:xdist")
    (item,) = items
    assert item.get_closest_marker("timeout").args[0] >= 600


def test_a_blocks_item_limit_adds_up_its_commands_limits(pytester):
    # Each command may take its timeout, then be run again for its retry; then a node
    # start's wait for its turn, and the default limit on top.
    pytester.makeconftest(CONFTEST)
    pytester.makefile(
        ".md", page="<!-- block: run timeout=600 retry=100 -->\n```console\n$ true\n$ true\n```\n"
    )
    items, _ = pytester.inline_genitems("-p", "tests.docblocks.plugin", "-p", "no:xdist")
    (item,) = items
    expected = 2 * (600 + 100) + DEFAULT_TIMEOUT_S + NODE_BOOT_S
    assert item.get_closest_marker("timeout").args[0] == pytest.approx(expected)


def test_pressure_is_a_question_mark_where_the_kernel_has_none():
    # Kernels before 4.20, or built without PSI, have no /proc/pressure: the failure
    # message still comes, with "?".
    assert pressure("no-such-resource") == "?"
