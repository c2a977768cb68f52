"""The RLHF pipeline's GPU checks, one line each: learning, MFU, rollout speed (``nox -s gpu``).

    python benchmarks/rlhf_gpu.py [--seconds 600] [--target 0.9] [--output-dir runs/gpu-grpo]
                                  [--no-rollout] [--summary results.json]

1. **learning**: ``python -m reference_impl.rlhf --preset gpu --algo grpo`` (the
   Qwen2.5-0.5B shape, bf16 compute over fp32 master weights, NCCL, one rank per GPU)
   must reach ``critic/score/mean`` >= ``--target`` (mean of 5 steps) within
   ``--seconds`` of wall time, Ray start-up and the format warm-up included. The run is
   killed at ``--seconds`` (its whole process group); what it logged until then is read;
2. **MFU**: the median ``perf/mfu/actor`` of that run, i.e. the actor update's model
   FLOPs per second over the GPU's dense bf16 peak from its data sheet
   (``reference_impl/rlhf/metrics.py`` (``GPU_PEAK_FLOPS``); an unknown GPU has none),
   with each stage's median share of a step (``timing_s/*`` over ``timing_s/step``);
3. **rollout**: ``benchmarks/rlhf_generation.py``, our KV-cache sampler against
   ``transformers``' ``generate`` on the gpu preset's model, as a ratio of tokens/s.

``--summary`` writes every figure as JSON (``tools/gpu_kit/checks.py`` reads it). Exits 1
if the learning run misses its target or fails, 0 otherwise; with no CUDA device it prints
why and exits 0 without running anything (the session has nothing to check).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from run_limited import run_limited  # noqa: E402

LAST = 5  # steps the score is averaged over, as the trainer's target_score
# Of --seconds, what start-up (Ray, the model, FSDP), the format warm-up and shut-down get;
# RL stops by itself after the rest (time_limit_s), so the run ends before it is killed.
STARTUP_MARGIN_S = 60.0


def moving_means(scores: list[float], width: int = LAST) -> list[float]:
    """Mean of each window of ``width`` consecutive scores (the trainer's target test)."""
    return [sum(scores[i - width : i]) / width for i in range(width, len(scores) + 1)]


def learning_run(
    output_dir: Path, seconds: float, target: float, preset: str = "gpu", overrides=()
) -> dict:
    """Run ``preset`` towards ``target`` for at most ``seconds``; print one line.

    Returns the run's figures: whether it reached the target, the RL steps and seconds to
    it, the best 5-step mean score, the curve, the median MFU and each stage's share.
    """
    from reference_impl.rlhf.metrics import read_metrics

    shutil.rmtree(output_dir, ignore_errors=True)
    output_dir.mkdir(parents=True)
    rl_seconds = max(seconds - STARTUP_MARGIN_S, 10.0)
    command = [
        sys.executable, "-m", "reference_impl.rlhf", "--preset", preset, "--algo", "grpo",
        "--total-steps", "100000",  # the target or the time limit ends the run
        "--target-score", str(target), "--set", f"time_limit_s={rl_seconds:g}",
        "--output-dir", str(output_dir), "--no-progress",
        *(arg for item in overrides for arg in ("--set", item)),
    ]  # fmt: skip
    # Killed whole at ``seconds``: the Ray daemons the run started go with it.
    done = run_limited(command, seconds, log=output_dir / "run.log", sweep=True)
    code, elapsed = done.returncode, done.wall_s
    metrics_file = output_dir / "metrics.jsonl"
    rows = read_metrics(str(metrics_file)) if metrics_file.exists() else []
    warm = next((r for r in rows if r["step"] == 0), {})
    rows = [r for r in rows if r["step"] > 0]
    scores = [r["critic/score/mean"] for r in rows]
    means = moving_means(scores)
    hit = next((i for i, m in enumerate(means) if m >= target), None)
    figures = {
        "exit_code": code,
        "killed_at_limit": code is None,
        "wall_s": round(elapsed, 1),
        "limit_s": seconds,
        "target": target,
        "steps": len(rows),
        "warmup_s": warm.get("timing_s/warmup"),
        "reached": hit is not None and code == 0,
        "best_5_step_mean": max(means) if means else None,
        "curve": [[r["step"], r["critic/score/mean"]] for r in rows],
    }
    if hit is not None:
        step = hit + LAST  # the window ending at this step reached the target
        figures["steps_to_target"] = step
        figures["rl_seconds_to_target"] = round(sum(r["timing_s/step"] for r in rows[:step]), 1)
    if rows:
        steps = [r["timing_s/step"] for r in rows]
        figures["median_step_s"] = statistics.median(steps)
        figures["median_mfu_actor"] = statistics.median(r["perf/mfu/actor"] for r in rows)
        stages = sorted(
            {k for r in rows for k in r if k.startswith("timing_s/")} - {"timing_s/step"}
        )
        figures["timing_share"] = {
            k.removeprefix("timing_s/"): statistics.median(r[k] / r["timing_s/step"] for r in rows)
            for k in stages
        }
        figures["median_timing_s"] = {
            k.removeprefix("timing_s/"): statistics.median(r[k] for r in rows)
            for k in [*stages, "timing_s/step"]
        }
    if code not in (0, None):
        figures["log_tail"] = (output_dir / "run.log").read_text()[-3000:]
    verdict = "PASS" if figures["reached"] else "FAIL"
    if hit is not None:
        step, rl_s = figures["steps_to_target"], figures["rl_seconds_to_target"]
        how = f"reached {target:g} at RL step {step} ({rl_s} s of RL)"
    else:
        best = figures["best_5_step_mean"]
        how = f"best 5-step mean {best:.3f}" if best is not None else "no RL step logged"
    ended = "killed at its limit" if code is None else f"exit code {code}"
    print(
        f"gpu learning run: GRPO, {preset} preset, {how}; {len(rows)} steps, {elapsed:.0f} s wall, "
        f"start-up included, {ended} (target >= {target:g} within {seconds:g} s): {verdict}"
    )
    return figures


def mfu_line(figures: dict) -> dict:
    """Print the median MFU against the data-sheet peak; return the figures for the summary."""
    import torch

    from reference_impl.rlhf.metrics import GPU_PEAK_FLOPS

    name = torch.cuda.get_device_name()
    peak = next((flops for key, flops in GPU_PEAK_FLOPS.items() if key in name), None)
    mfu = figures.get("median_mfu_actor")
    if peak is None or mfu is None:
        why = "no learning-run metrics" if mfu is None else "no data-sheet peak for this GPU"
        print(f"gpu perf/mfu/actor on {name}: not measured ({why})")
        return {"gpu": name, "mfu": None}
    shares = figures.get("timing_share", {})
    parts = ", ".join(f"{k} {v:.0%}" for k, v in sorted(shares.items(), key=lambda kv: -kv[1]))
    print(
        f"gpu perf/mfu/actor on {name}: {mfu:.3f} of the dense bf16 peak "
        f"({peak / 1e12:g} TFLOP/s), median over {figures['steps']} steps; step shares: {parts}"
    )
    return {"gpu": name, "mfu": mfu, "peak_flops": peak}


def rollout_line(repeats: int, seconds: float) -> dict:
    """Run benchmarks/rlhf_generation.py; print its ratio in one line; return its figures."""
    script = ROOT / "benchmarks" / "rlhf_generation.py"
    command = [sys.executable, str(script), "--repeats", str(repeats)]
    done = run_limited(command, seconds, capture=True, sweep=True)
    if done.killed:
        print(f"gpu rollout: no result within {seconds:g} s: FAIL")
        return {"ok": False, "why": f"timed out after {seconds:g} s"}
    match = re.search(r"^ours/transformers tokens/s: (\S+)x$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or not match:
        print(f"gpu rollout: benchmarks/rlhf_generation.py failed\n{done.stderr[-3000:]}")
        return {"ok": False, "why": done.stderr[-3000:]}
    rates = dict(
        re.findall(r"^(ours|transformers)\S* .*?(\d+) tokens/s$", done.stdout, re.MULTILINE)
    )
    setting = done.stdout.splitlines()[0]
    print(f"gpu rollout: ours/transformers generate tokens/s {match.group(1)}x ({setting})")
    return {
        "ok": True,
        "ratio": float(match.group(1)),
        "ours_tokens_s": float(rates.get("ours", "nan")),
        "transformers_tokens_s": float(rates.get("transformers", "nan")),
        "setting": setting,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="wall-time limit")
    parser.add_argument("--target", type=float, default=0.9, help="critic/score/mean to reach")
    parser.add_argument("--output-dir", default=str(ROOT / "runs" / "gpu-grpo"))
    parser.add_argument("--no-rollout", action="store_true", help="skip the rollout benchmark")
    parser.add_argument("--rollout-repeats", type=int, default=20)
    parser.add_argument("--summary", help="write every figure to this JSON file")
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="passed to the run"
    )
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA: torch.cuda.is_available() is False on this machine; nothing to run")
        return 0
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    learning = learning_run(Path(args.output_dir), args.seconds, args.target, overrides=args.set)
    summary = {"learning": learning, "mfu": mfu_line(learning)}
    if not args.no_rollout:
        summary["rollout"] = rollout_line(args.rollout_repeats, 600)
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if learning["reached"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
