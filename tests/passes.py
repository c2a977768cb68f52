"""Run the test suite's passes: the parallel pass, then the shell pages (or all at once).

    python -m tests.passes                 (what `nox -s tests` runs: one after the other)
    python -m tests.passes --at-once [--shell-runners 1] [--parallel-workers 1]

The suite has two kinds of items (see ``tests/docblocks/plugin.py``):

* everything else, run by pytest-xdist over the cores (``-n auto``): the **parallel pass**;
* pages with shell blocks (marker ``shell``) and items marked ``alone``: **shell passes**.
  A shell page types ``ray start`` and ``ray stop`` into a terminal. ``ray stop`` stops
  every Ray process it can see, and ``ray start --head`` wants port 6379, so a shell
  page cannot share a machine with anything else that runs Ray.

By default the shell pages run after the parallel pass, one at a time. Shell pages mostly
wait (on ``ray start``, on a timeout the page demonstrates, on ``ray status`` until a node
joins): one takes about a third of a core. ``--at-once`` gives each shell pass a machine
of its own, where Linux namespaces are available, and runs all passes together:

* a private PID namespace: its ``ray stop`` sees, and stops, only its own processes;
* a private network namespace: its own port 6379. Loopback gets an address and a default
  route, so Ray finds a node IP the way it does on a real host;
* its own ``/etc/resolv.conf`` (in a private mount namespace): no DNS server is reachable
  in there, and torch's TCPStore looks its address up; pointing at 127.0.0.1 makes the
  lookup fail at once instead of after a 10 s timeout.
* its own ``/tmp/ray`` (a bind mount, in the same mount namespace): ``ray.init()`` with no
  address connects to the cluster named in ``ray_current_cluster`` in Ray's temp directory
  (``/tmp/ray`` unless ``RAY_TMPDIR`` is set), which ``ray start`` and
  ``ray.cluster_utils.Cluster`` write. Shared, the cluster of an ``alone`` test that sets no
  ``RAY_TMPDIR`` was found by the parallel pass's ``ray.init(num_cpus=4)``, which then
  failed ("When connecting to an existing cluster, num_cpus and num_gpus must not be
  provided").

Beside them, the parallel pass gets one xdist worker (``--parallel-workers``), and
there is one shell runner unless ``--shell-runners`` asks for more: the aim is to fill
the cores, not to oversubscribe them. Ray gives a new raylet 30 s to register with the
GCS (``ray/_private/node.py``), and on a machine loaded several times over, starts fail.

It is not the default. Measured on one 2-core machine (November 2026, fresh clones):

* one after the other: parallel pass 901 s, shell pages 1004 s, 1905 s in all, green;
* ``--at-once --shell-runners 2``, the parallel pass at ``-n 2`` under ``nice``: two runs,
  1426 s and 1422 s, both red. In the first, two pages' timings broke (since made to hold
  under load); in the second, at load average 13 to 15, ``ray.init()`` in
  ``tests/test_single_controller.py`` ("The current node timed out during startup") and a
  second node's ``ray start`` on ``docs/troubleshooting/gpus.md`` failed;
* ``--at-once`` as it is now (one shell runner, ``-n 1``): 1580 s, green, load average
  about 4.

One green run is not enough to trust it on CI, where a red run blocks a change.

Each pass writes to its own log; the logs are printed whole, one after the other, when
all passes have ended, followed by each pass's wall time.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.docblocks.collect import blocks_of, runs_shell, twin
from tests.docblocks.shell_blocks import parse_console

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

# Inside the namespaces: loopback up, with an address and a default route (Ray reads the
# node IP from the route to the outside), and a resolv.conf whose server answers at once.
NAMESPACE_SETUP = """
set -e
export PATH="$PATH:/usr/sbin:/sbin"
ip link set lo up
ip addr add 10.9.0.2/32 dev lo
ip route add default dev lo src 10.9.0.2
mount --bind "$RESOLV_CONF" /etc/resolv.conf
mkdir -p /tmp/ray
mount --bind "$PRIVATE_RAY_TMP" /tmp/ray
set +e
exec "$@"
"""
UNSHARE = ("unshare", "--pid", "--net", "--mount", "--fork", "--mount-proc")


@dataclass
class Pass:
    """One pytest run: its name, its command, and once started its process and log."""

    name: str
    command: list[str]
    isolated: bool = False
    process: subprocess.Popen | None = None
    log: Path | None = None
    started: float = 0.0
    seconds: float = 0.0


def namespaces_work(resolv_conf: Path) -> bool:
    """Can this machine give a command private PID, network and mount namespaces?"""
    try:
        done = subprocess.run(
            [*UNSHARE, "bash", "-c", NAMESPACE_SETUP, "setup", "true"],
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "RESOLV_CONF": str(resolv_conf),
                "PRIVATE_RAY_TMP": str(resolv_conf.parent),
            },
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def shell_pages() -> dict[Path, int]:
    """English pages with shell blocks, each with its number of ``$`` commands (its weight)."""
    pages = {}
    for page in sorted(DOCS.rglob("*.md")):
        if page.name.endswith(".zh.md") or not runs_shell(page):
            continue
        consoles = [b.source for b in blocks_of(page) if b.verdict.kind == "console"]
        pages[page] = sum(len(parse_console(source)) for source in consoles) or 1
    return pages


def split(pages: dict[Path, int], runners: int) -> list[list[Path]]:
    """Heaviest page first, each to the runner with the least weight so far."""
    groups: list[list[Path]] = [[] for _ in range(runners)]
    loads = [0] * runners
    for page, weight in sorted(pages.items(), key=lambda item: -item[1]):
        lightest = loads.index(min(loads))
        groups[lightest].append(page)
        loads[lightest] += weight
    return groups


def with_twins(pages: list[Path]) -> list[str]:
    """Each page and its Chinese twin (run too with --doc-languages=all), as paths."""
    return [str(p.relative_to(REPO)) for page in pages for p in (page, twin(page)) if p.exists()]


def plan(runners: int, isolated: bool, parallel_workers: int) -> list[Pass]:
    pytest = [sys.executable, "-m", "pytest"]
    parallel = Pass("parallel pass", [*pytest, "--durations=15"])
    serial = [*pytest, "-m", "shell or alone", "-n", "0", "--durations=5"]
    if not isolated:
        return [parallel, Pass("shell pages and `alone` items", serial)]
    # Beside the shell passes, few xdist workers (one by default): the cores are shared out,
    # not oversubscribed (Ray gives a raylet 30 s to register, then fails the start).
    parallel.command = [*parallel.command, "-n", str(parallel_workers)]
    groups = split(shell_pages(), runners)
    passes = [parallel]
    # Every runner but the last takes its pages by path; the last collects everything
    # else that is `shell` or `alone` (the `alone` tests included), so no item is lost.
    for number, group in enumerate(groups[:-1], start=1):
        name = f"shell runner {number} ({len(group)} pages)"
        passes.append(Pass(name, [*serial, *with_twins(group)], isolated=True))
    taken = [f"--ignore={path}" for group in groups[:-1] for path in with_twins(group)]
    name = f"shell runner {len(groups)} ({len(groups[-1])} pages and the `alone` items)"
    passes.append(Pass(name, [*serial, *taken], isolated=True))
    return passes


def start(one: Pass, logs: Path, resolv_conf: Path) -> None:
    one.log = logs / (re.sub(r"\W+", "-", one.name.split(" (")[0]).strip("-") + ".log")
    command = one.command
    env = {**os.environ, "RESOLV_CONF": str(resolv_conf)}
    if one.isolated:
        command = [*UNSHARE, "bash", "-c", NAMESPACE_SETUP, "setup", *command]
        env["PRIVATE_RAY_TMP"] = str(logs / (one.log.stem + "-tmp-ray"))
        Path(env["PRIVATE_RAY_TMP"]).mkdir()
    with open(one.log, "wb") as out:
        one.process = subprocess.Popen(
            command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env
        )
    one.started = time.monotonic()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--at-once", action="store_true", help="all passes together, shell passes in namespaces"
    )
    parser.add_argument("--shell-runners", type=int, default=1, help="with --at-once")
    parser.add_argument(
        "--parallel-workers", type=int, default=1, help="with --at-once: the parallel pass's -n"
    )
    arguments = parser.parse_args()
    runners = arguments.shell_runners
    if runners < 1:
        parser.error(f"--shell-runners must be at least 1, got {runners}")
    if arguments.parallel_workers < 1:
        parser.error(f"--parallel-workers must be at least 1, got {arguments.parallel_workers}")

    work = Path(tempfile.mkdtemp(prefix="passes-"))
    resolv_conf = work / "resolv.conf"
    resolv_conf.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    isolated = (
        arguments.at_once and sys.platform.startswith("linux") and namespaces_work(resolv_conf)
    )
    passes = plan(runners, isolated, arguments.parallel_workers)
    if isolated:
        for one in passes:
            start(one, work, resolv_conf)
        running = list(passes)
        while running:  # each pass's own time: poll, since they end in any order
            time.sleep(1)
            for one in [one for one in running if one.process.poll() is not None]:
                one.seconds = time.monotonic() - one.started
                running.remove(one)
    else:
        for one in passes:  # one after the other: a shell page's `ray stop` stops all Ray
            start(one, work, resolv_conf)
            one.process.wait()
            one.seconds = time.monotonic() - one.started

    failed = []
    for one in passes:
        print(f"\n{'#' * 20} {one.name}: {' '.join(one.command)}\n", flush=True)
        sys.stdout.write(one.log.read_text(errors="replace"))
        # Exit code 5 (nothing selected) is fine for a shell pass given no shell page.
        if one.process.returncode not in (0, 5):
            failed.append(one.name)
    how = (
        "at once, each shell pass in private PID/network namespaces"
        if isolated
        else "one after the other"
    )
    print(f"\npasses, run {how}:")
    for one in passes:
        print(f"  {one.name}: {one.seconds:.0f} s, exit code {one.process.returncode}")
    if failed:
        print(f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
