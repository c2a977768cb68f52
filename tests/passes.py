"""Run the whole suite (what `nox -s tests` runs): every xdist worker on a machine of its own.

    python -m tests.passes              (3 workers)
    python -m tests.passes --workers 4
    python -m tests.passes --burners 2 docs/cluster/bottleneck.md   (nox -s busy)
    python -m tests.passes --no-cache   (pytest options pass through)

The suite has two kinds of items (see ``tests/docblocks/plugin.py``):

* most items start Ray, if at all, with ``ray.init()`` or ``ray.cluster_utils.Cluster``
  and shut down what they started; any number of them can share a machine;
* pages with shell blocks (marker ``shell``) type ``ray start`` and ``ray stop`` into a
  terminal, and a few tests (marker ``alone``) run several raylets. ``ray stop`` stops
  every Ray process it can see, and ``ray start --head`` wants port 6379: such an item
  must not share a machine with anything else that runs Ray.

So each xdist worker is started through ``tests/namespace.sh``: private PID, network and
mount namespaces, so its own process table, port 6379 and ``/tmp`` (pytest's base temp and
the interpreter's prefix stay visible: ``NAMESPACE_KEEP``). All items then run in one
session, a page whole on one worker (``--dist loadfile``). A shell page mostly waits, so
3 workers share 2 cores (the cost, measured: CONTRIBUTING.md, "What the suite costs"). The
moment it does not wait is when it starts a Ray node, so commands that run ``ray start`` take
turns across workers (a lock file, ``SUITE_NODE_START_LOCK``; tests/docblocks/node_starts.py).
Items that run veRL's trainer on a simulated cluster (marker ``heavy``) take turns too: two
of them at once left a shell page too little CPU to start its node (``SUITE_HEAVY_LOCK``;
tests/docblocks/heavy.py).

Where namespaces cannot be made (not Linux, or no privilege), the suite runs as before:
the parallel pass (``pytest``: the defaults in pyproject.toml deselect ``shell`` and
``alone``), then the shell pages and ``alone`` items one at a time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))  # as pytest's pythonpath does
from run_limited import run_limited  # noqa: E402

NAMESPACE_SH = REPO / "tests" / "namespace.sh"
PYTEST = [sys.executable, "-m", "pytest"]
# pyproject.toml's addopts say `-n auto` (which would override --tx) and deselect `shell`
# and `alone`; the namespaced run replaces them. `rlhf`, `browser`, `kit` and `downloads`
# have sessions of their own (noxfile.py).
NAMESPACED_DESELECT = "not rlhf and not browser and not kit and not downloads"
# The whole namespaced run: 51 minutes on a quiet 2-core machine (28 November 2026, 2036
# items; CONTRIBUTING.md, "What the suite costs"). The limit catches a hang, not a slow run.
SUITE_LIMIT_S = 75 * 60


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
    env = {
        **os.environ,
        "NAMESPACE_WORK": str(work),
        "NAMESPACE_KEEP": ":".join(keep),
        # Shell pages start their Ray nodes one at a time (tests/docblocks/shell_blocks.py).
        "SUITE_NODE_START_LOCK": str(kept / "node-start.lock"),
        # Items that run veRL on a simulated cluster run one at a time (tests/docblocks/heavy.py).
        "SUITE_HEAVY_LOCK": str(kept / "heavy.lock"),
    }
    return command, env


def run_with_limit(command: list[str], env: dict[str, str]) -> int:
    """Run the suite; past SUITE_LIMIT_S, interrupt it (pytest then prints what it has) and
    return 1. Each item has its own limit (pyproject.toml); this one catches the rest, such
    as a session that waits for ever on a worker that crashed."""
    done = run_limited(command, SUITE_LIMIT_S, cwd=REPO, env=env, grace_s=60)
    if done.killed or done.wall_s >= SUITE_LIMIT_S:
        print(f"tests/passes.py: the suite ran past {SUITE_LIMIT_S} s; it was interrupted")
        return 1
    return done.returncode


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
    # Other options go to pytest as they are: --no-cache, --update-outputs (tests/docblocks/).
    args, options = parser.parse_known_args()
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
            code = run_with_limit([*command, *options, *args.paths], env)
            print(f"tests/passes.py: the suite took {time.monotonic() - started:.0f} s")
            return code

        print("tests/passes.py: no namespaces here; shell pages run one at a time", flush=True)
        codes = []
        for command in one_at_a_time():
            began = time.monotonic()
            codes.append(subprocess.run([*command, *options, *args.paths], cwd=REPO).returncode)
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
