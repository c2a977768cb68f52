"""Take a page away (tools/take_away.py): each page's script runs and prints what the page shows.

* The rule: every page with executed python blocks offers a script and a notebook, and
  no other page does (the rule is in ``tools/take_away.py``'s docstring).
* The generator reads every page's blocks as the test suite does
  (``tests/docblocks/collect.py``), so the script holds exactly the blocks
  that the suite ran.
* Each English page's script runs in a fresh Python process, in an empty directory, with
  a hard time limit, and what each block printed must match the page's output block, by
  the suite's own matcher (``tests/docblocks/match.py``). The Chinese page's script carries the
  same code lines (only prose and labels differ), so running the English one covers it.
* The built site (``mkdocs build --strict``, the fixture of ``tests/test_site_build.py``)
  links both files from every such page in both languages, and the files are there.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.docblocks.collect import blocks_of
from tests.docblocks.match import clean, matches
from tests.docblocks.plugin import ALONE_PAGES
from tests.docblocks.python_blocks import RAY_FORWARDED
from tests.test_site_build import site  # noqa: F401 - the built site, a pytest fixture

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
sys.path.insert(0, str(REPO / "tools"))
import take_away  # noqa: E402 - tools/ is not a package; MkDocs loads it by path too

ALL_PAGES = sorted(DOCS.rglob("*.md"))
EN_PAGES = [p for p in ALL_PAGES if not p.name.endswith(".zh.md")]
EXECUTED = {"python", "gpu"}
# Below pytest's own limit (pyproject.toml, timeout = 300), so that a script that runs
# too long is reported with what it printed, and its process group is killed.
SCRIPT_LIMIT_S = 240


def rel(page: Path) -> str:
    return str(page.relative_to(DOCS))


def zh_twin(page: Path) -> Path:
    return page.with_name(page.name[: -len(".md")] + ".zh.md")


def suite_kinds(page: Path) -> set[str]:
    return {block.verdict.kind for block in blocks_of(page)}


DOWNLOAD_PAGES = [p for p in EN_PAGES if suite_kinds(p) & EXECUTED]


def code_lines(script: str) -> list[str]:
    """The script without comment lines and blank lines: what is the same in both languages."""
    return [
        line for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


@pytest.mark.parametrize("page", ALL_PAGES, ids=rel)
def test_blocks_are_read_as_the_suite_reads_them(page):
    ours = [(b.info, b.source, b.kind) for b in take_away.blocks(page)]
    suite = [(b.info, b.source, b.verdict.kind) for b in blocks_of(page)]
    assert ours == suite


def test_every_page_with_executed_python_offers_downloads():
    """The rule, applied to every page: executed python blocks <=> a script and a notebook."""
    wrong = []
    for page in ALL_PAGES:
        executed = bool(suite_kinds(page) & EXECUTED)
        try:
            offered = take_away.has_downloads(page)
        except take_away.TakeAwayError as error:
            offered = f"refused: {error}"
        if offered is not executed:
            wrong.append(f"{rel(page)}: executed python blocks {executed}, downloads {offered}")
    assert not wrong, "\n".join(wrong)
    assert len(DOWNLOAD_PAGES) >= 25


def test_a_page_that_mixes_python_and_shell_blocks_is_refused(tmp_path):
    page = tmp_path / "mixed.md"
    page.write_text(
        "# Mixed\n\n```console\n$ ray start --head\n```\n\n```python\nimport ray\n```\n", "utf-8"
    )
    with pytest.raises(take_away.TakeAwayError, match="mixed.md has executed python blocks"):
        take_away.has_downloads(page)
    shell_only = tmp_path / "shell.md"
    shell_only.write_text("# Shell\n\n<!-- block: file a.py -->\n```python\nx = 1\n```\n", "utf-8")
    assert take_away.has_downloads(shell_only) is False
    with pytest.raises(take_away.TakeAwayError, match="gets no downloads"):
        take_away.script_text(shell_only, tmp_path)


@pytest.mark.parametrize("page", DOWNLOAD_PAGES, ids=rel)
def test_both_languages_carry_the_same_code(page):
    zh = zh_twin(page)
    assert code_lines(take_away.script_text(zh, DOCS)) == code_lines(
        take_away.script_text(page, DOCS)
    )
    en_cells, zh_cells = (
        [c.source for c in take_away.notebook(p, DOCS).cells if c.cell_type == "code"]
        for p in (page, zh)
    )
    assert zh_cells == en_cells
    python = [b.source.rstrip("\n") for b in take_away.blocks(page) if b.kind == "python"]
    assert en_cells[: len(python)] == python, "the notebook's code cells are the page's blocks"


# What Ray's driver prints from its own threads: the suite keeps only what a block's own
# thread prints (evaluators.MainThreadOnly), so these never reach an output block there.
AUTOSCALER = re.compile(r"^(\x1b\[[0-9;]*m)?\(autoscaler \+\d+s\)")


def printed_per_block(stdout: str) -> dict[int, str]:
    """Cut the test variant's stdout at its marker lines: block number -> what it printed.

    Lines that Ray forwards from other processes, and the autoscaler's lines, are dropped,
    as the suite never counts them as printed by a block.
    """
    printed: dict[int, str] = {}
    current = None
    for line in stdout.splitlines(keepends=True):
        marker = line.strip()
        if marker.startswith("@@take-away block ") and marker.endswith("@@"):
            label = marker.removeprefix("@@take-away block ").removesuffix("@@")
            current = None if label == "end" else int(label)
            if current is not None:
                printed[current] = ""
        elif current is not None and not (RAY_FORWARDED.match(line) or AUTOSCALER.match(line)):
            printed[current] += line
    return printed


def expected_outputs(page: Path) -> list[tuple[int, str]]:
    """(number of the python block, its output block) for each output the script must print."""
    result, number, previous = [], 0, None
    for block in take_away.blocks(page):
        if block.kind == "python":
            number += 1
        elif block.kind == "output" and previous == "python":
            result.append((number, block.source))
        # An output under a gpu block is not checked: the script leaves that block out.
        previous = block.kind
    return result


def run_script(path: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``path`` as a reader would, ``python path`` in the environment's venv; kill its
    whole process group (Ray's daemons included) if it runs past ``SCRIPT_LIMIT_S``."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    # -u: the markers and what the page's own subprocesses print reach the pipe in order.
    process = subprocess.Popen(
        [sys.executable, "-u", str(path)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=SCRIPT_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(
            f"{path.name} ran past {SCRIPT_LIMIT_S} s\n--- stdout ---\n{stdout[-3000:]}\n"
            f"--- stderr ---\n{stderr[-3000:]}"
        )
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


# The scripts run in four groups, one test file each (tests/take_away/): pytest-xdist
# hands out whole files (`--dist loadfile`, pyproject.toml), so one file would run every
# script on one worker, one after the other. "other" takes every page the others do not.
SCRIPT_GROUPS = {"ray_core": "ray-core/", "verl": "verl/", "inside_ray": "inside-ray/"}


def script_params(group: str):
    """The pages whose scripts ``tests/take_away/test_<group>.py`` runs (``other``: the rest)."""
    for page in DOWNLOAD_PAGES:
        prefix = SCRIPT_GROUPS.get(group)
        in_a_group = any(rel(page).startswith(p) for p in SCRIPT_GROUPS.values())
        if (prefix and rel(page).startswith(prefix)) or (group == "other" and not in_a_group):
            marks = [pytest.mark.alone] if page in ALONE_PAGES else []
            yield pytest.param(page, id=rel(page), marks=marks)


def check_script(page: Path, tmp_path: Path) -> None:
    """Run the page's script (the test variant, with marker lines) in an empty directory and
    compare what each python block printed with the page's output block under it."""
    name = take_away.download_name(page, DOCS) + ".py"
    script = tmp_path / name
    script.write_text(take_away.script_text(page, DOCS, markers=True), "utf-8")
    work = tmp_path / "work"  # the reader's empty directory
    work.mkdir()
    done = run_script(script, work)
    assert done.returncode == 0, (
        f"python {name} exited with {done.returncode}\n--- stderr ---\n{done.stderr[-4000:]}"
    )
    printed = printed_per_block(done.stdout)
    differ = []
    for number, expected in expected_outputs(page):
        actual = printed.get(number)
        if actual is None or not matches(expected, actual):
            differ.append(
                f"python block {number}:\n--- page shows ---\n{clean(expected)}\n"
                f"--- script printed ---\n{clean(actual or '(nothing: it did not run)')}"
            )
    assert not differ, f"{name} printed otherwise than {rel(page)}:\n" + "\n".join(differ)


def test_every_script_is_run_by_one_group():
    groups = {
        group: [p.values[0] for p in script_params(group)] for group in [*SCRIPT_GROUPS, "other"]
    }
    ran = sorted(page for pages in groups.values() for page in pages)
    assert ran == sorted(DOWNLOAD_PAGES)
    for group in groups:
        assert (REPO / "tests" / "take_away" / f"test_{group}.py").is_file(), group


def test_the_script_variant_for_tests_only_adds_marker_lines():
    page = DOCS / "ray-core" / "tasks.md"
    plain = take_away.script_text(page, DOCS).splitlines()
    marked = take_away.script_text(page, DOCS, markers=True).splitlines()
    assert [line for line in marked if "@@take-away block" not in line] == plain
    assert "@@" not in "\n".join(plain)


def test_gpu_blocks_are_commented_out_in_the_script():
    page = DOCS / "verl" / "workers.md"
    gpu = next(b for b in take_away.blocks(page) if b.kind == "gpu")
    script = take_away.script_text(page, DOCS)
    assert all(f"# {line}".rstrip() in script.splitlines() for line in gpu.source.splitlines())
    assert "Needs a CUDA GPU" in script
    assert gpu.source.splitlines()[0] not in code_lines(script)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_built_site_links_both_downloads(site, lang):  # noqa: F811 - the fixture
    missing = []
    for page in EN_PAGES:
        source = page if lang == "en" else zh_twin(page)
        root = site / "zh" if lang == "zh" else site
        folder = root / take_away.url_path(rel(page))
        html = (folder / "index.html").read_text("utf-8")
        if page not in DOWNLOAD_PAGES:
            if "take-away" in html:
                missing.append(f"{rel(source)}: a download box on a page with no python")
            continue
        name = take_away.download_name(page, DOCS)
        for suffix in (".ipynb", ".py"):
            if f'href="{name}{suffix}" download' not in html:
                missing.append(f"{rel(source)}: no link to {name}{suffix}")
            if not (folder / f"{name}{suffix}").is_file():
                missing.append(f"{rel(source)}: {folder.relative_to(site)}/{name}{suffix} missing")
        if (folder / f"{name}.py").is_file():
            assert (folder / f"{name}.py").read_text("utf-8") == take_away.script_text(source, DOCS)
        if (folder / f"{name}.ipynb").is_file():
            built = nbformat.read(folder / f"{name}.ipynb", as_version=4)
            nbformat.validate(built)
            expected = take_away.notebook(source, DOCS)
            assert [c.source for c in built.cells if c.cell_type == "code"] == [
                c.source for c in expected.cells if c.cell_type == "code"
            ]
    assert not missing, "\n".join(missing)
