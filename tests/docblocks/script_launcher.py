"""Run a page's script as ``python script.py`` would, with only the main thread on stdout.

Usage: ``python -u tests/docblocks/script_launcher.py SCRIPT``.

Ray's driver prints what other processes log from a background thread: a rank's
``print``, and the raylet's ``(raylet) A worker died or was killed ...`` at the
very moment the driver learns of the death. ``print`` writes its text and its
newline in two writes, so two threads printing at once can splice their lines:
a forwarded line and the page's ``worker group 'demo', rank 1 ... died`` become
one line, which the harness then drops as forwarded. Here writes to
``sys.stdout`` from any thread but the main one go to stderr instead, where the
harness keeps them for a failure's report; stdout holds what the page's blocks
printed. (In-process, ``python_blocks.run_python`` uses the same class.)

Everything else is as in ``python script.py``: ``sys.argv``, ``sys.path[0]`` (the
script's folder) and ``__name__ == "__main__"``. The reader's own run is
unchanged: this file is the harness's, never part of the download.
"""

from __future__ import annotations

import io
import runpy
import sys
import threading
from pathlib import Path


class MainThreadOnly(io.TextIOBase):
    """A stdout that sends what the thread that made it writes to ``owned``, and what
    any other thread writes to ``others``.

    Here (a page's script) ``owned`` is the real stdout and ``others`` stderr; in-process
    (``python_blocks.run_python``) ``owned`` is the block's captured output and ``others``
    the real stdout.
    """

    def __init__(self, owned, others) -> None:
        self.owned = owned
        self.others = others
        self.owner = threading.current_thread()

    def write(self, text: str) -> int:
        target = self.owned if threading.current_thread() is self.owner else self.others
        return target.write(text)

    def flush(self) -> None:
        self.owned.flush()
        self.others.flush()

    # A page may hand sys.stdout to a subprocess or ask whether it is a terminal.
    def fileno(self) -> int:
        return self.owned.fileno()

    def isatty(self) -> bool:
        return self.owned.isatty()


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python -u tests/docblocks/script_launcher.py SCRIPT")
    script = Path(sys.argv[1]).resolve()
    sys.argv = [str(script)]
    sys.path[0] = str(script.parent)  # python script.py puts the script's folder first
    sys.stdout = MainThreadOnly(sys.stdout, sys.stderr)  # made here, in the main thread
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
