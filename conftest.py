"""Top-level conftest: loads the plugin that turns every fenced block in docs/ into a test.

It lives here, outside ``docs_dir``, so MkDocs never publishes it; the plugin
itself is ``tests/docblocks/plugin.py``.
"""

pytest_plugins = ["tests.docblocks.plugin", "pytester"]
