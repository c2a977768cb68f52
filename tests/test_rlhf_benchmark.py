"""The GRPO benchmark against TRL runs (in its quick mode) and reports both systems and the ratios;
the step profile accounts for a whole step; the chapter's chart against TRL, in both
languages, is drawn from the committed record of the run whose figures the page quotes
(tests/test_records.py holds the page's figures to that record).

Who is faster or learns more is printed, not asserted: a 15-second run on a shared
machine says nothing reliable about that.
"""

import json
import math
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.reads_docs("docs/rlhf")

REPO = Path(__file__).resolve().parents[1]
BENCHMARK = REPO / "benchmarks" / "rlhf_vs_trl.py"
# The run behind docs/rlhf/img/reward_vs_trl{,.zh}.png (its README says how it was made).
RECORD = REPO / "benchmarks" / "results" / "rlhf-vs-trl"
CHART = REPO / "docs" / "rlhf" / "img" / "reward_vs_trl.png"


# Minutes of CPU for both trainers: it runs with the learning runs, in `nox -s rlhf`.
@pytest.mark.rlhf
def test_rlhf_vs_trl_benchmark_reports_both_systems_and_ratios(tmp_path):
    # TRL and its dependencies are not dependencies of reference_impl.
    for module in ("trl", "transformers", "datasets", "tokenizers"):
        pytest.importorskip(module)
    plot, record = tmp_path / "curves.png", tmp_path / "record"
    done = subprocess.run(
        # One torch thread for TRL: its default of one per core can stall for minutes
        # when other processes share the cores, and this test only checks the report.
        [sys.executable, str(BENCHMARK), "--quick", "--trl-threads", "1", "--plot", str(plot)]
        + ["--record", str(record)],
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
    # Both reward curves, drawn from the run's own per-step records.
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    # The record keeps the printed table and each run's curve, one point per RL step.
    assert (record / "report.txt").read_text() in out
    for run in json.loads((record / "record.json").read_text())["runs"]:
        assert len(run["seconds"]) == len(run["scores"]) == len(run["reward_at"]) == run["steps"]


@pytest.mark.rlhf
def test_step_profile_accounts_for_every_stage_and_cost():
    done = subprocess.run(
        [sys.executable, str(BENCHMARK.with_name("rlhf_profile.py")), "--steps", "3"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    print(done.stdout)
    rows = {}
    for line in done.stdout.splitlines():
        cells = re.findall(r"(\d+)%", line)
        if len(cells) == 6:  # share of the step, then the five costs
            rows[line.split("  ")[0].strip()] = [int(c) for c in cells]
    stages = {"gen", "old_log_prob", "ref", "update_actor", "driver: reward, adv, batches"}
    assert set(rows) == stages | {"all"}, done.stdout
    assert rows["all"][0] == 100
    # Each row's costs add up to its share, and the stages to the whole, up to rounding.
    for name, (share, *costs) in rows.items():
        assert abs(sum(costs) - share) <= 3, (name, share, costs)
    assert abs(sum(rows[s][0] for s in stages) - 100) <= 3, rows


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
    static = re.search(r"^static/transformers tokens/s: (\S+)x$", done.stdout, re.MULTILINE)
    assert static and float(static.group(1)) > 0, done.stdout


def test_a_column_that_fails_its_warm_up_is_left_out_only_if_optional(capsys):
    """A CUDA graph that cannot be captured, or a compiler missing on the GPU machine, must
    not cost the window the baselines' figures; a baseline's own error must still stop it."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from rlhf_generation import warm_up

    def fails():
        raise RuntimeError("operation not permitted when stream is capturing")

    calls = []
    columns = {
        "rollout.generate": lambda: calls.append("ours"),
        "StaticRollout (CUDA graph)": fails,
        "transformers generate()": lambda: calls.append("hf"),
        "transformers static + compile": fails,
    }
    assert list(warm_up(columns)) == ["rollout.generate", "transformers generate()"]
    assert calls == ["ours", "hf"]
    printed = capsys.readouterr().out
    assert printed.count("failed, left out: RuntimeError: operation not permitted") == 2
    with pytest.raises(RuntimeError, match="capturing"):
        warm_up({"transformers generate()": fails})


@pytest.mark.rlhf
def test_gpu_costs_benchmark_runs_its_measurements_on_the_cpu_preset():
    """benchmarks/rlhf_gpu_costs.py, the source of the chapter's GPU cost figures, on CPU."""
    script = BENCHMARK.with_name("rlhf_gpu_costs.py")
    command = [sys.executable, str(script), "--preset", "cpu", "--device", "cpu", "--steps", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    update = re.search(r"^update: one optimiser step on (\d+) responses", done.stdout, re.M)
    assert update and int(update.group(1)) == 32, done.stdout  # 8 prompts x 8 over 2 ranks
    assert re.search(r"^rollout: 256 prompts x 64 tokens: [\d.]+ ms per decode", done.stdout, re.M)


@pytest.mark.rlhf
def test_gpu_perf_benchmark_lays_out_one_mini_batch_three_ways_with_one_loss(tmp_path):
    """benchmarks/rlhf_gpu_perf.py at its tiny shape on CPU, FSDP2 over gloo: the padded,
    packed and token-budget layouts of one mini-batch compute the same loss."""
    script = BENCHMARK.with_name("rlhf_gpu_perf.py")
    command = [sys.executable, str(script), "--shape", "tiny", "--device", "cpu", "--steps", "1"]
    command += ["--micro-rows", "2", "--max-tokens", "48", "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "gpu_perf.json").read_text())
    results = {r["layout"]: r for r in record["results"]}
    assert list(results) == ["padded", "packed", "packed+budget"]
    losses = [r["first_loss"] for r in results.values()]
    assert max(losses) - min(losses) <= 1e-5 * abs(losses[0]), losses
    assert results["padded"]["micro_batches"] == 4  # 8 rows, 2 per micro-batch
    budget = results["packed+budget"]["micro_batch_tokens"]
    assert max(budget) <= 48 and sum(budget) == record["valid_tokens"], budget
    for r in results.values():
        assert r["step_s"] > 0 and r["mfu"] > 0, r


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels, from the PNG's header."""
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", header[16:24])


def test_the_trl_charts_redraw_from_the_committed_record(tmp_path):
    """``--redraw`` draws both languages' charts from the record, as large as the committed ones."""
    pytest.importorskip("matplotlib")
    from benchmarks.charts import chinese_font_rc

    try:
        chinese_font_rc()
    except RuntimeError as err:
        pytest.skip(str(err))
    plot = tmp_path / CHART.name
    command = [sys.executable, str(BENCHMARK), "--redraw", str(RECORD), "--plot", str(plot)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    chinese = CHART.with_name("reward_vs_trl.zh.png")
    assert png_size(plot) == png_size(CHART)
    assert png_size(plot.with_name(chinese.name)) == png_size(chinese)


def sweep_module():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import rlhf_gpu_sweep

    return rlhf_gpu_sweep


def test_every_sweep_configuration_is_a_valid_gpu_config_that_changes_its_knobs():
    """A typo in a knob, or a value the preset already has, would spend a device window on
    a run that fails at once or repeats the baseline."""
    from reference_impl.rlhf.config import make_config

    sweep = sweep_module()
    baseline = make_config("grpo", "gpu")
    assert sweep.SWEEP["baseline"] == {}
    for name, knobs in sweep.SWEEP.items():
        config = make_config("grpo", "gpu", **knobs)  # raises ConfigError on a bad knob
        for knob, value in knobs.items():
            assert getattr(baseline, knob) != value == getattr(config, knob), (name, knob)


def test_the_sweep_winner_is_the_soonest_to_reach_the_target_else_the_best_mean():
    winner = sweep_module().winner
    runs = {
        "a": {"reached": False, "best_5_step_mean": 0.89},
        "b": {"reached": True, "rl_seconds_to_target": 80.0, "best_5_step_mean": 0.9},
        "c": {"reached": True, "rl_seconds_to_target": 60.0, "best_5_step_mean": 0.91},
    }
    assert winner(runs) == "c"
    assert winner({k: {**v, "reached": False} for k, v in runs.items()}) == "c"
    runs["c"]["best_5_step_mean"] = 0.5
    assert winner({k: {**v, "reached": False} for k, v in runs.items()}) == "b"
    assert winner({"x": {"reached": False, "best_5_step_mean": None}}) is None


@pytest.mark.rlhf
def test_the_sweep_runs_on_the_cpu_preset_and_records_its_diagnostics(tmp_path):
    script = REPO / "benchmarks" / "rlhf_gpu_sweep.py"
    # 90 s: learning_run keeps 60 of them for start-up and the warm-up, so RL gets 30.
    command = [sys.executable, str(script), "--preset", "cpu", "--seconds", "90",
               "--only", "baseline", "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((tmp_path / "sweep.json").read_text())
    assert summary["winner"] == "baseline"
    run = summary["runs"]["baseline"]
    assert run["steps"] > 0 and run["best_5_step_mean"] is not None, run
    medians = run["median"]
    assert 0 <= medians["reward/zero_variance_groups"] <= 1
    assert 0 <= medians["actor/grad_clipped"] <= 1 and medians["actor/entropy"] > 0
