"""Verdicts on disk: the Parquet table, each counterexample's text and page, and the index of
``txnmodel verify`` (:mod:`views.summary` prints the report on the terminal).

``OUT/verdicts.parquet`` is a Parquet dataset (a folder of part files, as Spark writes them: each
task writes its own part) with one row per (history, checker) and the columns
:data:`VERDICT_COLUMNS`; ``OUT/counterexamples/<history>.<checker>.{txt,html}`` holds one
explanation per verdict that has one.  ``pyarrow.parquet.read_table(OUT / "verdicts.parquet")``
and Spark's ``spark.read.parquet`` read the folder whole.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from invariants.verify import VerdictRow
from views.report import counterexample_stem

__all__ = [
    "VERDICTS",
    "VERDICT_COLUMNS",
    "clear_verdicts",
    "read_verdicts",
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
        stem = counterexample_stem(row)
        (pages / f"{stem}.txt").write_text(row.counterexample + "\n", encoding="utf-8")
        if row.html is not None:
            (pages / f"{stem}.html").write_text(row.html, encoding="utf-8")
    return [dataclasses.replace(row, html=None) if row.html is not None else row for row in rows]


def write_index(out: Path, rows: Sequence[VerdictRow]) -> list[Path]:
    """``OUT/index.html``: every verdict, each counterexample linked (:func:`views.index.index_page`),
    from the rows the tasks returned and the pages they wrote.  Returns the counterexample files."""
    from views.index import index_page

    pages = out / PAGES
    written: list[Path] = []
    listed = []
    for row in rows:
        entry = row.to_json()
        entry.pop("counterexample", None)
        if row.counterexample is not None:
            stem = counterexample_stem(row)
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
