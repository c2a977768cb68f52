"""Tests for reference_impl.data_proto: DataProto, padding helpers and DataProtoFuture."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import ray
import torch
from tensordict import TensorDict

from reference_impl import (
    BatchSplitError,
    DataProto,
    DataProtoFuture,
    DataProtoItem,
    pad_dataproto_to_divisor,
    unpad_dataproto,
)

pytestmark = pytest.mark.reads_docs()


def make(n: int = 6, meta: dict | None = None) -> DataProto:
    """Row i has ids [2i, 2i+1], score float(i), prompt "p{i}" and a per-row dict."""
    return DataProto.from_dict(
        tensors={"ids": torch.arange(2 * n).view(n, 2), "score": torch.arange(n).float()},
        non_tensors={
            "prompt": np.array([f"p{i}" for i in range(n)], dtype=object),
            "extra": np.array([{"row": i} for i in range(n)], dtype=object),
        },
        meta_info={"temperature": 1.0} if meta is None else meta,
    )


def assert_same(a: DataProto, b: DataProto) -> None:
    assert len(a) == len(b)
    assert (a.batch is None) == (b.batch is None)
    if a.batch is not None:
        assert sorted(a.batch.keys()) == sorted(b.batch.keys())
        for key in a.batch.keys():
            assert a.batch[key].dtype == b.batch[key].dtype
            assert torch.equal(a.batch[key], b.batch[key]), key
    assert sorted(a.non_tensor_batch) == sorted(b.non_tensor_batch)
    for key, val in a.non_tensor_batch.items():
        assert val.dtype == b.non_tensor_batch[key].dtype
        assert val.tolist() == b.non_tensor_batch[key].tolist(), key
    assert a.meta_info == b.meta_info


def ids_rows(data: DataProto) -> list[int]:
    """The row numbers of `make`'s rows, read back from the ids tensor."""
    return (data.batch["ids"][:, 0] // 2).tolist()


# ---- construction and consistency ------------------------------------------------------------


def test_constructor_defaults_and_len():
    empty = DataProto()
    assert len(empty) == 0 and empty.batch is None
    assert empty.non_tensor_batch == {} and empty.meta_info == {}
    assert len(make(5)) == 5
    only_numpy = DataProto(non_tensor_batch={"x": np.array(["a", "b", "c"], dtype=object)})
    assert len(only_numpy) == 3


def test_constructor_rejects_mismatched_lengths():
    batch = TensorDict({"ids": torch.zeros(4, 2)}, batch_size=[4])
    with pytest.raises(ValueError, match=r"non_tensor_batch\['prompt'\] has length 3 .* size is 4"):
        DataProto(batch=batch, non_tensor_batch={"prompt": np.array(["a", "b", "c"])})
    with pytest.raises(ValueError, match=r"non_tensor_batch\['b'\] has length 2 .* size is 3"):
        DataProto(non_tensor_batch={"a": np.zeros(3), "b": np.zeros(2)})


def test_check_consistency_other_errors():
    with pytest.raises(TypeError, match=r"non_tensor_batch\['prompt'\] must be a numpy array"):
        DataProto(non_tensor_batch={"prompt": ["a", "b"]})
    with pytest.raises(ValueError, match=r"non_tensor_batch\['x'\] is 0-dimensional"):
        DataProto(non_tensor_batch={"x": np.array(3)})
    with pytest.raises(TypeError, match="batch must be a TensorDict"):
        DataProto(batch={"ids": torch.zeros(2)})
    two_dims = TensorDict({"x": torch.zeros(2, 3)}, batch_size=[2, 3])
    with pytest.raises(ValueError, match=r"exactly one batch dimension, got batch_size=\[2, 3\]"):
        DataProto(batch=two_dims)
    data = make(3)
    data.non_tensor_batch["late"] = np.zeros(5)  # edited by hand after construction
    with pytest.raises(ValueError, match=r"'late'\] has length 5 but the batch size is 3"):
        data.check_consistency()


def test_from_dict():
    meta = {"temperature": 0.7}
    data = DataProto.from_dict(
        tensors={"ids": torch.zeros(3, 4, dtype=torch.long)},
        non_tensors={"tags": [["a"], ["b", "c"], []]},
        meta_info=meta,
        auto_padding=True,
    )
    assert len(data) == 3 and data.batch.batch_size == torch.Size([3])
    assert data.non_tensor_batch["tags"].dtype == object
    assert data.non_tensor_batch["tags"][1] == ["b", "c"]
    assert data.meta_info == {"temperature": 0.7, "_verl_auto_padding": True}
    assert meta == {"temperature": 0.7}  # the caller's dict is not modified
    assert DataProto.from_dict().batch is None


def test_from_dict_errors():
    with pytest.raises(ValueError, match="'ids' has 3, 'mask' has 2"):
        DataProto.from_dict({"ids": torch.zeros(3, 4), "mask": torch.zeros(2, 4)})
    with pytest.raises(ValueError, match="'loss' is 0-dimensional"):
        DataProto.from_dict({"loss": torch.tensor(1.0)})
    with pytest.raises(ValueError, match=r"'prompt'\] has length 2 but the batch size is 3"):
        DataProto.from_dict({"ids": torch.zeros(3)}, {"prompt": np.array(["a", "b"])})


def test_from_single_dict_splits_tensors_and_arrays():
    data = DataProto.from_single_dict(
        {"ids": torch.ones(2, 3), "prompt": np.array(["a", "b"], dtype=object)},
        meta_info={"step": 1},
    )
    assert list(data.batch.keys()) == ["ids"]
    assert list(data.non_tensor_batch) == ["prompt"]
    assert data.meta_info == {"step": 1}
    with pytest.raises(TypeError, match="'prompt' must be a torch.Tensor or np.ndarray"):
        DataProto.from_single_dict({"prompt": ["a", "b"]})


# ---- columns --------------------------------------------------------------------------------


def test_select_keeps_only_given_keys_and_shares_data():
    data = make(4, meta={"temperature": 1.0, "step": 3})
    sub = data.select(batch_keys=["ids"], non_tensor_batch_keys=["prompt"], meta_info_keys=["step"])
    assert list(sub.batch.keys()) == ["ids"]
    assert list(sub.non_tensor_batch) == ["prompt"]
    assert sub.meta_info == {"step": 3}
    assert len(sub) == 4
    sub.batch["ids"][0, 0] = 100  # shared storage without deepcopy
    assert data.batch["ids"][0, 0] == 100
    everything = data.select()
    assert_same(everything, data)
    # Missing non-tensor and meta keys are skipped, as in veRL.
    assert data.select(non_tensor_batch_keys=["nope"], meta_info_keys=["nope"]).meta_info == {}


def test_select_deepcopy_copies_everything():
    data = make(3)
    copied = data.select(deepcopy=True)
    copied.batch["ids"][0, 0] = 100
    copied.non_tensor_batch["extra"][0]["row"] = 100
    copied.meta_info["temperature"] = 0.0
    assert data.batch["ids"][0, 0] == 0
    assert data.non_tensor_batch["extra"][0] == {"row": 0}
    assert data.meta_info["temperature"] == 1.0


def test_select_missing_batch_key():
    with pytest.raises(KeyError, match=r"batch has no keys \['nope'\]"):
        make(2).select(batch_keys=["ids", "nope"])
    with pytest.raises(KeyError, match=r"batch has no keys \['ids'\]"):
        DataProto().select(batch_keys=["ids"])


def test_pop_removes_and_returns():
    data = make(3, meta={"temperature": 1.0, "step": 3})
    popped = data.pop(
        batch_keys=["score"], non_tensor_batch_keys=["extra"], meta_info_keys=["step"]
    )
    assert list(popped.batch.keys()) == ["score"] and popped.batch["score"].tolist() == [0, 1, 2]
    assert list(popped.non_tensor_batch) == ["extra"]
    assert popped.meta_info == {"step": 3}
    assert list(data.batch.keys()) == ["ids"]
    assert list(data.non_tensor_batch) == ["prompt"]
    assert data.meta_info == {"temperature": 1.0}
    assert len(data) == 3


def test_pop_missing_key_changes_nothing():
    data = make(3)
    with pytest.raises(KeyError, match=r"non_tensor_batch has no keys \['nope'\]"):
        data.pop(batch_keys=["ids"], non_tensor_batch_keys=["nope"])
    assert "ids" in data.batch.keys()
    with pytest.raises(KeyError, match=r"meta_info has no keys \['nope'\]"):
        data.pop(meta_info_keys=["nope"])
    with pytest.raises(KeyError, match=r"batch has no keys \['x'\]"):
        DataProto().pop(batch_keys=["x"])


def test_union_merges_keys():
    data = make(3)
    other = DataProto.from_dict(
        tensors={"ids": data.batch["ids"].clone(), "reward": torch.ones(3)},
        non_tensors={"prompt": data.non_tensor_batch["prompt"].copy(), "answer": np.arange(3)},
        meta_info={"temperature": 1.0, "step": 7},
    )
    result = data.union(other)
    assert result is data  # in place, as in veRL
    assert sorted(data.batch.keys()) == ["ids", "reward", "score"]
    assert sorted(data.non_tensor_batch) == ["answer", "extra", "prompt"]
    assert data.meta_info == {"temperature": 1.0, "step": 7}


def test_union_of_batches_larger_than_python_caches_small_integers():
    # Sizes are compared by value: 300 rows on each side is one size (CPython shares the
    # int objects of -5 to 256 only, so an identity check would pass below and fail here).
    data, other = make(300), DataProto.from_dict(tensors={"reward": torch.ones(300)})
    assert len(data.union(other)) == 300
    with pytest.raises(ValueError, match="cannot union batches of size 300 and 301"):
        make(300).union(DataProto.from_dict(tensors={"reward": torch.ones(301)}))


def test_union_into_an_empty_dataproto():
    other = make(2)
    merged = DataProto().union(other)
    assert_same(merged, other)
    merged.pop(batch_keys=["ids"])
    assert "ids" in other.batch.keys()  # union took a shallow copy of other's batch


def test_union_equal_nan_and_object_values_do_not_conflict():
    def build() -> DataProto:
        return DataProto(
            non_tensor_batch={
                "x": np.array([float("nan"), 1.0]),
                "o": np.array([[1], {"k": 2}], dtype=object),
            },
            meta_info={"m": float("nan")},
        )

    assert len(build().union(build())) == 2


def test_union_compares_nested_arrays_element_by_element():
    # Ragged rows (an object array of arrays, one per row of its own length): numpy's
    # array_equal cannot compare them (the truth value of an array is ambiguous).
    def ragged(last: int) -> DataProto:
        rows = np.empty(2, dtype=object)
        rows[0], rows[1] = np.array([1, 2]), np.array([last])
        return DataProto(non_tensor_batch={"rows": rows})

    assert len(ragged(3).union(ragged(3))) == 2
    with pytest.raises(ValueError, match=r"union conflict: non_tensor_batch\['rows'\] differs"):
        ragged(3).union(ragged(4))


def test_union_conflicts():
    data = make(3)
    tensor_clash = DataProto.from_dict({"score": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"union conflict: batch\['score'\] differs"):
        data.union(tensor_clash)
    dtype_clash = DataProto.from_dict({"score": torch.arange(3)})  # same values, int64
    with pytest.raises(ValueError, match=r"union conflict: batch\['score'\] differs"):
        data.union(dtype_clash)
    text_clash = DataProto(non_tensor_batch={"prompt": np.array(["p0", "p1", "X"], dtype=object)})
    with pytest.raises(ValueError, match=r"union conflict: non_tensor_batch\['prompt'\] differs"):
        data.union(text_clash)
    meta_clash = DataProto(meta_info={"temperature": 0.5, "new": 1})
    with pytest.raises(ValueError, match=r"union conflict: meta_info\['temperature'\] differs"):
        data.union(meta_clash)
    assert "new" not in data.meta_info  # nothing merged on failure
    shorter = DataProto(meta_info={"ids": np.array(["a", "b"], dtype=object)})
    longer = DataProto(meta_info={"ids": np.array(["a", "b", "c"], dtype=object)})
    with pytest.raises(ValueError, match=r"union conflict: meta_info\['ids'\] differs"):
        shorter.union(longer)
    with pytest.raises(ValueError, match="cannot union batches of size 3 and 2"):
        data.union(make(2))
    # A tensor on either side is compared as a tensor, which wants a tensor on the other
    # side too: a 0-d tensor is not the float it holds (`==` between them says it is).
    as_tensor = DataProto(meta_info={"scale": torch.tensor(2.0)})
    as_float = DataProto(meta_info={"scale": 2.0})
    with pytest.raises(ValueError, match=r"union conflict: meta_info\['scale'\] differs"):
        as_float.union(as_tensor)


# ---- rows -----------------------------------------------------------------------------------


def test_getitem_int_returns_one_row():
    data = make(4)
    item = data[2]
    assert isinstance(item, DataProtoItem)
    assert item.batch.batch_size == torch.Size([])
    assert item.batch["ids"].tolist() == [4, 5]
    assert item.non_tensor_batch == {"prompt": "p2", "extra": {"row": 2}}
    assert item.meta_info is data.meta_info
    assert data[-1].non_tensor_batch["prompt"] == "p3"
    assert data[np.int64(1)].non_tensor_batch["prompt"] == "p1"


def test_getitem_slice_is_a_view():
    data = make(6)
    part = data[1:5:2]
    assert isinstance(part, DataProto)
    assert ids_rows(part) == [1, 3]
    assert part.non_tensor_batch["prompt"].tolist() == ["p1", "p3"]
    assert data.slice(4).non_tensor_batch["prompt"].tolist() == ["p4", "p5"]
    part.batch["score"][0] = -1.0
    assert data.batch["score"][1] == -1.0


@pytest.mark.parametrize(
    "index",
    [[3, 0, 3], np.array([3, 0, 3]), torch.tensor([3, 0, 3])],
    ids=["list", "ndarray", "tensor"],
)
def test_getitem_integer_arrays(index):
    part = make(4)[index]
    assert ids_rows(part) == [3, 0, 3]
    assert part.non_tensor_batch["prompt"].tolist() == ["p3", "p0", "p3"]


def test_getitem_boolean_mask_and_empty_list():
    data = make(4)
    mask = torch.tensor([True, False, False, True])
    assert data[mask].non_tensor_batch["prompt"].tolist() == ["p0", "p3"]
    assert data[[True, False, True, False]].non_tensor_batch["prompt"].tolist() == ["p0", "p2"]
    assert len(data[[]]) == 0


def test_getitem_errors():
    data = make(4)
    with pytest.raises(TypeError, match="DataProto indices must be int, slice"):
        data["ids"]
    with pytest.raises(IndexError, match=r"row indices must be 1-D, got shape \(2, 2\)"):
        data[np.array([[0, 1], [2, 3]])]


def test_chunk_equal_parts_and_concat_round_trip():
    data = make(6)
    parts = data.chunk(3)
    assert [len(p) for p in parts] == [2, 2, 2]
    assert [p.non_tensor_batch["prompt"].tolist() for p in parts] == [
        ["p0", "p1"],
        ["p2", "p3"],
        ["p4", "p5"],
    ]
    assert all(p.meta_info == data.meta_info for p in parts)
    assert all(p.non_tensor_batch["extra"].dtype == object for p in parts)
    assert_same(DataProto.concat(parts), data)


def test_chunk_into_one_part_is_the_whole_batch():
    # one rank: the worker group chunks by its world size, 1 included
    data = make(5)
    (whole,) = data.chunk(1)
    assert_same(whole, data)
    assert whole.meta_info == data.meta_info


def test_chunk_errors():
    with pytest.raises(BatchSplitError, match="batch of size 5 into 2 equal parts") as info:
        make(5).chunk(2)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "pad_dataproto_to_divisor(data, 2)" in message
    assert "data.meta_info['_verl_auto_padding'] = True" in message
    assert "worker group pads and unpads for you" in message
    with pytest.raises(ValueError, match="chunks must be >= 1, got 0"):
        make(4).chunk(0)


def test_split_last_part_may_be_shorter():
    data = make(5)
    parts = data.split(2)
    assert [ids_rows(p) for p in parts] == [[0, 1], [2, 3], [4]]
    prompts = [p.non_tensor_batch["prompt"].tolist() for p in parts]
    assert prompts == [["p0", "p1"], ["p2", "p3"], ["p4"]]
    assert_same(DataProto.concat(parts), data)
    with pytest.raises(ValueError, match="split_size must be >= 1, got 0"):
        data.split(0)


def test_concat_takes_meta_info_from_first():
    a, b = make(2, meta={"step": 1}), make(3, meta={"step": 2})
    both = DataProto.concat([a, b])
    assert ids_rows(both) == [0, 1, 0, 1, 2]
    assert both.non_tensor_batch["prompt"].tolist() == ["p0", "p1", "p0", "p1", "p2"]
    assert both.meta_info == {"step": 1}
    assert both.meta_info is not a.meta_info
    only_numpy = [DataProto(non_tensor_batch={"x": np.array([i], dtype=object)}) for i in range(3)]
    joined = DataProto.concat(only_numpy)
    assert joined.batch is None and joined.non_tensor_batch["x"].tolist() == [0, 1, 2]


def test_concat_errors():
    with pytest.raises(ValueError, match="needs at least one DataProto, got an empty list"):
        DataProto.concat([])
    numpy_only = DataProto(non_tensor_batch={"prompt": np.array(["a"], dtype=object)})
    with pytest.raises(ValueError, match="with a batch and DataProtos without one"):
        DataProto.concat([make(1), numpy_only])
    with pytest.raises(ValueError, match=r"non_tensor_batch keys differ: \['extra', 'prompt'\]"):
        DataProto.concat([make(1), make(1).select(non_tensor_batch_keys=["prompt"])])
    # A later part with a key more than the first: kept silently, its values would be dropped.
    with pytest.raises(ValueError, match=r"non_tensor_batch keys differ: \['prompt'\] vs"):
        DataProto.concat([make(1).select(non_tensor_batch_keys=["prompt"]), make(1)])


def test_repeat_interleave_vs_tile():
    data = make(2)
    grouped = data.repeat(repeat_times=3, interleave=True)
    assert ids_rows(grouped) == [0, 0, 0, 1, 1, 1]
    assert grouped.batch["ids"].tolist() == [[0, 1], [0, 1], [0, 1], [2, 3], [2, 3], [2, 3]]
    assert grouped.non_tensor_batch["prompt"].tolist() == ["p0", "p0", "p0", "p1", "p1", "p1"]
    tiled = data.repeat(repeat_times=3, interleave=False)
    assert ids_rows(tiled) == [0, 1, 0, 1, 0, 1]
    assert tiled.non_tensor_batch["prompt"].tolist() == ["p0", "p1", "p0", "p1", "p0", "p1"]
    assert tiled.meta_info == data.meta_info
    assert len(data.repeat()) == 4  # default: twice, interleaved


# ---- padding and device ---------------------------------------------------------------------


@pytest.mark.parametrize(("size", "divisor", "pad"), [(5, 4, 3), (7, 3, 2), (2, 7, 5), (6, 3, 0)])
def test_pad_then_chunk_then_unpad_round_trip(size, divisor, pad):
    data = make(size)
    padded, pad_size = pad_dataproto_to_divisor(data, divisor)
    assert pad_size == pad and len(padded) == size + pad
    assert len(padded) % divisor == 0
    # Padding repeats rows from the start, wrapping around when pad_size > size.
    assert ids_rows(padded) == list(range(size)) + [i % size for i in range(pad)]
    assert padded.non_tensor_batch["prompt"].tolist()[size:] == [f"p{i % size}" for i in range(pad)]
    rejoined = DataProto.concat(padded.chunk(divisor))
    assert_same(unpad_dataproto(rejoined, pad_size), data)


def test_pad_and_unpad_errors_and_no_op():
    data = make(4)
    padded, pad_size = pad_dataproto_to_divisor(data, 2)
    assert padded is data and pad_size == 0
    assert unpad_dataproto(data, 0) is data
    assert len(pad_dataproto_to_divisor(DataProto(), 4)[0]) == 0
    with pytest.raises(ValueError, match="size_divisor must be >= 1, got 0"):
        pad_dataproto_to_divisor(data, 0)
    with pytest.raises(ValueError, match=r"pad_size must be in \[0, 4\], got 5"):
        unpad_dataproto(data, 5)
    with pytest.raises(ValueError, match=r"pad_size must be in \[0, 4\], got -1"):
        unpad_dataproto(data, -1)


def test_is_padding_enabled():
    assert not make(2).is_padding_enabled()
    assert make(2, meta={"_verl_auto_padding": True}).is_padding_enabled()
    assert DataProto.from_single_dict({"x": torch.zeros(2)}, auto_padding=True).is_padding_enabled()


def test_to_moves_batch_in_place_and_returns_self():
    data = make(2)
    prompts = data.non_tensor_batch["prompt"]
    assert data.to("cpu") is data
    assert data.batch.device == torch.device("cpu")
    assert data.non_tensor_batch["prompt"] is prompts
    assert DataProto().to("cpu").batch is None


# ---- serialisation and futures -------------------------------------------------------------


def test_pickle_round_trip():
    data = make(4)
    data.meta_info["nested"] = {"list": [1, 2], "array": np.arange(3)}
    back = pickle.loads(pickle.dumps(data))
    back_meta = back.meta_info.pop("nested")
    data_meta = data.meta_info.pop("nested")
    assert back_meta["list"] == data_meta["list"]
    assert back_meta["array"].tolist() == data_meta["array"].tolist()
    assert_same(back, data)
    assert back.non_tensor_batch["extra"][3] == {"row": 3}


@pytest.fixture(scope="module")
def ray_local():
    ray.init(num_cpus=1, include_dashboard=False)
    yield
    ray.shutdown()


def test_ray_put_get_round_trip(ray_local):
    data = make(4)
    assert_same(ray.get(ray.put(data)), data)


def test_future_concat_get(ray_local):
    data = make(6)
    refs = [ray.put(part) for part in data.chunk(3)]
    future = DataProtoFuture.concat(refs)
    assert future.dispatch_fn is None
    assert_same(future.get(), data)


def test_future_chunk_resolves_inside_a_ray_task(ray_local):
    data = make(6)
    future = DataProtoFuture.concat([ray.put(part) for part in data.split(4)])  # sizes 4 and 2

    @ray.remote
    def materialise(arg: DataProtoFuture) -> list[str]:
        # As in a worker: the future arrives unresolved and is fetched here, not on the driver.
        return arg.get().non_tensor_batch["prompt"].tolist()

    shares = future.chunk(3)
    assert ray.get([materialise.remote(share) for share in shares]) == [
        ["p0", "p1"],
        ["p2", "p3"],
        ["p4", "p5"],
    ]
    assert_same(shares[1].get(), data.chunk(3)[1])


def test_future_chunk_error_surfaces_at_get(ray_local):
    shares = DataProtoFuture.concat([ray.put(make(5))]).chunk(2)  # building them fetches nothing
    with pytest.raises(BatchSplitError, match="batch of size 5 into 2 equal parts"):
        shares[0].get()


def test_padding_switched_on_for_every_batch_by_veRLs_environment_variable(monkeypatch):
    for on in ("1", "true", "TRUE"):  # veRL compares the upper-cased value with TRUE and 1
        monkeypatch.setenv("VERL_AUTO_PADDING", on)
        assert make(2).is_padding_enabled(), on
    for off in ("false", "0", "yes"):
        monkeypatch.setenv("VERL_AUTO_PADDING", off)
        assert not make(2).is_padding_enabled(), off
