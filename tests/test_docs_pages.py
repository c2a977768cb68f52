"""Every page: all of its rendered code blocks are accounted for, and its two languages match.

The audit renders each page with the exact Markdown extensions of
``mkdocs.yml`` and counts the ``<pre>`` elements a reader would see. That
count must equal the number of fenced blocks the harness classified, so a
block that the harness's lexer missed (an odd fence, an indented code block,
an attribute-laden info string) fails here instead of going unchecked.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import markdown
import nbformat
import pytest
from mkdocs.config import load_config

from page_blocks import Block, blocks, prose, twin, twin_mismatch
from tests.docblocks.match import matches
from tests.docblocks.shell_blocks import parse_console

pytestmark = pytest.mark.reads_docs("docs")

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
EN_PAGES = sorted(p for p in DOCS.rglob("*.md") if not p.name.endswith(".zh.md"))
ALL_PAGES = sorted(DOCS.rglob("*.md"))


def rel(page: Path) -> str:
    return str(page.relative_to(DOCS))


@functools.cache
def site_config():
    """mkdocs.yml, read once: its Markdown extensions are what a reader's page is rendered with."""
    return load_config(str(REPO / "mkdocs.yml"))


@pytest.fixture(scope="module")
def renderer():
    config = site_config()
    return lambda text: markdown.markdown(
        text, extensions=config["markdown_extensions"], extension_configs=config["mdx_configs"]
    )


@pytest.mark.parametrize("page", ALL_PAGES, ids=rel)
def test_every_rendered_block_is_accounted_for(page, renderer):
    verdicts = blocks(page)
    rendered = len(re.findall(r"<pre[ >]", renderer(page.read_text(encoding="utf-8"))))
    assert rendered == len(verdicts), (
        f"{rel(page)}: MkDocs renders {rendered} code blocks but the harness found "
        f"{len(verdicts)}; a block is not being collected"
    )
    unmarked = [v for v in verdicts if v.kind == "unmarked"]
    assert not unmarked, f"{rel(page)}: unmarked blocks {unmarked}"


# The pages with no block that runs, each with the reason. Any other page must run code: a
# page whose blocks were all turned into illustrations (or lost to a lexer bug) fails below.
WITHOUT_CODE = {
    "api/dataproto.md": "generated from reference_impl's docstrings (mkdocstrings)",
    "api/index.md": "the API reference's contents",
    "api/parallelism.md": "generated from reference_impl's docstrings (mkdocstrings)",
    "api/rlhf.md": "generated from reference_impl's docstrings (mkdocstrings)",
    "api/single-controller.md": "generated from reference_impl's docstrings (mkdocstrings)",
    "faq.md": "short answers that link to the pages that run them",
    "glossary.md": "terms",
    "inside-ray/then-and-now.md": "the 2018 paper against today's Ray, with sources",
    "troubleshooting/index.md": "the index of messages; each entry runs on its own page",
    "verl/differences.md": "the table of differences; tests/upstream runs each row on veRL",
    "whats-new.md": "what changed since veRL 0.8 and older Ray releases, with sources",
}
RUNS = {"python", "gpu", "console", "bash"}


def test_every_page_runs_code_unless_listed_without():
    without = {rel(p) for p in EN_PAGES if not {b.kind for b in blocks(p)} & RUNS}
    assert without == set(WITHOUT_CODE), (
        f"pages without code that runs, not listed: {sorted(without - set(WITHOUT_CODE))}; "
        f"listed but running code: {sorted(set(WITHOUT_CODE) - without)}"
    )


@pytest.mark.parametrize("page", EN_PAGES, ids=rel)
def test_page_exists_in_both_languages(page):
    assert twin(page).exists(), f"{rel(page)} has no Chinese twin {rel(twin(page))}"


@pytest.mark.parametrize("page", sorted(DOCS.rglob("*.zh.md")), ids=rel)
def test_chinese_page_has_an_english_twin(page):
    # The other direction of the test above: a page written only in Chinese fails too.
    assert twin(page).exists(), f"{rel(page)} has no English twin {rel(twin(page))}"


def headings(text: str) -> list[tuple[int, str]]:
    """(level, id) of each heading below the page's title, the id as the site renders it.

    An id comes from a heading's Latin letters, so a Chinese heading without an explicit id
    gets an opaque ``#_7``: comparing rendered ids makes each Chinese heading carry its
    English twin's, and a link to a section work in both languages.
    """
    config = site_config()
    md = markdown.Markdown(
        extensions=config["markdown_extensions"], extension_configs=config["mdx_configs"]
    )
    md.convert(text)
    found, stack = [], list(reversed(md.toc_tokens))
    while stack:
        token = stack.pop()
        found.append((token["level"], token["id"]))
        stack += reversed(token["children"])
    return found[1:]  # the title's id is never linked to


def link_targets(page: Path) -> list[str]:
    text = prose(page.read_text("utf-8"))
    return re.findall(r"\]\(([^)\s]+)\)", text)


def block_mismatches(english: list[Block], chinese: list[Block]) -> list[str]:
    """Each block of the Chinese page that does not agree with its English twin, and why."""
    if len(english) != len(chinese):
        return [f"{len(chinese)} blocks in Chinese, {len(english)} in English"]
    return [
        f"block {number}: {why}"
        for number, (en, zh) in enumerate(zip(english, chinese, strict=True), start=1)
        if (why := twin_mismatch(en, zh))
    ]


@pytest.mark.parametrize("page", [p for p in EN_PAGES if twin(p).exists()], ids=rel)
def test_both_languages_have_the_same_code_headings_and_links(page):
    # The one place where the two languages' blocks are compared (page_blocks.twin_mismatch).
    zh = twin(page)
    mismatches = block_mismatches(blocks(page), blocks(zh))
    assert not mismatches, f"{rel(zh)} against {rel(page)}:\n" + "\n".join(mismatches)
    assert headings(zh.read_text("utf-8")) == headings(page.read_text("utf-8")), (
        "heading levels or ids differ: give each Chinese heading its twin's id, {#...}"
    )
    assert sorted(link_targets(zh)) == sorted(link_targets(page)), "link targets differ"


def test_a_chinese_heading_without_its_twins_id_differs():
    english = headings("# Title\n\n## Reproduce it\n\n## Fix {#fix}\n")
    assert english == [(2, "reproduce-it"), (2, "fix")]
    assert headings("# 标题\n\n## 复现\n\n## 解决 {#fix}\n") == [(2, "_2"), (2, "fix")]


def block(kind: str, language: str, source: str) -> Block:
    return Block(language, source, kind, language, "", source, start=0, end=0, line=1)


def test_a_diagram_may_translate_its_labels_but_not_its_structure():
    english = block(
        "illustration", "mermaid", 'flowchart LR\n  D["driver"] -- "calls" --> W["worker"]\n'
    )
    translated = block(
        "illustration", "mermaid", 'flowchart LR\n  D["驱动程序"] -- "调用" --> W["工作进程"]\n'
    )
    rewired = block(
        "illustration", "mermaid", 'flowchart LR\n  W["工作进程"] -- "调用" --> D["驱动程序"]\n'
    )
    assert block_mismatches([english], [translated]) == []
    assert block_mismatches([english], [rewired]) == [
        "block 1: the diagram's nodes or edges differ from its twin's "
        "('W -- --> D' vs 'D -- --> W'); translate the labels only"
    ]
    sequence = block(
        "illustration", "mermaid", "sequenceDiagram\n  participant C as Controller\n  C->>W: run\n"
    )
    in_chinese = block(
        "illustration", "mermaid", "sequenceDiagram\n  participant C as 控制器\n  C->>W: 运行\n"
    )
    assert block_mismatches([sequence], [in_chinese]) == []


def test_an_illustration_may_translate_its_comments_but_code_that_runs_may_not_change():
    english = block("illustration", "python", "pool = make_pool()  # one bundle per GPU\n")
    translated = block("illustration", "python", "pool = make_pool()  # 每个 GPU 一个 bundle\n")
    changed = block("illustration", "python", "pool = make_pool(4)  # 每个 GPU 一个 bundle\n")
    assert block_mismatches([english], [translated]) == []
    assert block_mismatches([english], [changed]) == [
        "block 1: the illustration differs from its twin in more than its comments"
    ]
    ran = block("python", "python", "print(1)  # one\n")
    assert block_mismatches([ran], [block("python", "python", "print(1)  # 一\n")]) == [
        "block 1: blocks that run must be identical in both languages (this one ran in English)"
    ]


@pytest.mark.parametrize("page", [twin(p) for p in EN_PAGES if twin(p).exists()], ids=rel)
def test_chinese_pages_are_written_in_chinese(page):
    text = prose(page.read_text("utf-8"))
    text = re.sub(r"`[^`]*`|\([^)]*\)|<[^>]*>", "", text)  # code, link targets, tags
    cjk = len(re.findall(r"[\u4e00-\u9fff]", text))
    latin_words = len(re.findall(r"[A-Za-z]{2,}", text))
    assert cjk > 2 * latin_words, f"{rel(page)}: {cjk} CJK characters vs {latin_words} Latin words"


NOTEBOOK_PAGES = sorted(p for p in DOCS.rglob("*.ipynb") if not p.name.endswith(".zh.ipynb"))


def notebook_twin(page: Path) -> Path:
    return page.with_name(page.name[: -len(".ipynb")] + ".zh.ipynb")


@pytest.mark.parametrize("page", NOTEBOOK_PAGES, ids=rel)
def test_notebook_pages_are_executed_examples_in_both_languages(page):
    # tests/test_notebooks.py executes examples/*.ipynb; a notebook page must be one of them.
    examples = REPO / "examples"
    for path in (page, notebook_twin(page)):
        assert path.exists(), f"{rel(path)} is missing"
        assert path.resolve().parent == examples, (
            f"{rel(path)} must link to a notebook in examples/"
        )
    en, zh = (nbformat.read(p, as_version=4).cells for p in (page, notebook_twin(page)))
    assert [c.source for c in en if c.cell_type == "code"] == [
        c.source for c in zh if c.cell_type == "code"
    ], "code cells differ between the languages"
    zh_text = " ".join(c.source for c in zh if c.cell_type == "markdown")
    assert len(re.findall(r"[\u4e00-\u9fff]", zh_text)) > 200, (
        "the Chinese notebook is not in Chinese"
    )


# How `ray stop`'s summary ends, in Ray 2.60 (`python/ray/scripts/scripts.py`, `stop`): the first
# when every process exited on SIGTERM within its share of the grace period, the second when one
# did not and was killed. Which one a reader gets depends on how busy the machine is; the second
# is what a fresh-clone suite printed for connect.md on 29 November 2026 (load 10.7 on 2 CPUs).
RAY_STOP_ENDINGS = (
    "1/1 stopped.\nStopped all 8 Ray processes.",
    "1/1 stopped.\nStopped only 7 out of 8 Ray processes within the grace period 16 seconds. "
    "Set `-v` to see more details. Remaining processes [psutil.Process(pid=77, name='python', "
    "status='terminated')] will be forcefully terminated.\nYou can also use `--force` to "
    "forcefully terminate processes or set higher `--grace-period` to wait longer time for "
    "proper termination.",
)


@pytest.mark.parametrize("page", EN_PAGES, ids=rel)
def test_what_a_page_shows_under_ray_stop_holds_on_a_busy_machine(page):
    """A page that shows `ray stop` ending well must accept the ending of a busy machine too.

    (faults.md shows the second ending alone: there two agents ignore SIGTERM, so it is the
    only one.)"""
    for block in blocks(page):
        if block.kind != "console":
            continue
        for command in parse_console(block.source):
            if command.text.strip() != "ray stop" or not command.expected.strip():
                continue
            done, busy = RAY_STOP_ENDINGS
            if matches(command.expected, done):
                assert matches(command.expected, busy), (
                    f"{rel(page)} line {block.line + command.line}: `ray stop` is shown as\n"
                    f"{command.expected}\nwhich does not match what it prints on a busy "
                    f"machine:\n{busy}\nShow it as `...Stopped ... Ray processes...`"
                )
