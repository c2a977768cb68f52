"""tests/namespace.sh, which tests/passes.py starts each xdist worker through.

A worker must see the checkout (CI may clone under /tmp, which the worker gets a private
copy of) and pytest's base temp (``NAMESPACE_KEEP``), must keep what it writes to /tmp to
itself (five pages name ``/tmp/ray-node2``; two workers writing there at once would share
one node's files), and must get a loopback address that Ray can take for a node IP.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.passes import NAMESPACE_SH, namespaces_work

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces"),
    pytest.mark.reads_docs(),
]


def test_a_worker_sees_the_checkout_and_kept_folder_and_keeps_its_tmp_to_itself(tmp_path):
    if not namespaces_work(tmp_path):
        pytest.skip("this machine cannot make PID, network and mount namespaces")
    # A copy of the checkout's script, under /tmp, as a CI clone may be.
    checkout = tmp_path / "clone"
    (checkout / "tests").mkdir(parents=True)
    shutil.copy(NAMESPACE_SH, checkout / "tests" / "namespace.sh")
    (checkout / "noxfile.py").write_text("# the checkout\n")
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "basetemp").write_text("# pytest's base temp\n")
    work = tmp_path / "work"
    work.mkdir()
    marker = f"/tmp/ray-node2-{os.getpid()}"

    done = subprocess.run(
        [
            "bash",
            str(checkout / "tests" / "namespace.sh"),
            "bash",
            "-c",
            f"echo $PPID; cat {checkout}/noxfile.py {kept}/basetemp; mkdir {marker}; "
            "ip -o -4 addr show dev lo",
        ],
        env={**os.environ, "NAMESPACE_WORK": str(work), "NAMESPACE_KEEP": str(kept)},
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "1"  # its parent, namespace.sh, is PID 1: a process table of its own
    assert lines[1:3] == ["# the checkout", "# pytest's base temp"]
    assert "10.9.0.2" in done.stdout  # its own loopback address, for Ray's node IP
    assert not os.path.exists(marker)  # not in the machine's /tmp...
    private_tmps = [p for p in work.iterdir() if p.is_dir()]
    assert len(private_tmps) == 1
    assert (private_tmps[0] / marker.removeprefix("/tmp/")).is_dir()  # ...but in its own
