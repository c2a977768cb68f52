"""Take a page away (tools/take_away.py): the rule, both languages, and the script the suite runs.

* The rule: every page with executed python blocks offers a script and a notebook, and
  no other page does (the rule is in ``tools/take_away.py``'s docstring).
* The generator and the test suite read pages through one page model
  (``tools/page_blocks.py``), so the script holds exactly the blocks that run.
* The suite runs each such page's python blocks as its script, and only so
  (``tests/docblocks/page_scripts.py``), in a fresh process, and compares what each block
  printed with the page's output blocks: every downloadable script runs, and matches its
  page, whenever the page's blocks do. The Chinese page's script carries the same code
  lines (only prose and labels differ), so running the English one covers it.
* The built site links both files from every such page in both languages
  (``tests/test_site_build.py``, which builds the site once).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sybil import Document

import page_blocks
import take_away
from page_blocks import twin
from tests.docblocks.page_scripts import LAUNCHER, run_in_page_script
from tests.docblocks.plugin import parse_blocks

pytestmark = pytest.mark.reads_docs("docs")

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

ALL_PAGES = sorted(DOCS.rglob("*.md"))
EN_PAGES = [p for p in ALL_PAGES if not p.name.endswith(".zh.md")]
EXECUTED = {"python", "gpu"}


def rel(page: Path) -> str:
    return str(page.relative_to(DOCS))


def suite_kinds(page: Path) -> set[str]:
    return {block.kind for block in page_blocks.blocks(page)}


DOWNLOAD_PAGES = [p for p in EN_PAGES if suite_kinds(p) & EXECUTED]


def code_lines(script: str) -> list[str]:
    """The script without comment lines and blank lines: what is the same in both languages."""
    return [
        line for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


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
    zh = twin(page)
    assert code_lines(take_away.script_text(zh, DOCS)) == code_lines(
        take_away.script_text(page, DOCS)
    )
    en_cells, zh_cells = (
        [c.source for c in take_away.notebook(p, DOCS).cells if c.cell_type == "code"]
        for p in (page, zh)
    )
    assert zh_cells == en_cells
    # The first cell installs what the page imports (tools/take_away.py, install_commands);
    # then come the page's python blocks, in order.
    install = "\n".join(f"%{c}" for c in take_away.install_commands(page, DOCS))
    assert en_cells[0] == install
    python = [b.source.rstrip("\n") for b in page_blocks.blocks(page) if b.kind == "python"]
    assert en_cells[1 : 1 + len(python)] == python, (
        "the notebook's code cells are the page's blocks"
    )


def test_no_page_runs_a_python_block_in_the_test_process():
    """Every python and gpu block of every page runs in its page's script, CUDA or not;
    only ``--backend=verl`` (not collected here) runs blocks in-process."""
    in_process = []
    for page in EN_PAGES:
        kinds = [b.kind for b in page_blocks.blocks(page) if b.kind in ("python", "gpu")]
        regions = parse_blocks(Document(page.read_text("utf-8"), str(page)))
        scripted = [r for r in regions if r.evaluator is run_in_page_script]
        if len(scripted) != len(kinds):
            in_process.append(f"{rel(page)}: {len(kinds)} blocks, {len(scripted)} in the script")
    assert not in_process, "\n".join(in_process)


def test_the_script_variant_for_tests_only_adds_marker_lines():
    page = DOCS / "ray-core" / "tasks.md"
    plain = take_away.script_text(page, DOCS).splitlines()
    marked = take_away.script_text(page, DOCS, markers=True).splitlines()
    assert [line for line in marked if "@@take-away block" not in line] == plain
    assert "@@" not in "\n".join(plain)


def test_gpu_blocks_are_commented_out_in_the_script():
    page = DOCS / "verl" / "workers.md"
    gpu = next(b for b in page_blocks.blocks(page) if b.kind == "gpu")
    script = take_away.script_text(page, DOCS)
    assert all(f"# {line}".rstrip() in script.splitlines() for line in gpu.source.splitlines())
    assert "Needs a CUDA GPU" in script
    assert gpu.source.splitlines()[0] not in code_lines(script)


def test_where_cuda_is_present_the_suites_script_runs_the_gpu_blocks_in_place():
    page = DOCS / "verl" / "workers.md"
    found = [b for b in page_blocks.blocks(page) if b.kind in ("python", "gpu")]
    number = next(n for n, b in enumerate(found, start=1) if b.kind == "gpu")
    lines = take_away.script_text(page, DOCS, markers=True, gpu=True).splitlines()
    marker = lines.index(f"print({take_away.MARKER_LINE.format(number)!r}, flush=True)")
    gpu = found[number - 1].source.rstrip("\n").splitlines()
    assert lines[marker + 1 : marker + 1 + len(gpu)] == gpu
    # Without gpu=True the block is comments, and its number is skipped, not reused.
    cpu = take_away.script_text(page, DOCS, markers=True)
    assert take_away.MARKER_LINE.format(number) not in cpu
    assert take_away.MARKER_LINE.format(number + 1) in cpu


def test_the_launcher_keeps_other_threads_off_stdout(tmp_path):
    """Ray prints forwarded lines from a background thread; they must not splice a block's.

    Unbuffered (``-u``), each ``print`` is two writes, text and newline, and a thread
    switch between them joins two threads' lines; 2000 lines from each make that all but
    certain without the launcher (tests/docblocks/script_launcher.py).
    """
    script = tmp_path / "page.py"
    script.write_text(
        "import sys, threading\n"
        "def chatter():\n"
        "    for _ in range(2000):\n"
        "        print('(raylet) a forwarded line')\n"
        "thread = threading.Thread(target=chatter)\n"
        "thread.start()\n"
        "for i in range(2000):\n"
        "    print(f'block line {i}')\n"
        "thread.join()\n"
        "folder = __file__.rsplit('/', 1)[0]\n"
        "print(__name__, sys.argv == [__file__], sys.path[0] == folder)\n"
    )
    run = subprocess.run(
        [sys.executable, "-u", str(LAUNCHER), str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert run.stdout.splitlines() == [f"block line {i}" for i in range(2000)] + [
        "__main__ True True"
    ]
    assert run.stderr.splitlines() == ["(raylet) a forwarded line"] * 2000
