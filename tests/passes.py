"""Run the test suite's passes: the parallel pass, then the shell pages side by side.

    python -m tests.passes                  (what `nox -s tests` runs)
    python -m tests.passes --shell-runners 3
    python -m tests.passes --at-once [--shell-runners 1] [--parallel-workers 1]

The suite has two kinds of items (see ``tests/docblocks/plugin.py``):

* everything else, run by pytest-xdist over the cores (``-n auto``): the **parallel pass**;
* pages with shell blocks (marker ``shell``) and items marked ``alone``: **shell passes**.
  A shell page types ``ray start`` and ``ray stop`` into a terminal. ``ray stop`` stops
  every Ray process it can see, and ``ray start --head`` wants port 6379, so a shell
  page cannot share a machine with anything else that runs Ray.

A shell page mostly waits: on ``ray start``, on a timeout the page demonstrates, on
``ray status`` until a node joins. One at a time, the shell pages kept 0.8 of 2 cores
busy (494 CPU-s in 618 s, November 2026). So, where Linux namespaces are available, the
shell pages are split among ``--shell-runners`` runners (2 by default), and each runner
gets a machine of its own:

* a private PID namespace: its ``ray stop`` sees, and stops, only its own processes;
* a private network namespace: its own port 6379. Loopback gets an address and a default
  route, so Ray finds a node IP the way it does on a real host;
* its own ``/etc/resolv.conf`` (in a private mount namespace): no DNS server is reachable
  in there, and torch's TCPStore looks its address up; pointing at 127.0.0.1 makes the
  lookup fail at once instead of after a 10 s timeout;
* its own ``/tmp`` (a bind mount, in the same mount namespace; a checkout under ``/tmp``
  is bound back into it). Pages name fixed paths there (a second node's
  ``ray start ... --temp-dir=/tmp/ray-node2`` on five pages), and ``ray.init()`` with no
  address connects to the cluster named in ``ray_current_cluster`` under Ray's temp
  directory (``/tmp/ray`` unless ``RAY_TMPDIR`` is set), which ``ray start`` and
  ``ray.cluster_utils.Cluster`` write: shared, an ``alone`` test's cluster was once found
  by another pass's ``ray.init(num_cpus=4)``, which then failed ("When connecting to an
  existing cluster, num_cpus and num_gpus must not be provided").

The runners start when the parallel pass has ended, not beside it: the parallel pass
alone keeps about 1.65 cores busy, and on a machine loaded several times over Ray's own
start-up fails (a new raylet has 30 s to register with the GCS, ``ray/_private/node.py``).
``--at-once`` starts everything together, the parallel pass with ``--parallel-workers``
xdist workers (1 by default). Without namespaces (not Linux, or no privilege to make
them) the shell pages run one at a time after the parallel pass.

Measured on one 2-core machine (November 2026):

| how the passes ran | parallel pass | shell pages | result |
|---|---|---|---|
| one shell page at a time (a checkout already installed) | 422 s | 618 s | green |
| shell pages in 2 runners (the same checkout) | | 384 s | green |
| shell pages in 3 runners (the same checkout) | | 366 s | green |
| 2 runners, the default: ``bash .ci/run`` on a fresh clone | 474 s | 308 s and 387 s | green |

On the fresh clone all of ``nox`` (installs, both passes, docs, lint) took 902 s.
The parallel pass is CPU-bound at ``-n 2``: at ``-n 3`` (the same clone) it took 458 s
instead of 474 s and used 850 CPU-s instead of about 700.
With 2 runners the shell pages used 545 CPU-s (1.4 cores); with 3, 606 CPU-s and the
slowest runner's pages ran 80 % longer than alone: past 2 runners the cores are full.
An earlier, slower machine (a shell page there took about 1.6 times as long):
``--at-once`` with 2 shell runners and the parallel pass at ``-n 2`` failed twice, at
load average 13 to 15 (Ray start-ups timed out); with 1 runner and ``-n 1`` it was green
and 17 % faster than one page at a time.

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
# node IP from the route to the outside), a resolv.conf whose server answers at once, and
# a private /tmp. A checkout under /tmp (CI may clone there) stays where it was: it is
# bound into the private /tmp first, and --rbind carries that mount along.
NAMESPACE_SETUP = """
set -e
export PATH="$PATH:/usr/sbin:/sbin"
ip link set lo up
ip addr add 10.9.0.2/32 dev lo
ip route add default dev lo src 10.9.0.2
mount --bind "$RESOLV_CONF" /etc/resolv.conf
case "$REPO" in
  /tmp/*) mkdir -p "$PRIVATE_TMP/${REPO#/tmp/}"; mount --bind "$REPO" "$PRIVATE_TMP/${REPO#/tmp/}";;
esac
mount --rbind "$PRIVATE_TMP" /tmp
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


def namespace_env(resolv_conf: Path, private_tmp: Path, repo: Path = REPO) -> dict[str, str]:
    """The variables NAMESPACE_SETUP reads."""
    return {"RESOLV_CONF": str(resolv_conf), "PRIVATE_TMP": str(private_tmp), "REPO": str(repo)}


def namespaces_work(work: Path, resolv_conf: Path) -> bool:
    """Can this machine give a command private PID, network and mount namespaces?"""
    private_tmp = work / "probe-tmp"
    private_tmp.mkdir()
    try:
        done = subprocess.run(
            [*UNSHARE, "bash", "-c", NAMESPACE_SETUP, "setup", "true"],
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                **namespace_env(resolv_conf, private_tmp),
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


def plan(runners: int, isolated: bool, at_once: bool, parallel_workers: int) -> list[list[Pass]]:
    """The passes, in phases: a phase's passes run together, and a phase starts when the
    one before it has ended."""
    pytest = [sys.executable, "-m", "pytest"]
    parallel = Pass("parallel pass", [*pytest, "--durations=15"])
    serial = [*pytest, "-m", "shell or alone", "-n", "0", "--durations=5"]
    if not isolated:  # one at a time: a shell page's `ray stop` would stop any other Ray
        return [[parallel], [Pass("shell pages and `alone` items", serial)]]
    groups = split(shell_pages(), runners)
    shell = []
    # Every runner but the last takes its pages by path; the last collects everything
    # else that is `shell` or `alone` (the `alone` tests included), so no item is lost.
    for number, group in enumerate(groups[:-1], start=1):
        name = f"shell runner {number} ({len(group)} pages)"
        shell.append(Pass(name, [*serial, *with_twins(group)], isolated=True))
    taken = [f"--ignore={path}" for group in groups[:-1] for path in with_twins(group)]
    name = f"shell runner {len(groups)} ({len(groups[-1])} pages and the `alone` items)"
    shell.append(Pass(name, [*serial, *taken], isolated=True))
    if not at_once:
        return [[parallel], shell]
    # Beside the shell runners, few xdist workers (one by default): the cores are shared
    # out, not oversubscribed (Ray gives a raylet 30 s to register, then fails the start).
    parallel.command = [*parallel.command, "-n", str(parallel_workers)]
    return [[parallel, *shell]]


def start(one: Pass, work: Path, resolv_conf: Path) -> None:
    one.log = work / (re.sub(r"\W+", "-", one.name.split(" (")[0]).strip("-") + ".log")
    command, env = one.command, dict(os.environ)
    if one.isolated:
        command = [*UNSHARE, "bash", "-c", NAMESPACE_SETUP, "setup", *command]
        private_tmp = work / (one.log.stem + "-tmp")
        private_tmp.mkdir()
        env.update(namespace_env(resolv_conf, private_tmp))
    with open(one.log, "wb") as out:
        one.process = subprocess.Popen(
            command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env
        )
    one.started = time.monotonic()


def run_phase(phase: list[Pass], work: Path, resolv_conf: Path) -> None:
    """Start every pass of the phase; return when all have ended, each with its own time."""
    for one in phase:
        start(one, work, resolv_conf)
    running = list(phase)
    while running:  # poll, since they end in any order
        time.sleep(1)
        for one in [one for one in running if one.process.poll() is not None]:
            one.seconds = time.monotonic() - one.started
            running.remove(one)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shell-runners",
        type=int,
        default=2,
        help="how many namespaced runners share out the shell pages (default 2)",
    )
    parser.add_argument(
        "--at-once", action="store_true", help="the shell runners beside the parallel pass"
    )
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
    isolated = sys.platform.startswith("linux") and namespaces_work(work, resolv_conf)
    phases = plan(runners, isolated, arguments.at_once, arguments.parallel_workers)
    for phase in phases:
        run_phase(phase, work, resolv_conf)

    passes = [one for phase in phases for one in phase]
    failed = []
    for one in passes:
        print(f"\n{'#' * 20} {one.name}: {' '.join(one.command)}\n", flush=True)
        sys.stdout.write(one.log.read_text(errors="replace"))
        # Exit code 5 (nothing selected) is fine for a shell pass given no shell page.
        if one.process.returncode not in (0, 5):
            failed.append(one.name)
    if not isolated:
        how = "one after the other (no namespaces on this machine)"
    elif arguments.at_once:
        how = "all at once, each shell runner in private PID/network/mount namespaces"
    else:
        how = "the parallel pass, then the shell runners together, each in its own namespaces"
    print(f"\npasses, run {how}:")
    for one in passes:
        print(f"  {one.name}: {one.seconds:.0f} s, exit code {one.process.returncode}")
    if failed:
        print(f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
