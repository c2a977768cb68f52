"""`RayResourcePool`: the devices a WorkerGroup runs on, reserved with Ray placement groups.

A pool is described by ``process_on_nodes``, the number of processes on each
node, e.g. ``[8, 8]`` for two nodes of eight GPUs. It reserves one placement
group per entry (all its bundles on one node) with one bundle per process, and
hands out *slots*
``(placement group, bundle index)``; a WorkerGroup puts one Ray actor in each
slot. Several groups placed on the same pool share its bundles: that is
colocation, and ``max_colocate_count`` bounds how many may share one bundle.

Follows ``verl/single_controller/ray/base.py`` (``RayResourcePool``,
``SubRayResourcePool``, ``merge_resource_pool``, ``split_resource_pool``) of
veRL 0.9.1: the same constructor arguments, one ``STRICT_PACK`` placement group
per entry of ``process_on_nodes`` (Ray may put two entries' groups on one node if
it has room; they are not guaranteed distinct nodes), and
:meth:`RayResourcePool.get_placement_groups`. Three differences are deliberate
and explained in the veRL chapter (``docs/verl/resource-pools.md``):

* **Bundles fit a laptop.** veRL asks ``{"CPU": max_colocate_count, "GPU": 1}``
  per bundle (``RayResourcePool.get_placement_groups``). Its class default is
  ``max_colocate_count=10``; the pools its trainer builds through
  ``ResourcePoolManager`` use 3. A 2-process CPU pool at the default then needs
  20 CPUs and waits forever on a laptop. Here a bundle is ``{"CPU": 1}`` (plus
  ``{"GPU": 1}`` with ``use_gpu``), and each of up to ``max_colocate_count``
  actors in it asks for ``1 / max_colocate_count`` of it. With
  ``max_colocate_count=1`` the two bundles are the same.
* **Placement waits with a timeout** and then raises :class:`PlacementTimeoutError`
  stating what was requested and what the cluster has. A bundle, or the bundles
  of one ``STRICT_PACK`` group together, that no node could ever hold fail at
  once, without waiting. veRL waits on
  ``pg.ready()`` without a timeout; its only early check,
  ``ResourcePoolManager._check_resource_available``, compares the free GPUs of the
  whole cluster with the total asked (``ValueError: Total available GPUs ... is
  less than total desired GPUs ...``), not what each node has.
* A pool is a list of slots (:meth:`RayResourcePool.slots`, ours), so merging
  (``merge_resource_pool``) and splitting (``split_resource_pool``) are list
  operations. veRL 0.9.1 defines ``merge_resource_pool`` but never calls it; it
  uses ``split_resource_pool`` to give each reward-model or teacher replica its
  bundles (``verl/experimental/reward_loop/reward_model.py``,
  ``verl/experimental/teacher_loop/teacher_model.py``).

Ray's docs: *Ray Core → Scheduling → Placement Groups*.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group


class ResourcePoolError(RuntimeError):
    """A pool that cannot be placed or combined as asked."""


class PlacementTimeoutError(ResourcePoolError):
    """The cluster did not grant a pool's placement groups in time (or never could)."""


@dataclass(frozen=True)
class BundleSlot:
    """Where one process of a pool runs: bundle ``bundle_index`` of ``placement_group``.

    A pool reserves one placement group per node, so slots that share a
    placement group share a node.
    """

    placement_group: PlacementGroup
    bundle_index: int


def _fits_on_some_node(resources: dict[str, float]) -> bool:
    """True if some live node has at least ``resources`` in all (free now or not)."""
    return any(
        node["Alive"] and all(node["Resources"].get(k, 0.0) >= v for k, v in resources.items())
        for node in ray.nodes()
    )


class RayResourcePool:
    """One placement group per node, one bundle per process.

    Args:
        process_on_nodes: processes per node, e.g. ``[2]`` or ``[8, 8]``.
            Default ``[1]``.
        use_gpu: reserve one GPU per process (each bundle gets ``{"GPU": 1}``).
        name_prefix: prefix of placement-group and actor names; random if None.
        max_colocate_count: how many actors may share one bundle. Each actor of a
            WorkerGroup on this pool asks for ``1 / max_colocate_count`` of its
            bundle's CPU (and GPU). veRL's default, 10.
        detached: placement groups outlive the driver (``lifetime="detached"``).
        placement_timeout_s: seconds to wait for the cluster to grant the
            placement groups before raising.

    Raises:
        TypeError: ``process_on_nodes`` is not a list of ints, or ``max_colocate_count``
            is not an int (veRL accepts anything here and fails later, when it places the
            pool).
        ValueError: ``process_on_nodes`` is empty or holds a count below 1, or
            ``max_colocate_count`` is below 1.
    """

    def __init__(
        self,
        process_on_nodes: list[int] | None = None,
        use_gpu: bool = True,
        name_prefix: str | None = None,
        max_colocate_count: int = 10,
        detached: bool = False,
        placement_timeout_s: float = 60.0,
    ) -> None:
        store = [1] if process_on_nodes is None else process_on_nodes
        # Checked here, so that a wrong value is named now and not as a TypeError from
        # deep inside placement (bool is an int to Python, but never a process count).
        if not isinstance(store, (list, tuple)) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in store
        ):
            raise TypeError(
                "process_on_nodes must be a list of positive ints, one process count per "
                f"node (e.g. [2] or [8, 8]), got {store!r}"
            )
        if not store or any(n < 1 for n in store):
            raise ValueError(
                "process_on_nodes must be a non-empty list of positive ints, one process "
                f"count per node (e.g. [2] or [8, 8]), got {store!r}"
            )
        store = list(store)
        if not isinstance(max_colocate_count, int) or isinstance(max_colocate_count, bool):
            raise TypeError(
                "max_colocate_count must be an int, how many actors may share one bundle "
                f"(e.g. 1 or 10), got {max_colocate_count!r}"
            )
        if max_colocate_count < 1:
            raise ValueError(f"max_colocate_count must be >= 1, got {max_colocate_count}")
        self.store = store
        self.use_gpu = use_gpu
        self.name_prefix = name_prefix if name_prefix is not None else uuid.uuid4().hex[:6]
        self.max_colocate_count = max_colocate_count
        self.detached = detached
        self.placement_timeout_s = placement_timeout_s
        self._slots: list[BundleSlot] | None = None

    @property
    def world_size(self) -> int:
        """Total number of processes: ``sum(process_on_nodes)``."""
        return sum(self.store)

    @property
    def bundle(self) -> dict[str, float]:
        """The resources of one bundle: ``{"CPU": 1}``, plus ``{"GPU": 1}`` if ``use_gpu``."""
        return {"CPU": 1.0, "GPU": 1.0} if self.use_gpu else {"CPU": 1.0}

    def actor_resources(self) -> dict[str, float]:
        """What one actor in a slot asks for: a ``1 / max_colocate_count`` share of its bundle."""
        share = 1.0 / self.max_colocate_count
        return {"num_cpus": share, "num_gpus": share if self.use_gpu else 0.0}

    def get_placement_groups(
        self, strategy: str = "STRICT_PACK", name: str | None = None, device_name: str = "cuda"
    ) -> list[PlacementGroup]:
        """Reserve the placement groups (once); return one per entry of ``process_on_nodes``.

        veRL's signature. ``name`` and ``device_name`` are accepted for it and not
        used: the groups are named after the pool, and ``use_gpu`` decides the
        device. For a pool made by merge or split, the groups its slots lie in.

        Raises:
            PlacementTimeoutError: as :meth:`slots`.
        """
        del name, device_name
        groups = {slot.placement_group.id: slot.placement_group for slot in self.slots(strategy)}
        return list(groups.values())

    def slots(self, strategy: str = "STRICT_PACK") -> list[BundleSlot]:
        """Reserve the placement groups (once) and return one slot per process, in rank order.

        Raises:
            PlacementTimeoutError: a bundle, or (``STRICT_PACK``) the bundles of one
                entry of ``process_on_nodes`` together, fit no node; or the groups were not
                granted within ``placement_timeout_s``.
        """
        if self._slots is None:
            self._slots = self._place(strategy)
        return self._slots

    def _place(self, strategy: str) -> list[BundleSlot]:
        if not _fits_on_some_node(self.bundle):
            raise PlacementTimeoutError(
                self._describe(f"no node can ever hold one bundle {self.bundle}")
                + " Start the pool with use_gpu=False on a machine without GPUs, or add a node "
                "that has these resources."
            )
        if strategy == "STRICT_PACK":
            # STRICT_PACK puts all bundles of a group on one node, so the node must hold
            # count x bundle; checking one bundle alone would wait out the whole timeout.
            largest = max(self.store)
            group = {k: v * largest for k, v in self.bundle.items()}
            if not _fits_on_some_node(group):
                raise PlacementTimeoutError(
                    self._describe(
                        f"no node can ever hold a group of {largest} bundles, {group} on one node"
                    )
                    + " Ask for at most one node's resources in each entry of "
                    "process_on_nodes, or add a node that large."
                )
        lifetime = "detached" if self.detached else None
        pgs = [
            placement_group(
                [dict(self.bundle) for _ in range(count)],
                strategy=strategy,
                name=f"{self.name_prefix}_pool_{node}",
                lifetime=lifetime,
            )
            for node, count in enumerate(self.store)
        ]
        ready = [pg.wait(timeout_seconds=self.placement_timeout_s) for pg in pgs]
        if not all(ready):
            for pg in pgs:
                remove_placement_group(pg)
            raise PlacementTimeoutError(
                self._describe(f"not granted within {self.placement_timeout_s:g} s")
                + " Free resources (other pools, actors), ask for fewer processes, "
                "or raise placement_timeout_s if the cluster is still starting."
            )
        return [
            BundleSlot(pg, index)
            for pg, count in zip(pgs, self.store, strict=True)
            for index in range(count)
        ]

    def _describe(self, what: str) -> str:
        total = {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")}
        available = ray.available_resources()
        free = {k: available.get(k, 0.0) for k in total}
        return (
            f"Resource pool {self.name_prefix!r}: {what}. Requested {len(self.store)} placement "
            f"group(s) of {self.store} bundle(s), each bundle {self.bundle}, each group on one "
            f"node; the cluster has {total} in total, {free} free."
        )

    def release(self) -> None:
        """Remove this pool's placement groups (their actors are killed by Ray)."""
        for pg in {s.placement_group.id: s.placement_group for s in self._slots or []}.values():
            remove_placement_group(pg)
        self._slots = None

    @classmethod
    def from_slots(cls, slots: list[BundleSlot], like: RayResourcePool, name_prefix: str):
        """A pool over existing slots (used by merge and split); places nothing itself."""
        return _PoolOfSlots(slots, like, name_prefix)


class _PoolOfSlots(RayResourcePool):
    """A pool over slots that other pools placed (merge, split): same bundles, nothing new.

    ``process_on_nodes`` is the slots' count per placement group, in their order. It owns
    none of them, so :meth:`release` refuses: removing them would also end the groups of
    the pools it was made from (and of the other parts of a split), behind their back.
    """

    def __init__(self, slots: list[BundleSlot], like: RayResourcePool, name_prefix: str) -> None:
        per_node: dict = {}
        for slot in slots:
            per_node[slot.placement_group.id] = per_node.get(slot.placement_group.id, 0) + 1
        super().__init__(
            list(per_node.values()),
            use_gpu=like.use_gpu,
            name_prefix=name_prefix,
            max_colocate_count=like.max_colocate_count,
            detached=like.detached,
            placement_timeout_s=like.placement_timeout_s,
        )
        self._slots = list(slots)

    def release(self) -> None:
        """Refuse: the placement groups belong to the pools this one was made from.

        Raises:
            ResourcePoolError: always; release the pools given to ``merge_resource_pool``
                or ``split_resource_pool`` instead.
        """
        raise ResourcePoolError(
            f"pool {self.name_prefix!r} was made by merge_resource_pool or "
            "split_resource_pool and does not own its placement groups: release the "
            "pools it was made from instead (that ends the groups on this one too)"
        )


def merge_resource_pool(rp1: RayResourcePool, rp2: RayResourcePool) -> RayResourcePool:
    """A pool made of the bundles of both: a group on it spans ``rp1`` then ``rp2``.

    Both pools are placed (if not yet) and keep their placement groups; a
    group created on the merged pool has ``rp1.world_size + rp2.world_size``
    ranks, and groups on ``rp1`` or ``rp2`` still share those bundles. veRL 0.9.1
    gives every placement group the first one's count instead, so there the sum holds
    only for pools of equal shape (docs/verl/resource-pools.md, "Merging and splitting
    pools").

    Raises:
        ResourcePoolError: if the pools differ in ``use_gpu`` or ``max_colocate_count``.
    """
    for attr in ("use_gpu", "max_colocate_count", "detached"):
        if getattr(rp1, attr) != getattr(rp2, attr):
            raise ResourcePoolError(
                f"cannot merge pools with different {attr}: "
                f"{getattr(rp1, attr)!r} vs {getattr(rp2, attr)!r}"
            )
    return RayResourcePool.from_slots(
        rp1.slots() + rp2.slots(), like=rp1, name_prefix=f"{rp1.name_prefix}_{rp2.name_prefix}"
    )


def split_resource_pool(pool: RayResourcePool, sizes: int | list[int]) -> list[RayResourcePool]:
    """Cut a pool into consecutive sub-pools of the given sizes (or of equal size ``sizes``).

    Raises:
        ResourcePoolError: if the sizes do not add up to ``pool.world_size``.
    """
    if isinstance(sizes, int):
        if sizes < 1 or pool.world_size % sizes:
            raise ResourcePoolError(
                f"cannot split a pool of {pool.world_size} processes into parts of {sizes}"
            )
        sizes = [sizes] * (pool.world_size // sizes)
    if sum(sizes) != pool.world_size or any(s < 1 for s in sizes):
        raise ResourcePoolError(f"sizes {sizes} do not add up to the pool's {pool.world_size}")
    slots, parts, start = pool.slots(), [], 0
    for i, size in enumerate(sizes):
        parts.append(
            RayResourcePool.from_slots(
                slots[start : start + size], like=pool, name_prefix=f"{pool.name_prefix}_part{i}"
            )
        )
        start += size
    return parts
