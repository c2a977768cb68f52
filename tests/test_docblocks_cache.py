"""The execution cache (tests/docblocks/cache.py): a page that passed and has not changed is
not run again; editing the page, or code it runs from the repository, runs it again. Test
modules are cached too, keyed by the checkout and the pages they name (``reads_docs``).

Each test writes a page (and a module it imports, under ``lib/``, which the run's
``docblocks_cache_code`` names as the repository's code) into a temporary directory and runs
pytest on it in-process (pytester), with the doc-block plugin and pytest's cache directory.
"""

from __future__ import annotations

import pytest

from tests.test_docblocks import CONFTEST

pytestmark = pytest.mark.reads_docs()

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


# Test modules: a checkout (git lists its files) with docs/ and a tests/ module.
MODULE = """
import pathlib

import pytest

pytestmark = pytest.mark.reads_docs("docs/named.md")


def test_reads_the_page_it_names():
    assert pathlib.Path("docs/named.md").read_text().startswith("#")


def test_another():
    assert True
"""


@pytest.fixture
def checkout(pytester, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    (pytester.path / "docs").mkdir()
    (pytester.path / "docs" / "named.md").write_text("# Named\n")
    (pytester.path / "docs" / "other.md").write_text("# Other\n")
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_mod.py").write_text(MODULE)
    pytester.run("git", "init", "-q")  # untracked files are listed: nothing to commit
    return pytester


def run_tests(pytester, *options):
    return pytester.runpytest_inprocess(*PLUGIN, "tests", *options)


def edit(path, old, new):
    path.write_text(path.read_text().replace(old, new))


def test_a_test_module_that_passed_comes_from_the_cache(checkout):
    run_tests(checkout).assert_outcomes(passed=2)
    result = run_tests(checkout)
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["execution cache: 0 pages (0 blocks), 1 test modules (2 tests)*"])
    run_tests(checkout, "--no-cache").assert_outcomes(passed=2)


def test_editing_the_module_or_a_page_it_names_runs_it_again(checkout):
    run_tests(checkout).assert_outcomes(passed=2)
    edit(checkout.path / "tests" / "test_mod.py", "assert True", "assert 1")
    run_tests(checkout).assert_outcomes(passed=2)
    edit(checkout.path / "docs" / "named.md", "# Named", "# Renamed")
    run_tests(checkout).assert_outcomes(passed=2)
    run_tests(checkout).assert_outcomes(skipped=2)


def test_editing_a_page_it_does_not_name_leaves_it_cached(checkout):
    run_tests(checkout).assert_outcomes(passed=2)
    edit(checkout.path / "docs" / "other.md", "# Other", "# Another")
    run_tests(checkout).assert_outcomes(skipped=2)


def test_a_file_outside_docs_is_part_of_every_module_key(checkout):
    run_tests(checkout).assert_outcomes(passed=2)
    (checkout.path / "helper.py").write_text("X = 1\n")  # new, untracked: git lists it
    run_tests(checkout).assert_outcomes(passed=2)


def test_a_module_without_the_mark_reruns_when_any_page_changes(checkout):
    edit(checkout.path / "tests" / "test_mod.py", "pytestmark =", "unmarked =")
    run_tests(checkout).assert_outcomes(passed=2)
    run_tests(checkout).assert_outcomes(skipped=2)
    edit(checkout.path / "docs" / "other.md", "# Other", "# Another")
    run_tests(checkout).assert_outcomes(passed=2)


def test_a_module_with_a_skipped_test_is_never_cached(checkout):
    edit(checkout.path / "tests" / "test_mod.py", "assert True", "pytest.skip('no GPU here')")
    run_tests(checkout).assert_outcomes(passed=1, skipped=1)
    run_tests(checkout).assert_outcomes(passed=1, skipped=1)


def test_a_module_that_reads_a_page_it_does_not_name_is_not_cached(checkout):
    edit(
        checkout.path / "tests" / "test_mod.py",
        'reads_docs("docs/named.md")',
        'reads_docs("docs/other.md")',
    )
    result = run_tests(checkout)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["execution cache: not caching tests/test_mod.py: it read docs/named.md, which*"]
    )
    run_tests(checkout).assert_outcomes(passed=2)


def test_another_selection_of_a_module_runs_again(checkout):
    run_tests(checkout, "-k", "another").assert_outcomes(passed=1)
    run_tests(checkout, "-k", "another").assert_outcomes(skipped=1)
    run_tests(checkout).assert_outcomes(passed=2)
