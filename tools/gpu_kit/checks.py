"""The GPU kit's checks, in order, within one wall-clock limit: one line each, a JSON summary.

    python tools/gpu_kit/checks.py RESULTS_DIR --deadline EPOCH_SECONDS [--only smoke,docs]
    python tools/gpu_kit/checks.py RESULTS_DIR --plan    # what the docs check would run

``tools/gpu_kit/run.sh`` calls this after installing the kit (``docs/rlhf/index.md#gpu-check``;
what it measured on an H200: ``#gpu-measured`` there), and ``nox -s gpu`` in the project's
environment: the one GPU runner. Each check runs in a process of its own, killed when its
time cap or the deadline comes, with whatever it started, detached daemons included
(``tools/run_limited.py``, the repository's one kill-at-a-limit helper), and
the summary (``RESULTS_DIR/summary.json``) is rewritten after every check, so a late
failure, or the whole script killed at its limit, still leaves the earlier results:

a. ``smoke``: ``tools/gpu_kit/smoke.py``: Ray sees the GPU, a one-rank ``RayWorkerGroup``
   on a GPU ``RayResourcePool`` runs one call, NCCL initialises (on a machine without
   CUDA: the same with ``use_gpu=False`` and gloo; then the other checks are skipped, but
   ``--only docs`` runs the pages on the CPU, their gpu blocks skipped);
b. ``rollout``: ``benchmarks/rlhf_generation.py``, our rollout's tokens/s against
   ``transformers``' ``generate`` on the gpu preset's model;
c. ``learning``: ``benchmarks/rlhf_gpu.py --no-rollout``: GRPO on the ``gpu`` preset to
   ``critic/score/mean`` >= 0.9, with what time is left after reserving the doc blocks'
   share; it also gives (d), the median ``perf/mfu/actor``, and each stage's share;
e. ``docs``: the pages with blocks marked GPU-only, one pytest run per page, up to the end
   of the section that holds its last GPU-only block (:func:`gpu_pages`): the items after
   it are deselected, and the page runner then cuts the page's script after the last
   selected block, so the rest of the page does not run. Each page has its own cap
   (``page_caps.json``, with where its figures come from) and prints its wall time;
f. ``perf``, only when asked for by name (``GPU_KIT_CHECKS=smoke,perf``, with
   ``GPU_KIT_LIMIT_S=570``): issue 41's measurements at Qwen2.5-0.5B's real shape,
   ``benchmarks/rlhf_gpu_perf.py`` (the actor update: padded, packed, token budget) and
   ``benchmarks/rlhf_generation.py --compile`` at the toy and the real shape (the rollout:
   ``StaticRollout``'s CUDA graph and transformers' static cache + ``torch.compile``).

The rollout goes before the learning run and the doc blocks after it: the learning run's
figures are the ones that need the most time, the doc blocks the ones whose time is best
known, so each gets a fixed cap and learning gets the rest.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import signal
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))  # run as a script, from anywhere: the shared tools
from run_limited import run_limited  # noqa: E402

SMOKE_CAP_S = 90
ROLLOUT_CAP_S = 90
# Each GPU page's cap, and where the figures come from: tools/gpu_kit/page_caps.json.
PAGE_CAPS = json.loads((Path(__file__).with_name("page_caps.json")).read_text())
DOCS_CAP_S = sum(PAGE_CAPS["caps_s"].values())
ROLLOUT_REPEATS = 5
CHECKS = ("smoke", "rollout", "learning", "docs")
# Asked for by name only (GPU_KIT_CHECKS=smoke,perf): issue 41's measurements at a real shape,
# each (name, script and arguments, cap in seconds), the most wanted first: the last one gets
# what is left. 470 s of caps; with the smoke check and the install, GPU_KIT_LIMIT_S=570 ends
# inside one 600-second call of the device tool.
PERF_RUNS = (
    ("perf-update", ["benchmarks/rlhf_gpu_perf.py", "--out", "{results}"], 160),
    # each line is printed as it ends: a run killed at its cap still shows its repeats so far
    ("perf-rollout-real", ["benchmarks/rlhf_generation.py", "--shape", "real", "--repeats", "2",
                           "--compile"], 190),
    ("perf-rollout-toy", ["benchmarks/rlhf_generation.py", "--repeats", "5", "--compile"], 120),
)  # fmt: skip


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
    """Run one check's command, its output to ``results/<name>.log``, killed at ``cap_s``.

    Whatever the command started goes when it ends (``run_limited``'s sweep): a killed
    check's Ray daemons, and any process a page detached, never hold the GPU for the next.
    """
    log = results / f"{name}.log"
    done = run_limited(command, max(cap_s, 1), log=log, cwd=ROOT, sweep=True)
    return {
        "exit_code": done.returncode,
        "killed_at_cap": done.killed,
        "cap_s": round(cap_s),
        "wall_s": round(done.wall_s, 1),
        "log": log.name,
    }


def gpu_pages() -> tuple[list[str], list[str]]:
    """The English pages with ``gpu`` blocks, and the pytest ids of the blocks to leave out.

    A page's items are checked up to the end of the section (the next heading) that holds its
    last ``gpu`` block: what the GPU blocks need, and the section's other blocks, which may
    take a GPU path too (the errata's E01 correction). The items after it are left out, and
    with them the rest of the page's script (``page_scripts.cut_after``): they run on CI, and
    here they could only fail for the kit's own gaps (its Ray has no dashboard, which
    ``ray list`` needs) and spend the check's time.
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
        "--only",
        help=f"comma-separated subset of {','.join(CHECKS)},perf (default: all but perf); "
        "without CUDA, "
        "naming docs runs the docs check on the CPU, its gpu blocks skipped",
    )
    args = parser.parse_args(argv)
    # run.sh's `timeout` ends us with SIGTERM: exit through Python, so that the running
    # check's group and whatever it detached are killed on the way out (run_limited).
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    if args.plan:
        pages, after = gpu_pages()
        print(json.dumps({"pages": pages, "deselect": after}, indent=1))
        return 0
    if args.deadline is None:
        parser.error("--deadline is required")
    only = (args.only or ",".join(CHECKS)).split(",")
    if unknown := [name for name in only if name not in (*CHECKS, "perf")]:
        parser.error(f"unknown check(s) {unknown}: choose from {','.join(CHECKS)},perf")
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
        cpu_docs = args.only is not None and "docs" in only  # asked for by name
        skipped = ("rollout", "learning") if cpu_docs else ("rollout", "learning", "docs")
        skipped += ("perf",) if "perf" in only else ()
        for name in skipped:
            checks[name] = {"skipped": "no CUDA: torch.cuda.is_available() is False"}
        shown = ", ".join(skipped).replace("learning", "learning (with MFU)")
        report("skipped", f"{shown}: no CUDA on this machine")
        if not cpu_docs:
            return 0 if smoke["ok"] else 1
        only = ["docs"]

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
        static = last_line(results / "rollout.log", r"^static/transformers tokens/s: (\S+)x$")
        rollout["ratio"] = float(ratio) if ratio else None
        rollout["static_ratio"] = float(static) if static else None
        rollout["ok"] = rollout["exit_code"] == 0 and rollout["ratio"] is not None
        report(
            "rollout",
            f"ours/transformers tokens/s {ratio or '?'}x, StaticRollout {static or '?'}x "
            "(see rollout.log)",
        )

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

    # e. the GPU-only doc blocks, each page up to its last one, each within its own cap
    if "docs" in only:
        docs = checks["docs"] = {"pages": {}}
        pages, after = gpu_pages()
        for page in pages:
            deselect = [f"--deselect={item}" for item in after if item.startswith(page + "::")]
            docs_cmd = [python, "-m", "pytest", page, *deselect, "-n0", "-v", "-rs",
                        "-pno:cacheprovider"]  # fmt: skip
            cap = PAGE_CAPS["caps_s"].get(page, PAGE_CAPS["default_s"])
            name = "docs-" + page.removeprefix("docs/").removesuffix(".md").replace("/", "-")
            ran = docs["pages"][page] = run_check(name, docs_cmd, min(cap, left()), results)
            ran["ok"] = ran["exit_code"] == 0
            ran["outcome"] = last_line(results / ran["log"], r"^=+ (.*) =+$")
            verdict = "PASS" if ran["ok"] else ("KILLED" if ran["killed_at_cap"] else "FAIL")
            report("docs", f"{page}: {verdict} {ran['outcome']} in {ran['wall_s']} s "
                           f"(cap {ran['cap_s']} s)")  # fmt: skip
        docs["ok"] = all(ran["ok"] for ran in docs["pages"].values())
        docs["wall_s"] = round(sum(ran["wall_s"] for ran in docs["pages"].values()), 1)
        report("docs", f"{'PASS' if docs['ok'] else 'FAIL'}: {len(pages)} pages in "
                       f"{docs['wall_s']} s")  # fmt: skip
    # f. perf, asked for by name: the actor update and the rollout at Qwen2.5-0.5B's real shape
    if "perf" in only:
        perf = checks["perf"] = {"runs": {}}
        for name, arguments, cap in PERF_RUNS:
            command = [python, *(a.format(results=results) for a in arguments)]
            ran = perf["runs"][name] = run_check(name, command, min(cap, left()), results)
            ran["ok"] = ran["exit_code"] == 0
            verdict = "PASS" if ran["ok"] else ("KILLED" if ran["killed_at_cap"] else "FAIL")
            report("perf", f"{name}: {verdict} in {ran['wall_s']} s (cap {ran['cap_s']} s), "
                           f"see {ran['log']}")  # fmt: skip
        perf["ok"] = all(ran["ok"] for ran in perf["runs"].values())
    shutil.rmtree(results / "gpu-grpo", ignore_errors=True)  # copied what matters above
    summary["ok"] = all(check["ok"] for check in checks.values())
    save()
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
