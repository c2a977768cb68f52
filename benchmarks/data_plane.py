"""Payload through the controller vs keys through TransferQueue: bytes and wall time, one run.

    python benchmarks/data_plane.py [--quick] [--nodes 1|2|both]     (or: nox -s bench)

One dataflow edge of an RL step, done two ways on a local Ray cluster (the long
version of the measurement on docs/verl/transferqueue.md):

* a ``Rollout`` actor holds a batch ``x``: float32 of shape ``(ROWS, cols)``,
  ``ROWS`` = 256 sequences, ``cols`` = payload bytes / (4 * 256);
* a 2-rank ``RayWorkerGroup`` of ``Scorer`` workers computes ``y = x + 1`` (float32, same
  shape) on its half of the rows;
* (a) **payload through the controller**, as veRL's legacy trainer did: the controller
  ``ray.get``-s the batch as a ``DataProto`` (``reference_impl``'s, whose tensors Ray
  pickles out of band), the group splits it (``Dispatch.DP_COMPUTE_PROTO``), each rank
  gets its chunk from the object store and returns ``y`` the same way;
* (b) **keys through TransferQueue 0.1.11**, as veRL 0.9.1's default trainer does
  (``verl/trainer/ppo/v1/trainer_base.py``): the rollout writes ``x`` into TransferQueue's
  storage units (``tq.kv_batch_put``) and hands the controller a ``KVBatchMeta`` (keys,
  partition, field names); the group splits the keys; each rank reads its rows with
  ``tq.kv_batch_get`` and writes ``y`` back with ``tq.kv_batch_put``, as
  ``verl/utils/transferqueue_utils.py`` (``tqbridge``) does around a worker method.

Printed per payload size:

* controller bytes: what the controller process serialises or deserialises for the
  step, measured as the protocol-5 pickle of each object it receives or sends (in-band
  bytes plus out-of-band buffers: what Ray writes into the object store for it), namely
  the batch or ``KVBatchMeta`` from the rollout, the two chunks it sends the ranks and
  the two results it gets back;
* the ratio of median wall times (b)/(a), the two paths alternating repeat after repeat.

Every case also checks that the values arrived: ``y == x + 1`` exactly, read back from
the controller's DataProto in (a) and from TransferQueue in (b).

``--nodes 2`` runs the same on a local two-node ``ray.cluster_utils.Cluster``: the
controller and TransferQueue's controller plus one storage unit on the head node; the
rollout, both ranks and the other storage unit on the second node, so every byte in (a)
crosses between the nodes' object stores twice, as it does when the trainer's controller
runs on another machine than the workers.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import statistics
import tempfile
import time

import ray
import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta

from reference_impl import (
    DataProto,
    Dispatch,
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    Worker,
    register,
)

ROWS = 256
PARTITION = "train"


def split_keys(worker_group, meta: KVBatchMeta):
    """Dispatch: rank i gets the i-th of world_size equal slices of the keys."""
    return (meta.chunk(worker_group.world_size),), {}


def concat_keys(worker_group, outputs: list[KVBatchMeta]) -> KVBatchMeta:
    """Collect: the ranks' KVBatchMeta, concatenated in rank order."""
    return KVBatchMeta.concat(outputs)


class Scorer(Worker):
    """One rank: ``y = x + 1`` on its rows, from a DataProto or from TransferQueue keys."""

    def __init__(self) -> None:
        super().__init__()
        tq.init()  # joins the running TransferQueue: finds its controller actor by name

    @register(Dispatch.DP_COMPUTE_PROTO)
    def score(self, data: DataProto) -> DataProto:
        """(a) ``data.batch["x"]``: float32 (rows, cols) -> DataProto with ``y``, same shape."""
        return DataProto.from_dict({"y": data.batch["x"] + 1})

    @register({"dispatch_fn": split_keys, "collect_fn": concat_keys})
    def score_keys(self, meta: KVBatchMeta) -> KVBatchMeta:
        """(b) Read ``x`` for ``meta.keys`` over ZMQ, write ``y`` back; return the keys.

        ``x`` and ``y``: float32 (len(meta), cols). What ``tqbridge`` in
        ``verl/utils/transferqueue_utils.py`` does around a veRL worker method, by hand.
        """
        got = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["x"])
        # TransferQueue stores rows one by one and returns a field as a nested (jagged)
        # tensor; veRL pads it back the same way (TensorDict.to_padded_tensor).
        x = got.to_padded_tensor()["x"]
        y = TensorDict({"y": x + 1}, batch_size=[len(meta)])
        return tq.kv_batch_put(keys=meta.keys, partition_id=meta.partition_id, fields=y)

    @register(Dispatch.ONE_TO_ALL)
    def node_id(self) -> str:
        """This rank's Ray node id (hex), to check where the group landed."""
        return ray.get_runtime_context().get_node_id()


@ray.remote(num_cpus=1)
class Rollout:
    """Stands for veRL's rollout side: the process where a batch is produced."""

    def __init__(self) -> None:
        tq.init()
        self.x = torch.zeros(ROWS, 1)

    def generate(self, nbytes: int, seed: int) -> tuple[int, int]:
        """Make ``x``: float32 (ROWS, nbytes // (4 * ROWS)), from ``seed``; return its shape."""
        self.x = expected_x(nbytes, seed)
        return tuple(self.x.shape)

    def batch(self) -> DataProto:
        """(a) The batch itself, returned through Ray's object store."""
        return DataProto.from_dict({"x": self.x})

    def batch_keys(self, step: int) -> KVBatchMeta:
        """(b) Write the batch into TransferQueue; return only its keys and field names.

        As veRL's ``AgentLoopWorkerTQ`` (``verl/trainer/ppo/v1/agent_loop_tq.py``) writes
        finished trajectories, with ``kv_batch_put`` (TransferQueue's
        ``transfer_queue/interface.py``).
        """
        keys = [f"step{step:05d}/row{i:05d}" for i in range(ROWS)]  # fixed width: stable sizes
        fields = TensorDict({"x": self.x}, batch_size=[ROWS])
        return tq.kv_batch_put(keys=keys, partition_id=PARTITION, fields=fields)

    def node_id(self) -> str:
        """This actor's Ray node id (hex)."""
        return ray.get_runtime_context().get_node_id()


def expected_x(nbytes: int, seed: int) -> torch.Tensor:
    """The batch a Rollout makes for (nbytes, seed): float32 (ROWS, max(1, nbytes // 1024))."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(ROWS, max(1, nbytes // (4 * ROWS)), generator=gen)


def pickled_bytes(obj) -> int:
    """Bytes of ``obj`` pickled with protocol 5: in-band plus out-of-band buffers."""
    buffers: list[pickle.PickleBuffer] = []
    inband = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return len(inband) + sum(b.raw().nbytes for b in buffers)


def controller_bytes(received, sent_chunks, result) -> int:
    """What the controller unpickles (received, the ranks' results) and pickles (chunks)."""
    return (
        pickled_bytes(received)
        + sum(pickled_bytes(c) for c in sent_chunks)
        + sum(pickled_bytes(c) for c in result.chunk(2))
    )


class Setup:
    """The actors of one measurement: TransferQueue, a rollout, a 2-rank worker group."""

    def __init__(self, rollout_options: dict | None = None) -> None:
        tq.init()  # controller actor + 2 storage units (TransferQueue's default config)
        self.pool = RayResourcePool([2], use_gpu=False)
        self.wg = RayWorkerGroup(self.pool, RayClassWithInitArgs(Scorer))
        self.rollout = Rollout.options(**(rollout_options or {})).remote()
        self.step = 0

    def payload_step(self) -> tuple[DataProto, DataProto]:
        """(a): batch -> controller -> ranks -> controller. Returns (batch, result)."""
        batch = ray.get(self.rollout.batch.remote())
        return batch, self.wg.score(batch)

    def keys_step(self) -> tuple[KVBatchMeta, KVBatchMeta]:
        """(b): keys -> controller -> ranks -> controller; the data moves over ZMQ."""
        self.step += 1
        meta = ray.get(self.rollout.batch_keys.remote(self.step))
        return meta, self.wg.score_keys(meta)

    def close(self) -> None:
        ray.kill(self.rollout)
        self.pool.release()
        tq.close()


def measure(setup: Setup, nbytes: int, repeats: int, seed: int = 0) -> dict[str, float]:
    """One payload size: controller bytes of (a) and (b), wall-time ratio, exactness."""
    ray.get(setup.rollout.generate.remote(nbytes, seed))
    x = expected_x(nbytes, seed)
    times_a, times_b = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        batch, out = setup.payload_step()
        times_a.append(time.perf_counter() - start)
        exact_a = torch.equal(out.batch["y"], x + 1)
        bytes_a = controller_bytes(batch, batch.chunk(2), out)
        del batch, out
        gc.collect()

        start = time.perf_counter()
        meta, out_meta = setup.keys_step()
        times_b.append(time.perf_counter() - start)
        bytes_b = controller_bytes(meta, meta.chunk(2), out_meta)
        if nbytes <= 64 << 20:  # reading back 512 MiB into the controller is not the point
            back = tq.kv_batch_get(keys=out_meta.keys, partition_id=PARTITION)
            back = back.to_padded_tensor()
            exact_b = torch.equal(back["x"], x) and torch.equal(back["y"], x + 1)
            del back
        else:
            exact_b = None
        tq.kv_clear(keys=out_meta.keys, partition_id=PARTITION)
        del meta, out_meta
        gc.collect()
        assert exact_a and exact_b is not False, "values did not round-trip"
    return {
        "payload": x.numel() * 4,
        "bytes_a": bytes_a,
        "bytes_b": bytes_b,
        "time_ratio": statistics.median(times_b) / statistics.median(times_a),
        "exact": exact_b,
    }


def run(sizes: list[tuple[int, int]], nodes: int) -> list[dict[str, float]]:
    """Start Ray (1 node, or a local 2-node Cluster), measure every (nbytes, repeats)."""
    cluster = None
    if nodes == 1:
        ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
        rollout_options = {}
    else:
        from ray.cluster_utils import Cluster

        # A private temp dir, so no other ray.init() on this machine finds this cluster.
        os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="dp")
        # Head: 2 CPUs, taken by TransferQueue's controller and storage unit #0 (TQ places
        # units round robin over the alive nodes), so the worker group lands on node 2.
        cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False}
        )
        cluster.add_node(num_cpus=6, resources={"node2": 1})
        ray.init(address=cluster.address, log_to_driver=False)
        rollout_options = {"resources": {"node2": 0.01}}
    rows = []
    try:
        setup = Setup(rollout_options)
        if nodes == 2:  # the data's producer and consumers are on the other node
            here = ray.get_runtime_context().get_node_id()
            away = [*setup.wg.node_id(), ray.get(setup.rollout.node_id.remote())]
            assert here not in away, "the rollout or a rank landed on the controller's node"
        measure(setup, 1 << 10, 1)  # warm up both paths (imports, ZMQ sockets)
        for nbytes, repeats in sizes:
            rows.append({"nodes": nodes, **measure(setup, nbytes, repeats)})
            gc.collect()
        setup.close()
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
            del os.environ["RAY_TMPDIR"]
    return rows


def human(nbytes: float) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes:.0f} B"


FULL = [
    (1 << 10, 30),
    (1 << 20, 20),
    (16 << 20, 10),
    (64 << 20, 5),
    (256 << 20, 3),
    (512 << 20, 3),
]
QUICK = [(1 << 10, 3), (1 << 20, 2)]

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 KiB and 1 MiB, few repeats")
    parser.add_argument("--nodes", choices=["1", "2", "both"], default="both")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    results = []
    for nodes in (1, 2) if args.nodes == "both" else (int(args.nodes),):
        results += run(sizes, nodes)
    print(f"{'nodes':<6}{'payload':>10}{'controller (a)':>16}{'controller (b)':>16}  time (b)/(a)")
    for r in results:
        exact = "exact" if r["exact"] else "(a) exact, (b) not read back"
        print(
            f"{r['nodes']:<6}{human(r['payload']):>10}{human(r['bytes_a']):>16}"
            f"{human(r['bytes_b']):>16}{r['time_ratio']:>13.2f}x  {exact}"
        )
