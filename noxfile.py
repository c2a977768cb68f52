"""Sessions for the handbook. A bare `nox` runs tests, docs and lint (what CI runs).

    nox -s serve     build and serve the bilingual site on http://127.0.0.1:8000
    nox              the whole verification suite: tests, docs, lint
    nox -s tests -- -k tasks    pass pytest arguments after `--`
    nox -s rlhf      train PPO and GRPO on CPU to the target score; benchmark against TRL
    nox -s bench     benchmarks: ratios against raw Ray, measured in one run
    nox -s browser   the built site in headless Chromium (every page, both languages), links
    nox -s upstream  citations of veRL 0.9.1 and Ray 2.60.0 resolve; the veRL chapter on veRL itself
    nox -s upstream_drift   the same against the newest veRL on the package index (report only)
    nox -s verl_run  veRL 0.9.1's own trainer on the CPU (GRPO, PPO), its actors and calls checked
    nox -s gpu       what needs CUDA: GPU doc blocks, a gpu-preset learning run, MFU, rollout speed
    nox -s gpu_kit   build .gpu-kit/, the wheels a GPU node without a package index needs
    nox -s gpu_kit_test   the kit installs offline on a stock CUDA PyTorch image's packages

Every session installs with the one constraints file, so versions are pinned; verl_run alone
uses constraints-verl-run.txt, veRL's own declared ranges resolved and pinned.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nox

# The page model (tools/page_blocks.py), found by name as pytest and MkDocs find it.
sys.path.insert(0, str(Path(__file__).resolve().parent / "tools"))
import page_blocks  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: nox itself depends on tomli there
    import tomli as tomllib

nox.options.sessions = ["tests", "docs", "lint"]
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
# uv, where installed (.ci/run installs it), builds the environments in seconds rather than
# the minute or two pip takes; without it, nox uses virtualenv and pip.
nox.options.default_venv_backend = "uv|virtualenv"


def hand_pip_settings_to_uv() -> None:
    """uv does not read pip's configuration: pass on the find-links and extra indexes pip uses,
    and ask for the bytecode pip would compile.

    Only where uv is installed and the setting is not already given to uv. pip takes the best
    version across all its indexes; ``UV_INDEX_STRATEGY=unsafe-best-match`` asks uv for the
    same (its default stops at the first index that has the package).
    """
    if shutil.which("uv") is None:
        return
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    settings = {}
    for line in listed.splitlines():  # e.g. global.find-links='/opt/wheels'
        key, _, value = line.partition("=")
        settings[key.rsplit(".", 1)[-1]] = value.strip("'\"")
    for pip_key, uv_key in (
        ("find-links", "UV_FIND_LINKS"),
        ("extra-index-url", "UV_EXTRA_INDEX_URL"),
    ):
        if settings.get(pip_key):
            os.environ.setdefault(uv_key, settings[pip_key])
    os.environ.setdefault("UV_INDEX_STRATEGY", "unsafe-best-match")
    # pip compiles every installed module to bytecode; uv does not unless asked. Without the
    # .pyc files, and with PYTHONDONTWRITEBYTECODE=1 (set on our 2-core machines), every
    # process compiles what it imports from source, every time: there, `import torch` took
    # 2.9 s instead of 1.4 s, and one `ray.init()` with its daemons 15 CPU-seconds instead of 7.
    os.environ.setdefault("UV_COMPILE_BYTECODE", "1")


hand_pip_settings_to_uv()

CONSTRAINTS = ("-c", "constraints.txt")
# veRL 0.9.1 and TransferQueue, the upstreams the handbook explains, installed as test fixtures
# without their GPU stack (their dependencies are the `verl` extra; versions in constraints.txt).
UPSTREAM_FIXTURES = ("--no-deps", "verl", "TransferQueue")
# The site build needs only the MkDocs toolchain, not Ray and torch: install that list alone.
EXTRAS = tomllib.loads(Path("pyproject.toml").read_text())["project"]["optional-dependencies"]
DOCS_TOOLS = EXTRAS["docs"]


# Two more interpreters with Ray 2.60.0, for the version-mismatch entry of
# docs/troubleshooting/connect.md: a driver or node whose Python differs from the cluster's.
# OTHER_PYTHON has another minor version, PATCH_PYTHON the same minor version and another patch
# level. They are made here, at install time; the page reads the two variables and fails with
# a message when they are missing (a test run never downloads). A machine without such a
# Python gets a warning here, and that one page fails; the rest of the suite runs.
OTHER_PYTHONS = Path(".nox") / "other-pythons"


def python_candidates() -> list[Path]:
    """Interpreters installed on this machine: pyenv's versions, then the system's."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(pyenv.glob("3.*/bin/python3"))
    found += sorted(Path("/usr/bin").glob("python3.[0-9]*"))
    return [p for p in found if re.fullmatch(r"python3(\.\d+)?", p.name)]


def version_of(python: Path) -> tuple[int, ...] | None:
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", "import sys; print(*sys.version_info[:3])"],
        capture_output=True,
        text=True,
    )
    return tuple(int(v) for v in done.stdout.split()) if done.returncode == 0 else None


def other_pythons(session: nox.Session) -> dict[str, str]:
    """Make OTHER_PYTHON and PATCH_PYTHON (see above); returns the variables to export."""
    ours = tuple(
        int(v)
        for v in session.run(
            "python", "-c", "import sys; print(*sys.version_info[:3])", silent=True
        ).split()
    )
    wanted = {
        # Ray 2.60.0 has wheels for Python 3.10 to 3.13.
        "OTHER_PYTHON": lambda v: v[:2] != ours[:2] and (3, 10) <= v[:2] <= (3, 13),
        "PATCH_PYTHON": lambda v: v[:2] == ours[:2] and v != ours,
    }
    if shutil.which("uv") is None:
        session.warn("OTHER_PYTHON, PATCH_PYTHON: not made, uv is missing (pip install uv)")
        return {}
    versions = {p: version_of(p) for p in python_candidates()}
    # The nearest minor version first, the newer of two equally near: 3.12 for a 3.11 session.
    nearest = sorted(
        (p for p, v in versions.items() if v),
        key=lambda p: (abs(versions[p][1] - ours[1]), -versions[p][1]),
    )
    exported = {}
    for name, fits in wanted.items():
        base = next((p for p in nearest if fits(versions[p])), None)
        if base is None:
            found = sorted(filter(None, versions.values()))
            session.warn(
                f"{name}: not made, no Python here fits (this session runs {ours}; found "
                f"{found}); docs/troubleshooting/connect.md#version-mismatch will fail"
            )
            continue
        venv = OTHER_PYTHONS / name.lower()
        python = venv / "bin" / "python"
        if version_of(python) != versions[base]:
            session.run(
                "uv", "venv", "-q", "--clear", "--python", str(base), str(venv), external=True
            )
        session.run(
            "uv",
            "pip",
            "install",
            "-q",
            "--python",
            str(python),
            *CONSTRAINTS,
            "ray[default]==2.60.0",
            external=True,
        )
        exported[name] = str(python.absolute())  # not resolve(): a venv's python is a symlink
    return exported


@nox.session
def tests(session: nox.Session) -> None:
    """Run every doc block (docs/) and every test (tests/): the parallel pass and the shell pages.

    Pages with shell blocks start real clusters with `ray start` and end with `ray stop`,
    which stops every Ray process it can see, so tests/passes.py starts each xdist worker
    in private PID, network and mount namespaces (tests/namespace.sh) and runs everything
    in one session; where the machine cannot make namespaces, the shell pages run one at a
    time after the parallel pass. With pytest arguments (`nox -s tests -- -k tasks`), the
    two passes run one after the other with those arguments, the shell pages one at a time.
    """
    # Every extra: a page must show what it claims whatever else a reader installed (errata
    # E06 once printed an ImportError that TRL's dependencies, from `bench`, made go away).
    session.install(*CONSTRAINTS, "-e", ".[test,docs,rlhf,bench,browser,verl]")
    session.install(*CONSTRAINTS, *UPSTREAM_FIXTURES)
    session.env.update(other_pythons(session))
    # Options alone (`nox -- --no-cache`) still run the whole suite, with them.
    if all(arg in ("--no-cache", "--update-outputs") for arg in session.posargs):
        session.run("python", "-m", "tests.passes", *session.posargs)
        return
    # --durations: the slowest items, so a run that creeps towards its budget shows why.
    session.run("pytest", "--durations=15", *session.posargs)
    # Exit code 5 (nothing selected) is fine when the arguments name no shell page.
    session.run(
        "pytest",
        "-m",
        "shell or alone",
        "-n",
        "0",
        "--durations=10",
        *session.posargs,
        success_codes=[0, 5],
    )


# The pages whose printed verdicts come from timings: a ratio, which stage was busiest, what
# overlapped. Each must print the same on a machine doing other work (nox -s busy).
TIMED_PAGES = (
    "docs/cluster/bottleneck.md",
    "docs/inside-ray/heterogeneous.md",
    "docs/inside-ray/index.md",
    "docs/inside-ray/measurements.md",
    "docs/inside-ray/tasks-vs-actors.md",
    "docs/ray-core/futures.md",
    "docs/ray-core/objects.md",
    "docs/ray-core/tasks-vs-actors.md",
    "docs/ray-core/tasks.md",
    "docs/verl/dataproto.md",
    "docs/verl/transferqueue.md",
)


@nox.session
def busy(session: nox.Session) -> None:
    """The pages whose printed verdicts come from timings, with two CPU burners beside them.

    A reader runs `nox` while doing other things; a page that prints "faster: True" only on
    a quiet machine is a bug. tests/passes.py runs the pages as `nox -s tests` does, with
    two processes that each keep a CPU busy (and stop by themselves). CI runs it.
    """
    session.install(*CONSTRAINTS, "-e", ".[test,docs,rlhf,bench,browser,verl]")
    session.install(*CONSTRAINTS, *UPSTREAM_FIXTURES)
    session.run("python", "-m", "tests.passes", "--burners", "2", *TIMED_PAGES)


@nox.session
def rlhf(session: nox.Session) -> None:
    """The RLHF pipeline on Ray: train GRPO and PPO to the target, resume, compare with TRL.

    Each learning run must reach critic/score/mean >= 0.9 within 5 minutes, Ray start-up
    included; the runs go one after the other so each has the whole machine. Curves
    and metrics stay in runs/. Also a short separate-pools run and a kill-and-resume run.
    """
    session.install(*CONSTRAINTS, "-e", ".[test,rlhf,bench]")
    session.run(
        "pytest",
        "-m",
        "rlhf",
        "-n",
        "0",
        "-s",
        "tests/test_rlhf.py",
        "tests/test_rlhf_benchmark.py",
        *session.posargs,
    )


@nox.session
def docs(session: nox.Session) -> None:
    """Build both languages with `mkdocs build --strict` (broken links fail)."""
    session.install(*CONSTRAINTS, *DOCS_TOOLS)
    session.run("mkdocs", "build", "--strict", env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session
def browser(session: nox.Session) -> None:
    """The site as readers see it: every page of both languages in headless Chromium, search,
    and a link check, on a build served under a sub-path (tests/browser/, marker `browser`).

    Uses the OS's Chromium (/usr/bin/chromium, or $CHROMIUM); Playwright downloads no browser.
    Screenshots land in browser-artifacts/. Like `docs`, it needs neither Ray nor torch.
    """
    tools = [*DOCS_TOOLS, *EXTRAS["browser"], *EXTRAS["test"]]
    session.install(*CONSTRAINTS, *tools, env={"PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"})
    pytest = ["pytest", "-m", "browser", "-n", "0", "--durations=5", "tests/browser"]
    session.run(*pytest, *session.posargs)


# What `nox -s upstream` runs: the citation check, the pins of the listed differences, and
# the single-controller chapter plus the tutorial notebook with --backend=verl.
UPSTREAM_TESTS = ("tests/upstream", "docs/verl", "tests/test_notebooks.py", "--backend=verl")


def verl_ranges_first(session: nox.Session) -> str:
    """A constraints file: constraints-verl-run.txt's pins (what the resolver picks within
    veRL 0.9.1's declared ranges), then constraints.txt's for every other package."""

    def name(line: str) -> str:  # normalised as PEP 503 does: pydantic_core is pydantic-core
        return re.sub(r"[-_.]+", "-", re.split(r"[=<>\[ ;]", line, maxsplit=1)[0]).lower()

    verl_pins = Path("constraints-verl-run.txt").read_text().splitlines()
    verl_names = {name(line) for line in verl_pins}
    ours = [
        line
        for line in Path("constraints.txt").read_text().splitlines()
        if name(line) not in verl_names
    ]
    path = Path(session.virtualenv.location) / "constraints-verl-ranges.txt"
    path.write_text("\n".join(verl_pins + ours) + "\n")
    return str(path)


UPSTREAM_VERSIONS = (
    "from importlib.metadata import version; "
    "print('upstream checks on', *(f'{n} {version(n)}' for n in "
    "('verl', 'ray', 'transformers', 'tensordict', 'TransferQueue')))"
)


@nox.session
def upstream(session: nox.Session) -> None:
    """The handbook against its upstreams, veRL 0.9.1 and Ray 2.60.0 (tests/upstream/).

    Every veRL and Ray path and symbol cited on a page (both languages) or in a
    reference_impl docstring resolves in the installed packages; the python blocks of the
    single-controller chapter and the tutorial notebook run a second time with
    reference_impl's imports replaced by veRL's (--backend=verl); each block listed in the
    chapter's table of differences must differ there, and its pin test holds against veRL.
    """
    # veRL's declared ranges win where they constrain a package (tensordict, transformers, ...):
    # "runs on veRL itself" means the veRL that `pip install verl==0.9.1` gives.
    constraints = ("-c", verl_ranges_first(session))
    session.install(*constraints, "-e", ".[test,verl]")
    session.install(*constraints, *UPSTREAM_FIXTURES)
    session.run("python", "-c", UPSTREAM_VERSIONS)
    session.run("pytest", "--durations=5", *UPSTREAM_TESTS, *session.posargs)
    # What needs the machine to itself (marker `alone`), one item at a time.
    alone = ("-m", "alone", "-n", "0")
    session.run("pytest", *alone, *UPSTREAM_TESTS, *session.posargs, success_codes=[0, 5])


@nox.session
def upstream_drift(session: nox.Session) -> None:
    """Report only: the upstream checks against the newest veRL and TransferQueue on the index.

    Installs both without their pins and prints which citations and blocks no longer hold
    (pytest's summary of failures), so the next release's drift shows the day it lands.
    The session succeeds whatever the tests find; .ci/run does not wait on it either.
    """
    # Not session.create_tmp(): it points TMPDIR into .nox/, and Ray puts its unix sockets
    # under TMPDIR, where the longer path left ray.init() hanging in both xdist workers.
    unpinned = str(Path(session.virtualenv.location) / "constraints-unpinned.txt")
    lines = Path("constraints.txt").read_text().splitlines()
    fixtures = ("verl==", "transferqueue==")
    kept = [line for line in lines if not line.lower().startswith(fixtures)]
    Path(unpinned).write_text("\n".join(kept) + "\n")
    session.install("-c", unpinned, "-e", ".[test,verl]")
    session.install("-c", unpinned, "--upgrade", *UPSTREAM_FIXTURES)
    session.run("python", "-c", DRIFT_VERSIONS)
    report = ("-q", "-rf", "--no-header")
    session.run("pytest", *report, *UPSTREAM_TESTS, success_codes=[0, 1])
    alone = ("-m", "alone", "-n", "0")
    session.run("pytest", *report, *alone, *UPSTREAM_TESTS, success_codes=[0, 1, 5])


DRIFT_VERSIONS = (
    "from importlib.metadata import version; "
    "print('drift report against verl', version('verl'), "
    "'| TransferQueue', version('TransferQueue'), '| pinned: verl 0.9.1, TransferQueue 0.1.11')"
)


@nox.session
def serve(session: nox.Session) -> None:
    """Serve the site with live reload on http://127.0.0.1:8000 (English; 简体中文 under /zh/)."""
    session.install(*CONSTRAINTS, *DOCS_TOOLS)
    session.run("mkdocs", "serve", "--dev-addr", "127.0.0.1:8000", env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks, each printing ratios measured in one run (benchmarks/).

    single_controller.py: RayWorkerGroup against raw Ray; ray_core.py: tasks, actor
    calls, put/get and inter-node transfer against baselines, then `ray microbenchmark`;
    rlhf_vs_trl.py: our GRPO against TRL's GRPOTrainer at equal wall time;
    rlhf_generation.py: our rollout against transformers' generate (the gpu preset on a
    CUDA machine); data_plane.py: a batch as payload through the controller against keys
    through real TransferQueue actors, one and two nodes; dataproto_serialization.py:
    veRL 0.9.1's DataProto serialisation paths against reference_impl's;
    dataproto_transfer.py: a DataProto through veRL's and reference_impl's worker groups
    against raw Ray.
    """
    session.install(*CONSTRAINTS, "-e", ".[rlhf,bench,verl]")
    session.install(*CONSTRAINTS, *UPSTREAM_FIXTURES)
    session.run("python", "benchmarks/single_controller.py", *session.posargs)
    # Ray Core on this machine, and Ray's own `ray microbenchmark` (about twenty minutes).
    session.run("python", "benchmarks/ray_core.py", "--microbenchmark")
    session.run("python", "benchmarks/rlhf_vs_trl.py")
    session.run("python", "benchmarks/rlhf_generation.py")
    # Payload through the controller vs keys through TransferQueue, 1 and 2 nodes (about 5 min).
    session.run("python", "benchmarks/data_plane.py")
    # veRL 0.9.1's DataProto serialisation paths against reference_impl (about 1 min).
    session.run("python", "benchmarks/dataproto_serialization.py")
    # A DataProto through a 2-rank worker group: veRL's, reference_impl's, raw Ray (about 1 min).
    session.run("python", "benchmarks/dataproto_transfer.py")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the code and the docs' python."""
    session.install(*CONSTRAINTS, "ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def gpu(session: nox.Session) -> None:
    """Everything that needs CUDA, each result printed as one line; skipped without CUDA.

    1. the pages with GPU-only python blocks (marker ``<!-- block: gpu -->``), whole, since
       their blocks share a namespace (the harness skips a gpu block only without CUDA);
    2. benchmarks/rlhf_gpu.py: GRPO on the gpu preset (Qwen2.5-0.5B's shape) must reach
       critic/score/mean >= 0.9 within 600 s, start-up included; that run's perf/mfu/actor
       against the GPU's dense bf16 peak; our rollout's tokens/s against transformers'
       generate on the same model (benchmarks/rlhf_generation.py).

    Where torch.cuda.is_available() is False the session says so and skips (exit 0).
    """
    session.install(*CONSTRAINTS, "-e", ".[test,rlhf,verl]")
    session.install(*CONSTRAINTS, *UPSTREAM_FIXTURES)
    probe = "import torch; print(torch.cuda.is_available())"
    if session.run("python", "-c", probe, silent=True).strip() != "True":
        session.skip("no CUDA: torch.cuda.is_available() is False on this machine")
    english = (p for p in sorted(Path("docs").rglob("*.md")) if page_blocks.language(p) == "en")
    pages = [str(p) for p in english if any(b.kind == "gpu" for b in page_blocks.blocks(p))]
    # -rs lists any skipped item with its reason.
    session.run("pytest", *pages, "-n", "0", "-rs", *session.posargs)
    session.run("python", "benchmarks/rlhf_gpu.py")


@nox.session
def gpu_kit(session: nox.Session) -> None:
    """Build the offline GPU kit in .gpu-kit/ (tools/gpu_kit/build.py; CONTRIBUTING.md "On a GPU").

    For a GPU node with a CUDA PyTorch and no package index: Ray 2.60.0 without its Java
    jars, the other wheels the GPU checks need that a stock CUDA PyTorch image lacks, and
    the project, for Python 3.12 and torch 2.11 by default (``nox -s gpu_kit --
    --python-version 3.11 --torch 2.13``). Prints each wheel's size and the total with the
    tracked tree. On the node: ``bash tools/gpu_kit/run.sh RESULTS_DIR``.
    """
    session.install(*CONSTRAINTS, "pip", "wheel", "packaging")
    session.run("python", "tools/gpu_kit/build.py", *session.posargs)


@nox.session
def downloads(session: nox.Session) -> None:
    """A page's download runs in a fresh virtualenv after exactly the install line it gives
    (tests/test_downloads_install.py, marker ``downloads``). CI runs it."""
    session.install(*CONSTRAINTS, "-e", ".[test]")
    session.run("pytest", "-m", "downloads", "-n", "0", "tests/test_downloads_install.py")


@nox.session
def gpu_kit_test(session: nox.Session) -> None:
    """The kit is complete (tests/test_gpu_kit.py, marker ``kit``): built for this Python,
    installed with --no-index into a virtualenv of a stock CUDA PyTorch image's packages, it
    runs check (a) on the CPU in a network namespace with nothing beyond loopback. CI runs it."""
    session.install(*CONSTRAINTS, "-e", ".[test]", "pip", "wheel", "packaging")
    session.run("pytest", "-m", "kit", "-n", "0", "--durations=5", "tests/test_gpu_kit.py")


# veRL 0.9.1's real trainer on this CPU (examples/verl_on_cpu/), in an environment of its own:
# veRL declares transformers < 5.11 and tensordict <= 0.10, so constraints.txt cannot serve.
VERL_RUN_CONSTRAINTS = ("-c", "constraints-verl-run.txt")
VERL_RUN_PACKAGES = (
    "torch",
    "verl",
    "ray[default]",
    "TransferQueue",
    "pyzmq",
    "msgspec",
    "fastapi",
    "uvicorn",
    "cachetools",
    "psutil",
    "pytest",
    "pytest-timeout",
)
VERL_RUN_OUT = Path("runs") / "verl_run"


@nox.session
def verl_run(session: nox.Session) -> None:
    """veRL 0.9.1's own `python -m verl.trainer.main_ppo` on the CPU, run and checked.

    examples/verl_on_cpu/ loads a CPU platform plugin and a CPU stand-in for vLLM into veRL
    through its own extension points. Two runs, one after the other: GRPO for 3 steps in the
    default shape for one GPU (veRL's 8 agent-loop workers, 8 reward-loop workers and 8
    TransferQueue storage units: 29 actors; validation first), then PPO with a critic for 2
    steps in the small shape. Each writes runs/verl_run/{grpo,ppo}/run.json: an actor and
    resource snapshot taken inside the run mid-training, the step lines, the calls per actor
    method from Ray's timeline. Then tests/verl_run/ checks those files; they are collected only
    here (tests/verl_run/conftest.py). About 5 minutes and 10 GiB on 2 cores.
    """
    session.install(*VERL_RUN_CONSTRAINTS, *VERL_RUN_PACKAGES)
    env = {"OMP_NUM_THREADS": "1", "VERL_RUN_DIR": str(VERL_RUN_OUT.resolve())}
    run = ("python", "-m", "examples.verl_on_cpu.run")
    # Exit code 1 is a failed run: the tests then say what differs from the expected run.
    grpo = ("--algo", "grpo", "--steps", "3", "--out", str(VERL_RUN_OUT / "grpo"))
    session.run(*run, *grpo, env=env, success_codes=[0, 1])
    ppo = ("--algo", "ppo", "--steps", "2", "--shape", "small", "--no-validate")
    session.run(*run, *ppo, "--out", str(VERL_RUN_OUT / "ppo"), env=env, success_codes=[0, 1])
    # --noconftest: the suite's conftest.py needs the doc-block plugin, not installed here.
    tests = ("--noconftest", "-o", "addopts=-ra", "tests/verl_run")
    session.run("pytest", *tests, *session.posargs, env=env)


@nox.session
def records(session: nox.Session) -> None:
    """Make a record of benchmarks/results/ again, and the charts drawn from it.

    `nox -s records` lists the five records, what makes each and what it needs (veRL's own
    run, a GPU); `-- NAME` runs it and copies its files in; `-- NAME --redraw` only redraws
    its charts from the committed files (benchmarks/records.py). tests/test_records.py then
    holds the pages' figures to the record.
    """
    session.install(*CONSTRAINTS, "-e", ".[rlhf,bench,verl]")
    session.install(*CONSTRAINTS, *UPSTREAM_FIXTURES)
    session.run("python", "benchmarks/records.py", *session.posargs)


@nox.session
def mutants(session: nox.Session) -> None:
    """Mutation testing (cosmic-ray) of the single controller, DataProto and the doc-block
    harness, each with the fast tests that cover it: the score and the surviving mutants.

    tools/mutants.py: a sample of each module's mutants within a time limit (`-- --help`).
    Not in CI: a mutant costs one run of its tests.
    """
    session.install(*CONSTRAINTS, "-e", ".[test]", "cosmic-ray")
    session.run("python", "tools/mutants.py", *session.posargs)
