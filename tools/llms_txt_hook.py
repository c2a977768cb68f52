"""MkDocs hook: each page's one-line summary, in ``llms.txt`` and in the page's ``<meta>``.

Follows the format proposed at https://llmstxt.org: an H1 with the site's name, a quoted
summary, then one H2 per chapter of the navigation with a list of ``- [title](url): line``.
The line is the first sentence of the page's first paragraph. English goes to
``site/llms.txt``, Chinese to ``site/zh/llms.txt``; each is rebuilt from the pages at every
build, so a page added to ``nav`` is listed at once.

The same line is the page's ``<meta name="description">`` (Material's template reads
``page.meta["description"]``), so that a search result for an error message shows what the
page is about rather than the site's description. A page's own front matter wins.
``tests/test_site_build.py`` checks both.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.structure.nav import Section

# MkDocs puts the hook's folder on sys.path while it loads the hook.
import page_blocks

ZH = "zh/"
PAGES: dict[str, dict[str, str]] = {}  # page url -> {"title", "line"}
CHAPTERS: dict[str, list[tuple[str, list[str]]]] = {}  # "en"/"zh" -> [(chapter, urls)]
SITES: dict[str, tuple[str, str]] = {}  # "en"/"zh" -> (site name, description)


def language_of(url: str) -> str:
    return "zh" if url.startswith(ZH) else "en"


def first_sentence(markdown: str) -> str:
    """The first sentence of the page's first prose paragraph, as plain text."""
    for paragraph in re.split(r"\n\s*\n", page_blocks.prose(markdown)):
        text = " ".join(line.strip() for line in paragraph.strip().splitlines())
        if not text or text.startswith(("#", "<", "|", "!", ">", "-", "*", "1.", "[TOC]")):
            continue  # headings, markers and HTML, tables, admonitions, quotes, lists
        text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
        text = re.sub(r"\*\*|`", "", text)
        match = re.match(r"(.+?(?:[.!?](?=\s|$)|[。！？]))", text)
        return (match.group(1) if match else text)[:300]
    return ""


def on_nav(nav, config, files, **kwargs):
    pages = list(nav.pages)
    if not pages:
        return nav
    language = language_of(pages[0].url)
    chapters: list[tuple[str, list[str]]] = [("", [])]
    for item in nav.items:
        if isinstance(item, Section):
            chapters.append((item.title, [page.url for page in item.children if page.is_page]))
            for child in item.children:  # one level of sub-sections
                if isinstance(child, Section):
                    chapters[-1][1].extend(p.url for p in child.children if p.is_page)
        elif item.is_page:
            chapters[0][1].append(item.url)
    CHAPTERS[language] = [(title, urls) for title, urls in chapters if urls]
    SITES[language] = (config.site_name, config.site_description or "")
    return nav


def prose_of(markdown: str, page) -> str:
    """The page's Markdown; for a notebook page (its source is the .ipynb's JSON), the text
    of its Markdown cells."""
    if not page.file.src_uri.endswith(".ipynb"):
        return markdown
    cells = json.loads(markdown)["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    line = first_sentence(prose_of(markdown, page))
    PAGES[page.url] = {"title": page.title or "", "line": line}
    if line:
        page.meta.setdefault("description", line)
    return markdown


def on_post_build(config, **kwargs) -> None:
    base = config.site_url or ""
    for language, chapters in CHAPTERS.items():
        name, description = SITES[language]
        out = [f"# {name}", "", f"> {' '.join(description.split())}", ""]
        for title, urls in chapters:
            out += [f"## {title or name}", ""]
            for url in urls:
                page = PAGES.get(url)
                if page:
                    line = f": {page['line']}" if page["line"] else ""
                    out.append(f"- [{page['title']}]({base}{url}){line}")
            out.append("")
        target = Path(config.site_dir) / ("llms.txt" if language == "en" else ZH + "llms.txt")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(out), encoding="utf-8")
