"""Sharded and unsharded computations agree, and FSDP's per-rank memory is 1/N of DDP's.

Real torch.distributed over gloo, in a two-rank RayWorkerGroup.
"""

from __future__ import annotations

import pytest
import ray

from reference_impl import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from reference_impl.parallelism import (
    DataParallelWorker,
    PipelineWorker,
    ReshardWorker,
    TensorParallelWorker,
)

pytestmark = pytest.mark.reads_docs()


class AllDemos(DataParallelWorker, TensorParallelWorker, PipelineWorker, ReshardWorker):
    """Every demo in one worker class: the two processes start (and import torch) once."""


@pytest.fixture(scope="module")
def group():
    ray.init(num_cpus=4, include_dashboard=False)
    yield RayWorkerGroup(RayResourcePool([2], use_gpu=False), RayClassWithInitArgs(AllDemos))
    ray.shutdown()


def test_fsdp_matches_ddp_with_half_the_memory_per_rank(group):
    ddp = group.train("ddp", steps=2, hidden=64)
    fsdp = group.train("fsdp", steps=2, hidden=64)
    assert ddp[0]["losses"] == pytest.approx(fsdp[0]["losses"], rel=1e-6)
    assert ddp[0]["losses"] == ddp[1]["losses"]  # every rank sees the global loss
    for what in ("params", "grads", "optimizer"):
        assert sum(r[what] for r in fsdp) == pytest.approx(ddp[0][what], rel=0.01)
        assert fsdp[0][what] == pytest.approx(ddp[0][what] / 2, rel=0.01)
    assert ddp[0]["comm_per_step"]["allreduce_"] == ddp[0]["params"]
    assert set(fsdp[0]["comm_per_step"]) == {"_allgather_base_", "_reduce_scatter_base_"}


def test_unknown_strategy_is_refused(group):
    from reference_impl import WorkerGroupError

    with pytest.raises(WorkerGroupError, match="strategy must be 'ddp' or 'fsdp'"):
        group.train("zero3")


def test_tensor_parallel_block_matches_one_device(group):
    for result in group.mlp(hidden=32, ffn=64, batch=4):
        assert result["max_abs_diff"] < 1e-5
        assert result["weight_bytes_this_rank"] * 2 == result["weight_bytes_full"]


def test_pipeline_matches_one_device(group):
    first, last = group.forward(batch=8, micro_batches=4)
    assert last["max_abs_diff"] < 1e-5
    # Counted on the c10d ops: 4 micro-batches of 2 rows x 256 float32 one way, none back.
    assert first["sent_bytes"] == last["received_bytes"] == 4 * 2 * 256 * 4
    assert first["received_bytes"] == last["sent_bytes"] == 0
    assert last["arrived"] == [0, 1, 2, 3]


def test_targeted_reshard_moves_a_quarter_of_the_all_gather(group):
    for result in group.reshard(hidden=32, ffn=64):
        assert result["correct"]
        assert result["targeted_sent"] * 4 == result["allgather_sent"]
