"""The veRL chapter's figures of veRL's own run on a CPU are those of its committed record.

``docs/verl/run-layout.md#cpu-run`` (and its Chinese twin) shows what ``nox -s verl_run``
saw: the actors alive mid-training, the CPUs and GPU they held, and the calls of each step.
The run's own ``run.json`` files are committed under ``benchmarks/results/verl-cpu-run/``;
this test formats each figure from them and looks for it in both languages' section, so
neither can change without the other. ``tests/verl_run/test_run.py`` holds each new run of
``nox -s verl_run`` to the same record.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "benchmarks" / "results" / "verl-cpu-run"
PAGES = [REPO / "docs" / "verl" / "run-layout.md", REPO / "docs" / "verl" / "run-layout.zh.md"]
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


def section(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index("{#cpu-run}")
    return text[start : text.index("\n## ", start)]


def alive(run: dict) -> Counter:
    """Alive actors per class, the colocated class by its short name as the page gives it."""
    return Counter(
        a["class_name"].rsplit(".", 1)[-1]
        for a in run["snapshot"]["actors"]
        if a["state"] == "ALIVE"
    )


def figures() -> list[str]:
    grpo = json.loads((RECORD / "grpo.json").read_text())
    ppo = json.loads((RECORD / "ppo.json").read_text())
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
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_cpu_run_on_the_page_is_the_recorded_run(page):
    text = section(page)
    missing = [pattern for pattern in figures() if not re.search(pattern, text)]
    assert not missing, f"{page.name}: not in the #cpu-run section: {missing}"


TQ_PAGES = [
    REPO / "docs" / "verl" / "transferqueue.md",
    REPO / "docs" / "verl" / "transferqueue.zh.md",
]


def per_step_section(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index("{#per-step}")
    return text[start : text.index("\n## ", start)]


def transferqueue_figures() -> list[str]:
    """What docs/verl/transferqueue.md#per-step shows of run.json's "transferqueue": one row per
    operation of GRPO's step 1, the totals of every step of both runs, and the token counts."""
    grpo = json.loads((RECORD / "grpo.json").read_text())
    ppo = json.loads((RECORD / "ppo.json").read_text())
    step = grpo["transferqueue"]["steps"]["1"]
    fields = step["fields"]
    found = []
    for operation in step["operations"]:
        sizes = operation["bytes"]
        tensors = sum(b for name, b in sizes.items() if fields[name]["kind"] != "object")
        others = sum(b for name, b in sizes.items() if fields[name]["kind"] == "object")
        cells = (
            rf"^\| `{operation['process']}` \| `{operation['stage']}` \| {operation['op']}\b"
            rf"[^|\n]*\| (?P<fields>[^|\n]*)\| {operation['rows']} \| {tensors} \| {others} \|$"
        )
        # a narrow read or write names its fields; a wide one gives their number
        names = sorted(sizes) if len(sizes) <= 7 else [str(len(sizes))]
        found.append((cells, names))
    for run in (grpo, ppo):
        for entry in run["transferqueue"]["steps"].values():
            sizes = [
                entry[f"{d}_{k}_bytes"] for d in ("written", "read") for k in ("tensor", "object")
            ]
            found.append((r"\| " + r" \| ".join(map(str, sizes)) + r" \|$", []))
    tokens = fields["input_ids"]["written"] // 8  # int64 token ids, prompt and response
    responses = fields["responses"]["written"] // 8
    found.append((rf"\b{tokens} (tokens|个 token)", []))
    found.append((rf"\b{responses} (of them response tokens|个是回复的 token)", []))
    found.append((rf"\b{step['operations'][0]['rows']} (rows|行)", []))
    return found


@pytest.mark.parametrize("page", TQ_PAGES, ids=lambda p: p.name)
def test_the_transferqueue_bytes_on_the_page_are_the_recorded_ones(page):
    text = per_step_section(page)
    missing = []
    for pattern, names in transferqueue_figures():
        match = re.search(pattern, text, re.M)
        if match is None:
            missing.append(pattern)
        elif names:
            cell = match.group("fields")
            wanted = [name if name.isdigit() else f"`{name}`" for name in names]
            missing += [f"{name} in {pattern}" for name in wanted if name not in cell]
    assert not missing, f"{page.name}: not in the #per-step section: {missing}"
    # every count of tokens in the section is the step's (the 16-token limit aside)
    grpo = json.loads((RECORD / "grpo.json").read_text())
    tokens = str(grpo["transferqueue"]["steps"]["1"]["fields"]["input_ids"]["written"] // 8)
    counts = re.findall(r"\b(\d+) (?:tokens\b|个 token(?! 的上限))", text)
    assert counts and set(counts) == {tokens}, (page.name, counts, tokens)
