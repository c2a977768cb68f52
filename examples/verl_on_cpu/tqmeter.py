"""What goes into and comes out of TransferQueue, measured in every process of the run.

Every transfer of data through TransferQueue 0.1.11 passes through two methods of its client,
``AsyncTransferQueueClient.async_put`` (a TensorDict into the storage units) and
``AsyncTransferQueueClient.async_get_data`` (a TensorDict out of them): the key-value functions
veRL's trainer calls (``tq.kv_batch_put``, ``tq.kv_batch_get``, ``tq.async_kv_batch_put``) and
the ``tqbridge`` decorator that turns a ``KVBatchMeta`` into data on a worker
(`verl/utils/transferqueue_utils.py`) all end there. This module wraps those two methods, on the
class, and writes one JSON line per call to ``$VERL_CPU_TQ_LOG/<pid>.jsonl``: put or get, the
partition, the rows, and per field its kind, dtype and bytes. Calls that move only metadata
(``kv_retrieve_meta``, tags, ``kv_list``, ``kv_clear``) are not data and are not recorded.

Bytes of a field, summed over its rows:

- a tensor: ``numel() * element_size()``;
- a jagged nested tensor (veRL stores responses, log-probs... one row per trajectory, each of
  its own length): the same of its packed values, ``values()``; the offsets are not counted;
- a non-tensor field (``NonTensorStack``: strings, dicts, numpy objects): the length of
  ``pickle.dumps(row, protocol=5)`` for each row. An estimate of the payload, not of the wire:
  TransferQueue encodes with msgpack and falls back to pickle.

Which stage: the calling code, found on the caller's stack. On the trainer's side, the method of
the trainer that ``fit``, ``step`` or ``_step_once`` called (``_compute_old_log_prob``...); on a
worker, the method ``tqbridge`` wraps (``compute_log_prob``...); in an agent-loop worker, the
innermost veRL function (``_agent_loop_postprocess``). The synchronous entry points run the
transfer on an event loop in another thread, where that stack is gone: they note the stage in a
context variable first, which ``asyncio.run_coroutine_threadsafe`` carries over.

The trainer's ``Tracking.log`` is wrapped too: each logged step is a line, so that run.py can
tell which training step a transfer belongs to (by time: everything between the logs of steps
k-1 and k). Loaded through ``VERL_USE_EXTERNAL_MODULES`` like platform.py and probe.py; active
only where ``VERL_CPU_TQ_LOG`` names a folder.
"""

from __future__ import annotations

import contextvars
import functools
import json
import os
import pickle
import sys
import threading
import time
from pathlib import Path

STAGE: contextvars.ContextVar[str | None] = contextvars.ContextVar("tq_stage", default=None)
# The trainer's loops: the stage is the method one of them called.
DRIVERS = {"fit", "step", "_step_once"}
_lock = threading.Lock()


def field_bytes(value) -> dict:
    """Kind, dtype and bytes of one field of a TensorDict (see the module's docstring)."""
    import torch
    from tensordict import TensorDictBase
    from tensordict.tensorclass import NonTensorData, NonTensorStack

    if isinstance(value, torch.Tensor):
        if value.is_nested:
            if value.layout == torch.jagged:
                packed = value.values()
                size, kind = packed.numel() * packed.element_size(), "jagged"
            else:
                size = sum(t.numel() * t.element_size() for t in value.unbind())
                kind = "nested"
        else:
            size, kind = value.numel() * value.element_size(), "tensor"
        return {"kind": kind, "dtype": str(value.dtype).removeprefix("torch."), "bytes": size}
    if isinstance(value, NonTensorStack):
        rows = value.tolist()
    elif isinstance(value, NonTensorData):
        rows = [value.data]
    elif isinstance(value, TensorDictBase):
        parts = [field_bytes(v) for v in value.values()]
        return {"kind": "tensordict", "dtype": None, "bytes": sum(p["bytes"] for p in parts)}
    else:
        rows = [value]
    size = sum(len(pickle.dumps(row, protocol=5)) for row in rows)
    return {"kind": "object", "dtype": type(rows[0]).__name__ if rows else None, "bytes": size}


def measure(data) -> tuple[int, dict]:
    rows = int(data.batch_size[0]) if data.batch_size else 0
    fields = {}
    for name, value in data.items():
        try:
            fields[name] = field_bytes(value)
        except Exception as error:  # measuring must not end veRL's run
            fields[name] = {"kind": "error", "dtype": None, "bytes": None, "error": repr(error)}
    return rows, fields


def stage_from_stack(frame) -> str | None:
    """The calling stage on this thread's stack, innermost frame first (see the docstring)."""
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    for f in frames:  # a worker's method, wrapped by tqbridge
        if f.f_code.co_filename.endswith("transferqueue_utils.py") and f.f_code.co_name in (
            "inner",
            "async_inner",
        ):
            func = f.f_locals.get("func")
            if func is not None:
                return func.__name__
    for inner, outer in zip(frames, frames[1:], strict=False):  # the method a loop called
        if outer.f_code.co_name in DRIVERS and f"{os.sep}verl{os.sep}trainer{os.sep}" in (
            outer.f_code.co_filename
        ):
            return inner.f_code.co_name
    for f in frames:  # the innermost function of veRL's that is not the bridge itself
        name = f.f_code.co_filename
        if f"{os.sep}verl{os.sep}" in name and not name.endswith("transferqueue_utils.py"):
            return f.f_code.co_name
    return None


def write(folder: Path, record: dict) -> None:
    line = json.dumps(record, default=str) + "\n"
    with _lock, open(folder / f"{os.getpid()}.jsonl", "a") as sink:
        sink.write(line)


def record(folder: Path, op: str, data, metadata, partition_id=None) -> None:
    try:
        rows, fields = measure(data)
        if partition_id is None and metadata is not None and metadata.partition_ids:
            partition_id = metadata.partition_ids[0]
        stage = STAGE.get() or stage_from_stack(sys._getframe(2))
        write(
            folder,
            {
                "t": time.time(),
                "pid": os.getpid(),
                "op": op,
                "partition": partition_id,
                "stage": stage,
                "rows": rows,
                "fields": fields,
            },
        )
    except Exception as error:  # the meter must not end veRL's run; run.py reports it
        write(folder, {"t": time.time(), "pid": os.getpid(), "op": op, "error": repr(error)})


def labelled(run):
    """Wrap a synchronous entry point: note the caller's stage before the work changes thread."""

    @functools.wraps(run)
    def wrapper(*args, **kwargs):
        token = STAGE.set(STAGE.get() or stage_from_stack(sys._getframe(1)))
        try:
            return run(*args, **kwargs)
        finally:
            STAGE.reset(token)

    return wrapper


def install(folder: Path) -> None:
    import verl.utils.transferqueue_utils as bridge
    from transfer_queue.client import AsyncTransferQueueClient, TransferQueueClient
    from verl.utils.tracking import Tracking

    put, get_data = AsyncTransferQueueClient.async_put, AsyncTransferQueueClient.async_get_data

    @functools.wraps(put)
    async def async_put(self, data, metadata=None, partition_id=None, data_parser=None):
        record(folder, "put", data, metadata, partition_id)
        return await put(self, data, metadata, partition_id, data_parser)

    @functools.wraps(get_data)
    async def async_get_data(self, metadata):
        data = await get_data(self, metadata)
        record(folder, "get", data, metadata)
        return data

    AsyncTransferQueueClient.async_put = async_put
    AsyncTransferQueueClient.async_get_data = async_get_data
    # The synchronous client runs each coroutine on its own loop thread; the bridge on another.
    TransferQueueClient._run_coroutine = labelled(TransferQueueClient._run_coroutine)
    bridge._run_async_in_temp_loop = labelled(bridge._run_async_in_temp_loop)

    log = Tracking.log

    def log_and_mark(self, data, step, backend=None):
        log(self, data, step, backend=backend)
        mark = {"t": time.time(), "pid": os.getpid(), "logged_step": step}
        write(folder, {**mark, "training": "training/global_step" in data})

    Tracking.log = log_and_mark


if os.environ.get("VERL_CPU_TQ_LOG"):
    install(Path(os.environ["VERL_CPU_TQ_LOG"]))
