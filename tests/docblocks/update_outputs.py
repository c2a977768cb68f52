"""``pytest --update-outputs``: rewrite each stale ``output`` block from what its page printed.

The idea is pytest-examples' ``--update-examples``, for this harness's pages. A run with the
option checks every output block as usual; where one does not match what its block printed,
the block is rewritten instead of failing, and so is the same block of the page's Chinese
twin: the two languages carry byte-identical code and outputs (``page_blocks.twin_mismatch``),
so no output differs by language, and one whose twin differs is refused (its item fails,
naming both blocks) rather than overwritten.

What is written keeps the page's patterns where they still hold (:func:`merged`): a line
with ``...``, ``<n>``, ``<id>`` or ``<ip>`` that matches a printed line stays as it is, and a
``...`` line stays where it still stands for lines; every other line becomes the printed
text. The result always matches what was printed (it is checked before it is written).

Edits are written when the process that ran the page ends its session (each xdist worker
runs whole pages, so no two processes write one page). Only English pages write: with
``--doc-languages=all`` a Chinese page's run checks, and its English twin's run writes both.
Console blocks (``$ command`` and what it prints) are not rewritten.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import page_blocks
from tests.docblocks.match import WILDCARD, clean, matches
from tests.docblocks.python_blocks import ExpectedOutput, check_output

OPTION = "--update-outputs"
ENABLED = {"value": False}


@dataclass(frozen=True)
class Edit:
    """Replace the output block that starts at ``start`` (its fence line's offset) on ``page``."""

    page: Path
    start: int
    old: str  # the block's text between its fences, as the page has it
    new: str  # the same, to be written


PENDING: list[Edit] = []


def addoption(parser) -> None:
    parser.addoption(
        OPTION,
        action="store_true",
        default=False,
        help="rewrite each output block that differs from what its block printed (and the "
        "same block of the page's Chinese twin) instead of failing it",
    )


def merged(shown: str, printed: str) -> str:
    """The new text of an output block: ``printed``, keeping ``shown``'s patterns that still hold.

    A longest common subsequence over lines, where a line of ``shown`` may stand for one
    printed line it matches, and a ``...`` line for any number of them. Falls back to the
    printed text itself if the merge would not match it.

    >>> merged("pid <n>\\nsum: 41", "pid 1234\\nsum: 42")
    'pid <n>\\nsum: 42'
    >>> merged("start\\n...\\nend", "start\\na\\nb\\nend\\nmore")
    'start\\n...\\nend\\nmore'
    """
    old = clean(shown).split("\n") if clean(shown) else []
    new = clean(printed).split("\n") if clean(printed) else []
    if len(old) + len(new) > 600:  # a long output: the printed text, not a merge
        return clean(printed)

    @functools.cache
    def best(i: int, j: int) -> tuple[int, tuple[str, ...]]:
        """(pattern lines kept, the lines to write) for old[i:] against new[j:]."""
        if i == len(old):
            return 0, tuple(new[j:])
        options = [best(i + 1, j)]  # drop old[i]
        if j < len(new):
            kept, lines = best(i, j + 1)  # write new[j] as printed
            options.append((kept, (new[j], *lines)))
        if old[i] == WILDCARD:
            # `...` stands for new[j:k] (k >= j): keep it, then go on from new[k].
            for k in range(j, len(new) + 1):
                kept, lines = best(i + 1, k)
                options.append((kept + 1, (WILDCARD, *lines)))
        elif j < len(new) and matches(old[i], new[j]):
            kept, lines = best(i + 1, j + 1)
            options.append((kept + 1, (old[i], *lines)))
        # The most pattern lines kept; of those, the shortest text.
        return max(options, key=lambda option: (option[0], -len(option[1])))

    text = "\n".join(best(0, 0)[1])
    return text if matches(text, printed) else clean(printed)


def block_at(page: Path, start: int) -> tuple[int, page_blocks.Block]:
    """(index among the page's blocks, the block) of the block whose fence starts at ``start``."""
    for index, block in enumerate(page_blocks.blocks(page)):
        if block.start == start:
            return index, block
    raise LookupError(f"{page}: no block starts at offset {start}")


def plan(page: Path, start: int, printed: str) -> tuple[str | None, str]:
    """Queue the rewrite of the output block at ``start`` on ``page`` and its twin's block.

    Returns (why the block is refused, or None when queued; where the blocks are). A refused
    block's item fails with the reason.
    """
    index, block = block_at(page, start)
    new_source = merged(block.source, printed) + "\n"
    edits = [Edit(page, block.start, block.source, new_source)]
    twin = page_blocks.twin(page)
    where = f"{page.name}, line {block.line}"  # the twin's block is added below
    if twin.exists():
        theirs = page_blocks.blocks(twin)
        other = theirs[index] if index < len(theirs) else None
        if other is None or other.kind != "output" or other.source != block.source:
            return (
                f"{OPTION}: refused to rewrite the output block at {where}: its twin "
                f"({twin.name}, block {index + 1}"
                f"{', line ' + str(other.line) if other else ''}) is not the same output "
                "block. Outputs are the same in both languages (page_blocks.twin_mismatch): "
                "make the two blocks identical, then run again.",
                where,
            )
        edits.append(Edit(twin, other.start, other.source, new_source))
        where += f" and {twin.name}, line {other.line}"
    PENDING.extend(edits)
    return None, where


def replaced(text: str, edit: Edit) -> str:
    """``text`` with the block of ``edit`` given its new source, indentation and fences kept."""
    block = next(
        b
        for b in page_blocks.parse(text)
        if isinstance(b, page_blocks.Block) and b.start == edit.start
    )
    if block.source != edit.old:
        raise RuntimeError(
            f"{edit.page}: the output block at line {block.line} changed under the run"
        )
    lines = block.text.splitlines(keepends=True)
    indent = page_blocks.FENCE.match(lines[0].rstrip("\n"))["indent"]
    body = "".join(
        f"{indent}{line}" if line.strip() else line for line in edit.new.splitlines(True)
    )
    closing = lines[-1] if len(lines) > 1 else ""
    new_text = lines[0] + body + closing
    return text[: block.start] + new_text + text[block.start + len(block.text) :]


def write_pending() -> list[str]:
    """Write the queued edits, page by page, from the end of each page. Returns what was
    rewritten, one ``page, line N`` per block."""
    done = []
    by_page: dict[Path, list[Edit]] = {}
    for edit in PENDING:
        by_page.setdefault(edit.page, []).append(edit)
    PENDING.clear()
    for page, edits in by_page.items():
        text = page.read_text("utf-8")
        unique = {edit.start: edit for edit in edits}
        done += [f"{page}, line {text.count(chr(10), 0, start) + 1}" for start in sorted(unique)]
        for start in sorted(unique, reverse=True):
            text = replaced(text, unique[start])
        page.write_text(text, "utf-8")
    return done


# (page, block start) of each output block rewritten -> where it and its twin's block are
UPDATED: dict[tuple[str, int], str] = {}


def check_or_update(example) -> str | None:
    """Evaluator of an output block: :func:`check_output`, or with the option, a rewrite."""
    failure = check_output(example)
    expected: ExpectedOutput = example.parsed
    printed = getattr(expected.source_block, "printed", None)
    page = Path(example.path)
    if failure is None or not ENABLED["value"] or printed is None:
        return failure
    if page_blocks.language(page) == "zh":
        return failure  # its English twin's run rewrites it
    refused, where = plan(page, example.region.start, printed)
    if refused is not None:
        return refused
    UPDATED[str(page), example.region.start] = where
    return None
