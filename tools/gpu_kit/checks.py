"""The GPU kit's checks, in order, within one wall-clock limit: one line each, a JSON summary.

    python tools/gpu_kit/checks.py RESULTS_DIR --deadline EPOCH_SECONDS [--only smoke,docs]
    python tools/gpu_kit/checks.py RESULTS_DIR --plan    # what the docs check would run

``tools/gpu_kit/run.sh`` calls this after installing the kit (``docs/rlhf/index.md#gpu-check``;
what it measured on an H200: ``#gpu-measured`` there). Each check runs in a process
of its own, killed (with its process group) when its time cap or the deadline comes, and
the summary (``RESULTS_DIR/summary.json``) is rewritten after every check, so a late
failure, or the whole script killed at its limit, still leaves the earlier results:

a. ``smoke``: ``tools/gpu_kit/smoke.py``: Ray sees the GPU, a one-rank ``RayWorkerGroup``
   on a GPU ``RayResourcePool`` runs one call, NCCL initialises (on a machine without
   CUDA: the same with ``use_gpu=False`` and gloo; then the other checks are skipped);
b. ``rollout``: ``benchmarks/rlhf_generation.py``, our rollout's tokens/s against
   ``transformers``' ``generate`` on the gpu preset's model;
c. ``learning``: ``benchmarks/rlhf_gpu.py --no-rollout``: GRPO on the ``gpu`` preset to
   ``critic/score/mean`` >= 0.9, with what time is left after reserving the doc blocks'
   share; it also gives (d), the median ``perf/mfu/actor``, and each stage's share;
e. ``docs``: the pages with blocks marked GPU-only, each run with pytest up to the end of
   the section that holds its last GPU-only block (:func:`gpu_pages`).

The rollout goes before the learning run and the doc blocks after it: the learning run's
figures are the ones that need the most time, the doc blocks the ones whose time is best
known, so each gets a fixed cap and learning gets the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOKE_CAP_S = 90
ROLLOUT_CAP_S = 90
DOCS_CAP_S = 240  # the GPU pages up to their last GPU section (125 s on an H200), twice over
ROLLOUT_REPEATS = 5
CHECKS = ("smoke", "rollout", "learning", "docs")


def versions() -> dict:
    found = {"python": platform.python_version()}
    for name in ("torch", "transformers", "ray", "tensordict", "numpy", "sybil", "pytest"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    import torch

    found["cuda"] = torch.version.cuda
    found["cuda_available"] = torch.cuda.is_available()
    if found["cuda_available"]:
        found["gpu"] = torch.cuda.get_device_name()
        found["gpu_count"] = torch.cuda.device_count()
    return found


def run_check(name: str, command: list[str], cap_s: float, results: Path) -> dict:
    """Run one check's command, its output to ``results/<name>.log``, killed at ``cap_s``."""
    log = results / f"{name}.log"
    start = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = process.wait(timeout=max(cap_s, 1))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = None
    stop_ray()  # nothing a check started may hold the GPU for the next one
    return {
        "exit_code": code,
        "killed_at_cap": code is None,
        "cap_s": round(cap_s),
        "wall_s": round(time.monotonic() - start, 1),
        "log": log.name,
    }


def gpu_pages() -> tuple[list[str], list[str]]:
    """The English pages with ``gpu`` blocks, and the pytest ids of the blocks to leave out.

    A page's items are checked up to the end of the section (the next heading) that holds its
    last ``gpu`` block: what the GPU blocks need, and the section's other blocks, which may
    take a GPU path too (the errata's E01 correction). The page's script may run on past that
    point, but the items after it are left out: they run on CI, and here they could only fail
    for the kit's own gaps (its Ray has no dashboard, which ``ray list`` needs).
    """
    if str(ROOT / "tools") not in sys.path:  # run as a script, from anywhere: the page model
        sys.path.insert(0, str(ROOT / "tools"))
    import page_blocks

    pages, after = [], []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        if page_blocks.language(page) != "en":
            continue
        text = page.read_text(encoding="utf-8")
        found = page_blocks.blocks(page)
        gpu = [block for block in found if block.kind == "gpu"]
        if not gpu:
            continue
        cut = page_blocks.section_end(text, gpu[-1].end)
        name = str(page.relative_to(ROOT))
        pages.append(name)
        for block in found:
            if block.start > cut:
                after.append(page_blocks.item_id(name, block))
    return pages, after


def stop_ray() -> None:
    """``ray stop --force``: end whatever Ray processes a killed check left behind.

    ``ray`` is the kit's own command: run.sh puts the kit's ``bin/`` first on ``PATH``.
    """
    ray = shutil.which("ray")
    if ray:
        subprocess.run([ray, "stop", "--force"], capture_output=True, timeout=60)


def last_line(log: Path, pattern: str) -> str:
    matches = re.findall(pattern, log.read_text(), re.MULTILINE)
    return matches[-1] if matches else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="folder for summary.json and the logs")
    parser.add_argument("--deadline", type=float, help="epoch seconds (required to run)")
    parser.add_argument(
        "--plan", action="store_true", help="print the docs check's pages and deselected items"
    )
    parser.add_argument(
        "--only", default=",".join(CHECKS), help=f"comma-separated subset of {','.join(CHECKS)}"
    )
    args = parser.parse_args(argv)
    if args.plan:
        pages, after = gpu_pages()
        print(json.dumps({"pages": pages, "deselect": after}, indent=1))
        return 0
    if args.deadline is None:
        parser.error("--deadline is required")
    only = args.only.split(",")
    if unknown := [name for name in only if name not in CHECKS]:
        parser.error(f"unknown check(s) {unknown}: choose from {','.join(CHECKS)}")
    results: Path = args.results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    summary: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "versions": versions()}
    checks: dict = summary.setdefault("checks", {})

    def left() -> float:
        return args.deadline - time.time()

    def save() -> None:
        (results / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    def report(name: str, line: str) -> None:
        print(f"{name:9s} {line}", flush=True)
        save()

    v = summary["versions"]
    print(
        f"versions: Python {v['python']}, torch {v['torch']} (CUDA {v['cuda']}), transformers "
        f"{v['transformers']}, Ray {v['ray']}, tensordict {v['tensordict']}; GPU: "
        f"{v.get('gpu', 'none')}",
        flush=True,
    )
    cuda = v["cuda_available"]
    python = sys.executable

    # a. smoke
    smoke_cmd = [python, "tools/gpu_kit/smoke.py", *([] if cuda else ["--cpu"])]
    smoke = checks["smoke"] = run_check("smoke", smoke_cmd, min(SMOKE_CAP_S, left()), results)
    seen = last_line(results / "smoke.log", r"^\{.*\}$")
    smoke["result"] = json.loads(seen) if seen else None
    smoke["ok"] = smoke["exit_code"] == 0
    report("smoke", f"{'PASS' if smoke['ok'] else 'FAIL'} {seen or '(see smoke.log)'}")
    if not cuda:
        for name in ("rollout", "learning", "docs"):
            checks[name] = {"skipped": "no CUDA: torch.cuda.is_available() is False"}
        report("skipped", "rollout, learning (with MFU), docs: no CUDA on this machine")
        return 0 if smoke["ok"] else 1

    for name in CHECKS:
        if name not in only:
            checks[name] = {"skipped": "not in --only", "ok": True}

    # b. rollout speed
    if "rollout" in only:
        rollout_cmd = [python, "benchmarks/rlhf_generation.py", "--repeats", str(ROLLOUT_REPEATS)]
        rollout = checks["rollout"] = run_check(
            "rollout", rollout_cmd, min(ROLLOUT_CAP_S, left()), results
        )
        ratio = last_line(results / "rollout.log", r"^ours/transformers tokens/s: (\S+)x$")
        rollout["ratio"] = float(ratio) if ratio else None
        rollout["ok"] = rollout["exit_code"] == 0 and rollout["ratio"] is not None
        report("rollout", f"ours/transformers tokens/s {ratio or '?'}x (see rollout.log)")

    # c, d. learning, MFU, stage shares
    if "learning" in only:
        # The doc blocks' share is kept back only when they are to run.
        learning_s = left() - (DOCS_CAP_S + 15 if "docs" in only else 5)
        figures = results / "learning.json"
        learning_cmd = [
            python, "benchmarks/rlhf_gpu.py", "--no-rollout", "--seconds", f"{learning_s - 10:.0f}",
            "--output-dir", str(results / "gpu-grpo"), "--summary", str(figures),
        ]  # fmt: skip
        learning = checks["learning"] = run_check("learning", learning_cmd, learning_s, results)
        if figures.exists():
            learning.update(json.loads(figures.read_text()))  # keys "learning" and "mfu"
            figures.unlink()  # now in summary.json
        learning["ok"] = learning.get("learning", {}).get("reached", False)
        for name in ("metrics.jsonl",):  # the chart: benchmarks/charts.py, from this file
            if (results / "gpu-grpo" / name).exists():
                shutil.copy(results / "gpu-grpo" / name, results / name)
        line = last_line(results / "learning.log", r"^gpu learning run: .*$")
        report("learning", line or "no result (see learning.log)")
        mfu = last_line(results / "learning.log", r"^gpu perf/mfu/actor.*$")
        report("mfu", mfu or "not measured")

    # e. the GPU-only doc blocks, each page up to its last one
    if "docs" in only:
        pages, after = gpu_pages()
        deselect = [f"--deselect={item}" for item in after]
        docs_cmd = [
            python,
            "-m",
            "pytest",
            *pages,
            *deselect,
            "-n0",
            "-v",
            "-rs",
            "-pno:cacheprovider",
        ]
        docs = checks["docs"] = run_check("docs", docs_cmd, min(DOCS_CAP_S, left()), results)
        docs["pages"] = pages
        docs["ok"] = docs["exit_code"] == 0
        outcome = last_line(results / "docs.log", r"^=+ (.*) =+$")
        report("docs", f"{'PASS' if docs['ok'] else 'FAIL'} {outcome} ({', '.join(pages)})")
    shutil.rmtree(results / "gpu-grpo", ignore_errors=True)  # copied what matters above
    summary["ok"] = all(check["ok"] for check in checks.values())
    save()
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
