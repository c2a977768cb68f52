"""Colocation: several roles in one process, sharing its GPU (veRL's hybrid layout).

One concept, whole here: the class whose process builds every role
(:class:`ColocatedWorker`), its description (:func:`create_colocated_worker_cls`),
and the per-role view of a group of such processes (:func:`spawn`, also reached
as ``RayWorkerGroup.spawn``).

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
and each role's group (:class:`RoleWorkerGroup`) sends its calls through it.
"""

from __future__ import annotations

from reference_impl.worker import Worker
from reference_impl.worker_group import RayClassWithInitArgs, RayWorkerGroup


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


class ColocatedClassWithInitArgs(RayClassWithInitArgs):
    """A :class:`ColocatedWorker` to be started, and the roles its processes build.

    Args:
        class_dict: ``{role: RayClassWithInitArgs(WorkerClass, ...)}``, kept as
            ``class_dict`` so that :func:`spawn` can give each role its methods.
    """

    def __init__(self, class_dict: dict[str, RayClassWithInitArgs]) -> None:
        roles = {role: (cia.user_class, cia.args, cia.kwargs) for role, cia in class_dict.items()}
        super().__init__(ColocatedWorker, roles)
        self.class_dict = dict(class_dict)


class RoleWorkerGroup(RayWorkerGroup):
    """One role's group over a colocated group's processes: the same actors, in rank
    order, with the role's ``@register`` methods; each call runs in the role's worker.

    Args:
        colocated: the group of :class:`ColocatedWorker` processes.
        role: the role's name, a key of the colocated class's ``class_dict``.
    """

    def __init__(self, colocated: RayWorkerGroup, role: str) -> None:
        self.role = role  # first: a role method named `role` is then refused as a clash
        super().__init__(
            colocated.resource_pool,
            colocated.ray_cls_with_init.class_dict[role],
            name_prefix=colocated.name_prefix,
            worker_handles=colocated.workers,
            worker_names=colocated.worker_names,
        )

    def _execute_remote_single_worker(self, worker, method_name: str, *args, **kwargs):
        return worker.call_role.remote(self.role, method_name, *args, **kwargs)


def create_colocated_worker_cls(
    class_dict: dict[str, RayClassWithInitArgs],
) -> RayClassWithInitArgs:
    """A worker description whose every process builds all the roles of ``class_dict``.

    Build a ``RayWorkerGroup`` from the result, then call its ``spawn(class_dict.keys())``.
    """
    return ColocatedClassWithInitArgs(class_dict)


def spawn(group: RayWorkerGroup, prefix_set) -> dict[str, RayWorkerGroup]:
    """One group per role of a colocated group, all over the group's own processes.

    ``spawn(group, class_dict.keys())`` returns ``{role: group}``, and
    ``groups["actor"].update_policy(batch)`` runs the ``actor`` role's method inside
    the shared processes, one actor per bundle hosting every role, as in veRL.

    Raises:
        ValueError: ``group`` was not built from :func:`create_colocated_worker_cls`,
            or a role is not one of its roles.
    """
    described = group.ray_cls_with_init
    if not isinstance(described, ColocatedClassWithInitArgs):
        raise ValueError(
            "spawn() needs a group built from create_colocated_worker_cls(...), whose "
            f"processes host the roles; this group runs {type(described).__name__} "
            f"({getattr(described, 'user_class', None)!r})"
        )
    unknown = set(prefix_set) - set(described.class_dict)
    if unknown:
        raise ValueError(
            f"roles {sorted(unknown)} are not in this group's colocated class "
            f"(it has {sorted(described.class_dict)}); build it with create_colocated_worker_cls"
        )
    return {role: RoleWorkerGroup(group, role) for role in prefix_set}
