"""The records under ``benchmarks/results/``: what makes each one, and the charts drawn from it.

    nox -s records                     the list: each record, what makes it, what it needs
    nox -s records -- NAME             run what makes NAME, copy its files in, redraw its charts
    nox -s records -- NAME --redraw    only redraw NAME's charts from the committed files

(``python benchmarks/records.py ...`` in an environment with the ``rlhf``, ``bench`` and
``verl`` extras does the same.) A page quotes a record's figures and shows its charts;
``tests/test_records.py`` holds each page's figures to its record, so a refreshed record
fails that test until the pages quote the new figures. Commands run from the repository
root, one after the other; a command that fails stops the refresh before anything is copied.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path("benchmarks/results")
IMG = Path("docs/rlhf/img")


@dataclass(frozen=True)
class Step:
    """One command; ``stdout``: the file its standard output goes to (else the terminal)."""

    argv: tuple[str, ...]
    stdout: str | None = None


@dataclass(frozen=True)
class Record:
    """One folder of ``benchmarks/results/``.

    ``make`` runs it again; ``copies`` then moves what it wrote into the folder (made file,
    record file); ``charts`` redraw the pages' images from the folder alone. ``needs`` says
    what a refresh needs beyond this session's environment (None: nothing), and ``gpu``
    that it needs CUDA, without which ``make`` is not run.
    """

    name: str
    what: str
    make: tuple[Step, ...]
    copies: tuple[tuple[str, str], ...] = ()
    charts: tuple[Step, ...] = ()
    needs: str | None = None
    gpu: bool = False
    after: str = ""  # what is left to do by hand after a refresh


def reward_curve(metrics: str, png: str, title: str, language: str = "en") -> Step:
    argv = ("python", "benchmarks/charts.py", metrics, png, title, "--language", language)
    return Step(argv)


CPU = RESULTS / "rlhf-cpu-runs"
TRL = RESULTS / "rlhf-vs-trl"
GPU = RESULTS / "gpu-2026-11-26-nvidia-h200"
VERL = RESULTS / "verl-cpu-run"
TRANSFER = RESULTS / "dataproto-transfer"
PLAN = RESULTS / "plan-sizes"


def learning_run(algo: str) -> Step:
    """The CPU learning run of ``nox -s rlhf`` (tests/test_rlhf.py), into runs/cpu-ALGO."""
    return Step(
        ("python", "-m", "reference_impl.rlhf", "--output-dir", f"runs/cpu-{algo}",
         "--no-progress", "--algo", algo, "--total-steps", "400", "--target-score", "0.9")
    )  # fmt: skip


RECORDS = {
    record.name: record
    for record in (
        Record(
            "rlhf-cpu-runs",
            "the CPU learning runs (GRPO, PPO) behind the RLHF chapter's reward curves",
            make=(learning_run("grpo"), learning_run("ppo")),
            copies=(
                ("runs/cpu-grpo/metrics.jsonl", f"{CPU}/grpo.metrics.jsonl"),
                ("runs/cpu-ppo/metrics.jsonl", f"{CPU}/ppo.metrics.jsonl"),
            ),
            charts=tuple(
                reward_curve(
                    f"{CPU}/{algo}.metrics.jsonl",
                    f"{IMG}/reward_curve_{algo}{ext}",
                    title,
                    language,
                )
                for algo in ("grpo", "ppo")
                for ext, title, language in (
                    (".png", f"{algo.upper()}, cpu", "en"),
                    (".zh.png", f"{algo.upper()}，cpu 预设", "zh"),
                )
            ),  # fmt: skip
        ),
        Record(
            "rlhf-vs-trl",
            "our GRPO against TRL's GRPOTrainer at equal wall time (docs/rlhf/index.md#trl)",
            make=(
                Step(
                    (
                        "python",
                        "benchmarks/rlhf_vs_trl.py",
                        "--trl-threads",
                        "1",
                        "--record",
                        str(TRL),
                    )
                ),
            ),  # fmt: skip
            charts=(
                Step(
                    (
                        "python",
                        "benchmarks/rlhf_vs_trl.py",
                        "--redraw",
                        str(TRL),
                        "--plot",
                        f"{IMG}/reward_vs_trl.png",
                    )
                ),
            ),  # fmt: skip
            after="add the run's row to the table in docs/rlhf/index.md#trl (both languages)",
        ),
        Record(
            "dataproto-transfer",
            "a DataProto through veRL's and reference_impl's worker groups against raw Ray, "
            "two runs (docs/verl/transferqueue.md#serialization)",
            make=(
                Step(("python", "benchmarks/dataproto_transfer.py"), f"{TRANSFER}/run1.txt"),
                Step(("python", "benchmarks/dataproto_transfer.py"), f"{TRANSFER}/run2.txt"),
            ),
        ),
        Record(
            "verl-cpu-run",
            "veRL 0.9.1's own trainer on the CPU, GRPO and PPO: actors, resources, calls "
            "(docs/verl/run-layout.md#cpu-run, docs/verl/transferqueue.md#per-step)",
            make=(Step(("nox", "-s", "verl_run")),),
            copies=(
                ("runs/verl_run/grpo/run.json", f"{VERL}/grpo.json"),
                ("runs/verl_run/ppo/run.json", f"{VERL}/ppo.json"),
            ),
            needs="veRL's own environment, which `nox -s verl_run` builds and runs in "
            "(constraints-verl-run.txt; about 5 minutes and 10 GiB on 2 cores)",
        ),
        Record(
            "plan-sizes",
            "the layout planner's wall time and peak memory for 1 x 1, 2 x 8, 4 x 8 and 8 x 8 GPUs "
            "(docs/verl/plan.md#measured)",
            make=(Step(("python", "-m", "benchmarks.plan_sizes", "--out", str(PLAN))),),
            after="update the table in docs/verl/plan.md#measured (both languages)",
        ),
        Record(
            "gpu-2026-11-26-nvidia-h200",
            "runs on one NVIDIA H200: smoke, rollout, learning, MFU, the GPU pages "
            "(docs/rlhf/index.md#gpu; its README says which run is which)",
            make=(Step(("bash", "tools/gpu_kit/run.sh", "runs/gpu-kit")),),
            charts=(
                reward_curve(
                    f"{GPU}/run1-kit/metrics.jsonl",
                    f"{IMG}/gpu_reward_curve_lr1e-5.png",
                    "GRPO, gpu",
                ),
                reward_curve(
                    f"{GPU}/run1-kit/metrics.jsonl",
                    f"{IMG}/gpu_reward_curve_lr1e-5.zh.png",
                    "GRPO，gpu 预设，actor_lr=1e-5，NVIDIA H200",
                    "zh",
                ),
                reward_curve(
                    f"{GPU}/run5-learning-375s/metrics.jsonl",
                    f"{IMG}/gpu_reward_curve_lr3e-5.png",
                    "GRPO, gpu preset, actor_lr=3e-5, NVIDIA H200, 148 steps",
                ),
                reward_curve(
                    f"{GPU}/run5-learning-375s/metrics.jsonl",
                    f"{IMG}/gpu_reward_curve_lr3e-5.zh.png",
                    "GRPO，gpu 预设，actor_lr=3e-5，NVIDIA H200，148 步",
                    "zh",
                ),
            ),  # fmt: skip
            needs="a CUDA GPU: the offline kit (`nox -s gpu_kit` here, then "
            "`bash tools/gpu_kit/run.sh DIR` on the GPU node; CONTRIBUTING.md, On a GPU)",
            gpu=True,
            after="the kit writes runs/gpu-kit/; a new dated folder "
            "benchmarks/results/gpu-DATE-GPU/ holds it, with a README saying which run is which",
        ),
    )
}


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def run(step: Step) -> None:
    """Run ``step`` from the repository root; exit with its status if it fails."""
    shown = " ".join(step.argv) + (f" > {step.stdout}" if step.stdout else "")
    print(f"records: {shown}", flush=True)
    argv = list(step.argv)
    if argv[0] == "python":
        argv[0] = sys.executable  # this environment's
    elif shutil.which(argv[0]) is None:
        sys.exit(f"records: `{argv[0]}` is not on PATH; run `{shown}` where it is")
    if step.stdout:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr[-3000:])
        if done.returncode == 0:  # a failed run leaves the record as it was
            (ROOT / step.stdout).write_text(done.stdout, encoding="utf-8")
    else:
        done = subprocess.run(argv, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"records: `{shown}` exited with {done.returncode}; nothing more was done")


def describe(record: Record) -> str:
    lines = [f"{record.name}: {record.what}"]
    lines += [f"    made by: {' '.join(s.argv)}" for s in record.make]
    if record.needs:
        lines.append(f"    needs: {record.needs}")
    if record.charts:
        lines.append(f"    charts: {len(record.charts)} (`-- {record.name} --redraw`)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", choices=sorted(RECORDS), help="the record")
    parser.add_argument("--redraw", action="store_true", help="only redraw its charts")
    args = parser.parse_args(argv)
    if args.name is None:
        print("\n".join(describe(record) for record in RECORDS.values()))
        return 0
    record = RECORDS[args.name]
    if args.redraw:
        if not record.charts:
            print(f"records: {record.name} has no charts to redraw")
        for step in record.charts:
            run(step)
        return 0
    if record.gpu and not cuda_available():
        print(f"records: {record.name} needs {record.needs}; this machine has no CUDA")
        return 2
    if record.needs:
        print(f"records: {record.name} needs {record.needs}")
    for step in record.make:
        run(step)
    for made, kept in record.copies:
        shutil.copyfile(ROOT / made, ROOT / kept)
        print(f"records: {made} -> {kept}")
    for step in record.charts:
        run(step)
    print(f"records: {record.name} refreshed; tests/test_records.py now holds the pages to it")
    if record.after:
        print(f"records: then by hand: {record.after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
