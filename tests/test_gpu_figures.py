"""What the GPU record says beyond its figures: one curve per learning rate, and the output of
each GPU block seen on a GPU.

The record is ``benchmarks/results/gpu-2026-11-26-nvidia-h200/`` (its ``README.md`` says
which run is which); ``tests/test_records.py`` holds the figures of
``docs/rlhf/index.md#gpu`` (both languages) to it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import page_blocks

pytestmark = pytest.mark.reads_docs("docs")

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "gpu-2026-11-26-nvidia-h200"


def curve(run: dict) -> list[float]:
    """``critic/score/mean`` per RL step of one learning run's figures."""
    return [score for _, score in run["curve"]]


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
