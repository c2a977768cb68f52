"""Every veRL and Ray citation on the site resolves in the installed veRL 0.9.1 and Ray 2.60.0.

One test per page, notebook and module (both languages): it fails naming each citation that
does not resolve, with its line. The rules are in ``citations.py`` and README.md, "Citing veRL
and Ray"; the counts are printed at the end of the run (``conftest.py``).
"""

from __future__ import annotations

import pytest

from tests.upstream.citations import REPO, cited_sources, scan, scan_text

pytestmark = pytest.mark.reads_docs("docs")


@pytest.mark.parametrize("source", cited_sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_citation_resolves(source):
    unresolved = [c for c in scan(source) if c.problem]
    assert not unresolved, "citations that do not resolve:\n" + "\n".join(
        f"{c.where()}: {c.problem}" for c in unresolved
    )


def test_a_changed_path_fails_with_its_page_and_line(tmp_path):
    page = tmp_path / "page.md"
    text = "Intro.\n\nThe controller: `verl/trainer/main_ppo.py` (`TaskRunnerV1`).\n"
    assert not [c for c in scan_text(page, text) if c.problem]
    broken = text.replace("main_ppo.py", "main_ppo_v2.py")
    (problem,) = [c for c in scan_text(page, broken) if c.problem]
    assert problem.line == 3 and "verl/trainer/main_ppo_v2.py" in problem.problem


@pytest.mark.parametrize(
    "cited, expected",
    [
        ("`verl/trainer/main_ppo.py` (`TaskRunnerV2`)", "defines no `TaskRunnerV2`"),
        ("`verl/single_controller/ray/base.py` (`RayWorkerGroup.execute_al`)", "no `execute_al`"),
        ("`verl/trainer/main_ppo.py:57`", "cites a line number"),
        ("`verl.single_controller.ray.basis`", "defines no `basis`"),
        ("`verl.trainerz`", "defines no `trainerz`"),
        ("`src/ray/raylet/node_manager.cc`", "as a link at the release commit"),
        ("https://github.com/verl-project/verl/blob/main/verl/protocol.py", "not v0.9.1"),
        ("`python/ray/_private/worker.py` (`initialise`)", "defines no `initialise`"),
        ("veRL at commit b178a3cd", "cite veRL v0.9.1"),
    ],
)
def test_what_fails(cited, expected, tmp_path):
    problems = [c.problem for c in scan_text(tmp_path / "p.md", cited) if c.problem]
    assert problems and expected in problems[0]


@pytest.mark.parametrize(
    "cited",
    [
        "`verl/single_controller/base/decorator.py` (`Dispatch.ONE_TO_ALL`, `register`)",
        "`verl/workers/engine/{fsdp,megatron}/`",
        "`verl.protocol.DataProto`",
        "https://github.com/verl-project/verl/blob/v0.9.1/verl/trainer/ppo/v1/trainer_base.py",
        "`python/ray/_private/function_manager.py` (`FunctionActorManager.export`)",
        "https://github.com/ray-project/ray/blob/b7f4259e944bf6959f721b106adc366ddfa0c356/src/ray/raylet/node_manager.cc",
    ],
)
def test_what_resolves(cited, tmp_path):
    citations = scan_text(tmp_path / "p.md", cited)
    assert citations and not [c.problem for c in citations if c.problem]
