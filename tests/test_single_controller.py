"""Integration tests of the single-controller core on a real local Ray cluster (CPU, gloo)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import ray
import torch

from reference_impl import (
    BatchSplitError,
    DataProto,
    DataProtoFuture,
    Dispatch,
    DispatchError,
    Execute,
    PlacementTimeoutError,
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    ResourcePoolError,
    Worker,
    WorkerDiedError,
    WorkerGroupError,
    collect_all_to_all,
    create_colocated_worker_cls,
    merge_resource_pool,
    register,
    split_resource_pool,
)

pytestmark = pytest.mark.reads_docs()


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=8, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def shared(cluster):
    """One 2-rank group for the tests that leave no state behind (starting one costs seconds)."""
    shared_pool = RayResourcePool([2], use_gpu=False)
    yield RayWorkerGroup(shared_pool, RayClassWithInitArgs(Accumulator))
    shared_pool.release()


@pytest.fixture
def pool():
    pools = []

    def make(process_on_nodes=(2,), **kwargs):
        kwargs.setdefault("use_gpu", False)
        p = RayResourcePool(list(process_on_nodes), **kwargs)
        pools.append(p)
        return p

    yield make
    for p in pools:
        p.release()


def where_am_i() -> dict:
    """This process, its actor, its placement group and the CPU share Ray gave it."""
    ctx = ray.get_runtime_context()
    return {
        "pid": os.getpid(),
        "actor": ctx.get_actor_id(),
        "placement_group": ctx.get_placement_group_id(),
        "cpus": ctx.get_assigned_resources().get("CPU"),
    }


class Accumulator(Worker):
    def __init__(self, start=0.0):
        super().__init__()
        self.value = start + self.rank

    def add(self, x):
        self.value += x
        return self.value

    def echo(self, x):  # undecorated: reachable with execute_all_sync("echo", ...)
        return x

    @register(Dispatch.ONE_TO_ALL)
    def add_to_all(self, x):
        self.value += x
        return self.value

    @register(Dispatch.ALL_TO_ALL)
    def add_each(self, x):
        self.value += x
        return self.value

    @register(Dispatch.RANK_ZERO, execute_mode=Execute.RANK_ZERO)
    def rank_zero_only(self, x):
        return (self.rank, x)

    @register(Dispatch.DP_COMPUTE)
    def scaled(self, x):
        return x * (self.rank + 1)

    @register(Dispatch.DP_COMPUTE_PROTO)
    def double(self, data: DataProto) -> DataProto:
        out = DataProto.from_dict({"y": data.batch["x"] * 2})
        out.meta_info["rank"] = self.rank
        return out

    @register(Dispatch.DP_COMPUTE_PROTO)
    def keep_first(self, first: DataProto, second: DataProto) -> DataProto:
        return DataProto.from_dict({"x": first.batch["x"]})

    @register(Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def double_async(self, data: DataProto) -> DataProto:
        return DataProto.from_dict({"x": data.batch["x"] * 2})

    @register(Dispatch.DP_COMPUTE_PROTO_WITH_FUNC)
    def apply(self, fn, data: DataProto) -> DataProto:
        return DataProto.from_dict({"x": fn(data.batch["x"])})

    @register(Dispatch.DP_COMPUTE_METRIC)
    def count(self, data: DataProto) -> dict:
        return {"rank": self.rank, "rows": len(data)}

    @register(Dispatch.DP_COMPUTE_METRIC)
    def texts(self, data: DataProto) -> list:
        return data.non_tensor_batch["text"].tolist()

    @register(Dispatch.DP_COMPUTE_PROTO)
    def tag_rows(self, data: DataProto) -> DataProto:
        """The rows back, their text with them, and which rank had each."""
        rank = np.full(len(data), self.rank)
        return DataProto.from_dict(
            {"x": data.batch["x"]},
            non_tensors={"text": data.non_tensor_batch["text"], "rank": rank},
        )

    @register(
        {
            "dispatch_fn": lambda wg, x: (([x + i for i in range(wg.world_size)],), {}),
            "collect_fn": lambda wg, out: sum(out),
        }
    )
    def custom(self, x):
        return x

    @register(
        {
            "dispatch_fn": lambda wg, x: (([x + 10 * i for i in range(wg.world_size)],), {}),
            "collect_fn": lambda wg, out: out,
        },
        execute_mode=Execute.RANK_ZERO,
    )
    def first_share(self, x):
        """Rank 0 alone runs, and gets what the dispatch built, unsplit (as in veRL:
        tests/upstream/test_differences_groups.py pins it there)."""
        return (self.rank, x)

    @register(Dispatch.RANK_ZERO)
    def rank_zero_implied(self, x):
        """No execute mode given: Dispatch.RANK_ZERO implies Execute.RANK_ZERO."""
        return (self.rank, x)

    @register(Dispatch.ONE_TO_ALL)
    def all_reduce_rank(self):
        self.init_process_group()
        t = torch.tensor([float(self.rank + 1)])
        torch.distributed.all_reduce(t)
        return t.item()

    @register(Dispatch.ONE_TO_ALL)
    def join_twice(self):
        first = self.init_process_group("gloo")
        second = self.init_process_group()  # as a second role in this process would call it
        total = torch.ones(1)
        torch.distributed.all_reduce(total)  # still the one group of both ranks
        return first, second, os.environ["MASTER_PORT"] == self.master_port, total.item()

    @register(Dispatch.ONE_TO_ALL)
    def join_with(self, backend):
        return self.init_process_group(backend)

    @register(Dispatch.ONE_TO_ALL)
    def placement(self):
        return where_am_i()

    @register(Dispatch.DP_COMPUTE_METRIC, materialize_futures=False)
    def argument_kind(self, data):
        return type(data).__name__

    @register(Dispatch.DP_COMPUTE_METRIC)
    def argument_kind_materialized(self, data):
        return type(data).__name__

    @register(Dispatch.ONE_TO_ALL)
    def identity(self):
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "local_world_size": self.local_world_size,
            "master": (self.master_addr, self.master_port),
            "pid": os.getpid(),
        }

    @register(Dispatch.ONE_TO_ALL)
    def env(self, name):
        return os.environ.get(name)

    @register(Dispatch.ONE_TO_ALL)
    def die_on_rank_one(self):
        if self.rank == 1:
            os._exit(1)
        return self.rank

    @register(Dispatch.ONE_TO_ALL)
    def fail(self):
        raise KeyError("a bad key")

    @register(Dispatch.ONE_TO_ALL)
    def nap(self, seconds):
        time.sleep(seconds)
        return self.rank

    @register(Dispatch.ONE_TO_ALL)
    def survivor_reports_first(self, rank_one_dies_after_s):
        """Rank 0 raises at once, as a peer of a dead rank does; rank 1 dies a moment later."""
        if self.rank == 0:
            raise RuntimeError("Connection closed by peer")
        time.sleep(rank_one_dies_after_s)
        os._exit(1)

    @register(Dispatch.ONE_TO_ALL)
    def raise_on_one_while_zero_naps(self, seconds):
        if self.rank == 1:
            raise ValueError("rank one refuses")
        time.sleep(seconds)
        return self.rank

    @register(Dispatch.ONE_TO_ALL)
    def all_reduce_late_on_rank_one(self, marker_dir, rank_one_waits_s):
        """Each rank joins gloo and says so in ``marker_dir``; rank 1 then waits, rank 0 reduces."""
        self.init_process_group(backend="gloo", timeout_s=60)
        Path(marker_dir, f"joined-{self.rank}").touch()
        if self.rank == 1:
            time.sleep(rank_one_waits_s)
        t = torch.ones(1)
        torch.distributed.all_reduce(t)  # rank 0 waits here for rank 1
        return t.item()


def group(pool_, cls=Accumulator, *args, **kwargs):
    return RayWorkerGroup(pool_, RayClassWithInitArgs(cls, *args, **kwargs))


def batch(n):
    return DataProto.from_dict({"x": torch.arange(n, dtype=torch.float32)})


def test_each_rank_of_a_two_rank_group_gets_its_variables_and_one_master(shared):
    wg = shared
    assert wg.world_size == 2
    ids = wg.identity()
    assert [i["rank"] for i in ids] == [0, 1]
    assert {i["world_size"] for i in ids} == {2}
    assert [i["local_rank"] for i in ids] == [0, 1]
    assert len({i["master"] for i in ids}) == 1 and ids[0]["master"][1]
    assert wg.worker_names[0].endswith("Accumulator_0:0")


def test_veRL_argument_rule_split_vs_broadcast(pool):
    wg = group(pool((2,)))
    assert wg.execute_all_sync("add", x=[1, 3]) == [1, 4]  # split: rank i gets x[i]
    assert wg.execute_all_sync("add", 10) == [11, 14]  # broadcast
    # As in veRL 0.9.1, execute_rank_zero and execute_all are the asynchronous forms.
    ref = wg.execute_rank_zero("add", 1)
    assert isinstance(ref, ray.ObjectRef) and ray.get(ref) == 12
    refs = wg.execute_all("add", 0)
    assert all(isinstance(r, ray.ObjectRef) for r in refs) and ray.get(refs) == [12, 14]


def test_only_a_list_is_split_a_tuple_goes_whole_to_every_rank(pool):
    wg = group(pool((2,)))
    assert wg.execute_all_sync("echo", [1, 2]) == [1, 2]
    assert wg.execute_all_sync("echo", (1, 2)) == [(1, 2), (1, 2)]


def test_dp_compute_proto_refuses_an_argument_that_is_not_a_batch(shared):
    with pytest.raises(DispatchError, match="splits DataProto arguments only, but argument 1"):
        shared.double(batch(4), 3)


def test_dispatch_modes(pool):
    wg = group(pool((2,)))
    assert wg.add_to_all(10) == [10, 11]
    assert wg.add_each([1, 2]) == [11, 13]
    assert wg.rank_zero_only(7) == (0, 7)
    assert wg.rank_zero_implied(7) == (0, 7)  # one result, rank 0's, not a list of two
    assert wg.first_share(1) == (0, [1, 11])  # the dispatched list, whole, on rank 0 only
    assert wg.scaled([5, 5]) == [5, 10]
    assert wg.custom(100) == 201
    out = wg.double(batch(4))
    assert torch.equal(out.batch["y"], torch.arange(4.0) * 2)
    assert wg.apply(lambda x: x + 1, batch(4)).batch["x"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert wg.count(batch(6)) == [{"rank": 0, "rows": 3}, {"rank": 1, "rows": 3}]


def test_wrong_length_list_gets_a_clear_error(shared):
    wg = shared
    with pytest.raises(DispatchError, match="length world_size=2, got a list of length 3"):
        wg.scaled([1, 2, 3])


def test_batch_that_does_not_split(shared):
    wg = shared
    with pytest.raises(BatchSplitError, match="batch of 5 does not split"):
        wg.double(batch(5))
    padded = batch(5)
    padded.meta_info["_verl_auto_padding"] = True  # veRL's key
    assert wg.double(padded).batch["y"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]


def padded(n):
    data = batch(n)
    data.meta_info["_verl_auto_padding"] = True
    return data


def test_dp_compute_metric_pads_a_batch_that_asks_for_it(shared):
    # DP_COMPUTE_METRIC pads as DP_COMPUTE_PROTO does (veRL: both dispatch through
    # `dispatch_dp_compute_data_proto`); a batch of 5 on 2 ranks becomes 3 + 3 rows.
    assert [metric["rows"] for metric in shared.count(padded(5))] == [3, 3]


def test_one_pad_size_per_call_from_all_batches(shared):
    """Two batches of a call are padded by one amount, and the result unpadded by it."""
    assert shared.keep_first(padded(5), second=padded(5)).batch["x"].tolist() == [0, 1, 2, 3, 4]
    # veRL asserts that batches padded together have one length (decorator.py,
    # `_split_args_kwargs_data_proto_with_auto_padding`): named here, not unpadded wrongly.
    named = r"argument 0 has 5 rows, argument 'second' has 4"
    with pytest.raises(BatchSplitError, match=named):
        shared.keep_first(padded(5), second=padded(4))
    with pytest.raises(BatchSplitError, match=r"argument 0 has 4 rows, argument 'second' has 5"):
        shared.keep_first(padded(4), second=padded(5))


def test_unknown_dispatch_mode_fails_at_decoration():
    with pytest.raises(DispatchError, match="unknown dispatch mode"):
        register("DP_COMPUTE_PROTOO")
    with pytest.raises(DispatchError, match="collect_fn"):
        register({"dispatch_fn": collect_all_to_all})


def test_rank_zero_dispatch_with_every_rank_executing_is_refused():
    # Dispatch.RANK_ZERO's data is for rank 0 alone: an explicit Execute.ALL is refused,
    # not silently replaced; left out, the execute mode is Execute.RANK_ZERO.
    with pytest.raises(DispatchError, match="only rank 0 can run the method, not Execute.ALL"):
        register(Dispatch.RANK_ZERO, execute_mode=Execute.ALL)
    assert register(Dispatch.RANK_ZERO)(lambda self: 0).registration.execute_mode is (
        Execute.RANK_ZERO
    )
    assert register(Dispatch.ONE_TO_ALL)(lambda self: 0).registration.execute_mode is Execute.ALL


def test_materialize_futures_false_hands_the_method_the_future_itself(shared):
    future = shared.double_async(batch(4))
    assert shared.argument_kind_materialized(future) == ["DataProto", "DataProto"]
    assert shared.argument_kind(future) == ["DataProtoFuture", "DataProtoFuture"]


class Waiter(Worker):
    """A worker whose method returns only once two calls of it run at the same time."""

    def __init__(self):
        super().__init__()
        self.both_in = threading.Barrier(2, timeout=30)

    @register(Dispatch.ONE_TO_ALL)
    def meet(self):
        self.both_in.wait()  # BrokenBarrierError after 30 s if the calls run one by one
        return self.rank


def test_update_options_reaches_every_actor(pool):
    cia = RayClassWithInitArgs(Waiter)
    cia.update_options({"max_concurrency": 2})  # the default, 1, runs the calls one by one
    wg = RayWorkerGroup(pool((2,)), cia)
    with ThreadPoolExecutor(2) as driver_threads:  # two group calls at once
        first, second = driver_threads.map(lambda _: wg.meet(), range(2))
    assert first == second == [0, 1]


class Sleeper(Worker):
    @register(Dispatch.ONE_TO_ALL)
    async def nap_and_report(self, seconds):
        import asyncio

        await asyncio.sleep(seconds)
        return self.rank


def test_an_async_worker_method_is_awaited_in_the_worker(pool):
    wg = RayWorkerGroup(pool((2,)), RayClassWithInitArgs(Sleeper))
    assert wg.nap_and_report(0.01) == [0, 1]


def test_a_detached_pool_starts_detached_actors_in_detached_placement_groups(pool):
    from ray._private.state import actors, state  # the public state API needs the dashboard
    from ray.core.generated.gcs_pb2 import PlacementGroupTableData

    def group_is_detached(pg) -> bool:  # what placement_group_table reads, lifetime kept
        record = state._connect_and_get_accessor().get_placement_group_info(pg.id)
        return PlacementGroupTableData.FromString(record).is_detached

    for detached in (False, True):
        resource_pool = pool((1,), detached=detached)
        wg = RayWorkerGroup(resource_pool, RayClassWithInitArgs(Accumulator))
        assert [actors(w._actor_id.hex())["IsDetached"] for w in wg.workers] == [detached]
        assert [group_is_detached(pg) for pg in resource_pool.get_placement_groups()] == [detached]


def test_bin_pack_false_reserves_pack_placement_groups(pool):
    from ray.util.placement_group import placement_group_table

    packed, spread = pool((2,)), pool((2,))
    RayWorkerGroup(packed, RayClassWithInitArgs(Accumulator))
    RayWorkerGroup(spread, RayClassWithInitArgs(Accumulator), bin_pack=False)
    strategies = [
        placement_group_table(p.get_placement_groups()[0])["strategy"] for p in (packed, spread)
    ]
    assert strategies == ["STRICT_PACK", "PACK"]


def test_non_blocking_future_feeds_the_next_call(shared):
    wg = shared
    future = wg.double_async(batch(4))
    assert isinstance(future, DataProtoFuture)
    out = wg.double(future)  # the future is resolved inside the workers
    assert out.batch["y"].tolist() == [0.0, 4.0, 8.0, 12.0]
    out = wg.double(data=wg.double_async(batch(4)))  # passed by keyword: resolved too
    assert out.batch["y"].tolist() == [0.0, 4.0, 8.0, 12.0]


def test_gloo_all_reduce_across_ranks(shared):
    wg = shared
    assert wg.all_reduce_rank() == [3.0, 3.0]


def test_dead_worker_names_group_rank_and_method(pool):
    wg = group(pool((2,)))
    with pytest.raises(WorkerDiedError, match=r"rank 1 .*die_on_rank_one\(\)"):
        wg.die_on_rank_one()


def kill_later(pid: int, when) -> tuple[threading.Thread, list[float]]:
    """SIGKILL ``pid`` from a thread once ``when()`` is true; the list gets the kill's time."""
    killed_at: list[float] = []

    def run():
        deadline = time.monotonic() + 60
        while not when() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        killed_at.append(time.monotonic())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, killed_at


@pytest.mark.timeout(90)
def test_a_rank_killed_mid_call_is_reported_at_once_and_named(pool):
    wg = RayWorkerGroup(pool((2,)), RayClassWithInitArgs(Accumulator), name_prefix="nap")
    pid = wg.identity()[1]["pid"]
    start = time.monotonic()
    thread, killed_at = kill_later(pid, lambda: time.monotonic() - start > 2.0)
    with pytest.raises(WorkerDiedError, match=r"rank 1 \(napAccumulator_0:1\) died during nap\(\)"):
        wg.nap(20)  # rank 0 sleeps on for 18 s after rank 1 dies
    reported_after = time.monotonic() - killed_at[0]
    thread.join()
    assert reported_after < 5.0, f"reported {reported_after:.1f} s after the kill"


@pytest.mark.timeout(120)
def test_a_rank_killed_in_a_gloo_collective_is_named_not_the_survivor(pool, tmp_path):
    """Rank 0 sees gloo's "Connection closed by peer" first; the error names rank 1, which died."""
    wg = RayWorkerGroup(pool((2,)), RayClassWithInitArgs(Accumulator), name_prefix="gloo")
    pid = wg.identity()[1]["pid"]
    joined = [tmp_path / "joined-0", tmp_path / "joined-1"]
    joined_at: list[float] = []

    def rank_zero_is_reducing() -> bool:  # both joined, and rank 0 had 0.5 s to enter all_reduce
        if not joined_at and all(p.exists() for p in joined):
            joined_at.append(time.monotonic())
        return bool(joined_at) and time.monotonic() - joined_at[0] > 0.5

    thread, killed_at = kill_later(pid, rank_zero_is_reducing)
    with pytest.raises(WorkerDiedError) as failure:
        wg.all_reduce_late_on_rank_one(str(tmp_path), 30)
    reported_after = time.monotonic() - killed_at[0]
    thread.join()
    message = str(failure.value)
    assert re.search(
        r"rank 1 \(glooAccumulator_0:1\) died during all_reduce_late_on_rank_one", message
    )
    assert reported_after < 5.0, f"reported {reported_after:.1f} s after the kill"


@pytest.mark.timeout(180)
def test_a_death_just_after_a_peer_raised_is_what_is_reported(pool):
    """The survivor's error reaches the driver 0.5 s before the death: the death is named.

    What is tested is which rank is named once both outcomes are in, not how long the grace
    window is: on a loaded machine Ray can take longer than the default 5 s to report the
    death, so the window is widened here (the wait ends as soon as every rank has answered).
    """
    wg = RayWorkerGroup(pool((2,)), RayClassWithInitArgs(Accumulator), name_prefix="late")
    wg.DEATH_GRACE_S = 120.0
    wg.identity()  # both processes are up: the two outcomes are 0.5 s apart, not a start-up
    with pytest.raises(WorkerDiedError) as failure:
        wg.survivor_reports_first(0.5)
    message = str(failure.value)
    assert "rank 1 (lateAccumulator_0:1) died during survivor_reports_first()" in message
    assert "rank 0 (RuntimeError: Connection closed by peer)" in message


@pytest.mark.timeout(180)
def test_a_rank_that_raises_is_reported_while_the_others_still_run(pool):
    wg = group(pool((2,)))
    wg.identity()  # both processes are up: time the call, not their start
    start = time.monotonic()
    with pytest.raises(WorkerGroupError) as failure:
        wg.raise_on_one_while_zero_naps(20)
    # the grace window (RayWorkerGroup.DEATH_GRACE_S, 5 s), not rank 0's 20 s
    assert time.monotonic() - start < wg.DEATH_GRACE_S + 5.0
    assert re.search(r"rank 1 .*raised ValueError: rank one refuses", str(failure.value))
    assert "Still running: rank(s) [0]." in str(failure.value)


def test_method_exception_names_rank_and_cause(shared):
    wg = shared
    with pytest.raises(WorkerGroupError, match=r"rank 0 .*fail\(\) raised KeyError"):
        wg.fail()


def test_pool_that_can_never_be_satisfied_fails_at_once():
    start = time.monotonic()
    with pytest.raises(PlacementTimeoutError, match=r"no node can ever hold one bundle .*GPU"):
        RayResourcePool([2], use_gpu=True, placement_timeout_s=60).slots()
    assert time.monotonic() - start < 30


def test_a_pool_whose_later_entry_no_node_can_hold_fails_at_once():
    # Every entry of process_on_nodes is checked, not the first alone: [1, 64] on an 8-CPU
    # node is refused before any placement group is asked for (else it waits out the timeout).
    with pytest.raises(PlacementTimeoutError, match=r"no node can ever hold a group of 64 bundles"):
        RayResourcePool([1, 64], use_gpu=False, placement_timeout_s=5).slots()


def test_pool_that_does_not_fit_now_times_out_with_numbers(pool):
    pool((1,)).slots()  # one of the 8 CPUs is held: 8 bundles fit the node, but not now
    with pytest.raises(PlacementTimeoutError, match=r"not granted within 1 s.*\[8\].*'CPU': 8"):
        RayResourcePool([8], use_gpu=False, placement_timeout_s=1).slots()


def test_merged_pool_spans_both_and_split_pool_cuts(pool):
    a, b = pool((1,)), pool((1,))
    wg = group(merge_resource_pool(a, b))
    ids = wg.identity()
    assert [i["rank"] for i in ids] == [0, 1]
    # Rank 0 in a's bundle, rank 1 in b's: the merged pool spans both, in order.
    assert [p["placement_group"] for p in wg.placement()] == bundle_ids(a) + bundle_ids(b)
    # Each pool is a node of its own (one placement group): local ranks restart there.
    assert [(i["local_rank"], i["local_world_size"]) for i in ids] == [(0, 1), (0, 1)]
    whole = pool((1, 1))
    left, right = split_resource_pool(whole, 1)
    # Consecutive parts: the left part holds the first bundle, the right one the second.
    places = [group(part).placement()[0]["placement_group"] for part in (left, right)]
    assert places == bundle_ids(whole)
    with pytest.raises(ResourcePoolError, match="do not add up"):
        split_resource_pool(pool((2,)), [1, 2])


def test_a_merged_pool_is_one_world_of_both_pools(pool):
    # WORLD_SIZE counts every rank of the group, on all nodes; each pool of a merged
    # [1] + [1] is a node of its own, so LOCAL_WORLD_SIZE is 1 there but WORLD_SIZE is 2.
    ids = group(merge_resource_pool(pool((1,)), pool((1,)))).identity()
    assert [(i["rank"], i["world_size"]) for i in ids] == [(0, 2), (1, 2)]


def test_a_merged_or_split_pool_refuses_to_release_what_it_does_not_own(pool):
    from ray.util.placement_group import placement_group_table

    a, b, whole = pool((1,)), pool((1,)), pool((2,))
    merged, (left, _) = merge_resource_pool(a, b), split_resource_pool(whole, 1)
    for view in (merged, left):
        with pytest.raises(ResourcePoolError, match="release the pools it was made from"):
            view.release()
    owners = a.get_placement_groups() + b.get_placement_groups() + whole.get_placement_groups()
    assert {placement_group_table(pg)["state"] for pg in owners} == {"CREATED"}


class Critic(Worker):
    @register(Dispatch.ONE_TO_ALL)
    def where(self):
        return "critic", where_am_i()


class Actor(Worker):
    @register(Dispatch.ONE_TO_ALL)
    def where(self):
        return "actor", where_am_i()


def bundle_ids(pool_) -> list[str]:
    """The placement group of each rank of a ``[1, 1, ...]`` pool: there, one bundle each."""
    return [pg.id.hex() for pg in pool_.get_placement_groups()]


def test_colocated_roles_share_one_actor_per_bundle(pool):
    bundles = pool((1, 1))  # one bundle per placement group: a rank's group names its bundle
    cls = create_colocated_worker_cls(
        {"actor": RayClassWithInitArgs(Actor), "critic": RayClassWithInitArgs(Critic)}
    )
    colocated = RayWorkerGroup(bundles, cls)
    roles = colocated.spawn(["actor", "critic"])
    actor, critic = roles["actor"].where(), roles["critic"].where()
    assert [r for r, _ in actor] == ["actor", "actor"]
    assert [r for r, _ in critic] == ["critic", "critic"]
    # veRL's colocation: rank i of every role is one actor, the one in bundle i.
    assert [place for _, place in actor] == [place for _, place in critic]
    assert [place["placement_group"] for _, place in actor] == bundle_ids(bundles)
    assert len({place["actor"] for _, place in actor}) == colocated.world_size == 2
    assert roles["actor"].workers == roles["critic"].workers == colocated.workers


def test_spawn_refuses_a_group_that_is_not_colocated(shared):
    with pytest.raises(ValueError, match=r"spawn\(\) needs a group built from create_colocated"):
        shared.spawn(["actor"])


def test_spawn_refuses_a_role_the_colocated_class_does_not_have(pool):
    cls = create_colocated_worker_cls({"actor": RayClassWithInitArgs(Actor)})
    colocated = RayWorkerGroup(pool((1,)), cls)
    with pytest.raises(
        ValueError, match=r"roles \['critic'\] are not in .* \(it has \['actor'\]\)"
    ):
        colocated.spawn(["actor", "critic"])


def test_worker_env_reaches_every_rank_and_may_not_set_a_rank_variable(pool):
    wg = RayWorkerGroup(pool((2,)), RayClassWithInitArgs(Accumulator), worker_env={"MY_FLAG": "on"})
    assert wg.env("MY_FLAG") == ["on", "on"]
    with pytest.raises(ValueError, match=r"worker_env may not set \['RANK'\]"):
        RayWorkerGroup(pool((1,)), RayClassWithInitArgs(Accumulator), worker_env={"RANK": "5"})


def test_fractional_sharing_puts_rank_i_of_both_groups_in_bundle_i(pool):
    bundles = pool((1, 1), max_colocate_count=2)
    first, second = group(bundles).placement(), group(bundles).placement()
    assert [p["placement_group"] for p in first] == bundle_ids(bundles)
    assert [p["placement_group"] for p in second] == bundle_ids(bundles)
    assert {p["cpus"] for p in first + second} == {0.5}  # half of its bundle's CPU each
    assert {p["pid"] for p in first}.isdisjoint(p["pid"] for p in second)  # separate processes


def test_non_tensor_data_travels_out_and_back(shared):
    text = np.array(list("abcd"), dtype=object)
    data = DataProto.from_dict({"x": torch.arange(4.0)}, non_tensors={"text": text})
    assert shared.texts(data) == [["a", "b"], ["c", "d"]]  # each rank has its half
    out = shared.tag_rows(data)
    assert out.batch["x"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert out.non_tensor_batch["text"].tolist() == list("abcd")
    assert out.non_tensor_batch["rank"].tolist() == [0, 0, 1, 1]
    odd = DataProto.from_dict(
        {"x": torch.arange(5.0)},
        non_tensors={"text": np.array(list("abcde"), dtype=object)},
        auto_padding=True,
    )
    assert shared.tag_rows(odd).non_tensor_batch["text"].tolist() == list("abcde")


def test_init_process_group_twice_is_one_group(shared):
    assert shared.join_twice() == [("gloo", "gloo", True, 2.0)] * 2
    named = r"already joined a 'gloo' process group \(rank 0 of 2\), so it cannot join a 'nccl'"
    with pytest.raises(WorkerGroupError, match=named):
        shared.join_with("nccl")


@pytest.mark.timeout(120)
def test_a_worker_outside_a_group_picks_its_port_without_ray():
    code = (
        "import ray, torch.distributed as dist\n"
        "from reference_impl import Worker\n"
        "worker = Worker()\n"
        "backend = worker.init_process_group('gloo')\n"
        "port = worker.master_port\n"
        "print(backend, dist.get_world_size(), port.isdigit(), ray.is_initialized())\n"
    )
    rank_variables = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RAY_ADDRESS")
    env = {k: v for k, v in os.environ.items() if k not in rank_variables}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=100
    )
    assert done.stdout.split() == ["gloo", "1", "True", "False"], done.stderr[-3000:]


def test_get_placement_groups_and_master_addr_port_as_in_verl(pool, shared):
    two = pool((1, 1))
    groups = two.get_placement_groups()
    assert [g.bundle_specs for g in groups] == [[{"CPU": 1.0}], [{"CPU": 1.0}]]
    assert two.get_placement_groups() == groups  # reserved once
    ids = shared.identity()
    pairs = ray.get([w.get_master_addr_port.remote() for w in shared.workers])
    assert pairs == [ids[0]["master"]] * 2


def test_a_worker_that_gets_no_batch_does_not_import_torch(pool):
    """``reference_impl`` loads its names on first use, so a rank that never receives a
    DataProto does not import torch (about 2 CPU-seconds per worker process). The class is
    defined here, inside the test, so that Ray ships it by value, as a page script's is;
    a class defined at this module's top level would make the rank import this module,
    and with it torch."""

    class Idle(Worker):
        @register(Dispatch.ONE_TO_ALL)
        def loaded(self, names):
            return [name for name in names if name in sys.modules]

    group = RayWorkerGroup(pool(), RayClassWithInitArgs(ray.remote(Idle)))
    names = ["torch", "reference_impl.data_proto", "reference_impl.worker"]
    assert group.loaded(names) == [["reference_impl.worker"]] * 2
