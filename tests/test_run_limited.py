"""The one kill-at-a-limit helper (``tools/run_limited.py``), and the page runner's cut.

Nothing here asserts a duration: each test looks at what is left running, what was
reported, and what a block wrote.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from run_limited import Finished, become_subreaper, reap_adopted, run_limited

pytestmark = pytest.mark.reads_docs()

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def state(pid: int) -> str | None:
    """``pid``'s state letter in /proc ("Z": a zombie), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def alive(pid: int) -> bool:
    """Is ``pid`` a live process (not a zombie)?"""
    return state(pid) not in (None, "Z")


def until(condition, within_s: float) -> bool:
    """Does ``condition()`` hold within ``within_s``? (Looked at every 0.05 s.)"""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def gone(pid: int, within_s: float = 10) -> bool:
    """Is ``pid`` dead within ``within_s``? A process sent SIGKILL is not gone at once: on a
    busy machine the kernel may take a moment to tear it down."""
    return until(lambda: not alive(pid), within_s)


def test_at_its_limit_the_command_and_its_group_are_killed(tmp_path):
    pids = tmp_path / "pids"
    # The command starts a child in its own group, then sleeps past the limit.
    script = f"import subprocess, time; p = subprocess.Popen({SLEEPER!r}); print(p.pid)"
    script += f"; open({str(pids)!r}, 'w').write(str(p.pid)); time.sleep(600)"
    done = run_limited([sys.executable, "-c", script], 2, capture=True)
    assert done.killed and done.returncode is None
    assert gone(int(pids.read_text()))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper: Linux only")
def test_sweep_kills_a_process_that_left_the_group(tmp_path):
    # A daemon in a session of its own, as `ray start` makes its raylet: the group kill
    # cannot reach it, the sweep must.
    # Its output goes elsewhere, so the command itself ends at once, well before its limit.
    script = "import subprocess as s, sys; p = s.Popen(sys.argv[1:], start_new_session=True, "
    script += "stdout=s.DEVNULL, stderr=s.DEVNULL); print(p.pid)"
    done = run_limited([sys.executable, "-c", script, *SLEEPER], 60, capture=True, sweep=True)
    assert done.returncode == 0 and not done.killed
    daemon = int(done.stdout.split()[0])
    assert gone(daemon), "the detached process outlived the command"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper: Linux only")
def test_reap_adopted_collects_an_adopted_zombie_and_leaves_keep_to_its_waiter(tmp_path):
    become_subreaper()  # as the shell pages' terminal is
    kept = subprocess.Popen(["true"])  # a command that some Popen is still waiting for
    # bash leaves a child behind and exits: we adopt the orphan, which then exits too
    orphan = subprocess.run(
        ["bash", "-c", "(sleep 0.5) & echo $!"], capture_output=True, text=True, check=True
    )
    adopted = int(orphan.stdout)
    assert until(lambda: state(adopted) == "Z" and state(kept.pid) == "Z", within_s=30)
    reap_adopted(keep=kept.pid)
    assert state(adopted) is None, "the adopted zombie was not collected"
    assert state(kept.pid) == "Z" and kept.wait(timeout=10) == 0  # its status is still there


def test_a_signal_death_is_a_negative_code_not_a_kill_at_the_limit():
    done = run_limited([sys.executable, "-c", "import os; os.abort()"], 60, capture=True)
    assert done == Finished(-signal.SIGABRT, done.wall_s, done.stdout, done.stderr)
    assert not done.killed


def test_grace_interrupts_first_so_the_command_can_report(tmp_path):
    script = "import time\ntry:\n    time.sleep(600)\nexcept KeyboardInterrupt:\n    print('done')"
    # A limit of 10 s: the interpreter must be inside `try` when the interrupt comes, which on
    # a busy machine can take seconds.
    done = run_limited([sys.executable, "-c", script], 10, capture=True, grace_s=30)
    assert done.returncode == 0 and done.stdout == "done\n"


def test_output_to_a_log_file(tmp_path):
    log = tmp_path / "out.log"
    done = run_limited(["bash", "-c", "echo out; echo err >&2; exit 3"], 60, log=log)
    assert done.returncode == 3 and sorted(log.read_text().split()) == ["err", "out"]


# -- the page runner runs a page only up to the last block a selected item needs ------------

CONFTEST = """
from sybil import Sybil
from tests.docblocks.plugin import parse_blocks, pytest_collection_finish, start_page
from tests.docblocks.plugin import pytest_addoption, pytest_configure, pytest_unconfigure
from tests.docblocks.plugin import stop_what_the_page_started


pytest_collect_file = Sybil(
    parsers=[parse_blocks], patterns=["*.md"],
    setup=start_page, teardown=stop_what_the_page_started,
).pytest()
"""


def page_that_writes(where) -> str:
    """Three python blocks; the third leaves a file behind if it runs (fence on line 9)."""
    return textwrap.dedent(
        f"""\
        ```python
        print("one")
        ```

        ```python
        print("two")
        ```

        ```python
        open({str(where)!r}, "w").write("ran")
        ```
        """
    )


@pytest.mark.parametrize("deselect_third", [True, False])
def test_a_page_runs_only_up_to_its_last_selected_block(pytester, tmp_path, deselect_third):
    ran = tmp_path / "third-block-ran"
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".md", page=page_that_writes(ran))
    args = ["-p", "no:xdist", "-p", "no:cacheprovider", "-q"]
    if deselect_third:
        args.append("--deselect=page.md::line:9,column:1")
    pytester.runpytest_inprocess(*args).assert_outcomes(passed=2 if deselect_third else 3)
    assert ran.exists() is not deselect_third


def test_the_cut_keeps_the_end_marker_and_shuts_ray_down():
    from tests.docblocks.page_scripts import MARKER_PREFIX, MARKER_SUFFIX, cut_after

    def marker(label) -> str:
        return f"print('{MARKER_PREFIX}{label}{MARKER_SUFFIX}', flush=True)"

    script = "\n".join([marker(1), "a = 1", marker(2), "b = 2", marker("end"), ""])
    cut = cut_after(script, 1)
    assert "b = 2" not in cut and marker(2) not in cut
    assert marker("end") in cut and "ray'].shutdown()" in cut
    assert cut_after(script, 2) == script
