"""tests/passes.py: what a shell runner's namespaces give it, checked where they can be made.

A runner must see the checkout (CI may clone under /tmp, which the runner gets a private
copy of) and must keep what it writes to /tmp to itself (five pages name
``/tmp/ray-node2``; two runners writing there at once would share one node's files).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.passes import NAMESPACE_SETUP, UNSHARE, namespace_env, namespaces_work

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces")


def in_runner(command: str, checkout, private_tmp, resolv_conf) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*UNSHARE, "bash", "-c", NAMESPACE_SETUP, "setup", "bash", "-c", command],
        env={**os.environ, **namespace_env(resolv_conf, private_tmp, checkout)},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_runner_sees_a_checkout_under_tmp_and_keeps_its_tmp_to_itself(tmp_path):
    resolv_conf = tmp_path / "resolv.conf"
    resolv_conf.write_text("nameserver 127.0.0.1\n")
    if not namespaces_work(tmp_path, resolv_conf):
        pytest.skip("this machine cannot make PID, network and mount namespaces")
    checkout = tmp_path / "clone"  # under /tmp, as a CI clone may be
    checkout.mkdir()
    (checkout / "noxfile.py").write_text("# the checkout\n")
    private_tmp = tmp_path / "runner-tmp"
    private_tmp.mkdir()
    marker = f"/tmp/ray-node2-{os.getpid()}"

    done = in_runner(
        f'cat "$REPO/noxfile.py" && mkdir {marker} && ip -o -4 addr show dev lo',
        checkout,
        private_tmp,
        resolv_conf,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "# the checkout"
    assert "10.9.0.2" in done.stdout  # its own loopback address, for Ray's node IP
    assert not os.path.exists(marker)  # not in the machine's /tmp...
    assert (private_tmp / marker.removeprefix("/tmp/")).is_dir()  # ...but in the runner's
