"""Shell blocks: terminal sessions that run, for real, against a local Ray cluster.

A page's shell blocks behave like one terminal that a reader types into:

* ```` ```console ```` blocks hold ``$ command`` lines, each followed by the
  output the page shows. Every command runs; its output (stdout and stderr,
  as a terminal shows them) must match what the page shows, in the dialect of
  ``match.py`` (``...`` any text, ``<ip>``, ``<id>``, ``<n>``). A command with
  no lines under it may print anything. A command that exits
  non-zero fails the block; a page that wants to show a failure writes
  ``$ cmd || echo "exit code $?"``.
* ```` ```bash ```` blocks are scripts, run with ``bash -e``; an ``output``
  block right after one is compared with what it printed.
* ``<!-- block: file NAME -->`` above any block writes its text to ``NAME`` in
  the terminal's working directory, where later commands use it
  (``python driver.py``, ``ray job submit --working-dir .``).
* ``<!-- block: run timeout=300 retry=20 -->`` above a console or bash block
  sets the time limit of each command in seconds (default 120) and lets a
  command be run again, for up to ``retry`` seconds, until its output
  matches: what a reader does when ``ray status`` answers "No cluster status"
  in the first seconds after ``ray start``. ``needs=OTHER_PYTHON,PATCH_PYTHON`` skips
  the block, saying how to get them, where one of those environment variables is unset.

Exported variables and the working directory carry over from command to
command and block to block. Each page gets its own sandbox: a fresh working
directory, a fresh ``HOME`` (so no auth token is left from earlier runs) and
its own ``RAY_TMPDIR`` (so ``ray.init()`` on other pages never finds this
page's cluster). When the page ends, whatever its commands left running is
killed: this process is made a child subreaper (Linux ``prctl``), so the Ray
daemons that ``ray start`` detaches stay its descendants and can be found.
``ray stop`` stops every Ray process it can see, so pages with shell blocks
(marker ``shell``) never run beside other Ray users: ``tests/passes.py`` starts
each xdist worker in PID, network and mount namespaces of its own
(``tests/namespace.sh``), or, where it cannot, runs these pages one at a time
after the rest.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from run_limited import become_subreaper, reap_adopted, run_limited
from tests.docblocks.match import clean, matches
from tests.docblocks.node_starts import (
    NODE_BOOT_S,
    NODE_START_NICE,
    StartWatch,
    back_to_default_priority,
    how_starts_run,
    node_start_turn,
    set_group_nice,
)

PROMPT = "$ "
DEFAULT_TIMEOUT_S = 120.0
# What `ray.init()` sets in the environment of the process that calls it (`connect` in
# ray/_private/worker.py). A python block that ran `ray.init()` in this process has set it
# here; a page's terminal gets the value this process started with instead, or none, as a
# reader's fresh terminal would (else its driver shows Ray's breakpoint hook before its own
# `ray.init()`).
SET_BY_RAY_INIT = ("PYTHONBREAKPOINT",)
RAY_INIT_VARS_AT_START = {name: os.environ[name] for name in SET_BY_RAY_INIT if name in os.environ}


@dataclass
class Command:
    """One ``$ command`` of a console block and the output the page shows under it."""

    text: str
    expected: str
    line: int  # line of the command within the block, counting from 0


def parse_console(source: str) -> list[Command]:
    """Split a console block into commands; a trailing ``\\`` continues a command.

    >>> [c.text for c in parse_console("$ echo a \\\\\\n  b\\na b\\n$ true\\n")]
    ['echo a \\\\\\n  b', 'true']
    """
    commands: list[Command] = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith(PROMPT):
            if line.strip():
                raise ValueError(
                    f"line {i + 1} of a console block is output with no `$ command` above it"
                )
            i += 1
            continue
        start, text = i, line[len(PROMPT) :]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text += "\n" + lines[i]
        i += 1
        output = []
        while i < len(lines) and not lines[i].startswith(PROMPT):
            output.append(lines[i])
            i += 1
        commands.append(Command(text, "\n".join(output), start))
    return commands


def options_of(note: str) -> dict[str, float | tuple[str, ...]]:
    """``timeout=300 retry=20 needs=A,B`` -> {"timeout": 300.0, "retry": 20.0,
    "needs": ("A", "B")}."""
    options = {}
    for word in note.split():
        key, _, value = word.partition("=")
        if key not in ("timeout", "retry", "needs") or not value:
            raise ValueError(
                f"unknown run option {word!r}; use timeout=SECONDS retry=SECONDS needs=VAR,VAR"
            )
        options[key] = tuple(value.split(",")) if key == "needs" else float(value)
    return options


@dataclass
class ShellBlock:
    """A console or bash block. ``printed`` is what a bash block printed (None: not run)."""

    source: str
    language: str  # "console" or "bash"
    timeout: float = DEFAULT_TIMEOUT_S
    retry: float = 0.0
    needs: tuple[str, ...] = ()  # environment variables without which the block is skipped
    printed: str | None = None

    def limit_s(self) -> float:
        """The longest the block may take within its own limits: each command up to
        ``timeout``, run again for up to ``retry``, and a node start's wait for its turn
        (another worker's start: its command, then its registration). These are the block's
        hang detectors; pytest-timeout's item limit is raised to this (plugin.py)."""
        commands = len(parse_console(self.source)) if self.language == "console" else 1
        return commands * (self.timeout + self.retry) + DEFAULT_TIMEOUT_S + NODE_BOOT_S


# Where a block's `needs=` variables come from, for the skip message.
HOW_TO_GET = {
    "OTHER_PYTHON": "a Python of another minor version with Ray 2.60.0",
    "PATCH_PYTHON": "a Python of the same minor version, another patch level, with Ray 2.60.0",
}


def skip_unless_set(block: ShellBlock) -> None:
    """Skip the block's item, in one line saying what to set, if a variable it needs is unset."""
    missing = [name for name in block.needs if not os.environ.get(name)]
    if missing:
        what = "; ".join(f"{name}, {HOW_TO_GET[name]}" if name in HOW_TO_GET else name
                         for name in missing)  # fmt: skip
        how = ""
        if any(name in HOW_TO_GET for name in missing):
            how = (
                "; `nox -s tests` makes them with uv: `uv python find`, or `uv python install "
                "3.12` on a machine that is online (CONTRIBUTING.md, The sessions)"
            )
        pytest.skip(f"needs {what}: unset here{how}")


@dataclass
class FileBlock:
    """A block whose text is written to ``name`` in the page's working directory."""

    name: str
    source: str


@dataclass
class Sandbox:
    """One page's terminal: working directory, HOME, RAY_TMPDIR and carried-over state."""

    root: Path
    children_before: set[int] = field(default_factory=set)

    @classmethod
    def create(cls) -> Sandbox:
        become_subreaper()
        # Short path: Ray's unix sockets live under RAY_TMPDIR and are limited to 107 bytes.
        root = Path(tempfile.mkdtemp(prefix="page-", dir="/tmp"))
        for name in ("work", "home", "ray"):
            (root / name).mkdir()
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("RAY_", "PYTEST_")) and k not in SET_BY_RAY_INIT
        }
        env.update(RAY_INIT_VARS_AT_START)
        env.update(HOME=str(root / "home"), RAY_TMPDIR=str(root / "ray"), TERM="dumb")
        (root / "env").write_text(
            "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
        )
        (root / "cwd").write_text(str(root / "work"))
        children = {p.pid for p in psutil.Process().children(recursive=True)}
        return cls(root, children)

    @property
    def work(self) -> Path:
        return self.root / "work"

    def log_tails(self, lines: int = 15) -> str:
        """The last ``lines`` lines of each ``*.log`` the page's commands wrote in its working
        directory, for a failure message: a background command (``ray start --block > node2.log
        2>&1 &``) says why it stopped only there, and the sandbox is gone after the page."""
        parts = []
        for log in sorted(self.work.glob("*.log")):
            tail = clean(log.read_text(errors="replace")).splitlines()[-lines:]
            parts.append(f"--- last lines of {log.relative_to(self.work)} ---\n" + "\n".join(tail))
        return "\n".join(parts)

    def write_file(self, name: str, text: str) -> None:
        path = self.work / name
        if self.work not in path.resolve().parents:
            raise ValueError(f"file block name {name!r} must stay inside the working directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def run(self, command: str, timeout: float, errexit: bool = False) -> tuple[int, str]:
        """Run ``command`` in bash as the next thing typed into this terminal."""
        state, cwd = shlex.quote(str(self.root / "env")), shlex.quote(str(self.root / "cwd"))
        script = (
            # The saved variables first, then `cd`: the state holds PWD too, and `cd` must win.
            f'set -a; . {state}; set +a\ncd "$(cat {cwd})"\n'
            + ("set -e\n" if errexit else "")
            + f"{command}\n__rc=$?\nset +e\nexport -p > {state}\npwd > {cwd}\nexit $__rc\n"
        )
        # Output goes to a file, not a pipe: a background job (`ray start --block &`)
        # would hold a pipe open and the command would never seem to end.
        log = self.root / "last-output"
        # Reap while waiting: `ray stop` waits for its targets to vanish, and an
        # adopted daemon that has exited stays a zombie until its parent (us) reaps it.
        # A node's start goes first (node_starts.py): a command that types `ray start`
        # takes a turn and runs raised; any other is watched for a driver that starts one.
        watch = StartWatch()
        with node_start_turn(command) as prefix:

            def waiting(process):
                if prefix:
                    set_group_nice(process.pid, NODE_START_NICE)
                else:
                    watch.check(process)
                reap_adopted(keep=process.pid)

            done = run_limited(
                [*prefix, "bash", "-c", script], timeout, log=log, env={"PATH": os.environ["PATH"]},
                waiting=waiting,
            )  # fmt: skip
        if watch.raised:  # it ended while its node started: what it left goes back in line
            back_to_default_priority()
        code = done.returncode
        if done.killed:
            reap_adopted()
            raise TimeoutError(
                f"`{command}` did not finish within {timeout:.0f} s; its output so far:\n"
                + clean(log.read_text(errors="replace"))[-3000:]
            ) from None
        reap_adopted()
        return code, log.read_text(errors="replace")

    def teardown(self) -> None:
        """Kill whatever the page's commands left running, then remove the sandbox."""
        leftovers = [
            p
            for p in psutil.Process().children(recursive=True)
            if p.pid not in self.children_before
        ]
        for process in leftovers:
            try:
                process.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(leftovers, timeout=10)
        for process in alive:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=10)
        reap_adopted()
        shutil.rmtree(self.root, ignore_errors=True)


def pressure(resource: str) -> str:
    """The share of the last 10 s in which some task waited for ``resource`` (Linux's
    pressure stall information, ``/proc/pressure/<resource>``), or ``?`` where there is none."""
    try:
        some = Path(f"/proc/pressure/{resource}").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "?"
    return dict(field.split("=") for field in some.split()[1:]).get("avg10", "?") + " %"


def how_busy() -> str:
    """One line for a failure message: how loaded the machine was when the command failed
    (a node that fails to start on a loaded machine says why only in its own logs). The
    waits for CPU, memory and I/O tell a starved start from a stalled one."""
    one, five, fifteen = os.getloadavg()
    waits = ", ".join(f"{r} {pressure(r)}" for r in ("cpu", "memory", "io"))
    return (
        f"(load average {one:.1f}, {five:.1f}, {fifteen:.1f} over 1, 5, 15 min "
        f"on {os.cpu_count()} CPUs; waited for over the last 10 s: {waits}; "
        f"{how_starts_run()})"
    )


def sandbox_of(namespace: dict) -> Sandbox:
    if "__shell_sandbox__" not in namespace:
        namespace["__shell_sandbox__"] = Sandbox.create()
    return namespace["__shell_sandbox__"]


def run_console(example) -> str | None:
    block: ShellBlock = example.parsed
    skip_unless_set(block)
    sandbox = sandbox_of(example.namespace)
    for command in parse_console(block.source):
        deadline = time.monotonic() + block.retry
        while True:
            code, output = sandbox.run(command.text, block.timeout)
            shown = matches(command.expected, output) if command.expected.strip() else True
            if (code == 0 and shown) or time.monotonic() >= deadline:
                break
            time.sleep(1)
        sys.stdout.write(f"$ {command.text}\n{clean(output)}\n")  # visible with `pytest -s`
        if code != 0:
            failure = f"`{command.text}` exited with code {code}:\n{clean(output)[-3000:]}"
        elif not shown:
            failure = (
                f"the output of `{command.text}` differs from the page\n"
                f"--- page shows ---\n{clean(command.expected)}\n"
                f"--- command printed ---\n{clean(output)}"
            )
        else:
            continue
        return "\n".join(filter(None, [failure, sandbox.log_tails(), how_busy()]))
    return None


def run_bash(example) -> str | None:
    block: ShellBlock = example.parsed
    block.printed = None
    skip_unless_set(block)
    sandbox = sandbox_of(example.namespace)
    code, output = sandbox.run(block.source, block.timeout, errexit=True)
    sys.stdout.write(clean(output) + "\n")
    if code != 0:
        failure = f"the script exited with code {code}:\n{clean(output)[-3000:]}"
        return "\n".join(filter(None, [failure, sandbox.log_tails(), how_busy()]))
    block.printed = clean(output)
    return None


def write_file(example) -> None:
    block: FileBlock = example.parsed
    sandbox_of(example.namespace).write_file(block.name, block.source)


def end_page(namespace: dict) -> None:
    sandbox = namespace.pop("__shell_sandbox__", None)
    if sandbox is not None:
        sandbox.teardown()
