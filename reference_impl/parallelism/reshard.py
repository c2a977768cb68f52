"""Resharding for the hybrid engine: from FSDP's training layout to a tensor-parallel one.

Training (FSDP) shards every weight along its first dimension: rank r holds
rows ``r/N .. (r+1)/N`` of each matrix. Generation (vLLM, SGLang) wants
Megatron-style tensor-parallel shards: ``W1`` split by rows (column-parallel)
and ``W2`` split by columns (row-parallel). Switching between the two on the
same GPUs is what HybridFlow calls the 3D-HybridEngine's resharding.

Two ways, both measured here:

* **all-gather, then slice**: every rank gathers every full weight and keeps
  its slice (simple; what a "gather the full state dict, load it into the
  inference engine" path does). Each rank receives ``(N - 1) / N`` of the model.
* **move only what is needed**: ``W1``'s FSDP shard *is* its column-parallel
  shard, so it does not move at all; ``W2`` needs one all-to-all, in which each
  rank sends ``(N - 1) / N`` of its shard, i.e. ``(N - 1) / N**2`` of ``W2``.

veRL 0.9.1's colocated weight sync takes the first way, one tensor at a time: the FSDP
engine all-gathers each parameter (``verl/workers/engine/fsdp/transformer_impl.py``
(``FSDPEngine.get_per_tensor_param``)), ``verl/workers/engine_workers.py``
(``ActorRolloutRefWorker.update_weights``) hands the full tensors over CUDA IPC to the
vLLM or SGLang server processes on the same GPUs, and each of those loads the slice of
its own tensor-parallel rank (``verl/workers/rollout/``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from reference_impl.decorator import Dispatch, register
from reference_impl.parallelism.comm_bytes import CommBytes
from reference_impl.parallelism.tensor_parallel import full_weights
from reference_impl.worker import Worker


class ReshardWorker(Worker):
    @register(Dispatch.ONE_TO_ALL)
    def reshard(self, hidden: int = 64, ffn: int = 256) -> dict:
        """Build the TP shards of ``W1`` and ``W2`` from FSDP shards, both ways.

        Returns the payload bytes this rank sent for each way, the bytes of the
        whole block, and ``correct``: both ways give exactly the TP shards of
        the full weights.
        """
        self.init_process_group()  # idempotent: joins the group on the first call only
        n, r = self.world_size, self.rank
        w1, w2 = full_weights(hidden, ffn)  # only to check the result
        fsdp_w1 = w1.chunk(n, dim=0)[r].contiguous()  # what training holds
        fsdp_w2 = w2.chunk(n, dim=0)[r].contiguous()
        want_w1, want_w2 = w1.chunk(n, dim=0)[r], w2.chunk(n, dim=1)[r]

        with CommBytes() as naive:  # all-gather everything, then slice
            full1 = torch.empty_like(w1)
            full2 = torch.empty_like(w2)
            dist.all_gather_single(full1, fsdp_w1)
            dist.all_gather_single(full2, fsdp_w2)
            naive_w1, naive_w2 = full1.chunk(n, dim=0)[r], full2.chunk(n, dim=1)[r]

        with CommBytes() as targeted:  # W1 stays; W2 moves by one all-to-all
            tp_w1 = fsdp_w1
            blocks = torch.stack(fsdp_w2.chunk(n, dim=1))  # block j goes to rank j
            received = torch.empty_like(blocks)
            dist.all_to_all_single(received, blocks)
            tp_w2 = torch.cat(list(received), dim=0)  # rows of all ranks, my columns

        own_block = blocks[r].numel() * 4  # stays on this rank: not network traffic
        return {
            "correct": all(
                torch.equal(a, b)
                for a, b in (
                    (naive_w1, want_w1),
                    (naive_w2, want_w2),
                    (tp_w1, want_w1),
                    (tp_w2, want_w2),
                )
            ),
            "block_bytes": (w1.numel() + w2.numel()) * 4,
            "allgather_sent": naive.total,
            "targeted_sent": targeted.total - own_block,
        }
