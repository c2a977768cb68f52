"""Every knob of a run, its defaults per preset, and checks that fail early with a clear message.

Names and units follow veRL 0.9.1's config where one exists
(``verl/trainer/config/ppo_trainer.yaml``, ``verl/workers/config/actor.py``
(``ActorConfig``)): ``train_batch_size`` counts prompts, ``n`` responses are sampled per
prompt (veRL's ``actor_rollout_ref.rollout.n``), and ``ppo_mini_batch_size`` counts
**prompts** per optimiser step, so one mini-batch holds ``ppo_mini_batch_size * n``
responses (:attr:`RLHFConfig.mini_batch_responses`), split evenly over the
data-parallel ranks. veRL does the same multiplication on its controller
(``verl/trainer/ppo/v1/trainer_base.py`` (``PPOTrainer._update_actor``,
``PPOTrainer._update_critic``)) and the same division by the data-parallel size in the
worker (``verl/workers/engine_workers.py`` (``TrainingWorker.train_mini_batch``)).
``use_kl_loss`` / ``kl_loss_type`` put KL in the actor's loss (GRPO's way),
``use_kl_in_reward`` / ``kl_penalty`` subtract it from the reward (classic PPO's way).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from reference_impl.rlhf.model import PRESETS, ModelShape


class ConfigError(ValueError):
    """A configuration that cannot run; the message says which knob and what to change."""


@dataclass(frozen=True)
class RLHFConfig:
    """One run. Batch sizes count prompts, as veRL's do; times are in seconds.

    ``train_batch_size`` and ``ppo_mini_batch_size`` are numbers of prompts; each
    prompt gets ``n`` responses, so a step makes :attr:`responses_per_step` responses and
    each optimiser step trains on :attr:`mini_batch_responses` of them.
    """

    algo: str = "grpo"  # "grpo" or "ppo"
    preset: str = "cpu"  # "cpu" or "gpu": model shape, dtype and device
    # "cuda" (the gpu preset's: NCCL, bf16 compute) or "cpu" (gloo, fp32); veRL's
    # trainer.device. --preset gpu --set device=cpu runs the gpu preset's shape on CPU.
    device: str = "cpu"
    output_dir: str = "runs/rlhf"
    seed: int = 0
    # --- task and data ---
    num_digits: int = 2
    train_batch_size: int = 32  # prompts per step
    n: int = 8  # responses per prompt (GRPO's group size)
    total_steps: int = 150
    # --- rollout ---
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 4
    # false: sample with a static KV cache, the decode step replayed as a CUDA graph on a GPU
    # and run eagerly on a CPU (reference_impl/rlhf/static_rollout.py). veRL's name
    # (actor_rollout_ref.rollout.enforce_eager); its default is false, ours true: the graph
    # path has not yet been measured in a training run on a GPU.
    enforce_eager: bool = True
    # --- actor ---
    actor_lr: float = 3e-4
    # Prompts per optimiser step over all ranks; the mini-batch holds ppo_mini_batch_size * n
    # responses (GRPO: 8 prompts x 8 = 64 responses; PPO sets 64 prompts x 1 below).
    ppo_mini_batch_size: int = 8
    ppo_epochs: int = 2
    clip_ratio: float = 0.2
    entropy_coeff: float = 0.0
    grad_clip: float = 1.0
    use_kl_loss: bool = True
    kl_loss_coef: float = 0.05
    kl_loss_type: str = "low_var_kl"
    use_kl_in_reward: bool = False
    kl_coef: float = 0.05
    kl_penalty: str = "kl"
    loss_agg_mode: str = "token-mean"
    # --- critic (PPO) ---
    critic_lr: float = 1e-3
    cliprange_value: float = 0.5
    gamma: float = 1.0
    lam: float = 1.0
    # --- format warm-up (supervised, reported apart from RL) ---
    warmup_steps: int = 30
    warmup_lr: float = 3e-3
    # --- placement ---
    world_size: int = 2  # data-parallel ranks per role, over all nodes
    nnodes: int = 1  # nodes a role spans: world_size // nnodes processes on each
    layout: str = "colocated"  # "colocated": one pool for all roles; "separate": a pool each
    # --- FSDP2 (veRL's actor_rollout_ref.actor.fsdp_config names and defaults) ---
    # Ranks each parameter is split over; -1: all of world_size (ZeRO-3). 1 on 2 ranks:
    # whole parameters on each, gradients all-reduced (HSDP, as DDP).
    fsdp_size: int = -1
    reshard_after_forward: bool = True  # free gathered parameters between forward and backward
    # --- padding removed (veRL's names; reference_impl/rlhf/packing.py) ---
    # Forward passes over the valid tokens only, packed end to end
    # (actor_rollout_ref.model.use_remove_padding; veRL's default is true, ours false: at
    # the cpu preset's 8-token sequences there is little padding to remove).
    use_remove_padding: bool = False
    # Cut each mini-batch into micro-batches of at most ppo_max_token_len_per_gpu valid
    # tokens, balanced by length, with gradients accumulated over them
    # (actor_rollout_ref.actor.use_dynamic_bsz and ppo_max_token_len_per_gpu).
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 16384
    # Without use_dynamic_bsz: rows per micro-batch (actor_rollout_ref.actor.
    # ppo_micro_batch_size_per_gpu); 0 takes each rank's mini-batch in one pass.
    ppo_micro_batch_size_per_gpu: int = 0
    # --- bookkeeping ---
    save_freq: int = 0  # checkpoint every N steps (0: never)
    resume: bool = False
    # Stop once critic/score/mean averaged over 5 steps reaches this (0: never).
    target_score: float = 0.0
    time_limit_s: float = 0.0  # stop RL after this many seconds (0: no limit)
    tensorboard: bool = True

    @property
    def use_critic(self) -> bool:
        return self.algo == "ppo"

    @property
    def model_shape(self) -> ModelShape:
        return PRESETS[self.preset]

    @property
    def process_on_nodes(self) -> list[int]:
        """A role's pool: ``world_size // nnodes`` processes on each of ``nnodes`` nodes."""
        return [self.world_size // self.nnodes] * self.nnodes

    @property
    def num_processes(self) -> int:
        """Worker processes of the whole run (separate pools double them for PPO)."""
        pools = 2 if self.layout == "separate" and self.use_critic else 1
        return self.world_size * pools

    @property
    def responses_per_step(self) -> int:
        """Responses sampled per RL step: ``train_batch_size * n``."""
        return self.train_batch_size * self.n

    @property
    def mini_batch_responses(self) -> int:
        """Responses per optimiser step over all ranks: ``ppo_mini_batch_size * n``.

        veRL 0.9.1 computes the same product before each update
        (``verl/trainer/ppo/v1/trainer_base.py`` (``PPOTrainer._update_actor``)).
        """
        return self.ppo_mini_batch_size * self.n

    @property
    def mini_batch_rows_per_rank(self) -> int:
        """Responses each data-parallel rank trains on per optimiser step.

        ``mini_batch_responses // world_size``, as ``TrainingWorker.train_mini_batch``
        divides veRL's mini-batch by the data-parallel size
        (``verl/workers/engine_workers.py``).
        """
        return self.mini_batch_responses // self.world_size


DEFAULTS = {
    # GRPO: groups of 8 responses per prompt, KL as a k3 loss term, no critic.
    "grpo": {},
    # PPO: one response per prompt, a critic with GAE, KL subtracted from the reward.
    "ppo": {
        "train_batch_size": 128,
        "n": 1,
        "ppo_mini_batch_size": 64,  # prompts, = 64 responses with n = 1
        "use_kl_loss": False,
        "use_kl_in_reward": True,
    },
}
# Integer knobs and their smallest sensible value; checked before anything divides by them.
MINIMUMS = {
    "num_digits": 1,
    "train_batch_size": 1,
    "n": 1,
    "total_steps": 1,
    "max_new_tokens": 1,
    "ppo_mini_batch_size": 1,
    "ppo_epochs": 1,
    "warmup_steps": 0,
    "world_size": 1,
    "nnodes": 1,
    "save_freq": 0,  # 0: never save
    "ppo_max_token_len_per_gpu": 1,
    "ppo_micro_batch_size_per_gpu": 0,  # 0: the whole mini-batch
}
GPU_PRESET = {
    "device": "cuda",
    "warmup_lr": 1e-3,
    # On one H200, 1e-5 reached a 5-step mean score of 0.73 in 97 steps and 3e-5 0.87 in 92
    # (docs/rlhf/index.md#gpu-measured; benchmarks/results/gpu-2026-11-26-nvidia-h200/).
    "actor_lr": 3e-5,
    "critic_lr": 1e-5,
    "world_size": 1,
}
# The cpu model is 1.6 MB: splitting it over the ranks saves nothing and costs a collective
# per FSDP unit per forward and backward, where every rank waits for the slowest. With
# fsdp_size=1 each rank keeps whole parameters (FSDP2 over a ("ddp", "fsdp") mesh) and
# synchronises once per unit per backward, to average gradients.
CPU_PRESET = {"fsdp_size": 1}


def make_config(algo: str = "grpo", preset: str = "cpu", **overrides) -> RLHFConfig:
    """The defaults for ``algo`` and ``preset``, with ``overrides`` applied, checked.

    Raises:
        ConfigError: unknown algo, preset or knob, or a combination that cannot run.
    """
    if algo not in DEFAULTS:
        raise ConfigError(f"unknown algo {algo!r}; choose one of {sorted(DEFAULTS)}")
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    known = {f.name for f in fields(RLHFConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown}; valid ones are {sorted(known)}")
    preset_values = GPU_PRESET if preset == "gpu" else CPU_PRESET
    values = {**DEFAULTS[algo], **preset_values, **overrides}
    config = replace(RLHFConfig(algo=algo, preset=preset), **values)
    check(config)
    return config


def check(config: RLHFConfig, gpus_available: int | None = None) -> None:
    """Fail early, with the knob to change, on a configuration that cannot run.

    Args:
        gpus_available: GPUs in the Ray cluster, checked against the preset's needs
            when given (the trainer passes ``ray.cluster_resources()["GPU"]``).

    Raises:
        ConfigError: the configuration cannot run; the message names the knob to change.
    """
    for name, lowest in MINIMUMS.items():
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < lowest:
            raise ConfigError(f"{name} must be an integer >= {lowest}, got {value!r}")
    if not config.temperature > 0:
        raise ConfigError(f"temperature must be > 0, got {config.temperature}")
    if not 0 < config.top_p <= 1:
        raise ConfigError(f"top_p must be in (0, 1], got {config.top_p}")
    if config.algo == "grpo" and config.n < 2:
        raise ConfigError("GRPO normalises within groups of n responses per prompt: set n >= 2")
    if config.world_size < 1:
        raise ConfigError(f"world_size must be >= 1, got {config.world_size}")
    responses = config.responses_per_step
    if responses % config.world_size:
        raise ConfigError(
            f"train_batch_size * n = {config.train_batch_size} * {config.n} = {responses} "
            f"responses do not split across world_size={config.world_size} data-parallel "
            "ranks; make the product a multiple of world_size"
        )
    if config.ppo_mini_batch_size < 1 or config.train_batch_size % config.ppo_mini_batch_size:
        raise ConfigError(
            f"train_batch_size={config.train_batch_size} prompts per step do not split into "
            f"mini-batches of ppo_mini_batch_size={config.ppo_mini_batch_size} prompts; pick a "
            f"divisor of {config.train_batch_size}"
        )
    if config.mini_batch_responses % config.world_size:
        raise ConfigError(
            f"ppo_mini_batch_size * n = {config.ppo_mini_batch_size} * {config.n} = "
            f"{config.mini_batch_responses} responses per mini-batch do not split across "
            f"world_size={config.world_size} ranks; make the product a multiple of world_size"
        )
    if config.max_new_tokens <= config.num_digits:
        raise ConfigError(
            f"max_new_tokens={config.max_new_tokens} leaves no room for {config.num_digits} "
            f"digits and EOS; set it to at least {config.num_digits + 1}"
        )
    if config.device not in ("cpu", "cuda"):
        raise ConfigError(f"device must be 'cpu' or 'cuda', got {config.device!r}")
    if config.layout not in ("colocated", "separate"):
        raise ConfigError(f"layout must be 'colocated' or 'separate', got {config.layout!r}")
    if config.time_limit_s < 0 or config.target_score < 0:
        raise ConfigError("time_limit_s and target_score must be >= 0 (0 turns them off)")
    if (
        not isinstance(config.fsdp_size, int)
        or config.fsdp_size == 0
        or (0 < config.fsdp_size < config.world_size and config.world_size % config.fsdp_size)
    ):
        raise ConfigError(
            f"fsdp_size={config.fsdp_size} must divide world_size={config.world_size} (each "
            "parameter is split over fsdp_size ranks, replicated world_size // fsdp_size "
            "times); set a divisor, or -1 to shard over all ranks"
        )
    if config.nnodes < 1 or config.world_size % config.nnodes:
        raise ConfigError(
            f"world_size={config.world_size} does not split evenly over nnodes="
            f"{config.nnodes}; make world_size a multiple of nnodes"
        )
    if gpus_available is not None and config.device == "cuda":
        needed = config.num_processes
        if needed > gpus_available:
            raise ConfigError(
                f"the gpu preset with world_size={config.world_size} and layout="
                f"{config.layout!r} needs {needed} GPUs but the Ray cluster has "
                f"{gpus_available:g}; lower world_size or add GPUs"
            )
