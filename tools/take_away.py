"""Take a page away: a docs page's python blocks as one script and as one notebook.

A block from the middle of a page depends on the blocks above it: the test suite runs
all python blocks of a page in order, in one namespace (``tests/docblocks/plugin.py``).
So a reader who wants to run a page gets the whole page, generated from the same
blocks at build time, in the page's language:

* ``script_text(page)``: a ``.py`` file. The python blocks in page order, each after a
  short comment from the prose before it (the headings it passes, and the first sentences
  of the paragraph that leads into the block, after the last heading); each output block
  as a comment under its block.
* ``notebook(page)``: an ``.ipynb`` notebook (nbformat 4). Each stretch of prose is a
  markdown cell, each python block a code cell. The cells carry no outputs, so the
  notebook is a fresh one: a reader can tell what they ran from what they did not, and
  the page's ``...`` wildcards are never shown as if a run had printed them. What the
  page shows as output comes in the next markdown cell, under "Output", to compare with.

The code is byte-identical in both languages (the two pages carry identical code
blocks); only the prose, the comments and the labels are in the page's language. If a
page imports ``ray``, both end with ``ray.shutdown()``, guarded by
``ray.is_initialized()`` (most pages shut Ray down themselves; a shutdown twice would
not hurt, but the guard says why the line is there).

Which pages get the downloads (``has_downloads``; ``tests/test_take_away.py`` checks
the rule on every page):

1. A page with executed python blocks (plain ``python`` blocks, or ``gpu`` ones) and no
   shell blocks gets both downloads. This is every page of Ray Core, the veRL chapter,
   Inside Ray, Who does what, the RLHF chapter, the errata and the home page.
2. A page whose code is shell commands (``console``/``bash`` blocks, with ``file``
   blocks that its commands run: docs/cluster/*, docs/troubleshooting/*) gets none.
   Its python blocks are file blocks: each is already a whole program, which the reader
   saves under the name the page gives and runs with the page's commands, against the
   cluster those commands start. A script of them would be a script of commands.
3. A page that mixes executed python blocks with shell blocks is refused
   (``TakeAwayError``, which fails the site build): its python would depend on what
   only its commands create (a cluster, files), so neither download could run alone.
   Move the python into file blocks run by the commands, or the commands out of the page.
4. Any other page (no code, or only illustrations and data) gets none.

Blocks that do not run on a plain machine: a ``gpu`` block (the suite runs it only
where CUDA is present) is left out of the script as commented-out lines under a note,
to uncomment on a GPU machine, and goes into the notebook as a fenced block in a
markdown cell, so that "Run all" works on a CPU machine too. ``illustration`` and
``data`` blocks are shown, not run: the notebook keeps them in its markdown cells, the
script leaves them out.

The suite runs every page as its script (``tests/docblocks/page_scripts.py``), with
``script_text(..., markers=True)``, and, where CUDA is present, ``gpu=True``, which
leaves the gpu blocks in. The blocks are read by ``page_blocks.py``, the one page model;
``tools/take_away_hook.py`` is the MkDocs hook that writes the files and links them.
"""

from __future__ import annotations

import ast
import functools
import os
import posixpath
import re
import sys
import textwrap
import unicodedata
from pathlib import Path

# tools/ is on sys.path wherever this module is used (page_blocks.py says how).
import page_blocks
from page_blocks import EXECUTED_PYTHON, Block, language

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

# The checkout this module is in: its constraints.txt and pyproject.toml pin the installs.
ROOT = Path(__file__).resolve().parents[1]
RAY_IMPORT = re.compile(r"^(import ray\b|from ray\b)", re.M)
# The printed line between two blocks in the test-only variant (``markers=True``).
MARKER_LINE = "@@take-away block {}@@"

LABELS = {
    "en": {
        "intro": (
            "The python blocks of {src}, in page order, as one {what}. Generated from the "
            "page when the site is built; the page is the source."
        ),
        "run": "Run it with `python {name}`.",
        "install": "First install what it imports, in a fresh virtualenv (Python >= 3.10):",
        "output": "Output:",
        "output_note": "Output (`...` stands for text that differs from run to run):",
        "gpu": (
            "Needs a CUDA GPU: the test suite runs this block only where CUDA is present. "
            "Left out here; uncomment it on a GPU machine."
        ),
        "gpu_notebook": (
            "Needs a CUDA GPU: the test suite runs this block only where CUDA is present. "
            "On a GPU machine, paste it into a code cell."
        ),
        "shutdown": "Stop Ray if the page left it running.",
        "script": "script",
        "notebook": "notebook",
    },
    "zh": {
        "intro": (
            "{src} 的全部 python 代码块，按页面顺序合成一个{what}。构建站点时由页面生成，"
            "以页面为准。"
        ),
        "run": "用 `python {name}` 运行。",
        "install": "先在一个新的虚拟环境（Python >= 3.10）中安装它导入的包：",
        "output": "输出：",
        "output_note": "输出（`...` 代表每次运行都不同的内容）：",
        "gpu": (
            "需要 CUDA GPU：测试只在有 CUDA 的机器上运行这个代码块。"
            "此处已注释掉，在 GPU 机器上取消注释即可。"
        ),
        "gpu_notebook": (
            "需要 CUDA GPU：测试只在有 CUDA 的机器上运行这个代码块。"
            "在 GPU 机器上把它粘贴到代码单元格中运行。"
        ),
        "shutdown": "如果页面没有关闭 Ray，在这里关闭。",
        "script": "脚本",
        "notebook": " notebook",
    },
}
# How much of the lead-in paragraph a script comment keeps.
COMMENT_CHARS = 240
COMMENT_WIDTH = 88
CLOSING = set("，。、；：！？）》」』”’")


# What a download imports -> the pip requirements that provide it, pinned from
# constraints.txt. reference_impl comes from the repository (REPO_URL, which the Pages
# workflow sets; a local build names the checkout it was built from) with the pinned
# versions of its own dependencies (pyproject.toml). veRL and TransferQueue install without
# their GPU stack (--no-deps), after the CPU-side packages of reference_impl's `verl` extra.
REQUIREMENTS = {
    "hydra": "hydra-core",
    "numpy": "numpy",
    "omegaconf": "omegaconf",
    "packaging": "packaging",
    "psutil": "psutil",
    "ray": "ray[default]",
    "tensordict": "tensordict",
    "torch": "torch",
    "yaml": "PyYAML",
}
WITHOUT_DEPS = {"verl": "verl", "transfer_queue": "TransferQueue"}


class TakeAwayError(ValueError):
    """A page whose downloads cannot be made; the message says why and what to change."""


def has_downloads(page: Path) -> bool:
    """Does the page get a script and a notebook? The rule is the module docstring's.

    Raises:
        TakeAwayError: the page mixes executed python blocks with shell blocks (rule 3).
    """
    kinds = {block.kind for block in page_blocks.blocks(page)}
    python = kinds & set(EXECUTED_PYTHON)
    shell = kinds & {"console", "bash", "file"}
    if python and shell:
        raise TakeAwayError(
            f"{page.name} has executed python blocks and shell blocks: its python would "
            "need what only its commands create, so no script or notebook of it can run "
            "alone. Move the python into file blocks (<!-- block: file NAME -->) that the "
            "commands run, or the commands to another page (tools/take_away.py, rule 3)."
        )
    return bool(python)


def download_name(page: Path, docs: Path) -> str:
    """The downloads' file stem: the page's name, or its folder's for an index page.

    >>> download_name(Path("docs/ray-core/tasks.zh.md"), Path("docs"))
    'tasks'
    >>> download_name(Path("docs/ray-core/index.md"), Path("docs"))
    'ray-core'
    >>> download_name(Path("docs/index.md"), Path("docs"))
    'handbook'
    """
    stem = page.name.removesuffix(".md").removesuffix(".zh")
    if stem != "index":
        return stem
    folder = page.parent.relative_to(docs)
    return folder.name if folder.parts else "handbook"


def source_label(page: Path, docs: Path) -> str:
    return "docs/" + page.relative_to(docs).as_posix()


def title(text: str) -> str:
    """The page's first ``# `` heading, without attributes."""
    match = re.search(r"^# +(.+?)(?: *\{[^}]*\})? *$", text, re.M)
    return match[1] if match else ""


# ---------------------------------------------------------------------------------------
# Prose: plain text for comments, cleaned Markdown for notebook cells.

LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<url>[^)\s]*)\)")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
ATTRIBUTES = re.compile(r" *\{[#.:][^}]*\}")
ADMONITION = re.compile(r'^(?P<kind>!!!|\?\?\?\+?) +(?P<type>\w+)(?: +"(?P<title>[^"]*)")? *$')
SENTENCE = re.compile(r"(?<=[.!?:])\s+(?=[A-Z`(\"])|(?<=[。！？：])")


def plain(text: str) -> str:
    """Markdown inline text as plain text: link targets, emphasis and attributes gone."""
    text = LINK.sub(lambda m: m["text"], text)
    text = re.sub(r"\*\*(.+?)\*\*", r"\1", text)
    text = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"\1", text)
    text = ATTRIBUTES.sub("", text)
    return " ".join(text.split())


def paragraphs(prose: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n[ \t]*\n", HTML_COMMENT.sub("", prose)) if p.strip()]


def is_text_paragraph(paragraph: str) -> bool:
    """A paragraph of sentences: not a heading, table, list, admonition or quote."""
    return not re.match(r"(#|\||[-*+] |\d+\. |!!!|\?\?\?|>|===|<)", paragraph)


def shorten(text: str, limit: int = COMMENT_CHARS) -> str:
    """The first sentences of ``text``, at most ``limit`` characters, at least one sentence."""
    sentences = [s for s in SENTENCE.split(text) if s]
    kept = sentences[0]
    for sentence in sentences[1:]:
        joined = kept + ("" if re.search(r"[。！？：]$", kept) else " ") + sentence
        if len(joined) > limit:
            break
        kept = joined
    return kept


def display_width(text: str) -> int:
    """Columns a terminal gives ``text``: two for a wide (CJK) character."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def wrap(text: str, width: int) -> list[str]:
    """``textwrap.wrap`` by display width: Chinese text breaks between any two characters."""
    if display_width(text) == len(text):
        return textwrap.wrap(text, width, break_on_hyphens=False)
    # A wide character is a token of its own; Latin words and code stay whole.
    tokens = re.findall(r"[^\s\u2e80-\uffef]+|[\u2e80-\uffef]|\s+", text)
    lines, line = [], ""
    for token in tokens:
        # A line may end past the width rather than start with closing punctuation.
        if line and display_width(line + token.rstrip()) > width and token not in CLOSING:
            lines.append(line.rstrip())
            line = "" if token.isspace() else token
        else:
            line += token
    return [*lines, line.rstrip()] if line.strip() else lines


def comment_lines(text: str, width: int = COMMENT_WIDTH) -> list[str]:
    return ["# " + line for line in wrap(text, width - 2)]


def prose_comment(prose: str) -> list[str]:
    """A short comment for the prose before a block: its headings, then its lead-in."""
    lines = []
    lead_in = None  # the last paragraph of sentences after the last heading
    for part in paragraphs(prose):
        heading = re.match(r"^(#{2,6}) +(.+)$", part.splitlines()[0])
        if heading:
            lines.append(f"# {heading[1]} {plain(heading[2])}")
            lead_in = None
        elif is_text_paragraph(part):
            lead_in = part
    if lead_in is not None:
        lines += comment_lines(shorten(plain(lead_in)))
    return lines


def url_path(src: str) -> str:
    """The URL path (from the site root, language prefix excluded) of a page's source path.

    >>> url_path("ray-core/tasks.md"), url_path("ray-core/index.md"), url_path("index.md")
    ('ray-core/tasks/', 'ray-core/', '')
    """
    stem = src.removesuffix(".md").removesuffix(".zh")
    if stem == "index" or stem.endswith("/index"):
        stem = stem.removesuffix("index").rstrip("/")
    return stem + "/" if stem else ""


def absolute_links(markdown: str, page_src: str, page_url: str | None) -> str:
    """Relative links of the page made absolute, from ``page_url`` (the page's own URL).

    A notebook is read away from the site, where a link like ``resources.md`` leads
    nowhere. Without ``page_url`` (a page not built), links keep only their text.
    """

    def replace(match: re.Match) -> str:
        text, url = match["text"], match["url"]
        if re.match(r"[a-z]+:", url):
            return match[0]
        if page_url is None:
            return text
        path, _, anchor = url.partition("#")
        root = page_url.removesuffix(url_path(page_src))
        if not path:
            target = page_url
        elif path.endswith(".md"):
            target = root + url_path(
                posixpath.normpath(posixpath.join(posixpath.dirname(page_src), path))
            )
        else:
            target = root + posixpath.normpath(posixpath.join(url_path(page_src), path))
        return f"[{text}]({target}{'#' + anchor if anchor else ''})"

    return LINK.sub(replace, markdown)


def notebook_markdown(prose: str, page_src: str, page_url: str | None) -> str:
    """Page Markdown as notebook Markdown: no block markers or heading attributes,
    admonitions as quotes (Jupyter has none), links absolute."""
    out: list[str] = []
    in_admonition = False
    for line in HTML_COMMENT.sub("", prose).splitlines():
        admonition = ADMONITION.match(line)
        if admonition:
            label = admonition["title"] or admonition["type"].capitalize()
            out.append(f"> **{label}**")
            in_admonition = True
            continue
        if in_admonition:
            if line.startswith("    ") or not line.strip():
                out.append(("> " + line[4:]).rstrip())
                continue
            in_admonition = False
            while out and out[-1] == ">":
                out.pop()
            out.append("")
        out.append(ATTRIBUTES.sub("", line) if line.startswith("#") else line)
    text = "\n".join(out).strip("\n")
    text = re.sub(r"\n{3,}", "\n\n", text)
    return absolute_links(text, page_src, page_url)


# ---------------------------------------------------------------------------------------
# The two downloads.


def pieces(page: Path) -> list[str | Block]:
    """The page's prose and blocks, checked: only pages with downloads have pieces."""
    if not has_downloads(page):
        raise TakeAwayError(f"{page.name} gets no downloads (tools/take_away.py, the rule)")
    return list(page_blocks.parse(page.read_text("utf-8")))


def uses_ray(items: list[str | Block]) -> bool:
    return any(
        isinstance(item, Block) and item.kind == "python" and RAY_IMPORT.search(item.source)
        for item in items
    )


def imported(items: list[str | Block]) -> set[str]:
    """Top-level names of the modules that the page's python and gpu blocks import."""
    names = set()
    for item in items:
        if isinstance(item, Block) and item.kind in EXECUTED_PYTHON:
            for node in ast.walk(ast.parse(item.source)):
                if isinstance(node, ast.Import):
                    names |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names)


@functools.cache
def pinned_versions(root: Path) -> tuple[dict[str, str], dict]:
    """``constraints.txt`` as {normalised name: version}, and pyproject.toml's ``[project]``;
    read once per build, not once per download."""
    pins = {}
    for line in (root / "constraints.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        if version:
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins, tomllib.loads((root / "pyproject.toml").read_text())["project"]


def install_commands(page: Path, docs: Path) -> list[str]:
    """The ``pip install`` commands that give a fresh virtualenv what the page imports.

    Versions are the ones the suite ran the page with (``constraints.txt``).

    Raises:
        TakeAwayError: the page imports a package that :data:`REQUIREMENTS` does not name.
    """
    pins, project = pinned_versions(ROOT)

    def pinned(requirement: str) -> str:
        name = re.split(r"[\[<>=;]", requirement, maxsplit=1)[0].strip()
        version = pins.get(name.lower().replace("_", "-"))
        return f'"{requirement}=={version}"' if version else f'"{requirement}"'

    names = imported(pieces(page))
    unknown = sorted(names - set(REQUIREMENTS) - set(WITHOUT_DEPS) - {"reference_impl"})
    if unknown:
        raise TakeAwayError(
            f"{page.name} imports {unknown}: add the pip requirement that provides each to "
            "REQUIREMENTS in tools/take_away.py"
        )
    wanted = [REQUIREMENTS[name] for name in sorted(names) if name in REQUIREMENTS]
    extras = []
    if "reference_impl" in names:
        wanted += [req for req in project["dependencies"]]
        if any(
            isinstance(item, Block) and "reference_impl.rlhf" in item.source
            for item in pieces(page)
        ):
            extras.append("rlhf")
    without_deps = [WITHOUT_DEPS[name] for name in sorted(names) if name in WITHOUT_DEPS]
    if without_deps:
        wanted += project["optional-dependencies"]["verl"]
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    first = list(dict.fromkeys(pinned(req) for req in wanted))
    if "reference_impl" in names:
        # file://localhost/...: pip before 23.3 rejects the empty host of file:///...
        url = os.environ.get("REPO_URL") or f"file://localhost{ROOT.as_posix()}"
        extra = f"[{','.join(extras)}]" if extras else ""
        first.append(f'"reference_impl{extra} @ git+{url}"')
    commands = ["pip install " + " ".join(first)] if first else []
    if without_deps:
        commands.append("pip install --no-deps " + " ".join(pinned(n) for n in without_deps))
    return commands


def script_text(page: Path, docs: Path, *, markers: bool = False, gpu: bool = False) -> str:
    """The page as a Python script.

    The two keywords are for the test suite (``tests/docblocks/page_scripts.py``); readers
    get the script without them.

    * ``markers=True``: before each python or gpu block that the script runs, and at the
      end, the script prints ``MARKER_LINE`` with the block's number (from 1, over the
      page's python and gpu blocks together), so that its stdout can be cut into what
      each block printed. The block's code starts on the line after its marker.
    * ``gpu=True``: the gpu blocks run in their places instead of being commented out
      (the suite sets it where CUDA is present).

    Raises:
        TakeAwayError: the page gets no downloads (see the module docstring).
    """
    items = pieces(page)
    words = LABELS[language(page)]
    name = download_name(page, docs) + ".py"
    text = page.read_text("utf-8")
    out = [f"# {title(text)}", "#"]
    intro = words["intro"].format(src=source_label(page, docs), what=words["script"])
    space = "" if language(page) == "zh" else " "
    out += comment_lines(intro + space + words["run"].format(name=name))
    commands = install_commands(page, docs)
    if commands:
        out += ["#"] + comment_lines(words["install"]) + [f"#   {c}" for c in commands]
    prose = ""
    previous: Block | None = None
    number = 0
    for item in items:
        if isinstance(item, str):
            prose += "\n\n" + item
            continue
        if item.kind == "output" and previous is not None:
            out.append("# " + words["output"])
            out += [("#   " + line).rstrip() for line in item.source.splitlines()]
        elif item.kind in EXECUTED_PYTHON:
            number += 1
            out += ["", ""] + prose_comment(prose)
            if item.kind == "python" or gpu:
                if markers:
                    out.append(f"print({MARKER_LINE.format(number)!r}, flush=True)")
                out += item.source.rstrip("\n").splitlines()
            else:
                out += comment_lines(words["gpu"])
                out += [("# " + line).rstrip() for line in item.source.rstrip("\n").splitlines()]
            prose = ""
        previous = item if item.kind in EXECUTED_PYTHON else None
    if uses_ray(items):
        out += ["", "", "# " + words["shutdown"]]
        if markers:
            out.append(f"print({MARKER_LINE.format('end')!r}, flush=True)")
        out += ["if ray.is_initialized():", "    ray.shutdown()"]
    elif markers:
        out.append(f"print({MARKER_LINE.format('end')!r}, flush=True)")
    return "\n".join(out) + "\n"


def notebook(page: Path, docs: Path, page_url: str | None = None):
    """The page as a Jupyter notebook (an ``nbformat`` v4 node, validated).

    ``page_url``: the page's absolute URL on the site, to make its links absolute (the
    hook passes it); without it links keep their text only.

    Raises:
        TakeAwayError: the page gets no downloads (see the module docstring).
        nbformat.ValidationError: the notebook does not follow the nbformat 4 schema.
    """
    import nbformat  # only here: the page's script needs nothing of this module

    items = pieces(page)
    words = LABELS[language(page)]
    src = page.relative_to(docs).as_posix()
    name = download_name(page, docs) + ".ipynb"
    cells: list = []
    markdown: list[str] = []

    def flush_markdown() -> None:
        text = "\n\n".join(part for part in markdown if part.strip())
        if text:
            cells.append(nbformat.v4.new_markdown_cell(text))
        markdown.clear()

    intro = words["intro"].format(src=f"`{source_label(page, docs)}`", what=words["notebook"])
    commands = install_commands(page, docs)
    if commands:  # the first cell: what a fresh kernel needs before anything else runs
        # Code only, no comment: both languages' notebooks carry the same code cells.
        cells.append(nbformat.v4.new_code_cell("\n".join(f"%{c}" for c in commands)))
    previous: Block | None = None
    for index, item in enumerate(items):
        if isinstance(item, str):
            text = notebook_markdown(item, src, page_url)
            if index == 0:  # the page's title, then where the notebook comes from
                heading, _, rest = text.partition("\n")
                note = f"*{intro}*" if language(page) == "en" else f"**{intro}**"
                text = f"{heading}\n\n{note}\n\n{rest.strip()}"
            markdown.append(text)
        elif item.kind == "python":
            flush_markdown()
            cells.append(nbformat.v4.new_code_cell(item.source.rstrip("\n")))
        elif item.kind == "gpu":
            markdown.append(f"**{words['gpu_notebook']}**\n\n```python\n{item.source}```")
        elif item.kind == "output" and previous is not None:
            label = words["output_note"] if "..." in item.source else words["output"]
            markdown.append(f"{label}\n\n```text\n{item.source}```")
        else:  # illustration, data: shown, not run
            markdown.append(item.text.rstrip("\n"))
        previous = item if isinstance(item, Block) and item.kind in EXECUTED_PYTHON else None
    if uses_ray(items):
        markdown.append(words["shutdown"])
        flush_markdown()
        cells.append(nbformat.v4.new_code_cell("if ray.is_initialized():\n    ray.shutdown()"))
    flush_markdown()
    for number, cell in enumerate(cells):  # stable ids: the same page gives the same file
        cell["id"] = f"{name.removesuffix('.ipynb')}-{number}"
    result = nbformat.v4.new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
    )
    nbformat.validate(result)
    return result


def notebook_text(page: Path, docs: Path, page_url: str | None = None) -> str:
    import nbformat

    return nbformat.writes(notebook(page, docs, page_url)) + "\n"
