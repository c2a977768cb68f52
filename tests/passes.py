"""Run the whole suite (what `nox -s tests` runs): every xdist worker on a machine of its own.

    python -m tests.passes              (3 workers)
    python -m tests.passes --workers 4
    python -m tests.passes --burners 2 docs/cluster/bottleneck.md   (nox -s busy)

The suite has two kinds of items (see ``tests/docblocks/plugin.py``):

* most items start Ray, if at all, with ``ray.init()`` or ``ray.cluster_utils.Cluster``
  and shut down what they started; any number of them can share a machine;
* pages with shell blocks (marker ``shell``) type ``ray start`` and ``ray stop`` into a
  terminal, and a few tests (marker ``alone``) run several raylets. ``ray stop`` stops
  every Ray process it can see, and ``ray start --head`` wants port 6379: such an item
  must not share a machine with anything else that runs Ray.

So each xdist worker is started through ``tests/namespace.sh``, which gives it private
PID, network and mount namespaces: its own process table (``ray stop`` sees only its
worker's processes), its own port 6379 and its own ``/tmp``. With that, all items run in
one pytest session and xdist hands out pages and test files (``--dist loadfile``: a page
runs whole on one worker) to whichever worker is free. A shell page mostly waits (on a
``ray start``, a node joining, a timeout the page demonstrates), so while it waits the
other workers use the cores: 3 workers on 2 cores, by default.

Measured on one 2-core machine (November 2026); CPU-s in this table are all processes'
user and system time sampled from /proc every 0.1 s, which misses short-lived processes
(see the accounted figures below):

| how the suite ran | wall | CPU-s |
|---|---|---|
| parallel pass (``-n 2``), then shell pages one at a time | 422 s + 618 s | 700 + 494 |
| parallel pass, then shell pages in 2 namespaced runners, fresh clone | 474 + 387 s | 700 + 545 |
| one session, 3 namespaced workers (this module), two runs | 657 s, 620 s | 1107, 1049 |
| the same, ``bash .ci/run`` on a fresh clone, two runs | 678 s, 769 s | |

On those fresh clones all of ``nox`` (installs, the suite, docs, lint) took 713 s and
807 s, against 902 s with the two passes; on a third (``nox`` alone), 766 s with the
suite at 724 s.

In the namespaced session the cores stay busy (1.7 of 2 on average, against 1.5 and 1.4
in the two passes before).

Where the CPU goes. Counted by the kernel's process accounting (``acct(2)``: every process
that ends, however short-lived, with its user and system time), all of ``nox`` on a fresh
clone took 1333 CPU-s in 766 s (1.74 cores busy), and the suite alone 1289-1301 CPU-s in
724-738 s. By process kind, in one suite run (1301 CPU-s):

| processes | CPU-s | count |
|---|---|---|
| Ray workers: the pages' and tests' tasks and actors (most import torch) | 494 | 425 |
| each node's daemons (below) | 343 | 928 |
| the pages' subprocesses (``python train.py``, ``python -c``), shells, other | 182 | 1635 |
| ``ray`` commands (``ray start``, ``ray status``, ``ray list ...``) | 115 | 149 |
| page scripts (the drivers) | 77 | 29 |
| pytest (controller and 3 workers) | 70 | 34 |
| ``mkdocs build`` (tests/test_site_build.py) | 19 | 4 |

The nodes' daemons: the dashboard and its module processes 132, dashboard agent 75,
runtime-env agent 39, log monitor 32, autoscaler monitor 24, raylet 17, GCS 16, Ray
client server 9. So about 93 % of the suite's CPU is what the pages and tests run (86
Ray nodes in 68 clusters) and 7 % the harness; on 2 cores, 1300 CPU-s cannot take less
than 650 s. Three workers keep 1.8 cores busy; four were no faster (797 s against 791 s
for three, back to back, with the machine 98 % busy; likely because daemons that poll
on a timer cost more the longer a contended page runs: a head node left idle costs about
0.04 cores, measured as 5.8-7.4 CPU-s for ``ray start``, 5 s idle and ``ray stop``
against 11.1-11.5 CPU-s with 120 s idle, two runs each).

The first version of ``tests/namespace.sh`` made the worker itself PID 1; in one run of
it a worker went down near the end ("node down: Not properly terminated", cause not
found) and the session then waited for ever. A shell is PID 1 now, and the run has a
time limit (``SUITE_LIMIT_S``).

The pytest run's ``--basetemp`` is in a folder that ``tests/namespace.sh`` keeps visible
in every worker (``NAMESPACE_KEEP``): xdist tells each worker to make its own folder
inside the controller's base temp.

Where namespaces cannot be made (not Linux, or no privilege), the suite runs as before:
the parallel pass (``pytest``: the defaults in pyproject.toml deselect ``shell`` and
``alone``), then the shell pages and ``alone`` items one at a time.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAMESPACE_SH = REPO / "tests" / "namespace.sh"
PYTEST = [sys.executable, "-m", "pytest"]
# pyproject.toml's addopts say `-n auto` (which would override --tx) and deselect `shell`
# and `alone`; the namespaced run replaces them. `rlhf`, `browser`, `kit` and `downloads`
# have sessions of their own (noxfile.py).
NAMESPACED_DESELECT = "not rlhf and not browser and not kit and not downloads"
# The whole namespaced run: 10-13 minutes on a 2-core machine (620-797 s measured, above).
SUITE_LIMIT_S = 40 * 60


def namespaces_work(work: Path) -> bool:
    """Can ``tests/namespace.sh`` give a command a machine of its own here?"""
    if not sys.platform.startswith("linux"):
        return False
    try:
        done = subprocess.run(
            ["bash", str(NAMESPACE_SH), "true"],
            env={**os.environ, "NAMESPACE_WORK": str(work)},
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def namespaced_run(workers: int, work: Path) -> tuple[list[str], dict[str, str]]:
    """The one pytest command, and its environment, for ``workers`` namespaced workers."""
    kept = work / "kept"  # visible in every worker: pytest's base temp lives here
    kept.mkdir()
    # execnet starts each worker as `<python> -u -c <bootstrap>`; `python=` may be a
    # command line (split like a shell would), so the worker is the same interpreter,
    # started through namespace.sh.
    worker = f"popen//python=bash {NAMESPACE_SH} {sys.executable}"
    command = [
        *PYTEST,
        "-o",
        "addopts=-ra",
        "-m",
        NAMESPACED_DESELECT,
        "--dist",
        "loadfile",
        "--tx",
        f"{workers}*{worker}",
        f"--basetemp={kept / 'basetemp'}",
        "--durations=15",
    ]
    # The interpreter must stay visible too: a virtualenv (or its base Python) under /tmp
    # would vanish behind the private /tmp.
    keep = dict.fromkeys([str(kept), sys.prefix, sys.base_prefix])
    env = {**os.environ, "NAMESPACE_WORK": str(work), "NAMESPACE_KEEP": ":".join(keep)}
    return command, env


def run_with_limit(command: list[str], env: dict[str, str]) -> int:
    """Run the suite; past SUITE_LIMIT_S, interrupt it (pytest then prints what it has) and
    return 1. Each item has its own limit (pyproject.toml); this one catches the rest, such
    as a session that waits for ever on a worker that crashed."""
    process = subprocess.Popen(command, cwd=REPO, env=env)
    try:
        return process.wait(timeout=SUITE_LIMIT_S)
    except subprocess.TimeoutExpired:
        print(f"tests/passes.py: the suite ran past {SUITE_LIMIT_S} s; interrupting it", flush=True)
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        return 1


def one_at_a_time() -> list[list[str]]:
    """Without namespaces: the parallel pass, then the shell pages and `alone` items."""
    return [
        [*PYTEST, "--durations=15"],
        [*PYTEST, "-m", "shell or alone", "-n", "0", "--durations=5"],
    ]


# A CPU burner: a busy loop that ends by itself at its deadline (argv[1], seconds from now),
# so that one left behind by a killed run cannot burn for ever.
BURNER = """
import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
"""


def start_burners(count: int) -> list[subprocess.Popen]:
    """``count`` processes that each keep one CPU busy for at most SUITE_LIMIT_S."""
    return [
        subprocess.Popen([sys.executable, "-c", BURNER, str(SUITE_LIMIT_S)]) for _ in range(count)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workers", type=int, default=3, help="namespaced xdist workers (default 3)"
    )
    parser.add_argument(
        "--burners", type=int, default=0, help="CPU-burning processes beside the run (default 0)"
    )
    parser.add_argument("paths", nargs="*", help="pages or tests to run (default: everything)")
    args = parser.parse_args()
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    if args.burners < 0:
        parser.error(f"--burners must be 0 or more, got {args.burners}")

    work = Path(tempfile.mkdtemp(prefix="passes-"))
    burners = start_burners(args.burners)
    if burners:
        print(f"tests/passes.py: {len(burners)} CPU burners beside the run", flush=True)
    started = time.monotonic()
    try:
        if namespaces_work(work):
            command, env = namespaced_run(args.workers, work)
            print(
                f"tests/passes.py: {args.workers} xdist workers, each in its own namespaces",
                flush=True,
            )
            code = run_with_limit([*command, *args.paths], env)
            print(f"tests/passes.py: the suite took {time.monotonic() - started:.0f} s")
            return code

        print("tests/passes.py: no namespaces here; shell pages run one at a time", flush=True)
        codes = []
        for command in one_at_a_time():
            began = time.monotonic()
            codes.append(subprocess.run([*command, *args.paths], cwd=REPO).returncode)
            print(f"tests/passes.py: {' '.join(command[1:])}: {time.monotonic() - began:.0f} s")
        # Exit code 5 (nothing selected) is fine for either run given a list of paths.
        allowed = (0, 5) if args.paths else (0,)
        return 0 if codes[0] in allowed and codes[1] in (0, 5) else 1
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


if __name__ == "__main__":
    sys.exit(main())
