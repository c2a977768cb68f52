"""`register`, `Dispatch` and `Execute`: how one call on a WorkerGroup becomes N calls.

One concept: the dispatch modes. Each mode is one row of
:data:`PREDEFINED_DISPATCH_MODES`: its dispatch function, its collect function,
and whether the group pads the call's batches first. ``@register`` records a
mode (and which ranks execute, and whether the call blocks) on a worker method.

A worker method decorated with ``@register(dispatch_mode, execute_mode, blocking)``
is bound onto the driver-side :class:`~reference_impl.worker_group.RayWorkerGroup`
as a plain method of the same name. Calling it on the group runs three steps
on the driver (the *single controller*):

1. **dispatch**: turn the caller's ``(args, kwargs)`` into one ``(args, kwargs)``
   per rank (broadcast, split a batch, pass through ...);
2. **execute**: send each rank its call through Ray (``execute_all`` or
   ``execute_rank_zero``), getting back ``ObjectRef`` futures;
3. **collect**: if blocking, ``ray.get`` the futures and merge the per-rank
   results (keep the list, concatenate a batch, take rank 0 ...).

Follows ``verl/single_controller/base/decorator.py`` (``register``, ``Dispatch``,
``Execute``) in veRL 0.9.1,
with two deliberate differences, documented in the veRL chapter:

* ``Dispatch.RANK_ZERO`` works: veRL declares it but has no dispatch entry for
  it, so ``@register(Dispatch.RANK_ZERO)`` raises ``KeyError`` when the group is
  built. Its execute mode is ``Execute.RANK_ZERO``; asking for ``Execute.ALL`` with it
  is an error.
* The registration is stored in a :class:`Registration` dataclass under the
  plain attribute name ``registration``, not a magic attribute name.

Dispatch functions take ``(worker_group, *args, **kwargs)`` and return
``(args, kwargs)``; the group then applies veRL's argument rule (if every
value is a list of length ``world_size``, rank ``i`` receives element ``i``;
otherwise all ranks receive the values as they are). With ``Execute.RANK_ZERO`` the rule
does not apply: rank 0 receives the dispatched arguments as they are, lists included, as
veRL's ``execute_rank_zero`` passes them. Collect functions take ``(worker_group,
outputs)``: the per-rank results in rank order, or, with ``Execute.RANK_ZERO``, rank 0's
result alone (as in veRL).
"""

from __future__ import annotations

import enum
import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FunctionType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Imported where used: data_proto imports torch, and worker processes import this
    # module (their registered methods' wrapper lives here) but may never see a batch.
    from reference_impl.data_proto import DataProto, DataProtoFuture


class Dispatch(enum.Enum):
    """How a group call's arguments are spread over the ranks (veRL's names)."""

    RANK_ZERO = "rank_zero"
    ONE_TO_ALL = "one_to_all"
    ALL_TO_ALL = "all_to_all"
    DP_COMPUTE = "dp_compute"
    DP_COMPUTE_PROTO = "dp_compute_proto"
    DP_COMPUTE_PROTO_WITH_FUNC = "dp_compute_proto_with_func"
    DP_COMPUTE_METRIC = "dp_compute_metric"


class Execute(enum.Enum):
    """Which ranks run the call."""

    ALL = "all"
    RANK_ZERO = "rank_zero"


class DispatchError(ValueError):
    """A group call's arguments do not fit its dispatch mode (e.g. a list of the wrong length)."""


def dispatch_one_to_all(worker_group, *args, **kwargs):
    """Every rank gets the same arguments."""
    n = worker_group.world_size
    return tuple([a] * n for a in args), {k: [v] * n for k, v in kwargs.items()}


def dispatch_all_to_all(worker_group, *args, **kwargs):
    """Arguments pass through unchanged; the group's list-splitting rule applies."""
    return args, kwargs


def dispatch_rank_zero(worker_group, *args, **kwargs):
    """Rank 0 gets the arguments as given (with ``Execute.RANK_ZERO``, which only it runs)."""
    return args, kwargs


def collect_all_to_all(worker_group, outputs: list) -> list:
    """The per-rank results, as a list in rank order."""
    return outputs


def collect_rank_zero(worker_group, output: Any) -> Any:
    """Rank 0's result, as it is (with ``Execute.RANK_ZERO`` collect gets one result)."""
    return output


def _check_per_rank(worker_group, args: tuple, kwargs: dict) -> None:
    n = worker_group.world_size
    named = [(f"positional argument {i}", a) for i, a in enumerate(args)]
    named += [(f"keyword argument {k!r}", v) for k, v in kwargs.items()]
    for name, value in named:
        if not isinstance(value, list | tuple) or len(value) != n:
            got = (
                f"a {type(value).__name__} of length {len(value)}"
                if isinstance(value, list | tuple)
                else f"a {type(value).__name__}"
            )
            raise DispatchError(
                f"Dispatch.DP_COMPUTE needs one value per rank: {name} must be a list of "
                f"length world_size={n}, got {got}. Pass a list with one entry per rank, "
                "or register the method with Dispatch.ONE_TO_ALL to broadcast a single value."
            )


def dispatch_dp_compute(worker_group, *args, **kwargs):
    """Each argument is already a list with one entry per rank; check and pass it on."""
    _check_per_rank(worker_group, args, kwargs)
    return args, kwargs


def collect_dp_compute(worker_group, outputs: list) -> list:
    if len(outputs) != worker_group.world_size:
        raise DispatchError(f"expected {worker_group.world_size} results, got {len(outputs)}")
    return outputs


def _chunk(name: str, value: Any, chunks: int) -> list:
    from reference_impl.data_proto import DataProto, DataProtoFuture

    if isinstance(value, DataProto | DataProtoFuture):
        return value.chunk(chunks)
    # veRL asserts the same (verl/single_controller/base/decorator.py,
    # `_split_args_kwargs_data_proto_with_auto_padding`): only batches are split.
    raise DispatchError(
        f"DP_COMPUTE_PROTO splits DataProto arguments only, but {name} is a "
        f"{type(value).__name__}. Put per-batch settings in data.meta_info, or register "
        "the method with Dispatch.ONE_TO_ALL or Dispatch.ALL_TO_ALL."
    )


def dispatch_dp_compute_data_proto(worker_group, *args, **kwargs):
    """Split every ``DataProto`` (or ``DataProtoFuture``) argument into world_size equal chunks.

    Any other argument raises :class:`DispatchError`, as veRL refuses it too. A batch
    that does not divide raises :class:`~reference_impl.data_proto.BatchSplitError`
    unless padding is on (``meta_info["_verl_auto_padding"]`` or ``VERL_AUTO_PADDING=1``,
    as in veRL): the modes that pad (``DP_COMPUTE_PROTO``, ``DP_COMPUTE_METRIC``)
    have the group pad the batches before this runs, and remove the padding from
    the result.
    """
    n = worker_group.world_size
    chunked_args = tuple(_chunk(f"argument {i}", a, n) for i, a in enumerate(args))
    return chunked_args, {k: _chunk(f"argument {k!r}", v, n) for k, v in kwargs.items()}


def dispatch_dp_compute_data_proto_with_func(worker_group, fn, *args, **kwargs):
    """Like ``DP_COMPUTE_PROTO``, but the first argument is a function sent to every rank."""
    if not isinstance(fn, FunctionType):
        raise DispatchError(
            "Dispatch.DP_COMPUTE_PROTO_WITH_FUNC expects a function as the first argument, "
            f"got {type(fn).__name__}"
        )
    split_args, split_kwargs = dispatch_dp_compute_data_proto(worker_group, *args, **kwargs)
    return ([fn] * worker_group.world_size, *split_args), split_kwargs


def collect_dp_compute_data_proto(worker_group, outputs: list) -> DataProto | DataProtoFuture:
    """Concatenate the per-rank batches (or their futures, when the call did not block)."""
    from reference_impl.data_proto import DataProto, DataProtoFuture

    outputs = collect_dp_compute(worker_group, outputs)
    if all(isinstance(o, DataProto) for o in outputs):
        return DataProto.concat(outputs)
    import ray  # only futures reach this branch

    if all(isinstance(o, ray.ObjectRef) for o in outputs):
        return DataProtoFuture.concat(outputs)
    kinds = sorted({type(o).__name__ for o in outputs})
    raise DispatchError(f"DP_COMPUTE_PROTO methods must return DataProto, got {kinds}")


@dataclass(frozen=True)
class DispatchModeFns:
    """One dispatch mode: how a call's arguments go out and its results come back.

    Attributes:
        dispatch_fn: ``(worker_group, *args, **kwargs) -> (args, kwargs)``.
        collect_fn: ``(worker_group, outputs) -> result``.
        pads: the group pads the call's ``DataProto`` arguments that ask for it
            (``is_padding_enabled``) to a multiple of ``world_size`` before
            ``dispatch_fn``, by one amount for all, and removes as many rows from
            a ``DataProto`` result.
    """

    dispatch_fn: Callable
    collect_fn: Callable
    pads: bool = False


# The modes that pad are those veRL's dispatch pads in
# (`dispatch_dp_compute_data_proto`, through `_split_args_kwargs_data_proto_with_auto_padding`);
# DP_COMPUTE_PROTO_WITH_FUNC splits without padding there too.
PREDEFINED_DISPATCH_MODES: dict[Dispatch, DispatchModeFns] = {
    Dispatch.RANK_ZERO: DispatchModeFns(dispatch_rank_zero, collect_rank_zero),
    Dispatch.ONE_TO_ALL: DispatchModeFns(dispatch_one_to_all, collect_all_to_all),
    Dispatch.ALL_TO_ALL: DispatchModeFns(dispatch_all_to_all, collect_all_to_all),
    Dispatch.DP_COMPUTE: DispatchModeFns(dispatch_dp_compute, collect_dp_compute),
    Dispatch.DP_COMPUTE_PROTO: DispatchModeFns(
        dispatch_dp_compute_data_proto, collect_dp_compute_data_proto, pads=True
    ),
    Dispatch.DP_COMPUTE_PROTO_WITH_FUNC: DispatchModeFns(
        dispatch_dp_compute_data_proto_with_func, collect_dp_compute_data_proto
    ),
    Dispatch.DP_COMPUTE_METRIC: DispatchModeFns(
        dispatch_dp_compute_data_proto, collect_dp_compute, pads=True
    ),
}


def dispatch_mode_fns(dispatch_mode: Dispatch | dict) -> DispatchModeFns:
    """A mode's row: predefined, or a custom dict of the two functions (which never pads).

    Raises:
        DispatchError: for an unknown mode or a dict without both keys.
    """
    if isinstance(dispatch_mode, Dispatch):
        return PREDEFINED_DISPATCH_MODES[dispatch_mode]
    if isinstance(dispatch_mode, dict):
        missing = {"dispatch_fn", "collect_fn"} - set(dispatch_mode)
        if missing:
            raise DispatchError(f"a custom dispatch mode needs the keys {sorted(missing)}")
        return DispatchModeFns(dispatch_mode["dispatch_fn"], dispatch_mode["collect_fn"])
    raise DispatchError(
        f"unknown dispatch mode {dispatch_mode!r}: use a member of Dispatch "
        f"({', '.join(m.name for m in Dispatch)}) or a dict with 'dispatch_fn' and 'collect_fn'"
    )


@dataclass(frozen=True)
class Registration:
    """What ``@register`` records on a worker method: what the group needs to call it
    (veRL records the same three, ``verl/single_controller/base/decorator.py`` (``register``))."""

    dispatch_mode: Dispatch | dict
    execute_mode: Execute
    blocking: bool


def _materialize(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    # A DataProtoFuture arrives on the worker unresolved: fetch it here, inside the
    # worker, so the data never passes through the driver. Unpickling a DataProtoFuture
    # argument imported its module; if that module is not loaded, no argument is one, and
    # the worker need not import it (and torch) to check.
    data_proto = sys.modules.get("reference_impl.data_proto")
    if data_proto is None:
        return args, kwargs
    DataProtoFuture = data_proto.DataProtoFuture

    def get(v):
        return v.get() if isinstance(v, DataProtoFuture) else v

    return tuple(get(a) for a in args), {k: get(v) for k, v in kwargs.items()}


def register(
    dispatch_mode: Dispatch | dict = Dispatch.ALL_TO_ALL,
    execute_mode: Execute | None = None,
    blocking: bool = True,
    materialize_futures: bool = True,
):
    """Mark a ``Worker`` method for binding onto its ``RayWorkerGroup``.

    Args:
        dispatch_mode: a :class:`Dispatch` member, or a custom mode
            ``{"dispatch_fn": f, "collect_fn": g}`` (see module docstring).
        execute_mode: :class:`Execute.ALL` or :class:`Execute.RANK_ZERO`. Left out
            (None), ``Execute.RANK_ZERO`` for ``Dispatch.RANK_ZERO`` and ``Execute.ALL``
            for every other mode, which is veRL's default.
        blocking: if False, the group method returns futures (``ObjectRef`` s,
            or a ``DataProtoFuture`` for ``DP_COMPUTE_PROTO``) instead of values;
            they can be passed straight into the next group call.
        materialize_futures: resolve ``DataProtoFuture`` arguments inside the
            worker before the method runs.

    An ``async def`` method stays a coroutine function, so Ray makes its actor an async
    actor and awaits each call (veRL: ``verl/single_controller/base/decorator.py``,
    ``register``).

    Raises:
        DispatchError: at decoration time, for an unknown dispatch mode, or for
            ``Dispatch.RANK_ZERO`` with ``Execute.ALL`` (its data is for rank 0 only).
        TypeError: for an execute mode that is not an :class:`Execute`.
    """
    dispatch_mode_fns(dispatch_mode)  # fail at decoration time, not at the first call
    rank_zero = dispatch_mode is Dispatch.RANK_ZERO
    if execute_mode is None:
        execute_mode = Execute.RANK_ZERO if rank_zero else Execute.ALL
    if not isinstance(execute_mode, Execute):
        raise TypeError(f"execute_mode must be an Execute member, got {execute_mode!r}")
    if rank_zero and execute_mode is not Execute.RANK_ZERO:
        raise DispatchError(
            "Dispatch.RANK_ZERO sends the arguments to rank 0 only, so only rank 0 can run "
            f"the method, not {execute_mode}: leave execute_mode out, or pass "
            "Execute.RANK_ZERO"
        )

    def decorator(method):
        # An ``async def`` method keeps a coroutine wrapper: Ray runs an actor with one as an
        # async actor and awaits the call, where a plain wrapper would hand back an
        # un-awaited coroutine (veRL's register makes the same choice).
        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def wrapper(self, *args, **kwargs):
                if materialize_futures:
                    args, kwargs = _materialize(args, kwargs)
                return await method(self, *args, **kwargs)

        else:

            @functools.wraps(method)
            def wrapper(self, *args, **kwargs):
                if materialize_futures:
                    args, kwargs = _materialize(args, kwargs)
                return method(self, *args, **kwargs)

        wrapper.registration = Registration(dispatch_mode, execute_mode, blocking)
        return wrapper

    return decorator
