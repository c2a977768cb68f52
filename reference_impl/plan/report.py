"""From what Ray made of the run to the plan: pools, placement groups, actors, what waits and why.

The placement is Ray's and veRL's (``simulate.py``); this module only reads it. The "why" and
"fix" lines are this planner's reading of Ray's state, not messages of veRL or Ray.
"""

from __future__ import annotations

import math
from collections import Counter

ROLES = [  # (class name ends with, role), first match wins
    ("TaskRunnerV1", "controller"),
    ("TransferQueueController", "TransferQueue controller"),
    ("SimpleStorageUnit", "TransferQueue storage unit"),
    ("WorkerDict", "worker-group rank"),
    ("vLLMHttpServer", "rollout server"),
    ("SGLangHttpServer", "rollout server"),
    ("TRTLLMHttpServer", "rollout server"),
    ("CheckpointEngineWorker", "rollout worker"),
    ("GlobalRequestLoadBalancer", "rollout load balancer"),
    ("AgentLoopWorkerTQ", "agent-loop worker"),
    ("AgentLoopWorker", "agent-loop worker"),
    ("RewardLoopWorker", "reward-loop worker"),
]
BASE = ("CPU", "GPU", "memory")


def role(class_name: str) -> str:
    for suffix, name in ROLES:
        if class_name.endswith(suffix):
            return name
    return class_name


def _node_names(raw: dict) -> dict[str, str]:
    return {
        node_id: f"node{i}" + (" (head)" if i == 0 else "")
        for i, node_id in enumerate(raw["node_ids"])
    }


def _need(request: dict) -> dict:
    """What Ray checks to place an actor: its request, with the default 1 CPU when none is given."""
    need = {k: v for k, v in request.items() if k != "memory"}
    need.setdefault("num_cpus", 1)
    return {"CPU": need.pop("num_cpus"), "GPU": need.pop("num_gpus", 0), **need}


def _fits(need: dict, free: dict) -> bool:
    return all(free.get(k, 0) >= v for k, v in need.items() if v)


def blocked(record: dict, snapshot: dict) -> str | None:
    """Why Ray cannot place this actor now, or None if it can (it may still be starting)."""
    strategy = record.get("strategy") or {}
    if isinstance(strategy, dict) and strategy.get("placement_group"):
        pg = snapshot["placement_groups"].get(strategy["placement_group"], {})
        if pg.get("state") != "CREATED":
            return f"its placement group {pg.get('name', '?')} is {pg.get('state', 'not created')}"
        return None
    need = _need(record["request"])
    if isinstance(strategy, dict) and strategy.get("node_id") and not strategy.get("soft"):
        node = snapshot["resources"].get(strategy["node_id"], {})
        if not _fits(need, node.get("free", {})):
            return (
                f"pinned to a node (hard node affinity) that has {_base(node.get('free', {}))} free"
            )
        return None
    if not any(_fits(need, n.get("free", {})) for n in snapshot["resources"].values()):
        return f"no node has {_fmt(need)} free"
    return None


def _base(resources: dict) -> str:
    return ", ".join(f"{k} {_num(resources.get(k, 0))}" for k in ("CPU", "GPU"))


def _num(x: float):
    return int(x) if float(x).is_integer() else round(x, 4)


def _fmt(resources: dict) -> str:
    """``{CPU: 3, GPU: 1}``: the names sorted, so the text is the same from run to run."""
    return "{" + ", ".join(f"{k}: {_num(v)}" for k, v in sorted(resources.items()) if v) + "}"


def build(raw: dict, config, nodes) -> dict:
    """The plan as a JSON-able dict (see ``__main__`` for the printed form)."""
    names = _node_names(raw)
    plan = {
        "versions": _versions(),
        "cluster": [
            {"node": names[i], **n.to_json()} for i, n in zip(raw["node_ids"], nodes, strict=True)
        ],
        "outcome": raw["outcome"],
        "error": raw.get("error"),
        "error_detail": raw.get("error_detail"),
        "limit_s": raw["limit_s"],
        "stall_s": raw["stall_s"],
        "seconds": raw.get("seconds"),
        "pools": _pools(config),
        "placement_groups": [],
        "actors": [],
        "pending": [],
    }
    for pg_id, pg in sorted(raw["placement_groups"].items(), key=lambda kv: kv[1].get("name", "")):
        if pg.get("state") == "REMOVED":
            continue
        bundles = []
        for index, unit in sorted(pg["bundles"].items()):
            node_id = pg.get("bundles_to_node_id", {}).get(index)
            bundles.append(
                {"resources": {k: _num(v) for k, v in unit.items()}, "node": names.get(node_id)}
            )
        plan["placement_groups"].append(
            {
                "name": pg["name"],
                "id": pg_id,
                "strategy": pg["strategy"],
                "state": pg["state"],
                "bundles": bundles,
            }
        )
    pg_names = {p["id"]: p["name"] for p in plan["placement_groups"]}
    for rec in raw["records"]:
        gcs = raw["actors"].get(rec["actor_id"], {})
        state = gcs.get("State", "UNKNOWN")
        node_id = (gcs.get("Address") or {}).get("NodeID")
        strategy = rec.get("strategy")
        if isinstance(strategy, dict) and strategy.get("placement_group"):
            where = f"{pg_names.get(strategy['placement_group'], '?')} bundle {strategy['bundle']}"
        elif isinstance(strategy, dict) and strategy.get("node_id"):
            kind = "soft" if strategy["soft"] else "hard"
            where = f"{kind} affinity to {names.get(strategy['node_id'], '?')}"
        else:
            where = strategy or "default"
        actor = {
            "role": role(rec["class"]),
            "class": rec["class"],
            "name": rec["name"],
            "request": rec["request"],
            "placement": where,
            "state": state,
            "node": names.get(node_id) if state == "ALIVE" else None,
            "stand_in": rec["stand_in"],
        }
        plan["actors"].append(actor)
        if state != "ALIVE":
            why = blocked(rec, raw) or f"{state} (Ray has not placed it yet: still starting)"
            plan["pending"].append({"what": f"{rec['class']} {rec['name']}".strip(), "why": why})
    plan["summary"] = _summary(plan, raw, names)
    plan["pending"] = _group_pending(plan["pending"]) + _pending_groups(plan, raw, names, config)
    plan["fixes"] = _fixes(plan, raw, names, config, nodes)
    return plan


def _versions() -> dict:
    import ray
    import transfer_queue
    import verl

    return {
        "verl": verl.__version__,
        "ray": ray.__version__,
        "TransferQueue": transfer_queue.__version__,
    }


def _pools(config) -> list[dict]:
    """The resource pools of ``PPOTrainer._init_resource_pool_mgr``, read from the config."""
    pools = [
        {
            "pool": "global_pool",
            "gpus_per_node": [config.trainer.n_gpus_per_node] * config.trainer.nnodes,
        }
    ]
    rm = config.reward.reward_model
    if rm.enable_resource_pool:
        pools.append({"pool": "reward_pool", "gpus_per_node": [rm.n_gpus_per_node] * rm.nnodes})
    return pools


def _summary(plan: dict, raw: dict, names: dict) -> dict:
    held, total = Counter(), Counter()
    per_node = {}
    for node_id, res in raw["resources"].items():
        row = {}
        for key in ("CPU", "GPU"):
            t, f = res["total"].get(key, 0), res.get("free", {}).get(key, 0)
            total[key] += t
            held[key] += t - f
            row[key] = f"{_num(t - f)} of {_num(t)}"
        per_node[names.get(node_id, node_id)] = row
    return {
        "actors": len(plan["actors"]),
        "alive": sum(a["state"] == "ALIVE" for a in plan["actors"]),
        "by_role": dict(Counter(a["role"] for a in plan["actors"])),
        "held": {k: f"{_num(held[k])} of {_num(total[k])}" for k in ("CPU", "GPU")},
        "held_per_node": dict(sorted(per_node.items())),
    }


def _group_pending(items: list[dict]) -> list[dict]:
    counts = Counter((i["what"].split(" ")[0], i["why"]) for i in items)
    return [{"what": f"{n} x {cls}", "why": why} for (cls, why), n in counts.items()]


def _pending_groups(plan: dict, raw: dict, names: dict, config) -> list[dict]:
    out = []
    for pg in plan["placement_groups"]:
        if pg["state"] == "CREATED":
            continue
        need = Counter()
        for b in pg["bundles"]:
            need.update(b["resources"])
        fits_empty = any(
            all(r["total"].get(k, 0) >= v for k, v in need.items())
            for r in raw["resources"].values()
        )
        why = f"{pg['strategy']} needs one node with {_fmt(dict(need))} free; " + (
            "a node that large exists but others hold part of it"
            if fits_empty
            else "no node is that large"
        )
        out.append({"what": f"placement group {pg['name']} ({pg['state']})", "why": why})
    return out


def _fixes(plan: dict, raw: dict, names: dict, config, nodes) -> list[str]:
    """Settings that would let this run start, from what blocks it."""
    fixes = []
    gpus = [n.gpus for n in nodes if n.gpus]
    error = plan.get("error") or ""
    pools_blocked = any(p["state"] != "CREATED" for p in plan["placement_groups"])
    if "Total available GPUs" in error or pools_blocked:
        g = math.gcd(*gpus) if gpus else 0
        if g:
            fixes.append(
                f"groups of {g} GPUs fit every node: trainer.n_gpus_per_node={g} "
                f"trainer.nnodes={sum(gpus) // g} "
                f"(uses all {sum(gpus)} GPUs; veRL asks n_gpus_per_node GPUs per placement group, "
                "each with 3 CPUs per GPU, which must be free beside the CPUs the run's other "
                "actors hold)"
            )
        short = [
            names[i]
            for i, n in zip(raw["node_ids"], nodes, strict=True)
            if n.gpus and n.cpus < 3 * n.gpus
        ]
        if short:
            fixes.append(
                f"give {', '.join(short)} 3 CPUs per GPU: each GPU bundle asks {{CPU: 3, GPU: 1}}"
            )
    zero_cpu = [names[i] for i, n in zip(raw["node_ids"], nodes, strict=True) if n.cpus == 0]
    if any("SimpleStorageUnit" in p["what"] for p in plan["pending"]) and zero_cpu:
        fixes.append(
            "TransferQueue pins its storage units round robin over all alive nodes, "
            f"{', '.join(zero_cpu)} "
            f"included, and each asks 1 CPU: give {', '.join(zero_cpu)} CPUs, or put a custom "
            "resource "
            "on the nodes with CPUs and set "
            "+transfer_queue.backend.SimpleStorage.required_node_resource=NAME"
        )
    if any("TaskRunnerV1" in p["what"] for p in plan["pending"]):
        fixes.append(
            "TaskRunnerV1 needs a node with 1 free CPU to be placed: give the cluster a CPU"
        )
    if "divisible" in error or "must be divisible" in error:
        fixes.append(
            "make the rollout's tensor_model_parallel_size x data_parallel_size x "
            "pipeline_model_parallel_size "
            "divide trainer.n_gpus_per_node x trainer.nnodes"
        )
    return fixes
