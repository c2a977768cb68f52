"""The command: ``python -m reference_impl.plan [--cluster NxGxC[xM]]... [--json FILE] OVERRIDE...``

Exit status: 0 when every actor is placed and ``TaskRunnerV1.run`` got to training; 1 when veRL
raised, something waits, or the limit passed; 2 for input this planner cannot plan from (the
message says what to change); 3 when the simulated cluster did not start. stdout carries the
plan alone; what veRL, Ray and the planner print on the way goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from reference_impl.plan import cluster as cluster_mod
from reference_impl.plan.config import (
    PlanInputError,
    check_mandatory,
    check_one_pool_fits,
    check_rollout_split,
    compose,
    validate,
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m reference_impl.plan",
        description="Run veRL 0.9.1's own resource pools, placement groups and actor creation "
        "on a simulated cluster, with stand-in workers, and print where everything lands.",
    )
    p.add_argument(
        "overrides", nargs="*", help="veRL Hydra overrides, as for python -m verl.trainer.main_ppo"
    )
    p.add_argument(
        "--cluster",
        action="append",
        default=[],
        metavar="NxGxC[xM]",
        help="N nodes of G GPUs, C CPUs, M GiB memory; repeat for other node shapes; the first "
        "node is the head",
    )
    p.add_argument(
        "--from-ray", metavar="ADDRESS", help="read the nodes of a running cluster (ray.nodes())"
    )
    p.add_argument("--json", metavar="FILE", help="also write the plan as JSON")
    p.add_argument(
        "--limit",
        type=float,
        default=600.0,
        help="seconds to wait for TaskRunnerV1 to be placed, and then for its run to reach "
        "training (600 each)",
    )
    p.add_argument(
        "--stall",
        type=float,
        default=20.0,
        help="seconds without change, with something Ray cannot place, before the run is reported "
        "as waiting (20)",
    )
    p.add_argument(
        "--settle", type=float, default=30.0, help="seconds to wait for actors still starting (30)"
    )
    return p.parse_args(argv)


def render(plan: dict) -> str:
    out = []
    s = plan["summary"]
    out.append(
        "cluster: "
        + ", ".join(
            f"{n['node']} {n['gpus']} GPU {n['cpus']} CPU"
            + (f" {n['memory_gib']:g} GiB" if n["memory_gib"] else "")
            for n in plan["cluster"]
        )
    )
    out.append(
        "resource pools: " + ", ".join(f"{p['pool']} {p['gpus_per_node']}" for p in plan["pools"])
    )
    out.append("placement groups:")
    for pg in plan["placement_groups"]:
        per_node = {}
        for b in pg["bundles"]:
            per_node.setdefault(b["node"] or "unplaced", []).append(b)
        where = ", ".join(f"{len(bs)} on {node}" for node, bs in per_node.items())
        # sorted: Ray's placement group table gives a bundle's resources in no fixed order
        unit = dict(sorted(pg["bundles"][0]["resources"].items())) if pg["bundles"] else {}
        out.append(
            f"  {pg['name']:<34} {pg['strategy']:<11} {pg['state']:<8} {len(pg['bundles'])} x "
            f"{unit}: {where}"
        )
    out.append("actors:")
    groups: dict = {}
    for a in plan["actors"]:
        key = (
            a["role"],
            a["class"].split(".")[-1],
            json.dumps(a["request"], sort_keys=True),
            a["state"],
        )
        groups.setdefault(key, []).append(a)
    for (role_name, cls, request, state), items in groups.items():
        nodes = sorted({a["node"] or "-" for a in items})
        out.append(
            f"  {len(items):>3} x {cls:<26} {role_name:<27} request {request:<22} {state:<16} on "
            f"{', '.join(nodes)}"
        )
    out.append(
        f"{s['actors']} actors ({s['alive']} alive); CPUs held {s['held']['CPU']}, GPUs held "
        f"{s['held']['GPU']}"
    )
    out.append(
        "held per node: "
        + "; ".join(f"{k}: CPU {v['CPU']}, GPU {v['GPU']}" for k, v in s["held_per_node"].items())
    )
    if plan["outcome"] == "finished" and not plan["pending"]:
        out.append("verdict: the run starts (TaskRunnerV1.run reached training)")
    else:
        if plan["error"]:
            out.append(f"verdict: veRL stops: {plan['error']}")
        elif plan["outcome"] == "limit":
            out.append(
                "verdict: not known: TaskRunnerV1.run had not reached training within --limit "
                f"{plan['limit_s']:g} s, "
                "and actors were still starting (a busy machine? raise --limit)"
            )
        elif plan["outcome"] == "waiting":
            out.append(
                "verdict: the run waits: veRL waits without a limit for what Ray cannot place "
                f"(the plan stopped {plan['stall_s']:g} s after the last change; limit "
                f"{plan['limit_s']:g} s)"
            )
        else:
            out.append("verdict: the run starts, but some actors wait")
        for p in plan["pending"]:
            out.append(f"  waiting: {p['what']}: {p['why']}")
        for f in plan["fixes"]:
            out.append(f"  fix: {f}")
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    # stdout carries the plan alone. What veRL and Ray print while it is made (veRL's
    # "[validate_config] ..." line, the raylets' warnings that the driver relays) goes to
    # stderr, with the planner's own messages.
    with contextlib.redirect_stdout(sys.stderr):
        try:
            if args.from_ray:
                nodes = cluster_mod.from_ray(args.from_ray)
            else:
                nodes = cluster_mod.parse(args.cluster)
            config = compose(args.overrides)
            check_one_pool_fits(config, nodes)
            check_rollout_split(config)
            validate(config)
            check_mandatory(config)
        except PlanInputError as error:
            print(f"plan: {error}")
            return 2
        from reference_impl.plan.report import build
        from reference_impl.plan.simulate import simulate

        try:
            raw = simulate(
                config, nodes, limit_s=args.limit, stall_s=args.stall, settle_s=args.settle
            )
        except RuntimeError as error:
            print(f"plan: {error}")
            return 3
    plan = build(raw, config, nodes)
    print(render(plan))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(plan, f, indent=1)
    return 0 if plan["outcome"] == "finished" and not plan["pending"] else 1


if __name__ == "__main__":
    sys.exit(main())
