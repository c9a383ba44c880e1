"""Reading and writing histories: Parquet and JSON Lines (the contract is :mod:`spec.history`).

Every reader returns ``{history id: [Operation, ...]}`` with each history's operations sorted by
``index`` and checked by :func:`spec.history.validate_history`.  Anything that breaks the contract
raises :class:`spec.history.BadHistory` (an :class:`spec.errors.InputError`) naming the file, the
row (0-based, counted over the whole file) and the field; nothing is skipped silently.

A file may carry **run metadata** (how the histories were made: the simulator's run configuration and
the faults it injected), a JSON object given to the writers' ``metadata=`` parameter: in a Parquet
file it is the schema's key-value metadata under ``txnmodel.run``; a JSON Lines file gets a sidecar
``<file>.meta.json`` (a header line would be a row to every other JSON Lines reader).
:func:`read_metadata` reads and checks it; a malformed one raises :class:`BadMetadata`.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from spec.config import Config
from spec.errors import BadConfig
from spec.history import FIELDS, PARQUET_COLUMNS, BadHistory, Operation, validate_history

__all__ = [
    "FORMATS",
    "METADATA_KEY",
    "BadMetadata",
    "arrow_schema",
    "group_histories",
    "history_files",
    "history_table",
    "parquet_history_names",
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
        metadata={b"txnmodel.history.schema_version": b"1"},
    )


def history_files(path: str | Path, fmt: str) -> list[Path]:
    """The files a ``verify PATH`` names: PATH itself, or every file of the format under it, sorted."""
    if fmt not in FORMATS:
        raise BadHistory(f"unknown format {fmt!r}; formats are {', '.join(FORMATS)}", where=str(path))
    root = Path(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise BadHistory("no such file or directory", where=str(root))
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.name.endswith(_SUFFIXES[fmt])
        and not any(part.startswith((".", "_")) for part in p.relative_to(root).parts)
    )
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


def read_parquet(path: str | Path, histories: Collection[str] | None = None) -> dict[str, list[Operation]]:
    """Read one Parquet history file (any number of histories; with ``histories``, only those)."""
    return group_histories(iter_parquet(path, histories), where=str(path))


def parquet_history_names(path: str | Path) -> list[str]:
    """The histories a Parquet file holds, sorted, reading only the ``history`` column (cheap: the
    bulk job splits a large file into tasks by history without reading the rest)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        column = pq.read_table(path, columns=["history"]).column("history")
    except (OSError, KeyError, pa.ArrowException) as exc:
        raise BadHistory(f"not a readable Parquet history file: {exc}", where=str(path)) from None
    return sorted(str(name) for name in pc.unique(column).to_pylist() if name is not None)


def iter_parquet(path: str | Path, histories: Collection[str] | None = None) -> Iterator[Operation]:
    """The rows of a Parquet file as operations, type-checked row by row; with ``histories``, only
    the rows of those histories (filtered in Arrow before any row becomes Python; row numbers in
    errors stay the file's)."""
    import pyarrow as pa
    import pyarrow.compute as pc
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
        if (
            got != want
            and not (pa.types.is_integer(want) and pa.types.is_integer(got))
            and not (pa.types.is_string(want) and (pa.types.is_large_string(got) or pa.types.is_dictionary(got)))
            and not pa.types.is_null(got)
        ):  # a column with no value at all (every seed null, say)
            raise BadHistory(f"column has type {got}, the schema says {want}", where=where, column=name)
    rows: list[int] | range = range(table.num_rows)
    if histories is not None and "history" in names:
        mask = pc.is_in(table.column("history"), value_set=pa.array(sorted(histories), type=pa.string()))
        rows = pc.indices_nonzero(mask).to_pylist()
        table = table.filter(mask)
    if any(table.column(name).null_count for name, _, nullable in PARQUET_COLUMNS if not nullable):
        # a required value missing somewhere: the row-by-row check finds the row and says so
        columns = {name: table.column(name).to_pylist() for name in names}
        for index, row in enumerate(rows):
            record = {name: values[index] for name, values in columns.items()}
            yield Operation.from_row(record, where=where, row_number=row)
        return
    # Every column is present (the nullable ones may be absent: all null) and of its type, checked
    # above for the whole file: each row needs only the checks of its values.
    nulls = [None] * table.num_rows
    values = [table.column(name).to_pylist() if name in names else nulls for name in FIELDS]
    for row, fields in zip(rows, zip(*values, strict=True), strict=True):
        yield Operation.from_typed(*fields, where=where, row_number=row)


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


def read_file(path: str | Path, fmt: str, histories: Collection[str] | None = None) -> dict[str, list[Operation]]:
    """Read one file of any supported format (``histories``: only those, Parquet only)."""
    if fmt == "parquet":
        return read_parquet(path, histories)
    if histories is not None:
        raise ValueError("reading a subset of histories is for Parquet files")
    if fmt == "jsonl":
        return read_jsonl(path)
    if fmt == "jepsen":
        from invariants.jepsen import read_jepsen_log

        ops = read_jepsen_log(path)
        return {Path(path).stem: ops}  # an empty log is an empty history, not nothing
    if fmt == "edn":
        from invariants.edn import read_edn

        return read_edn(path)
    raise BadHistory(f"unknown format {fmt!r}; formats are {', '.join(FORMATS)}", where=str(path))


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

    rows = _rows(histories)
    return pa.table({name: [row[name] for row in rows] for name in FIELDS}, schema=arrow_schema())


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
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata(schema.metadata), path)


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
    if metadata is not None:
        sidecar.write_text(_metadata_text(metadata, str(sidecar)) + "\n", encoding="utf-8")
    elif sidecar.exists():
        sidecar.unlink()
    with open(path, "w", encoding="utf-8") as handle:
        for row in _rows(histories):
            handle.write(json.dumps({k: v for k, v in row.items() if v is not None}, separators=(",", ":")) + "\n")


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
    where = str(path)
    name = Path(path).name
    if name.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(path)
        except (OSError, pa.ArrowException) as exc:
            raise BadHistory(f"not a readable Parquet file: {exc}", where=where) from None
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
        try:
            text = sidecar.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadMetadata(f"cannot read the run metadata: {exc}", where=where) from None
    else:
        return None
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
