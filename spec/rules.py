"""Read the numbered rules out of the rule pages (``spec/rules/*.md``).

A rule is a level-3 heading ``### <PREFIX>-<n>: <title>`` followed by its text.  The text must
cite a source (a seed section or a Pulsar class from a fact sheet) on a line starting
``Source:``; a deliberate difference from today's Pulsar is stated on a line starting
``Divergence:``.  ``tests/spec/test_rules.py`` checks the pages parse, ids are unique and
consecutive, and every id is traced to the reference, the invariants and the tests.  Parsing is
pure; the callers read the pages (``RULES_DIR`` says where they are).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RULES_DIR", "Rule", "parse_rules"]

RULES_DIR = Path(__file__).resolve().parent / "rules"
_HEADING = re.compile(r"^### (?P<id>(?P<prefix>[A-Z]{2})-(?P<n>\d+)): (?P<title>.+)$")


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    prefix: str
    number: int
    title: str
    text: str
    source: str | None
    divergence: str | None
    page: str


def parse_rules(text: str, page: str) -> tuple[Rule, ...]:
    """All rules of one rules page's markdown ``text`` (``spec/rules/<page>.md``), in page order."""
    rules: list[Rule] = []
    current: dict[str, str] | None = None
    body: list[str] = []

    def close() -> None:
        if current is None:
            return
        text = "\n".join(body).strip()
        rules.append(
            Rule(
                id=current["id"],
                prefix=current["prefix"],
                number=int(current["n"]),
                title=current["title"].strip(),
                text=text,
                source=_line_value(text, "Source:"),
                divergence=_line_value(text, "Divergence:"),
                page=page,
            )
        )

    for line in text.splitlines():
        match = _HEADING.match(line)
        if match:
            close()
            current = match.groupdict()
            body = []
        elif line.startswith("## ") or line.startswith("# "):
            close()
            current = None
            body = []
        elif current is not None:
            body.append(line)
    close()
    return tuple(rules)


def _line_value(text: str, label: str) -> str | None:
    for line in text.splitlines():
        stripped = line.strip().lstrip("-* ").replace("**", "")
        if stripped.startswith(label):
            return stripped[len(label) :].strip() or None
    return None
