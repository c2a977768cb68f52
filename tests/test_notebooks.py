"""Every notebook in examples/ runs top to bottom and prints what it shows.

The stored outputs are what the site renders (docs/ links to these files),
so each code cell's printed text (stdout; Ray logs to stderr) is compared
with a fresh execution. Lines
that Ray's log monitor forwards from other processes (``(raylet) ...``,
``(pid=123) ...``) arrive at unpredictable times and are ignored.

As for pages (``tests/docblocks/plugin.py``), a Chinese notebook
``*.zh.ipynb`` is by default checked cell by cell against its English twin,
which is executed: same code, same stored printed output.
``--doc-languages=all`` executes it as well.

With ``--backend=verl`` (``nox -s upstream``) the tutorial notebook runs on veRL 0.9.1
itself: a first cell, added for the run, makes ``reference_impl`` veRL's objects
(``tests/upstream/backend.py``), and every cell must print what the notebook shows unless
the chapter's table of differences lists it.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from page_blocks import twin
from tests.docblocks.match import matches
from tests.docblocks.python_blocks import RAY_FORWARDED
from tests.upstream.backend import NOTEBOOK, REPO, listed_differences

pytestmark = pytest.mark.reads_docs()

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))


def printed(cell) -> str:
    text = "".join(
        o.get("text", "")
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream" and o.get("name") == "stdout"
    )
    return "\n".join(line for line in text.splitlines() if not RAY_FORWARDED.match(line))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_and_matches_its_outputs(path, request):
    if request.config.getoption("--backend") == "verl":
        if path != NOTEBOOK:
            pytest.skip("--backend=verl runs the tutorial notebook only")
        return run_on_verl(path)
    if path.name.endswith(".zh.ipynb") and request.config.getoption("--doc-languages") == "en":
        english = nbformat.read(twin(path), as_version=4).cells
        chinese = nbformat.read(path, as_version=4).cells
        code = [(c.source, printed(c)) for c in chinese if c.cell_type == "code"]
        assert code == [(c.source, printed(c)) for c in english if c.cell_type == "code"], (
            f"{path.name}: code cells or their printed output differ from "
            f"{twin(path).name}, which is the notebook executed"
        )
        return
    stored = nbformat.read(path, as_version=4)
    fresh = nbformat.read(path, as_version=4)
    NotebookClient(
        fresh, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}
    ).execute()  # raises CellExecutionError, naming the cell, if any cell fails
    for index, (old, new) in enumerate(zip(stored.cells, fresh.cells, strict=True)):
        if old.cell_type == "code":
            assert matches(printed(old), printed(new)), (
                f"{path.name} cell {index}: shows\n{printed(old)}\nbut printed\n{printed(new)}"
            )


def test_the_stored_outputs_are_not_empty():
    for path in NOTEBOOKS:
        cells = nbformat.read(path, as_version=4).cells
        assert sum(bool(printed(c)) for c in cells if c.cell_type == "code") >= 5, path.name


# Run as the notebook's first cell on veRL: from then on `reference_impl` is veRL's objects.
SWITCH_TO_VERL = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from tests.upstream.backend import verl_as_reference_impl

sys.modules["reference_impl"] = verl_as_reference_impl()
"""


def run_on_verl(path: Path) -> None:
    """Every code cell prints what the notebook shows on veRL, or is a listed difference."""
    listed = {d.block for d in listed_differences() if d.page == "tutorial.ipynb"}
    stored = nbformat.read(path, as_version=4)
    fresh = nbformat.read(path, as_version=4)
    fresh.cells.insert(0, nbformat.v4.new_code_cell(SWITCH_TO_VERL))
    NotebookClient(
        fresh,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,  # a listed cell may raise; the others are checked below
        resources={"metadata": {"path": str(EXAMPLES)}},
    ).execute()
    assert not [o for o in fresh.cells[0].outputs if o.get("output_type") == "error"]
    code_cell = 0
    problems = []
    for index, (old, new) in enumerate(zip(stored.cells, fresh.cells[1:], strict=True)):
        if old.cell_type != "code":
            continue
        code_cell += 1
        raised = any(o.get("output_type") == "error" for o in new.outputs)
        holds = not raised and matches(printed(old), printed(new))
        if code_cell in listed and holds:
            problems.append(f"code cell {code_cell} (cell {index}) is listed but holds on veRL")
        elif code_cell not in listed and not holds:
            error = [o for o in new.outputs if o.get("output_type") == "error"]
            got = f"{error[0]['ename']}: {error[0]['evalue']}" if error else printed(new)
            problems.append(f"code cell {code_cell} (cell {index}) on veRL 0.9.1: {got}")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)
