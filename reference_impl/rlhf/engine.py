"""The training engine's plumbing: FSDP2 sharding, gathering full weights, checkpoints.

* :func:`shard` wraps a Hugging Face decoder with FSDP2 (``fully_shard``), one
  unit per decoder layer plus the root, as veRL 0.9.1's FSDP engine does
  (``verl/utils/fsdp_utils.py`` (``apply_fsdp2``), which also gives untied embeddings
  and the output layer units of their own). Each rank then keeps ``1 / fsdp_size``
  of every parameter, gradient and optimiser state (``1 / world_size`` by default).
* :func:`copy_full_weights` all-gathers the sharded weights (one collective per FSDP
  unit) and copies them into the plain rollout model: our hybrid engine's switch from
  training to generation. veRL 0.9.1 gathers one parameter at a time
  (``verl/workers/engine/fsdp/transformer_impl.py`` (``FSDPEngine.get_per_tensor_param``)),
  and then streams the tensors over CUDA IPC to a vLLM or SGLang server in another process
  (``verl/workers/engine_workers.py`` (``ActorRolloutRefWorker.update_weights``)); we
  copy them into a rollout model in the same process instead. :func:`full_state_dict`
  returns the same weights as a state dict, gathered one tensor at a time.
* :func:`rollout_copy` makes that rollout model: parameters in bf16 on GPU, the rotary
  embedding's frequencies left in fp32.
* :func:`device_mesh` builds veRL's mesh from ``fsdp_size``: every parameter split over
  all ranks (the default), or over groups of ``fsdp_size`` ranks that are replicated.
* :func:`save` / :func:`load` write and read a sharded checkpoint with
  ``torch.distributed.checkpoint`` (each rank writes its own shards), plus the
  per-rank random-number state, so a resumed run repeats the same samples.

Works on CPU with gloo and on GPU with NCCL: the device mesh follows the device.
Follows ``verl/workers/engine/fsdp/transformer_impl.py`` (``FSDPEngine``) and
``verl/utils/fsdp_utils.py`` of veRL 0.9.1 in spirit; see PyTorch's FSDP2 tutorial
for ``fully_shard``.
"""

from __future__ import annotations

import copy
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard


def ensure_process_group(worker, device: str) -> None:
    """Join the worker's torch.distributed group unless a colocated role already did.

    Colocated roles live in one process and share one process group, so only the first
    role to start initialises it; veRL 0.9.1 makes the same check
    (``verl/utils/distributed.py`` (``initialize_global_process_group_ray``)).
    """
    if not dist.is_initialized():
        worker.init_process_group(backend="nccl" if device == "cuda" else "gloo")


def device_mesh(device: str, fsdp_size: int = -1):
    """The mesh FSDP2 shards over: all ranks, or replicas of ``fsdp_size``-rank shard groups.

    ``fsdp_size`` < 0 or >= the world size: one dimension, ``("fsdp",)``, every parameter
    split over all ranks (ZeRO-3). Otherwise two, ``("ddp", "fsdp")`` of shape
    ``(world_size // fsdp_size, fsdp_size)``: each parameter is split over ``fsdp_size``
    ranks and that group is replicated (HSDP); with ``fsdp_size=1`` every rank holds whole
    parameters and the backward pass all-reduces gradients, as DDP does. veRL 0.9.1 builds
    the same mesh from the same knob (``verl/workers/engine/fsdp/utils.py``
    (``create_device_mesh``)).

    Raises:
        ValueError: ``fsdp_size`` is 0 or does not divide the world size.
    """
    world = dist.get_world_size()
    if fsdp_size < 0 or fsdp_size >= world:
        return init_device_mesh(device, (world,), mesh_dim_names=("fsdp",))
    if fsdp_size == 0 or world % fsdp_size:
        raise ValueError(
            f"fsdp_size={fsdp_size} must divide the world size {world} (or be -1 to shard "
            "over all ranks)"
        )
    return init_device_mesh(device, (world // fsdp_size, fsdp_size), mesh_dim_names=("ddp", "fsdp"))


def shard(
    model: torch.nn.Module,
    device: str,
    fsdp_size: int = -1,
    reshard_after_forward: bool = True,
) -> torch.nn.Module:
    """Shard ``model`` in place with FSDP2 over the ranks of :func:`device_mesh`; returns it.

    ``model`` must have ``.model.layers`` (Hugging Face decoder layout) and fp32
    parameters. On GPU, forward and backward run in bf16 while the sharded fp32
    parameters (the "master weights") take the optimiser step and gradients are
    reduced in fp32, veRL 0.9.1's default ``MixedPrecisionPolicy``
    (``verl/workers/engine/fsdp/transformer_impl.py`` (``FSDPEngine._build_fsdp_module``)):
    a small update such as ``1e-5 * g`` would vanish if added to bf16 weights directly.

    Args:
        fsdp_size: ranks each parameter is split over (-1: all); see :func:`device_mesh`.
        reshard_after_forward: free the gathered parameters after the forward pass (and
            gather them again for the backward), veRL's ``fsdp_config.reshard_after_forward``
            (default True); False keeps them from forward to backward: one all-gather per
            unit and optimiser step instead of two, for the memory of whole parameters.

    Raises:
        ValueError: ``fsdp_size`` does not divide the world size.
    """
    mesh = device_mesh(device, fsdp_size)
    policy = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if device == "cuda" else None, reduce_dtype=torch.float32
    )
    options = {"mesh": mesh, "mp_policy": policy, "reshard_after_forward": reshard_after_forward}
    for layer in model.model.layers:
        fully_shard(layer, **options)
    fully_shard(model, **options)
    return model


def rollout_copy(model: torch.nn.Module, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """A copy of ``model`` to sample from, on ``device``: parameters in ``dtype``, buffers kept.

    ``Module.to(dtype)`` would cast the floating-point buffers too, among them the rotary
    embedding's ``inv_freq`` (float32 [head_dim / 2]). Rounded to bf16 (8 significant bits),
    a frequency is off by up to 2**-9 of itself, and the angle ``position * inv_freq`` by as
    much: with Qwen2.5-0.5B's frequencies (head_dim 64, rope_theta 1e6), by up to 0.94 rad
    at position 1,000 and 1.45 rad at 1,536 (computed). The actor keeps float32 buffers
    (FSDP2's ``MixedPrecisionPolicy`` casts parameters only: :func:`shard`), so the sampler
    would then score long responses under different positions than the actor's log-prob
    pass. Parameters change later only in place (:func:`copy_full_weights`), as a CUDA
    graph needs (``reference_impl/rlhf/static_rollout.py``).
    """
    rollout = copy.deepcopy(model).to(device)
    with torch.no_grad():
        for param in rollout.parameters():
            param.data = param.data.to(dtype)  # the same Parameter object, its tensor cast
    return rollout.eval()


def copy_full_weights(sharded: torch.nn.Module, dest: torch.nn.Module) -> None:
    """Copy the whole parameters of the FSDP2 module ``sharded`` into the plain ``dest``.

    Every FSDP2 unit is unsharded at once (one all-gather per unit, all in flight
    together), each parameter is copied into ``dest``'s parameter of the same name
    (converted to its dtype), and the units are resharded. On every rank (a collective:
    all ranks must call it). veRL 0.9.1 gathers one tensor at a time instead
    (``verl/workers/engine/fsdp/transformer_impl.py`` (``FSDPEngine.get_per_tensor_param``)),
    which bounds the memory of a 70B model; at this size one gather per unit is faster
    than :func:`full_state_dict`'s one per tensor.

    Raises:
        ValueError: the two modules do not have the same parameter names.
    """
    units = [m for m in sharded.modules() if isinstance(m, FSDPModule)]
    for handle in [unit.unshard(async_op=True) for unit in units]:
        if handle is not None:
            handle.wait()
    try:
        ours, theirs = dict(sharded.named_parameters()), dict(dest.named_parameters())
        if ours.keys() != theirs.keys():
            differ = sorted(ours.keys() ^ theirs.keys())
            raise ValueError(
                f"cannot copy weights: parameter names differ ({differ}); dest must be "
                "built from the same model config as the sharded model"
            )
        with torch.no_grad():
            for name, param in theirs.items():
                param.copy_(ours[name])
    finally:
        for unit in units:
            unit.reshard()


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter of a sharded ``model`` as a whole tensor, on every rank (one all-gather)."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def clip_grad_norm(model: torch.nn.Module, max_norm: float) -> float:
    """Clip the (sharded) gradients to a global norm of ``max_norm``; return the norm before."""
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    # With FSDP2 the norm is a DTensor; its full value is the global norm.
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


def _sharded_state(models: dict, optimizers: dict) -> dict:
    """``{name: {"model": ..., "optim": ...}}`` of DTensor shards: what DCP reads and writes."""
    state = {}
    for name, model in models.items():
        if name in optimizers:
            model_sd, optim_sd = get_state_dict(model, optimizers[name])
            state[name] = {"model": model_sd, "optim": optim_sd}
        else:
            state[name] = {"model": get_model_state_dict(model)}
    return state


def save(path: str, models: dict, optimizers: dict, rng: dict) -> None:
    """Save sharded models and optimisers under ``path`` and this rank's RNG states.

    Args:
        models: ``{name: FSDP2 module}``; optimizers: ``{name: optimizer of models[name]}``.
        rng: ``{name: torch.Generator}``; the global torch RNG is saved as well.
    """
    dcp.save(_sharded_state(models, optimizers), checkpoint_id=path)
    rank_rng = {name: g.get_state() for name, g in rng.items()}
    rank_rng["torch"] = torch.get_rng_state()
    torch.save(rank_rng, os.path.join(path, f"rng_rank{dist.get_rank()}.pt"))


def load_checkpoint_file(path: str, rank: int | None = None) -> dict:
    """``torch.load`` one checkpoint file (``weights_only``), for the driver or a rank.

    Raises:
        RuntimeError: the file is damaged or missing; the message names it (and the rank),
            and says how to resume from an earlier step instead.
    """
    try:
        return torch.load(path, weights_only=True)
    except Exception as err:  # torch raises several types for a damaged file
        where = path if rank is None else f"{path} on rank {rank}"
        raise RuntimeError(
            f"cannot load checkpoint {where}: {err}; the file is damaged (a run killed while "
            "saving?). Write the N of an earlier complete global_step_N into "
            "latest_checkpointed_iteration.txt, or start without --resume"
        ) from err


def load(path: str, models: dict, optimizers: dict, rng: dict) -> None:
    """Load what :func:`save` wrote into the same (already sharded) models and optimisers.

    Raises:
        RuntimeError: a shard or this rank's RNG file is missing or damaged; the message
            names ``path`` and the rank.
    """
    state = _sharded_state(models, optimizers)
    rank = dist.get_rank()
    try:
        dcp.load(state, checkpoint_id=path)  # fills the tensors of ``state`` in place
    # dcp gathers the ranks' read errors into a CheckpointException, a BaseException, so
    # that ``except Exception`` alone would let it through unnamed.
    except (Exception, dcp.CheckpointException) as err:
        raise RuntimeError(
            f"cannot load checkpoint {path} on rank {rank}: {err}; a shard is missing or "
            "damaged (a run killed while saving?). Point latest_checkpointed_iteration.txt "
            "at an earlier complete global_step_N, or start without --resume"
        ) from err
    for name, model in models.items():
        if name in optimizers:
            set_state_dict(
                model,
                optimizers[name],
                model_state_dict=state[name]["model"],
                optim_state_dict=state[name]["optim"],
            )
        else:
            set_model_state_dict(model, state[name]["model"])
    rank_rng = load_checkpoint_file(os.path.join(path, f"rng_rank{rank}.pt"), rank)
    for name, generator in rng.items():
        generator.set_state(rank_rng[name])
    torch.set_rng_state(rank_rng["torch"])
