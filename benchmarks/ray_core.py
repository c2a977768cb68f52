"""Ray Core on the reader's machine: rates, bandwidths, and ratios against baselines in one run.

    python benchmarks/ray_core.py [--quick] [--microbenchmark [PATTERN]]    (or: nox -s bench)

Each figure is printed raw (it is what your machine does) and, where a baseline makes
sense, as a ratio against that baseline measured in the same run, because absolute
figures on a shared machine are noise while ratios travel:

| Measured                                   | Baseline in the same run                       |
|--------------------------------------------|------------------------------------------------|
| empty tasks/s, submitted in batches        | ProcessPoolExecutor: the same function, 2 procs |
| empty tasks/s, one at a time (sync)        | the batched rate                               |
| actor calls/s, sync and batched            | a multiprocessing Pipe round trip              |
| async-actor calls/s, sync and batched      | the plain actor                                |
| ray.put / ray.get GB/s, numpy and torch    | numpy copy of the same bytes (memcpy)          |
| transfer between two nodes (local Cluster) | numpy copy of the same bytes (memcpy)          |

``--microbenchmark`` also runs Ray's own ``ray microbenchmark`` (about 20 s per
pattern, twenty minutes in all; a PATTERN selects the patterns whose name contains it,
through Ray's ``TESTS_TO_RUN``). The Inside Ray chapter's measurements page shows
the figures of a full run and explains them.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import ray
import torch


def noop():
    return b"ok"


def rate(fn, per_call: int, seconds: float) -> float:
    """Calls of `fn` per second (times `per_call`), median of three timed windows."""
    fn()  # warm up
    rates = []
    for _ in range(3):
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 3:
            fn()
            count += 1
        rates.append(count * per_call / (time.perf_counter() - start))
    return statistics.median(rates)


def best_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _echo_loop(conn):
    while conn.recv() is not None:
        conn.send(b"ok")


@ray.remote
def small_task():
    return b"ok"


@ray.remote(num_cpus=0)
class SyncActor:
    def call(self):
        return b"ok"


@ray.remote(num_cpus=0)
class AsyncActor:
    async def call(self):
        return b"ok"


def single_node(quick: bool) -> dict[str, tuple[float, str, float | None]]:
    """name -> (figure, unit, ratio against its baseline or None)."""
    window = 0.3 if quick else 6.0
    batch = 100 if quick else 1000
    size = (16 if quick else 256) << 20
    out: dict[str, tuple[float, str, float | None]] = {}

    with ProcessPoolExecutor(2) as pool:
        pool_rate = rate(
            lambda: [f.result() for f in [pool.submit(noop) for _ in range(batch)]], batch, window
        )
    tasks_batched = rate(
        lambda: ray.get([small_task.remote() for _ in range(batch)]), batch, window
    )
    tasks_sync = rate(lambda: ray.get(small_task.remote()), 1, window)
    out["tasks/s, batched"] = (tasks_batched, "1/s", tasks_batched / pool_rate)
    out["tasks/s, one at a time"] = (tasks_sync, "1/s", tasks_sync / tasks_batched)

    parent, child = mp.Pipe()
    echo = mp.Process(target=_echo_loop, args=(child,), daemon=True)
    echo.start()

    def pipe_round_trip():
        parent.send(1)
        parent.recv()

    pipe_rate = rate(pipe_round_trip, 1, window)
    parent.send(None)
    echo.join()
    out["Pipe round trips/s (baseline)"] = (pipe_rate, "1/s", None)
    actor_rates = {}
    for name, cls in (("actor", SyncActor), ("async actor", AsyncActor)):
        handle = cls.remote()
        ray.get(handle.call.remote())
        sync = rate(lambda handle=handle: ray.get(handle.call.remote()), 1, window)
        batched = rate(
            lambda handle=handle: ray.get([handle.call.remote() for _ in range(batch)]),
            batch,
            window,
        )
        actor_rates[name] = (sync, batched)
        ray.kill(handle)
    for name, (sync, batched) in actor_rates.items():
        base_sync, base_batched = (
            actor_rates["actor"] if name != "actor" else (pipe_rate, pipe_rate)
        )
        out[f"{name} calls/s, sync"] = (sync, "1/s", sync / base_sync)
        out[f"{name} calls/s, batched"] = (batched, "1/s", batched / base_batched)

    arr = np.ones(size // 8)
    memcpy = size / best_seconds(lambda: arr.copy(), 5) / 1e9
    out["numpy copy GB/s (baseline)"] = (memcpy, "GB/s", None)
    for name, value in (("numpy", arr), ("torch", torch.ones(size // 4))):
        put = size / best_seconds(lambda value=value: ray.put(value), 3 if quick else 10) / 1e9
        ref = ray.put(value)
        get = size / best_seconds(lambda ref=ref: ray.get(ref), 3 if quick else 10) / 1e9
        out[f"ray.put {name} GB/s"] = (put, "GB/s", put / memcpy)
        out[f"ray.get {name} GB/s"] = (get, "GB/s", get / memcpy)
        del ref
    return out


def between_nodes(quick: bool) -> dict[str, tuple[float, str, float | None]]:
    """A local two-node Cluster: a task on node A reads an object produced on node B."""
    from ray.cluster_utils import Cluster

    size = (16 if quick else 256) << 20
    # A private temp dir: a Cluster advertises its address in <temp dir>/ray/ray_current_cluster,
    # where any bare ray.init() on this machine would otherwise find and join it.
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rb")
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"a": 1}, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1, resources={"b": 1}, object_store_memory=max(4 * size, 100 << 20))
    ray.init(address=cluster.address)
    try:

        @ray.remote(resources={"b": 0.01})
        def produce(i):
            return np.full(size // 8, float(i))

        @ray.remote
        def fetch_seconds(refs):
            start = time.perf_counter()
            value = ray.get(refs[0])
            return time.perf_counter() - start, float(value[0])

        remote_s = []
        for i in range(3 if quick else 10):
            ref = produce.remote(i)
            ray.wait([ref], fetch_local=False)
            # Read on node A: the object's only copy is on B, so it crosses between the nodes.
            remote_s.append(ray.get(fetch_seconds.options(resources={"a": 0.01}).remote([ref]))[0])
            del ref
        remote = size / statistics.median(remote_s) / 1e9
        array = np.ones(size // 8)
        memcpy = size / best_seconds(lambda: array.copy(), 5) / 1e9
        return {"inter-node transfer GB/s": (remote, "GB/s", remote / memcpy)}
    finally:
        ray.shutdown()
        cluster.shutdown()
        del os.environ["RAY_TMPDIR"]


def microbenchmark(pattern: str) -> list[str]:
    """Ray's own `ray microbenchmark`; returns its `... per second ...` lines."""
    env = dict(os.environ, TESTS_TO_RUN=pattern)
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ray"), "microbenchmark"],
        capture_output=True,
        text=True,
        env=env,
    )
    return [line for line in done.stdout.splitlines() if " per second " in line]


def main(quick: bool, micro: str | None) -> dict[str, tuple[float, str, float | None]]:
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        results = single_node(quick)
    finally:
        ray.shutdown()
    if not quick:  # a second raylet costs more start-up than the whole quick run
        results.update(between_nodes(quick))
    print(f"{'measured':<34} {'figure':>14}  {'ratio to baseline':>18}")
    for name, (figure, unit, ratio) in results.items():
        shown = f"{figure:,.0f}" if unit == "1/s" else f"{figure:.2f}"
        print(f"{name:<34} {shown:>9} {unit:<4}  {'' if ratio is None else f'{ratio:.3f}x':>18}")
    if micro is not None:
        print("\nray microbenchmark" + (f" (TESTS_TO_RUN={micro!r})" if micro else ""))
        for line in microbenchmark(micro):
            print("  " + line)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="short windows, small arrays, one node (tests)"
    )
    parser.add_argument(
        "--microbenchmark",
        nargs="?",
        const="",
        default=None,
        metavar="PATTERN",
        help="also run `ray microbenchmark` (all patterns, or those containing PATTERN)",
    )
    args = parser.parse_args()
    main(args.quick, args.microbenchmark)
