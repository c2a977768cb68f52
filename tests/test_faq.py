"""The FAQ answers every seed question, and the questions asked when a run does not start,
in both languages, and every link on it lands.

The seed questions live next to the repository, in ``../shared/seed-questions.yaml``;
their ids are kept in ``SEED_IDS`` so a clean clone (CI) checks the FAQ against them
too, and one test compares the two whenever the file is present.

Anchors are checked the way MkDocs resolves them: an explicit ``{#id}`` on a
heading, or else the slug that the ``toc`` extension makes from the heading text.
A link on the Chinese FAQ lands on the Chinese twin of its target, so its anchor
is looked up there.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify
from mkdocs.config import load_config

import page_blocks

pytestmark = pytest.mark.reads_docs("docs")

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SEED_QUESTIONS = REPO.parent / "shared" / "seed-questions.yaml"
FAQ = {"en": DOCS / "faq.md", "zh": DOCS / "faq.zh.md"}

HEADING = re.compile(r"^#{1,6} +(?P<text>.*?)(?: *\{#(?P<id>[^}]+)\})? *$", re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


# The ids of ../shared/seed-questions.yaml, kept here so that a clean clone (CI), which
# has no ../shared/, still checks the FAQ against them.
SEED_IDS = [
    "Q01-object-store-vs-dataflow",
    "Q02-where-are-ray-actors-in-verl",
    "Q03-what-verl-needs-ray-for",
    "Q04-fsdp-vs-megatron-vs-ray",
    "Q05-who-does-data-and-model-parallelism",
    "Q06-worker-and-workergroup-layers",
    "Q07-ray-data-parallel-claim",
    "Q08-worker-vs-ray-actor-naming",
    "Q09-task-parallelism-in-verl",
    "Q10-what-is-a-node",
    "Q11-resource-management-pain-points",
    "Q12-dynamic-scheduler",
    "Q13-cluster-setup-step-by-step",
    "Q14-tools-scaling-bottlenecks-faults",
    "Q15-submit-to-existing-cluster",
    "Q16-controller-as-remote-function",
    "Q17-execute-all-sync-and-dispatch",
    "Q18-tasks-vs-actors-tradeoffs",
    "Q19-ray-architecture",
    "Q20-ray-throughput-claim",
]


# The questions asked when a run does not start (the FAQ's last sections), each answered
# from an entry of the troubleshooting chapter. Their ids start with T, so they never
# clash with a seed id (Q..), and keep their numbers like the seed questions.
TROUBLESHOOTING_IDS = [
    "T01-run-waits-forever",
    "T02-total-available-gpus",
    "T03-half-the-gpus-idle",
    "T04-gpu-ids-vs-cuda-0",
    "T05-two-workers-one-gpu",
    "T06-local-ray-instead-of-cluster",
    "T07-num-cpus-on-a-cluster",
    "T08-node-never-joined",
    "T09-invalid-auth-token",
    "T10-hang-with-every-actor-alive",
    "T11-gpu-memory-after-a-crash",
    "T12-env-var-not-in-workers",
    "T13-repeated-across-cluster",
    "T14-debugger-in-a-worker",
    "T15-version-mismatch",
    "T16-verl-joined-another-cluster",
    "T17-no-module-in-workers",
]
TROUBLESHOOTING = DOCS / "troubleshooting"


def test_the_kept_ids_match_the_seed_questions():
    if not SEED_QUESTIONS.exists():
        pytest.skip(f"{SEED_QUESTIONS} is not here (a clean clone has no ../shared/)")
    # Read the ids line by line, as the project's hook does: the file is not valid YAML
    # (some `en:` glosses contain ": " or start with a quoted phrase).
    ids = re.findall(r"^- id: *(\S+)", SEED_QUESTIONS.read_text("utf-8"), flags=re.M)
    assert ids == SEED_IDS, "the seed questions changed: update SEED_IDS and the FAQ"


def anchor_of(seed_id: str) -> str:
    """``Q01-object-store-vs-dataflow`` -> ``q01``."""
    return seed_id.split("-")[0].lower()


def prose(page: Path) -> str:
    return page_blocks.prose(page.read_text("utf-8"))


def sections(page: Path) -> dict[str, str]:
    """Explicit id -> text of each ``##`` section of the page, in page order."""
    parts = re.split(r"^(?=## )", prose(page), flags=re.M)[1:]
    return {HEADING.match(part)["id"]: part for part in parts}


def zh_twin(page: Path) -> Path:
    return page.with_name(page.name[: -len(".md")] + ".zh.md")


@functools.cache
def toc_config() -> dict:
    return load_config(str(REPO / "mkdocs.yml"))["mdx_configs"].get("toc", {})


def slug(text: str) -> str:
    """The anchor MkDocs gives a heading without an explicit id (toc's slugify, as configured)."""
    return toc_config().get("slugify", slugify)(text, toc_config().get("separator", "-"))


def anchors(page: Path) -> set[str]:
    return {m["id"] or slug(m["text"]) for m in HEADING.finditer(prose(page))}


def test_question_ids_are_unique_and_never_clash():
    ids = SEED_IDS + TROUBLESHOOTING_IDS
    assert len({anchor_of(i) for i in ids}) == len(ids), "two questions share an anchor"
    assert all(i.startswith("T") for i in TROUBLESHOOTING_IDS)
    assert not any(i.startswith("T") for i in SEED_IDS)


@pytest.mark.parametrize("lang", FAQ)
def test_one_section_per_question_in_order(lang):
    """The seed questions first, in their order, then the troubleshooting questions."""
    page = FAQ[lang]
    questions = SEED_IDS + TROUBLESHOOTING_IDS
    ids = [m["id"] for m in HEADING.finditer(prose(page)) if m["id"]]
    assert ids == [anchor_of(q) for q in questions], f"{page.name}: explicit ids {ids}"
    for question, text in zip(questions, sections(page).values(), strict=True):
        heading = text.splitlines()[0]
        assert heading.startswith(f"## {question.split('-')[0]} "), heading
        asked = [p for p in text.split("\n\n") if p.startswith(QUESTION[lang])]
        assert asked and f"`{question}`" in asked[0], (
            f"{page.name}: the question of {anchor_of(question)} does not name {question}"
        )


def full_section_links(text: str, lang: str) -> list[str]:
    """The links of a section's closing ``Full section:`` paragraph."""
    return LINK.findall(text.split(FULL_SECTION[lang], 1)[1]) if FULL_SECTION[lang] in text else []


@pytest.mark.parametrize("lang", FAQ)
@pytest.mark.parametrize("question", TROUBLESHOOTING_IDS)
def test_troubleshooting_questions_link_their_entry(lang, question):
    """Each answer is a summary of a troubleshooting entry: it links that entry's anchor."""
    text = sections(FAQ[lang])[anchor_of(question)]
    entries = [
        link
        for link in full_section_links(text, lang)
        if link.startswith("troubleshooting/") and "#" in link
    ]
    assert entries, f"{anchor_of(question)}: no link to an entry of docs/troubleshooting/"
    for link in entries:
        path, _, anchor = link.partition("#")
        page = DOCS / path if lang == "en" else zh_twin(DOCS / path)
        explicit = {m["id"] for m in HEADING.finditer(prose(page)) if m["id"]}
        assert anchor in explicit, f"{anchor_of(question)}: {link}: no entry with that anchor"


@pytest.mark.parametrize("lang", FAQ)
def test_every_section_links_to_another_page(lang):
    for anchor, text in sections(FAQ[lang]).items():
        pages = {link.split("#")[0] for link in LINK.findall(text)} - {"", FAQ["en"].name}
        assert pages, f"{FAQ[lang].name}#{anchor} links to no other page"


@pytest.mark.parametrize("lang", FAQ)
def test_every_link_lands_on_a_page_and_an_anchor(lang):
    for link in LINK.findall(prose(FAQ[lang])):
        path, _, anchor = link.partition("#")
        target = DOCS / path if path else FAQ["en"]  # `#t01`: a section of the FAQ itself
        assert target.is_file(), f"{FAQ[lang].name}: {link} points to no page under docs/"
        if lang == "zh":
            target = zh_twin(target)
        if anchor:
            assert anchor in anchors(target), f"{FAQ[lang].name}: {link}: no such anchor"


def test_both_languages_answer_alike():
    """Each question is answered under the same anchor in both languages, naming the same
    id, and its answer links the same pages and anchors: a reader who switches language
    lands on the same answer, with the same places to read on."""
    english, chinese = sections(FAQ["en"]), sections(FAQ["zh"])
    assert list(english) == list(chinese)
    for anchor, text in english.items():
        named = re.findall(r"\(`([QT]\d\d-[a-z0-9-]+)`\)", text)
        assert named == re.findall(r"（`([QT]\d\d-[a-z0-9-]+)`）", chinese[anchor]), anchor
        assert sorted(set(LINK.findall(text))) == sorted(set(LINK.findall(chinese[anchor]))), (
            f"#{anchor}: the two languages link different pages or anchors"
        )


QUESTION = {"en": "**Question**", "zh": "**问题**"}
FULL_SECTION = {"en": "**Full section:**", "zh": "**完整章节：**"}
# Dots that end no sentence: abbreviations, and whatever sits inside backticks.
ABBREVIATION = re.compile(r"\b(?:e\.g|i\.e|vs|etc|cf|al)\.", re.I)
SENTENCE_END = re.compile(r"[.?!](?=\s|$)|[。？！]")


def sentence_count(text: str) -> int:
    text = ABBREVIATION.sub("", re.sub(r"`[^`]*`", "", text))
    return len(SENTENCE_END.findall(text.strip()))


def verdict_problem(text: str, lang: str) -> str | None:
    """What is wrong with the opening of one FAQ section, or None."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    starts = [i for i, p in enumerate(paragraphs) if p.startswith(QUESTION[lang])]
    if len(starts) != 1 or starts[0] + 1 >= len(paragraphs):
        return f"no single {QUESTION[lang]} paragraph followed by an answer"
    verdict = paragraphs[starts[0] + 1]
    # One bold span that opens the paragraph. English bolds the whole verdict; Chinese bolds
    # its lead clause only, since a 200-character bold block reads as shouting in Chinese.
    if not (verdict.startswith("**") and verdict.count("**") == 2):
        return f"the answer does not open with one bold verdict: {verdict[:60]!r}"
    if lang == "en" and not verdict.endswith("**"):
        return f"the verdict is not bold to its end: {verdict[-60:]!r}"
    if (n := sentence_count(verdict.replace("**", ""))) > 2:
        return f"the verdict has {n} sentences"
    rest = text.split(verdict, 1)[1]
    if FULL_SECTION[lang] not in rest:
        return f"no {FULL_SECTION[lang]} line after the verdict"
    bullets = re.findall(r"^- ", rest.split(FULL_SECTION[lang], 1)[0], flags=re.M)
    if len(bullets) < 3:
        return f"{len(bullets)} bullets between the verdict and {FULL_SECTION[lang]}"
    return None


@pytest.mark.parametrize("lang", FAQ)
def test_every_answer_starts_with_a_bold_verdict(lang):
    """A reader sees the answer first: one bold verdict, then the facts as bullets."""
    problems = [
        f"{anchor}: {problem}"
        for anchor, text in sections(FAQ[lang]).items()
        if (problem := verdict_problem(text, lang))
    ]
    assert not problems, f"{FAQ[lang].name}: {len(problems)} answers fail:\n" + "\n".join(problems)
