"""DataProto: the batch that flows between the driver and the worker groups.

Follows ``verl/protocol.py`` in veRL 0.9.1 (names and semantics; the code is our own).

A ``DataProto`` holds one batch of ``B`` rows in three parts:

- ``batch``: a ``TensorDict`` whose tensors all have first dimension ``B``;
- ``non_tensor_batch``: ``dict[str, np.ndarray]``, each array of first dimension ``B``
  (``dtype=object`` for strings, lists, dicts: anything that is not a tensor);
- ``meta_info``: a plain ``dict`` for the whole batch (temperature, metrics, flags).

Row operations (index, chunk, split, concat, repeat, pad) act on the tensors and the
numpy arrays together, so a row's prompt text never drifts away from its token ids.
``DataProtoFuture`` is the lazy form: Ray ObjectRefs that a worker resolves itself.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
import torch

if TYPE_CHECKING:
    # Imported where used: tensordict pulls in torch._dynamo (seconds of start-up), which
    # a worker process that never handles a batch should not pay for.
    from tensordict import TensorDict

__all__ = [
    "AUTO_PADDING_KEY",
    "BatchSplitError",
    "DataProto",
    "DataProtoFuture",
    "DataProtoItem",
    "pad_dataproto_to_divisor",
    "unpad_dataproto",
]

# The per-batch opt-in to padding, under veRL's own key (``DataProtoConfig.auto_padding_key``
# in verl/protocol.py), so that a batch built for veRL pads here too and vice versa.
AUTO_PADDING_KEY = "_verl_auto_padding"
# veRL's machine-wide opt-in: every batch pads when this is "1" or "true".
AUTO_PADDING_ENV = "VERL_AUTO_PADDING"


def _check_parts_agree(parts: list) -> None:
    """Raise ValueError if a tensor's row shape (all but dimension 0), TypeError if its dtype,
    differs between ``parts`` (DataProtos with a batch).

    ``torch.cat`` names neither the key nor the part for a shape that differs, and it
    would promote the mixed parts to one dtype, and int64 ids promoted to
    float32 are rounded above 2**24: data lost without a word.
    """
    for key in parts[0].batch.keys():
        first = parts[0].batch[key].dtype
        shape = tuple(parts[0].batch[key].shape[1:])
        for index, part in enumerate(parts[1:], start=1):
            if key in part.batch.keys() and tuple(part.batch[key].shape[1:]) != shape:
                other = tuple(part.batch[key].shape[1:])
                raise ValueError(
                    f"DataProto.concat: {key!r} has rows of shape {shape} in part 0 but "
                    f"{other} in part {index}; the parts stack along rows only, so every "
                    f"other dimension must agree (pad or cut {key!r} to one length first)"
                )
            if key in part.batch.keys() and part.batch[key].dtype != first:
                other = part.batch[key].dtype
                raise TypeError(
                    f"DataProto.concat: {key!r} is {first} in part 0 but {other} in part "
                    f"{index}; torch.cat would turn both into {torch.promote_types(first, other)}"
                    f" and could round the values. Convert the parts to one dtype first, e.g. "
                    f"part.batch[{key!r}] = part.batch[{key!r}].to({first})"
                )


class BatchSplitError(ValueError):
    """A batch cannot be cut into equal parts (raised by ``DataProto.chunk``)."""


@dataclass(eq=False)
class DataProtoItem:
    """One row of a DataProto, as returned by ``data[i]`` for an integer ``i``.

    ``batch`` is a TensorDict with ``batch_size == []`` (each tensor loses its first dim),
    ``non_tensor_batch`` maps each key to that row's element, ``meta_info`` is shared.
    """

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, Any] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)


# eq=False: a generated __eq__ would compare TensorDicts with ==, which returns a TensorDict.
@dataclass(eq=False)
class DataProto:
    """A batch of ``len(self)`` rows: tensors, numpy arrays, and batch-wide meta_info.

    Args:
        batch: TensorDict with exactly one batch dimension, ``batch_size == [B]``, or None.
        non_tensor_batch: ``dict[str, np.ndarray]``, each array of shape ``(B, ...)``;
            ``dtype=object`` is allowed. None means ``{}``.
        meta_info: any dict; not split by row operations (each part gets the same dict).

    Raises:
        TypeError: ``batch`` is not a TensorDict, or a non_tensor_batch value is not an ndarray.
        ValueError: the first dimensions disagree (the message names the key and both sizes).
    """

    batch: TensorDict | None = None
    non_tensor_batch: dict[str, np.ndarray] | None = None
    meta_info: dict[str, Any] | None = None

    def __post_init__(self):
        if self.non_tensor_batch is None:
            self.non_tensor_batch = {}
        if self.meta_info is None:
            self.meta_info = {}
        self.check_consistency()

    def check_consistency(self) -> None:
        """Check that every tensor and array has the same first dimension.

        Raises TypeError for a wrong container type and ValueError for a size mismatch.
        Public, as in veRL, so callers can re-check after editing fields by hand.
        """
        if self.batch is not None:
            from tensordict import TensorDict

            if not isinstance(self.batch, TensorDict):
                raise TypeError(f"batch must be a TensorDict or None, got {type(self.batch)}")
            if len(self.batch.batch_size) != 1:
                raise ValueError(
                    "batch must have exactly one batch dimension, "
                    f"got batch_size={list(self.batch.batch_size)}"
                )
        for key, val in self.non_tensor_batch.items():
            if not isinstance(val, np.ndarray):
                raise TypeError(f"non_tensor_batch[{key!r}] must be a numpy array, got {type(val)}")
            if val.ndim == 0:
                raise ValueError(
                    f"non_tensor_batch[{key!r}] is 0-dimensional; it needs a batch dim"
                )
        size = len(self)
        for key, val in self.non_tensor_batch.items():
            if val.shape[0] != size:
                raise ValueError(
                    f"non_tensor_batch[{key!r}] has length {val.shape[0]} "
                    f"but the batch size is {size}"
                )

    # ---- pickling (how a DataProto travels through Ray's object store) -----------------

    def __getstate__(self) -> dict:
        # Why not pickle the TensorDict? torch serialises each storage into a byte
        # string, and ray.get pays for several copies of every byte. A flat uint8
        # numpy view instead lets pickle protocol 5 hand the buffer to Ray out of
        # band: ray.put writes it once into the object store, ray.get maps it
        # without copying, and __setstate__ makes the one copy a writable tensor
        # needs. docs/verl/dataproto.md measures the difference.
        tensors = None
        if self.batch is not None:
            tensors = {
                key: _tensor_to_bytes(value)
                for key, value in self.batch.items(include_nested=True, leaves_only=True)
            }
            batch_size = list(self.batch.batch_size)
        return {
            "tensors": tensors,
            "batch_size": batch_size if tensors is not None else None,
            "non_tensor_batch": self.non_tensor_batch,
            "meta_info": self.meta_info,
        }

    def __setstate__(self, state: dict) -> None:
        self.batch = None
        if state["tensors"] is not None:
            from tensordict import TensorDict

            self.batch = TensorDict({}, batch_size=state["batch_size"])
            for key, packed in state["tensors"].items():
                self.batch.set(key, _tensor_from_bytes(*packed))
        self.non_tensor_batch = state["non_tensor_batch"]
        self.meta_info = state["meta_info"]

    def __len__(self) -> int:
        if self.batch is not None:
            return self.batch.batch_size[0]
        if self.non_tensor_batch:
            first = next(iter(self.non_tensor_batch.values()))
            return first.shape[0] if first.ndim else 0
        return 0

    # ---- construction -------------------------------------------------------------------

    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict[str, Any] | None = None,
        meta_info: dict[str, Any] | None = None,
        auto_padding: bool = False,
    ) -> DataProto:
        """Build a DataProto from ``{key: tensor of shape (B, ...)}`` and ``{key: array of B}``.

        A non-tensor value that is not already an ndarray (a list, say) becomes
        ``np.array(value, dtype=object)``. ``auto_padding=True`` sets
        ``meta_info[AUTO_PADDING_KEY] = True``. The input dicts are not modified.

        Raises ValueError if the tensors' first dimensions differ (names both keys and sizes)
        or a tensor is 0-dimensional; see ``check_consistency`` for the non-tensors.
        veRL's ``num_batch_dims`` has no counterpart here.
        """
        tensors = tensors or {}
        meta_info = dict(meta_info or {})
        if auto_padding:
            meta_info[AUTO_PADDING_KEY] = True
        non_tensor_batch = {
            key: val if isinstance(val, np.ndarray) else np.array(val, dtype=object)
            for key, val in (non_tensors or {}).items()
        }
        batch = None
        if tensors:
            first_key, first = next(iter(tensors.items()))
            for key, tensor in tensors.items():
                if tensor.dim() == 0:
                    raise ValueError(f"tensor {key!r} is 0-dimensional; it needs a batch dimension")
                if tensor.shape[0] != first.shape[0]:
                    raise ValueError(
                        f"tensors disagree on the batch size: {first_key!r} has "
                        f"{first.shape[0]}, {key!r} has {tensor.shape[0]}"
                    )
            from tensordict import TensorDict

            batch = TensorDict(tensors, batch_size=[first.shape[0]])
        return cls(batch=batch, non_tensor_batch=non_tensor_batch, meta_info=meta_info)

    @classmethod
    def from_single_dict(
        cls,
        data: dict[str, torch.Tensor | np.ndarray],
        meta_info: dict[str, Any] | None = None,
        auto_padding: bool = False,
    ) -> DataProto:
        """Like ``from_dict``, but one dict: tensors go to ``batch``, ndarrays to non_tensor_batch.

        Raises TypeError for any other value type (veRL raises ValueError here).
        """
        tensors, non_tensors = {}, {}
        for key, val in data.items():
            if isinstance(val, torch.Tensor):
                tensors[key] = val
            elif isinstance(val, np.ndarray):
                non_tensors[key] = val
            else:
                raise TypeError(f"{key!r} must be a torch.Tensor or np.ndarray, got {type(val)}")
        return cls.from_dict(tensors, non_tensors, meta_info, auto_padding=auto_padding)

    # ---- columns: select, pop, union -----------------------------------------------------

    def select(
        self,
        batch_keys: list[str] | None = None,
        non_tensor_batch_keys: list[str] | None = None,
        meta_info_keys: list[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """Return a DataProto with only the given keys; None for a part keeps all its keys.

        Without ``deepcopy`` the result shares tensors, arrays and meta values with ``self``
        (new dicts, same data). With ``deepcopy=True`` everything is copied, the tensors too.
        Missing ``batch_keys`` raise KeyError; missing non-tensor and meta keys are skipped,
        as in veRL.
        """
        batch = self.batch
        if batch_keys is not None:
            missing = [key for key in batch_keys if batch is None or key not in batch.keys()]
            if missing:
                raise KeyError(f"batch has no keys {missing}")
            batch = batch.select(*batch_keys)
        non_tensor_batch = {
            key: val
            for key, val in self.non_tensor_batch.items()
            if non_tensor_batch_keys is None or key in non_tensor_batch_keys
        }
        meta_info = {
            key: val
            for key, val in self.meta_info.items()
            if meta_info_keys is None or key in meta_info_keys
        }
        if deepcopy:
            batch = batch.clone() if batch is not None else None
            non_tensor_batch = copy.deepcopy(non_tensor_batch)
            meta_info = copy.deepcopy(meta_info)
        return DataProto(batch=batch, non_tensor_batch=non_tensor_batch, meta_info=meta_info)

    def pop(
        self,
        batch_keys: list[str] | None = None,
        non_tensor_batch_keys: list[str] | None = None,
        meta_info_keys: list[str] | None = None,
    ) -> DataProto:
        """Remove the given keys from ``self`` and return them as a new DataProto.

        Raises KeyError (before removing anything) if a key is missing.
        """
        batch_keys = batch_keys or []
        non_tensor_batch_keys = non_tensor_batch_keys or []
        meta_info_keys = meta_info_keys or []
        batch_names = list(self.batch.keys()) if self.batch is not None else []
        for keys, present, part in [
            (batch_keys, batch_names, "batch"),
            (non_tensor_batch_keys, self.non_tensor_batch, "non_tensor_batch"),
            (meta_info_keys, self.meta_info, "meta_info"),
        ]:
            missing = [key for key in keys if key not in present]
            if missing:
                raise KeyError(f"{part} has no keys {missing}")
        return DataProto.from_dict(
            tensors={key: self.batch.pop(key) for key in batch_keys},
            non_tensors={key: self.non_tensor_batch.pop(key) for key in non_tensor_batch_keys},
            meta_info={key: self.meta_info.pop(key) for key in meta_info_keys},
        )

    def union(self, other: DataProto) -> DataProto:
        """Merge ``other``'s keys into ``self`` (in place) and return ``self``.

        A key present in both must hold equal values (same dtype and shape; object arrays
        compare element by element; NaN equals NaN outside tensors, as in veRL). Nothing is
        merged if any check fails.
        Raises ValueError naming the part and key on a conflict, or both sizes if the batch
        sizes differ.
        """
        if _has_rows(self) and _has_rows(other) and len(self) != len(other):
            raise ValueError(f"cannot union batches of size {len(self)} and {len(other)}")
        parts = [
            ("non_tensor_batch", self.non_tensor_batch, other.non_tensor_batch),
            ("meta_info", self.meta_info, other.meta_info),
        ]
        if self.batch is not None and other.batch is not None:
            parts.insert(0, ("batch", self.batch, other.batch))
        for part, mine, theirs in parts:
            for key in theirs.keys():
                if key in mine.keys() and not _same_value(mine[key], theirs[key]):
                    raise ValueError(f"union conflict: {part}[{key!r}] differs")
        if self.batch is None and other.batch is not None:
            # A shallow copy, so that a later pop() on self leaves other intact.
            self.batch = other.batch.clone(recurse=False)
        for _, mine, theirs in parts:
            for key, val in theirs.items():
                mine[key] = val
        return self

    # ---- rows: index, chunk, split, concat, repeat --------------------------------------

    def __getitem__(self, item):
        """Index rows.

        - ``int``: a ``DataProtoItem`` (one row; veRL's choice, kept so that loops like
          ``for i in range(len(data)): data[i].batch["responses"]`` port unchanged);
        - ``slice``: a DataProto view of those rows (``self.slice``);
        - list / np.ndarray / torch.Tensor of ints or bools: a DataProto of those rows,
          copied (``self.select_idxs``).

        meta_info is shared with ``self``. Raises TypeError for other index types.
        """
        if isinstance(item, slice):
            return self.slice(item.start, item.stop, item.step)
        if isinstance(item, (list, np.ndarray, torch.Tensor)):
            return self.select_idxs(item)
        if isinstance(item, (int, np.integer)):
            return DataProtoItem(
                batch=self.batch[item] if self.batch is not None else None,
                non_tensor_batch={key: val[item] for key, val in self.non_tensor_batch.items()},
                meta_info=self.meta_info,
            )
        raise TypeError(
            f"DataProto indices must be int, slice, list, ndarray or Tensor, not {item!r}"
        )

    def slice(self, start=None, end=None, step=None) -> DataProto:
        """Rows ``start:end:step`` (views, not copies)."""
        rows = slice(start, end, step)
        return DataProto(
            batch=self.batch[rows] if self.batch is not None else None,
            non_tensor_batch={key: val[rows] for key, val in self.non_tensor_batch.items()},
            meta_info=self.meta_info,
        )

    def select_idxs(self, idxs) -> DataProto:
        """Rows at 1-D integer indices or a boolean mask of length ``len(self)``.

        Raises IndexError for a non 1-D index.
        """
        if isinstance(idxs, torch.Tensor):
            idxs = idxs.detach().cpu().numpy()
        idxs = np.asarray(idxs)
        if idxs.ndim != 1:
            raise IndexError(f"row indices must be 1-D, got shape {idxs.shape}")
        if idxs.dtype != np.bool_:
            idxs = idxs.astype(np.int64)  # an empty list arrives as float64
        return DataProto(
            batch=self.batch[torch.from_numpy(idxs)] if self.batch is not None else None,
            non_tensor_batch={key: val[idxs] for key, val in self.non_tensor_batch.items()},
            meta_info=self.meta_info,
        )

    def chunk(self, chunks: int) -> list[DataProto]:
        """Cut into ``chunks`` equal parts of ``len(self) // chunks`` rows, in order.

        Each part is a view and shares ``meta_info``. Raises ValueError if ``chunks < 1`` and
        BatchSplitError if ``len(self) % chunks != 0``. Unlike veRL, chunk never makes unequal
        parts, even with auto padding on: the worker group pads before it chunks.
        """
        if chunks < 1:
            raise ValueError(f"chunks must be >= 1, got {chunks}")
        if len(self) % chunks != 0:
            raise BatchSplitError(
                f"cannot chunk a batch of size {len(self)} into {chunks} equal parts: "
                f"pad it with pad_dataproto_to_divisor(data, {chunks}), or set "
                f"data.meta_info[{AUTO_PADDING_KEY!r}] = True so that the worker group pads and "
                "unpads for you"
            )
        size = len(self) // chunks
        return [self[i * size : (i + 1) * size] for i in range(chunks)]

    def split(self, split_size: int) -> list[DataProto]:
        """Cut into parts of ``split_size`` rows; the last may be shorter (like torch.split).

        Raises ValueError if ``split_size < 1``.
        """
        if split_size < 1:
            raise ValueError(f"split_size must be >= 1, got {split_size}")
        return [self[i : i + split_size] for i in range(0, len(self), split_size)]

    @staticmethod
    def concat(data: list[DataProto]) -> DataProto:
        """Stack DataProtos row-wise; ``meta_info`` is a copy of the first one's.

        Raises ValueError for an empty list, for a mix of batch / no batch, for parts
        whose tensor or non-tensor keys differ, and for a tensor whose shape beyond the
        rows differs between parts (naming the key); TypeError for a tensor whose dtype differs
        between parts (veRL promotes it silently: int64 ids concatenated with a float32 part
        become float32 and lose their low digits above 2**24). Follows ``verl/protocol.py``
        (``DataProto.concat``) in veRL 0.9.1, except for the dtype check and meta_info:
        veRL merges it across parts (equal keys must agree, "metrics" dicts are gathered
        into lists); here the first part's is kept.
        """
        if not data:
            raise ValueError("DataProto.concat needs at least one DataProto, got an empty list")
        has_batch = [d.batch is not None for d in data]
        if any(has_batch) and not all(has_batch):
            raise ValueError("cannot concat DataProtos with a batch and DataProtos without one")
        batch = None
        if all(has_batch):
            _check_parts_agree(data)
            batch = torch.cat([d.batch for d in data], dim=0)
        keys = set(data[0].non_tensor_batch)
        for d in data[1:]:
            if set(d.non_tensor_batch) != keys:
                raise ValueError(
                    f"non_tensor_batch keys differ: {sorted(keys)} vs {sorted(d.non_tensor_batch)}"
                )
        non_tensor_batch = {
            key: np.concatenate([d.non_tensor_batch[key] for d in data]) for key in keys
        }
        return DataProto(
            batch=batch, non_tensor_batch=non_tensor_batch, meta_info=dict(data[0].meta_info)
        )

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Repeat every row ``repeat_times`` times: ``len(out) == len(self) * repeat_times``.

        ``interleave=True``: rows ``[a, b]`` become ``[a, a, b, b]``, so the n samples of one
        prompt are adjacent (GRPO groups). ``interleave=False``: ``[a, b, a, b]`` (tile).
        The result is a copy.
        """
        rows = np.arange(len(self))
        order = np.repeat(rows, repeat_times) if interleave else np.tile(rows, repeat_times)
        return self.select_idxs(order)

    # ---- padding, device ------------------------------------------------------------------

    def is_padding_enabled(self) -> bool:
        """True if ``meta_info["_verl_auto_padding"]`` is set, or the environment variable
        ``VERL_AUTO_PADDING`` is ``1``/``true``: the worker group then pads this batch to a
        multiple of its world size before chunking, and unpads the outputs.

        Follows ``verl/protocol.py`` (``DataProto.is_padding_enabled``, ``DataProtoConfig``) in
        veRL 0.9.1; veRL's programmatic switch ``DataProtoConfig.auto_padding = True`` has no
        counterpart here.
        """
        by_env = os.environ.get(AUTO_PADDING_ENV, "false").lower() in ("1", "true")
        return by_env or bool(self.meta_info.get(AUTO_PADDING_KEY, False))

    def to(self, device: torch.device | str) -> DataProto:
        """Move ``batch`` to ``device`` in place and return ``self`` (numpy data stays on CPU)."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self


def _tensor_to_bytes(tensor: torch.Tensor) -> tuple[np.ndarray, str, tuple[int, ...]]:
    """A tensor as (flat uint8 numpy view, dtype name, shape); moves it to the CPU."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return (
        flat.view(torch.uint8).numpy(),
        str(flat.dtype).removeprefix("torch."),
        tuple(tensor.shape),
    )


def _tensor_from_bytes(data: np.ndarray, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Inverse of ``_tensor_to_bytes``: one copy, into a writable tensor of its own."""
    return torch.from_numpy(data.copy()).view(getattr(torch, dtype)).reshape(shape)


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Pad ``data`` to the next multiple of ``size_divisor`` rows.

    The padding rows repeat rows from the start (0, 1, 2, ..., wrapping around if more
    padding than rows is needed), so they are valid inputs for any model.
    Returns ``(padded, pad_size)``; ``padded is data`` when ``pad_size == 0``. Raises
    ValueError if ``size_divisor < 1``.
    """
    if size_divisor < 1:
        raise ValueError(f"size_divisor must be >= 1, got {size_divisor}")
    pad_size = -len(data) % size_divisor
    if pad_size == 0:
        return data, 0
    padding = data[np.arange(pad_size) % len(data)]
    return DataProto.concat([data, padding]), pad_size


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Drop the last ``pad_size`` rows, undoing ``pad_dataproto_to_divisor``.

    Raises ValueError if ``pad_size`` is negative or larger than ``len(data)``.
    """
    if not 0 <= pad_size <= len(data):
        raise ValueError(f"pad_size must be in [0, {len(data)}], got {pad_size}")
    return data[: len(data) - pad_size] if pad_size else data


def _has_rows(data: DataProto) -> bool:
    return data.batch is not None or bool(data.non_tensor_batch)


def _same_value(a: Any, b: Any) -> bool:
    """Equality for union's conflict check: tensors and arrays elementwise (same dtype and
    shape), NaN equal to NaN, anything else with ``==``."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        both = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
        return both and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype != object:
            return np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
        return all(_same_value(x, y) for x, y in zip(a.flat, b.flat, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def _take_chunk(data: DataProto, index: int, chunks: int) -> DataProto:
    # Module level, not a closure, so a DataProtoFuture pickles into a Ray worker.
    return data.chunk(chunks)[index]


@dataclass
class DataProtoFuture:
    """A DataProto that does not exist yet: Ray ObjectRefs plus how to assemble them.

    ``get()`` runs ``dispatch_fn(collect_fn(ray.get(futures)))``: fetch every part, join
    them (``collect_fn``, usually ``DataProto.concat``), then keep this receiver's share
    (``dispatch_fn``, None for all of it). The driver passes a future on to the next
    worker-group call without waiting; only the worker calls ``get()``, so the data moves
    from the producing workers straight to the consuming ones.
    """

    collect_fn: Callable[[list[DataProto]], DataProto]
    futures: list[ray.ObjectRef]
    dispatch_fn: Callable[[DataProto], DataProto] | None = None

    @staticmethod
    def concat(data: list[ray.ObjectRef]) -> DataProtoFuture:
        """A future for the row-wise concat of the DataProtos behind ``data``."""
        return DataProtoFuture(collect_fn=DataProto.concat, futures=data)

    def chunk(self, chunks: int) -> list[DataProtoFuture]:
        """``chunks`` futures; the i-th resolves the whole, then keeps ``whole.chunk(chunks)[i]``.

        Nothing is fetched here; BatchSplitError surfaces at ``get()`` time. As in veRL, the
        shares replace any ``dispatch_fn`` of ``self``: chunk a future that holds the whole.
        """
        return [
            DataProtoFuture(
                collect_fn=self.collect_fn,
                futures=self.futures,
                dispatch_fn=partial(_take_chunk, index=i, chunks=chunks),
            )
            for i in range(chunks)
        ]

    def get(self) -> DataProto:
        """Fetch, collect and dispatch (blocks until every ObjectRef is ready)."""
        output = self.collect_fn(ray.get(self.futures))
        if self.dispatch_fn is not None:
            output = self.dispatch_fn(output)
        return output
