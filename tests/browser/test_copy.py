"""What a click on a code block's copy button puts on the clipboard, read back in Chromium.

A console block copies its commands only: no `$ ` prompt, no output lines, and a command
continued with a trailing backslash keeps its continuation lines, so that the pasted text
runs (docs/assets/javascripts/console-copy.js). A python block copies its source as it is.
"""

from __future__ import annotations

import pytest

from page_blocks import blocks
from tests.browser.conftest import REPO, Site

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

# Console blocks, each found by its page and a piece of its text, and the commands it copies.
CONSOLE_BLOCKS = [
    pytest.param(
        "cluster/start/",
        "--temp-dir=/tmp/ray-node2",
        "ray start --address=127.0.0.1:6379 --num-cpus=2 --resources='{\"laptop2\": 1}' \\\n"
        "    --temp-dir=/tmp/ray-node2 --dashboard-agent-listen-port=52366",
        id="continued-command-then-output",
    ),
    pytest.param(
        "cluster/start/",
        "ray get-auth-token --generate",
        "ray get-auth-token --generate\nexport RAY_AUTH_MODE=token",
        id="two-commands-output-between",
    ),
    # Output lines that start with "(autoscaler +<n>s)", which Pygments marks as a prompt.
    pytest.param(
        "troubleshooting/hangs/",
        "grep autoscaler hang.log",
        "grep autoscaler hang.log | head -2",
        id="output-with-a-virtualenv-like-prefix",
    ),
]

# A python block of docs/cluster/start.md, found by a piece of its text; it copies its source.
PYTHON_PAGE = "cluster/start/"
PYTHON_BLOCK = 'resources={"laptop2": 1}'

# Something no copy button writes: the clipboard holds it until the click replaces it.
SENTINEL = "clipboard before the click"


@pytest.fixture(scope="module")
def context(browser):
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    yield context
    context.close()


def copied(context, site: Site, lang: str, path: str, language: str, containing: str) -> str:
    """Click the copy button of the `language` block of page `path` that contains `containing`;
    return what the clipboard then holds."""
    page = context.new_page()
    try:
        page.goto(site.url(lang, path))
        block = page.locator(f"div.language-{language}.highlight", has_text=containing)
        found = block.count()
        assert found == 1, f"{lang}:/{path}: {found} {language} blocks contain {containing!r}"
        page.evaluate("text => navigator.clipboard.writeText(text)", SENTINEL)
        block.locator('button[data-md-type="copy"]').click()
        page.wait_for_function(
            "sentinel => navigator.clipboard.readText().then(text => text !== sentinel)",
            arg=SENTINEL,
            timeout=10_000,
        )
        return page.evaluate("() => navigator.clipboard.readText()")
    finally:
        page.close()


def python_source(containing: str) -> str:
    """The body of the python fence of docs/cluster/start.md that contains `containing`."""
    page = REPO / "docs" / "cluster" / "start.md"
    bodies = [block.source for block in blocks(page) if block.language == "python"]
    matching = [body for body in bodies if containing in body]
    assert len(matching) == 1, f"{len(matching)} python blocks of start.md contain {containing!r}"
    return matching[0].rstrip("\n")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path, containing, commands", CONSOLE_BLOCKS)
def test_console_block_copies_its_commands_only(site, context, lang, path, containing, commands):
    assert copied(context, site, lang, path, "console", containing) == commands


def test_python_block_copies_its_source(site, context):
    source = python_source(PYTHON_BLOCK)
    assert copied(context, site, "en", PYTHON_PAGE, "python", PYTHON_BLOCK) == source
