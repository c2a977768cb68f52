"""Finding a page's fenced blocks, deciding what kind each is, and pairing the two languages.

Every fenced block under ``docs/`` must be accounted for. The rules a page
author follows (README.md, "Adding a page"):

* ``python`` blocks run, in order, in one namespace per page.
* An ``output`` block right after a ``python`` block must match what that
  block printed (``match.py``: ``...`` matches any text, ``<n>`` a number).
* A block preceded by ``<!-- block: gpu -->`` runs only where CUDA is present;
  elsewhere it is reported as skipped with that reason.
* ``console`` blocks (``$ command`` and the output shown under it) and
  ``bash`` blocks run in one terminal per page (``shell_blocks.py``);
  ``<!-- block: run timeout=300 retry=20 -->`` tunes their time limits.
* ``<!-- block: file NAME -->`` writes a block to ``NAME`` in that terminal's
  working directory.
* Any other block needs an explicit marker on the line above it:
  ``<!-- block: data -->`` (YAML, JSON and TOML are parsed) or
  ``<!-- block: illustration -->`` (shown, not run: diagrams, pseudo-code).
  Free text after the kind is allowed, e.g.
  ``<!-- block: illustration (needs 8 GPUs) -->``.

The info string may carry attributes (``python title="x.py" hl_lines="2"``);
the language is its first word. Sybil's stock Markdown lexer silently skips
such blocks; this module does not, and ``tests/test_docs_pages.py`` checks
that every block MkDocs renders is one that this module classified.

Languages: ``page.md`` (English) and ``page.zh.md`` (Chinese) are twins
(:func:`twin`). Their blocks must agree, in order (:func:`twin_mismatch`):
code that runs is byte-identical, so the snippet a reader copies from either
language is the one that ran; a diagram or an illustration may be translated,
but keeps its structure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sybil import Document, Region
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

MARKER = re.compile(r"^[ \t]*<!--\s*block:\s*(?P<kind>[a-z-]+)(?P<note>[^>]*?)\s*-->[ \t]*$")
MARKER_KINDS = ("gpu", "data", "illustration", "run", "file")
DATA_LANGUAGES = ("yaml", "yml", "json", "toml")
# Shell blocks run in a per-page terminal (shell_blocks.py).
SHELL_LANGUAGES = {"console": "console", "bash": "bash", "sh": "bash", "shell": "bash"}
SHELL_KINDS = ("console", "bash", "file")

# The whole info string, attributes included: Sybil's stock lexer wants the
# language alone on the line and silently drops `python title="x.py"`.
LEXER = RawFencedCodeBlockLexer(
    info_pattern=re.compile(r"(?P<info>[^\n]*)$\n", re.MULTILINE),
    mapping={"info": "info", "source": "source"},
)


@dataclass(frozen=True)
class BlockKind:
    """The verdict for one fenced block.

    ``kind`` is one of ``python``, ``output``, ``gpu``, ``console``, ``bash``,
    ``file``, ``data``, ``illustration`` or ``unmarked`` (an error the page
    author must fix).
    """

    kind: str
    language: str
    note: str = ""


def language_of(info: str) -> str:
    """The language of a fence's info string: its first word, without ``{.`` decoration.

    >>> language_of('python title="pool.py" hl_lines="2 3"')
    'python'
    >>> language_of("{.yaml .no-copy}")
    'yaml'
    """
    words = info.strip().lstrip("{").split()
    return words[0].lstrip(".").rstrip("}").lower() if words else ""


def marker_before(text: str, start: int) -> tuple[str, str] | None:
    """The ``<!-- block: KIND note -->`` marker on the line just above offset ``start``."""
    line_start = text.rfind("\n", 0, start) + 1
    if line_start == 0:
        return None
    previous_start = text.rfind("\n", 0, line_start - 1) + 1
    match = MARKER.match(text[previous_start : line_start - 1])
    if match is None:
        return None
    return match["kind"], match["note"].strip()


def classify(info: str, marker: tuple[str, str] | None) -> BlockKind:
    """Decide how the test suite treats a block, from its info string and marker."""
    language = language_of(info)
    if marker is not None:
        kind, note = marker
        if kind not in MARKER_KINDS:
            return BlockKind("unmarked", language, f"unknown marker kind {kind!r}")
        if kind == "gpu" and language != "python":
            return BlockKind("unmarked", language, "the gpu marker applies to python blocks only")
        if kind == "run":
            if language not in SHELL_LANGUAGES:
                return BlockKind("unmarked", language, "the run marker applies to shell blocks")
            return BlockKind(SHELL_LANGUAGES[language], language, note)
        if kind == "file" and not note:
            return BlockKind("unmarked", language, "the file marker needs a name")
        return BlockKind(kind, language, note)
    if language in SHELL_LANGUAGES:
        return BlockKind(SHELL_LANGUAGES[language], language)
    if language == "python":
        return BlockKind("python", language)
    if language == "output":
        return BlockKind("output", language)
    return BlockKind("unmarked", language)


def census(document: Document) -> Iterator[tuple[Region, BlockKind]]:
    """Every fenced block of a page with its verdict, in page order."""
    for region in LEXER(document):
        marker = marker_before(document.text, region.start)
        yield region, classify(region.lexemes["info"], marker)


def item_id(page: str, document: Document, region: Region) -> str:
    """The pytest id sybil gives ``region`` of ``page`` (a path relative to the checkout)."""
    line = document.text.count("\n", 0, region.start) + 1
    column = region.start - document.text.rfind("\n", 0, region.start)
    return f"{page}::sybil:docs,line:{line},column:{column}"


@dataclass(frozen=True)
class Block:
    """One fenced block as a page shows it: info string, text, and the harness's verdict."""

    info: str
    source: str
    verdict: BlockKind


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of the page at ``page``, in page order."""
    document = Document(page.read_text(encoding="utf-8"), str(page))
    return [
        Block(str(region.lexemes["info"]), str(region.lexemes["source"]), verdict)
        for region, verdict in census(document)
    ]


def runs_shell(page: Path) -> bool:
    """Does the page type into a terminal? Its commands may `ray stop` the whole machine."""
    return any(block.verdict.kind in SHELL_KINDS for block in blocks_of(page))


def twin(page: Path) -> Path:
    """The other language's page: ``a.md`` <-> ``a.zh.md``."""
    if page.name.endswith(".zh.md"):
        return page.with_name(page.name[: -len(".zh.md")] + ".md")
    return page.with_name(page.name[: -len(".md")] + ".zh.md")


# --- the two languages' blocks --------------------------------------------------------------

COMMENT = {"python": "#", "bash": "#", "sh": "#", "shell": "#", "text": None}
QUOTED = re.compile(r'"[^"]*"')
BRACKETED = re.compile(r"\[[^\[\]]*\]|\([^()]*\)|\{[^{}]*\}|\|[^|]*\|")


def mermaid_skeleton(source: str) -> list[str]:
    """A Mermaid diagram with its words taken out: node ids, arrows and keywords remain.

    Quoted text, bracketed labels, edge labels, a participant's ``as`` name and the
    message after ``:`` are words a translation changes; what is left is the structure.

    >>> mermaid_skeleton('flowchart LR\\n  A["driver"] -- "calls" --> B(("worker"))')
    ['flowchart LR', 'A -- --> B']
    >>> mermaid_skeleton('sequenceDiagram\\n  participant D as Driver (one process)\\n  D->>W: run')
    ['sequenceDiagram', 'participant D', 'D->>W']
    """
    skeleton = []
    for line in source.splitlines():
        line = QUOTED.sub("", line.split("%%")[0])
        line = re.sub(r"^(\s*(?:participant|actor)\s+\w+)\s+as\s+.*$", r"\1", line)
        line = line.split(":")[0]
        while (shorter := BRACKETED.sub("", line)) != line:
            line = shorter
        if words := line.split():
            skeleton.append(" ".join(words))
    return skeleton


def without_comments(source: str, language: str) -> list[str]:
    """The lines of an illustration with comments and trailing blanks removed.

    Text diagrams (``text``) are compared by their number of lines: their words may be
    translated, and a translation changes widths.
    """
    mark = COMMENT.get(language, "#")
    if mark is None:
        return [""] * len(source.rstrip("\n").splitlines())
    kept = []
    for line in source.splitlines():
        code = line.split(mark)[0].rstrip() if mark in line else line.rstrip()
        if code:
            kept.append(code)
    return kept


def twin_mismatch(english: Block, chinese: Block) -> str | None:
    """Why a Chinese block does not agree with its English twin (None: it agrees).

    Blocks that run (python, output, console, bash, file, data, gpu) must be byte-identical.
    A Mermaid diagram may translate its labels, keeping the same nodes and edges; another
    illustration may translate its comments (or, for ``text``, its words), keeping its lines.
    """
    if english.verdict.kind != chinese.verdict.kind:
        return f"it is a {chinese.verdict.kind} block, its twin a {english.verdict.kind} block"
    if english.verdict.kind != "illustration":
        if (english.info, english.source) != (chinese.info, chinese.source):
            return "blocks that run must be identical in both languages (this one ran in English)"
        return None
    language = english.verdict.language
    if language != chinese.verdict.language:
        return f"an illustration in {chinese.verdict.language!r}, its twin in {language!r}"
    if language == "mermaid":
        theirs, ours = mermaid_skeleton(english.source), mermaid_skeleton(chinese.source)
        if ours != theirs:
            first = next(
                (f"{o!r} vs {t!r}" for o, t in zip(ours, theirs, strict=False) if o != t),
                f"{len(ours)} vs {len(theirs)} lines",
            )
            return (
                f"the diagram's nodes or edges differ from its twin's ({first}); "
                "translate the labels only"
            )
        return None
    if without_comments(english.source, language) != without_comments(chinese.source, language):
        return "the illustration differs from its twin in more than its comments"
    return None
