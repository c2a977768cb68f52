"""MkDocs hook: Chinese search that knows the glossary, and one search index per language.

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

``tests/browser/test_site.py`` checks both: glossary terms land on their page, and a Chinese
search for ``DataProto`` lands on a Chinese page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jieba
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


@event_priority(-200)  # after mkdocs-static-i18n (-100) has written the joint index
def on_post_build(config, **kwargs):
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
