"""Parallelism inside the workers: the part of an RLHF system that is *not* Ray.

Each module runs one kind of parallelism inside a ``Worker`` of a
``RayWorkerGroup`` on CPU with gloo, and reports what it measured, so the
chapter "Who does what" (``docs/parallelism/``) can show who moves which bytes:

* ``comm_bytes``: counting the bytes that torch.distributed collectives move;
* ``data_parallel``: DDP vs FSDP2 (``fully_shard``): memory per rank, bytes per step;
* ``tensor_parallel``: a Megatron-style column- then row-parallel MLP;
* ``pipeline``: two pipeline stages exchanging micro-batches with send/recv;
* ``reshard``: moving weights from FSDP's training layout to a tensor-parallel
  generation layout (the hybrid engine's problem), counting the bytes moved.

Ray's part in all of them is the same: start the processes, hand each its rank,
and carry the controller's calls. The tensors move over torch.distributed.
"""

from reference_impl.parallelism.comm_bytes import CommBytes
from reference_impl.parallelism.data_parallel import DataParallelWorker
from reference_impl.parallelism.pipeline import PipelineWorker
from reference_impl.parallelism.reshard import ReshardWorker
from reference_impl.parallelism.tensor_parallel import TensorParallelWorker

__all__ = [
    "CommBytes",
    "DataParallelWorker",
    "PipelineWorker",
    "ReshardWorker",
    "TensorParallelWorker",
]
