"""Pins, against veRL 0.9.1 itself, the rows of docs/verl/differences.md for workers.md and
resource-pools.md, and the facts about veRL those two pages state in prose.

Each test runs veRL's own classes on a small local Ray (no GPU). A test named in the table
fails when veRL stops behaving as the row says, so the table cannot go stale silently.
Waiting "forever" is checked by interrupting the wait after a few seconds
(``tests.upstream.backend.time_limit``), as the doc-block harness does for listed blocks.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.placement_group import get_placement_group, remove_placement_group
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker
from verl.single_controller.ray import base as verl_ray_base
from verl.single_controller.ray.base import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    ResourcePoolManager,
    get_master_addr_port,
    merge_resource_pool,
)

from tests.upstream.backend import Hung, time_limit

pytestmark = pytest.mark.reads_docs("docs/verl/differences.md", "docs/verl/differences.zh.md")


VERL = Path(importlib.util.find_spec("verl").origin).parent  # the installed veRL 0.9.1
WAIT_S = 3  # long enough for Ray to grant a reservation that fits


@pytest.fixture(scope="module")
def shut_down_at_the_end():
    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture(autouse=True)
def local_ray(shut_down_at_the_end, request):
    """A one-node, 4-CPU Ray without GPUs, started once (the two-node test brings its own)."""
    if "two_nodes_of_one_gpu" not in request.fixturenames and not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False)
    yield


@pytest.fixture
def two_nodes_of_one_gpu():
    """Two raylets on this machine, each with 4 CPUs and 1 logical GPU (Ray only counts them)."""
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 4, "num_gpus": 1, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=4, num_gpus=1)
    ray.init(address=cluster.address)
    cluster.wait_for_nodes()
    yield
    ray.shutdown()
    cluster.shutdown()


def remove_pending(name_prefix: str, store: list[int]) -> None:
    """Remove the placement groups a veRL pool asked for and never got (by veRL's names)."""
    for index in range(len(store)):
        name = f"{name_prefix}verl_group_{'_'.join(map(str, store))}:{index}"
        remove_placement_group(get_placement_group(name))


class Local(Worker):
    @register(Dispatch.ONE_TO_ALL)
    def local(self):
        keys = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "RAY_LOCAL_WORLD_SIZE", "WG_BACKEND")
        return {key: os.environ.get(key) for key in keys}, hasattr(self, "local_rank")


# --- workers.md ---------------------------------------------------------------------------


def test_verl_worker_local_rank_is_zero_on_every_rank():
    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
    group = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(Local)))
    seen = group.local()
    assert [env for env, _ in seen] == [
        {
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "RAY_LOCAL_WORLD_SIZE": "2",
            "WG_BACKEND": "ray",
        }
    ] * 2
    assert not any(has for _, has in seen)  # no public local_rank on veRL's Worker
    for pg in pool.get_placement_groups():
        remove_placement_group(pg)


def test_verl_master_port_task_takes_a_range_and_register_center_is_gone():
    low, high = 29500, 29600
    _, port = ray.get(get_master_addr_port.remote(master_port_range=[low, high]))
    assert low <= int(port) < high
    # v0.5's register center: the timeout argument is still accepted, and only stored.
    assert (
        "ray_wait_register_center_timeout" in inspect.signature(RayWorkerGroup.__init__).parameters
    )
    source = Path(verl_ray_base.__file__).read_text(encoding="utf-8")
    assert source.count("self._ray_wait_register_center_timeout") == 1
    assert "register_center" not in Path(VERL / "single_controller/base/worker.py").read_text()


def test_verl_workers_start_torch_distributed_from_env():
    engine = (VERL / "workers/engine_workers.py").read_text(encoding="utf-8")
    assert "initialize_global_process_group_ray(" in engine
    dist_source = (VERL / "utils/distributed.py").read_text(encoding="utf-8")
    body = dist_source.split("def initialize_global_process_group_ray", 1)[1].split("\ndef ", 1)[0]
    assert 'init_method=os.environ.get("DIST_INIT_METHOD", None)' in body  # None: env://
    assert not hasattr(Worker, "init_process_group")


# --- resource-pools.md --------------------------------------------------------------------


def test_verl_bundle_asks_max_colocate_count_cpus():
    pool = RayResourcePool([1], use_gpu=False, max_colocate_count=2)
    (pg,) = pool.get_placement_groups()
    assert pg.bundle_specs == [{"CPU": 2.0}]
    remove_placement_group(pg)
    assert (
        inspect.signature(RayResourcePool.__init__).parameters["max_colocate_count"].default == 10
    )
    assert ResourcePoolManager(resource_pool_spec={}, mapping={}).max_colocate_count == 3


def test_verl_gpu_pool_without_gpus_waits_forever():
    assert not hasattr(verl_ray_base, "PlacementTimeoutError")
    assert "GPU" not in ray.cluster_resources()
    pool = RayResourcePool([2], use_gpu=True, max_colocate_count=1, name_prefix="pin_gpu_")
    with pytest.raises(Hung):
        with time_limit(WAIT_S):
            pool.get_placement_groups()
    remove_pending("pin_gpu_", [2])


def test_verl_pool_has_no_placement_timeout():
    with pytest.raises(TypeError, match="placement_timeout_s"):
        RayResourcePool([8], use_gpu=False, max_colocate_count=1, placement_timeout_s=2)
    pool = RayResourcePool([8], use_gpu=False, max_colocate_count=1, name_prefix="pin_big_")
    with pytest.raises(Hung):  # 8 one-CPU bundles on a 4-CPU cluster: granted never
        with time_limit(WAIT_S):
            pool.get_placement_groups()
    remove_pending("pin_big_", [8])


def test_verl_resource_check_counts_gpus_in_the_whole_cluster():
    manager = ResourcePoolManager(resource_pool_spec={"global_pool": [2]}, mapping={})
    with pytest.raises(
        ValueError, match=r"^Total available GPUs 0 is less than total desired GPUs 2$"
    ):
        manager.create_resource_pool()
    check = inspect.getsource(ResourcePoolManager._check_resource_available)
    # One sum over the nodes, compared with one sum over the pools: no per-node comparison.
    assert "sum(node_available_gpus.values())" in check
    assert check.count("raise") == 1


def test_verl_calls_split_resource_pool_but_never_merge():
    callers: dict[str, set[str]] = {"merge_resource_pool(": set(), "split_resource_pool(": set()}
    for path in VERL.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for call in callers:
            for line in text.splitlines():
                if call in line and not re.match(r"\s*def ", line):
                    callers[call].add(str(path.relative_to(VERL.parent)))
    assert callers["merge_resource_pool("] == set()
    assert callers["split_resource_pool("] == {
        "verl/experimental/reward_loop/reward_model.py",
        "verl/experimental/teacher_loop/teacher_model.py",
    }


def test_verl_group_on_unequal_pools_takes_the_first_pools_shape():
    """resource-pools.md, "Merging and splitting pools": veRL starts ``store[0]`` ranks on every
    placement group, so a merge of unequal shapes fails or starts too few ranks."""
    a, b = (RayResourcePool([n], use_gpu=False, max_colocate_count=1) for n in (2, 1))
    with pytest.raises(AssertionError):  # 2 ranks asked of the 1-bundle group
        RayWorkerGroup(merge_resource_pool(a, b), RayClassWithInitArgs(cls=ray.remote(Local)))
    for pg in a.get_placement_groups() + b.get_placement_groups():
        remove_placement_group(pg)  # and with them the ranks started before the assertion
    a, b = (RayResourcePool([n], use_gpu=False, max_colocate_count=1) for n in (1, 2))
    group = RayWorkerGroup(merge_resource_pool(a, b), RayClassWithInitArgs(cls=ray.remote(Local)))
    assert (group.world_size, len(group.workers)) == (3, 2)  # told WORLD_SIZE=3, two started
    for pg in a.get_placement_groups() + b.get_placement_groups():
        remove_placement_group(pg)


def test_verl_placement_groups_of_two_entries_can_share_a_node():
    pool = RayResourcePool([1, 1], use_gpu=False, max_colocate_count=1)
    groups = pool.get_placement_groups()
    nodes = {ray.util.placement_group_table(pg)["bundles_to_node_id"][0] for pg in groups}
    assert (len(groups), len(nodes)) == (2, 1)
    assert {ray.util.placement_group_table(pg)["strategy"] for pg in groups} == {"STRICT_PACK"}
    for pg in groups:
        remove_placement_group(pg)


@pytest.mark.alone  # two raylets of its own: not beside other Ray sessions of the parallel pass
def test_verl_resource_check_passes_when_no_node_can_hold_the_pool(two_nodes_of_one_gpu):
    assert ray.cluster_resources()["GPU"] == 2
    manager = ResourcePoolManager(resource_pool_spec={"global_pool": [2]}, mapping={})
    manager.create_resource_pool()  # 2 free GPUs in the cluster: the check passes
    pool = manager.resource_pool_dict["global_pool"]
    with pytest.raises(Hung):  # a STRICT_PACK group of 2 GPU bundles fits on neither node
        with time_limit(WAIT_S):
            pool.get_placement_groups()
    remove_pending("global_pool", [2])


def test_verl_pool_checks_process_on_nodes_only_when_placing():
    """resource-pools.md block 11: any process_on_nodes is stored; placing it fails."""
    # Made without a word; each fails at placement, and no message names process_on_nodes.
    failures = [
        (4, TypeError, r"^'int' object is not iterable$"),
        ([2.0], TypeError, r"^'float' object cannot be interpreted as an integer$"),
        ([0], ValueError, r"^Bundles must be a non-empty list"),
    ]
    for bad, error, message in failures:
        pool = RayResourcePool(bad, use_gpu=False, max_colocate_count=1, name_prefix="pin_bad_")
        with pytest.raises(error, match=message):
            pool.get_placement_groups()
