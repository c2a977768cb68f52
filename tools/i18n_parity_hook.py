"""MkDocs hook: refuse to build when a page exists in only one language.

mkdocs-static-i18n (``docs_structure: suffix``) pairs ``page.md`` (English, the
default) with ``page.zh.md`` (简体中文). With ``fallback_to_default: false`` a
missing Chinese page is simply left out of ``/zh/``; the build still passes,
even with ``--strict``. This hook turns that silent gap into a failed build,
naming each missing file, so that both languages always ship together.

Registered in ``mkdocs.yml`` under ``hooks:``; tested by
``tests/test_site_build.py::test_missing_translation_fails_the_build``.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.exceptions import PluginError

# MkDocs puts the hook's folder on sys.path while it loads the hook.
from page_blocks import twin

SUFFIXES = (".md", ".ipynb")


def missing_twins(docs_dir: Path) -> list[tuple[Path, Path]]:
    """List ``(page, missing twin)`` pairs under ``docs_dir``, paths relative to it."""
    pages = sorted(p for p in docs_dir.rglob("*") if p.suffix in SUFFIXES and p.is_file())
    return [
        (page.relative_to(docs_dir), twin(page).relative_to(docs_dir))
        for page in pages
        if not twin(page).exists()
    ]


def on_pre_build(config, **kwargs) -> None:
    missing = missing_twins(Path(config["docs_dir"]))
    if missing:
        lines = "\n".join(f"  - {page} has no twin {other}" for page, other in missing)
        raise PluginError(
            "Every page must exist in English and in Chinese (page.md and page.zh.md).\n"
            f"{lines}\n"
            "Add the missing file with the same code blocks and headings, "
            "or remove the page from both languages."
        )
