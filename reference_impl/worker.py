"""`Worker`: the base class of every role's process (one rank of a WorkerGroup).

A ``Worker`` is an ordinary Python class. A ``RayWorkerGroup`` turns it into a
Ray actor class, starts one actor per slot of its resource pool, and tells
each one who it is through environment variables set in the actor's
``runtime_env``: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT``. This is the same contract as
``torchrun``, so :meth:`Worker.init_process_group` can start torch.distributed
from it: gloo on CPU, NCCL on GPU.

The master address and port are chosen once per group, by a small Ray task
pinned to the group's first bundle (:func:`get_master_addr_port`), as veRL
does since v0.6, and the same pair is given to every rank.

On a GPU pool, Ray sets ``CUDA_VISIBLE_DEVICES`` in each actor to the GPU(s)
of its bundle, so inside a worker the assigned GPU is always ``cuda:0``.
Colocated workers that share a bundle see the same GPU.

Follows ``verl/single_controller/base/worker.py`` (veRL commit b178a3cd).
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import ray


@ray.remote(num_cpus=0)
def get_master_addr_port() -> tuple[str, str]:
    """This node's IP and a free TCP port, for torch.distributed's rendezvous.

    Run as a task pinned to bundle 0 of a group's first placement group, so
    the address belongs to the node where rank 0 will run.
    """
    with socket.socket() as sock:
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    return ray.util.get_node_ip_address(), str(port)


class Worker:
    """Base class for the processes of a WorkerGroup.

    Attributes read from the environment the group sets (defaults describe a
    single process, so a Worker can also be built directly in a test):

    * ``rank`` / ``world_size``: this process's index in the group, and the
      group's size.
    * ``local_rank`` / ``local_world_size``: the same on this node.
    * ``master_addr`` / ``master_port``: where rank 0 listens for
      torch.distributed's rendezvous.
    """

    def __init__(self) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        self.master_addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        self.master_port = os.environ.get("MASTER_PORT", "")

    def init_process_group(self, backend: str | None = None, timeout_s: float = 120.0) -> str:
        """Join the group's torch.distributed process group; return the backend used.

        Args:
            backend: ``"gloo"`` or ``"nccl"``; default NCCL when this process
                sees a GPU, else gloo.
            timeout_s: how long collectives (and the rendezvous) may wait.

        Raises:
            RuntimeError: if no master port was set (the Worker was not started
                by a WorkerGroup and ``world_size > 1``).
        """
        import torch
        import torch.distributed as dist

        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(0)  # the GPU Ray assigned: see module docstring
        if not self.master_port:
            if self.world_size > 1:
                raise RuntimeError(
                    "MASTER_PORT is not set: start this Worker through a WorkerGroup"
                )
            self.master_port = ray.get(get_master_addr_port.remote())[1]
        dist.init_process_group(
            backend=backend,
            init_method=f"tcp://{self.master_addr}:{self.master_port}",
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        return backend

    def get_node_id(self) -> str:
        """The Ray node this worker runs on."""
        return ray.get_runtime_context().get_node_id()

    def get_cuda_visible_devices(self) -> str:
        """The ``CUDA_VISIBLE_DEVICES`` Ray set for this actor ("" on a CPU pool)."""
        return os.environ.get("CUDA_VISIBLE_DEVICES", "")
