"""Every figure a page quotes from a record under ``benchmarks/results/`` is the record's.

One table, :data:`QUOTES`: a page, the section of it (``{#anchor}``) that quotes a record,
the record's folder, and a function that formats each quoted figure from the record's
files as the page writes it. Both languages' sections are held to the same figures, so a
figure cannot be edited on a page, or a record replaced (``nox -s records -- NAME``,
``benchmarks/records.py``), without the other. A figure is a string the section must
contain, or a compiled pattern it must match (``re.M``: ``^``/``$`` are lines).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import page_blocks
from benchmarks.records import RECORDS  # what makes each record

pytestmark = pytest.mark.reads_docs("docs")

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

Figures = list[str | re.Pattern]


def read(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text(encoding="utf-8"))


def metrics_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- rlhf-cpu-runs: docs/rlhf/index.md#measured ---------------------------------------------


def cpu_run_figures(record: Path, language: str) -> Figures:
    """The table's learning figures: RL steps to the target, the score at step 1 and over the
    last 5 steps, exact match over the last 5 steps. (The table's timings are not in the
    record: the scores repeat step for step, the timings move with the machine's load.)"""
    runs = {
        algo: metrics_rows(record / f"{algo}.metrics.jsonl")[1:]  # step 0 is the warm-up
        for algo in ("grpo", "ppo")
    }

    def last5(rows: list[dict], name: str) -> float:
        return sum(row[name] for row in rows[-5:]) / 5

    grpo, ppo = runs["grpo"], runs["ppo"]
    found: Figures = [re.compile(rf"\| {len(grpo)} \| {len(ppo)} \|$", re.M)]
    cells = [
        f"{rows[0]['critic/score/mean']:.3f} → {last5(rows, 'critic/score/mean'):.3f}"
        for rows in (grpo, ppo)
    ]
    found.append(re.compile(rf"\| {cells[0]} \| {cells[1]} \|$", re.M))
    exact = [f"{last5(rows, 'reward/exact_match'):.3f}" for rows in (grpo, ppo)]
    found.append(re.compile(rf"\| {exact[0]} \| {exact[1]} \|$", re.M))
    return found


# --- rlhf-vs-trl: docs/rlhf/index.md#trl ----------------------------------------------------


def trl_rows(record: Path) -> tuple[list[str], list[str], dict[str, str]]:
    """Each system's printed row (its last 9 cells) and the printed ratios, from report.txt."""
    report = (record / "report.txt").read_text()
    ratios = dict(re.findall(r"^ours/TRL (.+?)(?: \(\d+\))?: (\S+)x$", report, re.M))
    # warm-up s, warm-up loss, RL s, RL steps, completions, tokens/s, reward, exact, load
    rows = [line.split()[-9:] for line in report.splitlines() if line.startswith(("ours ", "TRL "))]
    ours, trl = rows
    return ours, trl, ratios


def trl_figures(record: Path, language: str) -> Figures:
    """The run's row of the table (its date, loads, RL steps, ratios), its CPUs and each
    system's final reward."""
    run = read(record, "record.json")
    ours, trl, ratios = trl_rows(record)
    cells = [
        f"{ours[8]} / {trl[8]}",
        f"{ours[3]} / {trl[3]}",
        f"{ratios['tokens/s']}×",
        f"{ratios['reward at equal wall time']}×",
        f"{ratios['reward at equal RL steps']}×",
    ]
    row = r"^\|[^|\n]*" + re.escape(run["date"]) + r"[^|\n]*\| "
    row += r" \| ".join(re.escape(cell) for cell in cells) + r" \|$"
    cpus = f"{run['cpus']} 个 CPU" if language == "zh" else f"{run['cpus']} CPUs"
    return [re.compile(row, re.M), cpus, ours[6], trl[6]]


def test_the_trl_record_is_the_printed_run():
    """record.json (what --record kept) and report.txt (what the run printed) are one run."""
    record = RESULTS / "rlhf-vs-trl"
    run = read(record, "record.json")
    ours, trl, _ = trl_rows(record)
    for row, system in zip((ours, trl), run["runs"], strict=True):
        assert (int(row[3]), row[6], row[8]) == (
            system["steps"],
            f"{system['reward']:.3f}",
            f"{system['load']:.1f}",
        )
    assert f"on {run['cpus']} CPUs)" in (record / "report.txt").read_text()


# --- gpu-2026-11-26-nvidia-h200: docs/rlhf/index.md#gpu -------------------------------------


def gpu_figures(record: Path, language: str) -> Figures:
    """Each published GPU figure, formatted from the run files as the page writes it
    (the record's README says which run is which)."""
    run1 = read(record / "run1-kit", "summary.json")
    run2 = read(record / "run2-lr3e-5", "learning.json")
    run4 = read(record / "run4-kit", "summary.json")
    run5 = read(record / "run5-learning-375s", "learning.json")
    costs = (record / "run2-lr3e-5" / "costs.log").read_text()
    rollout_log = (record / "run1-kit" / "rollout.log").read_text()
    versions, checks = run1["versions"], run1["checks"]
    found: Figures = [
        versions["gpu"],
        versions["python"],
        f"torch {versions['torch']}",
        f"CUDA {versions['cuda']}",
        f"transformers {versions['transformers']}",
        f"Ray {versions['ray']}",
        f"tensordict {versions['tensordict']}",
        run1["date"][:10],
        f"{checks['smoke']['wall_s']} s",
        f"{run4['checks']['smoke']['wall_s']} s",
        f"{checks['rollout']['ratio']:.2f}×",
    ]
    docs = re.search(
        r"gpu-only python blocks: (\d+) passed.*?=+ (\d+) passed.*? in ([\d.]+)s",
        (record / "run4-kit" / "docs.log").read_text(),
        re.S,
    )
    found += [f"{docs.group(1)} ", f"{docs.group(2)} ", f"{float(docs.group(3)):.1f} s"]
    rates = dict(re.findall(r"^(ours|transformers)\S* .*?(\d+) tokens/s$", rollout_log, re.M))
    found += [f"{int(rates['ours']):,}", f"{int(rates['transformers']):,}"]
    for run, log in (
        (checks["learning"]["learning"], record / "run1-kit"),
        (run2["learning"], record / "run2-lr3e-5"),
        (run4["checks"]["learning"]["learning"], record / "run4-kit"),
        (run5["learning"], record / "run5-learning-375s"),
    ):
        found += [
            f"| {run['steps']} ",
            f"{run['wall_s']:.0f} s",
            f"{run['limit_s']:.0f} s",
            f"{run['warmup_s']:.1f} s",
            f"{run['best_5_step_mean']:.3f}",
            f"{metrics_rows(log / 'metrics.jsonl')[-1]['critic/score/mean']:.3f}",
            f"{run['median_step_s']:.2f} s",
            f"{run['median_mfu_actor']:.2%}",
        ]
    # Run 5's plateau, as the text gives it: the best 5-step window and the 10-step means
    # after step 50.
    scores = [score for _, score in run5["learning"]["curve"]]
    means = [sum(scores[i : i + 5]) / 5 for i in range(len(scores) - 4)]
    best = means.index(max(means))
    found.append(f"{best + 1} {'到' if language == 'zh' else 'to'} {best + 5}")
    tens = [sum(scores[i : i + 10]) / len(scores[i : i + 10]) for i in range(50, len(scores), 10)]
    found += [f"{min(tens):.2f}", f"{max(tens):.2f}"]
    shares = checks["learning"]["learning"]["timing_share"]
    found += [
        f"`{k}` {shares[k]:.0%}"
        for k in ("update_actor", "gen", "old_log_prob", "ref", "weight_sync")
    ]
    update = re.search(
        r"\((\d+) tokens\): ([\d.]+) ms \(forward ([\d.]+), backward ([\d.]+), clip ([\d.]+), "
        r"optimizer ([\d.]+)\); under the profiler ([\d.]+) ms, of which GPU kernels ([\d.]+) ms",
        costs,
    )
    found += [f"{update.group(1)}"] + [
        f"{v} ms" for v in (update.group(2), update.group(7), update.group(8))
    ]
    found += list(update.group(3, 4, 5, 6))
    kernels_only = re.search(r"([\d.]+) if the GPU ran only the kernels", costs).group(1)
    found.append(f"{float(kernels_only):.1%}")
    decode = re.search(
        r"([\d.]+) ms per decode step .*?GPU kernels ([\d.]+) ms of it \((\d+)%\)", costs
    )
    found += [f"{decode.group(1)} ms", f"{decode.group(2)} ms", f"{decode.group(3)}%"]
    return found


# --- verl-cpu-run: docs/verl/run-layout.md#cpu-run, docs/verl/transferqueue.md#per-step ----

# The methods whose counts the page tabulates, with the calls the validation pass adds to
# each: 8 test prompts, one response each, spread over the 8 agent-loop workers.
VALIDATION_CALLS = {
    "HFCPUServer.generate": 8,
    "GlobalRequestLoadBalancer.acquire_server": 8,
    "RewardLoopWorker.compute_score": 8,
    "AgentLoopWorkerTQ.generate_sequences": 8,
    "WorkerDict.actor_rollout_ref_compute_log_prob": 0,
    "WorkerDict.actor_rollout_ref_compute_ref_log_prob": 0,
    "WorkerDict.actor_rollout_ref_update_actor": 0,
}


def alive(run: dict) -> Counter:
    """Alive actors per class, the colocated class by its short name as the page gives it."""
    return Counter(
        a["class_name"].rsplit(".", 1)[-1]
        for a in run["snapshot"]["actors"]
        if a["state"] == "ALIVE"
    )


def verl_run_figures(record: Path, language: str) -> Figures:
    """What the run saw: the actors alive mid-training, the CPUs and GPU they held, and the
    calls of each step."""
    grpo, ppo = read(record, "grpo.json"), read(record, "ppo.json")
    assert grpo["returncode"] == ppo["returncode"] == 0
    classes = alive(grpo)
    found = [rf"\| `{name}`[^|\n]*\| {count} \|" for name, count in classes.items()]
    found.append(rf"\| [^|\n]*\| {sum(classes.values())} \|\n\n")  # the total, last row
    found.append(rf"{sum(alive(ppo).values())} (actors|个 Actor)")
    cpu, gpu = grpo["resources"]["CPU"], grpo["resources"]["GPU"]
    found += [
        rf"\b{cpu['total']:g}\b",
        rf"\b{cpu['held']:g}\b",
        rf"\b{cpu['reserved_in_placement_groups']:g}\b",
        re.escape(f"{cpu['used_as_ray_status_prints']:.1f}/{cpu['total']:.1f} CPU"),
        re.escape(f"{gpu['used_in_placement_groups']:g}"),
    ]
    steps, calls = grpo["steps_requested"], grpo["calls"]
    held_by_tq = calls["SimpleStorageUnit.__init__"] + calls["TransferQueueController.__init__"]
    found.append(rf"({held_by_tq} by TransferQueue|TransferQueue 占 {held_by_tq} 个)")
    for method, validation in VALIDATION_CALLS.items():
        per_step = (calls[method] - validation) / steps
        found.append(rf"\| `{re.escape(method)}` \| {calls[method]} \| {per_step:g}\b")
    weights = "WorkerDict.actor_rollout_ref_update_weights"
    assert calls[weights] == steps + 1  # the page: one a step, and one before the first rollout
    found.append(rf"\| `{weights}` \| {calls[weights]} \| 1")
    for name in ("critic_infer_batch", "critic_train_mini_batch"):
        assert ppo["calls"][f"WorkerDict.{name}"] == ppo["steps_requested"]  # once a step
        found.append(f"`{name}`")
    return [re.compile(pattern, re.M) for pattern in found]


def transferqueue_figures(record: Path, language: str) -> Figures:
    """What the page shows of run.json's "transferqueue": one row per operation of GRPO's
    step 1 (a narrow read or write names its fields, a wide one gives their number), the
    totals of every step of both runs, and the token counts."""
    grpo, ppo = read(record, "grpo.json"), read(record, "ppo.json")
    step = grpo["transferqueue"]["steps"]["1"]
    fields = step["fields"]
    found = []
    for operation in step["operations"]:
        sizes = operation["bytes"]
        tensors = sum(b for name, b in sizes.items() if fields[name]["kind"] != "object")
        others = sum(b for name, b in sizes.items() if fields[name]["kind"] == "object")
        names = sorted(sizes) if len(sizes) <= 7 else [str(len(sizes))]
        # the fields cell holds each name (or the number), in any order
        cell = "".join(
            rf"(?=[^|\n]*{re.escape(name if name.isdigit() else f'`{name}`')})" for name in names
        )
        found.append(
            rf"^\| `{operation['process']}` \| `{operation['stage']}` \| {operation['op']}\b"
            rf"[^|\n]*\| {cell}[^|\n]*\| {operation['rows']} \| {tensors} \| {others} \|$"
        )
    for run in (grpo, ppo):
        for entry in run["transferqueue"]["steps"].values():
            sizes = [
                entry[f"{d}_{k}_bytes"] for d in ("written", "read") for k in ("tensor", "object")
            ]
            found.append(r"\| " + r" \| ".join(map(str, sizes)) + r" \|$")
    tokens = fields["input_ids"]["written"] // 8  # int64 token ids, prompt and response
    responses = fields["responses"]["written"] // 8
    found.append(rf"\b{tokens} (tokens|个 token)")
    found.append(rf"\b{responses} (of them response tokens|个是回复的 token)")
    found.append(rf"\b{step['operations'][0]['rows']} (rows|行)")
    return [re.compile(pattern, re.M) for pattern in found]


def test_every_token_count_in_the_per_step_section_is_the_steps():
    """Beyond the figures: no other count of tokens (the 16-token limit aside) in either
    language's #per-step section."""
    grpo = read(RESULTS / "verl-cpu-run", "grpo.json")
    tokens = str(grpo["transferqueue"]["steps"]["1"]["fields"]["input_ids"]["written"] // 8)
    for page in ("transferqueue.md", "transferqueue.zh.md"):
        text = page_blocks.section((REPO / "docs" / "verl" / page).read_text("utf-8"), "per-step")
        counts = re.findall(r"\b(\d+) (?:tokens\b|个 token(?! 的上限))", text)
        assert counts and set(counts) == {tokens}, (page, counts, tokens)


# --- dataproto-transfer: docs/verl/transferqueue.md#serialization ---------------------------


def transfer_figures(record: Path, language: str) -> Figures:
    """Each run's three ratios per payload (veRL default, veRL numpy, reference_impl; raw
    Ray's own 1.00x is the baseline), as the page gives them: run 1 as the table's rows,
    run 2 in the sentence after it."""
    found: Figures = []
    for run in ("run1.txt", "run2.txt"):
        rows = [line.split() for line in (record / run).read_text().splitlines()[1:]]
        for payload in ("1 KiB", "64 MiB"):
            ratios = [
                re.escape(row[-1].replace("x", "×"))
                for row in rows
                if " ".join(row[:2]) == payload and row[-1] != "1.00x"
            ]
            assert len(ratios) == 3, (run, payload, rows)
            if run == "run1.txt":
                found.append(
                    re.compile(rf"^\| {payload} \| " + r" \| ".join(ratios) + r" \|$", re.M)
                )
            else:
                first, second, third = ratios
                # (English prose wraps: a line may break at any space)
                found.append(re.compile(rf"{first}(,\s|、){second}(\sand\s| 和 ){third}"))
    return found


# --- plan-sizes: docs/verl/plan.md#measured --------------------------------------------------


def plan_size_figures(record: Path, language: str) -> Figures:
    """Each measured shape's wall time and peak memory, as the table gives them."""
    found: Figures = []
    for path in sorted(record.glob("[0-9]*x[0-9]*.json")):
        size = read(record, path.name)
        found.append(f"{size['wall_s']:.0f} s")
        if size.get("peak_pss_mib"):
            found.append(f"{size['peak_pss_mib']} MiB")
    return found


# --- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quote:
    """A section of a page (its English path; the Chinese twin is held to the same figures)
    that quotes the record in ``benchmarks/results/<record>/``."""

    page: str
    anchor: str
    record: str
    figures: Callable[[Path, str], Figures]  # (record folder, "en" or "zh") -> figures


QUOTES = [
    Quote("docs/rlhf/index.md", "measured", "rlhf-cpu-runs", cpu_run_figures),
    Quote("docs/rlhf/index.md", "trl", "rlhf-vs-trl", trl_figures),
    Quote("docs/rlhf/index.md", "gpu", "gpu-2026-11-26-nvidia-h200", gpu_figures),
    Quote("docs/verl/run-layout.md", "cpu-run", "verl-cpu-run", verl_run_figures),
    Quote("docs/verl/transferqueue.md", "per-step", "verl-cpu-run", transferqueue_figures),
    Quote("docs/verl/transferqueue.md", "serialization", "dataproto-transfer", transfer_figures),
    Quote("docs/verl/plan.md", "measured", "plan-sizes", plan_size_figures),
]


def on_page(figure: str | re.Pattern, text: str) -> bool:
    return figure.search(text) is not None if isinstance(figure, re.Pattern) else figure in text


CASES = [
    pytest.param(quote, language, id=f"{quote.record}-{quote.page}#{quote.anchor}-{language}")
    for quote in QUOTES
    for language in ("en", "zh")
]


@pytest.mark.parametrize("quote, language", CASES)
def test_the_figures_on_the_page_are_the_records(quote: Quote, language: str):
    page = REPO / quote.page
    if language == "zh":
        page = page_blocks.twin(page)
    text = page_blocks.section(page.read_text(encoding="utf-8"), quote.anchor)
    figures = quote.figures(RESULTS / quote.record, language)
    assert figures, f"{quote.record}: no figures"
    missing = [getattr(f, "pattern", f) for f in figures if not on_page(f, text)]
    assert not missing, f"{page.name}#{quote.anchor}: not the figures of {quote.record}: {missing}"


def test_every_record_is_quoted_and_has_a_command_that_makes_it():
    folders = {path.name for path in RESULTS.iterdir() if path.is_dir()}
    assert folders == set(RECORDS), "benchmarks/records.py must list every record folder"
    assert folders == {quote.record for quote in QUOTES}, "every record is quoted by a page"


def test_the_charts_redraw_from_the_records(tmp_path):
    """Each chart a record lists (``nox -s records -- NAME --redraw``) redraws from the
    record alone, as large as the committed image. Run here into a temporary folder."""
    pytest.importorskip("matplotlib")
    from benchmarks.charts import chinese_font_rc, main

    try:
        chinese_font_rc()
    except RuntimeError as err:
        pytest.skip(str(err))
    steps = [s for r in RECORDS.values() for s in r.charts if s.argv[1] == "benchmarks/charts.py"]
    assert len(steps) == 8
    for step in steps:
        metrics, png, *rest = step.argv[2:]
        drawn = tmp_path / Path(png).name
        assert main([str(REPO / metrics), str(drawn), *rest]) == 0
        assert png_size(drawn) == png_size(REPO / png), png


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels, from the PNG's header."""
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", path
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
