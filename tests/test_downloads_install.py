"""A downloaded script runs in a fresh virtualenv after exactly the install line it starts with.

Readers who take a page away (the site's script and notebook downloads, ``tools/take_away.py``)
start from an empty environment. Each download names what to install, pinned to the versions
the suite ran it with; this test makes a virtualenv with ``python -m venv``, runs those
``pip install`` lines as the script's header gives them, and runs the script. Two pages: one
that needs Ray alone, and one that imports ``reference_impl``, installed from this checkout
(``REPO_URL`` unset: the header names the checkout the download was built from; the published
site names the repository). Marker ``downloads``: ``nox -s downloads`` (CI runs it).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import take_away

pytestmark = [
    pytest.mark.downloads,
    pytest.mark.reads_docs(
        "docs/ray-core/tasks.md", "docs/verl/worker-groups.md", "docs/verl/worker-groups.zh.md"
    ),
]

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = ["ray-core/tasks.md", "verl/worker-groups.zh.md"]


def header_commands(script: str) -> list[str]:
    """The ``pip install`` lines of a script's opening comment."""
    opening = script.split("\n\n\n", 1)[0]
    return [line.removeprefix("#   ") for line in opening.splitlines() if "pip install" in line]


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fresh-venv")
    venv.create(folder, with_pip=True)
    return folder / "bin" / "python"


@pytest.mark.parametrize("page", PAGES)
def test_a_download_runs_after_its_own_install_line(page, fresh_env, tmp_path, monkeypatch):
    monkeypatch.delenv("REPO_URL", raising=False)
    script = take_away.script_text(DOCS / page, DOCS)
    commands = header_commands(script)
    assert commands, f"{page}: the script names nothing to install"
    for command in commands:
        words = shlex.split(command)
        assert words[:2] == ["pip", "install"], command
        subprocess.run(
            [str(fresh_env), "-m", "pip", "install", "--quiet", *words[2:]],
            check=True,
            timeout=900,
        )
    path = tmp_path / "page.py"
    path.write_text(script, encoding="utf-8")
    done = subprocess.run(
        [str(fresh_env), str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_header_is_the_scripts_first_lines_and_the_notebooks_first_cell():
    page = DOCS / "verl" / "worker-groups.md"
    commands = take_away.install_commands(page, DOCS)
    script = take_away.script_text(page, DOCS)
    assert header_commands(script) == commands
    first = take_away.notebook(page, DOCS).cells[0]
    assert first.cell_type == "code"
    assert [line.removeprefix("%") for line in first.source.splitlines()] == commands
    assert any("reference_impl @ git+" in c for c in commands)
    assert sys.version_info >= (3, 10)
