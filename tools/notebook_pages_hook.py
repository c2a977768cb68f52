"""MkDocs hook: let notebooks be pages in both languages (mkdocs-jupyter + mkdocs-static-i18n).

mkdocs-jupyter turns ``*.ipynb`` files into pages by wrapping their File
objects. mkdocs-static-i18n then rebuilds every File as a plain
``mkdocs.structure.files.File``, which only counts ``.md`` files as pages, so
the notebook is copied to ``page/index.html`` as a static file: the reader
sees raw JSON, and ``mkdocs build --strict`` still passes.

Declaring ``.ipynb`` a page extension before the files are collected keeps
notebooks pages through the i18n rebuild; mkdocs-jupyter's ``on_pre_page``
then renders them, and the language switcher links ``nb.ipynb`` with
``nb.zh.ipynb`` like any other pair. There is no configuration option for
this in either plugin (mkdocs 1.6.1, mkdocs-jupyter 0.26.3,
mkdocs-static-i18n 1.3.1), so the hook extends MkDocs' list of page
extensions. ``tests/test_site_build.py`` checks that the built notebook pages
show rendered cells.
"""

import mkdocs.utils


def on_config(config, **kwargs):
    if ".ipynb" not in mkdocs.utils.markdown_extensions:
        mkdocs.utils.markdown_extensions = (*mkdocs.utils.markdown_extensions, ".ipynb")
    return config
