"""Run veRL 0.9.1's ``TaskRunnerV1`` on the declared cluster, and read what Ray made of it.

The steps of ``run_ppo`` (`verl/trainer/main_ppo.py`), on a ``ray.cluster_utils.Cluster`` of
the reader's nodes: ``ray.init`` with veRL's runtime env (``get_ppo_ray_runtime_env``), then
``TaskRunnerV1.remote()`` and ``run.remote(config)``. Where veRL waits without a limit
(``ray.get`` of ``pg.ready()`` in ``RayResourcePool.get_placement_groups``, TransferQueue's
start-up), the planner waits ``limit_s`` and then reads the cluster's state: actors from the GCS
(``ray._private.state.actors``), placement groups (``ray.util.placement_group_table``), and each
node's total and free resources.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

# Ray would start one idle Python worker per declared CPU on each node: 96 per node here.
RAY_ENV = {
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
    # how long a raylet waits for its agents (and their port files); 2 busy cores can need minutes
    "RAY_agent_register_timeout_ms": "300000",
    "RAY_raylet_start_wait_time_s": "300",
}
OBJECT_STORE_BYTES = 80 * 2**20  # the smallest Ray accepts is 75 MiB; nothing big is stored
NODE_REGISTER_S = 90.0  # how long each simulated node may take to register (Ray alone gives 30 s)
CLUSTER_TRIES = 3  # a raylet whose agents start too slowly exits; the cluster is then started again


def _model_dir(cache: Path) -> Path:
    """A model directory veRL can read at start-up: a Qwen2 config and a 3-token tokenizer.

    veRL reads the model's config, tokenizer and generation config in ``TaskRunnerV1``
    (``HFModelConfig``, `verl/workers/config/model.py`); no weights are loaded, since the workers
    are stand-ins. The reader's model is not downloaded: layout does not depend on it.
    """
    directory = cache / "model"
    if not (directory / "config.json").exists():
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config

        directory.mkdir(parents=True, exist_ok=True)
        vocab = {"<|endoftext|>": 0, "<|im_end|>": 1, "<unk>": 2}
        tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        PreTrainedTokenizerFast(
            tokenizer_object=tokenizer,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            unk_token="<unk>",
        ).save_pretrained(directory)
        Qwen2Config(
            vocab_size=len(vocab),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            eos_token_id=1,
            pad_token_id=0,
            architectures=["Qwen2ForCausalLM"],
        ).save_pretrained(directory)
        GenerationConfig(eos_token_id=1, pad_token_id=0).save_pretrained(directory)
    return directory


def simulate(
    config,
    nodes,
    limit_s: float = 600.0,
    stall_s: float = 20.0,
    settle_s: float = 30.0,
    workdir: Path | None = None,
) -> dict:
    """Start the cluster, run TaskRunnerV1 with stand-in workers, return what happened.

    Args:
        config: the composed and validated veRL DictConfig (``config.compose``).
        nodes: list of ``cluster.NodeSpec``; the first is the head.
        limit_s: how long to wait for ``TaskRunnerV1`` to be placed, and then for its ``run``
            (seconds, each); a run still going then is reported with outcome "limit".
        stall_s: a run that has something Ray cannot place (a pending placement group, an
            actor no node can take) and in which nothing changed for this long is reported as
            waiting before ``limit_s``: veRL itself would wait without end.
        settle_s: after run returns or the limit passes, how long to wait for actors that are
            still starting (not those Ray cannot place).

    Returns a dict: nodes, records (one per actor created), actors (GCS state), placement_groups,
    resources per node (total, free), outcome ("finished", "raised", "waiting": stalled on
    what Ray cannot place, "limit": still going at limit_s), error, limit_s,
    seconds.
    """
    import ray
    from omegaconf import OmegaConf, open_dict

    from reference_impl.plan import inside, standins

    start = time.monotonic()
    workdir = Path(workdir or tempfile.mkdtemp(prefix="verl-plan-"))
    cache = Path(os.environ.get("PLAN_CACHE", Path(tempfile.gettempdir()) / "verl-plan-cache-v1"))
    model = str(_model_dir(cache))
    with open_dict(config):
        config.actor_rollout_ref.model.path = model
        if OmegaConf.select(config, "critic.model.path") is not None:
            config.critic.model.path = model
        config.trainer.default_local_dir = str(workdir / "checkpoints")
        config.trainer.logger = ["console"]
    record = workdir / "actors.jsonl"
    record.write_text("")

    os.environ.update(RAY_ENV)
    os.environ["RAY_TMPDIR"] = os.environ.get("RAY_TMPDIR", tempfile.gettempdir())
    cluster, node_ids = start_cluster(nodes)
    result = {"node_ids": node_ids, "limit_s": limit_s, "stall_s": stall_s, "settle_s": settle_s}
    try:
        from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
        from verl.trainer.main_ppo import TaskRunnerV1

        runtime_env = OmegaConf.to_container(OmegaConf.create(get_ppo_ray_runtime_env(config)))
        env = runtime_env.setdefault("env_vars", {})
        env["TRANSFER_QUEUE_ENABLE"] = "1"  # as run_ppo sets it
        ray.init(
            address=cluster.address,
            runtime_env=runtime_env,
            logging_level="ERROR",
            log_to_driver=False,
        )

        os.environ.update(PLAN_RECORD=str(record), PLAN_ROLE="driver")
        standins.install()  # records TaskRunnerV1's own request; nothing is replaced here
        runner = TaskRunnerV1.remote()
        ready = runner.__ray_call__.remote(lambda _, path: inside.install(path), str(record))
        done, _ = ray.wait([ready], timeout=limit_s)
        outcome, error = "waiting", None
        if done:
            run = runner.run.remote(config)
            ended = _wait_or_stall(run, record, time.monotonic() + limit_s, stall_s)
            outcome = "waiting" if ended == "stalled" else "limit"
            if ended == "finished":
                try:
                    ray.get(run)
                    outcome = "finished"
                except Exception as exc:  # veRL's own error, raised in TaskRunnerV1
                    outcome, error = "raised", _last_error_line(exc)
                    result["error_detail"] = str(exc)[-4000:]
        result.update(outcome=outcome, error=error)
        result["seconds_to_outcome"] = round(time.monotonic() - start, 1)
        result.update(_settle(record, settle_s))
    finally:
        ray.shutdown()
        cluster.shutdown()
    result["seconds"] = round(time.monotonic() - start, 1)
    return result


def start_cluster(nodes, register_s: float = NODE_REGISTER_S):
    """A ``Cluster`` with one raylet per node; returns it and the node ids, head first.

    Ray gives each raylet 30 s to register with the GCS (``raylet_start_wait_time_s`` in
    `python/ray/_private/node.py` (`Node`)), which a busy machine misses; here each lookup of
    the new node (``ray._private.services.get_node``) retries for up to ``register_s`` seconds.
    On a very busy machine a raylet also exits when its agents take too long to write their
    ports; the whole cluster is then started again, ``CLUSTER_TRIES`` times in all. A node that
    never registers is raised as a RuntimeError that gives the limits.
    """
    from ray._private import services
    from ray.cluster_utils import Cluster

    get_node = services.get_node

    def patient_get_node(gcs_address, node_id):
        deadline = time.monotonic() + register_s
        while True:
            try:
                return get_node(gcs_address, node_id)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def args():
        return dict(object_store_memory=OBJECT_STORE_BYTES, include_log_monitor=False)

    # The dashboard agent in its minimal form (as with `pip install ray` without [default]):
    # fewer modules to import, so it writes its port file sooner (see CLUSTER_TRIES).
    from ray._private import utils

    dependency_error = utils.get_dashboard_dependency_error
    utils.get_dashboard_dependency_error = lambda: "the planner starts minimal agents"
    services.get_node = patient_get_node
    try:
        for attempt in range(1, CLUSTER_TRIES + 1):
            cluster, node_ids = None, []
            try:
                cluster = Cluster(
                    initialize_head=True,
                    head_node_args=dict(nodes[0].ray_args(), include_dashboard=False, **args()),
                )
                node_ids.append(cluster.head_node.node_id)
                for node in nodes[1:]:
                    node_ids.append(cluster.add_node(**node.ray_args(), **args()).node_id)
                break
            except (
                Exception
            ) as error:  # Ray raises a bare Exception for a node that did not register
                if cluster is not None:
                    cluster.shutdown()
                if "timed out during startup" not in str(error):
                    raise
                if attempt == CLUSTER_TRIES:
                    raise RuntimeError(
                        f"the simulated cluster did not start: node {len(node_ids)} did not "
                        "register with the "
                        f"GCS within {register_s:g} s, {CLUSTER_TRIES} times; the machine is too "
                        "busy (see "
                        f"uptime): run the plan again when it is less loaded"
                    ) from None
                print(
                    f"plan: node {len(node_ids)} did not start within {register_s:g} s; starting "
                    "the cluster again"
                )
    finally:
        services.get_node = get_node
        utils.get_dashboard_dependency_error = dependency_error
    return cluster, node_ids


def _wait_or_stall(run, record: Path, deadline: float, stall_s: float) -> str:
    """Wait for ``run``: "finished" when it ended, "stalled" once something cannot be placed and
    the cluster's state has not changed for ``stall_s`` seconds, "limit" at ``deadline``."""
    import ray

    from reference_impl.plan.report import blocked

    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        done, _ = ray.wait([run], timeout=2.0)
        if done:
            return "finished"
        snap = _read(record)
        signature = (
            len(snap["records"]),
            sorted((k, v.get("State")) for k, v in snap["actors"].items()),
            sorted((k, v.get("state")) for k, v in snap["placement_groups"].items()),
        )
        if signature != last:
            last, since = signature, time.monotonic()
            continue
        stuck = any(
            pg.get("state") == "PENDING" for pg in snap["placement_groups"].values()
        ) or any(
            # A DEAD actor waits for nothing: the error it raised reaches veRL's driver, and
            # the run ends ("raised") rather than stalls.
            snap["actors"].get(r["actor_id"], {}).get("State") not in ("ALIVE", "DEAD")
            and blocked(r, snap)
            for r in snap["records"]
        )
        if stuck and time.monotonic() - since >= stall_s:
            return "stalled"
    return "limit"


def _last_error_line(exc: Exception) -> str:
    """The exception veRL raised in TaskRunnerV1, without Ray's wrapping: 'Type: first line'."""
    cause = getattr(exc, "cause", None) or exc  # RayTaskError keeps the original as .cause
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    return f"{type(cause).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _read(record: Path) -> dict:
    import ray
    from ray._private import state

    records = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
    actors = state.actors()
    pgs = ray.util.placement_group_table()
    nodes = {}
    for node in ray.nodes():
        if node.get("Alive"):
            nodes[node["NodeID"]] = {"total": node["Resources"]}
    for node_id, free in state.available_resources_per_node().items():
        if node_id in nodes:
            nodes[node_id]["free"] = free
    return {"records": records, "actors": actors, "placement_groups": pgs, "resources": nodes}


def _settle(record: Path, settle_s: float) -> dict:
    """Read the state until every recorded actor is ALIVE, or those that are not cannot be placed
    now, or ``settle_s`` passes; then read free resources twice in a row alike (Ray's resource
    view lags its scheduling by a report period)."""
    from reference_impl.plan.report import blocked

    deadline = time.monotonic() + settle_s
    snapshot = _read(record)
    while time.monotonic() < deadline:
        starting = [
            r
            for r in snapshot["records"]
            if snapshot["actors"].get(r["actor_id"], {}).get("State") != "ALIVE"
            and not blocked(r, snapshot)
        ]
        if not starting:
            break
        time.sleep(1.0)
        snapshot = _read(record)
    for _ in range(10):
        time.sleep(1.0)
        again = _read(record)
        same = {k: v.get("free") for k, v in again["resources"].items()} == {
            k: v.get("free") for k, v in snapshot["resources"].items()
        }
        snapshot = again
        if same:
            break
    snapshot["settled"] = time.monotonic() < deadline
    return snapshot
