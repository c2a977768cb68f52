"""A run's checkpoints: ``checkpoints/global_step_N/`` under its output directory.

The layout is veRL 0.9.1's (``PPOTrainer._save_checkpoint`` and
``PPOTrainer._load_checkpoint`` in ``verl/trainer/ppo/v1/trainer_base.py``): one
directory per saved step, with a folder per role (``actor``, ``critic``: each rank's
sharded state, written by the workers' ``save_checkpoint``), and the pointer
``checkpoints/latest_checkpointed_iteration.txt``, written last, that names the newest
complete step. Ours adds ``driver.pt``: the step, the algorithm and the driver's data
generator, so that a resumed run draws the same prompts as an uninterrupted one.

``groups`` below maps a role's folder name to its WorkerGroup
(``RLHFTrainer.roles()``).
"""

from __future__ import annotations

import os

import torch

from reference_impl.rlhf.config import ConfigError
from reference_impl.rlhf.engine import load_checkpoint_file
from reference_impl.rlhf.metrics import read_metrics

POINTER = "latest_checkpointed_iteration.txt"  # veRL's file name


def checkpoints_dir(output_dir: str) -> str:
    return os.path.join(output_dir, "checkpoints")


def step_dir(output_dir: str, step: int) -> str:
    return os.path.join(checkpoints_dir(output_dir), f"global_step_{step}")


def save(output_dir: str, step: int, groups: dict, algo: str, data_rng: torch.Generator) -> None:
    """Write ``global_step_{step}/`` (each role, then ``driver.pt``), then the pointer."""
    path = step_dir(output_dir, step)
    for role, group in groups.items():
        group.save_checkpoint(os.path.join(path, role))
    # The algorithm is saved so that a resume with the other one is refused by name.
    driver = {"step": step, "algo": algo, "data_rng": data_rng.get_state()}
    torch.save(driver, os.path.join(path, "driver.pt"))
    # Written last: a checkpoint counts only once it is complete.
    with open(os.path.join(checkpoints_dir(output_dir), POINTER), "w") as f:
        f.write(str(step))


def latest(output_dir: str) -> int | None:
    """The step the pointer names, or None where there is no pointer.

    Raises:
        RuntimeError: the pointer file does not hold a step number.
    """
    pointer = os.path.join(checkpoints_dir(output_dir), POINTER)
    if not os.path.exists(pointer):
        return None
    with open(pointer) as f:
        text = f.read().strip()
    if not text.isdigit():
        raise RuntimeError(
            f"cannot resume: {pointer} should hold the step of the last complete checkpoint "
            f"but holds {text[:40]!r}; write the N of an existing "
            f"{checkpoints_dir(output_dir)}/global_step_N into it, or start without --resume"
        )
    return int(text)


def resume_step(output_dir: str, algo: str) -> int | None:
    """The step ``--resume`` continues from, checked on the driver before any worker loads.

    Returns None when ``output_dir`` holds no earlier run (nothing to resume: the run
    starts from scratch).

    Raises:
        ConfigError: the directory has ``metrics.jsonl`` but no checkpoint (starting
            over would overwrite those metrics), or the checkpoint was written by the
            other algorithm.
        RuntimeError: the pointer, the step's directory or its ``driver.pt`` is
            missing or damaged; the message names the file.
        ValueError: a line of ``metrics.jsonl`` is not JSON; the message names it.
    """
    step = latest(output_dir)
    metrics = os.path.join(output_dir, "metrics.jsonl")
    if step is None:
        if os.path.exists(metrics):
            # Refuse rather than start over: a fresh run would replace metrics.jsonl.
            raise ConfigError(
                f"--resume: {output_dir} holds {metrics} but no checkpoint "
                f"({checkpoints_dir(output_dir)}/{POINTER} is missing; "
                "save_freq=0, the default, writes none), so there is nothing to resume "
                "from. Start without --resume in a new --output-dir, or pass "
                "--save-freq N so that the next run writes checkpoints; metrics.jsonl "
                "was left as it is"
            )
        return None
    path = step_dir(output_dir, step)
    driver_file = os.path.join(path, "driver.pt")
    if not os.path.exists(driver_file):
        raise RuntimeError(
            f"cannot resume from step {step}: {driver_file} does not exist (the pointer "
            f"names a checkpoint that is missing or incomplete); write the N of a "
            f"complete global_step_N into {POINTER}"
        )
    driver = load_checkpoint_file(driver_file)
    # Checkpoints from before the algorithm was saved: only PPO writes a critic.
    has_critic = os.path.isdir(os.path.join(path, "critic"))
    saved_algo = driver.get("algo") or ("ppo" if has_critic else "grpo")
    if saved_algo != algo:
        raise ConfigError(
            f"checkpoint at step {step} ({path}) was written by {saved_algo}, this run is "
            f"{algo}; resume with --algo {saved_algo}, or start without --resume in a "
            "new --output-dir"
        )
    if os.path.exists(metrics):
        read_metrics(metrics)  # a damaged line fails here, before any worker loads
    return step


def load(output_dir: str, step: int, groups: dict, data_rng: torch.Generator) -> None:
    """Load ``global_step_{step}/`` into each role's workers and ``data_rng``.

    Raises:
        RuntimeError: a file of the checkpoint cannot be read (the message names it;
            a worker's error also names its rank).
    """
    path = step_dir(output_dir, step)
    for role, group in groups.items():
        group.load_checkpoint(os.path.join(path, role))
    driver = load_checkpoint_file(os.path.join(path, "driver.pt"))
    data_rng.set_state(driver["data_rng"])
