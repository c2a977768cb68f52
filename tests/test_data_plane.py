"""The data-plane benchmarks run and report every case; TransferQueue really moves the data.

Two quick runs of the benchmarks behind docs/verl/transferqueue.md (structure only:
ratios are printed, never asserted, as in tests/test_benchmarks.py), and one test on
real TransferQueue 0.1.11 actors: a tensor written by one Ray actor is read by another
through TransferQueue's storage units, and both the input and the output that actor
wrote back arrive bit for bit, while the driver only ever holds keys.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import ray
import torch

pytestmark = pytest.mark.reads_docs()

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
ROWS, COLS = 64, 1000  # float32: 250 KiB, large enough for Ray's object store, not inlined


def run_benchmark(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        timeout=560,  # a hang detector: beside two CPU burners one quick run took 280 s
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


@pytest.mark.timeout(600)
def test_data_plane_benchmark_reports_bytes_and_ratios():
    lines = run_benchmark("data_plane.py", "--quick", "--nodes", "1")
    assert lines[0].split()[:2] == ["nodes", "payload"], lines
    rows = [line.split() for line in lines[1:]]
    # nodes, payload, unit, (a) bytes, unit, (b) bytes, unit, time ratio, exact
    assert [(r[0], r[1], r[2]) for r in rows] == [("1", "1.0", "KiB"), ("1", "1.0", "MiB")]
    for row in rows:
        assert row[-1] == "exact", row
        assert float(row[7].rstrip("x")) > 0
    one_mib = rows[1]
    assert (one_mib[3], one_mib[4]) == ("3.0", "MiB")  # in, out to the ranks, back
    assert one_mib[6] == "KiB"  # keys only


def test_serialization_benchmark_reports_every_format():
    lines = run_benchmark("dataproto_serialization.py", "--quick")
    assert lines[0].split()[:2] == ["batch", "format"], lines
    rows = lines[1:]
    formats = ["veRL default (torch.save)", "veRL numpy", "reference_impl"]
    assert len(rows) == 2 * len(formats)
    for i, row in enumerate(rows):
        assert formats[i % 3] in row, row
        ratios = [float(cell.rstrip("x")) for cell in row.split()[-3:]]
        assert all(r > 0 for r in ratios), row
        if i % 3 == 0:
            assert ratios[1:] == [1.0, 1.0], row  # the baseline is veRL's default path


@pytest.fixture(scope="module")
def transfer_queue():
    import transfer_queue as tq

    ray.init(num_cpus=6, include_dashboard=False, log_to_driver=False)
    try:
        tq.init()
        yield tq
        tq.close()
    finally:
        ray.shutdown()


@ray.remote(num_cpus=1)
class Writer:
    def put(self, seed: int):
        import transfer_queue as tq
        from tensordict import TensorDict

        tq.init()
        x = torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(seed))
        keys = [f"row{i}" for i in range(ROWS)]
        meta = tq.kv_batch_put(keys=keys, partition_id="t", fields=TensorDict({"x": x}, [ROWS]))
        return meta, os.getpid()


@ray.remote(num_cpus=1)
class Reader:
    def add_one(self, meta):
        import transfer_queue as tq
        from tensordict import TensorDict

        tq.init()
        got = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields="x")
        y = got.to_padded_tensor()["x"] + 1
        out = tq.kv_batch_put(
            keys=meta.keys, partition_id=meta.partition_id, fields=TensorDict({"y": y}, [ROWS])
        )
        return out, os.getpid()


# TransferQueue's controller and 8 storage units start in the fixture: beside two CPU burners
# that took 280 s, so the hang detector is set for a busy machine.
@pytest.mark.timeout(900)
def test_transferqueue_moves_the_data_between_processes(transfer_queue):
    tq = transfer_queue
    meta, writer_pid = ray.get(Writer.remote().put.remote(seed=7))
    # The driver holds keys, not the tensor: a few KiB for 250 KiB of payload.
    assert len(pickle.dumps(meta)) < ROWS * COLS * 4 // 20
    assert not any(isinstance(v, torch.Tensor) for v in vars(meta).values())

    out, reader_pid = ray.get(Reader.remote().add_one.remote(meta))
    assert len({writer_pid, reader_pid, os.getpid()}) == 3
    assert sorted(out.fields) == ["x", "y"] and out.keys == meta.keys

    back = tq.kv_batch_get(keys=out.keys, partition_id="t").to_padded_tensor()
    x = torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(7))
    assert back["x"].dtype == torch.float32 and back["x"].shape == (ROWS, COLS)
    assert torch.equal(back["x"], x)  # written by one actor, read back bit for bit
    assert torch.equal(back["y"], x + 1)  # computed by another actor from what it read

    tq.kv_clear(keys=out.keys, partition_id="t")
    with pytest.raises(ValueError, match="not found"):
        tq.kv_batch_get(keys=out.keys, partition_id="t")


def test_transfer_benchmark_reports_every_case():
    """The quick run has every case (ratios printed, not asserted). The figures that
    docs/verl/transferqueue.md quotes from the committed runs: tests/test_records.py."""
    lines = run_benchmark("dataproto_transfer.py", "--quick")
    cases = [" ".join(line.split()[2:-2]) for line in lines[1:]]  # payload, case, time, ratio
    assert cases == ["raw Ray", "veRL default", "veRL numpy", "reference_impl"], lines
    assert all(line.startswith("1 KiB") for line in lines[1:]), lines
