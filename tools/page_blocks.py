"""The page model: what a fenced block on a docs page is, and which page is its twin.

Everything that reads pages reads them here: the test suite (``tests/docblocks/plugin.py``
makes each block a pytest item), the site build (``take_away.py``'s downloads and the
hooks) and the GPU runner (``tools/gpu_kit/checks.py``: which pages need CUDA).
It needs only the standard library, so the site build needs neither pytest nor Sybil.
``tools/`` is on ``sys.path`` wherever it is used: MkDocs puts a hook's folder there,
pytest has ``pythonpath = ["tools"]`` (pyproject.toml), checks.py adds it.

The rules a page author follows (CONTRIBUTING.md, "Adding a page"):

* ``python`` blocks run, in order, as one script per page (the one a reader downloads).
* An ``output`` block right after a ``python`` (or ``bash``) block must match what that
  block printed (``tests/docblocks/match.py``: ``...`` matches any text, ``<n>`` a number).
* A python block preceded by ``<!-- block: gpu -->`` runs only where CUDA is present.
* ``console`` blocks (``$ command`` and the output under it) and ``bash`` blocks run in
  one terminal per page; ``<!-- block: run timeout=300 retry=20 -->`` tunes their limits
  (``needs=VAR,VAR``: skipped where a variable is unset).
* ``<!-- block: file NAME -->`` writes a block to ``NAME`` in that terminal's directory.
* Any other block needs a marker on the line above it: ``<!-- block: data -->`` (YAML,
  JSON and TOML are parsed) or ``<!-- block: illustration -->`` (shown, not run). Free
  text may follow the kind: ``<!-- block: illustration (needs 8 GPUs) -->``.

The info string may carry attributes (``python title="x.py" hl_lines="2"``); the
language is its first word. A fence opens with three or more backticks or tildes,
perhaps indented (content tabs), and closes with a line of the same character, at least
as long, at the same indentation, with no info string (CommonMark's rule, and Sybil's).

Languages: ``page.md`` (English) and ``page.zh.md`` (Chinese) are twins (:func:`twin`).
Their blocks agree in order (:func:`twin_mismatch`): code that runs is byte-identical, so
the snippet a reader copies from either language is the one that ran; a diagram or an
illustration may be translated, keeping its structure.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

MARKER = re.compile(r"^[ \t]*<!--\s*block:\s*(?P<kind>[a-z-]+)(?P<note>[^>]*?)\s*-->[ \t]*$")
MARKER_KINDS = ("gpu", "data", "illustration", "run", "file")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
DATA_LANGUAGES = ("yaml", "yml", "json", "toml")
# Shell blocks run in a per-page terminal (tests/docblocks/shell_blocks.py).
SHELL_LANGUAGES = {"console": "console", "bash": "bash", "sh": "bash", "shell": "bash"}
SHELL_KINDS = ("console", "bash", "file")
EXECUTED_PYTHON = ("python", "gpu")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page.

    ``kind`` is ``python``, ``output``, ``gpu``, ``console``, ``bash``, ``file``, ``data``,
    ``illustration``, or ``unmarked`` (an error the page's author must fix; ``note`` then
    says why). ``note`` is otherwise the marker's text after its kind (a file's name, a
    shell block's options). ``source`` is the text between the fences with the fence's
    indentation removed; ``text`` the block as written, fences included. ``start`` is the
    offset of the opening fence's line in the page, ``end`` the offset just past the
    closing fence, and ``line`` (from 1) the opening fence's line.
    """

    info: str
    source: str
    kind: str
    language: str
    note: str
    text: str
    start: int
    end: int
    line: int


def language_of(info: str) -> str:
    """The language of a fence's info string: its first word, without ``{.`` decoration.

    >>> language_of('python title="pool.py" hl_lines="2 3"')
    'python'
    >>> language_of("{.yaml .no-copy}")
    'yaml'
    """
    words = info.strip().lstrip("{").split()
    return words[0].lstrip(".").rstrip("}").lower() if words else ""


def classify(info: str, marker: tuple[str, str] | None) -> tuple[str, str]:
    """``(kind, note)`` of a block, from its info string and the marker above it, if any.

    >>> classify("python", ("gpu", ""))
    ('gpu', '')
    >>> classify("text", None)
    ('unmarked', '')
    """
    language = language_of(info)
    if marker is not None:
        kind, note = marker
        if kind not in MARKER_KINDS:
            return "unmarked", f"unknown marker kind {kind!r}"
        if kind == "gpu" and language != "python":
            return "unmarked", "the gpu marker applies to python blocks only"
        if kind == "run":
            if language not in SHELL_LANGUAGES:
                return "unmarked", "the run marker applies to shell blocks"
            return SHELL_LANGUAGES[language], note
        if kind == "file" and not note:
            return "unmarked", "the file marker needs a name"
        return kind, note
    if language in SHELL_LANGUAGES:
        return SHELL_LANGUAGES[language], ""
    if language in ("python", "output"):
        return language, ""
    return "unmarked", ""


@functools.cache
def parse(text: str) -> tuple[str | Block, ...]:
    """A page's text as prose (``str``) and blocks (:class:`Block`), in order.

    Whitespace-only prose is left out. A marker line right above a fence belongs to the
    block, not to the prose. Cached: a run parses each page's text once, whoever asks.
    """
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    items: list[str | Block] = []
    prose: list[str] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i].rstrip("\n"))
        if opening is None:
            prose.append(lines[i])
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        end = i + 1
        while end < len(lines):
            closing = FENCE.match(lines[end].rstrip("\n"))
            if (
                closing
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and len(closing["indent"]) == len(indent)
                and not closing["info"].strip()
            ):
                break
            end += 1
        marker = MARKER.match(prose[-1].rstrip("\n")) if prose else None
        if marker is not None:
            prose.pop()
        info = opening["info"]
        kind, note = classify(info, (marker["kind"], marker["note"].strip()) if marker else None)
        last = min(end, len(lines) - 1)  # an unclosed fence runs to the end of the page
        items.append("".join(prose))
        items.append(
            Block(
                info=info,
                source="".join(line[len(indent) :] for line in lines[i + 1 : end]),
                kind=kind,
                language=language_of(info),
                note=note,
                text="".join(lines[i : end + 1]),
                start=offsets[i],
                end=offsets[last] + len(lines[last].rstrip("\n")),
                line=i + 1,
            )
        )
        prose = []
        i = end + 1
    items.append("".join(prose))
    return tuple(item for item in items if not (isinstance(item, str) and not item.strip()))


def prose(text: str) -> str:
    """A page's text without its fenced blocks (and their markers), paragraphs kept apart."""
    return "\n\n".join(item for item in parse(text) if isinstance(item, str))


HEADING = re.compile(r"^(?P<level>#{1,6})[ \t]+[^\n]*?(?:\{#(?P<anchor>[\w-]+)\})?[ \t]*$", re.M)


def headings(text: str) -> list[tuple[int, int, str | None]]:
    """The page's Markdown headings outside fenced blocks: (offset, level, ``{#anchor}`` or None).

    A ``# comment`` line inside a code block is not a heading.
    """
    inside = [(item.start, item.end) for item in parse(text) if isinstance(item, Block)]
    return [
        (match.start(), len(match["level"]), match["anchor"])
        for match in HEADING.finditer(text)
        if not any(start <= match.start() < end for start, end in inside)
    ]


def section(text: str, anchor: str) -> str:
    """The section whose heading carries ``{#anchor}``: from that heading up to the next
    heading of the same or a higher level (fewer ``#``), or the end of the page.

    Raises:
        KeyError: no heading of the page carries ``{#anchor}``.
    """
    found = headings(text)
    for index, (start, level, name) in enumerate(found):
        if name == anchor:
            end = next((at for at, lvl, _ in found[index + 1 :] if lvl <= level), len(text))
            return text[start:end]
    raise KeyError(f"no heading with {{#{anchor}}} on the page")


def section_end(text: str, offset: int) -> int:
    """Where the section that holds ``offset`` ends: the next heading of any level, or the
    end of the page."""
    return next((at for at, _, _ in headings(text) if at > offset), len(text))


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of the page at ``page``, in page order."""
    return [item for item in parse(page.read_text("utf-8")) if isinstance(item, Block)]


def runs_shell(page: Path) -> bool:
    """Does the page type into a terminal? Its commands may `ray stop` the whole machine."""
    return any(block.kind in SHELL_KINDS for block in blocks(page))


def item_id(page: str, block: Block) -> str:
    """The pytest id of ``block`` on ``page`` (a path relative to the checkout).

    Sybil names an item by its region's line and column; a block's region starts at the
    start of its fence's line, so the column is always 1.
    """
    return f"{page}::sybil:docs,line:{block.line},column:1"


# --- the two languages --------------------------------------------------------------------


def language(page: Path) -> str:
    """``"zh"`` for ``a.zh.md`` (or ``a.zh.ipynb``), else ``"en"``."""
    return "zh" if page.name.endswith((".zh.md", ".zh.ipynb")) else "en"


def twin(page: Path) -> Path:
    """The other language's page: ``a.md`` <-> ``a.zh.md``, ``a.ipynb`` <-> ``a.zh.ipynb``.

    >>> twin(Path("docs/ray-core/tasks.md")).name, twin(Path("tasks.zh.md")).name
    ('tasks.zh.md', 'tasks.md')
    """
    stem, suffix = page.name[: -len(page.suffix)], page.suffix
    if language(page) == "zh":
        return page.with_name(stem.removesuffix(".zh") + suffix)
    return page.with_name(f"{stem}.zh{suffix}")


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
    if english.kind != chinese.kind:
        return f"it is a {chinese.kind} block, its twin a {english.kind} block"
    if english.kind != "illustration":
        if (english.info, english.source) != (chinese.info, chinese.source):
            return "blocks that run must be identical in both languages (this one ran in English)"
        return None
    if english.language != chinese.language:
        return f"an illustration in {chinese.language!r}, its twin in {english.language!r}"
    if english.language == "mermaid":
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
    if without_comments(english.source, english.language) != without_comments(
        chinese.source, english.language
    ):
        return "the illustration differs from its twin in more than its comments"
    return None


# --- a page's script in parts ---------------------------------------------------------------

# A page may ask for its python blocks to be run as several scripts, one per group of `##`
# sections, so that a long page of independent entries (docs/errata.md) spreads over the
# suite's workers: the line `<!-- page: scripts=3 -->` anywhere in its prose.
SCRIPTS = re.compile(r"^<!--\s*page:\s*scripts\s*=\s*(?P<count>\d+)\s*-->[ \t]*$", re.M)
SECTION = re.compile(r"^## ", re.M)


def script_count(text: str) -> int:
    """How many scripts the page's python blocks run as: 1 unless the page says otherwise."""
    found = SCRIPTS.search(text)
    return max(1, int(found["count"])) if found else 1


def free_and_bound(source: str) -> tuple[set[str], set[str]]:
    """(names a piece of code reads but never binds, names it binds), by its syntax alone."""
    import ast
    import builtins

    try:
        tree = ast.parse(source)
    except SyntaxError:  # a block that shows a SyntaxError: it binds and reads nothing
        return set(), set()
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
    return read - bound - set(dir(builtins)), bound


@functools.cache
def script_parts(text: str) -> dict[int, int | None]:
    """Which script runs each python or gpu block (numbered from 1 in page order): block -> script.

    Script 0 alone for an ordinary page. On a page with ``<!-- page: scripts=N -->``:

    * the blocks before the first ``##`` heading (the page's set-up) run at the start of
      every script (``None``); their items report from script 0;
    * a ``##`` section's blocks run in one script, in page order;
    * a section that reads a name an earlier section binds (not the set-up: every script
      has that) runs in that section's script, so what it reads is there;
    * the groups of sections so formed are dealt to the N scripts, largest first (by lines
      of code) to the script with the fewest lines, keeping page order within each script.

    What a section needs from another one besides names (a named actor, a file) must be
    made in the section itself, or in the set-up.
    """
    count = script_count(text)
    sections: list[list[tuple[int, Block]]] = []  # [] for the set-up: blocks before any ##
    setup_bound: set[str] = set()  # what the set-up binds: every script has it
    number = 0
    started = False
    setup: list[int] = []
    for item in parse(text):
        if isinstance(item, str):
            if SECTION.search(item):
                started = True
                sections.append([])
            continue
        if item.kind not in EXECUTED_PYTHON:
            continue
        number += 1
        if started:
            sections[-1].append((number, item))
        else:
            setup.append(number)
            setup_bound |= free_and_bound(item.source)[1]
    parts: dict[int, int | None] = dict.fromkeys(range(1, number + 1), 0)
    if count == 1:
        return parts
    parts.update(dict.fromkeys(setup))
    sections = [section for section in sections if section]
    group = list(range(len(sections)))  # union-find over sections

    def find(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    binds: list[set[str]] = []
    for index, section in enumerate(sections):
        free, bound = free_and_bound("".join(block.source for _, block in section))
        for earlier in range(index):
            if (free - setup_bound) & binds[earlier]:
                group[find(index)] = find(earlier)
        binds.append(bound)
    groups: dict[int, list[int]] = {}
    for index in range(len(sections)):
        groups.setdefault(find(index), []).append(index)

    def size(indexes: list[int]) -> int:
        return sum(block.source.count("\n") for i in indexes for _, block in sections[i])

    load = [0] * count
    for indexes in sorted(groups.values(), key=lambda g: (-size(g), g[0])):
        script = load.index(min(load))
        load[script] += size(indexes)
        for i in indexes:
            for block_number, _ in sections[i]:
                parts[block_number] = script
    return parts


def script_of_line(text: str, line: int) -> int:
    """The script that reports the block whose fence is at ``line``: its python block's script
    (an output block: the python block above it; others: the section's, or 0)."""
    parts = script_parts(text)
    number, script = 0, 0
    for item in parse(text):
        if not isinstance(item, Block):
            continue
        if item.line > line:
            break
        if item.kind in EXECUTED_PYTHON:
            number += 1
            script = parts[number] or 0
    return script
