"""Megatron-style tensor parallelism: a column-parallel then row-parallel linear pair.

An MLP block ``y = relu(x W1^T) W2^T`` is split across N ranks without
gathering any activation in between (Shoeybi et al., *Megatron-LM*, 2019, §3):

* ``W1`` (shape ``[ffn, hidden]``) is split by **rows**, i.e. by output
  feature (*column-parallel* in Megatron's terms): rank r computes its own
  ``ffn / N`` hidden units from the full input, with no communication;
* ``W2`` (``[hidden, ffn]``) is split by **columns**, i.e. by input feature
  (*row-parallel*): rank r multiplies its hidden units by its slice and gets a
  partial sum of the full output;
* one **all-reduce** adds the partial sums. That is the only communication.

Megatron-LM implements this in ``ColumnParallelLinear`` / ``RowParallelLinear``
(``megatron/core/tensor_parallel/layers.py``); veRL 0.9.1's Megatron engine uses
them (``verl/workers/engine/megatron/``), and vLLM shards its layers the same way for
generation.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from reference_impl.decorator import Dispatch, register
from reference_impl.parallelism.comm_bytes import CommBytes
from reference_impl.worker import Worker


def full_weights(hidden: int, ffn: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(ffn, hidden, generator=g) / hidden**0.5, torch.randn(
        hidden, ffn, generator=g
    ) / ffn**0.5


class TensorParallelWorker(Worker):
    @register(Dispatch.ONE_TO_ALL)
    def mlp(self, hidden: int = 64, ffn: int = 256, batch: int = 8) -> dict:
        """Run the block tensor-parallel and compare with the same block on one device.

        Returns ``max_abs_diff`` against the unsharded result, the bytes of
        weights this rank holds and of the whole block, and the all-reduce
        payload in bytes.
        """
        self.init_process_group()  # idempotent: joins the group on the first call only
        w1, w2 = full_weights(hidden, ffn)
        x = torch.randn(batch, hidden, generator=torch.Generator().manual_seed(1))
        reference = torch.relu(x @ w1.T) @ w2.T

        cols = slice(self.rank * ffn // self.world_size, (self.rank + 1) * ffn // self.world_size)
        w1_shard, w2_shard = w1[cols], w2[:, cols]  # column-parallel, row-parallel
        with CommBytes() as comm:
            h = torch.relu(x @ w1_shard.T)  # [batch, ffn / N]: no communication
            y = h @ w2_shard.T  # a partial sum of the output
            dist.all_reduce(y)  # the one collective of the block
        return {
            "max_abs_diff": (y - reference).abs().max().item(),
            "weight_bytes_this_rank": (w1_shard.numel() + w2_shard.numel()) * 4,
            "weight_bytes_full": (w1.numel() + w2.numel()) * 4,
            "allreduce_bytes": comm.total,
        }
