"""The summary's applicability lines: every check counted, none of them lost to wrapping, no line
wider than a terminal."""

from __future__ import annotations

import json

from invariants.verify import VerdictRow
from views.summary import applicability_lines


def row(history: str, checks: dict[str, bool]) -> VerdictRow:
    applicability = {
        check: {"applies": applies, "evidence": f"no case for {check}"} for check, applies in checks.items()
    }
    return VerdictRow(
        history, "delivery", "ok", f"{history}.jsonl", detail=json.dumps({"applicability": applicability})
    )


def test_many_checks_wrap_to_short_lines_and_keep_every_count() -> None:
    checks = {f"check-number-{i}": i % 5 != 0 for i in range(40)}
    lines = applicability_lines([row("h1", checks), row("h2", checks)])
    assert lines[0].startswith("checks that had something to judge (of 2 histories")
    assert all(len(line) <= 100 for line in lines)
    counted = " ".join(lines[1:]).split("nothing to judge in any history")[0]
    for check, applies in checks.items():
        # a hyphenated name is never split across lines
        assert f"{check} {2 if applies else 0}" in counted
    absent = [line.strip() for line in lines if line.startswith("    ")]
    assert absent == [f"{check}: no case for {check}" for check, applies in checks.items() if not applies]


def test_no_client_rows_no_lines() -> None:
    assert applicability_lines([VerdictRow("h", "linearizability", "ok", "h.jsonl")]) == []
