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
            f"veRL {verl.__version__} is installed; this planner runs veRL {VERL_VERSION}'s own code "
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
    except (AssertionError, ValueError) as error:
        raise PlanInputError(
            f"veRL's start-up checks (validate_config) refuse this config:\n  {error}\n"
            f"  -> change the settings it names; veRL stops here too, before Ray starts"
        ) from None
