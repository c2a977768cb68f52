"""Prints how many veRL and Ray citations the run checked, one line per language."""

from __future__ import annotations

from collections import Counter

from tests.upstream.citations import cited_sources, language, scan


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput") or not any(
        "test_citations" in r.nodeid
        for rs in terminalreporter.stats.values()
        for r in rs
        if hasattr(r, "nodeid")
    ):
        return
    counts: Counter = Counter()
    for source in cited_sources():
        for citation in scan(source):
            counts[language(source), citation.upstream, citation.problem is None] += 1
    terminalreporter.write_sep("=", "citations of veRL 0.9.1 and Ray 2.60.0")
    for where in ("en", "zh", "reference_impl"):
        for upstream in ("verl", "ray"):
            ok, bad = counts[where, upstream, True], counts[where, upstream, False]
            terminalreporter.write_line(
                f"{upstream} citations checked, {where}: {ok + bad} ({bad} unresolved)"
            )
