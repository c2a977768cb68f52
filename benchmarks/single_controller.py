"""How much does the single-controller layer cost on top of raw Ray? Ratios, measured in one run.

    python benchmarks/single_controller.py [--quick]     (or: nox -s bench)

Three comparisons, each against a baseline measured in the same run, because
absolute times on shared machines are noise:

| Through RayWorkerGroup              | Baseline                                      | Target  |
|-------------------------------------|-----------------------------------------------|---------|
| ONE_TO_ALL call, median latency     | ray.get([w.m.remote() for w in workers])      | <= 1.02 |
| DP_COMPUTE_PROTO on a 64 MiB batch  | raw ray.put / ray.get of the same chunks      | <= 1.5  |
| DP_COMPUTE_PROTO on a 1 KiB batch   | raw ray.put / ray.get of the same chunks      | <= 2    |

The DataProto baselines do what the group does by hand: chunk the batch,
``ray.put`` each chunk, call the same worker method with the refs, ``ray.get``
the results and concatenate. Baseline and group alternate, repeat after
repeat, so drift in the machine's load hits both equally.
"""

from __future__ import annotations

import argparse
import statistics
import time

import ray
import torch

from reference_impl import (
    DataProto,
    Dispatch,
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    Worker,
    register,
)


class Echo(Worker):
    @register(Dispatch.ONE_TO_ALL)
    def ping(self):
        return self.rank

    @register(Dispatch.DP_COMPUTE_PROTO)
    def touch(self, data: DataProto) -> DataProto:
        return DataProto.from_dict({"n": torch.tensor([len(data)])})


def batch_of(num_bytes: int, rows: int = 64) -> DataProto:
    cols = max(1, num_bytes // (4 * rows))
    return DataProto.from_dict({"x": torch.ones(rows, cols, dtype=torch.float32)})


def paired_medians(first, second, repeats: int) -> tuple[float, float]:
    """Median seconds of two callables, run alternately so both see the same machine."""
    a, b = [], []
    for _ in range(repeats):
        for fn, out in ((first, a), (second, b)):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return statistics.median(a), statistics.median(b)


def main(quick: bool) -> dict[str, float]:
    ray.init(num_cpus=4, include_dashboard=False)
    try:
        pool = RayResourcePool([2], use_gpu=False)
        wg = RayWorkerGroup(pool, RayClassWithInitArgs(Echo))
        workers = wg.workers
        ray.get([w.ping.remote() for w in workers])  # warm up both paths
        wg.ping()

        repeats = 10 if quick else 300
        raw, group = paired_medians(
            lambda: ray.get([w.ping.remote() for w in workers]), lambda: wg.ping(), repeats
        )
        results = {"ONE_TO_ALL latency": group / raw}

        for label, size in (
            ("DP_COMPUTE_PROTO 64 MiB", 64 << 20),
            ("DP_COMPUTE_PROTO 1 KiB", 1 << 10),
        ):
            data = batch_of(size)

            def by_hand(data=data):
                refs = [ray.put(chunk) for chunk in data.chunk(len(workers))]
                outs = ray.get([w.touch.remote(r) for w, r in zip(workers, refs, strict=True)])
                return DataProto.concat(outs)

            reps = (2 if quick else 30) if size > 1 << 20 else repeats
            raw, group = paired_medians(by_hand, lambda data=data: wg.touch(data), reps)
            results[label] = group / raw
        pool.release()
        return results
    finally:
        ray.shutdown()


TARGETS = {
    "ONE_TO_ALL latency": 1.02,
    "DP_COMPUTE_PROTO 64 MiB": 1.5,
    "DP_COMPUTE_PROTO 1 KiB": 2.0,
}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (for the tests)")
    ratios = main(parser.parse_args().quick)
    print(f"{'comparison':<26} {'group / raw':>12} {'target':>8}")
    for name, ratio in ratios.items():
        verdict = "ok" if ratio <= TARGETS[name] else "ABOVE TARGET"
        print(f"{name:<26} {ratio:>11.3f}x {TARGETS[name]:>7.2f}x  {verdict}")
