"""The reader's cluster, declared: nodes × GPUs × CPUs × memory, simulated on this machine.

Ray accepts declared resources without the hardware (``num_gpus=8`` on a machine with no GPU)
and schedules placement groups and actors on them as it would on real nodes. Each node here is
a real raylet of a ``ray.cluster_utils.Cluster`` (`python/ray/cluster_utils.py` (`Cluster`)).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from reference_impl.plan.config import PlanInputError

SPEC = re.compile(r"^(\d+)x(\d+)x(\d+)(?:x(\d+(?:\.\d+)?))?$")


@dataclass
class NodeSpec:
    """One node: GPUs and CPUs as Ray counts them, memory in GiB (None: not declared)."""

    gpus: int
    cpus: int
    memory_gib: float | None = None

    def ray_args(self) -> dict:
        args = dict(num_cpus=self.cpus, num_gpus=self.gpus)
        if self.memory_gib is not None:
            args["memory"] = int(self.memory_gib * 2**30)
        return args

    def to_json(self) -> dict:
        return asdict(self)


def parse(specs: list[str]) -> list[NodeSpec]:
    """``["2x8x96x1024"]`` -> two nodes of 8 GPUs, 96 CPUs, 1024 GiB; the first node is the head.

    Raises PlanInputError for a spec that is not ``NODESxGPUSxCPUS[xMEMORY_GIB]``.
    """
    nodes: list[NodeSpec] = []
    for spec in specs:
        match = SPEC.match(spec.strip().lower())
        if not match:
            raise PlanInputError(
                f"cluster spec {spec!r} is not NODESxGPUSxCPUS[xMEMORY_GIB]\n"
                f"  -> e.g. --cluster 2x8x96x1024 (2 nodes, each 8 GPUs, 96 CPUs, 1024 GiB); "
                f"repeat --cluster for nodes of another shape, the first node is the head"
            )
        count, gpus, cpus, memory = match.groups()
        nodes += [NodeSpec(int(gpus), int(cpus), float(memory) if memory else None)] * int(count)
    if not nodes:
        raise PlanInputError(
            "no nodes\n  -> give --cluster NODESxGPUSxCPUS[xMEMORY_GIB], or --from-ray ADDRESS"
        )
    return nodes


def from_ray(address: str) -> list[NodeSpec]:
    """The alive nodes of a running cluster (``ray.nodes()``), head first, as NodeSpecs."""
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
    finally:
        ray.shutdown()
    nodes.sort(key=lambda n: not n.get("Resources", {}).get("node:__internal_head__"))
    return [
        NodeSpec(
            gpus=int(n["Resources"].get("GPU", 0)),
            cpus=int(n["Resources"].get("CPU", 0)),
            memory_gib=round(n["Resources"].get("memory", 0) / 2**30, 1) or None,
        )
        for n in nodes
    ]
