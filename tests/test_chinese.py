"""The Chinese pages read as Chinese: no italics over Chinese text, each term written one way.

* Italics: browsers have no italic CJK fonts and slant the glyphs instead, which reads
  badly; the Chinese pages use bold for emphasis. Checked on the rendered HTML, so an
  asterisk inside code or a formula is not mistaken for emphasis.
* Terms: the glossary's table "统一写法" (docs/glossary.zh.md#variants) lists, for each term,
  the spellings that drifted into pages before. A Chinese page's prose must not use them.
  Code (fenced blocks, inline code) is not prose. A variant in full-width parentheses right
  after the fixed spelling, the way a first mention glosses a term (自动扩缩容器（autoscaler）),
  is allowed.
* Spacing: a link or inline code next to a Chinese character has a space between them
  ("详见 [E19](…)", not "详见[E19](…)"), as the rest of the site writes it; full-width
  punctuation needs none ("（[E19](…)）"). Checked on the rendered HTML, outside code blocks.
* Charts: a Chinese page links `img/x.png` like its twin, and the site's i18n plugin serves
  `x.zh.png` where one exists (else, by fallback, the English file). A `x.zh.png` must then
  be a drawing of its own, not a byte copy of the English chart.
"""

from __future__ import annotations

import functools
import html
import re
from pathlib import Path

import markdown
import pytest
from mkdocs.config import load_config

pytestmark = pytest.mark.reads_docs("docs")

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
GLOSSARY = DOCS / "glossary.zh.md"
ZH_PAGES = sorted(DOCS.rglob("*.zh.md"))

CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
CODE = re.compile(r"<pre[ >].*?</pre>|<code[^>]*>.*?</code>", re.S)


@functools.cache
def site_markdown() -> tuple[list, dict]:
    """The Markdown extensions of mkdocs.yml, so the check sees what a reader sees."""
    config = load_config(str(REPO / "mkdocs.yml"))
    return config["markdown_extensions"], config["mdx_configs"]


def page_html(page: Path) -> str:
    """The page as HTML, rendered with the site's Markdown extensions."""
    extensions, configs = site_markdown()
    return markdown.markdown(page.read_text(), extensions=extensions, extension_configs=configs)


def rendered(page: Path) -> str:
    """The page's prose as HTML, rendered as the site does, without code blocks or inline code."""
    return CODE.sub(" ", page_html(page))


def prose(page: Path) -> str:
    """The page's prose as plain text (tags, and so link targets, removed)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", rendered(page)))


def glossary_variants() -> list[tuple[str, str]]:
    """(fixed spelling, variant) pairs from the rows of the glossary's 统一写法 table."""
    section = GLOSSARY.read_text().split("{#variants}", 1)[1]
    pairs = []
    for row in re.findall(r"^\|(.+)\|\s*$", section, re.M):
        _term, fixed, variants = (cell.strip() for cell in row.split("|"))
        if fixed in ("中文页面写作", "---"):  # the header and the separator row
            continue
        pairs += [(fixed, variant.strip()) for variant in variants.split("、")]
    return pairs


def variant_pattern(fixed: str, variant: str) -> re.Pattern:
    """The variant as a whole word (Latin letters), not where it glosses the fixed spelling."""
    return re.compile(
        rf"(?<!{re.escape(fixed)}（)(?<![A-Za-z_-]){re.escape(variant)}(?![A-Za-z_-])",
        re.IGNORECASE,
    )


def test_the_glossary_lists_variants():
    pairs = glossary_variants()
    assert len(pairs) >= 10, pairs
    assert ("WorkerGroup", "worker group") in pairs


@pytest.mark.parametrize("page", ZH_PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_no_italics_over_chinese_text(page):
    slanted = [em for em in re.findall(r"<em>(.*?)</em>", rendered(page), re.S) if CJK.search(em)]
    assert not slanted, f"{page.name}: italics over Chinese text (use bold): {slanted}"


@pytest.mark.parametrize(
    "page",
    [p for p in ZH_PAGES if p != GLOSSARY],
    ids=lambda p: str(p.relative_to(DOCS)),
)
def test_glossary_terms_are_written_one_way(page):
    # A `::: module.name` line is a mkdocstrings directive (docs/api/), not prose.
    text = "\n".join(
        line for line in prose(page).splitlines() if not line.lstrip().startswith(":::")
    )
    found = [
        f"{variant!r} (write {fixed!r}): ...{text[max(m.start() - 15, 0) : m.end() + 15]}..."
        for fixed, variant in glossary_variants()
        for m in variant_pattern(fixed, variant).finditer(text)
    ]
    assert not found, f"{page.name}: " + "; ".join(found)


# A Chinese character right before a link or inline code, or right after one. The heading's
# permalink (toc's `<a class="headerlink">`) is the theme's, not the page's.
GLUED = re.compile(
    rf"{CJK.pattern}(?=<a (?![^>]*headerlink)|<code[ >])|(?:</a>|</code>){CJK.pattern}"
)
CODE_BLOCK = re.compile(r"<pre[ >].*?</pre>", re.S)


def glued_to_chinese(page: Path) -> list[str]:
    """Each place where a link or inline code touches a Chinese character, as the reader sees it."""
    text = CODE_BLOCK.sub(" ", page_html(page))
    return [
        html.unescape(
            re.sub(r"<[^>]*>|^[^<]*>|<[^>]*$", "", text[max(m.start() - 80, 0) : m.end() + 40])
        )
        for m in GLUED.finditer(text)
    ]


@pytest.mark.parametrize("page", ZH_PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_links_and_code_are_spaced_from_chinese(page):
    glued = glued_to_chinese(page)
    assert not glued, f"{page.name}: put a space between Chinese and a link or code: {glued}"


IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")


@pytest.mark.parametrize("page", ZH_PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_chinese_charts_are_drawn_in_chinese(page):
    copies = []
    for target in IMAGE.findall(page.read_text()):
        english = page.parent / target
        chinese = english.with_name(english.name.replace(".png", ".zh.png"))
        if chinese.exists() and chinese.read_bytes() == english.read_bytes():
            copies.append(f"{chinese.name} is a copy of {english.name}")
    assert not copies, f"{page.name}: draw these in Chinese, or delete them: {copies}"


def test_the_checks_catch_what_they_look_for(tmp_path):
    """Both checks, on a page made to break them, so a check that finds nothing is not vacuous."""
    page = tmp_path / "broken.zh.md"
    page.write_text(
        "这是*斜体的中文*。\n\n每个 worker group 都有头结点。\n\n"
        "自动扩缩容器（autoscaler）可以括注。\n\n```python\nprint('worker group')\n```\n"
    )
    assert re.findall(r"<em>(.*?)</em>", rendered(page)) == ["斜体的中文"]
    hits = [
        variant
        for fixed, variant in glossary_variants()
        if variant_pattern(fixed, variant).search(prose(page))
    ]
    assert sorted(hits) == sorted(["worker group", "Worker group", "头结点"])


def test_the_spacing_check_catches_glued_links_and_code(tmp_path):
    """The spacing check on a page with three glued spots, and the same sentence spaced right."""
    page = tmp_path / "glued.zh.md"
    page.write_text(
        "## 标题 {#x}\n\n详见[E19](#e19)。报`AuthenticationError`时重试。\n\n"
        "详见 [E19](#e19)，报 `AuthenticationError` 时重试（[E20](#e20)）。\n\n"
        "```python\nprint('中文')  # `code`中文\n```\n"
    )
    assert len(glued_to_chinese(page)) == 3  # 见[, 报`, `时 (not ]。: punctuation)
