"""The single controller: one plain driver loop that runs PPO or GRPO through WorkerGroups.

:meth:`RLHFTrainer.fit` is the whole algorithm. It follows the step of veRL 0.9.1's
default trainer, ``PPOTrainerSync`` (``verl/trainer/ppo/v1/trainer_sync.py``), whose loop
is ``PPOTrainer.fit`` and ``PPOTrainer._step_once`` in
``verl/trainer/ppo/v1/trainer_base.py``; the timer names are veRL's (``timing_s/weight_sync``
is ours: see :mod:`reference_impl.rlhf.metrics`). Each step:

1. ``gen``: the rollout samples ``n`` responses per prompt (``generate_sequences``);
2. ``reward``: the rule-based score is computed here, on the driver, from token ids;
3. ``old_log_prob``, ``ref`` and (PPO) ``values``: three forward passes in the workers;
4. ``adv``: advantages on the driver (GAE for PPO, group-normalised for GRPO);
5. ``update_critic`` (PPO) and ``update_actor``: the PPO updates in the workers.

Batches travel as ``DataProto``: each ``wg.method(batch)`` call splits the batch
across the group's ranks (``Dispatch.DP_COMPUTE_PROTO``), Ray carries the parts
to the workers through its object store, and the results are concatenated back.
veRL's legacy trainer (``verl/trainer/ppo/ray_trainer.py`` (``RayPPOTrainer``),
``trainer.use_v1=false``) still sends its batches through Ray this way (as ``TensorDict``).
veRL 0.9.1's default differs in three places: the batch stays in TransferQueue and
WorkerGroup calls carry only its keys (``KVBatchMeta``);
rollout runs in vLLM or SGLang server actors fed by agent-loop actors
(``verl/experimental/agent_loop/agent_loop.py`` (``AgentLoopWorker``)); and rewards are
computed in ``RewardLoopWorker`` actors (``verl/experimental/reward_loop/reward_loop.py``)
while each trajectory finishes, not on the driver.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
import ray
import torch
from tqdm.auto import tqdm

from reference_impl.colocation import create_colocated_worker_cls
from reference_impl.data_proto import DataProto
from reference_impl.resource_pool import RayResourcePool
from reference_impl.rlhf import checkpoint, core_algos
from reference_impl.rlhf.config import RLHFConfig, check
from reference_impl.rlhf.metrics import MetricsLog, score_metrics, train_flops
from reference_impl.rlhf.task import DigitSumTask
from reference_impl.rlhf.tokenizer import CharTokenizer
from reference_impl.rlhf.workers import ActorRolloutRefWorker, CriticWorker
from reference_impl.worker_group import RayClassWithInitArgs, RayWorkerGroup


@contextmanager
def timer(name: str, timing: dict[str, float]):
    """Add the seconds the ``with`` body takes to ``timing[name]``."""
    start = time.perf_counter()
    yield
    timing[name] = timing.get(name, 0.0) + time.perf_counter() - start


class RLHFTrainer:
    """Builds the resource pools and worker groups of ``config``, then trains.

    Args:
        config: see :class:`~reference_impl.rlhf.config.RLHFConfig`.

    Raises:
        ConfigError: if the cluster lacks the GPUs the config asks for.
    """

    # The roles' classes; a subclass may swap in its own (benchmarks/rlhf_profile.py does,
    # to time each call inside the workers).
    actor_worker_cls = ActorRolloutRefWorker
    critic_worker_cls = CriticWorker

    def __init__(self, config: RLHFConfig) -> None:
        self.config = config
        self.tokenizer = CharTokenizer()
        self.task = DigitSumTask(num_digits=config.num_digits)
        self.data_rng = torch.Generator().manual_seed(config.seed)
        self.pools: list[RayResourcePool] = []

    # --- placement ------------------------------------------------------------

    def init_workers(self) -> None:
        """Start the roles: one pool for all (``colocated``) or one pool per role (``separate``)."""
        c = self.config
        check(c, gpus_available=ray.cluster_resources().get("GPU", 0))
        # The config travels to the workers as it is: a frozen dataclass pickles whole.
        actor_cls = RayClassWithInitArgs(self.actor_worker_cls, c)
        critic_cls = RayClassWithInitArgs(self.critic_worker_cls, c)
        self.pools = [self.new_pool()]
        self.critic_wg = None
        if c.use_critic and c.layout == "colocated":
            # One process per rank holds both roles (veRL's default layout).
            colocated = create_colocated_worker_cls(
                {"actor_rollout": actor_cls, "critic": critic_cls}
            )
            groups = RayWorkerGroup(self.pools[0], colocated).spawn(["actor_rollout", "critic"])
            self.actor_rollout_wg, self.critic_wg = groups["actor_rollout"], groups["critic"]
        else:
            self.actor_rollout_wg = RayWorkerGroup(self.pools[0], actor_cls)
            if c.use_critic:
                self.pools.append(self.new_pool())
                self.critic_wg = RayWorkerGroup(self.pools[1], critic_cls)
        self.num_params = self.actor_rollout_wg.init_model()[0]
        if self.critic_wg is not None:
            self.critic_wg.init_model()
        self.peak_flops = sum(self.actor_rollout_wg.peak_flops())

    def new_pool(self) -> RayResourcePool:
        """One role's pool (``process_on_nodes``), one process per bundle."""
        c = self.config
        return RayResourcePool(c.process_on_nodes, use_gpu=c.device == "cuda", max_colocate_count=1)

    def roles(self) -> dict[str, RayWorkerGroup]:
        """Each role's folder in a checkpoint -> its group (``checkpoint.save``, ``load``)."""
        groups = {"actor": self.actor_rollout_wg}
        if self.critic_wg is not None:
            groups["critic"] = self.critic_wg
        return groups

    # --- data -------------------------------------------------------------------

    def make_batch(self) -> tuple[DataProto, DataProto]:
        """``train_batch_size`` prompts, each repeated ``n`` times (adjacent rows share a ``uid``).

        Returns the batch (``targets``, ``uid``) and the prompts for generation (``input_ids``).
        """
        c = self.config
        prompts, targets = self.task.make_prompts(self.tokenizer, c.train_batch_size, self.data_rng)
        uid = np.arange(c.train_batch_size).astype(str).astype(object)
        batch = DataProto.from_dict(
            tensors={"targets": targets, "input_ids": prompts}, non_tensors={"uid": uid}
        ).repeat(repeat_times=c.n, interleave=True)
        gen_batch = DataProto.from_dict(tensors={"input_ids": batch.batch["input_ids"]})
        return batch.select(batch_keys=["targets"], non_tensor_batch_keys=["uid"]), gen_batch

    def warmup(self) -> dict[str, float]:
        """Supervised format warm-up: prompts followed by random digits and EOS."""
        c = self.config
        # Steps of one PPO mini-batch of responses: check() made that size split across ranks.
        rows = c.warmup_steps * c.mini_batch_responses
        ids, prompt_length = self.task.format_examples(self.tokenizer, rows, self.data_rng)
        data = DataProto.from_dict(
            tensors={"input_ids": ids},
            meta_info={"prompt_length": prompt_length, "steps": c.warmup_steps},
        )
        return self.actor_rollout_wg.warmup_format(data).meta_info["metrics"]

    # --- one step -----------------------------------------------------------------

    def step(self) -> dict[str, float]:
        """One RL step; returns its metrics."""
        c = self.config
        timing: dict[str, float] = {}
        metrics: dict[str, float] = {}
        with timer("step", timing):
            batch, gen_batch = self.make_batch()
            with timer("gen", timing):
                gen_out = self.actor_rollout_wg.generate_sequences(gen_batch)
            metrics.update(gen_out.meta_info.pop("metrics"))
            batch = batch.union(gen_out)
            b = batch.batch
            with timer("reward", timing):
                scores, exact = self.task.score_responses(
                    b["responses"], b["targets"], self.tokenizer
                )
                # The score lands on the last generated token; every other token gets 0.
                b["token_level_scores"] = core_algos.place_score(scores, b["response_mask"])
            with timer("old_log_prob", timing):
                batch = batch.union(self.actor_rollout_wg.compute_log_prob(batch))
            if c.use_kl_loss or c.use_kl_in_reward:
                with timer("ref", timing):
                    batch = batch.union(self.actor_rollout_wg.compute_ref_log_prob(batch))
            if c.use_critic:
                with timer("values", timing):
                    batch = batch.union(self.critic_wg.compute_values(batch))
            with timer("adv", timing):
                metrics.update(self.compute_advantage(batch))
            if c.use_critic:
                with timer("update_critic", timing):
                    metrics.update(self.critic_wg.update_critic(batch).meta_info["metrics"])
            with timer("update_actor", timing):
                metrics.update(self.actor_rollout_wg.update_actor(batch).meta_info["metrics"])
        metrics.update(self.data_metrics(batch, scores, exact))
        metrics.update({f"timing_s/{k}": v for k, v in timing.items()})
        metrics.update(self.perf_metrics(batch, timing))
        return metrics

    def compute_advantage(self, batch: DataProto) -> dict[str, float]:
        """Rewards (minus KL if ``use_kl_in_reward``), then advantages and returns, in place."""
        c, b = self.config, batch.batch
        mask = b["response_mask"]
        metrics = {}
        if c.use_kl_in_reward:
            rewards, metrics = core_algos.apply_kl_penalty(
                b["token_level_scores"],
                b["old_log_probs"],
                b["ref_log_prob"],
                mask,
                c.kl_coef,
                c.kl_penalty,
            )
        else:
            rewards = b["token_level_scores"]
        b["token_level_rewards"] = rewards
        if c.algo == "ppo":
            adv, ret = core_algos.compute_gae_advantage_return(
                rewards, b["values"], mask, c.gamma, c.lam
            )
        else:
            adv, ret = core_algos.compute_grpo_outcome_advantage(
                rewards, mask, batch.non_tensor_batch["uid"]
            )
        b["advantages"], b["returns"] = adv, ret
        return metrics

    def data_metrics(self, batch: DataProto, scores, exact) -> dict[str, float]:
        b = batch.batch
        mask = b["response_mask"].bool()
        metrics = {
            "critic/score/mean": scores.mean().item(),
            "reward/exact_match": exact.float().mean().item(),
            "response_length/mean": b["response_mask"].sum(-1).float().mean().item(),
            "critic/advantages/mean": b["advantages"][mask].mean().item(),
            "critic/returns/mean": b["returns"][mask].mean().item(),
        }
        metrics.update(score_metrics(scores, exact, b["targets"], batch.non_tensor_batch["uid"]))
        if "rollout_log_probs" in b.keys():  # enforce_eager=False: the sampler's own log-probs
            # How far the rollout's token probabilities are from the actor's, as veRL reports
            # them (verl/utils/debug/metrics.py (calculate_debug_metrics)): 0 up to rounding
            # when both hold the same weights at the same precision.
            diff = (b["old_log_probs"].exp() - b["rollout_log_probs"].exp()).abs()[mask]
            metrics["training/rollout_probs_diff_max"] = diff.max().item()
            metrics["training/rollout_probs_diff_mean"] = diff.mean().item()
        if self.config.use_critic:
            returns, values = b["returns"][mask], b["values"][mask]
            metrics["critic/values/mean"] = values.mean().item()
            metrics["critic/vf_explained_var"] = (
                1.0 - (returns - values).var() / (returns.var() + 1e-5)
            ).item()
        return metrics

    def perf_metrics(self, batch: DataProto, timing: dict[str, float]) -> dict[str, float]:
        lengths = batch.batch["attention_mask"].sum(-1)
        workers = self.config.num_processes  # veRL divides by all GPUs of the run
        vocab = self.tokenizer.vocab_size
        update_flops = train_flops(self.config.model_shape, lengths, vocab) * self.config.ppo_epochs
        mfu = update_flops / (timing["update_actor"] * self.peak_flops)
        return {
            "perf/total_num_tokens": float(lengths.sum()),
            "perf/throughput": float(lengths.sum()) / (timing["step"] * workers),
            "perf/mfu/actor": mfu,  # 0.0 where the peak is unknown (inf)
        }

    # --- the loop -----------------------------------------------------------------

    def fit(self, progress: bool = True) -> list[dict[str, float]]:
        """Warm up (or resume), then run RL steps until ``total_steps`` or the target score.

        Returns the metrics of the steps run in this call (also in ``metrics.jsonl``).

        Raises:
            ConfigError, RuntimeError: ``resume`` is set and the output directory cannot
                be resumed from (see :func:`~reference_impl.rlhf.checkpoint.resume_step`);
                nothing in it is changed then.
            ValueError: a line of ``metrics.jsonl`` is not JSON (the message names the line).
        """
        c = self.config
        start_step = checkpoint.resume_step(c.output_dir, c.algo) if c.resume else None
        log = MetricsLog(c.output_dir, c.tensorboard, resume_step=start_step)
        if start_step is not None:
            checkpoint.load(c.output_dir, start_step, self.roles(), self.data_rng)
        else:
            start_step = 0
            timing: dict[str, float] = {}
            with timer("warmup", timing):
                # warmup_steps=0: RL starts from the initial weights, which the reference
                # policy already holds (both are built from one initialisation).
                warm = self.warmup() if c.warmup_steps else {}
            log.log(0, {**warm, "timing_s/warmup": timing["warmup"]})
        history: list[dict[str, float]] = []
        started = time.perf_counter()
        bar = tqdm(range(start_step + 1, c.total_steps + 1), disable=not progress, desc=c.algo)
        for step in bar:
            metrics = self.step()
            log.log(step, metrics)
            history.append(metrics)
            bar.set_postfix(score=f"{metrics['critic/score/mean']:.3f}")
            if c.save_freq and step % c.save_freq == 0:
                checkpoint.save(c.output_dir, step, self.roles(), c.algo, self.data_rng)
            recent = [m["critic/score/mean"] for m in history[-5:]]
            if c.target_score and len(recent) == 5 and sum(recent) / 5 >= c.target_score:
                break
            if c.time_limit_s and time.perf_counter() - started >= c.time_limit_s:
                break
        log.close()
        return history

    def shutdown(self) -> None:
        """Release the placement groups (safe to call if ``init_workers`` failed early)."""
        for pool in self.pools:
            pool.release()
