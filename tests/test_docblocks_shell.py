"""The shell-block runner (tests/docblocks/shell_blocks.py): commands run, outputs compared,
state carried from block to block, and nothing left running after a page.

Like tests/test_docblocks.py, each test writes a small page and runs pytest on it
in-process with the harness's own parser, setup and teardown.
"""

from __future__ import annotations

import psutil
import pytest

from tests.docblocks.match import clean
from tests.docblocks.shell_blocks import options_of, parse_console
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


def test_a_blocks_own_limits_are_not_cut_short_by_pytests_default(pytester):
    # A 2 x 8 plan, `timeout=600`, was ended by pytest-timeout's default 300 s.
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".md", page="<!-- block: run timeout=600 -->\n```console\n$ sleep 1\n```\n")
    items, _ = pytester.inline_genitems("-p", "tests.docblocks.plugin", "-p", "no:xdist")
    (item,) = items
    assert item.get_closest_marker("timeout").args[0] >= 600
