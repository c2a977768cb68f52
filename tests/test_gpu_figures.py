"""Every GPU figure that the RLHF chapter publishes is in the files of the run that measured it.

The GPU section of ``docs/rlhf/index.md`` (and its Chinese twin) reports runs on one
H200 (``README.md`` there says which is which); their own output is committed under
``benchmarks/results/gpu-2026-11-26-nvidia-h200/``
(``tools/gpu_kit/run.sh``'s ``summary.json``, ``benchmarks/rlhf_gpu.py``'s
``learning.json``, ``metrics.jsonl`` and ``benchmarks/rlhf_gpu_costs.py``'s log). This
test formats each figure from those files as the page prints it and looks for it in both
languages' GPU section, so a figure cannot be edited on the page, or the files replaced,
without the other.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import page_blocks

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "gpu-2026-11-26-nvidia-h200"
PAGES = [REPO / "docs" / "rlhf" / "index.md", REPO / "docs" / "rlhf" / "index.zh.md"]


def gpu_section(page: Path) -> str:
    """The page's text from its GPU heading to the next heading of the same level."""
    text = page.read_text(encoding="utf-8")
    start = text.index("{#gpu}")
    end = text.index("{#nodes}", start)
    return text[start:end]


def last_score(metrics: Path) -> float:
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return rows[-1]["critic/score/mean"]


def curve(run: dict) -> list[float]:
    """``critic/score/mean`` per RL step of one learning run's figures."""
    return [score for _, score in run["curve"]]


def figures(chinese: bool) -> list[str]:
    """Each published figure, formatted from the run files as the page writes it."""
    run1 = json.loads((RESULTS / "run1-kit" / "summary.json").read_text())
    run2 = json.loads((RESULTS / "run2-lr3e-5" / "learning.json").read_text())
    run4 = json.loads((RESULTS / "run4-kit" / "summary.json").read_text())
    run5 = json.loads((RESULTS / "run5-learning-375s" / "learning.json").read_text())
    costs = (RESULTS / "run2-lr3e-5" / "costs.log").read_text()
    rollout_log = (RESULTS / "run1-kit" / "rollout.log").read_text()
    versions, checks = run1["versions"], run1["checks"]
    found = [
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
        (RESULTS / "run4-kit" / "docs.log").read_text(),
        re.S,
    )
    found += [f"{docs.group(1)} ", f"{docs.group(2)} ", f"{float(docs.group(3)):.1f} s"]
    rates = dict(re.findall(r"^(ours|transformers)\S* .*?(\d+) tokens/s$", rollout_log, re.M))
    found += [f"{int(rates['ours']):,}", f"{int(rates['transformers']):,}"]
    for run, log in (
        (checks["learning"]["learning"], RESULTS / "run1-kit"),
        (run2["learning"], RESULTS / "run2-lr3e-5"),
        (run4["checks"]["learning"]["learning"], RESULTS / "run4-kit"),
        (run5["learning"], RESULTS / "run5-learning-375s"),
    ):
        found += [
            f"| {run['steps']} ",
            f"{run['wall_s']:.0f} s",
            f"{run['limit_s']:.0f} s",
            f"{run['warmup_s']:.1f} s",
            f"{run['best_5_step_mean']:.3f}",
            f"{last_score(log / 'metrics.jsonl'):.3f}",
            f"{run['median_step_s']:.2f} s",
            f"{run['median_mfu_actor']:.2%}",
        ]
    # Run 5's plateau, as the text gives it: the best 5-step window and the 10-step means
    # after step 50.
    scores = curve(run5["learning"])
    means = [sum(scores[i : i + 5]) / 5 for i in range(len(scores) - 4)]
    best = means.index(max(means))
    found.append(f"{best + 1} {'到' if chinese else 'to'} {best + 5}")
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


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_gpu_figure_on_the_page_is_in_the_run_files(page):
    section = gpu_section(page)
    missing = [figure for figure in figures(page.name.endswith(".zh.md")) if figure not in section]
    assert not missing, f"{page.name}: figures not found in the GPU section: {missing}"


def test_the_runs_at_one_learning_rate_share_one_curve():
    """The page says runs 2, 4 and 5 (``actor_lr=3e-5``, one seed) logged the same score at
    every step they share, so that run 5's chart stands for all three."""
    run2 = json.loads((RESULTS / "run2-lr3e-5" / "learning.json").read_text())["learning"]
    run4 = json.loads((RESULTS / "run4-kit" / "summary.json").read_text())
    run5 = json.loads((RESULTS / "run5-learning-375s" / "learning.json").read_text())["learning"]
    longest = curve(run5)
    for shorter in (curve(run2), curve(run4["checks"]["learning"]["learning"])):
        assert shorter == longest[: len(shorter)]


# The latest record of the GPU-only blocks' outputs: the kit's docs check of run 4.
RECORD = RESULTS / "run4-kit"


def gpu_outputs(page: Path) -> list[str]:
    """The text of each ``output`` block that follows a ``gpu`` block on ``page``."""
    found = page_blocks.blocks(page)
    return [
        shown.source
        for ran, shown in zip(found, found[1:], strict=False)
        if ran.kind == "gpu" and shown.kind == "output"
    ]


GPU_OUTPUT_PAGES = sorted(p for p in (REPO / "docs").rglob("*.md") if gpu_outputs(p))


@pytest.mark.parametrize("page", GPU_OUTPUT_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_what_a_gpu_block_printed_was_printed_on_a_gpu(page):
    """CI has no GPU, so an ``output`` block after a ``gpu`` block is never compared there.

    ``run4-kit/gpu-outputs.json`` holds each such block's text as it stood when the kit's
    docs check passed it on the H200 (its item is ``PASSED`` in ``run4-kit/docs.log``).
    Changing that text, or adding such a block, needs a GPU run (``tools/gpu_kit/run.sh``)
    and a new record. The Chinese twin shows the same text (tests/test_docs_pages.py).
    """
    record = json.loads((RECORD / "gpu-outputs.json").read_text())
    log = (RECORD / "docs.log").read_text()
    for row in record:
        assert f"{row['item']} PASSED" in log, f"{row['item']} did not pass in docs.log"
    english = page if page_blocks.language(page) == "en" else page_blocks.twin(page)
    seen = [row["output"] for row in record if row["page"] == str(english.relative_to(REPO))]
    unseen = [text for text in gpu_outputs(page) if text not in seen]
    assert not unseen, f"{page.name}: output of a gpu block never seen on a GPU: {unseen}"
