"""Count the bytes that torch.distributed collectives move, from inside a rank.

``CommBytes`` is a ``TorchDispatchMode`` (the mechanism behind PyTorch's own
``CommDebugMode``) that sees every c10d operation issued from Python, such as
FSDP2's all-gathers and reduce-scatters, and adds up the payload each one sends
from this rank. DDP reduces gradients inside its C++ reducer, out of the
dispatcher's sight, unless it is given a Python communication hook; the
DDP demo registers torch's stock ``allreduce_hook`` so that its all-reduces
are counted too.

Payload bytes are what one rank contributes to a collective: the input of an
all-gather or reduce-scatter, the tensor of an all-reduce or send. A ring
algorithm's wire traffic is about ``2 (N - 1) / N`` times that for all-reduce,
``(N - 1) / N`` for the others (Thakur et al., 2005); the chapter says which
figure it prints.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# c10d op name -> index of the argument that holds this rank's payload.
PAYLOAD_ARGUMENT = {
    "_allgather_base_": 1,  # (output, input, ...)
    "allgather_": 1,  # (outputs, inputs, ...)
    "_reduce_scatter_base_": 1,  # (output, input, ...)
    "reduce_scatter_": 1,
    "allreduce_": 0,  # (tensors, ...)
    "alltoall_base_": 1,  # (output, input, ...)
    "broadcast_": 0,
    "send": 0,
}
# The same for what a rank receives: the tensor a point-to-point recv fills.
RECEIVED_ARGUMENT = {"recv_": 0}  # (tensors, src, ...)


def _nbytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, list | tuple):
        return sum(_nbytes(v) for v in value)
    return 0


class CommBytes(TorchDispatchMode):
    """In ``with CommBytes() as c:``, ``c.bytes[op]`` sums the payload each c10d op sent
    from this rank, ``c.received[op]`` what each point-to-point ``recv`` filled in."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes: Counter[str] = Counter()
        self.received: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d":
            name = func.__name__.split(".")[0]
            index = PAYLOAD_ARGUMENT.get(name)
            if index is not None:
                self.bytes[name] += _nbytes(args[index])
            if name in RECEIVED_ARGUMENT:
                self.received[name] += _nbytes(args[RECEIVED_ARGUMENT[name]])
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        """Bytes sent from this rank, all ops together."""
        return sum(self.bytes.values())
