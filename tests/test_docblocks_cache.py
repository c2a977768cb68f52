"""The execution cache (tests/docblocks/cache.py): a page that passed and has not changed is
not run again; editing the page, or code it runs from the repository, runs it again.

Each test writes a page (and a module it imports, under ``lib/``, which the run's
``docblocks_cache_code`` names as the repository's code) into a temporary directory and runs
pytest on it in-process (pytester), with the doc-block plugin and pytest's cache directory.
"""

from __future__ import annotations

import pytest

from tests.test_docblocks import CONFTEST

FENCE = "```"
PLUGIN = ("-p", "tests.docblocks.plugin", "-p", "no:xdist", "-o", "docblocks_cache_code=lib", "-q")

PAGE = """
# A page
~~~python
import importlib

helper = importlib.import_module("helper")  # lib/helper.py, the "repository's" module
print(helper.ANSWER)
~~~

~~~output
...
~~~
"""


@pytest.fixture
def project(pytester, monkeypatch):
    monkeypatch.delenv("CI", raising=False)  # CI turns the cache off
    monkeypatch.setenv("PYTHONPATH", str(pytester.path / "lib"))  # the page script's import
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".md", page=PAGE.replace("~~~", FENCE))
    (pytester.path / "lib").mkdir()
    (pytester.path / "lib" / "helper.py").write_text("ANSWER = 42\n")
    return pytester


def run(pytester, *options):
    return pytester.runpytest_inprocess(*PLUGIN, *options)


def test_an_unchanged_page_that_passed_comes_from_the_cache(project):
    run(project).assert_outcomes(passed=2)
    result = run(project)
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["execution cache: 1 pages (2 blocks) taken from the cache*"])
    run(project, "--no-cache").assert_outcomes(passed=2)


def test_editing_the_page_runs_it_again(project):
    run(project).assert_outcomes(passed=2)
    page = project.path / "page.md"
    page.write_text(page.read_text().replace("print(helper.ANSWER)", "print(helper.ANSWER + 1)"))
    run(project).assert_outcomes(passed=2)
    run(project).assert_outcomes(skipped=2)


def test_editing_a_module_the_page_imports_runs_it_again(project):
    run(project).assert_outcomes(passed=2)
    (project.path / "lib" / "helper.py").write_text("ANSWER = 43\n")
    run(project).assert_outcomes(passed=2)
    run(project).assert_outcomes(skipped=2)


def test_a_failing_page_is_never_cached(project):
    page = project.path / "page.md"
    page.write_text(page.read_text().replace("...", "41"))
    run(project).assert_outcomes(passed=1, failed=1)
    run(project).assert_outcomes(passed=1, failed=1)


def test_ci_runs_everything(project, monkeypatch):
    run(project).assert_outcomes(passed=2)
    monkeypatch.setenv("CI", "true")
    result = run(project)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["execution cache off (CI is set): every page ran"])


def test_part_of_a_page_runs_and_is_not_cached(project):
    run(project, "--deselect", "page.md::line:9,column:1").assert_outcomes(passed=1)
    run(project).assert_outcomes(passed=2)  # the whole page had not passed yet
