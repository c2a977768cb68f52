"""MkDocs hook: a page with python blocks offers them as a notebook and as a script.

For each page that ``tools/take_away.py`` gives downloads (its docstring has the rule),
the hook writes ``<name>.ipynb`` and ``<name>.py`` next to the built page
(``site/ray-core/tasks/tasks.py``; the Chinese page's, with Chinese prose, under
``site/zh/ray-core/tasks/``) and puts a box with the two links under the page's title.
It runs after the page is rendered (``on_post_page``), so the links are not in the
search index and MkDocs does not take them for links to missing source files.

A page that mixes executed python blocks with shell blocks fails the build
(``take_away.TakeAwayError``, rule 3). ``tests/test_take_away.py`` runs each script and
checks the built site's links and files.
"""

from __future__ import annotations

import html
from pathlib import Path

from mkdocs.exceptions import PluginError

# MkDocs puts the hook's folder on sys.path while it loads the hook.
import take_away

BOX = {
    "en": (
        "Take this page away",
        "Every python block of this page, in order, with the prose around them:",
        "download as notebook",
        "download as script",
    ),
    "zh": (
        "带走本页",
        "本页全部 python 代码块，按页面顺序，附带前后的说明：",
        "下载为 notebook",
        "下载为脚本",
    ),
}


def links_box(name: str, lang: str) -> str:
    """The HTML of the box: an admonition with the two download links."""
    heading, text, as_notebook, as_script = (html.escape(part) for part in BOX[lang])
    return (
        '<div class="admonition tip take-away">'
        f'<p class="admonition-title">{heading}</p>'
        f'<p>{text} <a href="{name}.ipynb" download>{as_notebook}</a> · '
        f'<a href="{name}.py" download>{as_script}</a></p></div>\n'
    )


def on_post_page(output: str, page, config, **kwargs) -> str:
    src = Path(page.file.abs_src_path or "")
    if src.suffix != ".md":
        return output
    docs = Path(config["docs_dir"])
    try:
        if not take_away.has_downloads(src):
            return output
        name = take_away.download_name(src, docs)
        script = take_away.script_text(src, docs)
        notebook = take_away.notebook_text(src, docs, page.canonical_url)
    except take_away.TakeAwayError as error:
        raise PluginError(f"take_away: {error}") from error
    folder = Path(page.file.abs_dest_path).parent
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(script, "utf-8")
    (folder / f"{name}.ipynb").write_text(notebook, "utf-8")
    article = output.find("<article")
    title_end = output.find("</h1>", article)
    if article < 0 or title_end < 0:
        raise PluginError(f"take_away: {page.file.src_path} has no <h1> to put the links under")
    at = title_end + len("</h1>")
    return output[:at] + "\n" + links_box(name, take_away.language(src)) + output[at:]
