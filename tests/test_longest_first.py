"""Longest first (tests/docblocks/longest_first.py): xdist workers take the files in the order of
what they took last time, longest first, and the controller records what each file took."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.reads_docs()

REPO = Path(__file__).resolve().parents[1]
PLUGIN = ("-p", "tests.docblocks.plugin", "--dist", "loadfile", "-n", "1", "-v")


@pytest.fixture(autouse=True)
def harness_importable(monkeypatch):
    """The runs below are subprocesses in a temporary directory: give them the harness."""
    paths = [str(REPO), str(REPO / "tools"), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))


def test_files_run_longest_first_by_the_record(pytester):
    for name in ("test_a", "test_b", "test_c"):
        pytester.makepyfile(**{name: "def test_one():\n    pass\n\ndef test_two():\n    pass\n"})
    record = pytester.path / ".pytest_cache" / "v" / "docblocks" / "durations"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"test_a.py": 2.0, "test_b.py": 30.0}))
    result = pytester.runpytest_subprocess(*PLUGIN)
    result.assert_outcomes(passed=6)
    ran = [line.split()[-1] for line in result.outlines if " PASSED " in line]
    assert [nodeid.split("::")[0] for nodeid in ran] == [
        "test_b.py",
        "test_b.py",
        "test_a.py",
        "test_a.py",
        "test_c.py",
        "test_c.py",
    ]


def test_the_controller_records_what_each_file_took(pytester):
    pytester.makepyfile(test_slow="import time\n\ndef test_one():\n    time.sleep(1.1)\n")
    pytester.makepyfile(test_quick="def test_one():\n    pass\n")
    pytester.runpytest_subprocess(*PLUGIN).assert_outcomes(passed=2)
    record = pytester.path / ".pytest_cache" / "v" / "docblocks" / "durations"
    took = json.loads(record.read_text())
    assert took["test_slow.py"] >= 1.1
    assert "test_quick.py" not in took  # under a second: not worth a place in the order


def test_without_a_cache_the_shipped_record_gives_the_order(pytester):
    for name in ("test_a", "test_b"):
        pytester.makepyfile(**{name: "def test_one():\n    pass\n"})
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "durations.json").write_text(json.dumps({"test_b.py": 9.0}))
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider")
    ran = [line.split()[-1].split("::")[0] for line in result.outlines if " PASSED " in line]
    assert ran == ["test_b.py", "test_a.py"]
