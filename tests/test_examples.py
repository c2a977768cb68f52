"""Every script in examples/ runs to completion and prints what its page says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.reads_docs()

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

EXPECTED = {
    "ray_core_tour.py": ["squares: [0, 1, 4, 9]", "counter: 10", "sum: 1000000.0"],
}


def test_every_example_has_expectations():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name):
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == EXPECTED[name]
