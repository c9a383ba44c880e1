"""A ``txnmodel verify`` run on the terminal: the verdicts that are not ok with their
counterexamples, the table of verdicts per checker, the files written and what each transactional
check had to judge (:func:`print_report`, :func:`applicability_lines`); and the same run as JSON
(:func:`history_results`, :meth:`Summary.to_json`).  :mod:`runners.verdicts` writes the files;
this module only renders what they hold.
"""

from __future__ import annotations

import json
import textwrap
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
    """A run's figures: histories, operations (client and machine, each history's counted once),
    wall seconds and each checker's count of each verdict."""

    histories: int = 0
    ops: int = 0
    seconds: float = 0.0
    by_checker: dict[str, Counter[str]] = field(default_factory=dict)
    client_ops: int = 0
    machine_ops: int = 0

    def table(self) -> str:
        columns = ("ok", "skipped", "late", "illegal", "unknown", "error", "bad-input")
        lines = [f"{'checker':<16} " + " ".join(f"{c:>{max(6, len(c))}}" for c in columns)]
        for checker, counts in sorted(self.by_checker.items()):
            lines.append(f"{checker:<16} " + " ".join(f"{counts[c]:>{max(6, len(c))}}" for c in columns))
        machine = f" and {self.machine_ops:,} machine steps" if self.machine_ops else ""
        lines.append(
            f"{self.histories} histories, {self.ops:,} operations ({self.client_ops:,} client operations{machine}), "
            f"{self.seconds:.1f}s"
        )
        if any(counts["skipped"] for counts in self.by_checker.values()):
            lines.append("skipped: the checker had nothing to judge in the history (not a pass; see why below)")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "histories": self.histories,
            "operations": self.ops,
            "client_operations": self.client_ops,
            "machine_operations": self.machine_ops,
            "seconds": round(self.seconds, 3),
            "verdicts": {k: dict(v) for k, v in self.by_checker.items()},
        }


def summarize(rows: Sequence[VerdictRow], seconds: float) -> Summary:
    """The figures of ``rows``: each history's operations counted once, as the client operations its
    client checkers judged plus the machine steps its linearizability check judged (an engine
    history records both; a recorded one, client operations only)."""
    summary = Summary(seconds=seconds)
    client: dict[str, int] = {}
    machine: dict[str, int] = {}
    other: dict[str, int] = {}
    for row in rows:
        summary.by_checker.setdefault(row.checker, Counter())[row.verdict] += 1
        if row.checker in ("transactional", "delivery"):
            client[row.history] = max(client.get(row.history, 0), row.ops)
        elif row.checker == "linearizability":
            machine[row.history] = max(machine.get(row.history, 0), row.ops)
        else:
            other[row.history] = max(other.get(row.history, 0), row.ops)
    histories = set(client) | set(machine) | set(other)
    summary.histories = len(histories)
    # a history without client rows (a register history, say): its linearizability rows are its operations
    summary.client_ops = sum(client.values())
    summary.machine_ops = sum(n for h, n in machine.items() if h in client)
    summary.ops = summary.client_ops + summary.machine_ops
    summary.ops += sum(n for h, n in machine.items() if h not in client) + sum(
        n for h, n in other.items() if h not in client and h not in machine
    )
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
    lines or its reason; every cut says what it left out and where the rest is; a checker that had
    nothing to judge says why in one line), the summary table, then every file written: each
    counterexample, the verdicts and the index."""
    rows = list(rows)
    bad = [r for r in rows if r.verdict not in (Outcome.OK, Outcome.SKIPPED)]
    skipped = [r for r in rows if r.verdict == Outcome.SKIPPED]
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
    for row in skipped[:max_shown]:
        print(f"SKIPPED {row.history} [{row.checker}]: nothing to judge: {_why_skipped(row)}")
    if len(skipped) > max_shown:
        print(f"... {len(skipped) - max_shown} more checkers with nothing to judge: see {out / 'index.html'}")
    print(summary.table())
    for path in written:
        print(f"counterexample: {path}")
    print(f"verdicts: {out / 'verdicts.parquet'}")
    print(f"index of every verdict: {out / 'index.html'}")


def _why_skipped(row: VerdictRow) -> str:
    """Why a checker had nothing to judge: its checks' statements, the most common first."""
    try:
        found = json.loads(row.detail).get("applicability", {})
    except (json.JSONDecodeError, AttributeError):
        return row.detail[:200]
    why = Counter(str(s.get("evidence", "")) for s in found.values() if not s.get("applies"))
    return "; ".join(reason for reason, _ in why.most_common(2)) or "no check applied"


def applicability_lines(rows: Iterable[VerdictRow]) -> list[str]:
    """Per check, in how many histories it had something to judge (:mod:`invariants.applicability`:
    each client row states its own checks; the delivery oracle counts the cases each check judged);
    a check that judged nothing in any history is named as such, with why where a check said, so
    that its silence is not read as a pass."""
    applied: Counter[str] = Counter()
    reasons: dict[str, Counter[str]] = {}
    order: list[str] = []
    judged: set[str] = set()
    for row in rows:
        if row.checker not in ("transactional", "delivery") or not row.detail.startswith("{"):
            continue
        detail = json.loads(row.detail)
        statements: dict[str, dict[str, Any]] = dict(detail.get("applicability") or {})
        for check, n in (detail.get("judged") or {}).items():
            statements[check] = {"applies": n > 0, "evidence": "judged no case"}
        if not statements:
            continue
        judged.add(row.history)
        for check, statement in statements.items():
            if check not in order:
                order.append(check)
            applied[check] += bool(statement["applies"])
            if not statement["applies"]:
                reasons.setdefault(check, Counter())[str(statement.get("evidence", ""))] += 1
    if not judged:
        return []
    lines = [f"checks that had something to judge (of {len(judged)} histories with client operations):"]
    counted = ", ".join(f"{check} {applied[check]}" for check in order)
    lines += textwrap.wrap(counted, width=100, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)
    absent = [check for check in order if not applied[check]]
    if absent:
        lines.append("  nothing to judge in any history (not a pass):")
        for check in absent:
            why, n = reasons[check].most_common(1)[0]
            lines.append(
                f"    {check}: {why}"
                + (f" (and {len(reasons[check]) - 1} other reasons)" if len(reasons[check]) > 1 else "")
            )
    return lines
