"""The GRPO benchmark against TRL runs (in its quick mode) and reports both systems and the ratios.

Who is faster or learns more is printed, not asserted: a 15-second run on a shared
machine says nothing reliable about that.
"""

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "rlhf_vs_trl.py"


# Minutes of CPU for both trainers: it runs with the learning runs, in `nox -s rlhf`.
@pytest.mark.rlhf
def test_rlhf_vs_trl_benchmark_reports_both_systems_and_ratios():
    # TRL and its dependencies are not dependencies of reference_impl.
    for module in ("trl", "transformers", "datasets", "tokenizers"):
        pytest.importorskip(module)
    done = subprocess.run(
        # One torch thread for TRL: its default of one per core can stall for minutes
        # when other processes share the cores, and this test only checks the report.
        [sys.executable, str(BENCHMARK), "--quick", "--trl-threads", "1"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    print(out)  # the table and its ratios, for the log of `nox -s rlhf`
    rows = {line.split(" (")[0] for line in out.splitlines()}
    assert {"ours", "TRL GRPOTrainer"} <= rows, out
    for what in ("tokens/s", "reward at equal wall time"):
        match = re.search(rf"^ours/TRL {re.escape(what)}: (\S+)x$", out, re.MULTILINE)
        assert match, f"no ours/TRL {what} ratio in:\n{out}"
        ratio = float(match.group(1))
        assert math.isfinite(ratio) and ratio > 0, (what, ratio)


@pytest.mark.rlhf
def test_rollout_speed_benchmark_reports_the_ratio_to_transformers_generate():
    done = subprocess.run(
        [sys.executable, str(BENCHMARK.with_name("rlhf_generation.py")), "--quick"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    print(done.stdout)
    match = re.search(r"^ours/transformers tokens/s: (\S+)x$", done.stdout, re.MULTILINE)
    assert match and float(match.group(1)) > 0, done.stdout
