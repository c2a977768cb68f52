"""The one switch: run a page written against ``reference_impl`` on veRL 0.9.1 itself.

A reader ports a snippet by changing its imports (README.md, "Using reference_impl in your
own code"). ``pytest --backend=verl`` does exactly that for every page of the
single-controller chapter and for the tutorial notebook: while a page runs, the module
``reference_impl`` is veRL's objects under the same names (``VERL_NAMES``), so
``from reference_impl import RayWorkerGroup`` gives veRL's ``RayWorkerGroup``. A name with no
veRL counterpart (our clear-error exception classes, for instance) is missing, and
importing it fails as it would in a ported snippet.

Each block either holds on both, or is listed in the chapter's table of differences
(``docs/verl/differences.md``, read by ``listed_differences``): a listed block must differ on
veRL (raise, hang past ``HANG_S``, or print something else), and each row names the test in
``tests/upstream/test_differences_*.py`` that pins the difference against veRL itself.
"""

from __future__ import annotations

import _thread
import importlib
import re
import signal
import sys
import threading
import types
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIFFERENCES_PAGE = REPO / "docs" / "verl" / "differences.md"
# The pages that run on both: the single-controller chapter's pages that rebuild veRL's
# layer, and the tutorial notebook. (The chapter's other pages run veRL itself already.)
CHAPTER = REPO / "docs" / "verl"
CHAPTER_PAGES = (
    "index.md",
    "workers.md",
    "resource-pools.md",
    "worker-groups.md",
    "dataproto.md",
    "colocation.md",
)
NOTEBOOK = REPO / "examples" / "verl_tutorial.ipynb"

# reference_impl's public name -> the veRL 0.9.1 module that defines it.
VERL_NAMES = {
    "RayResourcePool": "verl.single_controller.ray.base",
    "RayClassWithInitArgs": "verl.single_controller.ray.base",
    "RayWorkerGroup": "verl.single_controller.ray.base",
    "create_colocated_worker_cls": "verl.single_controller.ray.base",
    "merge_resource_pool": "verl.single_controller.ray.base",
    "split_resource_pool": "verl.single_controller.ray.base",
    "Worker": "verl.single_controller.base.worker",
    "register": "verl.single_controller.base.decorator",
    "Dispatch": "verl.single_controller.base.decorator",
    "Execute": "verl.single_controller.base.decorator",
    "collect_all_to_all": "verl.single_controller.base.decorator",
    "collect_dp_compute": "verl.single_controller.base.decorator",
    "collect_dp_compute_data_proto": "verl.single_controller.base.decorator",
    "dispatch_all_to_all": "verl.single_controller.base.decorator",
    "dispatch_dp_compute": "verl.single_controller.base.decorator",
    "dispatch_dp_compute_data_proto": "verl.single_controller.base.decorator",
    "dispatch_dp_compute_data_proto_with_func": "verl.single_controller.base.decorator",
    "dispatch_one_to_all": "verl.single_controller.base.decorator",
    "DataProto": "verl.protocol",
    "DataProtoFuture": "verl.protocol",
    "DataProtoItem": "verl.protocol",
    "pad_dataproto_to_divisor": "verl.protocol",
    "unpad_dataproto": "verl.protocol",
}

# How long a listed block may wait on veRL before it counts as hanging (veRL's placement
# waits without a timeout, for instance).
HANG_S = 20
# Any other block on veRL: a generous bound, so that a block that waits for ever fails.
BLOCK_LIMIT_S = 120


def verl_as_reference_impl() -> types.ModuleType:
    """A module named ``reference_impl`` whose attributes are veRL 0.9.1's objects."""
    module = types.ModuleType("reference_impl", "veRL 0.9.1 under reference_impl's names")
    for name, where in VERL_NAMES.items():
        setattr(module, name, getattr(importlib.import_module(where), name))
    return module


@contextmanager
def reference_impl_is_verl():
    """While the block runs, ``import reference_impl`` gives veRL's objects."""
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "reference_impl"}
    for key in saved:
        del sys.modules[key]
    sys.modules["reference_impl"] = verl_as_reference_impl()
    try:
        yield
    finally:
        del sys.modules["reference_impl"]
        sys.modules.update(saved)


@dataclass(frozen=True)
class Difference:
    """A row of the table of differences: this block does not hold on veRL, and why."""

    page: str  # e.g. "worker-groups.md"
    block: int  # the n-th python block of the page, from 1
    what: str
    pinned_by: str  # a test function in tests/upstream/test_differences.py


ROW = re.compile(
    r"^\|\s*\[(?P<page>[\w.-]+\.md)\][^|]*\|\s*(?P<block>\d+)\s*\|(?P<what>[^|]*)\|[^|]*\|"
    r"\s*`(?P<test>test_\w+)`\s*\|\s*$"
)


def listed_differences(page: Path = DIFFERENCES_PAGE) -> list[Difference]:
    """The rows of the table on ``docs/verl/differences.md`` (English page)."""
    rows = []
    for line in page.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            rows.append(
                Difference(match["page"], int(match["block"]), match["what"].strip(), match["test"])
            )
    return rows


class Hung(Exception):
    """A listed block ran past ``HANG_S`` on veRL."""


@contextmanager
def time_limit(seconds: float):
    """Raise ``Hung`` in the main thread if the block is still running after ``seconds``.

    A watchdog thread interrupts the main thread as Ctrl-C would: ``ray.get`` gives way to
    that (it checks for KeyboardInterrupt) but not to other signals' Python handlers, so a
    SIGALRM timer would leave a block waiting on a placement group hanging for ever.
    """
    done = threading.Event()
    fired = threading.Event()
    lock = threading.Lock()

    def watchdog():
        if not done.wait(seconds):
            with lock:
                if not done.is_set():
                    fired.set()
                    _thread.interrupt_main()

    # interrupt_main() does nothing while SIGINT is ignored, which it is in a process started
    # in the background by a non-interactive shell (and so in its pytest-xdist workers): give
    # SIGINT Python's own handler for the duration of the block.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=watchdog, daemon=True, name="hang-watchdog").start()
    try:
        yield
    except KeyboardInterrupt:
        if fired.is_set():
            raise Hung(f"still waiting after {seconds} s") from None
        raise
    finally:
        with lock:
            done.set()
        signal.signal(signal.SIGINT, previous)
