"""Data parallelism inside a worker group: DDP vs FSDP2 on the same model and data.

Every rank holds a different slice of each global batch. With **DDP**
(``torch.nn.parallel.DistributedDataParallel``) every rank also holds the whole
model, its gradients and its optimiser state, and all-reduces the gradients
after each backward pass. With **FSDP2** (``torch.distributed.fsdp.fully_shard``)
every rank holds ``1/N`` of each of them, all-gathers a layer's parameters just
before using it, and reduce-scatters its gradients. Both compute the same
update, so the losses match.

veRL 0.9.1's FSDP engine builds the same thing on a device mesh named ``fsdp`` (or
``ddp`` x ``fsdp`` for hybrid sharding): ``verl/workers/engine/fsdp/utils.py``
(``create_device_mesh``), called by ``verl/workers/engine/fsdp/transformer_impl.py``
(``FSDPEngine._init_device_mesh``).
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.distributed as dist

from reference_impl.decorator import Dispatch, register
from reference_impl.parallelism.comm_bytes import CommBytes
from reference_impl.worker import Worker


def make_mlp(hidden: int, seed: int) -> torch.nn.Sequential:
    """A 3-layer MLP, identical on every rank (same seed)."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(hidden, 4 * hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(4 * hidden, 4 * hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(4 * hidden, hidden),
    )


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t  # FSDP2 parameters are DTensors


def _bytes(tensors) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in tensors)


class DataParallelWorker(Worker):
    """One data-parallel rank. ``train`` returns what this rank holds and sends."""

    @register(Dispatch.ONE_TO_ALL)
    def train(self, strategy: str, steps: int = 3, hidden: int = 128, batch: int = 32) -> dict:
        """Train ``steps`` Adam steps on a fixed global batch, split across the ranks.

        Args:
            strategy: ``"ddp"`` or ``"fsdp"``.
            hidden: the MLP's width; parameters are ``~ 24 * hidden**2`` float32 values.
            batch: global batch size (must divide by the world size).

        Returns:
            ``losses`` (global mean per step), and bytes held by this rank for
            ``params``, ``grads`` and ``optimizer`` state, and ``comm_per_step``
            (payload bytes this rank contributed to collectives per step).
        """
        self.init_process_group()  # idempotent: joins the group on the first call only
        model = make_mlp(hidden, seed=0)
        counter: Counter = Counter()
        if strategy == "ddp":
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model)
            # The same all-reduce DDP does by default, issued from Python so CommBytes sees it.
            model.register_comm_hook(None, allreduce_hook)
        elif strategy == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer)
            fully_shard(model)
        else:
            raise ValueError(f"strategy must be 'ddp' or 'fsdp', got {strategy!r}")

        generator = torch.Generator().manual_seed(1)
        x = torch.randn(batch, hidden, generator=generator)
        y = torch.randn(batch, hidden, generator=generator)
        mine = slice(
            self.rank * batch // self.world_size, (self.rank + 1) * batch // self.world_size
        )
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        losses = []
        for _ in range(steps):
            with CommBytes() as comm:
                loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
            counter.update(comm.bytes)
            global_loss = loss.detach().clone()
            dist.all_reduce(global_loss)
            losses.append(global_loss.item() / self.world_size)
        state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
        return {
            "losses": losses,
            "params": _bytes(model.parameters()),
            "grads": _bytes(p.grad for p in model.parameters()),
            "optimizer": _bytes(t for t in state if t.dim() > 0),  # Adam's exp_avg, exp_avg_sq
            "comm_per_step": {op: n // steps for op, n in sorted(counter.items())},
        }
