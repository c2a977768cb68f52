"""The roles of the pipeline, as Workers the single controller drives.

* :class:`ActorRolloutRefWorker` holds three models in one process, our form of
  veRL's hybrid engine: the **actor** (trained, FSDP2-sharded), the **rollout** copy
  (whole weights, refreshed from the actor by an all-gather before every generation)
  and the frozen **reference** policy. The same weights train and generate.
* :class:`CriticWorker` holds the value model (PPO only).

Every public method is ``@register``-ed: ``DP_COMPUTE_PROTO`` splits the
controller's ``DataProto`` across ranks and concatenates the results;
``ONE_TO_ALL`` sends the same arguments to every rank. Metrics are averaged
over ranks with an all-reduce, so rank 0's ``meta_info["metrics"]`` (the one
the collected DataProto keeps) is the global value.

Follows veRL 0.9.1's ``verl/workers/engine_workers.py`` (``ActorRolloutRefWorker``,
``TrainingWorker``), with these simplifications:

* veRL's ``ActorRolloutRefWorker`` wraps one ``TrainingWorker`` for the actor and one
  for the reference, each driving a training engine (``verl/workers/engine/fsdp/``,
  ``verl/workers/engine/megatron/``); its critic is a plain ``TrainingWorker`` with a
  value head. Our :class:`CriticWorker` is that critic under the name older veRL
  releases gave it.
* veRL's worker holds no inference engine: its ``rollout`` attribute is an adapter to a
  vLLM or SGLang server that runs in separate Ray actors on the same GPUs
  (``verl/workers/rollout/vllm_rollout/vllm_async_server.py`` (``vLLMHttpServer``)).
  Prompts reach those servers from ``AgentLoopWorker`` actors
  (``verl/experimental/agent_loop/agent_loop.py``), not through a WorkerGroup call, and
  the trained weights reach them over CUDA IPC
  (``verl/workers/engine_workers.py`` (``ActorRolloutRefWorker.update_weights``)). Here the
  rollout model sits in the worker's own process and :meth:`generate_sequences` is a
  WorkerGroup call.
* veRL's methods take ``TensorDict`` batches (or TransferQueue keys) and dispatch with
  ``make_nd_compute_dataproto_dispatch_fn``; the PPO losses are ``ppo_loss`` and
  ``value_loss`` in ``verl/workers/utils/losses.py``, run once per mini-batch by
  ``TrainingWorker.train_mini_batch``.

The docs walk through it in ``docs/rlhf/``.
"""

from __future__ import annotations

import copy
import time

import torch
import torch.distributed as dist

from reference_impl.data_proto import DataProto
from reference_impl.decorator import Dispatch, register
from reference_impl.rlhf import core_algos, engine, packing
from reference_impl.rlhf.config import RLHFConfig
from reference_impl.rlhf.metrics import device_peak_flops
from reference_impl.rlhf.model import build_actor, build_critic, qwen2_config
from reference_impl.rlhf.rollout import generate, response_log_probs
from reference_impl.rlhf.static_rollout import StaticRollout
from reference_impl.rlhf.tokenizer import CharTokenizer
from reference_impl.worker import Worker


def average_over_ranks(metrics: dict[str, float]) -> dict[str, float]:
    """The mean of each metric over all ranks (one all-reduce)."""
    names = sorted(metrics)
    values = torch.tensor([float(metrics[k]) for k in names], dtype=torch.float64)
    if torch.cuda.is_available() and dist.get_backend() == "nccl":
        values = values.cuda()
    dist.all_reduce(values)
    return {k: v / dist.get_world_size() for k, v in zip(names, values.tolist(), strict=True)}


def metrics_of(steps: list[dict[str, float]]) -> DataProto:
    """A DataProto whose meta_info holds each metric's mean over optimiser steps and ranks."""
    means = {name: sum(step[name] for step in steps) / len(steps) for name in steps[0]}
    return DataProto(meta_info={"metrics": average_over_ranks(means)})


def make_optimizer(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    """AdamW over ``model``'s (sharded) parameters, torch's defaults otherwise, fused.

    ``fused=True`` runs the update of all parameters as one kernel call per step. Without
    it, on CPU, torch takes its per-tensor loop, a dozen operations per parameter, each
    dispatched through DTensor's sharding rules: about a third of the optimiser's time at
    the ``cpu`` preset's size. The arithmetic is AdamW's either way. veRL 0.9.1 passes such
    options through ``override_optimizer_config`` (``verl/workers/config/optimizer.py``
    (``build_optimizer``)).
    """
    return torch.optim.AdamW(model.parameters(), lr=lr, fused=True)


def mini_batches(data: DataProto, size: int, epochs: int, generator: torch.Generator):
    """``epochs`` passes over ``data`` in shuffled mini-batches of ``size`` rows."""
    for _ in range(epochs):
        order = torch.randperm(len(data), generator=generator)
        for start in range(0, len(data), size):
            yield data.select_idxs(order[start : start + size])


def micro_batches(mini_batch: DataProto, config: RLHFConfig) -> list[DataProto]:
    """The micro-batches one optimiser step accumulates gradients over.

    With ``use_dynamic_bsz``, the rows are grouped by :func:`packing.balanced_micro_batches`
    into micro-batches of at most ``ppo_max_token_len_per_gpu`` valid tokens (veRL 0.9.1:
    ``verl/utils/seqlen_balancing.py`` (``rearrange_micro_batches``)); otherwise runs of
    ``ppo_micro_batch_size_per_gpu`` rows, or the whole mini-batch when that is 0.
    """
    if not config.use_dynamic_bsz:
        size = config.ppo_micro_batch_size_per_gpu or len(mini_batch)
        return [
            mini_batch.select_idxs(torch.arange(start, min(start + size, len(mini_batch))))
            for start in range(0, len(mini_batch), size)
        ]
    lengths = mini_batch.batch["attention_mask"].sum(-1).tolist()
    groups = packing.balanced_micro_batches(lengths, config.ppo_max_token_len_per_gpu)
    return [mini_batch.select_idxs(torch.tensor(rows)) for rows in groups]


def actor_loss(log_prob, entropy, part: dict, mini_batch: dict, config: RLHFConfig):
    """One micro-batch's share of the mini-batch's actor loss, and its metrics' shares.

    Each term is the micro-batch's loss weighted by its share of the mini-batch (valid
    response tokens for "token-mean", sequences for the "seq-mean-*" modes), so the
    gradients summed over micro-batches equal those of the whole mini-batch in one pass,
    and so do the metrics summed over micro-batches. veRL 0.9.1 passes the mini-batch's
    totals to ``agg_loss`` for the same reason (``batch_num_tokens``,
    ``global_batch_size`` in ``verl/trainer/ppo/core_algos.py``).

    Args:
        log_prob: float32 ``[b, R]``, the micro-batch's rows' token log-probs.
        entropy: float32 ``[b, R]``, their entropies.
        part: the micro-batch's tensors (``response_mask``, ``old_log_probs``,
            ``advantages``, ``ref_log_prob``).
        mini_batch: the same keys over the whole mini-batch (for the shares).
        config: the run's config (``loss_agg_mode``, ``clip_ratio``, ``entropy_coeff``).

    Returns:
        ``(loss, metrics)``: a scalar to call ``backward`` on, and 0-d tensors.
    """
    c = config
    mask = part["response_mask"]

    def share(mode: str) -> torch.Tensor:
        if mode == "token-mean":
            return mask.sum() / mini_batch["response_mask"].sum()
        return (mask.sum(-1) > 0).sum() / (mini_batch["response_mask"].sum(-1) > 0).sum()

    loss_share, token_share = share(c.loss_agg_mode), share("token-mean")
    pg_loss, pg_clipfrac, ppo_kl = core_algos.compute_policy_loss(
        part["old_log_probs"], log_prob, part["advantages"], mask, c.clip_ratio, c.loss_agg_mode
    )
    entropy_loss = core_algos.agg_loss(entropy, mask, c.loss_agg_mode)
    loss = pg_loss - c.entropy_coeff * entropy_loss
    metrics = {
        "actor/pg_loss": pg_loss * loss_share,
        "actor/pg_clipfrac": pg_clipfrac * token_share,
        "actor/ppo_kl": ppo_kl * token_share,
        "actor/entropy": entropy_loss * loss_share,
    }
    if c.use_kl_loss:
        kl = core_algos.kl_penalty(log_prob, part["ref_log_prob"], c.kl_loss_type)
        kl_loss = core_algos.agg_loss(kl, mask, c.loss_agg_mode)
        loss = loss + c.kl_loss_coef * kl_loss
        metrics["actor/kl_loss"] = kl_loss * loss_share
    return loss * loss_share, metrics


def warmup_rows(ids: torch.Tensor, step: int, steps: int) -> torch.Tensor:
    """The rows of ``ids`` (one rank's share) that warm-up step ``step`` of ``steps`` trains on."""
    per_step = max(1, len(ids) // steps)
    return ids[(step * per_step) % len(ids) :][:per_step]


def format_loss(model, batch: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """Cross-entropy of the answer tokens of ``batch`` (int64 [b, P + R]) after the prompt."""
    logits = model(input_ids=batch).logits[:, prompt_length - 1 : -1].float()
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), batch[:, prompt_length:].reshape(-1)
    )


class _ModelWorker(Worker):
    """Shared set-up: config, device, model config, per-rank random generators."""

    def __init__(self, config: RLHFConfig) -> None:
        super().__init__()
        self.config = config
        self.device = self.config.device
        # Trained models keep fp32 master weights (engine.shard computes in bf16 on GPU);
        # the rollout copy only generates, so on GPU its parameters are bf16 outright
        # (engine.rollout_copy keeps the rotary frequencies in fp32).
        self.rollout_dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        self.tokenizer = CharTokenizer()
        tok = self.tokenizer
        self.model_config = qwen2_config(
            self.config.model_shape,
            tok.vocab_size,
            tok.pad_token_id,
            tok.bos_token_id,
            tok.eos_token_id,
        )

    def _setup(self) -> None:
        engine.ensure_process_group(self, self.device)
        torch.manual_seed(self.config.seed + self.rank)
        # Shuffling and sampling draw from per-rank generators that checkpoints save.
        self.shuffle_rng = torch.Generator().manual_seed(self.config.seed * 1009 + self.rank)

    def _shard(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` on this worker's device, sharded as the config says (``fsdp_size``, ...)."""
        c = self.config
        return engine.shard(
            model.to(self.device), self.device, c.fsdp_size, c.reshard_after_forward
        )

    def _to_device(self, data: DataProto) -> DataProto:
        return data.to(self.device)

    def _checkpoint_parts(self) -> tuple[dict, dict, dict]:
        """``(models, optimizers, generators)`` that a checkpoint holds; set by each role."""
        raise NotImplementedError

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, path: str) -> None:
        """Write this role's models, optimisers and RNG states under ``path`` (sharded)."""
        engine.save(path, *self._checkpoint_parts())

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, path: str) -> None:
        """Restore what :meth:`save_checkpoint` wrote (the models must already be built)."""
        engine.load(path, *self._checkpoint_parts())


class ActorRolloutRefWorker(_ModelWorker):
    """Actor, rollout and reference policy in one process (our form of the hybrid engine).

    veRL 0.9.1's class of the same name (``verl/workers/engine_workers.py``) keeps the
    actor and the reference here too, but its rollout engine runs in separate server
    actors; see the module docstring.
    """

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> int:
        """Build and shard the actor and the reference policy; return the parameter count."""
        self._setup()
        c = self.config
        # One random initialisation; the reference and the rollout copy start as copies of
        # it (drawing 358M random numbers three times took most of the gpu preset's start).
        model = build_actor(self.model_config, c.seed)
        self.rollout = engine.rollout_copy(model, self.device, self.rollout_dtype)
        self.ref = self._shard(copy.deepcopy(model))
        self.ref.requires_grad_(False)
        self.actor = self._shard(model)
        self.optimizer = make_optimizer(self.actor, c.actor_lr)
        self.sample_rng = torch.Generator(self.device).manual_seed(c.seed * 7919 + self.rank)
        self.static_rollouts: dict[tuple[int, int], StaticRollout] = {}  # enforce_eager=False
        return sum(p.numel() for p in self.rollout.parameters())

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def peak_flops(self) -> float:
        """This rank's peak FLOP/s: the denominator of MFU (:mod:`reference_impl.rlhf.metrics`)."""
        return device_peak_flops(self.device)

    # --- format warm-up: supervised, before RL -------------------------------

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def warmup_format(self, data: DataProto) -> DataProto:
        """Teach the answer format only (digits then EOS, digits at random); then freeze the ref.

        ``data`` holds ``input_ids`` [b, P + R] of prompts followed by random
        well-formed answers and ``prompt_length`` in meta_info. Runs
        ``meta_info["steps"]`` optimiser steps on this rank's share.
        """
        data = self._to_device(data)
        prompt_length, steps = data.meta_info["prompt_length"], data.meta_info["steps"]
        optimizer = make_optimizer(self.actor, self.config.warmup_lr)
        for step in range(steps):
            batch = warmup_rows(data.batch["input_ids"], step, steps)
            loss = format_loss(self.actor, batch, prompt_length)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        # The reference policy is the policy RL starts from: the warmed-up actor.
        with torch.no_grad():
            for ref_param, param in zip(
                self.ref.parameters(), self.actor.parameters(), strict=True
            ):
                ref_param.copy_(param)
        metrics = average_over_ranks({"warmup/loss": loss.item()})
        return DataProto(meta_info={"metrics": metrics})

    # --- rollout -------------------------------------------------------------

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Sample one response per row of ``prompts.batch["input_ids"]`` [b, P].

        Switches to generation mode first: the actor's shards are all-gathered
        into the rollout model (every rank calls this, so the collective matches);
        ``timing_s/weight_sync`` measures that step. veRL 0.9.1 has no such WorkerGroup
        method: its trainer sends updated weights once per step with
        ``ActorRolloutRefWorker.update_weights`` (``verl/workers/engine_workers.py``),
        timed as ``timing_s/update_weights``, and generation happens in vLLM or SGLang
        server actors.

        Returns:
            ``responses`` [b, R], ``input_ids``, ``attention_mask``, ``position_ids``
            [b, P + R] and ``response_mask`` [b, R]; ``meta_info["metrics"]`` holds
            ``timing_s/weight_sync``.
        """
        c = self.config
        start = time.perf_counter()
        engine.copy_full_weights(self.actor, self.rollout)
        sync_s = time.perf_counter() - start
        input_ids = prompts.batch["input_ids"].to(self.device)
        if c.enforce_eager:
            out = generate(
                self.rollout,
                input_ids,
                max_new_tokens=c.max_new_tokens,
                eos_token_id=self.tokenizer.eos_token_id,
                pad_token_id=self.tokenizer.pad_token_id,
                temperature=c.temperature,
                top_p=c.top_p,
                generator=self.sample_rng,
            )
        else:
            # Its rollout_log_probs ride along, for the trainer's rollout-against-actor metric;
            # old_log_probs are still the actor's, as in veRL outside its bypass mode.
            out = self._static_rollout(*input_ids.shape).generate(input_ids)
        out.pop("prompts")
        metrics = average_over_ranks({"timing_s/weight_sync": sync_s})
        return DataProto.from_dict(
            tensors={k: v.cpu() for k, v in out.items()}, meta_info={"metrics": metrics}
        )

    def _static_rollout(self, batch: int, prompt_length: int) -> StaticRollout:
        """The static-cache sampler for this shape, built (and on a GPU captured) once: the
        rollout copy's weights change in place, which a captured graph sees."""
        if (batch, prompt_length) not in self.static_rollouts:
            c = self.config
            self.static_rollouts[batch, prompt_length] = StaticRollout(
                self.rollout,
                batch,
                prompt_length,
                c.max_new_tokens,
                eos_token_id=self.tokenizer.eos_token_id,
                pad_token_id=self.tokenizer.pad_token_id,
                temperature=c.temperature,
                top_p=c.top_p,
                generator=self.sample_rng,
            )
        return self.static_rollouts[batch, prompt_length]

    # --- log-probs -------------------------------------------------------------

    def _log_probs(self, model, data: DataProto, with_entropy: bool = False):
        b = data.batch
        if self.config.use_remove_padding:
            return packing.response_log_probs_packed(
                model,
                b["input_ids"],
                b["attention_mask"],
                b["responses"].shape[1],
                self.config.temperature,
                with_entropy,
            )
        return response_log_probs(
            model,
            b["input_ids"],
            b["attention_mask"],
            b["position_ids"],
            b["responses"].shape[1],
            self.config.temperature,
            with_entropy,
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs`` [b, R]: log-probs of the sampled tokens under the actor, pre-update."""
        with torch.no_grad():
            log_probs = self._log_probs(self.actor, self._to_device(data))
        return DataProto.from_dict(tensors={"old_log_probs": log_probs.cpu()})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob`` [b, R]: the frozen reference policy's log-probs."""
        with torch.no_grad():
            log_probs = self._log_probs(self.ref, self._to_device(data))
        return DataProto.from_dict(tensors={"ref_log_prob": log_probs.cpu()})

    # --- the PPO update --------------------------------------------------------

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        """``ppo_epochs`` passes of clipped-surrogate updates over this rank's share.

        Each optimiser step takes ``config.mini_batch_rows_per_rank`` responses of this
        rank's share, i.e. one mini-batch of ``ppo_mini_batch_size`` prompts times ``n``
        responses over all ranks (veRL 0.9.1: ``ppo_loss`` in
        ``verl/workers/utils/losses.py``, run by ``TrainingWorker.train_mini_batch``).

        Needs ``responses``, ``input_ids``, ``attention_mask``, ``position_ids``,
        ``response_mask``, ``old_log_probs``, ``advantages`` (and ``ref_log_prob``
        when ``use_kl_loss``). Returns the metrics ``actor/pg_loss``,
        ``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/entropy``,
        ``actor/kl_loss``, ``actor/grad_norm`` and ``actor/grad_clipped`` (means over
        mini-batches and ranks).
        """
        c = self.config
        data = self._to_device(data)
        per_rank = c.mini_batch_rows_per_rank  # ppo_mini_batch_size * n // world_size
        steps = []
        for mb in mini_batches(data, per_rank, c.ppo_epochs, self.shuffle_rng):
            self.optimizer.zero_grad()
            totals = {}
            for part in micro_batches(mb, c):
                log_prob, entropy = self._log_probs(self.actor, part, with_entropy=True)
                loss, step = actor_loss(log_prob, entropy, part.batch, mb.batch, c)
                loss.backward()
                # Metrics stay on the device until the mini-batch ends: an .item() here
                # would make the host wait for the GPU once per micro-batch.
                for key, value in step.items():
                    totals[key] = totals.get(key, 0.0) + value.detach()
            step = {key: value.item() for key, value in totals.items()}
            step["actor/grad_norm"] = engine.clip_grad_norm(self.actor, c.grad_clip)
            # 1 when the clip scaled this optimiser step's gradient down: averaged, how often.
            step["actor/grad_clipped"] = float(step["actor/grad_norm"] > c.grad_clip)
            self.optimizer.step()
            steps.append(step)
        return metrics_of(steps)

    def _checkpoint_parts(self):
        """The actor, its optimiser, the reference policy and the sampling/shuffling RNGs."""
        models = {"actor": self.actor, "ref": self.ref}
        rng = {"shuffle": self.shuffle_rng, "sample": self.sample_rng}
        return models, {"actor": self.optimizer}, rng


class CriticWorker(_ModelWorker):
    """The value model: a scalar per token, trained on GAE returns (PPO).

    In veRL 0.9.1 the critic is a ``TrainingWorker`` of ``verl/workers/engine_workers.py``
    built with ``model_type="value_model"``; the class name ``CriticWorker`` is gone there.
    """

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> int:
        """Build and shard the critic; return its parameter count."""
        self._setup()
        critic = build_critic(self.model_config, self.config.seed + 1)
        self.critic = self._shard(critic)
        self.optimizer = make_optimizer(self.critic, self.config.critic_lr)
        return sum(p.numel() for p in critic.parameters())

    def _values(self, data: DataProto) -> torch.Tensor:
        b = data.batch
        out = self.critic(
            input_ids=b["input_ids"],
            attention_mask=b["attention_mask"],
            position_ids=b["position_ids"],
        )
        length = b["responses"].shape[1]
        # The value at position t estimates the return of the state before token t + 1.
        return out.logits[:, -length - 1 : -1, 0].float()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        """``values`` [b, R]: the critic's estimate before each response token."""
        with torch.no_grad():
            values = self._values(self._to_device(data))
        return DataProto.from_dict(tensors={"values": values.cpu()})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, data: DataProto) -> DataProto:
        """Clipped value-loss updates towards ``returns``, in mini-batches like ``update_actor``.

        veRL 0.9.1: ``value_loss`` in ``verl/workers/utils/losses.py``, run by a
        ``TrainingWorker`` (``train_mini_batch``).

        Returns the metrics ``critic/vf_loss``, ``critic/vf_clipfrac`` and ``critic/grad_norm``.
        """
        c = self.config
        data = self._to_device(data)
        per_rank = c.mini_batch_rows_per_rank  # ppo_mini_batch_size * n // world_size
        steps = []
        for mb in mini_batches(data, per_rank, c.ppo_epochs, self.shuffle_rng):
            b = mb.batch
            vpreds = self._values(mb)
            vf_loss, vf_clipfrac = core_algos.compute_value_loss(
                vpreds,
                b["returns"],
                b["values"],
                b["response_mask"],
                c.cliprange_value,
                c.loss_agg_mode,
            )
            self.optimizer.zero_grad()
            vf_loss.backward()
            grad_norm = engine.clip_grad_norm(self.critic, c.grad_clip)
            self.optimizer.step()
            steps.append(
                {
                    "critic/vf_loss": vf_loss.item(),
                    "critic/vf_clipfrac": vf_clipfrac.item(),
                    "critic/grad_norm": grad_norm,
                }
            )
        return metrics_of(steps)

    def _checkpoint_parts(self):
        """The critic, its optimiser and the shuffling RNG."""
        return {"critic": self.critic}, {"critic": self.optimizer}, {"shuffle": self.shuffle_rng}
