"""MkDocs hook: Chinese search that knows the glossary, one search index per language, and
two fixes to Material's search worker.

1. **Glossary terms are words.** Material segments Chinese text with jieba before indexing
   it. jieba's own dictionary splits most of the handbook's terms (放置|组, 资源|池,
   单|控制器, 自动|扩缩|容器), so a search for 容器 found the autoscaler's sections and a
   search for 放置组 matched 放置 anywhere. ``on_config`` adds every Chinese term of
   ``docs/glossary.zh.md`` to jieba as a word: the user dictionary, generated from the
   glossary at each build, so a term added there is searchable as a whole at once.

2. **Each language searches its own pages.** mkdocs-static-i18n builds one index for both
   languages, so a Chinese reader searching ``DataProto`` got mostly English pages.
   ``on_post_build`` (after the i18n plugin has written that index) splits it: the English
   entries stay in ``search/search_index.json``, the Chinese ones go to
   ``zh/search/search_index.json`` with locations relative to ``zh/``; ``on_post_page``
   points each Chinese page's search ``base`` at ``zh/``, where Material's search worker
   then loads the index (``<base>/search/search_index.json``) and resolves result links.

3. **A Chinese query keeps its last character.** Material 9.8.1's search worker segments a
   Han query against the index's vocabulary (``fe`` in
   ``assets/javascripts/workers/search.*.min.js``), but its loop never tries a word that
   ends at the query's last character: whenever a prefix of the query is a word, the last
   character is dropped and the prefix searched with a wildcard (超时 became 超*, and the
   first result was a page about 超过). ``on_post_build`` patches that one bound in the
   built worker (``o<t.length`` to ``o<=t.length``).

4. **Every word of the index can be found.** lunr 2.3.9, which Material's worker bundles,
   stores the vocabulary as a minimised automaton (``lunr.TokenSet``), and merges two states
   when their ``toString()`` keys are equal. A key is the final flag followed by each edge's
   one-character label and the target state's id, with nothing between them, so a digit label
   makes keys ambiguous: two non-final states with edges {1: 1125} and {1: 11, 2: 5} both
   read ``011125``. Which states collide depends on the whole vocabulary. Once this
   handbook's did, the automaton lost the word 1712.05889v1 and gained 1712.0 and 1712.9,
   which the index lacks; a query with a word that they start with (1, 17, 1712, as in the
   pasted message ``1 worker(s) were killed ...``) threw inside the worker, and the reader
   saw "No matching documents".
   ``on_post_build`` ends each edge's part of the key with a comma: a label is one
   character and an id has only digits, so equal keys mean equal states again.

Both fixes to the worker are text replacements in Material 9.8.1's minified bundle; each
fails the build if its text is gone, so an upgrade cannot undo one silently.

``tests/browser/test_site.py`` checks all four: glossary terms land on their page, a Chinese
search for ``DataProto`` lands on a Chinese page, the first result for 超时 and 资源池 is the
page about them, and the index that the worker builds finds every word it holds, in both
languages.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jieba
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

CJK = re.compile(r"[\u4e00-\u9fff]")
ZH = "zh/"
NOT_TERMS = {"中文", "中文页面写作", "不译"}  # table headers, and the note "(not translated)"


def glossary_terms(text: str) -> list[str]:
    """The Chinese renderings in the glossary's tables (column 2), glossed or glossing.

    放置组（placement group） gives 放置组; ResourcePool（资源池） gives 资源池.
    """
    terms = []
    for row in re.findall(r"^\|([^|\n]+)\|([^|\n]+)\|", text, re.M):
        for term in re.split(r"[/、，（）]", row[1]):
            term = term.strip()
            if CJK.search(term) and " " not in term and len(term) >= 2 and term not in NOT_TERMS:
                terms.append(term)
    return sorted(set(terms))


def on_config(config, **kwargs):
    glossary = Path(config.docs_dir) / "glossary.zh.md"
    if not glossary.exists():  # tools/i18n_parity_hook.py reports the missing translation
        return config
    for term in glossary_terms(glossary.read_text()):
        jieba.add_word(term)  # with no frequency given, jieba picks one that keeps it whole
    return config


def on_post_page(output: str, page, **kwargs) -> str:
    if not page.url.startswith(ZH):
        return output
    # "base" is the relative path to the site root; the Chinese index lives under zh/. The
    # trailing slash matters: Material resolves new URL("search/...", base), and without
    # it the last segment, zh, would be replaced.
    return re.sub(r'("base": ")([^"]*)(")', lambda m: f"{m[1]}{m[2]}/zh/{m[3]}", output, count=1)


# Text replacements in Material 9.8.1's search worker (assets/javascripts/workers/search.*.min.js),
# as (what it fixes, Material's text, the fixed text).
WORKER_FIXES = (
    # Query segmentation (point 3): every word that starts at s and ends before the last
    # character; the fix lets a word end at the last character too.
    (
        "a Chinese query's last character",
        "for(let o=s+1;o<t.length;o++)t.slice(s,o)in e",
        "for(let o=s+1;o<=t.length;o++)t.slice(s,o)in e",
    ),
    # lunr.TokenSet.prototype.toString (point 4): final flag, then label + id per edge; the
    # fix ends each edge's part with a comma.
    (
        "lunr's vocabulary automaton",
        "e=e+s+o.id}return e",
        'e=e+s+o.id+","}return e',
    ),
)


def patch_search_worker(site_dir: Path) -> None:
    """Apply WORKER_FIXES to the built worker (points 3 and 4 above).

    Raises PluginError if Material's text for a fix is not found exactly once.
    """
    for worker in sorted(site_dir.glob("assets/javascripts/workers/search.*.min.js")):
        code = worker.read_text(encoding="utf-8")
        for what, text, fixed in WORKER_FIXES:
            if fixed in code:
                continue
            if code.count(text) != 1:
                raise PluginError(
                    f"{worker.name}: Material's search worker changed, so the fix for {what} "
                    f"no longer applies; look for {text!r} and update "
                    "tools/search_by_language_hook.py"
                )
            code = code.replace(text, fixed)
        worker.write_text(code, encoding="utf-8")


@event_priority(-200)  # after mkdocs-static-i18n (-100) has written the joint index
def on_post_build(config, **kwargs):
    patch_search_worker(Path(config.site_dir))
    index_path = Path(config.site_dir) / "search" / "search_index.json"
    if not index_path.exists():
        return
    index = json.loads(index_path.read_text())
    chinese = [d for d in index["docs"] if d["location"].startswith(ZH)]
    if not chinese:  # an inner (per-language) build: the joint index is not written yet
        return
    english = [d for d in index["docs"] if not d["location"].startswith(ZH)]
    for doc in chinese:
        doc["location"] = doc["location"][len(ZH) :]
    zh_path = Path(config.site_dir) / ZH / "search" / "search_index.json"
    zh_path.parent.mkdir(parents=True, exist_ok=True)
    zh_path.write_text(json.dumps({**index, "docs": chinese}, ensure_ascii=False))
    index_path.write_text(json.dumps({**index, "docs": english}, ensure_ascii=False))
