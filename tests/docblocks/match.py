"""Does what a block printed match what the page shows? One dialect for every kind of block.

The text a page shows under a python block (an ``output`` block), under a ``bash``
block, or under a ``$ command`` of a console block is a pattern:

* ``...`` inside a line matches any text (ids, timings, paths), across lines too;
* ``...`` alone on a line matches any number of lines, none included;
* ``<ip>`` matches an IPv4 address, ``<id>`` an id or a token, ``<n>`` a number.

Both sides are compared as a reader sees them (:func:`clean`): no colour codes, no
``2026-11-21 09:35:11,836\\tINFO scripts.py:1043 -- `` prefix (Ray's CLI writes it before
each line when its output is not a terminal), no trailing blanks, no blank lines around.
"""

from __future__ import annotations

import re

WILDCARD = "..."
PLACEHOLDERS = {
    "<ip>": r"\d{1,3}(?:\.\d{1,3}){3}",
    "<id>": r"[0-9A-Za-z_\-]+",
    "<n>": r"-?\d+(?:\.\d+)?",
}
PLACEHOLDER = re.compile("|".join(re.escape(p) for p in (WILDCARD, *PLACEHOLDERS)))
RAY_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\t[A-Z]+ \S+:\d+ -- ", re.M)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def clean(text: str) -> str:
    """What a reader sees: no colour codes, no Ray log prefixes, no trailing blanks."""
    text = RAY_LOG_PREFIX.sub("", ANSI.sub("", text))
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).strip("\n")


def matches(shown: str, printed: str) -> bool:
    """Does ``printed`` match the page's text ``shown``, with its wildcards and placeholders?

    >>> matches("started on <ip>:<n>", "started on 192.0.2.2:6379")
    True
    >>> matches("a\\n...\\nb", "a\\nb"), matches("a\\n...\\nb", "a\\nx\\ny\\nb")
    (True, True)
    >>> matches("took ... s", "took 0.25 s"), matches("41", "42")
    (True, False)
    """
    pattern = []
    for line in clean(shown).split("\n"):
        if line == WILDCARD:
            pattern.append("(?:.*?\n)?")
            continue
        position = 0
        for match in PLACEHOLDER.finditer(line):
            pattern.append(re.escape(line[position : match.start()]))
            pattern.append(".*?" if match[0] == WILDCARD else PLACEHOLDERS[match[0]])
            position = match.end()
        pattern.append(re.escape(line[position:]) + "\n")
    return re.fullmatch("".join(pattern), clean(printed) + "\n", flags=re.DOTALL) is not None
