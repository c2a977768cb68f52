"""Sessions for the handbook. A bare `nox` runs tests, docs and lint (what CI runs).

    nox -s serve     build and serve the bilingual site on http://127.0.0.1:8000
    nox              the whole verification suite: tests, docs, lint
    nox -s tests -- -k tasks    pass pytest arguments after `--`
    nox -s bench     benchmarks: ratios against raw Ray, measured in one run

Every session installs with the one constraints file, so versions are pinned.
"""

from pathlib import Path

import nox

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: nox itself depends on tomli there
    import tomli as tomllib

nox.options.sessions = ["tests", "docs", "lint"]
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True

CONSTRAINTS = ("-c", "constraints.txt")
# The site build needs only the MkDocs toolchain, not Ray and torch: install that list alone.
DOCS_TOOLS = tomllib.loads(Path("pyproject.toml").read_text())["project"]["optional-dependencies"][
    "docs"
]


@nox.session
def tests(session: nox.Session) -> None:
    """Run every doc block (docs/) and every test (tests/) with pytest-xdist."""
    session.install(*CONSTRAINTS, "-e", ".[test,docs]")
    session.run("pytest", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build both languages with `mkdocs build --strict` (broken links fail)."""
    session.install(*CONSTRAINTS, *DOCS_TOOLS)
    session.run("mkdocs", "build", "--strict", env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session
def serve(session: nox.Session) -> None:
    """Serve the site with live reload on http://127.0.0.1:8000 (English; 简体中文 under /zh/)."""
    session.install(*CONSTRAINTS, *DOCS_TOOLS)
    session.run("mkdocs", "serve", "--dev-addr", "127.0.0.1:8000", env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks: overhead ratios against raw Ray, measured in one run (benchmarks/)."""
    session.install(*CONSTRAINTS, "-e", ".")
    session.run("python", "benchmarks/single_controller.py", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the code and the docs' python."""
    session.install(*CONSTRAINTS, "ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
