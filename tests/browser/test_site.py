"""The built site in headless Chromium: every page in both languages, search, and links.

One walk visits every English page, clicks the language switch and checks the
Chinese page it lands on, recording for each page what a reader would hit:
console errors and failed requests, requests that leave the site, code blocks
without a copy button, Mermaid diagrams that did not render, notebooks shown
as JSON. The tests below each assert one of those findings over all pages, so
a failure names every page it concerns. Pages are discovered from the built
site, so a new page is checked without editing this file.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.browser.conftest import REPO, Site

# The walk loads ~70 pages; on a busy 2-core machine that takes minutes, not seconds.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

# Material renders each diagram into a *closed* shadow root; opening them lets the test see the SVG.
OPEN_SHADOW_ROOTS = """
const attach = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) {
  return attach.call(this, {...init, mode: "open"});
};
"""

# Reported per page: code blocks without a copy control, and the state of each Mermaid diagram.
PAGE_PROBE = """() => {
  const article = document.querySelector("article");
  const uncopyable = [
    ...[...article.querySelectorAll("pre > code")].filter(
      (code) => !code.parentElement.querySelector('button[data-md-type="copy"]')),
    ...[...article.querySelectorAll(".jp-InputArea-editor")].filter(
      (cell) => !cell.querySelector("clipboard-copy")),
  ].map((el) => el.textContent.trim().slice(0, 60));
  const diagrams = [...article.querySelectorAll(".mermaid")].map((el) => {
    const svg = el.shadowRoot && el.shadowRoot.querySelector("svg");
    if (!svg) return "not rendered";
    if (svg.getAttribute("aria-roledescription") === "error") return "mermaid syntax error";
    return svg.getBBox().width > 0 ? "svg" : "empty svg";
  });
  return {uncopyable, diagrams, text: article.innerText,
          cells: article.querySelectorAll(".jp-Cell").length,
          outputs: article.querySelectorAll(".jp-OutputArea-output").length};
}"""


@dataclass
class Visit:
    lang: str
    path: str
    errors: list[str] = field(default_factory=list)  # console errors, failed requests
    foreign: list[str] = field(default_factory=list)  # requests to anything but the served site
    probe: dict = field(default_factory=dict)
    diagrams_in_html: int = 0
    switched_to: str = ""  # where the language switch led (en) or points (zh)

    @property
    def name(self) -> str:
        return f"{self.lang}:/{self.path}"


def diagrams_in_html(site: Site, lang: str, path: str) -> int:
    html = (site.lang_root(lang) / path / "index.html").read_text("utf-8")
    return len(re.findall(r'<pre class="mermaid"', html))


def settle(page, visit: Visit) -> None:
    """Wait until the page has loaded and each of its diagrams has rendered (or timed out)."""
    page.wait_for_load_state("networkidle")
    if visit.diagrams_in_html:
        try:
            page.wait_for_function(
                "n => [...document.querySelectorAll('article .mermaid')]"
                ".filter(el => el.shadowRoot && el.shadowRoot.querySelector('svg')).length >= n",
                arg=visit.diagrams_in_html,
                timeout=20_000,
            )
        except Exception:  # the probe reports which diagrams did not render
            pass
    visit.probe = page.evaluate(PAGE_PROBE)


def record(page, site: Site, current: list[Visit]) -> None:
    """Send what the page does to whichever visit is current (the page navigates between two)."""

    def error(text: str) -> None:
        current[0].errors.append(text)

    def request(req) -> None:
        if not req.url.startswith(site.base) and not req.url.startswith(("data:", "blob:")):
            current[0].foreign.append(req.url)

    page.on("console", lambda msg: msg.type == "error" and error(f"console: {msg.text}"))
    page.on("pageerror", lambda exc: error(f"uncaught: {exc}"))
    page.on("requestfailed", lambda req: error(f"failed: {req.url} ({req.failure})"))
    page.on("response", lambda r: r.status >= 400 and error(f"HTTP {r.status}: {r.url}"))
    page.on("request", request)


def empty_search_index(site: Site):
    """Serve the real index's config with no documents: every page loads the search index and
    builds it in a worker, which costs more CPU than the rest of the page. Search has its own
    tests below, on the real index; during the walk the page only needs the fetch to succeed."""
    config = json.loads((site.root / "search" / "search_index.json").read_text("utf-8"))["config"]
    body = json.dumps({"config": config, "docs": []})
    return lambda route: route.fulfill(status=200, content_type="application/json", body=body)


@pytest.fixture(scope="module")
def walk(site: Site, browser, artifacts: Path) -> dict[str, Visit]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(OPEN_SHADOW_ROOTS)
    context.route(site.base + "search/search_index.json", empty_search_index(site))
    visits: dict[str, Visit] = {}
    for path in site.pages("en"):
        en, zh = Visit("en", path), Visit("zh", path)
        en.diagrams_in_html = diagrams_in_html(site, "en", path)
        if (site.lang_root("zh") / path / "index.html").exists():
            zh.diagrams_in_html = diagrams_in_html(site, "zh", path)
        current = [en]
        page = context.new_page()
        record(page, site, current)
        page.goto(site.url("en", path))
        settle(page, en)
        shot = path.rstrip("/").replace("/", "__") or "index"
        page.screenshot(path=artifacts / "en" / f"{shot}.png")
        # Click the switch as a reader does: open the language menu, pick 简体中文.
        current[0] = zh
        page.hover(".md-header__option .md-select")
        page.click('.md-select__link[hreflang="zh"]')
        page.wait_for_load_state()
        en.switched_to = page.url
        settle(page, zh)
        page.screenshot(path=artifacts / "zh" / f"{shot}.png")
        zh.switched_to = page.eval_on_selector('.md-select__link[hreflang="en"]', "a => a.href")
        page.close()
        visits[en.name], visits[zh.name] = en, zh
    context.close()
    return visits


def report(problems: dict[str, list[str]]) -> str:
    return "\n".join(f"{page}: {'; '.join(items)}" for page, items in problems.items() if items)


def test_every_page_of_both_languages_is_visited(site, walk):
    en, zh = site.pages("en"), site.pages("zh")
    assert len(en) >= 10, f"only {len(en)} English pages found under {site.root}"
    assert en == zh, f"pages in one language only: {sorted(set(en) ^ set(zh))}"
    assert {v.name for v in walk.values()} == {f"{lang}:/{p}" for lang in ("en", "zh") for p in en}


def test_pages_load_without_console_errors_or_failed_requests(walk):
    problems = {name: v.errors for name, v in walk.items()}
    assert not report(problems), "errors while loading pages:\n" + report(problems)


def test_no_request_leaves_the_site(walk):
    problems = {name: sorted(set(v.foreign)) for name, v in walk.items()}
    assert not report(problems), "the site must render offline; requests to:\n" + report(problems)


def test_language_switch_lands_on_the_same_page(site, walk):
    problems = {}
    for v in walk.values():
        other = "zh" if v.lang == "en" else "en"
        if v.switched_to != site.url(other, v.path):
            problems[v.name] = [f"switch leads to {v.switched_to}, not {site.url(other, v.path)}"]
    assert not problems, "language switch:\n" + report(problems)


def test_code_blocks_have_copy_buttons(walk):
    problems = {name: v.probe["uncopyable"] for name, v in walk.items()}
    assert not report(problems), "code blocks without a copy button:\n" + report(problems)


def test_mermaid_diagrams_render_to_svg(walk):
    with_diagrams = [v for v in walk.values() if v.diagrams_in_html]
    assert with_diagrams, "no page has a Mermaid diagram: is the mermaid fence still configured?"
    problems = {
        v.name: [f"{len(v.probe['diagrams'])} of {v.diagrams_in_html} diagrams found"]
        + [d for d in v.probe["diagrams"] if d != "svg"]
        for v in with_diagrams
        if v.probe["diagrams"].count("svg") != v.diagrams_in_html
    }
    assert not problems, "Mermaid diagrams:\n" + report(problems)


def notebook_pages() -> list[str]:
    docs = REPO / "docs"
    return sorted(
        str(nb.relative_to(docs)).removesuffix(".ipynb") + "/"
        for nb in docs.rglob("*.ipynb")
        if not nb.name.endswith(".zh.ipynb")
    )


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_notebook_pages_show_rendered_cells(walk, lang):
    assert notebook_pages(), "no notebook pages under docs/"
    for path in notebook_pages():
        v = walk[f"{lang}:/{path}"]
        assert '"cell_type"' not in v.probe["text"], f"{v.name} shows the notebook as raw JSON"
        assert v.probe["cells"] and v.probe["outputs"], (
            f"{v.name}: {v.probe['cells']} cells, {v.probe['outputs']} outputs rendered"
        )


# Words from the body text of one page (not its title), found by search in that page.
SEARCHES = [
    ("en", "serialisation", "ray-core/objects/"),
    ("en", "producer", "ray-core/futures/"),
    ("en", "hyperparameter", "ray-core/"),
    ("en", "executes", "verl/tutorial/"),
    ("en", "unpad", "api/dataproto/"),
    ("en", "firewall", "cluster/start/"),
    ("zh", "消费者", "ray-core/futures/"),
    ("zh", "框架", "ray-core/"),
    ("zh", "右填充", "rlhf/one-step/"),
    ("zh", "裁剪范围", "rlhf/algorithms/"),
    ("zh", "界面", "glossary/"),
    ("zh", "放置组", "verl/resource-pools/"),
    # Glossary terms, whole words for jieba (tools/search_by_language_hook.py)
    ("zh", "资源池", "verl/resource-pools/"),
    ("zh", "对象存储", "ray-core/objects/"),
    ("zh", "单控制器", "verl/"),
    ("zh", "头节点", "cluster/start/"),
    ("zh", "幂等", "cluster/faults/"),
    # A command's name finds the page that documents it (not a troubleshooting entry that
    # merely mentions it: pasted_messages leaves those out).
    ("en", "ray status", "cluster/tools/"),
    ("zh", "ray status", "cluster/tools/"),
    ("en", "ray debug", "troubleshooting/debugging/"),
    ("zh", "ray debug", "troubleshooting/debugging/"),
]


@dataclass
class SearchPage:
    page: object  # playwright.sync_api.Page: the `browser` extra, absent in `nox -s tests`
    warnings: list[str]  # console warnings; the search worker reports a query that threw


@pytest.fixture(scope="module")
def search_pages(site, browser):
    """A home page per language, kept open: the index is built once per language, not per query."""
    pages: dict[str, SearchPage] = {}
    yield pages
    for searched in pages.values():
        searched.page.close()


def search(site: Site, browser, pages: dict[str, SearchPage], lang: str, query: str) -> list[str]:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # the `browser` extra

    if lang not in pages:
        pages[lang] = SearchPage(browser.new_page(), [])
        warnings = pages[lang].warnings
        pages[lang].page.on("console", lambda m: m.type == "warning" and warnings.append(m.text))
        pages[lang].page.goto(site.url(lang, ""))
    page, warnings = pages[lang].page, pages[lang].warnings
    # Material searches on keyup: clear the box (which empties the results), then type.
    box = page.locator(".md-search__input")
    box.fill("")
    box.press("End")
    page.wait_for_selector(".md-search-result__item", state="detached")
    warnings.clear()
    box.fill(query)
    box.press("End")
    # Building the index takes a while on a busy machine; results appear once it is ready.
    try:
        page.wait_for_selector(".md-search-result__item", timeout=60_000)
    except PlaywrightTimeout:
        meta = page.locator(".md-search-result__meta").inner_text()
        pytest.fail(f"search {query!r} ({lang}): no results in 60 s: {meta!r}; {warnings}")
    return page.eval_on_selector_all(
        ".md-search-result__item > .md-search-result__link", "links => links.map(a => a.href)"
    )


@pytest.mark.parametrize("lang, query, expected", SEARCHES)
def test_search_finds_the_page(site, browser, search_pages, lang, query, expected):
    hrefs = search(site, browser, search_pages, lang, query)
    # Result links carry ?h=<query> (highlighting) and #<section>; the page is what counts.
    found = list(dict.fromkeys(re.split(r"[?#]", href)[0] for href in hrefs))[:5]
    assert site.url(lang, expected) in found, f"search {query!r} ({lang}): top results {found}"


def test_a_glossary_term_is_one_word_for_search(site, browser, search_pages):
    """自动扩缩容器 (autoscaler) is one jieba word: a search for 容器 (container) must not land on
    the autoscaler's section, as it did while jieba split the term into 自动|扩缩|容器."""
    hrefs = search(site, browser, search_pages, "zh", "容器")
    found = [re.sub(r"\?[^#]*", "", href) for href in hrefs[:8]]
    assert site.url("zh", "cluster/scaling/#autoscaler") not in found, found


@pytest.mark.parametrize(
    "query, page", [("超时", None), ("资源池", "verl/resource-pools/"), ("放置组", None)]
)
def test_a_chinese_query_keeps_its_last_character(site, browser, search_pages, query, page):
    """Material's worker dropped a Han query's last character when its prefix is a word
    (超时 was searched as 超*, and the first result was about 超过): the first result must
    contain the whole query (tools/search_by_language_hook.py patches the worker)."""
    search(site, browser, search_pages, "zh", query)
    first = search_pages["zh"].page.locator(".md-search-result__item").first
    assert query in first.inner_text(), f"search {query!r}: first result {first.inner_text()!r}"
    if page:
        href = first.locator(".md-search-result__link").first.get_attribute("href")
        assert page in href, f"search {query!r}: first result {href}"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_search_returns_pages_of_the_readers_language(site, browser, search_pages, lang):
    """One index per language: an English name searched from a Chinese page finds Chinese pages."""
    hrefs = search(site, browser, search_pages, lang, "DataProto")
    zh_root = site.url("zh", "")
    in_language = [href.startswith(zh_root) == (lang == "zh") for href in hrefs]
    assert hrefs and all(in_language), f"search 'DataProto' ({lang}): {hrefs[:5]}"


# A worker beside Material's: it loads the built (and patched) search worker, then reports,
# when lunr builds the index, the words of the index that its vocabulary automaton
# (lunr.TokenSet) lost and the ones it invented. A lost word is never found; an invented one
# makes every query with a prefix of it throw (tools/search_by_language_hook.py, point 4).
INDEX_CHECK_WORKER = """
importScripts("WORKER");
const build = lunr.Builder.prototype.build;
lunr.Builder.prototype.build = function () {
  const index = build.call(this);
  const words = Object.keys(index.invertedIndex);
  const automaton = new Set(index.tokenSet.toArray());
  postMessage({
    words: words.length,
    lost: words.filter((word) => !automaton.has(word)),
    invented: [...automaton].filter((word) => !(word in index.invertedIndex)),
  });
  return index;
};
"""

# In a page of the site: start the checking worker and send it Material's setup message
# (type 0, the index and its config), as the page's own search does; wait at most 120 s.
RUN_INDEX_CHECK = """async ([workerUrl, indexUrl]) => {
  const index = await (await fetch(indexUrl)).json();
  const worker = new Worker(workerUrl);
  const report = new Promise((resolve) => worker.addEventListener("message", (event) => {
    if ("lost" in event.data) resolve(event.data);
  }));
  worker.postMessage({type: 0, data: {...index, options: {}}});
  const late = new Promise((_, reject) => setTimeout(() => reject(new Error("no report")), 120000));
  try { return await Promise.race([report, late]); } finally { worker.terminate(); }
}"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_search_index_finds_every_word_it_holds(site, browser, lang):
    """Each word of the index is in the automaton that queries are matched against, and no
    other word is: with lunr's own toString() this handbook's English index lost 1712.05889v1
    and invented 1712.0 and 1712.9, and a search for "1 worker(s) were killed" found nothing."""
    workers = site.root / "assets" / "javascripts" / "workers"
    (material,) = [w.name for w in workers.glob("search.*.min.js")]
    (workers / "index-check.js").write_text(INDEX_CHECK_WORKER.replace("WORKER", material))
    page = browser.new_page()
    try:
        page.goto(site.url(lang, ""))
        report = page.evaluate(
            RUN_INDEX_CHECK,
            [
                site.base + "assets/javascripts/workers/index-check.js",
                site.url(lang, "search/search_index.json"),
            ],
        )
    finally:
        page.close()
    assert report["words"] > 1000, report  # the check ran on the real vocabulary
    assert not report["lost"] and not report["invented"], f"{lang}: {report}"


# A reader pastes the message they see into the search box (troubleshooting chapter, #14):
# the result list must lead to the entry whose heading is that message, in either language.
# Every entry of the chapter whose heading is a message, read from the English pages; a
# placeholder such as <n> becomes a number, as in a real log line. A heading that names a
# `ray` command (`ray status` shows 4 GPUs, ...) quotes no message: a search for the bare
# command should find the command's own section first, and SEARCHES checks that it does.
ENTRY_HEADING = re.compile(r"^## `([^`]+)`.*\{#([a-z0-9-]+)\}\s*$", re.M)
RAY_COMMAND = re.compile(r"ray [a-z-]+")


def pasted_messages() -> list[tuple[str, tuple[str, ...]]]:
    entries: dict[str, list[str]] = {}
    for page in sorted((REPO / "docs" / "troubleshooting").glob("*.md")):
        if page.name.endswith(".zh.md"):
            continue
        for message, anchor in ENTRY_HEADING.findall(page.read_text("utf-8")):
            if RAY_COMMAND.fullmatch(message):
                continue
            pasted = message.replace("<n>", "12").strip()
            entries.setdefault(pasted, []).append(f"troubleshooting/{page.stem}/#{anchor}")
    return [(message, tuple(found)) for message, found in entries.items()]


PASTED_MESSAGES = pasted_messages()


def test_every_message_entry_is_searched():
    assert len(PASTED_MESSAGES) >= 18, PASTED_MESSAGES
    assert ("Started a local Ray instance.", ("troubleshooting/connect/#local-instance",)) in (
        PASTED_MESSAGES
    )


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("message, entries", PASTED_MESSAGES, ids=[m for m, _ in PASTED_MESSAGES])
def test_search_for_a_pasted_message_finds_its_entry(
    site, browser, search_pages, lang, message, entries
):
    hrefs = search(site, browser, search_pages, lang, message)
    # Keep the #section (the entry), drop ?h=... (highlighting); the top five results count.
    found = list(dict.fromkeys(re.sub(r"\?[^#]*", "", href) for href in hrefs))[:5]
    wanted = [site.url(lang, entry) for entry in entries]
    assert set(wanted) & set(found), f"search {message!r} ({lang}): top results {found}"


def test_no_broken_internal_links(site):
    """linkchecker crawls the served site from its base URL; links elsewhere are not followed."""
    linkchecker = shutil.which("linkchecker", path=str(Path(sys.executable).parent))
    assert linkchecker, "linkchecker is not installed (the `browser` extra)"
    result = subprocess.run(
        [linkchecker, "--no-status", "--no-warnings", "--threads=4", site.base],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"broken links:\n{result.stdout[-5000:]}{result.stderr[-2000:]}"
    checked = re.search(r"(\d+) links? in (\d+) URLs? checked", result.stdout)
    assert checked and int(checked[2]) > 50, f"linkchecker checked too little:\n{result.stdout}"
