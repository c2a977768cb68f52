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


RECORD = REPO / "benchmarks" / "results" / "verl-cpu-run"


def test_the_run_matches_the_record_the_chapter_shows(run):
    """docs/verl/run-layout.md#cpu-run shows the committed record (tests/test_verl_cpu_record.py
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
