"""Colocation: several roles in one process, sharing its GPU (veRL's hybrid layout).

``create_colocated_worker_cls({"actor": RayClassWithInitArgs(ActorWorker),
"critic": RayClassWithInitArgs(CriticWorker)})`` describes one process per
slot that builds *both* workers. A :class:`~reference_impl.worker_group.RayWorkerGroup`
over it starts those processes, and ``spawn(["actor", "critic"])`` returns one
group per role; their calls run in the same processes, one after the other.

This is the first of the two ways to share a bundle. The second is separate
processes that each take a fraction of it: two WorkerGroups on one pool with
``max_colocate_count >= 2``. veRL 0.9.1 uses the first for its training roles
(actor, reference, critic: ``verl/trainer/ppo/v1/trainer_base.py`` (``PPOTrainer._setup``)),
so that they share one CUDA context and one torch.distributed setup; its rollout
engines run in separate server processes on the same GPUs and receive the
weights over CUDA IPC each step (docs/verl/colocation.md).

Follows ``verl/single_controller/ray/base.py`` (``create_colocated_worker_cls``,
``RayWorkerGroup.spawn``) in veRL 0.9.1. veRL builds a
new class at run time with one prefixed method per role method; here the
process has a single generic entry point, :meth:`ColocatedWorker.call_role`,
and the spawned groups route their calls through it.
"""

from __future__ import annotations

from reference_impl.worker import Worker
from reference_impl.worker_group import RayClassWithInitArgs


class ColocatedWorker(Worker):
    """One process holding one Worker instance per role.

    Args:
        roles: ``{role: (worker_class, args, kwargs)}``; each worker is built
            in this process and reads the same rank variables.
    """

    def __init__(self, roles: dict[str, tuple[type, tuple, dict]]) -> None:
        super().__init__()
        self.roles = {role: cls(*args, **kwargs) for role, (cls, args, kwargs) in roles.items()}

    def call_role(self, role: str, method: str, *args, **kwargs):
        """Run ``method`` of the ``role`` worker living in this process."""
        return getattr(self.roles[role], method)(*args, **kwargs)


def create_colocated_worker_cls(
    class_dict: dict[str, RayClassWithInitArgs],
) -> RayClassWithInitArgs:
    """A worker description whose every process builds all the roles of ``class_dict``.

    Build a ``RayWorkerGroup`` from the result, then call its ``spawn(class_dict.keys())``.
    """
    roles = {role: (cia.user_class, cia.args, cia.kwargs) for role, cia in class_dict.items()}
    colocated = RayClassWithInitArgs(ColocatedWorker, roles)
    colocated.role_classes = {role: cia.user_class for role, cia in class_dict.items()}
    return colocated
