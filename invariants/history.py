"""Reading and writing histories: Parquet and JSON Lines (the contract is :mod:`spec.history`).

Every reader returns ``{history id: [Operation, ...]}`` with each history's operations sorted by
``index`` and checked by :func:`spec.history.validate_history`.  Anything that breaks the contract
raises :class:`spec.history.BadHistory` (an :class:`spec.errors.InputError`) naming the file, the
row (0-based, counted over the whole file) and the field; nothing is skipped silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from spec.history import FIELDS, PARQUET_COLUMNS, BadHistory, Operation, validate_history

__all__ = [
    "FORMATS",
    "arrow_schema",
    "group_histories",
    "history_files",
    "read_file",
    "read_jsonl",
    "read_parquet",
    "write_jsonl",
    "write_parquet",
]

FORMATS = ("parquet", "jsonl", "jepsen")
_SUFFIXES = {"parquet": (".parquet",), "jsonl": (".jsonl", ".ndjson"), "jepsen": (".log",)}


def arrow_schema() -> Any:
    """The pyarrow schema of a history file, built from :data:`spec.history.PARQUET_COLUMNS`."""
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64()}
    return pa.schema([pa.field(name, types[kind], nullable=nullable) for name, kind, nullable in PARQUET_COLUMNS],
                     metadata={b"txnmodel.history.schema_version": b"1"})


def history_files(path: str | Path, fmt: str) -> list[Path]:
    """The files a ``verify PATH`` names: PATH itself, or every file of the format under it, sorted."""
    if fmt not in FORMATS:
        raise BadHistory(f"unknown format {fmt!r}; formats are {', '.join(FORMATS)}", where=str(path))
    root = Path(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise BadHistory("no such file or directory", where=str(root))
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(_SUFFIXES[fmt])
                   and not any(part.startswith((".", "_")) for part in p.relative_to(root).parts))
    if not files:
        raise BadHistory(f"no {fmt} files (*{', *'.join(_SUFFIXES[fmt])}) under this folder", where=str(root))
    return files


def group_histories(ops: Iterable[Operation], *, where: str | None = None) -> dict[str, list[Operation]]:
    """Group operations by history, sort each by index and validate it."""
    grouped: dict[str, list[Operation]] = {}
    for op in ops:
        grouped.setdefault(op.history, []).append(op)
    for history in grouped.values():
        history.sort(key=lambda o: o.index)
        validate_history(history, where=where)
    return grouped


def read_parquet(path: str | Path) -> dict[str, list[Operation]]:
    """Read one Parquet history file (any number of histories)."""
    return group_histories(iter_parquet(path), where=str(path))


def iter_parquet(path: str | Path) -> Iterator[Operation]:
    """The rows of a Parquet file as operations, type-checked row by row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = str(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise BadHistory(f"not a readable Parquet file: {exc}", where=where) from None
    names = set(table.column_names)
    missing = [name for name, _, nullable in PARQUET_COLUMNS if name not in names and not nullable]
    if missing:
        raise BadHistory(f"missing column(s) {', '.join(missing)}", where=where, column=missing[0])
    unknown = sorted(names - set(FIELDS))
    if unknown:
        raise BadHistory(f"unknown column(s) {', '.join(unknown)}", where=where, column=unknown[0])
    expected = arrow_schema()
    for name in (n for n in FIELDS if n in names):
        want = expected.field(name).type
        got = table.schema.field(name).type
        if got != want and not (pa.types.is_integer(want) and pa.types.is_integer(got)) and not (
                pa.types.is_string(want) and (pa.types.is_large_string(got) or pa.types.is_dictionary(got))) \
                and not pa.types.is_null(got):  # a column with no value at all (every seed null, say)
            raise BadHistory(f"column has type {got}, the schema says {want}", where=where, column=name)
    columns = {name: table.column(name).to_pylist() for name in names}
    for row in range(table.num_rows):
        record = {name: values[row] for name, values in columns.items()}
        yield Operation.from_row(record, where=where, row_number=row)


def read_jsonl(path: str | Path) -> dict[str, list[Operation]]:
    """Read one JSON Lines history file: one JSON object per line with the contract's columns."""
    return group_histories(iter_jsonl(path), where=str(path))


def iter_jsonl(path: str | Path) -> Iterator[Operation]:
    where = str(path)
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise BadHistory(f"cannot read: {exc.strerror}", where=where) from None
    with handle:
        row = -1
        try:
            for row, line in enumerate(handle):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BadHistory(f"not JSON: {exc.msg} at char {exc.pos}", where=where, row=row) from None
                if not isinstance(record, dict):
                    raise BadHistory(f"expected a JSON object, got {type(record).__name__}", where=where, row=row)
                yield Operation.from_row(record, where=where, row_number=row)
        except UnicodeDecodeError as exc:
            raise BadHistory(f"not UTF-8 text: {exc.reason}", where=where, row=row + 1) from None


def read_file(path: str | Path, fmt: str) -> dict[str, list[Operation]]:
    """Read one file of any supported format."""
    if fmt == "parquet":
        return read_parquet(path)
    if fmt == "jsonl":
        return read_jsonl(path)
    if fmt == "jepsen":
        from invariants.jepsen import read_jepsen_log

        ops = read_jepsen_log(path)
        return {Path(path).stem: ops}  # an empty log is an empty history, not nothing
    raise BadHistory(f"unknown format {fmt!r}; formats are {', '.join(FORMATS)}", where=str(path))


def _rows(histories: Mapping[str, Sequence[Operation]] | Sequence[Operation]) -> list[dict[str, Any]]:
    if isinstance(histories, Mapping):
        return [op.to_row() for ops in histories.values() for op in ops]
    return [op.to_row() for op in histories]


def write_parquet(path: str | Path, histories: Mapping[str, Sequence[Operation]] | Sequence[Operation]) -> None:
    """Write operations as one Parquet file with :func:`arrow_schema`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _rows(histories)
    schema = arrow_schema()
    table = pa.table({name: [row[name] for row in rows] for name in FIELDS}, schema=schema)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def write_jsonl(path: str | Path, histories: Mapping[str, Sequence[Operation]] | Sequence[Operation]) -> None:
    """Write operations as JSON Lines (null columns left out)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for row in _rows(histories):
            handle.write(json.dumps({k: v for k, v in row.items() if v is not None}, separators=(",", ":")) + "\n")
