"""Stand-ins: the actors veRL creates, with veRL's own resource requests, but no model in them.

Every ``ActorClass.remote(...)`` made in a process where :func:`install` ran goes through
:func:`_remote`. It writes one JSON line per actor (class, name, Ray options, actor id, who made
it) to the file named by ``PLAN_RECORD``; when the class is veRL's (its module starts with
``verl.``), the actor Ray starts is a stand-in instead: a class with the same name and the same
method names, each of which returns None. Ray receives the options veRL computed (resources,
placement group and bundle, node affinity, name, runtime_env), so Ray, not this module, decides
where each actor lands and what stays pending. TransferQueue's actors are recorded and left real.

The stand-in classes are built at run time, so cloudpickle ships them by value: their processes
import neither torch nor veRL (about 60 MB each, against about 1 GB for a veRL worker).

Follows Ray 2.60.0's ``python/ray/actor.py`` (``ActorClass._remote``).
"""

from __future__ import annotations

import inspect
import json
import os
import threading

import ray
from ray.actor import ActorClass
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

_lock = threading.Lock()
_original_remote = ActorClass._remote
_standins: dict[str, type] = {}


def _noop(self, *args, **kwargs):
    return None


async def _async_noop(self, *args, **kwargs):
    return None


def standin_class(cls: type) -> type:
    """A class named like ``cls`` with each of its public methods as a no-op (async stays async)."""
    key = f"{cls.__module__}.{cls.__qualname__}"
    if key not in _standins:
        methods = {}
        for name, member in inspect.getmembers(cls, callable):
            if name.startswith("__") or isinstance(member, type):
                continue
            methods[name] = _async_noop if inspect.iscoroutinefunction(member) else _noop
        methods["__init__"] = _noop
        methods["__module__"] = "standin"  # not importable: cloudpickle ships the class by value
        _standins[key] = type(cls.__name__, (), methods)
    return _standins[key]


def _strategy(strategy) -> dict | str | None:
    """The scheduling strategy as JSON: placement group and bundle, or node and soft/hard."""
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        pg = strategy.placement_group
        return {
            "placement_group": pg.id.hex() if isinstance(pg, PlacementGroup) else None,
            "bundle": strategy.placement_group_bundle_index,
        }
    if isinstance(strategy, NodeAffinitySchedulingStrategy):
        return {"node_id": strategy.node_id, "soft": strategy.soft}
    return strategy


def _request(options: dict) -> dict:
    """What the actor asks Ray for, as given; keys left out take Ray's defaults."""
    request = {}
    for key in ("num_cpus", "num_gpus", "memory"):
        if options.get(key) is not None:
            request[key] = options[key]
    request.update(options.get("resources") or {})
    return request


def _remote(self, args=None, kwargs=None, **options):
    meta = self.__ray_metadata__
    cls = meta.modified_class
    module = getattr(cls, "__module__", "") or ""
    replace = os.environ.get("PLAN_STANDINS") == "1" and module.startswith("verl.")
    record = {
        "class": meta.class_name,
        "module": module,
        "name": options.get("name") or "",
        "namespace": options.get("namespace"),
        "request": _request(options),
        "strategy": _strategy(options.get("scheduling_strategy")),
        "stand_in": replace,
        "created_in": os.environ.get("PLAN_ROLE", "task runner"),
    }
    if replace:
        standin = ray.remote(standin_class(cls))
        handle = _original_remote(standin, None, None, **options)
    else:
        handle = _original_remote(self, args, kwargs, **options)
    record["actor_id"] = handle._actor_id.hex()
    path = os.environ.get("PLAN_RECORD")
    if path:
        with _lock, open(path, "a") as f:
            f.write(json.dumps(record, default=str) + "\n")
    return handle


def standin_actor(class_name: str, module: str, methods: list[str], **options):
    """Start a stand-in for a veRL class this process cannot import (vLLM's server, without vLLM).

    It is recorded as that class; ``options`` go to Ray as they would for the real one.
    """
    body = {name: _async_noop for name in methods}
    body.update(__init__=_noop, __module__="standin")
    cls = type(class_name, (), body)
    cls.__module__ = module  # recorded, and replaced by a stand-in of itself in _remote
    handle = ray.remote(cls).options(**options).remote()
    return handle


def install() -> None:
    """Route every actor creation of this process through :func:`_remote`."""
    ActorClass._remote = _remote
