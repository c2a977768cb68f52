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
printed. (In-process, ``python_blocks.MainThreadOnly`` does the same.)

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


class MainThreadStdout(io.TextIOBase):
    """``sys.stdout`` for the main thread; other threads' writes go to ``sys.stderr``."""

    def __init__(self, stdout, stderr) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.main = threading.main_thread()

    def write(self, text: str) -> int:
        target = self.stdout if threading.current_thread() is self.main else self.stderr
        return target.write(text)

    def flush(self) -> None:
        self.stdout.flush()
        self.stderr.flush()

    # A page may hand sys.stdout to a subprocess or ask whether it is a terminal.
    def fileno(self) -> int:
        return self.stdout.fileno()

    def isatty(self) -> bool:
        return self.stdout.isatty()

    @property
    def encoding(self) -> str:
        return self.stdout.encoding


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python -u tests/docblocks/script_launcher.py SCRIPT")
    script = Path(sys.argv[1]).resolve()
    sys.argv = [str(script)]
    sys.path[0] = str(script.parent)  # python script.py puts the script's folder first
    sys.stdout = MainThreadStdout(sys.stdout, sys.stderr)
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
