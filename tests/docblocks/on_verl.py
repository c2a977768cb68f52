"""``pytest --backend=verl``: the single-controller chapter's blocks, run on veRL 0.9.1 itself.

``reference_impl`` is replaced by veRL's objects under the same names while a page runs
(``tests/upstream/backend.py``). Each python block must hold there too, and may not hang;
the blocks listed in the chapter's table of differences (``docs/verl/differences.md``) must
differ instead: raise, hang past ``HANG_S``, or print other than the page shows. ``nox -s
upstream`` runs this.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sybil import Document, Region

import page_blocks
from tests.docblocks.match import matches
from tests.docblocks.python_blocks import (
    ExpectedOutput,
    Problem,
    PythonBlock,
    check_output,
    report_problem,
    run_python,
)
from tests.upstream.backend import (
    BLOCK_LIMIT_S,
    CHAPTER,
    CHAPTER_PAGES,
    HANG_S,
    Difference,
    Hung,
    listed_differences,
    time_limit,
)


def runs_on_verl(path: Path) -> bool:
    """Pages run a second time on veRL: the single-controller chapter's English pages."""
    return path.parent == CHAPTER and path.name in CHAPTER_PAGES


@dataclass
class ListedBlock(PythonBlock):
    """A python block listed in the table of differences: on veRL it must not hold."""

    row: Difference | None = None
    has_output: bool = False
    raised: str | None = None


def parse_blocks_on_verl(document: Document) -> Iterator[Region]:
    """The page's python and output blocks, for a run on veRL; listed blocks must differ."""
    listed = {d.block: d for d in listed_differences() if d.page == Path(document.path).name}
    previous: PythonBlock | None = None
    number = 0
    for block in page_blocks.parse(document.text):
        if not isinstance(block, page_blocks.Block):
            continue
        follows, previous = previous, None
        if block.kind == "python":
            number += 1
            difference = listed.pop(number, None)
            if difference is None:
                previous = PythonBlock(block.source)
                yield Region(block.start, block.end, previous, run_on_verl)
            else:
                previous = ListedBlock(block.source, row=difference)
                yield Region(block.start, block.end, previous, run_listed)
        elif block.kind == "output" and follows is not None:
            output = ExpectedOutput(block.source, follows)
            if isinstance(follows, ListedBlock):
                follows.has_output = True
                yield Region(block.start, block.end, output, check_listed_output)
            else:
                yield Region(block.start, block.end, output, check_output)
    for difference in listed.values():  # a row naming a block the page does not have
        problem = Problem(
            f"the table of differences lists python block {difference.block} of "
            f"{difference.page}, which has only {number} python blocks"
        )
        yield Region(len(document.text), len(document.text), problem, report_problem)


def run_on_verl(example) -> str | None:
    """An unlisted block on veRL: it must hold, and it may not hang (veRL waits without
    timeouts, and pytest-timeout's alarm does not interrupt ``ray.get``)."""
    try:
        with time_limit(BLOCK_LIMIT_S):
            run_python(example)
    except Hung as error:
        return f"on veRL 0.9.1 this block {error}; list it in docs/verl/differences.md or fix it"
    return None


def run_listed(example) -> str | None:
    block: ListedBlock = example.parsed
    block.raised = None
    try:
        with time_limit(HANG_S):
            run_python(example)
    except Hung as error:
        block.raised = f"hung: {error}"
    except Exception as error:  # noqa: BLE001 - any failure is the listed difference
        first_line = str(error).splitlines()[0] if str(error) else ""
        block.raised = f"{type(error).__name__}: {first_line}"
    if block.raised is None and not block.has_output:
        return (
            f"listed in docs/verl/differences.md ({block.row.what}), but it runs on veRL "
            "0.9.1 without error and shows no output to differ: remove the row"
        )
    sys.stdout.write(f"\n[differs on veRL as listed: {block.raised or 'prints otherwise'}]\n")
    return None


def check_listed_output(example) -> str | None:
    expected: ExpectedOutput = example.parsed
    block: ListedBlock = expected.source_block
    if block.raised is not None:
        return None  # the python block already differed
    if block.printed is not None and matches(expected.text, block.printed):
        return (
            f"listed in docs/verl/differences.md ({block.row.what}), but on veRL 0.9.1 "
            "it prints what the page shows: remove the row"
        )
    return None
