"""A ``txnmodel verify`` run on the terminal: the verdicts that are not ok with their
counterexamples, the table of verdicts per checker, the files written and what each transactional
check had to judge (:func:`print_report`, :func:`applicability_lines`); and the same run as JSON
(:func:`history_results`, :meth:`Summary.to_json`).  :mod:`runners.verdicts` writes the files;
this module only renders what they hold.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from invariants.verify import Outcome, VerdictRow, worst
from views.report import counterexample_stem

__all__ = ["Summary", "applicability_lines", "history_results", "print_report", "summarize"]


@dataclass
class Summary:
    """A run's figures: histories, operations, wall seconds and each checker's count of each verdict."""

    histories: int = 0
    ops: int = 0
    seconds: float = 0.0
    by_checker: dict[str, Counter[str]] = field(default_factory=dict)

    def table(self) -> str:
        lines = [f"{'checker':<16} {'ok':>6} {'illegal':>8} {'unknown':>8} {'error':>6} {'bad-input':>10}"]
        for checker, counts in sorted(self.by_checker.items()):
            lines.append(
                f"{checker:<16} {counts['ok']:>6} {counts['illegal']:>8} {counts['unknown']:>8} "
                f"{counts['error']:>6} {counts['bad-input']:>10}"
            )
        lines.append(f"{self.histories} histories, {self.ops} operations, {self.seconds:.1f}s")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "histories": self.histories,
            "operations": self.ops,
            "seconds": round(self.seconds, 3),
            "verdicts": {k: dict(v) for k, v in self.by_checker.items()},
        }


def summarize(rows: Sequence[VerdictRow], seconds: float) -> Summary:
    """The figures of ``rows`` (a history's operations counted once, however many checkers judged it)."""
    summary = Summary(seconds=seconds)
    ops: dict[str, int] = {}
    for row in rows:
        summary.by_checker.setdefault(row.checker, Counter())[row.verdict] += 1
        ops[row.history] = max(ops.get(row.history, 0), row.ops)
    summary.histories = len(ops)
    summary.ops = sum(ops.values())
    return summary


def history_results(rows: Sequence[VerdictRow]) -> list[dict[str, Any]]:
    """One result per history: its name, overall verdict, and each checker's verdict."""
    grouped: dict[str, list[VerdictRow]] = {}
    for row in rows:
        grouped.setdefault(row.history, []).append(row)
    return [
        {
            "history": history,
            "verdict": worst(r.verdict for r in mine).value,
            "seed": next((r.seed for r in mine if r.seed is not None), None),
            "file": mine[0].file,
            "checkers": {r.checker: r.to_json() for r in mine},
        }
        for history, mine in sorted(grouped.items())
    ]


def print_report(
    rows: Iterable[VerdictRow], summary: Summary, out: Path, written: Sequence[Path] = (), max_shown: int = 10
) -> None:
    """The verdicts that are not ok (at most ``max_shown``, each with its counterexample cut at 40
    lines or its reason; every cut says what it left out and where the rest is), the summary table,
    then every file written: each counterexample, the verdicts and the index."""
    bad = [r for r in rows if r.verdict != Outcome.OK]
    pages = {path.stem: path for path in written if path.suffix == ".txt"}
    for row in bad[:max_shown]:
        seed = f" (seed {row.seed})" if row.seed is not None else ""
        print(f"{row.verdict.upper()} {row.history} [{row.checker}]{seed}")
        if row.counterexample:
            lines = row.counterexample.splitlines()
            print("\n".join("    " + line for line in lines[:40]))
            if len(lines) > 40:
                where = pages.get(counterexample_stem(row), out / "counterexamples")
                print(f"    ... {len(lines) - 40} more lines not shown: the whole counterexample is in {where}")
        elif row.detail:
            cut = f" ... ({len(row.detail) - 500} more characters in {out / 'verdicts.parquet'})"
            print(f"    {row.detail[:500]}" + (cut if len(row.detail) > 500 else ""))
    if len(bad) > max_shown:
        print(f"... {len(bad) - max_shown} more verdicts that are not ok, not shown: see {out / 'index.html'}")
    print(summary.table())
    for path in written:
        print(f"counterexample: {path}")
    print(f"verdicts: {out / 'verdicts.parquet'}")
    print(f"index of every verdict: {out / 'index.html'}")


def applicability_lines(rows: Iterable[VerdictRow]) -> list[str]:
    """Per transactional check, in how many histories it had something to judge
    (:mod:`invariants.applicability`); a check that applied to none is named as such, so that its
    silence is not read as a pass."""
    applied: Counter[str] = Counter()
    order: list[str] = []
    judged = 0
    for row in rows:
        if row.checker != "transactional" or not row.detail.startswith("{"):
            continue
        found = json.loads(row.detail).get("applicability")
        if not found:
            continue
        judged += 1
        for check, statement in found.items():
            if check not in order:
                order.append(check)
            applied[check] += bool(statement["applies"])
    if not judged:
        return []
    lines = [f"checks that had something to judge (of {judged} histories with client operations):"]
    lines.append("  " + ", ".join(f"{check} {applied[check]}" for check in order))
    absent = [check for check in order if not applied[check]]
    if absent:
        lines.append("  nothing to judge in any history (not a pass): " + ", ".join(absent))
    return lines
