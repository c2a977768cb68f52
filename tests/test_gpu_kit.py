"""The GPU kit is complete: installed offline on a stock CUDA PyTorch image's packages, it runs.

``nox -s gpu_kit_test`` (marker ``kit``; CI runs it after ``nox``). One kit is built for
this machine's Python (``tools/gpu_kit/build.py``). A virtualenv gets only packages that a
stock CUDA PyTorch image holds (``tools/gpu_kit/stock-image.txt``: the lines marked ``+``,
installed normally, and nothing outside the list may come in with them). Then
``tools/gpu_kit/run.sh`` installs the kit into it with ``pip --no-index`` and runs check (a)
on the CPU (``use_gpu=False``), in a network namespace with nothing beyond loopback
(``tests/namespace.sh``), so anything missing fails the run and nothing can be fetched.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from packaging.utils import canonicalize_name
from packaging.version import Version

pytestmark = [pytest.mark.kit, pytest.mark.reads_docs("docs")]

REPO = Path(__file__).resolve().parents[1]
KIT_TOOLS = REPO / "tools" / "gpu_kit"
sys.path.insert(0, str(KIT_TOOLS))
import build  # noqa: E402  (tools/gpu_kit/build.py: tools/ is not a package)


def stock_image() -> tuple[list[str], set[str], dict[str, str]]:
    """(the '+' packages, every name on the image, the versions the list pins)."""
    wanted, names, pins = [], set(), {}
    for line in (KIT_TOOLS / "stock-image.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        spec = line.removeprefix("+").strip()
        name, _, pinned = spec.partition("==")
        names.add(canonicalize_name(name))
        if pinned:
            pins[canonicalize_name(name)] = pinned
        if line.startswith("+"):
            wanted.append(name)
    return wanted, names, pins


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kit")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    torch_version = Version(torch.__version__).base_version
    build.main(["--out", str(out), "--python-version", python, "--torch", torch_version])
    return out


@pytest.fixture(scope="module")
def stock_venv(tmp_path_factory) -> Path:
    """A virtualenv holding only packages of the image's list, installed with pip's resolver."""
    venv = tmp_path_factory.mktemp("stock") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    wanted, names, pins = stock_image()
    # The project's pins, except where the image's list pins another version.
    constraints = venv.parent / "constraints.txt"
    ours = build.pinned_versions(REPO / "constraints.txt")
    merged = {**ours, **pins}
    constraints.write_text("".join(f"{name}=={v}\n" for name, v in sorted(merged.items())))
    if shutil.which("uv"):
        install = ["uv", "pip", "install", "--python", str(python)]
    else:
        install = [str(python), "-m", "pip", "install", "--quiet"]
    subprocess.run([*install, "-c", str(constraints), *wanted], check=True, timeout=900)
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    extra = sorted({canonicalize_name(d["name"]) for d in json.loads(listed)} - names)
    assert not extra, f"not on the image, yet in the stock virtualenv: {extra}"
    return venv


def record_errors(wheel: Path) -> list[str]:
    """Files of ``wheel`` whose RECORD line is missing or wrong, and lines with no file."""
    with zipfile.ZipFile(wheel) as archive:
        # The wheel's own RECORD, not those of packages it vendors (Ray carries several).
        record_name = next(
            n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)
        )
        rows = {row[0]: row for row in csv.reader(io.StringIO(archive.read(record_name).decode()))}
        errors = []
        for name in archive.namelist():
            if name == record_name or name.endswith("/"):
                continue
            row = rows.pop(name, None)
            data = archive.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if row is None or row[1] != f"sha256={digest}" or row[2] != str(len(data)):
                errors.append(name)
        rows.pop(record_name, None)
        return errors + [f"listed, not present: {name}" for name in rows]


def test_kit_holds_ray_without_java_and_a_manifest(kit):
    manifest = json.loads((kit / "manifest.json").read_text())
    names = {w["name"] for w in manifest["wheels"]}
    assert {canonicalize_name(n) for n in build.KIT_PACKAGES} | {"reference-impl"} == names
    assert manifest["total_bytes"] == sum(p.stat().st_size for p in kit.glob("*.whl"))
    for wheel in manifest["wheels"]:
        assert build.sha256(kit / wheel["file"]) == wheel["sha256"]
    (ray_wheel,) = kit.glob("ray-*.whl")
    with zipfile.ZipFile(ray_wheel) as archive:
        assert not [n for n in archive.namelist() if n.startswith("ray/jars/")]
        raylet = archive.getinfo("ray/core/src/ray/raylet/raylet")
        assert raylet.external_attr >> 16 & 0o111, "the raylet must stay executable"
    assert record_errors(ray_wheel) == []
    tree_mib = build.tracked_tree_bytes() / build.MIB
    assert manifest["total_bytes"] / build.MIB + tree_mib <= build.TRAVEL_LIMIT_MIB


def test_tensordict_must_admit_the_target_torch(kit):
    (tensordict,) = kit.glob("tensordict-*.whl")
    build.check_torch_requirement(tensordict, Version(torch.__version__).base_version)
    with pytest.raises(SystemExit, match="does not satisfy"):
        build.check_torch_requirement(tensordict, "2.0.0")


def test_run_sh_installs_offline_and_runs_check_a_on_cpu(kit, stock_venv, tmp_path):
    results = tmp_path / "results"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV") and not key.startswith(("PIP_", "UV_"))
    }
    env.update(
        PYTHON=str(stock_venv / "bin" / "python"),
        GPU_KIT_DIR=str(kit),
        GPU_KIT_SITE=str(tmp_path / "site"),
        NAMESPACE_WORK=str(tmp_path / "ns"),
        NAMESPACE_KEEP=str(tmp_path.parent.parent),  # the kit and the venv live there too
        PIP_NO_INDEX="1",
        HF_HUB_OFFLINE="1",
    )
    (tmp_path / "ns").mkdir()
    command = ["bash", str(REPO / "tests" / "namespace.sh"), "bash", str(KIT_TOOLS / "run.sh")]
    done = subprocess.run(
        [*command, str(results)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "smoke     PASS" in done.stdout
    assert "skipped   rollout, learning (with MFU), docs: no CUDA" in done.stdout
    summary = json.loads((results / "summary.json").read_text())
    assert summary["checks"]["smoke"]["result"]["backend"] == "gloo"
    assert summary["checks"]["smoke"]["result"]["ray_version"] == "2.60.0"
    assert all("skipped" in summary["checks"][n] for n in ("rollout", "learning", "docs"))
    # The kit's own copy of the project works outside a checkout, too.
    site = tmp_path / "site"
    probe = "import reference_impl; reference_impl.RayWorkerGroup; print(reference_impl.__file__)"
    where = subprocess.run(
        [env["PYTHON"], "-c", probe], cwd=tmp_path, env={**env, "PYTHONPATH": str(site)},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert where.startswith(str(site))


def test_gpu_pages_run_offline_on_the_kit(kit, stock_venv, tmp_path):
    """The pages with GPU-only blocks, whole (their other blocks, on the CPU), offline: what
    they import beyond check (a) (the harness's sybil, veRL's single controller) is there."""
    python = str(stock_venv / "bin" / "python")
    site = tmp_path / "site"
    wheels = [str(p) for p in kit.glob("*.whl")]
    install = [python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps"]
    subprocess.run([*install, "--target", str(site), *wheels], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PYTHONPATH=f"{REPO}:{site}",
        NAMESPACE_WORK=str(tmp_path / "ns"),
        NAMESPACE_KEEP=str(tmp_path.parent.parent),
        HF_HUB_OFFLINE="1",
    )
    (tmp_path / "ns").mkdir()
    pages = ["docs/verl/workers.md", "docs/rlhf/index.md"]
    pytest_command = [python, "-m", "pytest", *pages, "-n", "0", "-p", "no:cacheprovider"]
    done = subprocess.run(
        ["bash", str(REPO / "tests" / "namespace.sh"), *pytest_command],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "gpu-only python blocks: 2 skipped" in done.stdout
