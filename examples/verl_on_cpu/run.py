"""Run veRL 0.9.1's own trainer, ``python -m verl.trainer.main_ppo``, on this CPU, and record it.

    python -m examples.verl_on_cpu.run --algo grpo --steps 3 --out /tmp/verl-cpu/grpo
    python -m examples.verl_on_cpu.run --algo ppo --steps 2 --shape small --out /tmp/verl-cpu/ppo

Run it from the repository root, with ``-m`` (this package has a module named ``platform``), in
an environment that has veRL 0.9.1 and a CPU torch (README.md). It

1. writes the fixture (fixture.py) under OUT/fixture;
2. starts ``python -m verl.trainer.main_ppo`` with the Hydra overrides below, in a process group
   of its own, with a time limit; on timeout the whole group is killed, Ray's processes with it;
3. loads this package into every process through ``VERL_USE_EXTERNAL_MODULES``: the CPU
   platform, the ``hfcpu`` rollout, and the probe that snapshots Ray's state mid-training;
4. reads the Chrome trace veRL writes at the end (``ray_kwargs.timeline_json_file``) and
   counts the calls of each actor method;
5. collects what tqmeter.py measured in every process: the fields, rows and bytes of each put
   into and get out of TransferQueue, summed per training step, stage, process and field;
6. writes everything to OUT/run.json and prints the actors, the CPUs held and the ``step:N``
   lines. The exit code is not 0 if veRL's run failed, a step line is missing or the probe
   wrote no snapshot.

Shapes: ``default`` keeps veRL's defaults for the number of agent-loop workers (8), reward-loop
workers (8) and TransferQueue storage units (8) on one (logical) GPU; ``small`` has one of each.
"""

from __future__ import annotations

if not __package__:  # `python run.py` would put this folder first on sys.path: platform.py
    raise SystemExit("run it as a module: python -m examples.verl_on_cpu.run (see --help)")

import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from .fixture import make_fixture

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
from run_limited import run_limited  # noqa: E402

HERE = Path(__file__).resolve().parent
# Imported by `import verl` in every process of the run (verl/__init__.py).
MODULES = ("platform", "rollout", "probe", "tqmeter")
EXTERNAL_MODULES = ",".join(f"{__package__}.{name}" for name in MODULES)
# Logical Ray CPUs. Not parallelism: Ray's bookkeeping. TransferQueue holds 1 + storage units
# for the whole run, the trainer's placement group 3 per GPU, and the actors that keep Ray's
# default (agent loop, reward loop, load balancer, rollout server) need 1 free CPU to be placed.
NUM_CPUS = {"default": 16, "small": 8}
WORKERS = {"default": None, "small": 1}  # None: veRL's default (8)
# Ray prefixes what an actor prints with "(ClassName pid=...)", in colour
STEP_LINE = re.compile(r"^(?:\(.*?\) )?step:(\d+) - (.*)$")
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")  # pprint of a numpy scalar: np.float64(-0.5)


def overrides(args, fixture: dict[str, str], out: Path, temp_dir: str) -> list[str]:
    """The Hydra overrides of ``verl/trainer/config/ppo_trainer.yaml`` for this run."""
    model = fixture["model"]
    batch, n = 4, (4 if args.algo == "grpo" else 1)
    items = [
        f"algorithm.adv_estimator={'grpo' if args.algo == 'grpo' else 'gae'}",
        f"data.train_files={fixture['train']}",
        f"data.val_files={fixture['test']}",
        f"data.train_batch_size={batch}",
        "data.max_prompt_length=64",
        "data.max_response_length=16",
        "data.dataloader_num_workers=0",  # no DataLoader worker processes in the trainer
        f"actor_rollout_ref.model.path={model}",
        # The defaults are FlashAttention-2 and the padding-free path (verl/workers/config/model.py)
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.actor.strategy=fsdp2",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        f"actor_rollout_ref.actor.use_kl_loss={args.algo == 'grpo'}",  # GRPO: a reference model
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.name=hfcpu",  # rollout.py
        f"actor_rollout_ref.rollout.n={n}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        f"reward.custom_reward_function.path={HERE / 'reward.py'}",
        "reward.custom_reward_function.name=compute_score",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "trainer.logger=[console]",
        f"trainer.total_training_steps={args.steps}",
        f"trainer.val_before_train={args.validate}",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={out / 'checkpoints'}",
        "trainer.project_name=verl_on_cpu",
        f"trainer.experiment_name={args.algo}_{args.shape}",
        # Ray: a private cluster with one logical GPU (Ray does not check hardware)
        f"ray_kwargs.ray_init.num_cpus={NUM_CPUS[args.shape]}",
        "+ray_kwargs.ray_init.num_gpus=1",
        f"+ray_kwargs.ray_init._temp_dir={temp_dir}",
        "+ray_kwargs.ray_init.object_store_memory=1000000000",
        f"ray_kwargs.timeline_json_file={out / 'timeline.json'}",
        f"hydra.run.dir={out / 'hydra'}",
    ]
    if args.algo == "ppo":
        items += [
            f"critic.model.path={model}",
            "critic.model.use_remove_padding=False",
            "+critic.model.override_config.attn_implementation=sdpa",
            "critic.strategy=fsdp2",
            f"critic.ppo_mini_batch_size={batch}",
            "critic.ppo_micro_batch_size_per_gpu=4",
            "critic.forward_micro_batch_size_per_gpu=4",
            "critic.optim.lr=1e-3",
        ]
    if WORKERS[args.shape] is not None:
        items += [
            f"actor_rollout_ref.rollout.agent.num_workers={WORKERS[args.shape]}",
            f"reward.num_workers={WORKERS[args.shape]}",
            f"transfer_queue.backend.SimpleStorage.num_data_storage_units={WORKERS[args.shape]}",
        ]
    return items


def environment(probe: Path, probe_step: int, tq_log: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        VERL_PLATFORM="cpu",  # platform.py
        VERL_USE_EXTERNAL_MODULES=EXTERNAL_MODULES,
        VERL_CPU_PROBE=str(probe),  # probe.py
        VERL_CPU_PROBE_STEP=str(probe_step),
        VERL_CPU_TQ_LOG=str(tq_log),  # tqmeter.py
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        # ray.init() without an address joins the last `ray start` cluster on the machine
        RAY_ADDRESS="local",
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        HYDRA_FULL_ERROR="1",
        WANDB_MODE="disabled",
    )
    return env


def ours(session: int, temp_dir: str) -> list:
    """Live processes of the run: its process group, or anything that names its Ray temp dir."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if os.getsid(process.pid) == session or temp_dir in " ".join(
                process.info["cmdline"] or []
            ):
                found.append(process)
        except (psutil.Error, ProcessLookupError):
            continue
    return [p for p in found if p.pid != os.getpid()]


class MemorySampler(threading.Thread):
    """Peak memory of the run: summed PSS of its processes, and the machine's used memory."""

    def __init__(self, session: int, temp_dir: str):
        super().__init__(daemon=True)
        self.session, self.temp_dir = session, temp_dir
        self.stop = threading.Event()
        self.peak_pss = self.peak_processes = 0
        import psutil

        self.baseline_used = psutil.virtual_memory().used
        self.peak_used = self.baseline_used

    def run(self):
        import psutil

        while not self.stop.wait(2.0):
            total, processes = 0, ours(self.session, self.temp_dir)
            for process in processes:
                try:
                    total += process.memory_full_info().pss
                except psutil.Error:
                    continue
            self.peak_pss = max(self.peak_pss, total)
            self.peak_processes = max(self.peak_processes, len(processes))
            self.peak_used = max(self.peak_used, psutil.virtual_memory().used)

    def result(self) -> dict:
        return {
            "peak_pss_mib": round(self.peak_pss / 2**20),
            "peak_processes": self.peak_processes,
            "machine_used_rise_mib": round((self.peak_used - self.baseline_used) / 2**20),
        }


def end_group(session: int, temp_dir: str, grace_s: float = 15) -> list[str]:
    """Terminate what is left of the run, then kill it; return what was found alive."""
    import psutil

    left = ours(session, temp_dir)
    names = [f"{p.pid} {' '.join(p.cmdline()[:3])}" for p in left if p.is_running()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for process in ours(session, temp_dir):
            try:
                process.send_signal(sig)
            except psutil.Error:
                pass
        deadline = time.monotonic() + grace_s
        while ours(session, temp_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
    return names


def count_calls(timeline: Path) -> dict[str, int]:
    """Calls per ``Class.method`` (and per remote function) in Ray's Chrome trace.

    ``ray.timeline()`` writes one complete event per executed task whose category is
    ``task::Class.method`` (``task::name:Class.__init__`` for an actor's creation, with the
    actor's name), beside events for the phases of each task (``task:execute``, ...).
    """
    if not timeline.exists():
        return {}
    counts: Counter = Counter()
    for event in json.loads(timeline.read_text()):
        category = event.get("cat", "")
        if category.startswith("task::"):
            counts[category.removeprefix("task::").rsplit(":", 1)[-1]] += 1
    return dict(sorted(counts.items()))


def step_lines(log: Path) -> list[dict]:
    """The console logger's ``step:N - key:value - ...`` lines (verl/utils/logger/)."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        match = STEP_LINE.match(COLOUR.sub("", line).strip())
        if match:
            metrics = {}
            for item in match.group(2).split(" - "):
                key, _, value = item.rpartition(":")
                try:
                    metrics[key] = float(NUMPY_SCALAR.sub(r"\1", value))
                except ValueError:
                    continue
            found.append({"step": int(match.group(1)), "metrics": metrics})
    return found


def resources(snapshot: dict | None) -> dict:
    """Logical CPUs and GPUs in the snapshot: total, available, held, placement groups' share.

    ``held`` is what Ray cannot give to anything else (total - available); ``ray status`` prints
    a smaller "used", which counts only the part of a placement group's reservation that its
    actors use: ``used = held - (reserved in groups - used in groups)``.
    """
    if not snapshot or "error" in snapshot:
        return {}
    total, free = snapshot["cluster_resources"], snapshot["available_resources"]
    found = {}
    for kind in ("CPU", "GPU"):
        group = re.compile(rf"^{kind}_group_[0-9a-f]+$")  # a group's total, not one bundle's
        reserved = sum(v for k, v in total.items() if group.match(k))
        unused = sum(v for k, v in free.items() if group.match(k))
        held = total.get(kind, 0) - free.get(kind, 0)
        found[kind] = {
            "total": total.get(kind, 0),
            "available": free.get(kind, 0),
            "held": round(held, 4),
            "reserved_in_placement_groups": reserved,
            "used_in_placement_groups": round(reserved - unused, 4),
            "used_as_ray_status_prints": round(held - unused, 4),
        }
    return found


TQ_MEASURE = (
    "per put into / get out of TransferQueue (AsyncTransferQueueClient.async_put, async_get_data; "
    "examples/verl_on_cpu/tqmeter.py): rows, and per field the bytes summed over its rows: "
    "numel * element_size for a tensor, of the packed values for a jagged nested tensor (offsets "
    "not counted), len(pickle.dumps(row, protocol=5)) per row for a non-tensor field (an "
    "estimate). Step 0: the validation before training (partition 'val'); step k: the transfers "
    "between the trainer's logs of steps k-1 and k. process: the class of the Ray actor whose "
    "pid made the call, from the snapshot."
)


def transfers(folder: Path, snapshot: dict | None) -> dict:
    """What tqmeter.py wrote in every process, summed per step, then per operation and per field.

    An operation is one (stage, put or get, process): its calls, rows and bytes per field. A
    field's ``written`` and ``read`` are its bytes summed over the step's operations.
    """
    lines = []
    for path in sorted(folder.glob("*.jsonl")) if folder.exists() else []:
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    classes = {
        a["pid"]: a["class_name"].rsplit(".", 1)[-1]
        for a in (snapshot or {}).get("actors", [])
        if a.get("pid") is not None
    }
    logged = sorted(x["t"] for x in lines if x.get("training"))  # ends of training steps
    records = [x for x in lines if "op" in x]
    errors = [x for x in records if "error" in x]
    steps: dict[str, dict] = {}
    for x in sorted((x for x in records if "error" not in x), key=lambda x: x["t"]):
        step = 0 if x["partition"] == "val" else 1 + sum(t < x["t"] for t in logged)
        process = classes.get(x["pid"], f"pid {x['pid']}")
        entry = steps.setdefault(str(step), {"operations": {}, "fields": {}})
        key = f"{x['stage']} {x['op']} {process}"
        operation = entry["operations"].setdefault(
            key,
            {"stage": x["stage"], "op": x["op"], "process": process, "calls": 0, "rows": 0},
        )
        operation["calls"] += 1
        operation["rows"] += x["rows"]
        for name, f in x["fields"].items():
            sizes = operation.setdefault("bytes", {})
            sizes[name] = sizes.get(name, 0) + (f["bytes"] or 0)
            field = entry["fields"].setdefault(
                name, {"kind": f["kind"], "dtype": f["dtype"], "written": 0, "read": 0}
            )
            field.setdefault("rows_written", 0)
            field["written" if x["op"] == "put" else "read"] += f["bytes"] or 0
            field["rows_written"] += x["rows"] if x["op"] == "put" else 0
            by = field.setdefault("written_by" if x["op"] == "put" else "read_by", [])
            if f"{process}.{x['stage']}" not in by:
                by.append(f"{process}.{x['stage']}")
    for entry in steps.values():
        entry["operations"] = list(entry["operations"].values())
        entry["fields"] = dict(sorted(entry["fields"].items()))
        for direction in ("written", "read"):
            for kind in ("tensor", "object"):
                entry[f"{direction}_{kind}_bytes"] = sum(
                    f[direction]
                    for f in entry["fields"].values()
                    if (f["kind"] == "object") == (kind == "object")
                )
    return {
        "measure": TQ_MEASURE,
        "records": len(records),
        "errors": errors[:10],
        "steps": dict(sorted(steps.items(), key=lambda item: int(item[0]))),
    }


def versions() -> dict[str, str]:
    from importlib.metadata import version

    names = ("verl", "ray", "torch", "transformers", "TransferQueue", "tensordict")
    return {name: version(name) for name in names}


SHOWN = (
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/kl_loss",
    "critic/score/mean",
    "critic/vf_loss",
    "critic/grad_norm",
    "val-core/",
)


def summarise(run: dict) -> str:
    snap = run.get("snapshot") or {}
    actors = snap.get("actors", [])
    classes = Counter(a["class_name"] for a in actors if a["state"] == "ALIVE")
    cpu = run["resources"].get("CPU", {})
    gpu = run["resources"].get("GPU", {})
    lines = [
        f"veRL exit code: {run['returncode']}, wall time {run['wall_s']} s, "
        f"peak PSS {run['memory']['peak_pss_mib']} MiB",
        f"actors alive at step {snap.get('step')}: {sum(classes.values())}",
        *(f"  {count:2d} x {name}" for name, count in sorted(classes.items())),
        f"CPUs held: {cpu.get('held', 0):g} of {cpu.get('total', 0):g} (available "
        f"{cpu.get('available', 0):g}; {cpu.get('reserved_in_placement_groups', 0):g} reserved in "
        f"placement groups, {cpu.get('used_in_placement_groups', 0):g} of them used)",
        f"GPUs held: {gpu.get('held', 0):g} of {gpu.get('total', 0):g} "
        f"({gpu.get('used_in_placement_groups', 0):g} used in placement groups)",
        *(
            f"step:{s['step']} - "
            + " - ".join(f"{k}:{v:.4g}" for k, v in s["metrics"].items() if k.startswith(SHOWN))
            for s in run["steps"]
        ),
        *(
            f"TransferQueue, step {step}: written {e['written_tensor_bytes']} B of tensors + "
            f"{e['written_object_bytes']} B of objects, read {e['read_tensor_bytes']} B + "
            f"{e['read_object_bytes']} B"
            for step, e in run["transferqueue"].get("steps", {}).items()
        ),
        f"process left behind: {len(run['left_behind'])}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", choices=("grpo", "ppo"), default="grpo")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--shape", choices=sorted(NUM_CPUS), default="default")
    parser.add_argument(
        "--validate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="validate before training (trainer.val_before_train)",
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=480, help="seconds for veRL's run")
    args = parser.parse_args(argv)

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("run.json", "snapshot.json", "timeline.json", "verl.log"):
        (out / stale).unlink(missing_ok=True)
    tq_log = out / "tq"  # tqmeter.py: one file per process
    shutil.rmtree(tq_log, ignore_errors=True)
    tq_log.mkdir()
    fixture = make_fixture(out / "fixture")
    # Short: Ray's unix sockets live under it (a path over 107 bytes breaks them).
    temp_dir = tempfile.mkdtemp(prefix="vcpu-", dir="/tmp")
    probe_step = max(1, (args.steps + 1) // 2)  # mid-training
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        *overrides(args, fixture, out, temp_dir),
    ]
    log = out / "verl.log"

    sampler = None

    def sample(process) -> None:  # started once the run has a pid: its session's id
        nonlocal sampler
        if sampler is None:
            sampler = MemorySampler(process.pid, temp_dir)
            sampler.start()

    # A session of its own: its process group holds the driver and every Ray process; at
    # the limit SIGINT, then SIGKILL after 5 s (tools/run_limited.py).
    done = run_limited(
        command, args.timeout, log=log, cwd=out, grace_s=5, waiting=sample,
        env=environment(out / "snapshot.json", probe_step, tq_log),
    )  # fmt: skip
    timed_out, returncode, wall_s = done.killed, done.returncode, round(done.wall_s, 1)
    if sampler is None:  # the run ended before its first sample: no session to look for
        sampler = MemorySampler(-1, temp_dir)
    else:
        sampler.stop.set()
        sampler.join()
    session = sampler.session
    # Ray's daemons end with the driver; give them a moment, then report and end the rest.
    deadline = time.monotonic() + 20
    while ours(session, temp_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    left_behind = end_group(session, temp_dir)
    shutil.rmtree(temp_dir, ignore_errors=True)  # Ray's session files; its logs are in verl.log

    snapshot = out / "snapshot.json"
    run = {
        "algo": args.algo,
        "shape": args.shape,
        "steps_requested": args.steps,
        "validate": args.validate,
        "probe_step": probe_step,
        "command": command,
        "versions": versions(),
        "returncode": returncode,
        "timed_out": timed_out,
        "wall_s": wall_s,
        "memory": sampler.result(),
        "steps": step_lines(log),
        "snapshot": json.loads(snapshot.read_text()) if snapshot.exists() else None,
        "resources": {},
        "calls": count_calls(out / "timeline.json"),
        "left_behind": left_behind,
        "transferqueue": {},
    }
    run["resources"] = resources(run["snapshot"])
    run["transferqueue"] = transfers(tq_log, run["snapshot"])
    (out / "run.json").write_text(json.dumps(run, indent=1, default=str))
    print(summarise(run))
    done = [s["step"] for s in run["steps"] if "training/global_step" in s["metrics"]]
    probe = run["snapshot"] or {"error": "no snapshot written"}
    ok = returncode == 0 and done == list(range(1, args.steps + 1)) and "error" not in probe
    if not ok:
        print(
            f"FAILED: exit code {returncode}, step lines {done}, "
            f"probe: {probe.get('error', 'ok')}; see {log}",
            file=sys.stderr,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
