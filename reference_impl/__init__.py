"""reference_impl: the small, tested package that the handbook's pages run against.

It re-implements veRL's ``single_controller`` layer, one concept per module,
with veRL's public names, so that a snippet written against
``verl.single_controller`` ports by changing its imports:

==========================  ==============================================
module                      concept (veRL 0.9.1 file)
==========================  ==============================================
``resource_pool``           placement groups as a pool of slots
                            (``verl/single_controller/ray/base.py``)
``worker``                  the rank's process (``.../base/worker.py``)
``decorator``               the dispatch modes: for each, dispatch, collect
                            and whether it pads; ``register``, ``Dispatch``,
                            ``Execute`` (``.../base/decorator.py``)
``worker_group``            the group: start the ranks; a call is pad?,
                            dispatch, execute, collect, unpad?
                            (``.../ray/base.py``)
``colocation``              several roles in one process: the colocated
                            class, each role's group, ``spawn``
                            (``.../ray/base.py``)
``data_proto``              the batch (``verl/protocol.py``)
==========================  ==============================================

The handbook's chapter "veRL's single controller" (``docs/verl/``) runs it.
"""

import importlib

# Each public name and the module that defines it. A name is imported on first use
# (``reference_impl.DataProto``, ``from reference_impl import DataProto``), through the
# module ``__getattr__`` below (PEP 562), not when the package is imported. Why: a Ray
# worker process imports this package to unpickle its ``Worker`` subclass, and importing
# ``data_proto`` there imports torch, about 2 CPU-seconds per worker process (measured:
# 4 actors that subclass ``Worker`` cost 8 CPU-seconds more than 4 plain actors) that a
# worker which never receives a batch does not need.
WHERE = {
    "ColocatedWorker": "colocation",
    "create_colocated_worker_cls": "colocation",
    "BatchSplitError": "data_proto",
    "DataProto": "data_proto",
    "DataProtoFuture": "data_proto",
    "DataProtoItem": "data_proto",
    "pad_dataproto_to_divisor": "data_proto",
    "unpad_dataproto": "data_proto",
    "Dispatch": "decorator",
    "DispatchError": "decorator",
    "Execute": "decorator",
    "collect_all_to_all": "decorator",
    "collect_dp_compute": "decorator",
    "collect_dp_compute_data_proto": "decorator",
    "collect_rank_zero": "decorator",
    "dispatch_all_to_all": "decorator",
    "dispatch_dp_compute": "decorator",
    "dispatch_dp_compute_data_proto": "decorator",
    "dispatch_dp_compute_data_proto_with_func": "decorator",
    "dispatch_one_to_all": "decorator",
    "dispatch_rank_zero": "decorator",
    "register": "decorator",
    "PlacementTimeoutError": "resource_pool",
    "RayResourcePool": "resource_pool",
    "ResourcePoolError": "resource_pool",
    "merge_resource_pool": "resource_pool",
    "split_resource_pool": "resource_pool",
    "Worker": "worker",
    "RayClassWithInitArgs": "worker_group",
    "RayWorkerGroup": "worker_group",
    "WorkerDiedError": "worker_group",
    "WorkerGroupError": "worker_group",
}


def __getattr__(name: str):
    """Import a public name from its module on first use (see ``WHERE``)."""
    if name not in WHERE:
        raise AttributeError(f"module 'reference_impl' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"reference_impl.{WHERE[name]}"), name)
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *WHERE})


__version__ = "0.1.0"

__all__ = sorted(WHERE)
