"""Verdicts on disk and on the terminal: the Parquet table, counterexample pages, summaries and the
exit code of ``txnmodel verify``.

``OUT/verdicts.parquet`` is a Parquet dataset (a folder of part files, as Spark writes them: each
task writes its own part) with one row per (history, checker) and the columns
:data:`VERDICT_COLUMNS`; ``OUT/counterexamples/<history>.<checker>.{txt,html}`` holds one
explanation per verdict that has one.  ``pyarrow.parquet.read_table(OUT / "verdicts.parquet")``
and Spark's ``spark.read.parquet`` read the folder whole.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from invariants.verify import Outcome, VerdictRow, worst

__all__ = [
    "VERDICTS",
    "VERDICT_COLUMNS",
    "Summary",
    "applicability_lines",
    "clear_verdicts",
    "history_results",
    "print_report",
    "read_verdicts",
    "summarize",
    "write_index",
    "write_part",
    "write_verdicts",
]

VERDICT_COLUMNS = (
    ("history", "string"),
    ("checker", "string"),
    ("verdict", "string"),
    ("file", "string"),
    ("model", "string"),
    ("objects", "int64"),
    ("ops", "int64"),
    ("steps", "int64"),
    ("seconds", "float64"),
    ("failing_object", "string"),
    ("detail", "string"),
    ("counterexample", "string"),
    ("seed", "int64"),
    ("reproduce", "string"),
)


VERDICTS = "verdicts.parquet"  # a folder of Parquet part files, one per task that wrote verdicts
PAGES = "counterexamples"
INDEX = "index.html"


def clear_verdicts(out: Path) -> None:
    """Remove the verdicts, counterexample pages and index of an earlier run from ``out`` (nothing else)."""
    import shutil

    target = out / VERDICTS
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    if (out / PAGES).is_dir():
        shutil.rmtree(out / PAGES)
    if (out / INDEX).exists():
        (out / INDEX).unlink()


def write_part(out: Path, part: str, rows: Sequence[VerdictRow]) -> list[VerdictRow]:
    """Write ``rows`` where they belong: ``OUT/verdicts.parquet/part-<part>.parquet`` and each
    counterexample as ``OUT/counterexamples/<history>.<checker>.{txt,html}``.  What one Spark task
    (or the in-process run, per file) does with its verdicts; returns them without their HTML pages,
    which is all the driver needs to summarize."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = out / VERDICTS
    folder.mkdir(parents=True, exist_ok=True)
    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}
    schema = pa.schema([pa.field(name, types[kind]) for name, kind in VERDICT_COLUMNS])
    table = pa.table({name: [getattr(row, name) for row in rows] for name, _ in VERDICT_COLUMNS}, schema=schema)
    # written under a temporary name and renamed: a reader never sees half a part
    final = folder / f"part-{part}.parquet"
    partial = folder / f".part-{part}.{os.getpid()}.parquet.tmp"  # one per writer: no two share it
    pq.write_table(table, partial)
    partial.replace(final)
    pages = out / PAGES
    for row in rows:
        if row.counterexample is None:
            continue
        pages.mkdir(parents=True, exist_ok=True)
        stem = _stem(row)
        (pages / f"{stem}.txt").write_text(row.counterexample + "\n", encoding="utf-8")
        if row.html is not None:
            (pages / f"{stem}.html").write_text(row.html, encoding="utf-8")
    return [dataclasses.replace(row, html=None) if row.html is not None else row for row in rows]


def write_index(out: Path, rows: Sequence[VerdictRow]) -> list[Path]:
    """``OUT/index.html``: every verdict, each counterexample linked (:func:`views.page.index_page`),
    from the rows the tasks returned and the pages they wrote.  Returns the counterexample files."""
    from views.page import index_page

    pages = out / PAGES
    written: list[Path] = []
    listed = []
    for row in rows:
        entry = row.to_json()
        entry.pop("counterexample", None)
        if row.counterexample is not None:
            stem = _stem(row)
            for suffix in ("txt", "html"):
                if (pages / f"{stem}.{suffix}").exists():
                    written.append(pages / f"{stem}.{suffix}")
                    entry[suffix] = f"{PAGES}/{stem}.{suffix}"
        listed.append(entry)
    out.mkdir(parents=True, exist_ok=True)
    (out / INDEX).write_text(index_page(listed, title=f"txnmodel verify: {out}"), encoding="utf-8")
    return written


def write_verdicts(out: Path, rows: Sequence[VerdictRow]) -> list[Path]:
    """All of ``rows`` as the only part of ``OUT/verdicts.parquet`` (after clearing an earlier run),
    their counterexample pages and the index.  Returns the counterexample files written."""
    clear_verdicts(out)
    return write_index(out, write_part(out, "00000", rows))


def read_verdicts(out: Path) -> list[dict[str, Any]]:
    """Every verdict row under ``out``, as dicts (every part)."""
    import pyarrow.parquet as pq

    return list(pq.read_table(out / VERDICTS).to_pylist())


def _stem(row: VerdictRow) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{row.history}.{row.checker}")


@dataclass
class Summary:
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
                where = pages.get(_stem(row), out / "counterexamples")
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
    import json

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
