"""The built site: both languages, a working language switch, Chinese search, and a
build that fails when a translation is missing (a broken link: test_site_build_links.py).

Each test builds a copy of the site with `mkdocs build --strict`, so the
real ``mkdocs.yml`` and hook are exercised. The healthy build is shared by
the checks on its output.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

import take_away
from page_blocks import twin

pytestmark = pytest.mark.reads_docs("docs")

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def copy_site_sources(dest: Path) -> Path:
    # reference_impl: the API pages read its docstrings (mkdocstrings, `paths: [.]`).
    # constraints.txt, pyproject.toml: the downloads' install lines pin versions from them.
    for item in (
        "mkdocs.yml",
        "docs",
        "tools",
        "overrides",
        "reference_impl",
        "constraints.txt",
        "pyproject.toml",
    ):
        source = REPO / item
        if source.is_dir():
            shutil.copytree(source, dest / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, dest / item)
    return dest


# As the Pages workflow sets it: the header's source link and each page's edit link.
REPO_URL = "https://github.com/example-owner/ray-rlhf-handbook"


def build(project: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "REPO_URL": REPO_URL}
    env["EDIT_URI"] = "edit/main/docs/"
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", "site"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    project = copy_site_sources(tmp_path_factory.mktemp("healthy"))
    result = build(project)
    assert result.returncode == 0, result.stderr[-3000:]
    return project / "site"


def english_pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("index.html") if not p.relative_to(site).parts[0] == "zh")


def test_both_languages_are_built(site):
    pages = english_pages(site)
    assert len(pages) >= 10
    for page in pages:
        zh = site / "zh" / page.relative_to(site)
        assert zh.exists(), f"no Chinese build of {page.relative_to(site)}"
        assert '<html lang="zh"' in zh.read_text("utf-8")


def target(site: Path, page: Path, href: str) -> Path:
    """The directory a link on `page` points to; absolute links start at the site root."""
    if href.startswith("/"):
        return (site / href.lstrip("/")).resolve()
    return (page.parent / href).resolve()


def test_language_switch_lands_on_the_same_page(site):
    for page in english_pages(site):
        path = page.relative_to(site)
        zh_page = site / "zh" / path
        switch = re.search(r'href="([^"]+)" hreflang="zh"', page.read_text("utf-8"))
        assert switch, f"{path}: no link to the Chinese version"
        assert target(site, page, switch[1]) == zh_page.parent.resolve(), path
        back = re.search(r'href="([^"]+)" hreflang="en"', zh_page.read_text("utf-8"))
        assert back, f"zh/{path}: no link back to English"
        assert target(site, zh_page, back[1]) == page.parent.resolve(), path


def test_chinese_body_text_is_searchable(site):
    # One index per language (tools/search_by_language_hook.py): the Chinese pages' index
    # lives under zh/, its locations relative to zh/; the root index holds English pages only.
    english = json.loads((site / "search" / "search_index.json").read_text("utf-8"))
    assert not [d for d in english["docs"] if d["location"].startswith("zh/")]
    index = json.loads((site / "zh" / "search" / "search_index.json").read_text("utf-8"))
    assert "\\u200b" in index["config"]["separator"]
    zh_docs = index["docs"]
    assert zh_docs, "no Chinese pages in the search index"
    # jieba segments body text into words joined by U+200B, which the separator splits on.
    glossary = [d for d in zh_docs if d["location"] == "glossary/"]
    text = " ".join(d["text"] for d in zh_docs)
    assert "\u200b" in text and glossary
    words = set(re.split(index["config"]["separator"], text))
    assert {"调度", "对象"} <= words, "Chinese words from body text are not separate search terms"


def test_missing_translation_fails_the_build(tmp_path):
    project = copy_site_sources(tmp_path)
    (project / "docs" / "glossary.zh.md").unlink()
    result = build(project)
    assert result.returncode != 0
    assert "glossary.md has no twin glossary.zh.md" in result.stderr


def test_notebook_pages_show_rendered_cells_not_json(site):
    notebooks = [p.relative_to(REPO / "docs") for p in (REPO / "docs").rglob("*.ipynb")]
    assert notebooks
    for nb in notebooks:
        stem = str(nb).removesuffix(".ipynb").removesuffix(".zh")
        lang_dir = site / "zh" if str(nb).endswith(".zh.ipynb") else site
        html = (lang_dir / stem / "index.html").read_text("utf-8")
        assert '"cell_type"' not in html, f"{nb} is shown as raw JSON"
        assert "jp-Cell" in html and "jp-OutputArea" in html, f"{nb} has no rendered cells"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_built_site_links_both_downloads(site, lang, monkeypatch):
    """Every page with executed python links its script and notebook (tools/take_away.py)."""
    monkeypatch.setenv("REPO_URL", REPO_URL)  # as the build had it: the install lines name it
    missing = []
    for page in sorted(p for p in DOCS.rglob("*.md") if not p.name.endswith(".zh.md")):
        source = page if lang == "en" else twin(page)
        shown = source.relative_to(DOCS)
        root = site / "zh" if lang == "zh" else site
        folder = root / take_away.url_path(str(page.relative_to(DOCS)))
        html = (folder / "index.html").read_text("utf-8")
        if not take_away.has_downloads(page):
            if "take-away" in html:
                missing.append(f"{shown}: a download box on a page with no python")
            continue
        name = take_away.download_name(page, DOCS)
        for suffix in (".ipynb", ".py"):
            if f'href="{name}{suffix}" download' not in html:
                missing.append(f"{shown}: no link to {name}{suffix}")
            if not (folder / f"{name}{suffix}").is_file():
                missing.append(f"{shown}: {folder.relative_to(site)}/{name}{suffix} missing")
        if (folder / f"{name}.py").is_file():
            assert (folder / f"{name}.py").read_text("utf-8") == take_away.script_text(source, DOCS)
        if (folder / f"{name}.ipynb").is_file():
            built = nbformat.read(folder / f"{name}.ipynb", as_version=4)
            nbformat.validate(built)
            expected = take_away.notebook(source, DOCS)
            assert [c.source for c in built.cells if c.cell_type == "code"] == [
                c.source for c in expected.cells if c.cell_type == "code"
            ]
    assert not missing, "\n".join(missing)


def test_every_page_links_its_source_and_the_footer_states_the_licences(site):
    page = site / "ray-core" / "tasks" / "index.html"
    zh = site / "zh" / "ray-core" / "tasks" / "index.html"
    assert f'href="{REPO_URL}/edit/main/docs/ray-core/tasks.md"' in page.read_text("utf-8")
    assert f'href="{REPO_URL}/edit/main/docs/ray-core/tasks.zh.md"' in zh.read_text("utf-8")
    assert f'href="{REPO_URL}"' in page.read_text("utf-8")  # the header's repository link
    for built, words in ((page, "CC BY 4.0"), (zh, "文字采用")):
        footer = built.read_text("utf-8").split('<footer class="md-footer">', 1)[1]
        assert words in footer and "Apache-2.0" in footer


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_llms_txt_lists_every_page_of_the_language_once(site, lang):
    root = site if lang == "en" else site / "zh"
    text = (root / "llms.txt").read_text("utf-8")
    assert text.startswith("# ")
    listed = re.findall(r"^- \[[^\]]+\]\(([^)]+)\)", text, re.M)
    pages = [
        p
        for p in root.rglob("index.html")
        if (lang == "zh" or p.relative_to(site).parts[0] != "zh")
        and p.relative_to(root).parts[:1] not in (("404",), ("assets",), ("search",))
    ]
    assert len(listed) == len(set(listed)), "a page listed twice"
    assert len(listed) == len(pages), f"{len(listed)} listed, {len(pages)} pages built"
    if lang == "zh":
        assert all("/zh/" in url for url in listed)
        assert "：" in text or "。" in text  # the lines are the Chinese pages' own sentences


def test_each_page_describes_itself_in_its_own_language(site):
    """Each page's <meta name="description"> is its own first sentence, not the site's."""
    site_description = {}
    pages = [p for p in site.rglob("index.html") if p.parent.name not in ("404", "search")]
    described = {}
    for page in pages:
        html = page.read_text("utf-8")
        match = re.search(r'<meta name="description" content="([^"]*)"', html)
        assert match, f"{page.relative_to(site)}: no meta description"
        described[page] = unescape(match.group(1))
    for lang, root in (("en", site), ("zh", site / "zh")):
        site_description[lang] = described[root / "index.html"]
    own = [p for p in pages if p.parent not in (site, site / "zh")]
    same = [p for p in own if described[p] in site_description.values()]
    assert len(same) < len(own) // 10, f"pages described as the site: {same}"
    chinese = [p for p in own if p.relative_to(site).parts[0] == "zh"]
    english = [p for p in own if p.relative_to(site).parts[0] != "zh"]
    assert all(re.search(r"[\u4e00-\u9fff]", described[p]) for p in chinese)
    assert not any(re.search(r"[\u4e00-\u9fff]", described[p]) for p in english)
    debugging = site / "troubleshooting" / "debugging" / "index.html"
    assert described[debugging].startswith(
        "Before ray.init(), a breakpoint() in the driver"
    )  # markup dropped


class Outline(HTMLParser):
    """The block structure of a built page's article: headings, paragraphs, code blocks,
    tables, lists and admonitions, in order (text and inline markup left out)."""

    BLOCKS = {"h1", "h2", "h3", "h4", "h5", "h6", "p", "pre", "table", "ul", "ol", "li"}

    def __init__(self):
        super().__init__()
        self.depth = 0  # inside <article>
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "article":
            self.depth += 1
        elif self.depth and tag in self.BLOCKS:
            self.tags.append(tag)
        elif self.depth and tag == "div" and "admonition" in (dict(attrs).get("class") or ""):
            self.tags.append("admonition")

    def handle_endtag(self, tag):
        if tag == "article":
            self.depth -= 1


def outline(html: str) -> list[str]:
    parser = Outline()
    parser.feed(html)
    return parser.tags


def test_each_chinese_page_has_its_english_twins_structure(site):
    """Both languages ship together, down to the rendered HTML: a paragraph that runs into a
    code fence (no blank line between them) renders as one block in one language only."""
    different = []
    for page in english_pages(site):
        zh = site / "zh" / page.relative_to(site)
        ours, theirs = outline(page.read_text("utf-8")), outline(zh.read_text("utf-8"))
        if ours != theirs:
            first = next(
                (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                min(len(ours), len(theirs)),
            )
            different.append(
                f"{page.relative_to(site).parent}: block {first}: "
                f"{ours[first : first + 3]} vs {theirs[first : first + 3]}"
            )
    assert not different, "\n".join(different)
