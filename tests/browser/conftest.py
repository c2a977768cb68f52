"""Fixtures for the browser tests: the site built once and served under a sub-path, and Chromium.

The site is built with ``SITE_URL`` set to ``http://127.0.0.1:PORT/ray-rlhf-handbook/``
and served there, as GitHub Pages serves a project site under ``/<repo>/``: a link
or asset that assumes the domain root shows up as a failed request.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PREFIX = "ray-rlhf-handbook"
ARTIFACTS = REPO / "browser-artifacts"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
LANGUAGES = ("en", "zh")
NOT_PAGES = {"assets", "search"}  # directories of the built site that hold no pages


@dataclass(frozen=True)
class Site:
    root: Path  # the built site, served at `base`
    base: str  # http://127.0.0.1:PORT/ray-rlhf-handbook/

    def lang_root(self, lang: str) -> Path:
        return self.root / "zh" if lang == "zh" else self.root

    def pages(self, lang: str) -> list[str]:
        """Every page of one language, as a path below its language root ("" is the home page)."""
        top = self.lang_root(lang)
        found = []
        for html in top.rglob("index.html"):
            rel = html.parent.relative_to(top)
            if rel.parts and (rel.parts[0] in NOT_PAGES or (lang == "en" and rel.parts[0] == "zh")):
                continue
            found.append("" if not rel.parts else rel.as_posix() + "/")
        return sorted(found)

    def url(self, lang: str, path: str) -> str:
        return self.base + ("zh/" if lang == "zh" else "") + path


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the signature of the base class
        pass


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Site:
    served = tmp_path_factory.mktemp("served")
    handler = functools.partial(QuietHandler, directory=str(served))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    base = f"http://127.0.0.1:{server.server_port}/{PREFIX}/"
    env = {**os.environ, "SITE_URL": base, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(served / PREFIX)]
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-3000:]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Site(served / PREFIX, base)
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright  # the `browser` extra; absent in `nox -s tests`

    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium, or set CHROMIUM=<path>")
    # Every host name but the local server's address fails to resolve: the site must render
    # offline, and a stray request to a CDN fails at once instead of waiting on the network.
    args = ["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
    if os.geteuid() == 0:
        args.append("--no-sandbox")  # Chromium refuses to start its sandbox as root (CI containers)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """One screenshot per page per language, kept after the run (gitignored)."""
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    for lang in LANGUAGES:
        (ARTIFACTS / lang).mkdir(parents=True)
    return ARTIFACTS
