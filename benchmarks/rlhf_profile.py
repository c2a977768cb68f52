"""Where a GRPO step's time goes, per stage and per cost, as shares of the step, in one run.

    python benchmarks/rlhf_profile.py [--steps 10] [--world-size 2] [--set NAME=VALUE ...]

Runs :class:`~reference_impl.rlhf.trainer.RLHFTrainer` (``reference_impl/rlhf/trainer.py``)
on the ``cpu`` preset, GRPO, with the actor's WorkerGroup methods timed inside each worker,
and prints a table: one row per stage of the step (the trainer's ``timing_s/*`` names,
veRL 0.9.1's, ``verl/trainer/ppo/v1/trainer_base.py`` (``PPOTrainer._step_once``)), one
column per cost. Every figure is a share of the median step, so rows and columns add up to
100% (up to rounding).

How each cost is measured, for each WorkerGroup call (``generate_sequences``,
``compute_log_prob``, ``compute_ref_log_prob``, ``update_actor``), averaged over ranks:

* **torch ops** and **Python**: the worker's main thread's on-CPU time
  (``/proc/thread-self/schedstat``), split by the share of it spent inside ``aten::``
  operators, which ``torch.profiler`` measures in separate steps (the profiler slows the
  steps it watches, so it never runs in the timed ones). "Python" is everything else on
  CPU: transformers' and FSDP2's Python code, DTensor dispatch, the method itself.
* **collectives**: time the main thread sleeps. A worker does no I/O in these calls; it
  sleeps only while it waits for a gloo collective (FSDP2's all-gathers, reduce-scatters
  and all-reduces, the clip-norm and metric all-reduces): the transfer itself, and the
  wait for the other rank to arrive.
* **CPU wait**: time the main thread was runnable but had no core (the run-queue delay in
  the same file): other processes, our other worker, or the driver, on the same cores.
* **Ray and driver**: the stage's wall time on the driver minus the workers' time inside
  the method: the ``.remote()`` calls, serialising each rank's ``DataProto`` chunk, Ray
  delivering it, the return trip and ``DataProto.concat``. For the driver's own stages
  (reward, advantages, building and merging batches, metrics) it is the whole row.

Figures depend on the machine and on what else runs on it; the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import ray
import torch

from reference_impl.decorator import Dispatch, register
from reference_impl.rlhf.__main__ import parse_set
from reference_impl.rlhf.config import make_config
from reference_impl.rlhf.trainer import RLHFTrainer
from reference_impl.rlhf.workers import ActorRolloutRefWorker

# The actor's WorkerGroup calls and the timer (timing_s/...) the driver wraps each in.
CALLS = {
    "generate_sequences": "gen",
    "compute_log_prob": "old_log_prob",
    "compute_ref_log_prob": "ref",
    "update_actor": "update_actor",
}
COSTS = ("torch ops", "Python", "collectives", "CPU wait", "Ray and driver")


def thread_clocks() -> tuple[float, float, float]:
    """(wall, on-CPU, waiting for a CPU) seconds of the calling thread so far."""
    with open("/proc/thread-self/schedstat") as f:
        on_cpu, queued, _ = (int(x) for x in f.read().split())
    return time.perf_counter(), on_cpu / 1e9, queued / 1e9


class ProfiledActor(ActorRolloutRefWorker):
    """The actor role with each step-time method timed; behaviour unchanged."""

    records: list
    profiling = False

    def _timed(self, name: str, data):
        method = getattr(ActorRolloutRefWorker, name)
        if not hasattr(self, "records"):
            self.records = []
        if self.profiling:
            activities = [torch.profiler.ProfilerActivity.CPU]
            with torch.profiler.profile(activities=activities) as prof:
                start = thread_clocks()
                out = method(self, data)
                end = thread_clocks()
            # Operators of the main thread only: gloo's threads run copies of their own.
            by_thread: dict[int, list[float]] = {}
            for event in prof.events():
                if event.name[:6] == "aten::":
                    by_thread.setdefault(event.thread, []).append(event.self_cpu_time_total)
            in_ops = sum(max(by_thread.values(), key=len, default=[]))
            # The profiler's clock is the wall clock: compare with the time the thread was
            # on a CPU or waiting for one, not with its CPU time alone.
            running = (end[1] - start[1]) + (end[2] - start[2])
            self.records.append((name, "ops", in_ops / 1e6, running, len(by_thread)))
            return out
        start = thread_clocks()
        out = method(self, data)
        wall, on_cpu, queued = (b - a for a, b in zip(start, thread_clocks(), strict=True))
        self.records.append((name, "time", wall, on_cpu, queued))
        return out

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts):
        return self._timed("generate_sequences", prompts)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data):
        return self._timed("compute_log_prob", data)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data):
        return self._timed("compute_ref_log_prob", data)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data):
        return self._timed("update_actor", data)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def set_profiling(self, on: bool) -> None:
        self.profiling = on

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def torch_threads(self) -> int:
        return torch.get_num_threads()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def take_records(self) -> list:
        records, self.records = getattr(self, "records", []), []
        return records


class ProfiledTrainer(RLHFTrainer):
    actor_worker_cls = ProfiledActor


def breakdown(steps: list[dict], ranks: list[list], ops: list[list]) -> dict[str, dict]:
    """``{stage: {cost: seconds}}``: the median of each part over the steps and ranks.

    ``steps``: the trainer's metrics per step; ``ranks``: each rank's timed records
    ``(method, "time", wall, on_cpu, queued)``; ``ops``: its profiled records
    ``(method, "ops", seconds in aten operators, seconds running, threads)``.
    """
    median = {k: statistics.median(m[k] for m in steps) for k in steps[0] if k[:9] == "timing_s/"}
    # Share of each call's on-CPU time spent inside aten operators, over all profiled calls.
    in_ops = {}
    for name in CALLS:
        rows = [r for rank in ops for r in rank if r[:2] == (name, "ops")]
        in_ops[name] = sum(r[2] for r in rows) / max(sum(r[3] for r in rows), 1e-9)
    table: dict[str, dict] = {}
    for name, stage in CALLS.items():
        rows = [r for rank in ranks for r in rank if r[:2] == (name, "time")]
        wall = statistics.median(r[2] for r in rows)
        on_cpu = statistics.median(r[3] for r in rows)
        queued = statistics.median(r[4] for r in rows)
        share = min(in_ops[name], 1.0)
        driver = median[f"timing_s/{stage}"]
        table[stage] = {
            "torch ops": on_cpu * share,
            "Python": on_cpu * (1 - share),
            "collectives": max(wall - on_cpu - queued, 0.0),
            "CPU wait": queued,
            "Ray and driver": max(driver - wall, 0.0),
        }
    # The driver's own work: the step minus its WorkerGroup calls, step by step.
    stages = [f"timing_s/{stage}" for stage in CALLS.values()]
    driver = statistics.median(m["timing_s/step"] - sum(m[k] for k in stages) for m in steps)
    table["driver: reward, adv, batches"] = dict.fromkeys(COSTS[:-1], 0.0) | {
        "Ray and driver": max(driver, 0.0)
    }
    return table


def report(table: dict[str, dict], step_s: float, config, steps: int, threads: list) -> None:
    total = sum(sum(row.values()) for row in table.values())
    print(
        f"GRPO, cpu preset, {config.world_size} workers (torch threads per worker: {threads}; "
        f"the driver's: {torch.get_num_threads()}), fsdp_size={config.fsdp_size}: median of "
        f"{steps} steps, {step_s:.3f} s a step"
    )
    width = max(len(s) for s in table)
    print(f"{'stage':<{width}} {'share':>6} " + " ".join(f"{c:>14}" for c in COSTS))
    for stage, row in table.items():
        cells = " ".join(f"{100 * row[c] / total:>13.0f}%" for c in COSTS)
        print(f"{stage:<{width}} {100 * sum(row.values()) / total:>5.0f}% {cells}")
    sums = " ".join(f"{100 * sum(r[c] for r in table.values()) / total:>13.0f}%" for c in COSTS)
    print(f"{'all':<{width}} {100:>5.0f}% {sums}")
    # Seconds, not shares: on-CPU time is the work done, and barely depends on the load.
    seconds = {c: sum(r[c] for r in table.values()) for c in COSTS}
    print(
        f"per worker and step: on CPU {seconds['torch ops'] + seconds['Python']:.3f} s "
        f"(torch ops {seconds['torch ops']:.3f} s, Python {seconds['Python']:.3f} s), "
        f"collectives {seconds['collectives']:.3f} s, CPU wait {seconds['CPU wait']:.3f} s"
    )
    print(f"load: {os.getloadavg()[0]:.1f} (1-minute load average) on {os.cpu_count()} CPUs")


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed RL steps")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rlhf_profile_") as workdir:
        config = make_config(
            "grpo",
            "cpu",
            world_size=args.world_size,
            total_steps=3,  # the first steps pay for warming up allocators and caches
            output_dir=workdir,
            tensorboard=False,
            **parse_set(args.set),
        )
        # log_to_driver=False: the profiler prints a line each time it starts and stops.
        ray.init(
            num_cpus=max(os.cpu_count() or 1, config.world_size),
            include_dashboard=False,
            log_to_driver=False,
        )
        trainer = ProfiledTrainer(config)
        try:
            trainer.init_workers()
            trainer.fit(progress=False)
            wg = trainer.actor_rollout_wg
            threads = wg.torch_threads()
            wg.take_records()  # the warm-up steps: not counted
            wg.set_profiling(True)
            for _ in range(3):
                trainer.step()
            ops = wg.take_records()
            wg.set_profiling(False)
            steps = [trainer.step() for _ in range(args.steps)]
            ranks = wg.take_records()
        finally:
            trainer.shutdown()
            ray.shutdown()
    table = breakdown(steps, ranks, ops)
    step_s = statistics.median(m["timing_s/step"] for m in steps)
    report(table, step_s, config, args.steps, threads)
    return table


if __name__ == "__main__":
    main()
