"""A pipeline-parallel toy: two stages, micro-batches, send and recv.

The model's layers are split into consecutive *stages*, one per rank. The
batch is cut into micro-batches; stage 0 computes one and sends its
activations to stage 1, then starts on the next, so both stages are busy at
once except at the start and end (the *bubble*; GPipe, Huang et al., 2019).
Only activations cross between ranks, never weights.

Megatron-LM schedules this (with the backward pass interleaved, "1F1B") in
``megatron/core/pipeline_parallel/schedules.py``; in veRL 0.9.1 it is the ``pp``
dimension of the Megatron engine (``verl/workers/engine/megatron/``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from reference_impl.decorator import Dispatch, register
from reference_impl.parallelism.comm_bytes import CommBytes
from reference_impl.parallelism.tensor_parallel import full_weights
from reference_impl.worker import Worker


class PipelineWorker(Worker):
    @register(Dispatch.ONE_TO_ALL)
    def forward(
        self, hidden: int = 64, ffn: int = 256, batch: int = 16, micro_batches: int = 4
    ) -> dict:
        """Stage 0 runs ``relu(x W1^T)``, stage 1 runs ``h W2^T``; needs ``world_size == 2``.

        Returns, for this stage, the bytes it sent and received, counted on the c10d
        operations themselves (:class:`~reference_impl.parallelism.comm_bytes.CommBytes`),
        and on stage 1 ``arrived``: for each activation received, in order, which
        micro-batch it turned out to be (found by comparing it with each micro-batch's
        first-layer output), and ``max_abs_diff`` against the unsplit model.

        Raises:
            ValueError: for a world size other than 2, or a batch that does not
                split into ``micro_batches``.
        """
        if self.world_size != 2:
            raise ValueError(
                f"this toy has exactly 2 stages; the group has {self.world_size} ranks"
            )
        if batch % micro_batches:
            raise ValueError(f"batch {batch} does not split into {micro_batches} micro-batches")
        self.init_process_group()  # idempotent: joins the group on the first call only
        w1, w2 = full_weights(hidden, ffn)
        x = torch.randn(batch, hidden, generator=torch.Generator().manual_seed(1))
        size = batch // micro_batches
        first_layer = [
            torch.relu(x[m * size : (m + 1) * size] @ w1.T) for m in range(micro_batches)
        ]
        received, outputs = [], []
        with CommBytes() as comm:
            for m in range(micro_batches):
                if self.rank == 0:
                    dist.send(first_layer[m], dst=1)  # only activations cross stages
                else:
                    activation = torch.empty(size, ffn)
                    dist.recv(activation, src=0)
                    received.append(activation)
                    outputs.append(activation @ w2.T)
        result = {
            "stage": self.rank,
            "sent_bytes": comm.total,
            "received_bytes": sum(comm.received.values()),
        }
        if self.rank == 1:
            # Which micro-batch each message was: measured on the data, not the loop counter.
            result["arrived"] = [
                next(m for m, sent in enumerate(first_layer) if torch.equal(sent, got))
                for got in received
            ]
            reference = torch.relu(x @ w1.T) @ w2.T
            result["max_abs_diff"] = (torch.cat(outputs) - reference).abs().max().item()
        return result
