"""How noxfile.py's sessions get their environments: one ``install`` and the pins it names.

    install(session, "-e", ".[test]")                    # pinned by constraints.txt
    install(session, "-e", ".[test,verl]", fixtures=True) # + veRL and TransferQueue, no deps
    install(session, *VERL_RUN_PACKAGES, pins="verl-run")

Each constraints regime is named once, in ``PINS``:

* ``pinned``: constraints.txt, the one set of versions the handbook is tested with;
* ``verl-ranges``: constraints-verl-run.txt's pins (veRL 0.9.1's own declared ranges,
  resolved) first, constraints.txt's for every other package: what ``pip install
  verl==0.9.1`` gives, for the checks against veRL itself;
* ``unpinned-fixtures``: constraints.txt without veRL's and TransferQueue's pins, for the
  drift report against their newest releases;
* ``verl-run``: constraints-verl-run.txt alone, for veRL's own trainer.

Nothing here runs at import. The uv settings are given to each session's environment on its
first install, and only where nox builds it with uv: uv does not read pip's configuration,
so pip's find-links and extra indexes are passed on, whichever uv nox found (on PATH, or the
one a pipx-installed nox carries, ``nox.virtualenv.find_uv``).

With ``NOX_RESOLVE_ONLY=1`` in the environment, ``install`` installs nothing: it resolves
its requirements against the package index alone, with ``uv pip compile`` and no
find-links, so that a reader's machine without this one's wheel folder gets the same
versions (``nox -s resolve``, which CI runs).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PINS = ("pinned", "verl-ranges", "unpinned-fixtures", "verl-run")
# veRL 0.9.1 and TransferQueue, the upstreams the handbook explains, installed as test
# fixtures without their GPU stack (their dependencies are the `verl` extra).
UPSTREAM_FIXTURES = ("verl", "TransferQueue")
# What veRL's own trainer needs on the CPU (examples/verl_on_cpu/), pinned by "verl-run".
VERL_RUN_PACKAGES = (
    "torch", "verl", "ray[default]", "TransferQueue", "pyzmq", "msgspec", "fastapi",
    "uvicorn", "cachetools", "psutil", "pytest", "pytest-timeout",
)  # fmt: skip


def extra(name: str) -> list[str]:
    """The requirements of one of pyproject.toml's extras (the site build needs only ``docs``)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: nox itself depends on tomli there
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["optional-dependencies"][name]


def uv_binary() -> str | None:
    """The uv nox uses: $UV, uv on PATH, or the one installed beside nox (pipx's nox[uv])."""
    from nox.virtualenv import find_uv

    found, uv, _ = find_uv()
    return uv if found else None


@functools.cache
def pip_settings() -> dict[str, str]:
    """pip's find-links and extra indexes as uv's variables (``pip config list``; cached).

    Asked of the first interpreter that has pip: nox's own (which a pipx-installed nox, or one
    in a uv-made environment, may lack), then ``python3`` and ``python`` on PATH.
    """
    listed = ""
    for python in dict.fromkeys([sys.executable, shutil.which("python3"), shutil.which("python")]):
        if python is None:
            continue
        done = subprocess.run(
            [python, "-m", "pip", "config", "list"], capture_output=True, text=True
        )
        if done.returncode == 0:
            listed = done.stdout
            break
    settings = {}
    for line in listed.splitlines():  # e.g. global.find-links='/opt/wheels'
        key, _, value = line.partition("=")
        settings[key.rsplit(".", 1)[-1]] = value.strip("'\"")
    pairs = (("find-links", "UV_FIND_LINKS"), ("extra-index-url", "UV_EXTRA_INDEX_URL"))
    return {uv_key: settings[key] for key, uv_key in pairs if settings.get(key)}


def uv_settings(session) -> None:
    """Give the session's uv what pip would have used, unless the user set it for uv already."""
    if session.venv_backend != "uv":
        return
    wanted = dict(pip_settings())
    # pip takes the best version across all its indexes; uv, asked, does the same (its
    # default stops at the first index that has the package).
    wanted["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    # pip compiles every installed module to bytecode; uv does not unless asked. Without the
    # .pyc files, and with PYTHONDONTWRITEBYTECODE=1 (set on our 2-core machines), every
    # process compiles what it imports from source, every time: there, `import torch` took
    # 2.9 s instead of 1.4 s, and one `ray.init()` with its daemons 15 CPU-seconds instead of 7.
    wanted["UV_COMPILE_BYTECODE"] = "1"
    for key, value in wanted.items():
        if key not in os.environ:
            session.env.setdefault(key, value)


def constraints(session, pins: str) -> Path:
    """The constraints file of regime ``pins`` (see the module docstring)."""
    if pins == "pinned":
        return ROOT / "constraints.txt"
    if pins == "verl-run":
        return ROOT / "constraints-verl-run.txt"
    ours = (ROOT / "constraints.txt").read_text().splitlines()
    if pins == "verl-ranges":
        verl_pins = (ROOT / "constraints-verl-run.txt").read_text().splitlines()
        taken = {package(line) for line in verl_pins}
        lines = verl_pins + [line for line in ours if package(line) not in taken]
    elif pins == "unpinned-fixtures":
        fixtures = {package(name) for name in UPSTREAM_FIXTURES}
        lines = [line for line in ours if package(line) not in fixtures]
    else:
        raise ValueError(f"pins={pins!r}: choose one of {', '.join(PINS)}")
    # In the session's own folder, not session.create_tmp(): that points TMPDIR into .nox/,
    # and Ray puts its unix sockets under TMPDIR, where the longer path left ray.init() hanging.
    path = Path(session.virtualenv.location) / f"constraints-{pins}.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def package(line: str) -> str:
    """A requirement or pin line's package name, normalised as PEP 503 does."""
    return re.sub(r"[-_.]+", "-", re.split(r"[=<>!~\[ ;]", line.strip(), maxsplit=1)[0]).lower()


def install(session, *packages: str, pins: str = "pinned", fixtures: bool = False, env=None):
    """Install ``packages`` (pip's arguments) under the constraints regime ``pins``.

    ``fixtures=True`` then installs veRL and TransferQueue without their dependencies.
    Raises ValueError for an unknown ``pins``.
    """
    pinned = ("-c", str(constraints(session, pins)))
    groups = [(*pinned, *packages)]
    if fixtures:
        # Unpinned, a reused environment must still take the newest release.
        newest = ("--upgrade",) if pins == "unpinned-fixtures" else ()
        groups.append((*pinned, "--no-deps", *newest, *UPSTREAM_FIXTURES))
    resolve_only = os.environ.get("NOX_RESOLVE_ONLY")
    if not resolve_only:
        uv_settings(session)
    for group in groups:
        if resolve_only:
            resolve(session, group)
        else:
            session.install(*group, env=env)


def resolve(session, arguments: tuple[str, ...]) -> None:
    """Resolve pip ``arguments`` on the package index alone: no find-links, no pip config."""
    uv = uv_binary()
    if uv is None:
        session.error("NOX_RESOLVE_ONLY needs uv (pip install uv)")
    options, wanted, rest = [], [], list(arguments)
    while rest:
        argument = rest.pop(0)
        if argument == "-c":
            options += ["--constraint", rest.pop(0)]
        elif argument == "--no-deps":
            options.append(argument)
        elif argument not in ("-e", "--upgrade"):
            wanted.append(argument)
    python = Path(session.virtualenv.location) / "bin" / "python"
    # Not session.run: it would add the session's variables; here none of uv's or pip's.
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    command = [uv, "pip", "compile", "--no-config", "--quiet", "--output-file", os.devnull]
    session.log(f"resolving on the package index alone: {' '.join(wanted)}")
    done = subprocess.run(
        [*command, "--python", str(python), *options, "-"], input="\n".join(wanted) + "\n",
        cwd=ROOT, env=clean, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        session.error(f"does not resolve without find-links: {' '.join(wanted)}\n{done.stderr}")


# Two more interpreters with Ray 2.60.0, for the version-mismatch entry of
# docs/troubleshooting/connect.md: a driver or node whose Python differs from the cluster's.
OTHER_PYTHONS = ROOT / ".nox" / "other-pythons"
HOW_TO_GET_THEM = (
    "docs/troubleshooting/connect.md#version-mismatch is skipped: it needs a Python {want} "
    "(with uv online: `uv python install {want}`; or pyenv's, or your distribution's)"
)


def uv_python(uv: str, request: str) -> Path | None:
    """``uv python find REQUEST``; where it finds none, ``uv python install`` it (online only)."""
    # pyenv's shims answer for one version only and make uv's search stop with an error: look
    # in pyenv's version folders instead.
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    path = [str(p) for p in sorted(pyenv.glob("versions/3.*/bin"))]
    path += [p for p in os.environ.get("PATH", "").split(os.pathsep) if "pyenv/shims" not in p]
    env = {**os.environ, "PATH": os.pathsep.join(path)}
    find = [uv, "python", "find", "--no-project", request]
    for attempt in ("find", "install"):
        if attempt == "install":
            install = [uv, "python", "install", request]
            try:  # offline, uv fails in seconds; a slow mirror gets two minutes
                if subprocess.run(install, env=env, capture_output=True, timeout=120).returncode:
                    return None
            except subprocess.TimeoutExpired:
                return None
        done = subprocess.run(find, env=env, capture_output=True, text=True, timeout=60)
        if done.returncode == 0 and done.stdout.strip():
            return Path(done.stdout.strip())
    return None


def other_pythons(session) -> dict[str, str]:
    """OTHER_PYTHON (another minor version) and PATCH_PYTHON (another patch level), each a
    virtualenv with Ray 2.60.0 under .nox/other-pythons/; returns the variables to export.

    A Python that cannot be found or installed is left out with one line saying how to get
    it; the page's items that need it are then skipped (tests/docblocks/shell_blocks.py).
    """
    uv = uv_binary()
    probe = "import sys; print(*sys.version_info[:3])"
    printed = session.run("python", "-c", probe, silent=True)
    if printed is None:  # nox --install-only: nothing runs, nothing to export
        return {}
    ours = tuple(int(v) for v in printed.split())
    major, minor, patch = ours
    # Ray 2.60.0 has wheels for Python 3.10 to 3.13: the next minor version, else the previous.
    other = f"{major}.{minor + 1}" if minor < 13 else f"{major}.{minor - 1}"
    requests = {
        "OTHER_PYTHON": (other, f"=={other}.*"),
        "PATCH_PYTHON": (f"{major}.{minor}.x other than {major}.{minor}.{patch}",
                         f"=={major}.{minor}.*,!={major}.{minor}.{patch}"),
    }  # fmt: skip
    exported = {}
    for name, (want, request) in requests.items():
        base = uv_python(uv, request) if uv else None
        if base is None:
            session.warn(f"{name}: " + HOW_TO_GET_THEM.format(want=want))
            continue
        venv = OTHER_PYTHONS / name.lower()
        python = venv / "bin" / "python"
        if not python.exists() or python.resolve() != base.resolve():
            make = (uv, "venv", "-q", "--clear", "--python", str(base), str(venv))
            session.run(*make, external=True)
        pins = ("-c", str(ROOT / "constraints.txt"))
        session.run(
            uv, "pip", "install", "-q", "--python", str(python), *pins, "ray[default]==2.60.0",
            external=True,
        )  # fmt: skip
        exported[name] = str(python)  # not resolve(): a venv's python is a symlink
    return exported


def pytest_one_at_a_time(session, marker: str, *arguments: str, success_codes=(0, 5)) -> None:
    """pytest's second pass: the items marked ``marker``, one at a time (``-n 0``).

    Exit code 5 (nothing selected) is fine where the arguments name none of them.
    """
    session.run("pytest", "-m", marker, "-n", "0", *arguments, success_codes=list(success_codes))
