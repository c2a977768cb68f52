"""Pins, against veRL 0.9.1 itself, the rows of docs/verl/differences.md for worker-groups.md,
and checks the table itself: each row names a pin test that exists, and the page's import
table is the switch that ``--backend=verl`` applies (``backend.VERL_NAMES``). The last test
pins a behaviour that reference_impl shares with veRL, and once did not.

When veRL changes one of these behaviours, its test fails and the row must be revisited.
"""

from __future__ import annotations

import ast
import os
import re

import pytest
import ray
import torch
from verl.protocol import DataProto
from verl.single_controller.base.decorator import (
    Dispatch,
    Execute,
    _split_args_kwargs_data_proto_with_auto_padding,
    dispatch_dp_compute,
    get_predefined_dispatch_fn,
    register,
)
from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import WorkerGroup
from verl.single_controller.ray.base import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

from tests.upstream.backend import DIFFERENCES_PAGE, REPO, VERL_NAMES, listed_differences

pytestmark = pytest.mark.reads_docs("docs/verl/differences.md", "docs/verl/differences.zh.md")


def test_every_row_is_pinned_by_a_test_that_exists():
    defined = set()
    for module in (REPO / "tests" / "upstream").glob("test_differences_*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        defined |= {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}
    rows = listed_differences()
    assert rows, "the table of differences has no rows: the page or its format changed"
    missing = sorted(r.pinned_by for r in rows if r.pinned_by not in defined)
    assert not missing, f"rows pinned by tests that do not exist: {missing}"


@pytest.mark.parametrize("page", ["differences.md", "differences.zh.md"])
def test_the_import_table_is_the_switch_the_run_applies(page):
    text = (DIFFERENCES_PAGE.parent / page).read_text(encoding="utf-8")
    shown = dict(re.findall(r"^\| `(\w+)` \| `(verl[\w.]*)` \|$", text, re.MULTILINE))
    assert shown == VERL_NAMES


def test_verl_rank_zero_dispatch_raises_key_error():
    """worker-groups.md block 5: Dispatch.RANK_ZERO is declared without a dispatch function."""
    assert Dispatch.RANK_ZERO in Dispatch._registry.values()
    with pytest.raises(KeyError):
        get_predefined_dispatch_fn(Dispatch.RANK_ZERO)


def test_verl_bad_dispatch_input_is_a_bare_assertion(monkeypatch):
    """worker-groups.md block 6: a wrong-length list and an uneven batch are bare asserts."""
    monkeypatch.delenv("VERL_AUTO_PADDING", raising=False)
    group = WorkerGroup(resource_pool=None)
    group._workers = [None, None]  # world_size 2, no processes needed to dispatch
    with pytest.raises(AssertionError):
        dispatch_dp_compute(group, [1, 2, 3])
    with pytest.raises(AssertionError):
        DataProto.from_dict({"x": torch.arange(5.0)}).chunk(2)


def test_verl_pads_the_callers_batch_in_place():
    """worker-groups.md block 8: after dispatch the caller's batch of 5 holds 6 rows."""
    odd = DataProto.from_dict({"x": torch.arange(5.0)})
    odd.meta_info["_verl_auto_padding"] = True
    _, kwargs = _split_args_kwargs_data_proto_with_auto_padding(2, odd)
    rows = odd.batch["x"].tolist()
    assert len(odd) == 6 and rows[-1] in rows[:5]  # one row repeated
    assert max(kwargs.values()) == 1  # the padding size the group removes from the output


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def test_verl_dead_worker_surfaces_as_actor_died_error(local_ray):
    """worker-groups.md block 9: veRL's group lets Ray's ActorDiedError through."""

    class Fragile(Worker):
        @register(Dispatch.ONE_TO_ALL)
        def step(self):
            if self.rank == 1:
                os._exit(1)
            return "ok"

    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
    group = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(Fragile)))
    with pytest.raises(ray.exceptions.ActorDiedError) as caught:
        group.step()
    assert "Fragile" not in type(caught.value).__name__


def test_verl_execute_rank_zero_gives_rank_zero_the_dispatched_arguments_whole(local_ray):
    """Not a difference: with Execute.RANK_ZERO, rank 0 gets what the dispatch function built,
    lists included, unsplit (``execute_rank_zero`` passes them on). reference_impl does the
    same: ``first_share`` in tests/test_single_controller.py."""

    class Shares(Worker):
        @register(
            {
                "dispatch_fn": lambda wg, x: (([x + 10 * i for i in range(wg.world_size)],), {}),
                "collect_fn": lambda wg, out: out,
            },
            execute_mode=Execute.RANK_ZERO,
        )
        def first_share(self, x):
            return (self.rank, x)

    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
    group = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(Shares)))
    assert group.first_share(1) == (0, [1, 11])
