"""``pytest --update-outputs`` (tests/docblocks/update_outputs.py): a stale output block is
rewritten from what its page printed, on the page and on its Chinese twin.

Each test writes a page and its twin into a temporary directory and runs pytest on them
in-process (pytester), with the doc-block plugin loaded, as ``tests/test_docblocks.py`` does.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.docblocks.update_outputs import merged
from tests.test_docblocks import CONFTEST

pytestmark = pytest.mark.reads_docs()

FENCE = "```"
PLUGIN = ("-p", "tests.docblocks.plugin", "-p", "no:xdist", "-p", "no:cacheprovider", "-q")


def page(heading: str, shown: str, extra: str = "") -> str:
    text = f"""
        # {heading}
        ~~~python
        import random
        print("sum:", 6 * 7)
        print("id:", random.randrange(10**6))
        print("done")
        ~~~

        ~~~output
        {shown}
        ~~~
        {extra}"""
    return textwrap.dedent(text).replace("~~~", FENCE)


STALE = "sum: 41\nid: <n>"  # the page's patterns (<n>) must survive the rewrite
FRESH = "sum: 42\nid: <n>\ndone"


def write_pages(pytester, english: str, chinese: str) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".md", page=english)
    pytester.makefile(".zh.md", page=chinese)


def test_a_stale_output_block_is_rewritten_in_both_languages(pytester):
    stale = textwrap.indent(STALE, " " * 8).lstrip()
    write_pages(pytester, page("A page", stale), page("一页", stale))
    before = {name: (pytester.path / name).read_text() for name in ("page.md", "page.zh.md")}
    result = pytester.runpytest_inprocess(*PLUGIN)
    result.assert_outcomes(failed=1, passed=1)  # without the option the output block fails

    result = pytester.runpytest_inprocess(*PLUGIN, "--update-outputs")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*output blocks rewritten*", "page.md, line 9 and page.zh.md, line 9"]
    )
    for name, text in before.items():
        assert STALE in text
        assert (pytester.path / name).read_text() == text.replace(STALE, FRESH), name

    pytester.runpytest_inprocess(*PLUGIN).assert_outcomes(passed=2)  # and it now holds


def test_a_twin_whose_output_differs_is_refused_naming_the_block(pytester):
    stale = textwrap.indent(STALE, " " * 8).lstrip()
    other = textwrap.indent("sum: 40\nid: <n>", " " * 8).lstrip()
    write_pages(pytester, page("A page", stale), page("一页", other))
    result = pytester.runpytest_inprocess(*PLUGIN, "--update-outputs")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        ["*refused to rewrite the output block at page.md, line 9*page.zh.md, block 2, line 9*"]
    )
    assert "sum: 41" in (pytester.path / "page.md").read_text()  # nothing written
    assert "sum: 40" in (pytester.path / "page.zh.md").read_text()


def test_an_output_block_inside_content_tabs_keeps_its_indentation(pytester):
    text = textwrap.dedent(
        """
        === "Tab"

            ~~~python
            print("a")
            ~~~

            ~~~output
            b
            ~~~
        """
    ).replace("~~~", FENCE)
    write_pages(pytester, text, text)
    before = (pytester.path / "page.md").read_text()
    assert "    b\n" in before
    pytester.runpytest_inprocess(*PLUGIN, "--update-outputs").assert_outcomes(passed=2)
    for name in ("page.md", "page.zh.md"):
        assert (pytester.path / name).read_text() == before.replace("    b\n", "    a\n")


def test_the_merge_keeps_patterns_that_still_match():
    assert merged("x: <n>\n...\nend", "x: 3\nmore\nlines\nend\nnew") == "x: <n>\n...\nend\nnew"
    assert merged("took ... s\nok", "took 0.3 s\nfailed") == "took ... s\nfailed"
    assert merged("", "a") == "a"
