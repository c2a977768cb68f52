"""A broken link or anchor fails the site build (``mkdocs build --strict``, the real
``mkdocs.yml`` and hook).

A module of its own because it needs a whole build of its own (about a minute on 2 cores):
xdist hands out a module at a time, so this build runs beside test_site_build.py's healthy
one instead of after it, and a rerun after a one-page edit waits for neither in turn.
"""

from __future__ import annotations

import pytest

from tests.test_site_build import build, copy_site_sources

pytestmark = pytest.mark.reads_docs("docs")


def test_broken_link_and_broken_anchor_fail_the_build(tmp_path):
    project = copy_site_sources(tmp_path)
    page = project / "docs" / "ray-core" / "tasks.md"
    page.write_text(page.read_text("utf-8") + "\nSee [nowhere](no-such-page.md).\n", "utf-8")
    zh_page = project / "docs" / "glossary.zh.md"
    zh_page.write_text(
        zh_page.read_text("utf-8") + "\n[坏锚点](errata.md#no-such-entry)\n", "utf-8"
    )
    result = build(project)
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr  # a link to a page that does not exist
    assert "no-such-entry" in result.stderr  # an anchor that does not exist
