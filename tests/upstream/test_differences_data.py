"""Pins, against veRL 0.9.1 itself, the rows of docs/verl/differences.md for docs/verl/dataproto.md.

Each test asserts what veRL does where the page's block (run with ``--backend=verl``) differs
from ``reference_impl``; when veRL changes, the test fails and the row must be revisited.
No Ray is needed: both differences are in ``verl/protocol.py`` alone.
"""

from __future__ import annotations

import pickle

import pytest

pytestmark = pytest.mark.reads_docs("docs/verl/differences.md", "docs/verl/differences.zh.md")


torch = pytest.importorskip("torch")
protocol = pytest.importorskip("verl.protocol")


def _pickled_bytes(obj) -> tuple[int, int]:
    """(in-band bytes, out-of-band bytes) of a protocol-5 pickle, as Ray serialises it."""
    buffers = []
    in_band = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return len(in_band), sum(b.raw().nbytes for b in buffers)


def test_verl_chunk_asserts_on_uneven_batch(monkeypatch):
    """dataproto.md block 3: veRL has no BatchSplitError; an uneven chunk is an assert."""
    monkeypatch.delenv("VERL_AUTO_PADDING", raising=False)
    assert not hasattr(protocol, "BatchSplitError")
    data = protocol.DataProto.from_dict({"x": torch.arange(4)})
    assert not data.is_padding_enabled()
    with pytest.raises(AssertionError, match="only support equal chunk"):
        data.chunk(3)


def test_verl_dataproto_pickles_in_band_by_default(monkeypatch):
    """dataproto.md block 7: veRL's default pickle is one in-band byte string (torch.save);
    the out-of-band numpy path needs VERL_DATAPROTO_SERIALIZATION_METHOD=numpy."""
    data = protocol.DataProto.from_dict({"x": torch.ones(64, 1024)})
    payload = 64 * 1024 * 4

    monkeypatch.delenv("VERL_DATAPROTO_SERIALIZATION_METHOD", raising=False)
    assert isinstance(data.__getstate__()[0], bytes)  # torch.save of the consolidated TensorDict
    in_band, out_of_band = _pickled_bytes(data)
    assert out_of_band == 0 and in_band >= payload

    monkeypatch.setenv("VERL_DATAPROTO_SERIALIZATION_METHOD", "numpy")
    in_band, out_of_band = _pickled_bytes(data)
    assert out_of_band == payload and in_band < payload // 10


def test_verl_concat_promotes_mixed_dtypes_and_rounds_ids():
    """dataproto.md block 10: int64 ids concatenated with a float32 part become float32."""
    ids = protocol.DataProto.from_dict({"input_ids": torch.tensor([2**24 + 1])})
    scores = protocol.DataProto.from_dict({"input_ids": torch.tensor([0.5])})
    joined = protocol.DataProto.concat([ids, scores]).batch["input_ids"]
    assert joined.dtype == torch.float32
    assert int(joined[0]) == 2**24  # the id 2**24 + 1, rounded without an error
