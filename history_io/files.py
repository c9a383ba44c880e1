"""Reading and writing histories: Parquet and JSON Lines (the contract is :mod:`spec.history`).

Every reader returns ``{history id: [Operation, ...]}`` with each history's operations sorted by
``index`` and checked by :func:`spec.history.validate_history`.  Anything that breaks the contract
raises :class:`spec.history.BadHistory` (an :class:`spec.errors.InputError`) naming the file, the
row (0-based, counted over the whole file) and the field; nothing is skipped silently.

Readers **stream**: :func:`iter_histories` yields one history at a time, each as soon as its last
row has been read, so memory holds one Parquet row group (columnar) and the histories it leaves
open, never a whole file's operations as Python objects.  Every input is bounded before it is
parsed: a regular file (a FIFO or a device is refused, not waited on), Parquet row groups of at most
:data:`MAX_ROW_GROUP_BYTES` uncompressed, JSON Lines lines of at most :data:`MAX_JSONL_LINE_BYTES`,
JSON nested at most ``spec.history.MAX_VALUE_DEPTH`` deep; damage inside a Parquet page or a line is
a :class:`spec.history.BadHistory` with the row group, row or byte offset.

A file may carry **run metadata** (how the histories were made: the simulator's run configuration and
the faults it injected), a JSON object given to the writers' ``metadata=`` parameter: in a Parquet
file it is the schema's key-value metadata under ``txnmodel.run``; a JSON Lines file gets a sidecar
``<file>.meta.json`` (a header line would be a row to every other JSON Lines reader).
:func:`read_metadata` reads and checks it; a malformed one raises :class:`BadMetadata`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from history_io.inputs import open_input, printable
from spec.config import Config
from spec.errors import BadConfig
from spec.history import (
    FIELDS,
    MAX_NUMBER_DIGITS,
    MAX_VALUE_DEPTH,
    PARQUET_COLUMNS,
    SCHEMA_VERSION,
    BadHistory,
    Operation,
    OpType,
    validate_history,
)
from spec.json_limits import first_excess

__all__ = [
    "FORMATS",
    "METADATA_KEY",
    "BadMetadata",
    "arrow_schema",
    "group_histories",
    "history_files",
    "history_table",
    "iter_histories",
    "parquet_history_names",
    "parquet_rows",
    "read_file",
    "read_jsonl",
    "read_metadata",
    "read_parquet",
    "run_config",
    "write_jsonl",
    "write_parquet",
    "write_parquet_tables",
]

FORMATS = ("parquet", "jsonl", "jepsen", "edn")
#: The largest Parquet row group read, uncompressed (a 64-history file of the simulator is 29 MB).
MAX_ROW_GROUP_BYTES = 1024 * 1024 * 1024
#: Rows per row group the writer makes (about 4 MB uncompressed for engine histories).
ROW_GROUP_ROWS = 32_768
#: The longest JSON Lines line (one operation; the engine's longest is a few kB).
MAX_JSONL_LINE_BYTES = 16 * 1024 * 1024
_SUFFIXES = {"parquet": (".parquet",), "jsonl": (".jsonl", ".ndjson"), "jepsen": (".log",), "edn": (".edn",)}
METADATA_KEY = "txnmodel.run"
_METADATA_VERSION = 1
_SIDECAR = ".meta.json"


class BadMetadata(BadHistory):
    """A history file's run metadata is not what :func:`read_metadata` documents; names the file and the field."""


def arrow_schema() -> Any:
    """The pyarrow schema of a history file, built from :data:`spec.history.PARQUET_COLUMNS`."""
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64()}
    return pa.schema(
        [pa.field(name, types[kind], nullable=nullable) for name, kind, nullable in PARQUET_COLUMNS],
        metadata={b"txnmodel.history.schema_version": str(SCHEMA_VERSION).encode()},
    )


def history_files(path: str | Path, fmt: str) -> list[Path]:
    """The files a ``verify PATH`` names: PATH itself, or every file of the format under it, sorted.

    Anything named like a history file that is not a folder is listed, whatever it is (a regular
    file, a FIFO, a device, a link that loops or leads nowhere), so that its reader refuses it by
    name (:func:`history_io.inputs.open_input`) rather than it being skipped unseen."""
    if fmt not in FORMATS:
        raise BadHistory(f"unknown format {fmt!r}; formats are {', '.join(FORMATS)}", where=printable(path))
    root = Path(path)
    if os.path.lexists(root) and not root.is_dir():
        return [root]  # a regular file, or something its reader refuses by name (a FIFO, a link loop)
    if not root.is_dir():
        raise BadHistory("no such file or folder", where=printable(root))
    files = sorted(
        p
        for p in root.rglob("*")
        if p.name.endswith(_SUFFIXES[fmt])
        and not p.is_dir()
        and not any(part.startswith((".", "_")) for part in p.relative_to(root).parts)
    )
    if not files:
        raise BadHistory(f"no {fmt} files (*{', *'.join(_SUFFIXES[fmt])}) under this folder", where=printable(root))
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


def read_parquet(path: str | Path, histories: Collection[str] | None = None) -> dict[str, list[Operation]]:
    """Read one Parquet history file (any number of histories; with ``histories``, only those)."""
    return dict(iter_parquet_histories(path, histories))


def parquet_rows(path: str | Path) -> int:
    """How many rows a Parquet file holds, from its footer alone (0 for a file that is not one: its
    reader says why)."""
    try:
        with _ParquetInput(path) as source:
            return sum(source.rows)
    except BadHistory:
        return 0


def parquet_history_names(path: str | Path) -> list[str]:
    """The histories a Parquet file holds, sorted, reading only the ``history`` column (cheap: the
    bulk job splits a large file into tasks by history without reading the rest)."""

    names: set[str] = set()
    with _ParquetInput(path) as source:
        for group in range(source.groups):
            names.update(name for name in source.names(group) if name is not None)
    return sorted(names)


class _ParquetInput:
    """One Parquet history file, opened, schema-checked and bounded: row groups read one at a time,
    damage inside a page a :class:`BadHistory` naming the row group."""

    def __init__(self, path: str | Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.where = printable(path)
        self._handle = open_input(path)
        try:
            self._file = pq.ParquetFile(self._handle, page_checksum_verification=True)
            schema = self._file.schema_arrow
            meta = self._file.metadata
        except (OSError, pa.ArrowException, UnicodeDecodeError, ValueError) as exc:  # damaged footer or schema
            self._handle.close()
            raise BadHistory(f"not a readable Parquet file: {type(exc).__name__}: {exc}", where=self.where) from None
        except BaseException:
            self._handle.close()
            raise
        self.groups = meta.num_row_groups
        self.rows = [meta.row_group(group).num_rows for group in range(self.groups)]
        self.starts: list[int] = []
        row = 0
        for group in range(self.groups):
            info = meta.row_group(group)
            if info.total_byte_size > MAX_ROW_GROUP_BYTES:
                self._handle.close()
                raise BadHistory(
                    f"row group {group} holds {info.total_byte_size:,} bytes uncompressed, over the limit of "
                    f"{MAX_ROW_GROUP_BYTES:,} (MAX_ROW_GROUP_BYTES)",
                    where=self.where,
                )
            self.starts.append(row)
            row += info.num_rows
        try:
            self.columns = _check_parquet_schema(schema, self.where)
        except BaseException:
            self._handle.close()
            raise

    def __enter__(self) -> _ParquetInput:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()

    def read(self, group: int, columns: Sequence[str] | None = None) -> Any:
        import pyarrow as pa

        try:
            return self._file.read_row_group(group, columns=list(columns) if columns is not None else None)
        except (OSError, pa.ArrowException, UnicodeDecodeError, ValueError) as exc:
            raise self.damaged(group, exc) from None

    def damaged(self, group: int, exc: Exception) -> BadHistory:
        """Bytes of a page that decode to nothing valid (a flipped byte inside a string, say)."""
        return BadHistory(
            f"damaged Parquet data in row group {group} (rows from {self.starts[group]}): {type(exc).__name__}: {exc}",
            where=self.where,
        )

    def names(self, group: int) -> list[str | None]:
        """The ``history`` value of every row of one row group."""
        import pyarrow as pa

        column = self.read(group, ["history"]).column("history")
        try:
            return column.to_pylist()  # type: ignore[no-any-return]
        except (pa.ArrowException, UnicodeDecodeError) as exc:
            raise self.damaged(group, exc) from None


def _check_parquet_schema(schema: Any, where: str) -> set[str]:
    """The file's columns, checked against the contract's (missing, unknown, wrong type)."""
    import pyarrow as pa

    names = set(schema.names)
    twice = sorted(name for name in names if schema.names.count(name) > 1)
    if twice:
        raise BadHistory(
            f"column(s) {', '.join(twice)} appear more than once; expected each column once",
            where=where,
            column=twice[0],
        )
    missing = [name for name, _, nullable in PARQUET_COLUMNS if name not in names and not nullable]
    if missing:
        raise BadHistory(f"missing column(s) {', '.join(missing)}", where=where, column=missing[0])
    unknown = sorted(names - set(FIELDS))
    if unknown:
        raise BadHistory(f"unknown column(s) {', '.join(unknown)}", where=where, column=unknown[0])
    expected = arrow_schema()
    for name in (n for n in FIELDS if n in names):
        want = expected.field(name).type
        got = schema.field(name).type
        if (
            got != want
            and not (pa.types.is_integer(want) and pa.types.is_integer(got))
            and not (pa.types.is_string(want) and (pa.types.is_large_string(got) or pa.types.is_dictionary(got)))
            and not pa.types.is_null(got)
        ):  # a column with no value at all (every seed null, say)
            raise BadHistory(f"column has type {got}, the schema says {want}", where=where, column=name)
    return names


def _operations(table: Any, rows: Sequence[int], where: str) -> list[Operation]:
    """``table``'s rows as operations; ``rows`` are their row numbers in the file (for errors)."""
    import pyarrow as pa

    names = set(table.column_names)
    # The file's column types were checked as a whole: when no required value is missing and every
    # integer column is a signed 64-bit-or-narrower one, each row needs only the checks of its
    # values (Operation.from_typed), column by column without a dict per row.
    typed = all(name in names or nullable for name, _, nullable in PARQUET_COLUMNS) and not any(
        name in names
        and (
            (not nullable and table.column(name).null_count)
            or (
                kind == "int64"
                and pa.types.is_integer(table.schema.field(name).type)
                and not pa.types.is_signed_integer(table.schema.field(name).type)
            )
        )
        for name, kind, nullable in PARQUET_COLUMNS
    )
    try:
        if typed:
            nulls = [None] * table.num_rows
            values = [table.column(name).to_pylist() if name in names else nulls for name in FIELDS]
        else:
            records = table.to_pylist()
    except (pa.ArrowException, UnicodeDecodeError) as exc:
        raise BadHistory(
            f"damaged Parquet data (rows {min(rows)}..{max(rows)}): {type(exc).__name__}: {exc}", where=where
        ) from None
    if typed:
        return [
            Operation.from_typed(*fields, where=where, row_number=row)
            for fields, row in zip(zip(*values, strict=True), rows, strict=True)
        ]
    return [Operation.from_row(record, where=where, row_number=row) for record, row in zip(records, rows, strict=True)]


def iter_parquet_histories(
    path: str | Path, histories: Collection[str] | None = None, rows_read: Callable[[int], None] | None = None
) -> Iterator[tuple[str, list[Operation]]]:
    """The histories of a Parquet file, one at a time, each sorted by index and validated; with
    ``histories``, only those (filtered in Arrow before any row becomes Python).  ``rows_read`` is
    told how many rows each row group held once it was read (progress inside a large file).

    A first pass reads only the ``history`` column to learn in which row group each history ends;
    the second reads one row group at a time, sorts it by history in Arrow, turns one history's rows
    into operations at a time, and yields a history as soon as its last row group has been read."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = None if histories is None else pa.array(sorted(histories), type=pa.string())
    with _ParquetInput(path) as source:
        ends: dict[str, int] = {}
        for group in range(source.groups):
            for name in source.names(group):
                if name is not None:
                    ends[name] = group
        pending: dict[str, list[Operation]] = {}
        for group in range(source.groups):
            table = source.read(group)
            rows = pa.array(range(source.starts[group], source.starts[group] + table.num_rows), type=pa.int64())
            history = table.column("history")
            if history.null_count:  # the first such row says what is wrong with it
                first = pc.indices_nonzero(pc.is_null(history))[0].as_py()
                _operations(table.slice(first, 1), [rows[first].as_py()], source.where)
            if wanted is not None:
                mask = pc.is_in(history, value_set=wanted)
                table, rows = table.filter(mask), rows.filter(mask)
            if rows_read is not None:
                rows_read(table.num_rows)
            if table.num_rows == 0:
                continue
            order = pc.sort_indices(table.column("history"))  # stable: file order within a history
            table, rows = table.take(order), rows.take(order)
            names = table.column("history")
            changes = pc.indices_nonzero(pc.not_equal(names.slice(1), names.slice(0, len(names) - 1))).to_pylist()
            bounds = [0, *(i + 1 for i in changes), table.num_rows]
            for start, stop in itertools.pairwise(bounds):
                try:
                    name = names[start].as_py()
                except (pa.ArrowException, UnicodeDecodeError) as exc:
                    raise source.damaged(group, exc) from None
                part = _operations(
                    table.slice(start, stop - start), rows.slice(start, stop - start).to_pylist(), source.where
                )
                pending.setdefault(name, []).extend(part)
                if ends[name] == group:
                    yield name, _finished(pending.pop(name), source.where)


def _finished(ops: list[Operation], where: str) -> list[Operation]:
    ops.sort(key=lambda o: o.index)
    validate_history(ops, where=where)
    return ops


def iter_parquet(path: str | Path, histories: Collection[str] | None = None) -> Iterator[Operation]:
    """The rows of a Parquet file as operations in file order, type-checked row by row, one row
    group at a time; with ``histories``, only the rows of those histories."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = None if histories is None else pa.array(sorted(histories), type=pa.string())
    with _ParquetInput(path) as source:
        for group in range(source.groups):
            table = source.read(group)
            rows = list(range(source.starts[group], source.starts[group] + table.num_rows))
            if wanted is not None:
                mask = pc.is_in(table.column("history"), value_set=wanted)
                rows = pc.indices_nonzero(mask).to_pylist()
                rows = [source.starts[group] + row for row in rows]
                table = table.filter(mask)
            if table.num_rows:
                yield from _operations(table, rows, source.where)


def read_jsonl(path: str | Path) -> dict[str, list[Operation]]:
    """Read one JSON Lines history file: one JSON object per line with the contract's columns."""
    return dict(iter_jsonl_histories(path))


def _jsonl_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row, JSON object) for each non-blank line, bounded and decoded; damage names the row and
    its byte offset."""
    where = printable(path)
    with open_input(path) as handle:
        offset = 0
        row = -1
        while True:
            line = handle.readline(MAX_JSONL_LINE_BYTES + 1)
            if not line:
                return
            row += 1
            start, offset = offset, offset + len(line)
            if len(line) > MAX_JSONL_LINE_BYTES and not line.endswith(b"\n"):
                raise BadHistory(
                    f"a line longer than {MAX_JSONL_LINE_BYTES:,} bytes (MAX_JSONL_LINE_BYTES), "
                    f"from byte offset {start}",
                    where=where,
                    row=row,
                )
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadHistory(
                    f"not UTF-8 text: byte 0x{line[exc.start]:02x} at byte offset {start + exc.start}",
                    where=where,
                    row=row,
                ) from None
            if not text.strip():
                continue
            excess = first_excess(text, max_depth=MAX_VALUE_DEPTH, max_digits=MAX_NUMBER_DIGITS)
            if excess is not None:
                at = start + len(text[: excess[1]].encode("utf-8"))
                limit = "MAX_VALUE_DEPTH" if excess[0].startswith("nested") else "MAX_NUMBER_DIGITS"
                raise BadHistory(f"JSON {excess[0]} at byte offset {at} (limit {limit})", where=where, row=row)
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                at = start + len(text[: exc.pos].encode("utf-8"))
                what = exc.msg.removesuffix(" at")  # "Invalid control character at", "... starting at"
                raise BadHistory(f"not JSON: {what} at byte offset {at}", where=where, row=row) from None
            if not isinstance(record, dict):
                raise BadHistory(f"expected a JSON object, got {type(record).__name__}", where=where, row=row)
            yield row, record


def iter_jsonl(path: str | Path) -> Iterator[Operation]:
    """The lines of a JSON Lines file as operations, in file order."""
    for row, record in _jsonl_records(path):
        yield Operation.from_row(record, where=printable(path), row_number=row)


def iter_jsonl_histories(path: str | Path) -> Iterator[tuple[str, list[Operation]]]:
    """The histories of a JSON Lines file, one at a time (each as soon as its last line is read),
    sorted by index and validated.  A first pass notes the line each history ends on."""
    ends: dict[object, int] = {}
    for row, record in _jsonl_records(path):
        ends[record.get("history")] = row
    pending: dict[str, list[Operation]] = {}
    for row, record in _jsonl_records(path):
        op = Operation.from_row(record, where=printable(path), row_number=row)
        pending.setdefault(op.history, []).append(op)
        if ends.get(op.history) == row:
            yield op.history, _finished(pending.pop(op.history), printable(path))


def iter_histories(
    path: str | Path,
    fmt: str,
    histories: Collection[str] | None = None,
    rows_read: Callable[[int], None] | None = None,
) -> Iterator[tuple[str, list[Operation]]]:
    """The histories of one file of any supported format, one at a time (``histories``: only those,
    Parquet only); each sorted by index and validated.  ``rows_read``: see
    :func:`iter_parquet_histories` (Parquet only)."""
    if fmt == "parquet":
        yield from iter_parquet_histories(path, histories, rows_read)
        return
    if histories is not None:
        raise ValueError("reading a subset of histories is for Parquet files")
    if fmt == "jsonl":
        yield from iter_jsonl_histories(path)
    elif fmt == "jepsen":
        from history_io.jepsen import read_jepsen_log

        yield Path(path).stem, read_jepsen_log(path)  # an empty log is an empty history, not nothing
    elif fmt == "edn":
        from history_io.edn import read_edn

        # One Jepsen history may hold several independent keys: they are read together.
        yield from read_edn(path).items()
    else:
        raise BadHistory(f"unknown format {fmt!r}; formats are {', '.join(FORMATS)}", where=printable(path))


def read_file(path: str | Path, fmt: str, histories: Collection[str] | None = None) -> dict[str, list[Operation]]:
    """Read one file of any supported format (``histories``: only those, Parquet only)."""
    return dict(iter_histories(path, fmt, histories))


def _rows(histories: Mapping[str, Sequence[Operation]] | Sequence[Operation]) -> list[dict[str, Any]]:
    if isinstance(histories, Mapping):
        return [op.to_row() for ops in histories.values() for op in ops]
    return [op.to_row() for op in histories]


def _metadata_text(metadata: Mapping[str, Any], where: str) -> str:
    """Canonical JSON (sorted keys, no spaces): the same run gives the same bytes.  Checked as the reader
    checks it, so a writer never produces a file its reader refuses."""
    text = json.dumps(metadata, sort_keys=True, separators=(",", ":"))
    _check_metadata(json.loads(text), where)
    return text


def history_table(histories: Mapping[str, Sequence[Operation]] | Sequence[Operation]) -> Any:
    """Operations as a pyarrow table with :func:`arrow_schema` (no run metadata): what
    :func:`write_parquet` writes, built where the operations are (a worker process) so that only
    the table, cheap to pickle, travels."""
    import pyarrow as pa

    ops = [op for mine in histories.values() for op in mine] if isinstance(histories, Mapping) else histories
    # Column by column from the operations' fields (``to_row``'s columns, without a dict per row).
    columns: dict[str, list[Any]] = {name: [getattr(op, name) for op in ops] for name in FIELDS if name != "type"}
    columns["type"] = [_TYPE_VALUES[op.type] for op in ops]
    return pa.table({name: columns[name] for name in FIELDS}, schema=arrow_schema())


_TYPE_VALUES: Final = {op_type: op_type.value for op_type in OpType}


def write_parquet(
    path: str | Path,
    histories: Mapping[str, Sequence[Operation]] | Sequence[Operation],
    *,
    metadata: Mapping[str, Any] | None = None,
) -> None:
    """Write operations as one Parquet file with :func:`arrow_schema`; ``metadata`` (run metadata, see
    :func:`read_metadata`) goes into the schema's key-value metadata."""
    write_parquet_tables(path, [history_table(histories)], metadata=metadata)


def write_parquet_tables(path: str | Path, tables: Sequence[Any], *, metadata: Mapping[str, Any] | None = None) -> None:
    """Write :func:`history_table` tables, one after the other, as one Parquet file (the same file
    as :func:`write_parquet` of their operations)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema()
    if metadata is not None:
        schema = schema.with_metadata(
            {**schema.metadata, METADATA_KEY.encode(): _metadata_text(metadata, str(path)).encode()}
        )
    table = (pa.concat_tables(tables) if tables else schema.empty_table()).combine_chunks()
    table = table.replace_schema_metadata(schema.metadata)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    # Row groups of a bounded size, so a reader holds one small group at a time (see iter_histories).
    # Page checksums (CRC-32), so a damaged page is refused by the reader instead of decoding to
    # different, possibly valid, operations.
    with _replacing(path) as temporary:
        pq.write_table(table, temporary, row_group_size=ROW_GROUP_ROWS, write_page_checksum=True)


def write_jsonl(
    path: str | Path,
    histories: Mapping[str, Sequence[Operation]] | Sequence[Operation],
    *,
    metadata: Mapping[str, Any] | None = None,
) -> None:
    """Write operations as JSON Lines (null columns left out); ``metadata`` goes to the sidecar
    ``<path>.meta.json`` (an existing sidecar is removed when there is none, so it never describes
    another run)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sidecar = Path(str(path) + _SIDECAR)
    text = None if metadata is None else _metadata_text(metadata, str(sidecar))
    sidecar.unlink(missing_ok=True)  # it never describes another run, even if what follows fails
    with _replacing(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        for row in _rows(histories):
            handle.write(json.dumps({k: v for k, v in row.items() if v is not None}, separators=(",", ":")) + "\n")
    if text is not None:
        with _replacing(sidecar) as temporary:
            Path(temporary).write_text(text + "\n", encoding="utf-8")


@contextlib.contextmanager
def _replacing(path: str | Path) -> Iterator[str]:
    """A hidden temporary name beside ``path`` to write, renamed onto ``path`` once complete: a
    write that fails (a full disk, a file-size limit) leaves no half file a reader would take for a
    history, and an earlier file of that name stays as it was.  The failure names ``path``."""
    final = Path(path)
    temporary = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    try:
        yield str(temporary)
        os.replace(temporary, final)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        code = exc.errno or 0
        raise OSError(code, os.strerror(code) if code else str(exc), str(final)) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def read_metadata(path: str | Path) -> dict[str, Any] | None:
    """The run metadata of a history file, or None when it carries none (older files, Jepsen logs).

    The shape (checked; anything else raises :class:`BadMetadata`)::

        {"version": 1,
         "config": {broker.conf key: value, ...},   # overrides shared by every run of the file
         "runs": {history id: {"workload": str, "seed": int, "config": {...}, "fault_schedule":
                               [{"time_ms": int, "kind": str, "target": str}, ...], ...}, ...}}

    ``Config().with_overrides(metadata["config"])`` rebuilds the brokers' configuration
    (:func:`run_config`).  A run's other keys are the simulator's (``ledger``, ``batching``,
    ``fault_rates``, ``ops``, ``cut_at_deadline``, ``fault_counts``, ...) and are passed through.
    """
    where = printable(path)
    name = Path(path).name
    if name.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        with open_input(path) as handle:  # a regular file: a FIFO would block the schema read
            try:
                schema = pq.read_schema(handle)
            except (OSError, pa.ArrowException, UnicodeDecodeError, ValueError) as exc:
                raise BadHistory(f"not a readable Parquet file: {type(exc).__name__}: {exc}", where=where) from None
        raw = (schema.metadata or {}).get(METADATA_KEY.encode())
        if raw is None:
            return None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadMetadata(f"run metadata is not UTF-8: {exc.reason}", where=where, column=METADATA_KEY) from None
    elif name.endswith(_SUFFIXES["jsonl"]):
        sidecar = Path(where + _SIDECAR)
        if not sidecar.exists():
            if not Path(path).exists():
                raise BadHistory("no such file", where=where)
            return None
        where = str(sidecar)
        with open_input(sidecar) as handle:
            blob = handle.read(MAX_JSONL_LINE_BYTES + 1)
        if len(blob) > MAX_JSONL_LINE_BYTES:
            raise BadMetadata(f"run metadata over {MAX_JSONL_LINE_BYTES:,} bytes (MAX_JSONL_LINE_BYTES)", where=where)
        try:
            text = blob.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadMetadata(f"run metadata is not UTF-8: byte offset {exc.start}", where=where) from None
    else:
        return None
    excess = first_excess(text, max_depth=MAX_VALUE_DEPTH, max_digits=MAX_NUMBER_DIGITS)
    if excess is not None:
        raise BadMetadata(f"run metadata: JSON {excess[0]} at char {excess[1]}", where=where)
    try:
        metadata = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadMetadata(f"run metadata is not JSON: {exc.msg} at char {exc.pos}", where=where) from None
    return _check_metadata(metadata, where)


def run_config(metadata: Mapping[str, Any] | None) -> Config:
    """The brokers' configuration a file's histories ran with (Pulsar's defaults without metadata)."""
    if metadata is None:
        return Config()
    return Config().with_overrides(metadata["config"])


def _check_metadata(metadata: Any, where: str) -> dict[str, Any]:
    if not isinstance(metadata, dict):
        raise BadMetadata(f"run metadata must be a JSON object, got {type(metadata).__name__}", where=where)
    if metadata.get("version") != _METADATA_VERSION:
        raise BadMetadata(
            f"unknown run metadata version {metadata.get('version')!r} (this reader knows {_METADATA_VERSION})",
            where=where,
            column="version",
        )
    _check_config(metadata.get("config"), where, "config")
    runs = metadata.get("runs")
    if not isinstance(runs, dict):
        raise BadMetadata(f"'runs' must be an object of history id -> run, got {runs!r}", where=where, column="runs")
    for history, spec in runs.items():
        field = f"runs.{history}"
        if not isinstance(spec, dict):
            raise BadMetadata(f"a run must be an object, got {spec!r}", where=where, column=field)
        for key, kind in (("workload", str), ("seed", int), ("fault_schedule", list)):
            value = spec.get(key)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise BadMetadata(
                    f"needs {key!r} ({kind.__name__}), got {value!r}", where=where, column=f"{field}.{key}"
                )
        if "config" in spec:
            _check_config(spec["config"], where, f"{field}.config")
        for i, event in enumerate(spec["fault_schedule"]):
            if not (
                isinstance(event, dict)
                and isinstance(event.get("time_ms"), int)
                and not isinstance(event.get("time_ms"), bool)
                and isinstance(event.get("kind"), str)
                and isinstance(event.get("target"), str)
            ):
                raise BadMetadata(
                    f"a fault is {{time_ms: int, kind: str, target: str}}, got {event!r}",
                    where=where,
                    column=f"{field}.fault_schedule[{i}]",
                )
    return metadata


def _check_config(config: Any, where: str, field: str) -> None:
    if not isinstance(config, dict):
        raise BadMetadata(f"must be an object of broker.conf overrides, got {config!r}", where=where, column=field)
    try:
        Config().with_overrides(config)
    except (BadConfig, TypeError, ValueError) as exc:
        raise BadMetadata(f"not a valid broker.conf override: {exc}", where=where, column=field) from None
