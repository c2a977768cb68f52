"""A snapshot of Ray's state taken from inside the trainer, mid-training.

The same view ``ray list actors``, ``ray list placement-groups`` and ``ray status`` give, but
taken by the run itself at a known point: right after the trainer has logged the metrics of step
``VERL_CPU_PROBE_STEP``, while every actor of the run is alive. (A poller outside the run
misses short runs and does not know which step it saw.)

The hook wraps ``Tracking.log`` (`verl/utils/tracking.py`), which the trainer calls with each
step's metrics in the ``TaskRunnerV1`` process; loaded through ``VERL_USE_EXTERNAL_MODULES``
like platform.py, and active only where ``VERL_CPU_PROBE`` names the JSON file to write.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from verl.utils.tracking import Tracking

ACTOR_FIELDS = ("class_name", "state", "name", "ray_namespace", "pid", "placement_group_id")


def snapshot(step: int) -> dict:
    """Actors, placement groups and the cluster's resources, as Ray's state API reports them."""
    import ray
    from ray.util.state import list_actors, list_placement_groups

    # The state API takes its cluster from RAY_ADDRESS before its `address` argument, and with
    # RAY_ADDRESS=local (run.py sets it) it looks for running clusters and refuses when it finds
    # several on the machine: name this run's own cluster.
    address = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    try:
        actors = list_actors(limit=10_000, detail=True, raise_on_missing_output=False)
        groups = list_placement_groups(limit=1_000, detail=True, raise_on_missing_output=False)
    finally:
        if address is None:
            del os.environ["RAY_ADDRESS"]
        else:
            os.environ["RAY_ADDRESS"] = address
    return {
        "step": step,
        "time": time.time(),
        "taken_in": {"pid": os.getpid(), "actor": ray.get_runtime_context().get_actor_name()},
        "actors": [
            {
                **{key: getattr(actor, key, None) for key in ACTOR_FIELDS},
                "required_resources": getattr(actor, "required_resources", None),
            }
            for actor in actors
        ],
        "placement_groups": [
            {"name": group.name, "state": group.state, "bundles": group.bundles} for group in groups
        ],
        "cluster_resources": ray.cluster_resources(),
        "available_resources": ray.available_resources(),
    }


def install(path: Path, at_step: int) -> None:
    """Wrap ``Tracking.log``: after step ``at_step`` is logged, write the snapshot once."""
    log = Tracking.log

    def log_then_snapshot(self, data, step, backend=None):
        log(self, data, step, backend=backend)
        if step == at_step and "training/global_step" in data and not path.exists():
            try:
                taken = snapshot(step)
            except Exception as error:  # the probe must not end veRL's run; run.py reports it
                taken = {"step": step, "error": f"{type(error).__name__}: {error}"}
            partial = path.with_suffix(".partial")
            partial.write_text(json.dumps(taken, indent=1, default=str))
            partial.rename(path)

    Tracking.log = log_then_snapshot


if os.environ.get("VERL_CPU_PROBE"):
    install(Path(os.environ["VERL_CPU_PROBE"]), int(os.environ.get("VERL_CPU_PROBE_STEP", "1")))
