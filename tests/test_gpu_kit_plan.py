"""What the GPU kit's docs check runs (``tools/gpu_kit/checks.py --plan``), checked on CPU.

On a GPU machine the check runs each page that has ``gpu`` blocks up to the end of the
section holding its last one; the rest of the page runs on CI. A GPU-only block, or the
``output`` block after it, left out of that plan would never run anywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from page_blocks import blocks, item_id, language

pytestmark = pytest.mark.reads_docs("docs")

REPO = Path(__file__).resolve().parents[1]


def plan(tmp_path) -> dict:
    command = [sys.executable, "tools/gpu_kit/checks.py", str(tmp_path), "--plan"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def items(page: str) -> list[tuple[str, str, str]]:
    """(pytest id, block kind, source) of each block on ``page``."""
    return [(item_id(page, block), block.kind, block.source) for block in blocks(REPO / page)]


def test_the_docs_check_runs_every_gpu_block_and_what_it_prints(tmp_path):
    chosen = plan(tmp_path)
    with_gpu = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "docs").rglob("*.md")
        if language(p) == "en"
        and any(kind == "gpu" for _, kind, _ in items(str(p.relative_to(REPO))))
    )
    assert chosen["pages"] == with_gpu
    deselected = set(chosen["deselect"])
    for page in with_gpu:
        rows = items(page)
        for (item, kind, _), following in zip(rows, [*rows[1:], None], strict=True):
            if kind == "gpu":
                assert item not in deselected, f"{item}: a gpu block left out"
                if following and following[1] == "output":
                    assert following[0] not in deselected, f"{following[0]}: its output left out"


def test_the_errata_stop_after_e01_before_ray_list_which_needs_the_dashboard(tmp_path):
    deselected = set(plan(tmp_path)["deselect"])
    rows = items("docs/errata.md")
    e05 = [item for item, _, source in rows if 'ray_cli("list", "nodes"' in source]
    assert e05 and e05[0] in deselected
    e01_fix = [item for item, _, source in rows if "def matrix_multiply(a, b)" in source]
    assert e01_fix and e01_fix[0] not in deselected
