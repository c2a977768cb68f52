"""Build the offline GPU kit: every wheel the GPU checks need that a stock CUDA PyTorch image lacks.

    nox -s gpu_kit [-- --python-version 3.12 --torch 2.11 --out .gpu-kit]

Many GPU nodes (company and university clusters, and the GPU machine this project is
lent) have a CUDA PyTorch installed and no package index (the handbook's page:
``docs/rlhf/index.md#gpu-check``). ``tools/gpu_kit/run.sh``
installs this folder there with ``pip install --no-index --no-deps --target`` on top of
the machine's own Python, torch and transformers, and runs the checks.

What goes in (versions from ``constraints.txt``, wheels for the target Python on
manylinux x86-64):

* Ray 2.60.0, repacked without ``ray/jars/`` (Ray's Java API, 30.7 MiB of the 75.6 MiB
  cp312 wheel; a Python program never loads it). ``wheel pack`` rewrites ``RECORD``,
  so pip installs the result like any other wheel.
* what Ray's core and the checks import and the image does not have
  (:data:`KIT_PACKAGES`; the image's list is ``tools/gpu_kit/stock-image.txt``);
* tensordict, checked against the target torch through its ``Requires-Dist``;
* the project itself, ``reference_impl``, as a wheel.

It ends with ``manifest.json`` (name, version, file, bytes, sha256 of each wheel) and the
total, with the tracked tree's size beside it: what travels to the GPU machine, which must
stay within :data:`TRAVEL_LIMIT_MIB`.

Raises ``SystemExit`` with the reason when a wheel cannot be had for the target, when
tensordict's torch requirement excludes the target torch, or when the kit is too large.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
# What may travel to the GPU machine with a run: the kit plus the tracked tree (issue #30).
TRAVEL_LIMIT_MIB = 60
# Not on a stock CUDA PyTorch image (tools/gpu_kit/stock-image.txt), needed by Ray's core
# (jsonschema and its dependencies), the doc-block harness (sybil, and pytest-timeout for the
# `timeout` setting in pyproject.toml, which the image may lack), DataProto (tensordict) and
# the GPU pages, which import veRL's single controller (verl, which needs omegaconf).
KIT_PACKAGES = (
    "ray",
    "jsonschema",
    "jsonschema-specifications",
    "referencing",
    "rpds-py",
    "sybil",
    "pytest-timeout",
    "tensordict",
    "pyvers",
    "verl",
    "omegaconf",
    "antlr4-python3-runtime",
)
# Published as a source archive only (pure Python): built into a wheel here.
SOURCE_ONLY = ("antlr4-python3-runtime",)
# Never loaded from Python: Ray's Java API and its jars.
RAY_DROPPED = ("ray/jars",)
# pip matches manylinux tags exactly: list the ones PyPI's wheels of KIT_PACKAGES carry.
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)


def pinned_versions(constraints: Path) -> dict[str, str]:
    """``{canonical name: version}`` from the ``name==version`` lines of a constraints file."""
    pins = {}
    for line in constraints.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonicalize_name(name)] = version.strip()
    return pins


def download(requirements: list[str], python_version: str, dest: Path) -> None:
    """``pip download`` binary wheels for the target Python on manylinux x86-64, no deps."""
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    abi = "cp" + python_version.replace(".", "")
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
        "--only-binary=:all:", "--implementation", "cp", "--python-version", python_version,
        "--abi", abi, "--abi", "abi3", "--abi", "none", *platforms, "--platform", "any",
        "--dest", str(dest), *requirements,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(
            f"pip could not download wheels for Python {python_version} on manylinux x86-64:\n"
            f"{done.stderr.strip()}\nCheck the package index, or choose --python-version."
        )


def wheel_metadata(wheel: Path):
    """The parsed ``METADATA`` of a wheel (an ``email.message.Message``)."""
    with zipfile.ZipFile(wheel) as archive:
        # The wheel's own, not that of a package it vendors (Ray's wheel carries several).
        name = next(n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        return Parser().parsestr(archive.read(name).decode())


def check_torch_requirement(wheel: Path, torch_version: str) -> None:
    """Fail unless the wheel's ``Requires-Dist: torch ...`` admits ``torch_version``.

    Raises:
        SystemExit: the wheel needs another torch; the message names both and what to do.
    """
    for line in wheel_metadata(wheel).get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) != "torch" or requirement.marker:
            continue
        if not requirement.specifier.contains(Version(torch_version), prereleases=True):
            raise SystemExit(
                f"{wheel.name} requires {requirement}, which torch {torch_version} (the "
                "target's) does not satisfy. Pass --tensordict with a release whose "
                "requirement it meets, or --torch with the target's version."
            )


def repack_without(wheel: Path, dropped: tuple[str, ...], dest: Path, work: Path) -> Path:
    """Rebuild ``wheel`` into ``dest`` without the folders in ``dropped``; returns the new file.

    ``wheel unpack`` / ``wheel pack`` (the ``wheel`` project) regenerate ``RECORD`` from
    the files present, so the result installs and verifies like the original, and keep the
    file modes (Ray's ``raylet`` and ``gcs_server`` must stay executable).
    """
    _, _, _, tags = parse_wheel_filename(wheel.name)
    subprocess.run(
        [sys.executable, "-m", "wheel", "unpack", "-d", str(work), str(wheel)], check=True
    )
    unpacked = next(work.iterdir())
    for folder in dropped:
        shutil.rmtree(unpacked / folder)
    # `wheel pack` names the file after WHEEL's Tag lines; Ray's say linux_x86_64 where its
    # file name says manylinux2014. Keep the published name: state its tags in WHEEL.
    wheel_file = next(unpacked.glob("*.dist-info/WHEEL"))
    lines = wheel_file.read_text().splitlines()
    kept = [line for line in lines if line.strip() and not line.startswith("Tag:")]
    wheel_file.write_text(
        "\n".join(kept + [f"Tag: {tag}" for tag in sorted(map(str, tags))]) + "\n"
    )
    subprocess.run(
        [sys.executable, "-m", "wheel", "pack", "-d", str(dest), str(unpacked)], check=True
    )
    repacked = dest / wheel.name
    if not repacked.exists():
        raise SystemExit(
            f"wheel pack did not write {repacked.name}; found {sorted(dest.iterdir())}"
        )
    return repacked


def pip_wheel(source: str, dest: Path) -> None:
    """``pip wheel --no-deps`` of ``source`` (a requirement or a project folder) into ``dest``."""
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dest)]
    subprocess.run([*command, source], check=True)


def build_pure_wheel(requirement: str, dest: Path) -> None:
    """Build a pure-Python wheel from a source archive (any Python can install it).

    Raises:
        SystemExit: the wheel built is not pure Python (it would not fit another target).
    """
    pip_wheel(requirement, dest)
    name = canonicalize_name(requirement.split("==")[0])
    for wheel in dest.glob("*.whl"):
        parsed_name, _, _, tags = parse_wheel_filename(wheel.name)
        if parsed_name == name and any(tag.abi != "none" for tag in tags):
            raise SystemExit(
                f"{wheel.name} is not pure Python: it cannot go in a kit for another target"
            )


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(MIB), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tracked_tree_bytes() -> int:
    """Bytes of the files git tracks: they travel with every run on the GPU machine."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return sum(
        (ROOT / name).stat().st_size for name in listed.split("\0") if (ROOT / name).is_file()
    )


def write_manifest(kit: Path, target: dict) -> dict:
    """Write ``kit/manifest.json`` and return it: each wheel's name, version, size and sha256."""
    wheels = []
    for path in sorted(kit.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(path.name)
        size = path.stat().st_size
        wheels.append(
            {"name": str(name), "version": str(version), "file": path.name, "bytes": size,
             "sha256": sha256(path)}
        )  # fmt: skip
    manifest = {"target": target, "wheels": wheels, "total_bytes": sum(w["bytes"] for w in wheels)}
    (kit / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def build(out: Path, python_version: str, torch_version: str, tensordict: str | None) -> dict:
    """Build the kit into ``out`` (emptied first); returns the manifest."""
    pins = pinned_versions(ROOT / "constraints.txt")
    if tensordict:
        pins["tensordict"] = tensordict
    requirement = {name: f"{name}=={pins[canonicalize_name(name)]}" for name in KIT_PACKAGES}
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        downloads = Path(tmp) / "downloads"
        binary = [requirement[name] for name in KIT_PACKAGES if name not in SOURCE_ONLY]
        download(binary, python_version, downloads)
        for name in SOURCE_ONLY:
            build_pure_wheel(requirement[name], downloads)
        for wheel in sorted(downloads.glob("*.whl")):
            name = canonicalize_name(parse_wheel_filename(wheel.name)[0])
            if name == "tensordict":
                check_torch_requirement(wheel, torch_version)
            if name == "ray":
                repack_without(wheel, RAY_DROPPED, out, Path(tmp) / "unpacked")
            else:
                shutil.copy2(wheel, out)
    pip_wheel(str(ROOT), out)  # the project itself, reference_impl
    target = {"python": python_version, "torch": torch_version, "platform": "manylinux x86-64"}
    return write_manifest(out, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / ".gpu-kit"), help="kit folder (emptied)")
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python")
    parser.add_argument("--torch", default="2.11", help="the GPU machine's torch version")
    parser.add_argument("--tensordict", help="tensordict version (default: constraints.txt's)")
    args = parser.parse_args(argv)
    manifest = build(Path(args.out), args.python_version, args.torch, args.tensordict)
    for wheel in manifest["wheels"]:
        print(f"{wheel['bytes'] / MIB:8.2f} MiB  {wheel['file']}")
    kit_mib = manifest["total_bytes"] / MIB
    tree_mib = tracked_tree_bytes() / MIB
    print(
        f"kit: {len(manifest['wheels'])} wheels, {kit_mib:.1f} MiB in {args.out}; with the "
        f"tracked tree ({tree_mib:.1f} MiB): {kit_mib + tree_mib:.1f} MiB "
        f"(limit {TRAVEL_LIMIT_MIB} MiB)"
    )
    if kit_mib + tree_mib > TRAVEL_LIMIT_MIB:
        raise SystemExit(f"the kit and the tree exceed {TRAVEL_LIMIT_MIB} MiB: drop something")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
