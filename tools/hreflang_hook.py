"""MkDocs hook: drop the per-page ``<link rel="alternate" hreflang>`` tags from ``<head>``.

mkdocs-static-i18n points each page's alternates at the same page in the other
language, which is what the language switch in the header needs. Material 9.8.1
also reads the ``<link rel="alternate">`` tags in ``<head>`` and fetches
``sitemap.xml`` *relative to each of them*, i.e. ``<page>/sitemap.xml``, which
does not exist: two 404s and two console errors on every page
(squidfunk/mkdocs-material#6582). The language pairs are already declared in
the site's ``sitemap.xml`` (``xhtml:link rel="alternate" hreflang``), the form
search engines accept in place of the head tags, so the head tags can go; the
switch's own ``<a hreflang>`` links are left untouched.

``tests/browser/`` fails on any console error or failed request, and checks
that the switch still lands on the same page.
"""

from __future__ import annotations

import re

HEAD_ALTERNATE = re.compile(r'<link rel="alternate" href="[^"]*" hreflang="[^"]*">\s*')


def on_post_page(output: str, **kwargs) -> str:
    head, sep, body = output.partition("</head>")
    return HEAD_ALTERNATE.sub("", head) + sep + body
