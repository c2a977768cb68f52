"""The reader's veRL config: veRL 0.9.1's own Hydra config, their overrides, veRL's own checks.

``compose`` loads `verl/trainer/config/ppo_trainer.yaml` exactly as ``python -m
verl.trainer.main_ppo`` does (``hydra.main(config_path="config", config_name="ppo_trainer")``
in `verl/trainer/main_ppo.py`), applies the overrides, and runs the start-up checks of
``main``: ``validate_config`` (`verl/utils/config.py`) with ``need_reference_policy`` and
``need_critic`` (`verl/trainer/ppo/utils.py`).

Errors are raised as :class:`PlanInputError`, whose message names what to change.
"""

from __future__ import annotations

import inspect
from pathlib import Path

VERL_VERSION = "0.9.1"


class PlanInputError(ValueError):
    """The plan cannot start from this input; the message says what to change."""


def check_verl_version() -> None:
    import verl

    if verl.__version__ != VERL_VERSION:
        raise PlanInputError(
            f"veRL {verl.__version__} is installed; this planner runs veRL {VERL_VERSION}'s own "
            "code "
            f"and plans for that version only: pip install verl=={VERL_VERSION}"
        )


def compose(overrides: list[str]):
    """veRL's config with ``overrides`` applied (a resolved-later ``DictConfig``).

    Raises PlanInputError for an override veRL 0.9.1's config does not have (a typo, or a key of
    another veRL version), or a value of the wrong type.
    """
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import ConfigCompositionException, OverrideParseException

    check_verl_version()
    config_dir = Path(inspect.getfile(verl)).parent / "trainer" / "config"
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))
    except (ConfigCompositionException, OverrideParseException) as error:
        cause = error.__cause__ or error
        text = str(cause).splitlines()[0]
        key = _key_of(text, overrides)
        hint = (
            f"'{key}' is not a setting of veRL {VERL_VERSION}'s ppo_trainer config: check its "
            f"spelling against `verl/trainer/config/_generated_ppo_trainer.yaml`; a key of another "
            f"veRL version must be renamed or dropped; a key veRL reads but does not declare is "
            f"added with '+{key}=...'"
            if key
            else "fix the override"
        )
        raise PlanInputError(f"{text}\n  -> {hint}") from None


def _key_of(text: str, overrides: list[str]) -> str | None:
    """The override key named in Hydra's message, if one of the overrides is named there."""
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if f"'{key}'" in text or f"'{key.rsplit('.', 1)[-1]}'" in text:
            return key
    return None


def validate(config) -> None:
    """veRL's start-up checks, as ``main`` in `verl/trainer/main_ppo.py` runs them."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        validate_config(
            config=config,
            use_reference_policy=need_reference_policy(config),
            use_critic=need_critic(config),
        )
    except Exception as error:  # assert, ValueError, or Hydra's InstantiationException around one
        raise PlanInputError(
            f"veRL's start-up checks (validate_config) refuse this config:\n  {_innermost(error)}\n"
            f"  -> change the settings it names; veRL stops here too, before Ray starts"
        ) from None


def _innermost(error: BaseException) -> str:
    """The message of the error at the bottom of a chain (Hydra wraps a config class's assert)."""
    while error.__cause__ is not None:
        error = error.__cause__
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def check_rollout_split(config) -> None:
    """veRL's check that the rollout's parallel size divides the trainer's GPUs.

    veRL 0.9.1 makes it inside each worker, in ``ActorRolloutRefWorker.init_model``
    (`verl/workers/engine_workers.py`), as an assert; the plan's workers are stand-ins, so the
    planner makes the same check here, before Ray starts.
    """
    rollout = config.actor_rollout_ref.rollout
    world = config.trainer.n_gpus_per_node * config.trainer.nnodes
    infer = (
        rollout.tensor_model_parallel_size
        * rollout.data_parallel_size
        * rollout.pipeline_model_parallel_size
    )
    if world % infer:
        raise PlanInputError(
            f"rollout world_size: {world} is not divisible by infer_world_size: {infer} "
            f"(veRL 0.9.1 asserts this in every worker's init_model)\n"
            "  -> make actor_rollout_ref.rollout.tensor_model_parallel_size x data_parallel_size "
            "x "
            f"pipeline_model_parallel_size ({infer}) divide trainer.n_gpus_per_node x "
            f"trainer.nnodes ({world})"
        )


def check_one_pool_fits(config, nodes) -> None:
    """No node can hold one placement group of veRL's pool: nothing of the run could start.

    Each GPU of the pool is a bundle ``{CPU: 3, GPU: 1}`` (``ResourcePoolManager``'s
    ``max_colocate_count`` of 3, `verl/single_controller/ray/base.py`), and a group of
    ``trainer.n_gpus_per_node`` bundles is packed on one node (``STRICT_PACK``).
    """
    n = config.trainer.n_gpus_per_node
    if any(node.gpus >= n and node.cpus >= 3 * n for node in nodes):
        return
    largest = max(nodes, key=lambda node: (min(node.gpus, node.cpus // 3), node.gpus))
    fits = min(largest.gpus, largest.cpus // 3)
    raise PlanInputError(
        f"no node can hold one placement group of veRL's pool: {n} bundles of {{CPU: 3, GPU: 1}} "
        "on one node "
        f"= {{CPU: {3 * n}, GPU: {n}}}; the largest node has "
        f"{{CPU: {largest.cpus}, GPU: {largest.gpus}}}\n"
        + (
            f"  -> set trainer.n_gpus_per_node={fits} (and trainer.nnodes to match), or declare "
            "nodes with "
            f"{n} GPUs and {3 * n} CPUs"
            if fits
            else f"  -> declare nodes with GPUs and 3 CPUs per GPU (e.g. --cluster 1x{n}x{3 * n})"
        )
    )


def check_mandatory(config) -> None:
    """Settings veRL 0.9.1's config leaves as ``???`` and the run reads: they must be given.

    Without them veRL stops inside ``TaskRunnerV1`` with omegaconf's ``MissingMandatoryValue``.
    """
    from omegaconf import OmegaConf

    needed = ["actor_rollout_ref.rollout.name"]
    if config.reward.reward_model.enable:
        needed.append("reward.reward_model.rollout.name")
    missing = [key for key in needed if key in OmegaConf.missing_keys(config)]
    if missing:
        raise PlanInputError(
            f"veRL 0.9.1's config has no default for {', '.join(missing)} (???), "
            f"and the run reads it\n"
            f"  -> add {' '.join(f'{key}=vllm' for key in missing)} (or sglang, trtllm)"
        )
