"""A page run as several scripts (``<!-- page: scripts=N -->``, page_blocks.script_parts): which
block runs where, and a page so split passes as it does whole.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from page_blocks import item_id, parse, script_parts
from tests.docblocks.page_scripts import script_scope
from tests.test_docblocks import CONFTEST

pytestmark = pytest.mark.reads_docs("docs/errata.md")

FENCE = "```"

PAGE = """
# Entries

<!-- page: scripts=2 -->

~~~python
BASE = 40
~~~

## A

~~~python
shared = BASE + 1
print("a", shared)
~~~

~~~output
a 41
~~~

## B

~~~python
print("b", BASE + 2)
~~~

~~~output
b 42
~~~

## C

~~~python
print("c", shared + 2)  # reads what section A made: runs in A's script
~~~

~~~output
c 43
~~~
"""


def text() -> str:
    return textwrap.dedent(PAGE).replace("~~~", FENCE)


def test_set_up_runs_everywhere_and_a_section_joins_the_one_it_reads_from():
    # block 1: set-up (every script); A and C together (C reads `shared`); B alone.
    assert script_parts(text()) == {1: None, 2: 0, 3: 1, 4: 0}
    assert script_parts(text().replace("<!-- page: scripts=2 -->", "")) == dict.fromkeys(
        (1, 2, 3, 4), 0
    )


def test_each_script_is_a_scope_of_its_own_for_the_workers(tmp_path):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(text())
    scopes = [
        script_scope(tmp_path, item_id("docs/page.md", block))
        for block in parse(text())
        if not isinstance(block, str)
    ]
    assert scopes == [f"docs/page.md::script{n}" for n in (0, 0, 0, 1, 1, 0, 0)]
    assert script_scope(tmp_path, "tests/test_x.py::test_y") == "tests/test_x.py"


def test_a_page_in_two_scripts_passes(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".md", page=text())
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-s")
    result.assert_outcomes(passed=7)
    assert result.stdout.str().count("@@take-away block 1@@") == 2  # the set-up, in each


def test_the_scripts_hold_only_their_own_blocks(pytester):
    pytester.makeconftest(CONFTEST)
    page = text().replace('print("b", BASE + 2)', 'print("b", BASE + 2, "shared" in globals())')
    pytester.makefile(".md", page=page.replace("b 42", "b 42 False"))
    pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider").assert_outcomes(
        passed=7
    )


def test_errata_runs_as_one_script():
    # Its entries read the Ray state earlier ones leave (E25 times E15's tasks, E34 finds
    # E20's worker), which the name analysis of `scripts=N` cannot see.
    errata = Path(__file__).parents[1] / "docs" / "errata.md"
    assert set(script_parts(errata.read_text("utf-8")).values()) == {0}
