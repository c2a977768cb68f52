"""A shell block that needs an environment variable (``<!-- block: run needs=A,B -->``) is
skipped, in one line saying what to set, where one is unset; where all are set it runs.

The version-mismatch entry of docs/troubleshooting/connect.md uses it for OTHER_PYTHON and
PATCH_PYTHON, which ``nox -s tests`` makes with uv where it can (tools/nox_env.py).
"""

from __future__ import annotations

import pytest

from tests.docblocks.shell_blocks import options_of
from tests.test_docblocks import run_page

pytestmark = pytest.mark.reads_docs("docs/troubleshooting/connect.md")

PAGE = """
<!-- block: run needs=HOUSE_NEEDS_A,HOUSE_NEEDS_B -->
~~~console
$ echo "$HOUSE_NEEDS_A $HOUSE_NEEDS_B"
one two
~~~

~~~console
$ echo always
always
~~~
"""


def test_a_block_whose_variable_is_unset_is_skipped_saying_what_to_set(pytester, monkeypatch):
    monkeypatch.setenv("HOUSE_NEEDS_A", "one")
    monkeypatch.delenv("HOUSE_NEEDS_B", raising=False)
    result = run_page(pytester, PAGE)
    result.assert_outcomes(passed=1, skipped=1)
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider", "-rs")
    result.stdout.fnmatch_lines(["*SKIPPED*needs HOUSE_NEEDS_B: unset here"])


def test_the_skip_says_how_to_get_the_interpreters(pytester, monkeypatch):
    monkeypatch.delenv("PATCH_PYTHON", raising=False)
    page = "<!-- block: run needs=PATCH_PYTHON -->\n~~~console\n$ true\n~~~\n"
    run_page(pytester, page).assert_outcomes(skipped=1)
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider", "-rs")
    result.stdout.fnmatch_lines(
        ["*needs PATCH_PYTHON, a Python of the same minor*uv python install*"]
    )


def test_a_block_whose_variables_are_set_runs(pytester, monkeypatch):
    monkeypatch.setenv("HOUSE_NEEDS_A", "one")
    monkeypatch.setenv("HOUSE_NEEDS_B", "two")
    run_page(pytester, PAGE).assert_outcomes(passed=2)


@pytest.mark.parametrize(
    "note, options",
    [
        ("needs=A,B", {"needs": ("A", "B")}),
        ("timeout=5 needs=A", {"timeout": 5.0, "needs": ("A",)}),
    ],
)
def test_the_run_marker_reads_needs(note, options):
    assert options_of(note) == options
