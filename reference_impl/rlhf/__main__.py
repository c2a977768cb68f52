"""Command line: ``python -m reference_impl.rlhf --preset cpu --algo grpo --output-dir DIR``.

Any field of :class:`~reference_impl.rlhf.config.RLHFConfig` can be overridden
with ``--set name=value`` (e.g. ``--set n=4 --set actor_lr=1e-4``). Without
``RAY_ADDRESS`` a local Ray instance is started; with it, the run joins that
cluster, as veRL's trainer does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import get_type_hints

from reference_impl.rlhf.config import DEFAULTS, ConfigError, RLHFConfig, make_config
from reference_impl.rlhf.model import PRESETS


def parse_value(name: str, text: str):
    """``text`` converted to the type of the config field ``name``.

    Raises:
        ConfigError: ``text`` is not a value of that type; the message names ``name``.
    """
    # The annotations are strings here (``from __future__ import annotations``):
    # get_type_hints evaluates them into the types themselves.
    kind = get_type_hints(RLHFConfig).get(name)
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise ConfigError(f"--set {name}= takes true or false, got {text!r}")
        return text.lower() in ("true", "1")
    try:
        if kind in (int, float):
            return kind(text)
    except ValueError:
        wanted = "an integer" if kind is int else "a number"
        raise ConfigError(f"--set {name}= takes {wanted}, got {text!r}") from None
    return text


def parse_set(items: list[str]) -> dict:
    """``--set NAME=VALUE`` items as ``{name: value}``.

    Raises:
        ConfigError: an item without ``=``, or one that sets ``algo`` or ``preset``
            (those have their own options, which check their values).
    """
    overrides = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise ConfigError(f"--set takes NAME=VALUE, got {item!r}")
        if name in ("algo", "preset"):
            choices = "|".join(sorted(DEFAULTS if name == "algo" else PRESETS))
            raise ConfigError(f"--set {name}= is not accepted; use --{name} {{{choices}}}")
        overrides[name] = parse_value(name, value)
    return overrides


def check_output_dir(path: str) -> None:
    """Make ``path`` and check that a file can be written in it, before Ray starts.

    Raises:
        ConfigError: the directory cannot be made or written; the message names it.
    """
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise ConfigError(
            f"--output-dir {path} cannot be written ({err.strerror or err}); "
            "pass a directory you can write to"
        ) from err


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference_impl.rlhf", description=__doc__)
    parser.add_argument("--algo", choices=("grpo", "ppo"), default="grpo")
    parser.add_argument("--preset", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--output-dir", default="runs/rlhf")
    parser.add_argument("--total-steps", type=int)
    parser.add_argument("--world-size", type=int, help="data-parallel ranks per role")
    parser.add_argument("--nnodes", type=int, help="nodes a role spans (default 1)")
    parser.add_argument("--layout", choices=("colocated", "separate"))
    parser.add_argument("--save-freq", type=int)
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument("--target-score", type=float, help="stop once 5 steps average this score")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    overrides = {"output_dir": args.output_dir, "resume": args.resume}
    for name in ("total_steps", "world_size", "nnodes", "layout", "save_freq", "target_score"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    try:
        overrides.update(parse_set(args.set))
        config = make_config(args.algo, args.preset, **overrides)
        check_output_dir(config.output_dir)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    import ray

    from reference_impl.rlhf import checkpoint
    from reference_impl.rlhf.trainer import RLHFTrainer

    trainer = RLHFTrainer(config)
    if config.resume:
        # Checked before Ray starts, so that a directory that cannot be resumed costs nothing.
        try:
            checkpoint.resume_step(config.output_dir, config.algo)
        except (ConfigError, RuntimeError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init()
        else:
            # Logical CPUs: a CPU run wants one per worker process, even on a 2-core laptop.
            ray.init(num_cpus=max(os.cpu_count() or 1, config.num_processes))
    try:
        trainer.init_workers()
        history = trainer.fit(progress=not args.no_progress)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        trainer.shutdown()
        ray.shutdown()
    last = history[-1] if history else {}
    summary = {k: last[k] for k in ("critic/score/mean", "reward/exact_match") if k in last}
    print(json.dumps({"steps": len(history), **summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
