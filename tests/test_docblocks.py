"""The doc-block harness itself: what it collects, what it fails, and that it cleans up.

Each test writes a small Markdown page into a temporary directory and runs
pytest on it in-process (pytester), with the same parser, setup and teardown
that ``tests/docblocks/plugin.py`` uses for ``docs/``.
"""

from __future__ import annotations

import os
import textwrap

import pytest
from sybil import Document
from sybil.parsers.markdown import PythonCodeBlockParser

from tests.docblocks.collect import BlockKind, classify, language_of, marker_before
from tests.docblocks.match import matches
from tests.docblocks.plugin import EXECUTE_LANGUAGES

CONFTEST = """
from sybil import Sybil
from tests.docblocks.plugin import parse_blocks, start_page, stop_what_the_page_started

pytest_collect_file = Sybil(
    parsers=[parse_blocks], patterns=["*.md"],
    setup=start_page, teardown=stop_what_the_page_started,
).pytest()
"""

FENCE = "```"
# pytester points HOME at a temp dir; Ray keeps its auth token under ~/.ray, and a
# process that already started Ray once must find the same token again.
REAL_HOME = os.environ.get("HOME", "")


def page(text: str) -> str:
    return textwrap.dedent(text).replace("~~~", FENCE)


def run_page(pytester, text: str):
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".md", page=page(text))
    return pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider", "-q")


def test_python_block_with_attributes_is_collected_and_checked(pytester):
    result = run_page(
        pytester,
        """
        # A page
        ~~~python title="hello.py" hl_lines="1"
        print("hi")
        ~~~

        ~~~output
        hi
        ~~~
        """,
    )
    result.assert_outcomes(passed=2)


def test_sybil_stock_parser_would_have_skipped_it(tmp_path):
    # Why the harness has its own lexer: Sybil's parser sees no example here.
    path = tmp_path / "page.md"
    path.write_text(page('~~~python title="hello.py"\nprint("hi")\n~~~\n'))
    document = Document.parse(str(path), PythonCodeBlockParser())
    assert list(document.examples()) == []


def test_wrong_output_fails_with_both_texts(pytester):
    result = run_page(
        pytester,
        """
        ~~~python
        print(6 * 7)
        ~~~

        ~~~output
        41
        ~~~
        """,
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*page shows*", "41", "*block printed*", "42"])


def test_blocks_share_one_namespace_per_page(pytester):
    result = run_page(
        pytester,
        """
        ~~~python
        x = 20
        ~~~

        ~~~python
        print(x + 1)
        ~~~

        ~~~output
        21
        ~~~
        """,
    )
    result.assert_outcomes(passed=3)


def test_unmarked_block_fails_and_says_how_to_fix(pytester):
    result = run_page(
        pytester,
        """
        ~~~text
        ray start --head
        ~~~
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*neither run nor marked*<!-- block: illustration -->*"])


def test_marked_illustration_is_not_run_and_data_is_parsed(pytester):
    result = run_page(
        pytester,
        """
        <!-- block: illustration (a shell session) -->
        ~~~bash
        this would fail if it ran
        ~~~

        <!-- block: data -->
        ~~~yaml
        key: [1, 2
        ~~~
        """,
    )
    result.assert_outcomes(failed=1)  # only the broken YAML is an item, and it fails


def test_output_must_follow_a_python_block(pytester):
    result = run_page(
        pytester,
        """
        ~~~output
        orphan
        ~~~
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*must come right after a `python` or `bash` block*"])


def test_gpu_block_is_skipped_with_a_reason_without_cuda(pytester):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the block would run")
    pytester.makeconftest(CONFTEST)
    pytester.makefile(
        ".md",
        page=page(
            '<!-- block: gpu -->\n~~~python\nimport torch\ntorch.ones(1, device="cuda")\n~~~\n'
        ),
    )
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs a CUDA GPU*"])


def test_ray_is_shut_down_after_a_page_whose_block_failed(pytester, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("HOME", REAL_HOME)
    assert not ray.is_initialized()
    result = run_page(
        pytester,
        """
        ~~~python
        import ray
        ray.init(num_cpus=1, include_dashboard=False)
        ~~~

        ~~~python
        raise RuntimeError("a block fails half-way through the page")
        ~~~
        """,
    )
    result.assert_outcomes(passed=1, failed=1)
    assert not ray.is_initialized()


def test_fence_inside_content_tabs_is_collected(pytester):
    result = run_page(
        pytester,
        """
        === "Python"

            ~~~python
            print("inside a tab")
            ~~~

            ~~~output
            inside a tab
            ~~~
        """,
    )
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize(
    ("expected", "actual", "match"),
    [
        ("a\nb", "a\nb\n", True),
        ("took ... s", "took 1.3 s", True),
        ("took ... s", "took 1.3 ms", False),
        ("x", "x\ny", False),
        ("ratio: ...x", "ratio: 12.0x", True),
        ("a\n...\nb", "a\nb", True),  # `...` alone on a line: zero lines too
        ("a\n...\nb", "a\nx\ny\nb", True),
        ("a\n...\nb", "a\nx\nbc", False),
        ("started on <ip>:<n>", "started on 192.0.2.2:6379", True),
        ("started on <ip>", "started on localhost", False),
        ("pid=<n>", "pid=<n>", False),  # a placeholder is a pattern, not literal text
    ],
)
def test_one_matching_dialect_for_output_and_console_blocks(expected, actual, match):
    assert matches(expected, actual) is match


def test_classification():
    assert language_of('python title="a.py"') == "python"
    assert classify("text", None).kind == "unmarked"
    assert classify("bash", None).kind == "bash"
    assert classify("console", ("run", "timeout=9")) == BlockKind("console", "console", "timeout=9")
    assert classify("python", ("run", "")).kind == "unmarked"
    assert classify("yaml", ("file", "cluster.yaml")).kind == "file"
    assert classify("yaml", ("file", "")).kind == "unmarked"
    assert classify("bash", ("illustration", "")).kind == "illustration"
    assert classify("bash", ("gpu", "")).kind == "unmarked"
    assert classify("python", ("gpu", "")).kind == "gpu"
    assert classify("python", ("skip", "")).kind == "unmarked"
    text = "<!-- block: data (a config) -->\n```yaml\n"
    assert marker_before(text, text.index("```")) == ("data", "(a config)")


def test_chinese_pages_run_only_when_asked(pytester, monkeypatch):
    # By default the English page runs and the Chinese page yields no items: that its blocks
    # agree is tests/test_docs_pages.py's job. --doc-languages=all runs both.
    pytester.makeconftest(CONFTEST)
    english = page(
        """
        # Page
        ~~~python
        print(6 * 7)
        ~~~

        ~~~output
        42
        ~~~
        """
    )
    pytester.makefile(".md", page=english)
    pytester.makefile(".zh.md", page=english.replace("# Page", "# 页面"))
    options = ("-p", "no:xdist", "-p", "no:cacheprovider", "-q")
    pytester.runpytest_inprocess(*options).assert_outcomes(passed=2)
    # What `--doc-languages=all` sets (the in-process run below has no plugin options).
    monkeypatch.setitem(EXECUTE_LANGUAGES, "value", "all")
    pytester.runpytest_inprocess(*options).assert_outcomes(passed=4)
