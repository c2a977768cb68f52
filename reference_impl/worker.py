"""`Worker`: the base class of every role's process (one rank of a WorkerGroup).

A ``Worker`` is an ordinary Python class. A ``RayWorkerGroup`` turns it into a
Ray actor class, starts one actor per slot of its resource pool, and tells
each one who it is through environment variables set in the actor's
``runtime_env``. Here they are ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``, the contract of
``torchrun``, with ``LOCAL_RANK`` the rank's index on its node. A worker can
therefore start torch.distributed with a plain
``torch.distributed.init_process_group("gloo")`` (``env://``), or with
:meth:`Worker.init_process_group`, which picks gloo on CPU and NCCL on GPU.

veRL 0.9.1 sets a different set. Its group
(``verl/single_controller/ray/base.py`` (``RayWorkerGroup._create_worker``))
gives ``WORLD_SIZE``, ``RANK``, ``WG_PREFIX``, ``WG_BACKEND``,
``RAY_LOCAL_WORLD_SIZE`` (processes on the node), ``MASTER_ADDR`` and
``MASTER_PORT``; its worker (``verl/single_controller/base/worker.py``
(``Worker.__init__``)) reads ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` with
defaults "0" and "1" and writes them back into the environment. Every veRL
rank thus sees ``LOCAL_RANK=0``, which is right on a GPU pool because Ray
narrows ``CUDA_VISIBLE_DEVICES`` to the rank's own GPU; only when Ray is told
not to (``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES``) does veRL set
``LOCAL_RANK`` to the GPU id Ray assigned. veRL's workers start torch.distributed
themselves: ``verl/workers/engine_workers.py`` (``TrainingWorker.__init__``)
calls ``verl/utils/distributed.py`` (``initialize_global_process_group_ray``).

The master address and port are chosen once per group, by the group
(:mod:`reference_impl.worker_group`), and the same pair is given to every rank;
:meth:`Worker.get_master_addr_port` returns it, as veRL's does. A Worker built
directly, outside a group (world size 1), picks a free port on its own
address when it first joins a process group.

:meth:`Worker.init_process_group` may be called any number of times, from any
role living in the process: the first call joins the process group, later
calls return its backend. torch.distributed allows one default group per
process, and colocated roles (:mod:`reference_impl.colocation`) share it.

On a GPU pool, Ray sets ``CUDA_VISIBLE_DEVICES`` in each actor to the GPU(s)
of its bundle, so inside a worker the assigned GPU is always ``cuda:0``.
Colocated workers that share a bundle see the same GPU.

Follows ``verl/single_controller/base/worker.py`` (``Worker``) of veRL 0.9.1.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta


def free_port(host: str) -> str:
    """A TCP port that is free on ``host`` now (bound to port 0 and released), as a string.

    Follows ``verl/single_controller/base/worker.py`` (``WorkerHelper._get_free_port``).
    """
    with socket.socket() as sock:
        sock.bind((host, 0))
        return str(sock.getsockname()[1])


class Worker:
    """Base class for the processes of a WorkerGroup.

    Attributes read from the environment the group sets (defaults describe a
    single process, so a Worker can also be built directly in a test):

    * ``rank`` / ``world_size``: this process's index in the group, and the
      group's size.
    * ``local_rank`` / ``local_world_size``: the same on this node (ours:
      veRL's ``Worker`` keeps them private, and they are 0 and 1 there).
    * ``master_addr`` / ``master_port``: where rank 0 listens for
      torch.distributed's rendezvous; :meth:`get_master_addr_port` returns
      both, as veRL's ``Worker.get_master_addr_port`` does.
    """

    def __init__(self) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        self.master_addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        self.master_port = os.environ.get("MASTER_PORT", "")

    def init_process_group(self, backend: str | None = None, timeout_s: float = 120.0) -> str:
        """Join the group's torch.distributed process group, once per process; return its backend.

        The first call in a process joins; every later call (from this role or from a
        role colocated in the same process) returns the backend in use and changes
        nothing, so a method may call it on every run. Before joining, the rendezvous
        address, port, rank and world size are written to ``MASTER_ADDR``,
        ``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE``, where veRL's Worker keeps them
        (``verl/single_controller/base/worker.py`` (``Worker._configure_with_store``)),
        so ``env://`` code in the same process joins the same group.

        Args:
            backend: ``"gloo"`` or ``"nccl"``; default NCCL when this process
                sees a GPU, else gloo.
            timeout_s: seconds that the rendezvous and each collective may wait.

        Returns:
            The backend of the process group, e.g. ``"gloo"``.

        Raises:
            RuntimeError: no master port was set and ``world_size > 1`` (the Worker
                was not started by a WorkerGroup, which sets it for every rank).
            ValueError: the process already joined a group with another backend.
        """
        import torch
        import torch.distributed as dist

        if dist.is_initialized():
            current = dist.get_backend()
            if backend is not None and backend != current:
                raise ValueError(
                    f"this process already joined a {current!r} process group (rank "
                    f"{dist.get_rank()} of {dist.get_world_size()}), so it cannot join a "
                    f"{backend!r} one: call init_process_group() without a backend, or "
                    f"with backend={current!r}"
                )
            return current
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(0)  # the GPU Ray assigned: see module docstring
        if not self.master_port:
            if self.world_size > 1:
                raise RuntimeError(
                    "MASTER_PORT is not set: start this Worker through a WorkerGroup"
                )
            self.master_port = free_port(self.master_addr)  # alone: any free port will do
        os.environ.update(
            MASTER_ADDR=self.master_addr,
            MASTER_PORT=self.master_port,
            RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size),
        )
        dist.init_process_group(
            backend=backend,
            init_method=f"tcp://{self.master_addr}:{self.master_port}",
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        return backend

    def get_master_addr_port(self) -> tuple[str, str]:
        """The group's rendezvous address and port, ``(MASTER_ADDR, MASTER_PORT)``, as in veRL."""
        return self.master_addr, self.master_port
