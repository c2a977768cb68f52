"""The benchmarks run (in their quick mode) and report every comparison.

Ratios are printed, not asserted: performance is judged from `nox -s bench`
on a quiet machine, not from a timed test on a shared one.
"""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.reads_docs()

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_single_controller_benchmark_reports_all_ratios():
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "single_controller.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split()[0:2] for line in done.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["ONE_TO_ALL", "DP_COMPUTE_PROTO", "DP_COMPUTE_PROTO"]
    for line in done.stdout.splitlines()[1:]:
        ratio = float(line.split("x")[0].split()[-1])
        assert ratio > 0


def test_ray_core_benchmark_reports_figures_and_ratios():
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "ray_core.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line[:34].strip(): line[34:].split() for line in done.stdout.splitlines()[1:]}
    assert "tasks/s, batched" in rows and "ray.get torch GB/s" in rows, done.stdout
    for name, cells in rows.items():
        assert float(cells[0].replace(",", "")) > 0, name
