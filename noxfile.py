"""The handbook's sessions. `nox -l` lists them with their first docstring line; a bare `nox`
runs tests, docs and lint; `nox -t ci` runs what CI runs after that (.ci/run).

Environments: tools/nox_env.py (`install`, and the constraints regimes it names).
"""

import os
import sys
import time
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).resolve().parent / "tools"))
from nox_env import (  # noqa: E402
    VERL_RUN_PACKAGES,
    extra,
    install,
    other_pythons,
    pytest_one_at_a_time,
)

nox.options.sessions = ["tests", "docs", "lint"]
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
# uv, where nox finds it, builds the environments in seconds; without it, virtualenv and pip.
nox.options.default_venv_backend = "uv|virtualenv"

# Every extra: a page must show what it claims whatever else a reader installed (errata
# E06 once printed an ImportError that TRL's dependencies, from `bench`, made go away).
EVERY_EXTRA = ".[test,docs,rlhf,bench,browser,verl]"
# The single-controller chapter and the tutorial notebook again, on veRL (--backend=verl).
UPSTREAM_TESTS = ("tests/upstream", "docs/verl", "tests/test_notebooks.py", "--backend=verl")
MKDOCS_ENV = {"NO_MKDOCS_2_WARNING": "1"}


# -- Everyday ------------------------------------------------------------------------------


@nox.session
def tests(session: nox.Session) -> None:
    """Every doc block of every page and every test; `-- ARGS` passes pytest arguments.

    Without arguments, tests/passes.py runs everything in one session, each xdist worker in
    private namespaces (tests/namespace.sh) so the shell pages' `ray stop` stays theirs.
    With arguments, the parallel pass, then the shell and `alone` items one at a time.
    """
    install(session, "-e", EVERY_EXTRA, fixtures=True)
    session.env.update(other_pythons(session))
    # Options alone (`nox -- --no-cache`) still run the whole suite, with them.
    if all(arg in ("--no-cache", "--update-outputs") for arg in session.posargs):
        session.run("python", "-m", "tests.passes", *session.posargs)
        return
    # --durations: the slowest items, so a run that creeps towards its budget shows why.
    # Exit code 5: the arguments name only shell pages, which the second pass runs.
    session.run("pytest", "--durations=15", *session.posargs, success_codes=[0, 5])
    pytest_one_at_a_time(session, "shell or alone", "--durations=10", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build both languages with `mkdocs build --strict` (broken links fail)."""
    install(session, *extra("docs"))
    session.run("mkdocs", "build", "--strict", env=MKDOCS_ENV)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the code and the docs' python."""
    install(session, "ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def serve(session: nox.Session) -> None:
    """Serve the site with live reload on http://127.0.0.1:8000 (English; 简体中文 under /zh/)."""
    install(session, *extra("docs"))
    session.run("mkdocs", "serve", "--dev-addr", "127.0.0.1:8000", env=MKDOCS_ENV)


@nox.session(tags=["ci"])
def resolve(session: nox.Session) -> None:
    """Every session's requirements resolve on the package index alone, without find-links.

    A reader's machine has no local wheel folder: each session's install is resolved with
    `uv pip compile` against PyPI (tools/nox_env.py, NOX_RESOLVE_ONLY), nothing installed.
    """
    install(session, "nox", "uv")
    probe = "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/', timeout=30)"
    session.run("python", "-c", probe, silent=True)  # fails, saying why, where PyPI is out of reach
    envdir = Path(session.virtualenv.location) / "resolve-envs"
    nox_cmd = ("nox", "--install-only", "--no-reuse-existing-virtualenvs", "--envdir", str(envdir))
    session.run(*nox_cmd, "-k", "not resolve", env={"NOX_RESOLVE_ONLY": "1"})


# -- Upstream: the handbook against veRL 0.9.1 and Ray 2.60.0 --------------------------------


@nox.session(tags=["ci"])
def upstream(session: nox.Session) -> None:
    """Citations of veRL 0.9.1 and Ray 2.60.0 resolve; the veRL chapter runs on veRL itself.

    Every veRL and Ray path and symbol cited on a page (both languages) or in a reference_impl
    docstring resolves in the installed packages; the single-controller chapter and the
    tutorial notebook run again with veRL's imports (--backend=verl); each block listed in
    the chapter's table of differences must differ there. veRL's declared ranges win where
    they constrain a package: "runs on veRL" means the veRL that `pip install verl==0.9.1` gives.
    """
    install(session, "-e", ".[test,verl]", pins="verl-ranges", fixtures=True)
    session.run("python", "-c", versions("verl", "ray", "transformers", "TransferQueue"))
    session.run("pytest", "--durations=5", *UPSTREAM_TESTS, *session.posargs)
    pytest_one_at_a_time(session, "alone", *UPSTREAM_TESTS, *session.posargs)


@nox.session(tags=["ci"])
def verl_run(session: nox.Session) -> None:
    """veRL 0.9.1's own `python -m verl.trainer.main_ppo` on the CPU, run and checked.

    examples/verl_on_cpu/ loads a CPU platform plugin and a CPU stand-in for vLLM into veRL
    through its own extension points. GRPO for 3 steps in the default shape for one GPU (29
    actors, validation first), then PPO with a critic for 2 steps in the small shape; each
    writes runs/verl_run/{grpo,ppo}/run.json from inside the run, which tests/verl_run/
    then checks. About 5 minutes and 10 GiB on 2 cores.
    """
    install(session, *VERL_RUN_PACKAGES, pins="verl-run")
    out = Path("runs") / "verl_run"
    env = {"OMP_NUM_THREADS": "1", "VERL_RUN_DIR": str(out.resolve())}
    run = ("python", "-m", "examples.verl_on_cpu.run")
    # Exit code 1 is a failed run: the tests then say what differs from the expected run.
    grpo = ("--algo", "grpo", "--steps", "3", "--out", str(out / "grpo"))
    session.run(*run, *grpo, env=env, success_codes=[0, 1])
    ppo = ("--algo", "ppo", "--steps", "2", "--shape", "small", "--no-validate")
    session.run(*run, *ppo, "--out", str(out / "ppo"), env=env, success_codes=[0, 1])
    # --noconftest: the suite's conftest.py needs the doc-block plugin, not installed here.
    tests = ("--noconftest", "-o", "addopts=-ra", "tests/verl_run")
    session.run("pytest", *tests, *session.posargs, env=env)


@nox.session(tags=["ci", "report"])
def upstream_drift(session: nox.Session) -> None:
    """Report only: the upstream checks against the newest veRL and TransferQueue on the index.

    Prints which citations and blocks no longer hold (pytest's summary of failures), so the
    next release's drift shows the day it lands. Succeeds whatever the tests find; .ci/run
    gives it 10 minutes and does not wait on its result (tag `report`).
    """
    install(session, "-e", ".[test,verl]", pins="unpinned-fixtures", fixtures=True)
    session.run("python", "-c", versions("verl", "TransferQueue") + "; print('pinned: verl "
                "0.9.1, TransferQueue 0.1.11')")  # fmt: skip
    report = ("-q", "-rf", "--no-header")
    session.run("pytest", *report, *UPSTREAM_TESTS, success_codes=[0, 1])
    pytest_one_at_a_time(session, "alone", *report, *UPSTREAM_TESTS, success_codes=[0, 1, 5])


def versions(*names: str) -> str:
    """Python that prints the installed versions of ``names`` on one line."""
    return (
        "from importlib.metadata import version; "
        f"print('installed:', *(f'{{n}} {{version(n)}}' for n in {names!r}))"
    )


# -- GPU --------------------------------------------------------------------------------------


@nox.session
def gpu(session: nox.Session) -> None:
    """What needs CUDA, as run.sh runs it: smoke, rollout speed, learning and MFU, GPU doc blocks.

    tools/gpu_kit/checks.py, the one GPU runner, within GPU_LIMIT_S (default 540 s); results
    in runs/gpu/. `-- --only docs` picks checks. Without CUDA: the smoke check on the CPU,
    the rest reported as skipped.
    """
    install(session, "-e", ".[test,rlhf,verl]", fixtures=True)
    deadline = time.time() + float(os.environ.get("GPU_LIMIT_S", 540))
    checks = ("python", "tools/gpu_kit/checks.py", "runs/gpu", "--deadline", f"{deadline:.0f}")
    session.run(*checks, *session.posargs)


@nox.session
def gpu_kit(session: nox.Session) -> None:
    """Build the offline GPU kit in .gpu-kit/: the wheels a GPU node without an index needs.

    Ray 2.60.0 without its Java jars, the wheels the GPU checks need that a stock CUDA
    PyTorch image lacks, and the project; for Python 3.12 and torch 2.11 by default
    (`-- --python-version 3.11 --torch 2.13`). On the node: `bash tools/gpu_kit/run.sh DIR`.
    """
    install(session, "pip", "wheel", "packaging")
    session.run("python", "tools/gpu_kit/build.py", *session.posargs)


@nox.session(tags=["ci"])
def gpu_kit_test(session: nox.Session) -> None:
    """The kit installs offline on a stock CUDA PyTorch image's packages and runs on the CPU.

    tests/test_gpu_kit.py (marker `kit`): built for this Python, installed with --no-index
    into a virtualenv of the image's packages, run in a network namespace with only loopback.
    """
    install(session, "-e", ".[test]", "pip", "wheel", "packaging")
    session.run("pytest", "-m", "kit", "-n", "0", "--durations=5", "tests/test_gpu_kit.py")


# -- Evidence: what the pages claim, measured ----------------------------------------------

# The pages whose printed verdicts come from timings: a ratio, which stage was busiest, what
# overlapped. Each must print the same on a machine doing other work.
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


@nox.session(tags=["ci"])
def busy(session: nox.Session) -> None:
    """The pages whose printed verdicts come from timings, with two CPU burners beside them.

    A reader runs `nox` while doing other things; a page that prints "faster: True" only on
    a quiet machine is a bug. tests/passes.py runs the pages as `nox -s tests` does, beside
    two processes that each keep a CPU busy (and stop by themselves).
    """
    install(session, "-e", EVERY_EXTRA, fixtures=True)
    session.run("python", "-m", "tests.passes", "--burners", "2", *TIMED_PAGES)


@nox.session(tags=["ci"])
def downloads(session: nox.Session) -> None:
    """A page's download runs in a fresh virtualenv after exactly the install line it gives.

    tests/test_downloads_install.py, marker `downloads`.
    """
    install(session, "-e", ".[test]")
    session.run("pytest", "-m", "downloads", "-n", "0", "tests/test_downloads_install.py")


@nox.session(tags=["ci"])
def rlhf(session: nox.Session) -> None:
    """Train GRPO and PPO on CPU to the target score, resume a killed run, compare with TRL.

    Each learning run must reach critic/score/mean >= 0.9 within 5 minutes, Ray start-up
    included; the runs go one after the other so each has the whole machine. Curves and
    metrics stay in runs/. Also a short separate-pools run and a kill-and-resume run.
    """
    install(session, "-e", ".[test,rlhf,bench]")
    rl_tests = ("tests/test_rlhf.py", "tests/test_rlhf_benchmark.py")
    session.run("pytest", "-m", "rlhf", "-n", "0", "-s", *rl_tests, *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks, each printing ratios measured in one run (benchmarks/; about 30 minutes).

    single_controller.py: RayWorkerGroup against raw Ray; ray_core.py: Ray Core against
    baselines, then `ray microbenchmark`; rlhf_vs_trl.py: our GRPO against TRL's
    GRPOTrainer; rlhf_generation.py: our rollout against transformers' generate;
    data_plane.py: a batch through the controller against keys through TransferQueue;
    dataproto_serialization.py and dataproto_transfer.py: veRL 0.9.1's DataProto paths
    against reference_impl's and raw Ray.
    """
    install(session, "-e", ".[rlhf,bench,verl]", fixtures=True)
    session.run("python", "benchmarks/single_controller.py", *session.posargs)
    session.run("python", "benchmarks/ray_core.py", "--microbenchmark")
    for name in ("rlhf_vs_trl", "rlhf_generation", "data_plane", "dataproto_serialization",
                 "dataproto_transfer"):  # fmt: skip
        session.run("python", f"benchmarks/{name}.py")


@nox.session
def records(session: nox.Session) -> None:
    """Make a record of benchmarks/results/ again, and the charts drawn from it.

    `nox -s records` lists the five records, what makes each and what it needs (veRL's own
    run, a GPU); `-- NAME` runs it and copies its files in; `-- NAME --redraw` only redraws
    its charts from the committed files (benchmarks/records.py). tests/test_records.py then
    holds the pages' figures to the record.
    """
    install(session, "-e", ".[rlhf,bench,verl]", fixtures=True)
    session.run("python", "benchmarks/records.py", *session.posargs)


@nox.session
def mutants(session: nox.Session) -> None:
    """Mutation testing (cosmic-ray): the single controller, DataProto and the harness.

    Each module with the fast tests that cover it; prints the score and the survivors.

    tools/mutants.py: a sample of each module's mutants within a time limit (`-- --help`).
    Not in CI: a mutant costs one run of its tests.
    """
    install(session, "-e", ".[test]", "cosmic-ray")
    session.run("python", "tools/mutants.py", *session.posargs)


@nox.session(tags=["ci"])
def browser(session: nox.Session) -> None:
    """The built site in headless Chromium: every page in both languages, search, links.

    Served under a sub-path (tests/browser/, marker `browser`); the OS's Chromium
    (/usr/bin/chromium, or $CHROMIUM), Playwright downloads none. Screenshots land in
    browser-artifacts/. Like `docs`, it needs neither Ray nor torch.
    """
    tools = [*extra("docs"), *extra("browser"), *extra("test")]
    install(session, *tools, env={"PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"})
    pytest = ("pytest", "-m", "browser", "-n", "0", "--durations=5", "tests/browser")
    session.run(*pytest, *session.posargs)
