"""MkDocs hook: ``llms.txt`` for each language, the site's pages one line each, for assistants.

Follows the format proposed at https://llmstxt.org: an H1 with the site's name, a quoted
summary, then one H2 per chapter of the navigation with a list of ``- [title](url): line``.
The line is the first sentence of the page's first paragraph. English goes to
``site/llms.txt``, Chinese to ``site/zh/llms.txt``; each is rebuilt from the pages at every
build, so a page added to ``nav`` is listed at once. ``tests/test_llms_txt.py`` checks it.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.nav import Section

ZH = "zh/"
PAGES: dict[str, dict[str, str]] = {}  # page url -> {"title", "line"}
CHAPTERS: dict[str, list[tuple[str, list[str]]]] = {}  # "en"/"zh" -> [(chapter, urls)]
SITES: dict[str, tuple[str, str]] = {}  # "en"/"zh" -> (site name, description)


def language_of(url: str) -> str:
    return "zh" if url.startswith(ZH) else "en"


def first_sentence(markdown: str) -> str:
    """The first sentence of the page's first prose paragraph, as plain text."""
    without_code = re.sub(r"(?ms)^(`{3,}).*?^\1[ \t]*$", "", markdown)
    for paragraph in re.split(r"\n\s*\n", without_code):
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


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    PAGES[page.url] = {"title": page.title or "", "line": first_sentence(markdown)}
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
