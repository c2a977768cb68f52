"""`RayClassWithInitArgs` and `RayWorkerGroup`: the driver's handle on all ranks of a role.

One concept: the group. It starts one process per slot of a pool (or attaches
to processes that exist), and turns one call into one call per rank and back:
pad if asked, dispatch, execute, collect, unpad. What each dispatch mode does
lives in :mod:`reference_impl.decorator`; several roles in one process, in
:mod:`reference_impl.colocation` (``spawn`` here hands over to it, as veRL's
name for it is a group method).

``RayWorkerGroup(resource_pool, RayClassWithInitArgs(MyWorker, ...))`` starts
one Ray actor per slot of the pool, each an instance of ``MyWorker`` (a
:class:`~reference_impl.worker.Worker` subclass) with its rank in the
environment. Every method of ``MyWorker`` decorated with ``@register`` becomes
a plain method of the group: ``wg.generate(batch)`` dispatches, executes and
collects as described in :mod:`reference_impl.decorator`. Undecorated methods
are reachable with ``wg.execute_all_sync("name", ...)``.

veRL's argument rule for ``execute_all*``: if every positional and keyword
argument is a ``list`` of length ``world_size``, rank ``i`` gets element ``i``;
otherwise every rank gets the arguments as given (a ``tuple`` goes whole to every
rank). ``execute_all`` and ``execute_rank_zero`` are the asynchronous forms (they
return one ``ObjectRef`` per rank); ``*_sync`` waits.

Follows ``verl/single_controller/ray/base.py`` (``RayWorkerGroup``, ``RayClassWithInitArgs``,
``func_generator``) and ``verl/single_controller/base/worker_group.py`` (``WorkerGroup``) in
veRL 0.9.1.
Differences: a failure is reported as soon as any rank fails and names the
group, the rank and the method (the rank that died, when one did, not a peer
whose collective failed because of it); a DataProto that does not split is
padded only when asked, and batches padded together must have one length, as
veRL asserts (a clear error here); execution on rank zero passes rank 0's share
of the dispatched arguments (veRL passes the per-rank lists).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayTaskError
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from reference_impl.data_proto import (
    AUTO_PADDING_KEY,
    BatchSplitError,
    DataProto,
    pad_dataproto_to_divisor,
    unpad_dataproto,
)
from reference_impl.decorator import (
    DispatchError,
    DispatchModeFns,
    Execute,
    Registration,
    dispatch_mode_fns,
)
from reference_impl.resource_pool import RayResourcePool
from reference_impl.worker import free_port


@ray.remote(num_cpus=0)
def get_master_addr_port() -> tuple[str, str]:
    """This node's IP and a free TCP port, for torch.distributed's rendezvous.

    Run as a task pinned to bundle 0 of a group's first placement group, so
    the address belongs to the node where rank 0 will run, as veRL does since
    v0.6 (``verl/single_controller/ray/base.py`` (``get_master_addr_port``), which
    in 0.9.1 also takes a ``master_port_range``).
    """
    return ray.util.get_node_ip_address(), free_port("")


class WorkerGroupError(RuntimeError):
    """A call on a worker group failed on one of its ranks."""


class WorkerDiedError(WorkerGroupError):
    """A rank's process died before or during a call."""


class RayClassWithInitArgs:
    """A worker class and the arguments for its constructor, to be started later.

    Args:
        cls: a :class:`~reference_impl.worker.Worker` subclass, plain or already
            decorated with ``@ray.remote`` (both forms appear in veRL's code).
        *args: passed to ``cls.__init__`` in every actor.
        **kwargs: passed to ``cls.__init__`` in every actor.
    """

    def __init__(self, cls, *args, **kwargs) -> None:
        self.cls = cls
        self.args = args
        self.kwargs = kwargs
        self.options: dict[str, Any] = {}

    @property
    def user_class(self) -> type:
        """The Python class, unwrapped from ``@ray.remote`` if needed."""
        return getattr(self.cls, "__ray_actor_class__", self.cls)

    def update_options(self, options: dict[str, Any]) -> None:
        """Extra ``.options(...)`` for every actor, e.g. ``{"max_concurrency": 2}``."""
        self.options.update(options)


class GroupMethod:
    """A registered worker method bound to a group: a call runs dispatch, execute, collect.

    ``run`` is the group's ``(name, registration, args, kwargs) -> result``.
    """

    def __init__(self, run: Callable, name: str, registration: Registration, doc: str):
        self.run, self.name, self.registration = run, name, registration
        self.__doc__ = doc

    def __call__(self, *args, **kwargs):
        return self.run(self.name, self.registration, args, kwargs)

    def __repr__(self) -> str:
        mode = self.registration.dispatch_mode
        return f"<group method {self.name} dispatch={getattr(mode, 'name', 'custom')}>"


class RayWorkerGroup:
    """All ranks of one role: ``world_size`` Ray actors, one per slot of a resource pool.

    Args:
        resource_pool: where the actors go; one actor per slot. With
            ``worker_handles``, where they already are (nothing is started).
        ray_cls_with_init: the worker class and its constructor arguments; its
            ``@register`` methods become methods of the group.
        name_prefix: prefix of the actors' names (default: 6 random hex digits).
        worker_env: extra environment variables for every actor.
        bin_pack: ``STRICT_PACK`` placement groups (True, veRL's default) or ``PACK``.
        worker_handles: attach to these running actors, in rank order, instead of
            starting new ones (veRL's ``RayWorkerGroup.from_detached`` does the same).
        worker_names: their names; without ``worker_handles``, the actors are looked
            up by name (``ray.get_actor``), as veRL does for detached workers.

    Actor names read ``{name_prefix}{WorkerClass}_{node}:{local_rank}``.

    Raises:
        PlacementTimeoutError: if the pool cannot be placed.
        ValueError: if ``worker_env`` tries to override a rank variable, if there is
            neither a pool nor workers to attach to, or if the handles and names
            differ in number.
    """

    RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")

    def __init__(
        self,
        resource_pool: RayResourcePool | None = None,
        ray_cls_with_init: RayClassWithInitArgs | None = None,
        name_prefix: str | None = None,
        worker_env: dict[str, str] | None = None,
        bin_pack: bool = True,
        *,
        worker_handles: list[ray.actor.ActorHandle] | None = None,
        worker_names: list[str] | None = None,
    ) -> None:
        self.resource_pool = resource_pool
        self.ray_cls_with_init = ray_cls_with_init
        # Random by default, as in veRL: two groups on one pool must not share actor names.
        self.name_prefix = name_prefix if name_prefix is not None else uuid.uuid4().hex[:6]
        self._workers: list[ray.actor.ActorHandle] = []
        self._worker_names: list[str] = []
        if worker_handles is not None or worker_names is not None:
            self._attach(worker_handles, worker_names)
        elif resource_pool is not None and ray_cls_with_init is not None:
            self._start_workers(resource_pool, ray_cls_with_init, worker_env or {}, bin_pack)
        else:
            raise ValueError(
                "RayWorkerGroup needs a resource_pool and a ray_cls_with_init to start "
                "workers, or worker_handles (or worker_names) to attach to running ones"
            )
        if ray_cls_with_init is not None:
            self._bind_registered_methods(ray_cls_with_init.user_class)

    # --- starting the actors, or attaching to them ----------------------------

    def _attach(self, handles, names) -> None:
        if handles is None:
            handles = [ray.get_actor(name) for name in names]
        if names is None:
            names = [f"{self.name_prefix}rank_{rank}" for rank in range(len(handles))]
        if len(handles) != len(names):
            raise ValueError(
                f"worker_handles has {len(handles)} actors but worker_names has "
                f"{len(names)} names: give one name per actor, in rank order"
            )
        self._workers, self._worker_names = list(handles), list(names)

    def _start_workers(self, pool, cia: RayClassWithInitArgs, worker_env, bin_pack) -> None:
        clash = set(worker_env) & {*self.RANK_VARIABLES, "MASTER_ADDR", "MASTER_PORT"}
        if clash:
            raise ValueError(f"worker_env may not set {sorted(clash)}: the group sets them")
        slots = pool.slots(strategy="STRICT_PACK" if bin_pack else "PACK")
        first = slots[0]
        master_addr, master_port = ray.get(
            get_master_addr_port.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    first.placement_group, placement_group_bundle_index=first.bundle_index
                )
            ).remote()
        )
        # A pool reserves one placement group per node: ranks that share one share a node.
        by_node: dict = defaultdict(list)
        for rank, slot in enumerate(slots):
            by_node[slot.placement_group.id].append(rank)
        node_index = {pg_id: i for i, pg_id in enumerate(by_node)}

        actor_cls = cia.cls if hasattr(cia.cls, "__ray_actor_class__") else ray.remote(cia.cls)
        cls_name = cia.user_class.__name__
        for rank, slot in enumerate(slots):
            ranks_here = by_node[slot.placement_group.id]
            local_rank = ranks_here.index(rank)
            node = node_index[slot.placement_group.id]
            name = f"{self.name_prefix}{cls_name}_{node}:{local_rank}"
            env = {
                **worker_env,
                "RANK": str(rank),
                "WORLD_SIZE": str(len(slots)),
                "LOCAL_RANK": str(local_rank),
                "LOCAL_WORLD_SIZE": str(len(ranks_here)),
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": master_port,
            }
            options = {
                **pool.actor_resources(),
                "scheduling_strategy": PlacementGroupSchedulingStrategy(
                    slot.placement_group, placement_group_bundle_index=slot.bundle_index
                ),
                "runtime_env": {"env_vars": env},
                "name": name,
                **cia.options,
            }
            if pool.detached:
                options["lifetime"] = "detached"
            self._workers.append(actor_cls.options(**options).remote(*cia.args, **cia.kwargs))
            self._worker_names.append(name)

    def _bind_registered_methods(self, user_class: type) -> None:
        for name in dir(user_class):
            registration = getattr(getattr(user_class, name, None), "registration", None)
            if not isinstance(registration, Registration):
                continue
            if hasattr(self, name):
                raise ValueError(f"worker method {name!r} clashes with a RayWorkerGroup attribute")
            doc = getattr(user_class, name).__doc__ or ""
            setattr(self, name, GroupMethod(self._call, name, registration, doc))

    # --- the group's own API -------------------------------------------------

    @property
    def world_size(self) -> int:
        return len(self._workers)

    @property
    def workers(self) -> list[ray.actor.ActorHandle]:
        """The Ray actor handles, in rank order."""
        return self._workers

    @property
    def worker_names(self) -> list[str]:
        return self._worker_names

    def _execute_remote_single_worker(self, worker, method_name: str, *args, **kwargs):
        """Send one rank its call; return the ``ObjectRef``. veRL's name; a colocated
        role's group (:mod:`reference_impl.colocation`) routes it to the role's worker."""
        return getattr(worker, method_name).remote(*args, **kwargs)

    def _split_rule(self, args: tuple, kwargs: dict) -> bool:
        # veRL's rule tests `list` only: a tuple of world_size items goes to every rank whole.
        values = [*args, *kwargs.values()]
        return bool(values) and all(
            isinstance(v, list) and len(v) == self.world_size for v in values
        )

    def execute_all_async(self, method_name: str, *args, **kwargs) -> list[ray.ObjectRef]:
        """Call ``method_name`` on every rank; return one ``ObjectRef`` per rank.

        If every argument is a ``list`` of length ``world_size``, rank ``i`` gets
        element ``i`` of each; otherwise all ranks get the same arguments (a tuple
        is not split).
        """
        if self._split_rule(args, kwargs):
            return [
                self._execute_remote_single_worker(
                    worker,
                    method_name,
                    *(a[i] for a in args),
                    **{k: v[i] for k, v in kwargs.items()},
                )
                for i, worker in enumerate(self._workers)
            ]
        return [
            self._execute_remote_single_worker(worker, method_name, *args, **kwargs)
            for worker in self._workers
        ]

    def execute_all_sync(self, method_name: str, *args, **kwargs) -> list:
        """``execute_all_async`` and wait: a list of results in rank order."""
        return self.get(self.execute_all_async(method_name, *args, **kwargs), method_name)

    def execute_all(self, method_name: str, *args, **kwargs) -> list[ray.ObjectRef]:
        """The same as ``execute_all_async``: one ``ObjectRef`` per rank, as in veRL."""
        return self.execute_all_async(method_name, *args, **kwargs)

    def execute_rank_zero_async(self, method_name: str, *args, **kwargs) -> ray.ObjectRef:
        return self._execute_remote_single_worker(self._workers[0], method_name, *args, **kwargs)

    def execute_rank_zero_sync(self, method_name: str, *args, **kwargs) -> Any:
        return self.get([self.execute_rank_zero_async(method_name, *args, **kwargs)], method_name)[
            0
        ]

    def execute_rank_zero(self, method_name: str, *args, **kwargs) -> ray.ObjectRef:
        """The same as ``execute_rank_zero_async``: rank 0's ``ObjectRef``, as in veRL."""
        return self.execute_rank_zero_async(method_name, *args, **kwargs)

    def get(self, refs: list[ray.ObjectRef], method: str, timeout_s: float | None = None) -> list:
        """Wait for the per-rank results; report the first failure at once, naming the rank.

        Args:
            refs: one ``ObjectRef`` per rank, in rank order (or rank 0's alone).
            method: the worker method's name, for the message.
            timeout_s: seconds to wait for all ranks; ``None`` waits as long as they run.

        Returns:
            The results, in the order of ``refs``: veRL's ``ray.get(refs)``
            (``verl/single_controller/ray/base.py`` (``RayWorkerGroup.execute_all_sync``)).

        Raises:
            WorkerDiedError: a rank's process died. When one rank dies and its peers then
                fail because of it (gloo: "Connection closed by peer"), the rank named is
                the one that died, and the peers' errors follow in the message.
            WorkerGroupError: a rank raised (the original is the ``__cause__``), or some
                ranks did not answer within ``timeout_s`` (they are named).
        """
        try:
            # One get for all ranks, as veRL does. Ray ends a get of several refs at the
            # first one that failed, whichever rank it is, so a rank killed 2 s into a
            # 20 s call is reported at 2 s, not when rank 0 is done.
            return ray.get(refs, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError as err:
            _, pending = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
            late = [self._where(refs.index(ref)) for ref in pending]
            raise WorkerGroupError(
                f"{'; '.join(late)}: {method}() did not return within {timeout_s} s"
            ) from err
        except ray.exceptions.RayError as err:
            error, cause = self._failure(refs, method, err)
        raise error from cause

    # How long a failed call waits for the other ranks' outcomes before it names a rank.
    # A rank killed inside a collective makes its peers raise at once (gloo: "Connection
    # closed by peer"), and Ray may report that before it reports the death itself; the
    # rank to name is the one that died. The death usually follows within a fraction of a
    # second; the window is wide for a busy machine, and ends early once every rank answered.
    DEATH_GRACE_S = 5.0

    def _where(self, rank: int) -> str:
        return f"worker group {self.name_prefix!r}, rank {rank} ({self._worker_names[rank]})"

    def _failure(
        self, refs: list[ray.ObjectRef], method: str, first: ray.exceptions.RayError
    ) -> tuple[WorkerGroupError, ray.exceptions.RayError]:
        """The error to raise for a failed call, and its cause: a rank that died, if one did,
        else the lowest rank that raised."""
        failed, running = self._outcomes(refs)
        if not any(isinstance(e, ray.exceptions.RayActorError) for e in failed.values()):
            # Only errors raised by the methods so far: give a death that caused them the
            # grace window to arrive (the wait ends early when every rank has answered).
            ray.wait(refs, num_returns=len(refs), timeout=self.DEATH_GRACE_S, fetch_local=False)
            failed, running = self._outcomes(refs)
        if not failed:  # pragma: no cover - the get raised, so some ref failed
            return WorkerGroupError(
                f"worker group {self.name_prefix!r}: {method}() failed: {first}"
            ), first
        died = [rank for rank, e in failed.items() if isinstance(e, ray.exceptions.RayActorError)]
        rank = died[0] if died else min(failed)
        named = _one_line(failed[rank])
        others = [
            f"rank {r} ({'the same' if _one_line(e) == named else _one_line(e)})"
            for r, e in sorted(failed.items())
            if r != rank
        ]
        still = f" Still running: rank(s) {running}." if running else ""
        if died:
            message = (
                f"{self._where(rank)} died during {method}(). Its state is lost; read its log "
                "(the dashboard, or `ray logs`), then recreate the group and resume from your "
                "last checkpoint."
            )
            if others:
                message += (
                    f" Other ranks failed too, after it or because of it: {'; '.join(others)}."
                )
            error: WorkerGroupError = WorkerDiedError(message + still)
        else:
            cause = failed[rank].cause if isinstance(failed[rank], RayTaskError) else failed[rank]
            message = f"{self._where(rank)}: {method}() raised {type(cause).__name__}: {cause}"
            if others:
                message += f". Other ranks failed too: {'; '.join(others)}"
            error = WorkerGroupError(message + ("." + still if still else ""))
        return error, failed[rank]

    @staticmethod
    def _outcomes(refs: list[ray.ObjectRef]) -> tuple[dict[int, ray.exceptions.RayError], list]:
        """``{rank: error}`` for the refs that have failed by now, and the ranks still running."""
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        failed = {}
        for ref in ready:
            try:
                # Ready but maybe on another node: a result may take a moment to fetch.
                ray.get(ref, timeout=30)
            except ray.exceptions.GetTimeoutError:
                continue  # a large result still on its way is no failure
            except ray.exceptions.RayError as err:
                failed[refs.index(ref)] = err
        return failed, sorted(refs.index(ref) for ref in pending)

    # --- a registered method: dispatch -> execute -> collect -----------------

    def _call(self, name: str, registration: Registration, args: tuple, kwargs: dict):
        """One call of a registered method: pad? -> dispatch -> execute -> collect -> unpad?"""
        mode = dispatch_mode_fns(registration.dispatch_mode)
        args, kwargs, pad_size = self._pad(mode, registration, args, kwargs)
        if pad_size and not registration.blocking:
            raise BatchSplitError(
                f"{name}() is non-blocking, so the group cannot remove the padding from its "
                "result: pad the batch yourself (pad_dataproto_to_divisor), or call a "
                "blocking method"
            )
        dispatched = mode.dispatch_fn(self, *args, **kwargs)
        if not (
            isinstance(dispatched, (tuple, list))
            and len(dispatched) == 2
            and isinstance(dispatched[0], (tuple, list))
            and isinstance(dispatched[1], dict)
        ):
            raise DispatchError(
                f"the dispatch_fn of {name}() must return (args, kwargs), a tuple of the "
                f"per-rank positional arguments and a dict of keyword arguments, got "
                f"{type(dispatched).__name__}: {dispatched!r:.200}"
            )
        per_rank_args, per_rank_kwargs = dispatched
        if registration.execute_mode is Execute.RANK_ZERO:
            # Rank 0 gets the dispatched arguments as they are, unsplit, as in veRL.
            ref = self.execute_rank_zero_async(name, *per_rank_args, **per_rank_kwargs)
            # Collect gets rank 0's result alone, as in veRL.
            output = ref if not registration.blocking else self.get([ref], name)[0]
        else:
            refs = self.execute_all_async(name, *per_rank_args, **per_rank_kwargs)
            output = refs if not registration.blocking else self.get(refs, name)
        output = mode.collect_fn(self, output)
        if pad_size and isinstance(output, DataProto):
            output = unpad_dataproto(output, pad_size)
        return output

    def _pad(self, mode: DispatchModeFns, registration: Registration, args: tuple, kwargs: dict):
        """Pad the call's batches to a multiple of ``world_size``, by one amount for all of them.

        Only for a mode that pads (``mode.pads``), and only the ``DataProto`` arguments
        that ask for it (``is_padding_enabled``). As in veRL
        (``verl/single_controller/base/decorator.py``
        (``_split_args_kwargs_data_proto_with_auto_padding``)), the batches padded
        together must have one length, and a batch that does not ask must split as it is.

        Returns:
            ``(args, kwargs, pad_size)``: the padded arguments (new objects; the
            caller's batches are left as they were) and the rows added to each.

        Raises:
            BatchSplitError: a batch that does not ask for padding does not split into
                ``world_size`` equal parts, or the batches that ask have different lengths.
        """
        if not mode.pads:
            return args, kwargs, 0
        named = [(f"argument {i}", a) for i, a in enumerate(args)]
        named += [(f"argument {k!r}", v) for k, v in kwargs.items()]
        batches = [(label, v) for label, v in named if isinstance(v, DataProto)]
        mode_name = registration.dispatch_mode.name
        for _, batch in batches:
            if not batch.is_padding_enabled() and len(batch) % self.world_size:
                raise BatchSplitError(
                    f"{mode_name}: a batch of {len(batch)} does not split into "
                    f"world_size={self.world_size} equal parts. Pad it with "
                    f"pad_dataproto_to_divisor(data, {self.world_size}), or set "
                    f"data.meta_info[{AUTO_PADDING_KEY!r}] = True so that the group pads "
                    "and unpads for you."
                )
        lengths = {label: len(b) for label, b in batches if b.is_padding_enabled()}
        if len(set(lengths.values())) > 1:
            rows = ", ".join(f"{label} has {n} rows" for label, n in lengths.items())
            raise BatchSplitError(
                f"{mode_name}: the batches that the group pads in one call must have one "
                f"length, but {rows}. The group pads them by one amount and removes that "
                "many rows from the result; give them the same rows, or pad them yourself "
                "(pad_dataproto_to_divisor) and unpad the result."
            )
        pad_size = -next(iter(lengths.values()), 0) % self.world_size
        if not pad_size:
            return args, kwargs, 0

        def pad(value):
            if isinstance(value, DataProto) and value.is_padding_enabled():
                return pad_dataproto_to_divisor(value, self.world_size)[0]
            return value

        return tuple(pad(a) for a in args), {k: pad(v) for k, v in kwargs.items()}, pad_size

    # --- colocation ----------------------------------------------------------

    def spawn(self, prefix_set) -> dict[str, RayWorkerGroup]:
        """One group per role of a colocated worker: see :func:`reference_impl.colocation.spawn`."""
        from reference_impl.colocation import spawn  # colocation builds on this module

        return spawn(self, prefix_set)


def _one_line(err: ray.exceptions.RayError) -> str:
    """``Type: message`` of a rank's error on one line: the method's own exception for a
    ``RayTaskError``, Ray's error otherwise (its first line; Ray's run on for a screen)."""
    cause = err.cause if isinstance(err, RayTaskError) else err
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0] if text else ''}"
