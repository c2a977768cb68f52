"""A DataProto through a 2-rank worker group and back: veRL 0.9.1's, reference_impl's, raw Ray.

    python benchmarks/dataproto_transfer.py [--quick]     (or: nox -s bench)

One ``DP_COMPUTE_PROTO`` call, as veRL's legacy trainer made for every stage: the driver
splits a batch in two, each rank gets its half, returns it unchanged, and the driver
concatenates the halves. The batch is one float32 tensor ``x`` of shape ``(rows, cols)``,
1 KiB (``(16, 16)``) or 64 MiB (``(4096, 4096)``); the rows are what is split. Cases:

* ``veRL default``: ``verl.single_controller.ray.base.RayWorkerGroup`` and
  ``verl.protocol.DataProto`` (``verl/protocol.py``), which pickles the batch with
  ``torch.save`` (``DataProto.__getstate__``);
* ``veRL numpy``: the same with ``VERL_DATAPROTO_SERIALIZATION_METHOD=numpy`` in the driver
  and in both workers (``worker_env``), so each tensor travels as a numpy buffer;
* ``reference_impl``: this handbook's ``RayWorkerGroup`` and ``DataProto``
  (``reference_impl/worker_group.py``, ``reference_impl/data_proto.py``);
* ``raw Ray``: two plain Ray actors, each sent its half as a ``{"x": tensor}`` dict and
  returning it; the driver splits and concatenates with ``torch.chunk`` and ``torch.cat``.

Printed: the median wall time of one call per case, as a ratio to raw Ray's measured in
the same run (lower is faster). The cases alternate, repeat after repeat, so drift in the
machine's load hits all of them. Each case's result is checked against the input.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import ray
import torch

ENV = "VERL_DATAPROTO_SERIALIZATION_METHOD"
SHAPES = {"1 KiB": (16, 16), "64 MiB": (4096, 4096)}
CASES = ("raw Ray", "veRL default", "veRL numpy", "reference_impl")


@ray.remote(num_cpus=0)
class RawRank:
    """A rank of the baseline: a plain actor that hands back what it gets."""

    def echo(self, half: dict) -> dict:
        return half


def verl_group(numpy: bool):
    """veRL 0.9.1's own worker group of 2 ranks whose method returns its rows."""
    from verl.protocol import DataProto
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register
    from verl.single_controller.ray.base import (
        RayClassWithInitArgs,
        RayResourcePool,
        RayWorkerGroup,
    )

    class Echo(Worker):
        @register(Dispatch.DP_COMPUTE_PROTO)
        def echo(self, data: DataProto) -> DataProto:
            return data

    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
    env = {ENV: "numpy"} if numpy else {}
    return RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(Echo)), worker_env=env)


def reference_group():
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
        @register(Dispatch.DP_COMPUTE_PROTO)
        def echo(self, data: DataProto) -> DataProto:
            return data

    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
    return RayWorkerGroup(pool, RayClassWithInitArgs(cls=Echo))


def start_groups() -> dict:
    """{case: (the group or the raw ranks, the driver's switch)}, started once for all sizes
    (veRL's pools wait for their CPUs without a timeout, so they must not pile up)."""
    return {
        "raw Ray": ([RawRank.remote() for _ in range(2)], None),
        "veRL default": (verl_group(numpy=False), None),
        "veRL numpy": (verl_group(numpy=True), "numpy"),
        "reference_impl": (reference_group(), None),
    }


def make_call(case: str, group, x: torch.Tensor):
    """A function that makes one call with ``x`` and returns the tensor that came back."""
    if case == "raw Ray":

        def call():
            halves = torch.chunk(x, 2)
            outs = ray.get([r.echo.remote({"x": h}) for r, h in zip(group, halves, strict=True)])
            return torch.cat([o["x"] for o in outs])

        return call
    if case == "reference_impl":
        from reference_impl import DataProto

        data = DataProto.from_dict({"x": x})
    else:
        from verl.protocol import DataProto

        data = DataProto.from_dict(tensors={"x": x})
    return lambda: group.echo(data).batch["x"]


def use(setting: str | None) -> None:
    """The driver's side of veRL's switch (read on every pickle and unpickle)."""
    if setting:
        os.environ[ENV] = setting
    else:
        os.environ.pop(ENV, None)


def measure(groups: dict, x: torch.Tensor, repeats: int) -> dict[str, float]:
    """{case: median seconds of one call}, each case's result checked against ``x``."""
    calls = {
        case: (make_call(case, group, x), setting) for case, (group, setting) in groups.items()
    }
    times: dict[str, list[float]] = {case: [] for case in CASES}
    for case, (call, setting) in calls.items():  # once each before timing: start-up, check
        use(setting)
        assert torch.equal(call(), x), case
    for _ in range(repeats):
        for case, (call, setting) in calls.items():
            use(setting)
            start = time.perf_counter()
            call()
            times[case].append(time.perf_counter() - start)
    use(None)
    return {case: statistics.median(t) for case, t in times.items()}


def main(quick: bool) -> list[tuple[str, str, float, float]]:
    """Rows (payload, case, median seconds, ratio to raw Ray)."""
    ray.init(num_cpus=6, include_dashboard=False)  # three groups of 2 one-CPU bundles
    rows = []
    try:
        groups = start_groups()
        for label, shape in SHAPES.items():
            if quick and label != "1 KiB":
                continue
            x = torch.arange(shape[0] * shape[1], dtype=torch.float32).reshape(shape)
            medians = measure(groups, x, 3 if quick else (30 if label == "1 KiB" else 9))
            for case in CASES:
                rows.append((label, case, medians[case], medians[case] / medians["raw Ray"]))
    finally:
        use(None)
        ray.shutdown()
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 KiB only, 3 repeats")
    table = main(parser.parse_args().quick)
    print(f"{'payload':8} {'case':16} {'median':>10} {'vs raw Ray':>11}")
    for label, case, seconds, ratio in table:
        print(f"{label:8} {case:16} {seconds * 1000:8.2f}ms {ratio:10.2f}x")
