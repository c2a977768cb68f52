"""What kind is each fenced block on a docs page?

Every fenced block under ``docs/`` must be accounted for. The rules a page
author follows (README.md, "Adding a page"):

* ``python`` blocks run, in order, in one namespace per page.
* An ``output`` block right after a ``python`` block must equal what that
  block printed. ``...`` matches any text (for ids, timings and ratios).
* A block preceded by ``<!-- block: gpu -->`` runs only where CUDA is present;
  elsewhere it is reported as skipped with that reason.
* ``console`` blocks (``$ command`` and the output shown under it) and
  ``bash`` blocks run in one terminal per page (``shell.py``);
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
such blocks; this module does not, and ``tests/test_docblocks_audit.py``
checks that every block MkDocs renders is one that this module classified.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARKER = re.compile(r"^[ \t]*<!--\s*block:\s*(?P<kind>[a-z-]+)(?P<note>[^>]*?)\s*-->[ \t]*$")
MARKER_KINDS = ("gpu", "data", "illustration", "run", "file")
DATA_LANGUAGES = ("yaml", "yml", "json", "toml")
# Shell blocks run in a per-page terminal (tests/docblocks/shell.py).
SHELL_LANGUAGES = {"console": "console", "bash": "bash", "sh": "bash", "shell": "bash"}


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
