"""Time and peak memory of the layout planner (reference_impl/plan) for a few cluster sizes.

``python -m benchmarks.plan_sizes --out benchmarks/results/plan-sizes`` plans a GRPO run on
1 x 1, 2 x 8, 4 x 8 and 8 x 8 GPUs (``--shapes`` to choose) and, for each, records the wall time
of ``python -m reference_impl.plan`` and the peak of the summed PSS (proportional set size:
shared pages divided among the processes that share them) of the planner and every process
under it (Ray's daemons, TaskRunnerV1, TransferQueue's actors, the stand-ins), sampled every
2 s, with the machine's 1-minute load average and CPU count at the start and the end. The
planner's own JSON lands beside the record. Timings are of this machine at that moment: the
record keeps the load so that a reader can tell.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

GRPO = [
    "actor_rollout_ref.rollout.name=vllm",
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
]
SHAPES = {  # name: (cluster, nnodes, gpus per node, rollout TP, train batch, mini batch)
    "1x1": ("1x1x16", 1, 1, 1, 4, 4),
    "2x8": ("2x8x96x1024", 2, 8, 2, 256, 64),
    "4x8": ("4x8x96x1024", 4, 8, 2, 256, 64),
    "8x8": ("8x8x96x1024", 8, 8, 2, 256, 64),  # past 2 minutes and 8 GiB on 2 cores
}


def tree_pss_mib(root: psutil.Process) -> float:
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return total / 2**20


def measure(name: str, out: Path, limit_s: float) -> dict:
    cluster, nnodes, gpus, tp, batch, mini = SHAPES[name]
    plan_json = out / f"plan-{name}.json"
    args = [
        sys.executable,
        "-m",
        "reference_impl.plan",
        "--cluster",
        cluster,
        "--json",
        str(plan_json),
        f"trainer.nnodes={nnodes}",
        f"trainer.n_gpus_per_node={gpus}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}",
        f"data.train_batch_size={batch}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
        *GRPO,
    ]
    load_start = os.getloadavg()[0]
    start = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    root, peak = psutil.Process(proc.pid), 0.0
    while proc.poll() is None and time.monotonic() - start < limit_s:
        peak = max(peak, tree_pss_mib(root))
        time.sleep(2.0)
    if proc.poll() is None:
        proc.kill()
    output = proc.communicate()[0]
    wall = time.monotonic() - start
    plan = json.loads(plan_json.read_text()) if plan_json.exists() else {}
    return {
        "shape": name,
        "cluster": cluster,
        "command": args[1:],
        "returncode": proc.returncode,
        "wall_s": round(wall, 1),
        "peak_pss_mib": round(peak),
        "load_1min_start": round(load_start, 1),
        "load_1min_end": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "actors": plan.get("summary", {}).get("actors"),
        "held": plan.get("summary", {}).get("held"),
        "verdict": next(
            (line for line in output.splitlines() if line.startswith("verdict:")), None
        ),
        "tail": output.splitlines()[-5:],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="1x1,2x8,4x8")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/plan-sizes"))
    p.add_argument(
        "--limit", type=float, default=1200.0, help="seconds per plan before it is killed"
    )
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.shapes.split(","):
        row = measure(name, args.out, args.limit)
        (args.out / f"{name}.json").write_text(json.dumps(row, indent=1))
        print(
            f"{name}: {row['wall_s']} s, peak PSS {row['peak_pss_mib']} MiB, {row['actors']} "
            "actors, "
            f"load {row['load_1min_start']} -> {row['load_1min_end']} on {row['cpus']} CPUs; "
            f"{row['verdict']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
