"""Mutation testing with cosmic-ray: do the tests fail when the code they cover is made wrong?

    nox -s mutants                                   every module of MODULES, 25 mutants each
    nox -s mutants -- --sample 0 --limit-s 3600      every mutant, within an hour
    nox -s mutants -- reference_impl/decorator.py    one module

cosmic-ray (``cosmic_ray``) makes one small change at a time to a module (an operator, a
comparison, a constant, a ``break``...) and runs the tests that cover that module; a
change the tests do not notice is a *surviving* mutant, a gap in the tests. Each module
here has its own fast tests (``MODULES``). The changes are made on disk, so this runs in a
scratch copy of the working tree (its ``PYTHONPATH``, so Ray's worker processes import the
mutated copy too), never in the checkout.

A module has hundreds of possible mutants and each costs one run of its tests, so by
default a fixed random sample of each module's mutants runs (``--sample``), within a time
limit for all (``--limit-s``); the mutants that the limit leaves pending are reported as
such and not counted. The score is killed / (killed + survived), per module and in all.
Surviving mutants are printed as diffs.

A mutant inside an annotation (``dispatch_mode: Dispatch | dict`` made ``Dispatch % dict``)
is never run: in a module with ``from __future__ import annotations`` annotations are kept
as strings and never evaluated, so no test could tell it apart (an equivalent mutant). They
are counted in their own column, before the sample is drawn.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run_limited import run_limited  # tools/ is this script's directory

ROOT = Path(__file__).resolve().parents[1]
# Each module, and the fast tests that cover it. The single controller's tests start a
# real Ray cluster; the harness's run small pages through pytester.
MODULES = {
    "reference_impl/decorator.py": "tests/test_single_controller.py",
    "reference_impl/worker_group.py": "tests/test_single_controller.py",
    "reference_impl/resource_pool.py": "tests/test_single_controller.py",
    # its tests without the four that start Ray (they check ray.put/get, not DataProto)
    "reference_impl/data_proto.py": "tests/test_data_proto.py -k 'not ray_put and not future_'",
    # with the tests of a page in several scripts (only_blocks, script_scope) and of a run
    # cut after its last selected block (cut_after)
    "tests/docblocks/page_scripts.py": "tests/test_docblocks.py tests/test_page_parts.py "
    "tests/test_run_limited.py::test_a_page_runs_only_up_to_its_last_selected_block",
    "tests/docblocks/shell_blocks.py": "tests/test_docblocks_shell.py tests/test_shell_needs.py",
}
# Changes whose mutants are mostly equivalent (a docstring's or a log line's number, a
# string that only names something): not run.
EXCLUDE_OPERATORS = ["core/NumberReplacer"]
# A test run longer than this many times the unmutated run counts as killed (cosmic-ray's
# rule for a timeout: the mutant made the tests hang), and never less than MIN_TIMEOUT_S.
TIMEOUT_FACTOR, MIN_TIMEOUT_S = 4, 120


def scratch_copy(into: Path) -> Path:
    """The working tree's files that git knows or would add (not the ignored), copied."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    copy = into / "tree"
    for name in filter(None, listed):
        source = ROOT / name.decode()
        if source.is_file():
            target = copy / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return copy


def config(module: str, tests: str, python: str, timeout_s: float) -> str:
    # -x: the first failing test kills the mutant; -p no:cacheprovider: nothing written.
    command = f"{python} -m pytest -x -q -n 0 -p no:cacheprovider {tests}"
    if os.environ.get("NAMESPACE_WORK"):
        # A machine of its own (tests/namespace.sh): the suite's check that no Ray process
        # outlives it sees only this run's, not those of whatever else runs beside it.
        command = f"bash tests/namespace.sh {command}"
    return (
        "[cosmic-ray]\n"
        f'module-path = "{module}"\n'
        f"timeout = {timeout_s:.0f}\n"
        "excluded-modules = []\n"
        f'test-command = "{command}"\n'
        '[cosmic-ray.distributor]\nname = "local"\n'
        "[cosmic-ray.filters.operators-filter]\n"
        f"exclude-operators = {json.dumps(EXCLUDE_OPERATORS)}\n"
    )


# What a module's mutants came to: "annotation" counts those set apart, never run.
COUNTS = ("killed", "survived", "pending", "other", "annotation")
IN_ANNOTATION = "in an annotation: never evaluated (from __future__ import annotations)"


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where a module's annotations are, as ((line, column), (end line, end column)), lines
    from 1 and columns from 0 (as ``ast`` and cosmic-ray's positions count them). Empty
    unless the module has ``from __future__ import annotations``: elsewhere annotations
    are evaluated when their function or class is defined, and a mutant there can fail."""
    tree = ast.parse(source)
    postponed = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(alias.name == "annotations" for alias in node.names)
        for node in tree.body
    )
    if not postponed:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            found.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            found.append(node.returns)
    return [((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)) for a in found]


def in_annotation(spans, start: tuple[int, int], end: tuple[int, int]) -> bool:
    """Whether the mutated text, from ``start`` to ``end``, lies inside one of ``spans``."""
    return any(first <= tuple(start) and tuple(end) <= last for first, last in spans)


def keep_a_sample(session: Path, module: Path, sample: int, seed: int) -> int:
    """Mark the pending mutants inside annotations as skipped (IN_ANNOTATION), then all the
    others but a random ``sample`` of them; returns the total."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    spans = annotation_spans(module.read_text())
    with use_db(str(session), WorkDB.Mode.open) as db:
        items = list(db.pending_work_items)
        pending = []
        for item in items:
            if all(in_annotation(spans, m.start_pos, m.end_pos) for m in item.mutations):
                db.set_result(
                    item.job_id,
                    WorkResult(output=IN_ANNOTATION, worker_outcome=WorkerOutcome.SKIPPED),
                )
            else:
                pending.append(item.job_id)
        pending.sort()
        if sample and len(pending) > sample:
            kept = set(random.Random(seed).sample(pending, sample))
            for job_id in pending:
                if job_id not in kept:
                    db.set_result(
                        job_id,
                        WorkResult(output="not sampled", worker_outcome=WorkerOutcome.SKIPPED),
                    )
        return len(items)


def outcomes(session: Path) -> tuple[dict[str, int], list[str]]:
    """Counts (killed, survived, pending, other, and those in annotations, not run) and the
    diffs of the surviving mutants."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    counts = dict.fromkeys(COUNTS, 0)
    survivors = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        counts["pending"] = sum(1 for _ in db.pending_work_items)
        for _, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                counts["annotation"] += result.output == IN_ANNOTATION
                continue
            if result.worker_outcome != WorkerOutcome.NORMAL:
                counts["other"] += 1
            elif result.test_outcome == TestOutcome.SURVIVED:
                counts["survived"] += 1
                survivors.append(result.diff)
            elif result.test_outcome == TestOutcome.KILLED:
                counts["killed"] += 1
            else:
                counts["other"] += 1  # incompetent: the mutant did not even import
    return counts, survivors


def run_module(tree: Path, module: str, python: str, sample: int, seed: int, limit_s: float):
    work = tree.parent / Path(module).stem
    work.mkdir()
    (work / "config.toml").write_text(config(module, MODULES[module], python, limit_s))
    session = work / "session.sqlite"
    cosmic = [sys.executable, "-m", "cosmic_ray.cli"]
    # The tests must pass unmutated, or every mutant would count as killed.
    start = time.monotonic()
    baseline = subprocess.run([*cosmic, "baseline", str(work / "config.toml")], cwd=tree)
    if baseline.returncode != 0:
        print(f"mutants: {MODULES[module]} fails on the unmutated code: {module} not tested")
        return 0, dict.fromkeys(COUNTS, 0), []
    timeout_s = max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * (time.monotonic() - start))
    (work / "config.toml").write_text(config(module, MODULES[module], python, timeout_s))
    limit_s -= time.monotonic() - start
    subprocess.run([*cosmic, "init", str(work / "config.toml"), str(session)], cwd=tree, check=True)
    subprocess.run(
        [sys.executable, "-m", "cosmic_ray.tools.filters.operators_filter",
         str(session), str(work / "config.toml")],
        cwd=tree, check=True,
    )  # fmt: skip
    total = keep_a_sample(session, tree / module, sample, seed)
    # exec runs the kept mutants one by one; at the limit it is interrupted, and it puts the
    # file back (cosmic-ray restores it when the run is interrupted); we copy it back as well.
    run_limited(
        [*cosmic, "exec", str(work / "config.toml"), str(session)],
        max(limit_s, 1),
        cwd=tree,
        grace_s=60,
    )
    shutil.copy2(ROOT / module, tree / module)
    return total, *outcomes(session)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help=f"default: {', '.join(MODULES)}")
    parser.add_argument("--sample", type=int, default=25, help="mutants per module (0: all)")
    parser.add_argument("--seed", type=int, default=0, help="which sample")
    parser.add_argument("--limit-s", type=float, default=2400, help="for all modules")
    parser.add_argument(
        "--test-python", default=sys.executable, help="the Python that runs the tests"
    )
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"not in MODULES (tools/mutants.py): {unknown}")
    modules = args.modules or list(MODULES)
    deadline = time.monotonic() + args.limit_s
    rows, killed, survived = [], 0, 0
    with tempfile.TemporaryDirectory(prefix="mutants-") as folder:
        tree = scratch_copy(Path(folder))
        os.environ["PYTHONPATH"] = str(tree)  # the copy, in the tests and in Ray's workers
        os.environ["NAMESPACE_WORK"] = folder
        probe = subprocess.run(["bash", "tests/namespace.sh", "true"], cwd=tree)
        if probe.returncode != 0:  # no privilege for namespaces: run the tests as they are
            del os.environ["NAMESPACE_WORK"]
        for index, module in enumerate(modules):
            share = (deadline - time.monotonic()) / (len(modules) - index)
            start = time.monotonic()
            total, counts, survivors = run_module(
                tree, module, args.test_python, args.sample, args.seed, share
            )
            killed, survived = killed + counts["killed"], survived + counts["survived"]
            for diff in survivors:
                print(f"--- survived in {module}:\n{diff}")
            rows.append((module, total, counts, time.monotonic() - start))
    print(f"\n{'module':<34} {'mutants':>7} {'annot.':>6} {'killed':>6} {'survived':>8} "
          f"{'pending':>7} {'other':>5} {'score':>6} {'s':>6}")  # fmt: skip
    for module, total, c, seconds in rows:
        ran = c["killed"] + c["survived"]
        score = f"{c['killed'] / ran:.0%}" if ran else "-"
        print(
            f"{module:<34} {total:>7} {c['annotation']:>6} {c['killed']:>6} {c['survived']:>8} "
            f"{c['pending']:>7} {c['other']:>5} {score:>6} {seconds:>6.0f}"
        )
    print("annot.: mutants inside annotations, never evaluated here, so not run")
    if killed + survived:
        print(f"mutation score: {killed}/{killed + survived} = {killed / (killed + survived):.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
