"""tools/mutants.py: which mutants it does not run because no test could tell them apart.

In a module with ``from __future__ import annotations``, annotations are strings that are
never evaluated, so a mutant inside one (``Dispatch | dict`` made ``Dispatch % dict``) always
survives: 15 of the 27 survivors of a ``nox -s mutants`` run (30 November 2026) were such,
before they were set apart.
"""

from __future__ import annotations

import ast

from mutants import annotation_spans, in_annotation

MODULE = """\
from __future__ import annotations


def register(mode: Mode | dict = Mode.ALL, blocking: bool = True) -> Callable | None:
    size: int | None = None
    return mode | blocking
"""


def position(
    source: str, text: str, line: int, last: bool = False
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Where ``text`` occurs on line ``line`` (from 1), first or ``last``: cosmic-ray's
    (start, end), columns from 0."""
    found = source.splitlines()[line - 1]
    column = found.rindex(text) if last else found.index(text)
    return (line, column), (line, column + len(text))


def test_a_mutant_inside_an_annotation_is_found_and_one_in_the_code_is_not():
    spans = annotation_spans(MODULE)
    # the `|` of each annotation: a parameter's, the return's, an annotated assignment's
    assert in_annotation(spans, *position(MODULE, "|", 4))
    assert in_annotation(spans, *position(MODULE, "|", 4, last=True))
    assert in_annotation(spans, *position(MODULE, "|", 5))
    # the code: a default value, the assigned value, the returned expression
    assert not in_annotation(spans, *position(MODULE, "Mode.ALL", 4))
    assert not in_annotation(spans, *position(MODULE, "True", 4))
    assert not in_annotation(spans, *position(MODULE, "None", 5, last=True))
    assert not in_annotation(spans, *position(MODULE, "|", 6))


def test_annotations_count_only_where_they_are_never_evaluated():
    # Without the __future__ import, `Mode | dict` runs when the function is defined: a
    # mutant there can fail the import, so it is run like any other.
    evaluated = MODULE.replace("from __future__ import annotations\n", "")
    assert annotation_spans(evaluated) == []
    ast.parse(evaluated)  # still a module
