"""What veRL 0.9.1's real trainer did on the CPU, read from the runs' run.json (`nox -s verl_run`).

Each run is ``python -m verl.trainer.main_ppo`` started by examples/verl_on_cpu/run.py, which
records the exit code, the ``step:N`` lines, a snapshot of Ray's actors, placement groups and
resources taken inside the trainer mid-training, and the calls per actor method counted in Ray's
timeline. The expected numbers below follow from the run's shape and veRL's defaults; each test
fails, naming the difference, when the run differs.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN_DIR = Path(os.environ.get("VERL_RUN_DIR", REPO / "runs" / "verl_run"))

# What run.py asks of veRL: 4 prompts a step, a group of 4 responses each for GRPO (1 for PPO),
# and validation on the 8 test prompts (one greedy response each).
PROMPTS_PER_STEP = 4
RESPONSES_PER_PROMPT = {"grpo": 4, "ppo": 1}
VALIDATION_PROMPTS = 8
# The shapes: veRL's default of 8 agent-loop workers, reward-loop workers and TransferQueue
# storage units, or one of each; the logical CPUs run.py declares to Ray.
WORKERS = {"default": 8, "small": 1}
RAY_CPUS = {"default": 16, "small": 8}
# What `nox -s verl_run` runs.
SESSION = {
    "grpo": {"shape": "default", "steps_requested": 3, "validate": True},
    "ppo": {"shape": "small", "steps_requested": 2, "validate": False},
}
WORKER_DICT = "create_colocated_worker_cls.<locals>.WorkerDict"


@pytest.fixture(scope="module", params=sorted(SESSION))
def run(request) -> dict:
    path = RUN_DIR / request.param / "run.json"
    if not path.exists():
        pytest.fail(f"{path} is missing: examples/verl_on_cpu/run.py did not finish")
    return json.loads(path.read_text())


def training_steps(run: dict) -> list[dict]:
    return [s for s in run["steps"] if "training/global_step" in s["metrics"]]


def test_the_run_is_the_one_the_session_asks_for(run):
    asked = SESSION[run["algo"]]
    assert {key: run[key] for key in asked} == asked
    assert run["versions"]["verl"] == "0.9.1" and run["versions"]["ray"] == "2.60.0"


def test_verl_exits_with_0(run):
    assert not run["timed_out"], f"killed after {run['wall_s']} s"
    assert run["returncode"] == 0


def test_every_step_prints_its_line(run):
    steps = [s["step"] for s in training_steps(run)]
    assert steps == list(range(1, run["steps_requested"] + 1))
    validation = [s for s in run["steps"] if s["step"] == 0]
    if run["validate"]:  # validation before training logs step 0
        assert "val-core/openai/gsm8k/acc/mean@1" in validation[0]["metrics"]
    else:
        assert validation == []


def test_gradients_are_not_zero(run):
    for step in training_steps(run):
        metrics = step["metrics"]
        assert metrics["actor/grad_norm"] > 1e-3, step["step"]
        if run["algo"] == "ppo":
            assert metrics["critic/grad_norm"] > 1e-3, step["step"]
            assert metrics["critic/vf_loss"] > 0, step["step"]
        else:
            assert "critic/grad_norm" not in metrics


def test_the_rollout_generates_with_the_trainers_weights(run):
    """The rollout's token probabilities match the trainer's recomputation, at every step.

    veRL compares them each step (``training/rollout_probs_diff_*``, ``rollout_corr/*``). With
    the weight sync working they differ by rounding (the trainer computes in bf16): about 1e-4
    here. With the sync broken (the rollout kept the initial weights: tried once), step 2 showed
    a largest probability difference of 1.0e-3 and a k3 KL of 3.4e-3, growing after.
    """
    for step in training_steps(run):
        metrics = step["metrics"]
        assert metrics["training/rollout_probs_diff_max"] < 4e-4, step["step"]
        assert metrics["rollout_corr/k3_kl"] < 1e-3, step["step"]


def test_actors_alive_mid_training(run):
    snapshot = run["snapshot"]
    assert snapshot is not None, "the probe in the trainer wrote no snapshot"
    assert "error" not in snapshot, snapshot.get("error")
    assert snapshot["step"] == run["probe_step"] and 1 <= run["probe_step"] < run["steps_requested"]
    assert {a["state"] for a in snapshot["actors"]} == {"ALIVE"}
    w = WORKERS[run["shape"]]
    expected = {
        "TaskRunnerV1": 1,  # veRL's controller
        "TransferQueueController": 1,
        "SimpleStorageUnit": w,  # TransferQueue's storage units
        WORKER_DICT: 1,  # the trainer's worker group: one per (logical) GPU
        "HFCPUServer": 1,  # the rollout server, where vLLMHttpServer would be
        "GlobalRequestLoadBalancer": 1,
        "RewardLoopWorker": w,
        "AgentLoopWorkerTQ": w,
    }
    assert dict(Counter(a["class_name"] for a in snapshot["actors"])) == expected
    assert len(snapshot["actors"]) == 5 + 3 * w  # 29 in veRL's default shape


def test_actor_names_and_namespaces(run):
    actors = run["snapshot"]["actors"]
    names = {
        a["class_name"]: sorted(b["name"] for b in actors if b["class_name"] == a["class_name"])
        for a in actors
    }
    w = WORKERS[run["shape"]]
    assert names["SimpleStorageUnit"] == sorted(f"TransferQueueStorageUnit#{i}" for i in range(w))
    assert names["RewardLoopWorker"] == sorted(f"reward_loop_worker_{i}" for i in range(w))
    assert all(
        re.fullmatch(r"agent_loop_worker_\d+_[0-9a-f]{8}", n) for n in names["AgentLoopWorkerTQ"]
    )
    assert re.fullmatch(r"[0-9A-Za-z]{6}WorkerDict_0:0", names[WORKER_DICT][0])
    assert names["HFCPUServer"] == ["hfcpu_server_0_0"]
    assert names["TaskRunnerV1"] == names["GlobalRequestLoadBalancer"] == [""]
    namespaces = {a["class_name"]: a["ray_namespace"] for a in actors}
    assert namespaces.pop("TransferQueueController") == "transfer_queue"
    assert len(set(namespaces.values())) == 1, "all others share the job's namespace"


def test_resources_held(run):
    w = WORKERS[run["shape"]]
    cpu, gpu = run["resources"]["CPU"], run["resources"]["GPU"]
    assert cpu["total"] == RAY_CPUS[run["shape"]] and gpu["total"] == 1
    # TransferQueue holds 1 CPU for its controller and 1 per storage unit, for the whole run;
    # the trainer's placement group reserves 3 CPUs and the GPU, of which the WorkerDict uses
    # 1 CPU and a third of the GPU; every other actor holds nothing once placed.
    assert cpu["held"] == 1 + w + 3
    assert cpu["reserved_in_placement_groups"] == 3 and cpu["used_in_placement_groups"] == 1
    assert cpu["used_as_ray_status_prints"] == 1 + w + 1
    assert gpu["held"] == 1 and gpu["used_in_placement_groups"] == pytest.approx(1 / 3, abs=1e-3)
    (group,) = run["snapshot"]["placement_groups"]
    assert (group["name"], group["state"]) == ("global_poolverl_group_1:0", "CREATED")
    assert [b["unit_resources"] for b in group["bundles"]] == [{"CPU": 3.0, "GPU": 1.0}]


def test_held_cpus_add_up_from_the_actors(run):
    """The snapshot's own actors account for the CPUs Ray reports as held."""
    actors, cpu = run["snapshot"]["actors"], run["resources"]["CPU"]
    outside = sum(
        (a["required_resources"] or {}).get("CPU", 0) for a in actors if not a["placement_group_id"]
    )
    assert outside + cpu["reserved_in_placement_groups"] == cpu["held"]
    (worker,) = [a for a in actors if a["class_name"] == WORKER_DICT]
    needs = {
        re.sub(r"_group_(0_)?[0-9a-f]+$", "", k): v for k, v in worker["required_resources"].items()
    }
    assert needs["CPU"] == 1 and needs["GPU"] == pytest.approx(1 / 3, abs=1e-3)
    (runner,) = [a for a in actors if a["class_name"] == "TaskRunnerV1"]
    assert not runner["required_resources"], "veRL's controller holds no CPU"


def test_calls_per_step(run):
    steps, calls = run["steps_requested"], run["calls"]
    w = WORKERS[run["shape"]]
    validation = VALIDATION_PROMPTS if run["validate"] else 0
    trajectories = steps * PROMPTS_PER_STEP * RESPONSES_PER_PROMPT[run["algo"]] + validation
    role = "actor_rollout_ref" if run["algo"] == "grpo" else "actor_rollout"
    expected = {
        # one per trajectory: the agent loop asks the load balancer for a server, generates,
        # gives the server back; the reward-loop workers score each trajectory
        "HFCPUServer.generate": trajectories,
        "GlobalRequestLoadBalancer.acquire_server": trajectories,
        "GlobalRequestLoadBalancer.release_server": trajectories,
        "RewardLoopWorker.compute_score": trajectories,
        # a step's prompts are dealt out to the agent-loop workers, a group stays together
        "AgentLoopWorkerTQ.generate_sequences": steps * min(w, PROMPTS_PER_STEP)
        + min(w, validation),
        # once per step on the worker group
        f"WorkerDict.{role}_compute_log_prob": steps,
        f"WorkerDict.{role}_update_actor": steps,
        # the weight sync: once at start, then after every update
        f"WorkerDict.{role}_update_weights": steps + 1,
        "HFCPUServer.update_weights": steps + 1,
        "HFCPUServer.sleep": steps + 1,
        "HFCPUServer.wake_up": 2 * (steps + 1),  # weights, then kv_cache
        # one actor of each, created once
        "TaskRunnerV1.run": 1,
        "WorkerDict.__init__": 1,
        "HFCPUServer.__init__": 1,
        "SimpleStorageUnit.__init__": w,
        "AgentLoopWorkerTQ.__init__": w,
        "RewardLoopWorker.__init__": w,
    }
    if run["algo"] == "grpo":  # the reference policy, for the KL loss
        expected[f"WorkerDict.{role}_compute_ref_log_prob"] = steps
    else:  # the critic: values, then its update
        expected["WorkerDict.critic_infer_batch"] = steps
        expected["WorkerDict.critic_train_mini_batch"] = steps
    assert {name: calls.get(name, 0) for name in expected} == expected
    others = {"compute_ref_log_prob"} if run["algo"] == "ppo" else {"critic_"}
    assert not [name for name in calls if any(part in name for part in others)]


def test_no_process_left_behind(run):
    assert run["left_behind"] == []
    import psutil

    (temp_dir,) = [
        a.split("=", 1)[1]
        for a in run["command"]
        if a.startswith("+ray_kwargs.ray_init._temp_dir=")
    ]
    alive = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        if temp_dir in " ".join(process.info["cmdline"] or []):
            alive.append(process.info["pid"])
    assert alive == [], f"processes of the run still alive: {alive}"


# What moves through TransferQueue (run.json's "transferqueue", measured by tqmeter.py). The
# stages of a training step, as (process, stage, put or get), in the order they run, with the
# fields each moves: the agent-loop workers write each trajectory (the fields listed are some of
# them); each forward pass on the worker group reads its rows (ALL: every field stored so far,
# the bridge does not narrow) and writes its per-token output; the controller (TaskRunnerV1)
# reads that output, cuts it to the response tokens and writes it back; the updates only read.
ALL = None
ROLLOUT = ("AgentLoopWorkerTQ", "_agent_loop_postprocess", "put")
ROLLOUT_FIELDS = {"uid", "prompts", "responses", "input_ids", "position_ids", "response_mask"}
ROLLOUT_FIELDS |= {"rollout_log_probs", "rm_scores"}
LOGPROB = {
    ("WorkerDict", "compute_log_prob", "get"): ALL,
    ("WorkerDict", "compute_log_prob", "put"): {"log_probs", "entropy"},
    ("TaskRunnerV1", "_compute_old_log_prob", "get"): {
        *("entropy", "log_probs", "response_mask", "responses", "rollout_log_probs")
    },
    ("TaskRunnerV1", "_compute_old_log_prob", "put"): {"old_log_probs", "entropy"},
}
ADVANTAGE = {"uid", "response_mask", "rm_scores", "rollout_log_probs", "old_log_probs"}
METRICS = {"prompts", "responses", "response_mask", "advantages", "returns", "rm_scores"}
METRICS |= {"num_turns"}
TQ_STAGES = {
    "grpo": {
        ROLLOUT: ROLLOUT_FIELDS,
        **LOGPROB,
        ("WorkerDict", "compute_ref_log_prob", "get"): ALL,
        ("WorkerDict", "compute_ref_log_prob", "put"): {"log_probs"},
        ("TaskRunnerV1", "_compute_ref_log_prob", "get"): {"log_probs", "response_mask"},
        ("TaskRunnerV1", "_compute_ref_log_prob", "put"): {"ref_log_prob"},
        ("TaskRunnerV1", "_compute_advantage", "get"): ADVANTAGE | {"ref_log_prob"},
        ("TaskRunnerV1", "_compute_advantage", "put"): {"advantages", "returns", "response_mask"},
        ("WorkerDict", "update_actor", "get"): ALL,
        ("TaskRunnerV1", "_compute_metrics", "get"): METRICS,
    },
    "ppo": {
        ROLLOUT: ROLLOUT_FIELDS,
        **LOGPROB,
        ("WorkerDict", "infer_batch", "get"): ALL,
        ("WorkerDict", "infer_batch", "put"): {"values"},
        ("TaskRunnerV1", "_compute_values", "get"): {"values", "response_mask"},
        ("TaskRunnerV1", "_compute_values", "put"): {"values"},
        ("TaskRunnerV1", "_compute_advantage", "get"): ADVANTAGE | {"values"},
        ("TaskRunnerV1", "_compute_advantage", "put"): {"advantages", "returns", "response_mask"},
        ("WorkerDict", "train_mini_batch", "get"): ALL,
        ("WorkerDict", "update_actor", "get"): ALL,
        ("TaskRunnerV1", "_compute_metrics", "get"): METRICS | {"values"},
    },
}
# Per-token outputs the controller writes back, one value per response token
RESPONSE_TOKEN_FIELDS = {
    "grpo": ("old_log_probs", "ref_log_prob", "advantages", "returns"),
    "ppo": ("old_log_probs", "values", "advantages", "returns"),
}
ITEMSIZE = {"int64": 8, "float32": 4, "bfloat16": 2, "uint8": 1}
MAX_RESPONSE_LENGTH = 16  # data.max_response_length in run.py


def operations(entry: dict) -> dict[tuple, dict]:
    return {(o["process"], o["stage"], o["op"]): o for o in entry["operations"]}


def test_transferqueue_bytes_per_step(run):
    """Every training step puts and gets the same fields, in the stages veRL's trainer runs, and
    the token fields' bytes are the step's own token counts times their element size."""
    tq = run["transferqueue"]
    assert tq["errors"] == [] and tq["records"] > 0
    steps = training_steps(run)
    assert list(tq["steps"]) == ["0"] * run["validate"] + [str(s["step"]) for s in steps]
    rows = PROMPTS_PER_STEP * RESPONSES_PER_PROMPT[run["algo"]]
    first = tq["steps"]["1"]
    for step in steps:
        entry, metrics = tq["steps"][str(step["step"])], step["metrics"]
        ops = operations(entry)
        assert list(ops) == list(TQ_STAGES[run["algo"]]), step["step"]
        stored: set[str] = set()
        for key, expected in TQ_STAGES[run["algo"]].items():
            moved = set(ops[key]["bytes"])
            if key == ROLLOUT:
                assert moved >= expected, (step["step"], expected - moved)
            else:
                assert moved == (stored if expected is ALL else expected), (step["step"], key)
            if key[2] == "put":
                stored |= moved
        # the rollout writes each trajectory as it finishes: one put of one row each
        assert ops[ROLLOUT]["calls"] == ops[ROLLOUT]["rows"] == rows
        assert all(o["rows"] == rows for o in entry["operations"]), step["step"]
        assert set(entry["fields"]) == set(first["fields"]), step["step"]
        # token ids: int64, one per token; the step line gives the mean lengths
        written = ops[ROLLOUT]["bytes"]
        responses = round(metrics["response_length/mean"] * rows)
        prompts = round(metrics["prompt_length/mean"] * rows)
        assert written["responses"] == 8 * responses <= 8 * rows * MAX_RESPONSE_LENGTH
        assert written["prompts"] == 8 * prompts
        assert written["input_ids"] == written["position_ids"] == 8 * (prompts + responses)
        fields = entry["fields"]
        # a forward pass writes one value per token of the sequence, prompt and response; the
        # controller writes back one per response token
        for (process, stage, op), operation in ops.items():
            if op != "put" or process not in ("WorkerDict", "TaskRunnerV1"):
                continue
            tokens = responses if process == "TaskRunnerV1" else prompts + responses
            for name, size in operation["bytes"].items():
                expected = tokens * ITEMSIZE[fields[name]["dtype"]]
                assert size == expected, (step["step"], stage, name)
        for name in RESPONSE_TOKEN_FIELDS[run["algo"]]:
            assert fields[name]["kind"] == "jagged", name
        assert stored == set(fields)  # every field was written in this step


def test_transferqueue_validation_pass(run):
    if not run["validate"]:
        pytest.skip("no validation pass in this run")
    ops = operations(run["transferqueue"]["steps"]["0"])
    # one greedy response per test prompt, read back by the controller to score them
    assert list(ops) == [ROLLOUT, ("TaskRunnerV1", "_validate", "get")]
    assert ops[ROLLOUT]["rows"] == ops[ROLLOUT]["calls"] == VALIDATION_PROMPTS


RECORD = REPO / "benchmarks" / "results" / "verl-cpu-run"


def test_the_run_matches_the_record_the_chapter_shows(run):
    """docs/verl/run-layout.md#cpu-run shows the committed record (tests/test_records.py
    holds the page to it); this run must have the same actors, the same logical resources held
    and the same calls, so that the page stays what veRL 0.9.1 does."""
    record = json.loads((RECORD / f"{run['algo']}.json").read_text())

    def alive(r: dict) -> Counter:
        return Counter(a["class_name"] for a in r["snapshot"]["actors"] if a["state"] == "ALIVE")

    assert alive(run) == alive(record)
    for kind in ("CPU", "GPU"):
        assert run["resources"][kind] == record["resources"][kind], kind
    # Every actor's creation, and the calls the page tabulates (set-up calls such as
    # get_config are left out: their number is not what the chapter is about).
    shown = ("__init__", "generate", "acquire_server", "compute_score", "generate_sequences")
    shown += ("compute_log_prob", "compute_ref_log_prob", "update_actor", "update_weights")
    shown += ("critic_infer_batch", "critic_train_mini_batch")

    def tabulated(calls: dict) -> dict:
        return {name: n for name, n in calls.items() if name.endswith(shown)}

    assert tabulated(run["calls"]) == tabulated(record["calls"])
    # what goes through TransferQueue: the same stages and fields every step (the bytes follow
    # the lengths sampled, and transferqueue.md#per-step shows the record's)

    def transfers(r: dict) -> dict:
        return {
            step: (sorted(operations(entry)), sorted(entry["fields"]))
            for step, entry in r["transferqueue"]["steps"].items()
        }

    assert transfers(run) == transfers(record)
