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

from reference_impl.colocation import ColocatedWorker, create_colocated_worker_cls
from reference_impl.data_proto import (
    BatchSplitError,
    DataProto,
    DataProtoFuture,
    DataProtoItem,
    pad_dataproto_to_divisor,
    unpad_dataproto,
)
from reference_impl.decorator import (
    Dispatch,
    DispatchError,
    Execute,
    collect_all_to_all,
    collect_dp_compute,
    collect_dp_compute_data_proto,
    collect_rank_zero,
    dispatch_all_to_all,
    dispatch_dp_compute,
    dispatch_dp_compute_data_proto,
    dispatch_dp_compute_data_proto_with_func,
    dispatch_one_to_all,
    dispatch_rank_zero,
    register,
)
from reference_impl.resource_pool import (
    PlacementTimeoutError,
    RayResourcePool,
    ResourcePoolError,
    merge_resource_pool,
    split_resource_pool,
)
from reference_impl.worker import Worker
from reference_impl.worker_group import (
    RayClassWithInitArgs,
    RayWorkerGroup,
    WorkerDiedError,
    WorkerGroupError,
)

__version__ = "0.1.0"

__all__ = [
    "BatchSplitError",
    "ColocatedWorker",
    "DataProto",
    "DataProtoFuture",
    "DataProtoItem",
    "Dispatch",
    "DispatchError",
    "Execute",
    "PlacementTimeoutError",
    "RayClassWithInitArgs",
    "RayResourcePool",
    "RayWorkerGroup",
    "ResourcePoolError",
    "Worker",
    "WorkerDiedError",
    "WorkerGroupError",
    "collect_all_to_all",
    "collect_dp_compute",
    "collect_dp_compute_data_proto",
    "collect_rank_zero",
    "create_colocated_worker_cls",
    "dispatch_all_to_all",
    "dispatch_dp_compute",
    "dispatch_dp_compute_data_proto",
    "dispatch_dp_compute_data_proto_with_func",
    "dispatch_one_to_all",
    "dispatch_rank_zero",
    "merge_resource_pool",
    "pad_dataproto_to_divisor",
    "register",
    "split_resource_pool",
    "unpad_dataproto",
]
