"""The doc-block harness itself: what it collects, what it fails, and that it cleans up.

Each test writes a small Markdown page into a temporary directory and runs pytest on it
in-process (pytester), with the same parser, setup and teardown that
``tests/docblocks/plugin.py`` uses for ``docs/``: the page's python blocks run as its
script, the one way pages run (``tests/docblocks/page_scripts.py``).
"""

from __future__ import annotations

import os
import textwrap

import pytest
from sybil import Document
from sybil.parsers.markdown import PythonCodeBlockParser

import take_away
from page_blocks import Block, classify, language_of, parse
from tests.docblocks import page_scripts, python_blocks
from tests.docblocks.match import matches
from tests.docblocks.plugin import EXECUTE_LANGUAGES

pytestmark = pytest.mark.reads_docs()

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


def test_a_block_that_raises_fails_at_its_page_line_and_the_next_is_not_run(pytester):
    result = run_page(
        pytester,
        """
        # A page
        ~~~python
        print("first")
        ~~~

        ~~~python
        total = 1
        raise RuntimeError("a block fails half-way through the page")
        ~~~

        ~~~python
        print("never")
        ~~~
        """,
    )
    result.assert_outcomes(passed=1, failed=2)
    # The traceback points at the page (line 8 of page.md), not at the generated script.
    result.stdout.fnmatch_lines(
        [
            "*the page's script raised in this block*",
            '*File "page.md", line 8, in <module>*',
            "*RuntimeError: a block fails half-way through the page*",
            "*not run: the page's script stopped in the block at line 6*",
        ]
    )


def test_a_script_past_its_time_limit_is_killed_and_its_block_fails(pytester, monkeypatch):
    monkeypatch.setattr(page_scripts, "SCRIPT_LIMIT_S", 3)
    result = run_page(
        pytester,
        """
        ~~~python
        print("started")
        ~~~

        ~~~python
        import time
        time.sleep(120)
        ~~~

        ~~~python
        print("after")
        ~~~
        """,
    )
    assert result.duration < 60, "the script was not killed at its limit"
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*killed at its time limit (3 s) while this block ran*",
            "*not run: the page's script stopped in the block at line 5*",
        ]
    )


def test_a_script_killed_by_a_signal_fails_its_block_naming_the_signal(pytester):
    # As the kernel's out-of-memory killer or a segfault would end it: no traceback, no
    # exit status of its own, only the signal (a negative return code).
    result = run_page(
        pytester,
        """
        ~~~python
        print("started")
        ~~~

        ~~~python
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
        ~~~

        ~~~python
        print("after")
        ~~~
        """,
    )
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*the page's script was killed by SIGKILL in this block*",
            "*not run: the page's script stopped in the block at line 5*",
        ]
    )


def test_a_script_that_exits_early_with_status_0_fails_the_blocks_it_never_ran(pytester):
    # Found by `nox -s mutants`: a clean exit half-way is not a pass for what did not run.
    result = run_page(
        pytester,
        """
        ~~~python
        import sys
        print("started")
        ~~~

        ~~~python
        sys.exit(0)
        ~~~

        ~~~python
        print("after")
        ~~~
        """,
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*not run: the page's script stopped in the block at line 6*"])


def test_where_cuda_is_present_a_gpu_block_runs_in_its_place_in_the_script(pytester, monkeypatch):
    # The GPU path is the same script, with the gpu blocks left in; here it runs on CPU, with
    # the harness told that CUDA is present and a gpu block that needs none.
    monkeypatch.setattr(page_scripts, "cuda_available", lambda: True)
    monkeypatch.setattr(python_blocks, "cuda_available", lambda: True)
    result = run_page(
        pytester,
        """
        ~~~python
        steps = ["cpu"]
        ~~~

        <!-- block: gpu -->
        ~~~python
        steps.append("gpu")
        print(steps)
        ~~~

        ~~~output
        ['cpu', 'gpu']
        ~~~

        ~~~python
        print(len(steps))
        ~~~

        ~~~output
        2
        ~~~
        """,
    )
    result.assert_outcomes(passed=5)


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
    assert classify("text", None)[0] == "unmarked"
    assert classify("bash", None) == ("bash", "")
    assert classify("console", ("run", "timeout=9")) == ("console", "timeout=9")
    assert classify("python", ("run", ""))[0] == "unmarked"
    assert classify("yaml", ("file", "cluster.yaml")) == ("file", "cluster.yaml")
    assert classify("yaml", ("file", ""))[0] == "unmarked"
    assert classify("bash", ("illustration", ""))[0] == "illustration"
    assert classify("bash", ("gpu", ""))[0] == "unmarked"
    assert classify("python", ("gpu", ""))[0] == "gpu"
    assert classify("python", ("skip", ""))[0] == "unmarked"


def test_the_page_model_reads_prose_markers_and_offsets():
    text = "# T\n\nSome prose.\n<!-- block: data (a config) -->\n```yaml\na: 1\n```\nmore\n"
    prose, block, after = parse(text)
    assert (prose, after) == ("# T\n\nSome prose.\n", "more\n")  # the marker left the prose
    assert isinstance(block, Block)
    assert (block.kind, block.note, block.source, block.line) == ("data", "(a config)", "a: 1\n", 5)
    assert text[block.start : block.end] == "```yaml\na: 1\n```"


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


def test_what_ray_forwards_and_the_autoscalers_lines_are_not_what_a_block_printed():
    marker = page_scripts.take_away.MARKER_LINE.format
    stdout = "".join(
        [
            f"{marker(1)}\n",
            "(pid=12) a task's print, forwarded\n",
            "\x1b[36m(MyActor pid=34)\x1b[0m an actor's print, forwarded\n",
            "\x1b[33m(autoscaler +3s)\x1b[0m Tip: use `ray status` to view detailed status.\n",
            "the block's own line\n",
            f"{marker('end')}\n",
        ]
    )
    assert page_scripts.cut_at_markers(stdout) == ({1: "the block's own line\n"}, 1)


def test_every_line_of_a_block_maps_to_its_page_line():
    # A traceback names the page's line: each of a block's lines, its last included, maps
    # to the fence's line plus its offset (an odd-length block, whose last line an
    # off-by-one in the range would drop).
    script = "\n".join(
        [
            "import sys",
            f"print({take_away.MARKER_LINE.format(1)!r}, flush=True)",
            "a = 1",
            "b = 2",
            "raise SystemExit(a + b)",
        ]
    )
    assert page_scripts.page_lines(script, {1: (40, 3)}) == {3: 41, 4: 42, 5: 43}


@pytest.mark.parametrize("killed_after_s", [None, 480])
def test_a_failed_scripts_message_keeps_the_end_of_its_stderr(killed_after_s):
    # The traceback's last line is what a reader needs; a long stderr is cut from the front.
    stderr = "noise\n" * 2000 + "ValueError: the real reason"  # 12,027 characters
    run = page_scripts.PageRun(
        returncode=1, stderr=stderr, last_started=2, killed_after_s=killed_after_s
    )
    printed, why = run.outcome(2)
    assert printed is None and why.endswith("ValueError: the real reason")
    assert why.count("noise") < 2000 and len(why) < 4200
