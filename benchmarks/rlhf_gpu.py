"""The RLHF pipeline's GPU checks, one line each: learning, MFU, rollout speed (``nox -s gpu``).

    python benchmarks/rlhf_gpu.py [--seconds 600] [--target 0.9] [--output-dir runs/gpu-grpo]

1. **learning**: ``python -m reference_impl.rlhf --preset gpu --algo grpo`` (the
   Qwen2.5-0.5B shape, bf16 compute over fp32 master weights, NCCL, one rank per GPU)
   must reach ``critic/score/mean`` >= ``--target`` (mean of 5 steps) within
   ``--seconds`` of wall time, Ray start-up and the format warm-up included;
2. **MFU**: the median ``perf/mfu/actor`` of that run, i.e. the actor update's model
   FLOPs per second over the GPU's dense bf16 peak from its data sheet
   (``reference_impl/rlhf/metrics.py`` (``GPU_PEAK_FLOPS``); an unknown GPU has none);
3. **rollout**: ``benchmarks/rlhf_generation.py``, our KV-cache sampler against
   ``transformers``' ``generate`` on the gpu preset's model, as a ratio of tokens/s.

Exits 1 if the learning run misses its target or fails, 0 otherwise; with no CUDA device
it prints why and exits 0 without running anything (the session has nothing to check).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAST = 5  # steps the score is averaged over, as the trainer's target_score


def learning_run(output_dir: Path, seconds: float, target: float) -> tuple[bool, list[dict]]:
    """Run the gpu preset to ``target``; print one line; return (reached, metrics rows)."""
    from reference_impl.rlhf.metrics import read_metrics

    shutil.rmtree(output_dir, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "reference_impl.rlhf",
        "--preset",
        "gpu",
        "--algo",
        "grpo",
        "--total-steps",
        "100000",  # the target or the time limit ends the run
        "--target-score",
        str(target),
        "--set",
        f"time_limit_s={seconds:g}",
        "--output-dir",
        str(output_dir),
        "--no-progress",
    ]
    start = time.monotonic()
    try:
        # The time limit stops RL; start-up and warm-up get a margin on top of it.
        done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 300)
    except subprocess.TimeoutExpired:
        print(f"gpu learning run: no result within {seconds + 300:g} s: FAIL")
        return False, []
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        print(f"gpu learning run: exit code {done.returncode}: FAIL\n{done.stderr[-3000:]}")
        return False, []
    rows = [r for r in read_metrics(str(output_dir / "metrics.jsonl")) if r["step"] > 0]
    recent = [r["critic/score/mean"] for r in rows[-LAST:]]
    score = sum(recent) / len(recent)
    reached = len(recent) == LAST and score >= target and elapsed <= seconds
    print(
        f"gpu learning run: GRPO, gpu preset, critic/score/mean {score:.3f} (last {LAST} steps) "
        f"after {len(rows)} steps in {elapsed:.0f} s, start-up included "
        f"(target >= {target:g} within {seconds:g} s): {'PASS' if reached else 'FAIL'}"
    )
    return reached, rows


def mfu_line(rows: list[dict]) -> None:
    import torch

    from reference_impl.rlhf.metrics import GPU_PEAK_FLOPS

    name = torch.cuda.get_device_name()
    peak = next((flops for key, flops in GPU_PEAK_FLOPS.items() if key in name), None)
    if peak is None or not rows:
        why = "no learning-run metrics" if not rows else "no data-sheet peak for this GPU"
        print(f"gpu perf/mfu/actor on {name}: not measured ({why})")
        return
    mfu = statistics.median(r["perf/mfu/actor"] for r in rows)
    print(
        f"gpu perf/mfu/actor on {name}: {mfu:.3f} of the dense bf16 peak "
        f"({peak / 1e12:g} TFLOP/s), median over {len(rows)} steps"
    )


def rollout_line() -> None:
    script = ROOT / "benchmarks" / "rlhf_generation.py"
    command = [sys.executable, str(script)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    match = re.search(r"^ours/transformers tokens/s: (\S+)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or not match:
        print(f"gpu rollout: benchmarks/rlhf_generation.py failed\n{done.stderr[-3000:]}")
        return
    setting = done.stdout.splitlines()[0]
    print(f"gpu rollout: ours/transformers generate tokens/s {match.group(1)} ({setting})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="wall-time limit")
    parser.add_argument("--target", type=float, default=0.9, help="critic/score/mean to reach")
    parser.add_argument("--output-dir", default=str(ROOT / "runs" / "gpu-grpo"))
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA: torch.cuda.is_available() is False on this machine; nothing to run")
        return 0
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    reached, rows = learning_run(Path(args.output_dir), args.seconds, args.target)
    mfu_line(rows)
    rollout_line()
    return 0 if reached else 1


if __name__ == "__main__":
    raise SystemExit(main())
