"""How veRL 0.9.1 serialises a DataProto, and what VERL_DATAPROTO_SERIALIZATION_METHOD=numpy buys.

    python benchmarks/dataproto_serialization.py [--quick]     (or: nox -s bench)

``verl.protocol.DataProto`` (``verl/protocol.py``, ``DataProto.__getstate__`` and
``__setstate__``) has two ways to pickle its ``batch`` (a TensorDict):

* the default: ``batch.contiguous().consolidate()`` (all tensors copied into one storage),
  then ``torch.save`` into a ``BytesIO``, whose ``getvalue()`` bytes go into the pickle;
  unpickling runs ``torch.load`` on them;
* ``VERL_DATAPROTO_SERIALIZATION_METHOD=numpy``: each tensor becomes
  ``(dtype, shape, flat uint8 numpy view)`` (``serialize_tensordict``); unpickling copies
  each buffer into a ``bytearray`` and views it as a tensor (``deserialize_tensordict``).

``__getstate__`` and ``__setstate__`` call ``os.getenv`` each time (not at import), so one
process can switch between the two by setting ``os.environ``; both ends of a transfer
must agree. The script checks, on every case, which path produced the pickled state.

The handbook's ``reference_impl.DataProto`` (``reference_impl/data_proto.py``) is the
third row: a flat uint8 numpy view per tensor, which pickle protocol 5 hands to Ray out
of band.

The batch: ``ROWS`` = 512 sequences of ``L`` tokens, four columns, 24 bytes a token
(``input_ids`` and ``attention_mask``: int64 ``(512, L)``; ``old_log_probs`` and
``advantages``: float32 ``(512, L)``), plus ``non_tensor_batch["uid"]``: 512 Python
strings (``dtype=object``) and a small ``meta_info``. Printed per size and format:

* ``size``: pickled bytes (in-band plus out-of-band buffers) / tensor bytes;
* ``pickle``: median seconds of ``pickle.loads(pickle.dumps(d))`` (default protocol, as
  ``DataProto.save_to_disk`` does), divided by the same for veRL's default;
* ``ray.put+get``: median seconds of ``ray.get(ray.put(d))`` in this process, divided by
  the same for veRL's default.

Every figure is a ratio against veRL's default measured in the same run; the cases
alternate, repeat after repeat, so drift in the machine's load hits all of them.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import statistics
import time

import numpy as np
import ray
import torch

ENV = "VERL_DATAPROTO_SERIALIZATION_METHOD"
ROWS = 512
FORMATS = ("veRL default (torch.save)", "veRL numpy", "reference_impl")


def columns(length: int) -> dict[str, torch.Tensor]:
    """The four tensor columns of a batch of ROWS x ``length`` tokens (24 bytes a token)."""
    gen = torch.Generator().manual_seed(length)
    return {
        "input_ids": torch.randint(0, 151_000, (ROWS, length), generator=gen),
        "attention_mask": torch.ones(ROWS, length, dtype=torch.int64),
        "old_log_probs": -torch.rand(ROWS, length, generator=gen),
        "advantages": torch.randn(ROWS, length, generator=gen),
    }


def make(fmt: str, tensors: dict[str, torch.Tensor]):
    """The same batch as a veRL 0.9.1 DataProto or as reference_impl's."""
    non_tensors = {"uid": np.array([f"prompt-{i // 8}" for i in range(ROWS)], dtype=object)}
    meta = {"temperature": 1.0, "global_steps": 1}
    if fmt == "reference_impl":
        from reference_impl import DataProto

        return DataProto.from_dict(tensors, non_tensors, meta)
    from verl.protocol import DataProto

    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta)


def use(fmt: str) -> None:
    """Set the switch for ``fmt``: veRL reads it on every __getstate__/__setstate__."""
    if fmt == "veRL numpy":
        os.environ[ENV] = "numpy"
    else:
        os.environ.pop(ENV, None)


def check_path(fmt: str, data) -> None:
    """Fail unless the pickled state comes from the path ``fmt`` names."""
    state = data.__getstate__()
    if fmt == "veRL default (torch.save)":
        assert isinstance(state[0], bytes), type(state[0])
    elif fmt == "veRL numpy":
        assert isinstance(state[0], tuple), type(state[0])
    else:
        assert isinstance(state, dict), type(state)


def pickled_bytes(obj) -> int:
    """In-band pickle bytes plus the out-of-band buffers (protocol 5, as Ray pickles)."""
    buffers: list[pickle.PickleBuffer] = []
    inband = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return len(inband) + sum(b.raw().nbytes for b in buffers)


def same(a, b) -> bool:
    return all(torch.equal(a.batch[k], b.batch[k]) for k in b.batch.keys()) and list(
        a.non_tensor_batch["uid"]
    ) == list(b.non_tensor_batch["uid"])


def measure(length: int, repeats: int) -> dict[str, dict[str, float]]:
    """{format: {"size": ..., "pickle": seconds, "ray": seconds}} for one batch size."""
    tensors = columns(length)
    payload = sum(t.numel() * t.element_size() for t in tensors.values())
    batches = {fmt: make(fmt, tensors) for fmt in FORMATS}
    out: dict[str, dict[str, float]] = {fmt: {"pickle": [], "ray": []} for fmt in FORMATS}
    for fmt, data in batches.items():
        use(fmt)
        check_path(fmt, data)
        assert same(pickle.loads(pickle.dumps(data)), data), fmt
        assert same(ray.get(ray.put(data)), data), fmt
        out[fmt]["size"] = pickled_bytes(data) / payload
    for _ in range(repeats):
        for fmt, data in batches.items():
            use(fmt)
            start = time.perf_counter()
            pickle.loads(pickle.dumps(data))
            out[fmt]["pickle"].append(time.perf_counter() - start)
            start = time.perf_counter()
            ray.get(ray.put(data))
            out[fmt]["ray"].append(time.perf_counter() - start)
            gc.collect()
    use("veRL default (torch.save)")
    for fmt in FORMATS:
        out[fmt]["pickle"] = statistics.median(out[fmt]["pickle"])
        out[fmt]["ray"] = statistics.median(out[fmt]["ray"])
    return {"payload": payload, **out}


def human(nbytes: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} B"


def main(quick: bool) -> list[tuple[str, str, float, float, float]]:
    """Rows (batch, format, size ratio, pickle ratio, ray ratio), ratios vs veRL's default."""
    lengths = (1, 64) if quick else (1, 128, 4096, 16384)
    ray.init(num_cpus=1, include_dashboard=False)
    rows = []
    try:
        for length in lengths:
            reps = 3 if quick else (9 if length <= 4096 else 3)
            res = measure(length, reps)
            base = res[FORMATS[0]]
            label = f"512x{length} ({human(res['payload'])})"
            for fmt in FORMATS:
                r = res[fmt]
                rows.append(
                    (label, fmt, r["size"], r["pickle"] / base["pickle"], r["ray"] / base["ray"])
                )
            del res
            gc.collect()
    finally:
        os.environ.pop(ENV, None)
        ray.shutdown()
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small sizes, 3 repeats")
    table = main(parser.parse_args().quick)
    print(f"{'batch':<22} {'format':<27} {'size':>7} {'pickle':>8} {'ray.put+get':>12}")
    for label, fmt, size, pick, rput in table:
        print(f"{label:<22} {fmt:<27} {size:>6.3f}x {pick:>7.2f}x {rput:>11.2f}x")
