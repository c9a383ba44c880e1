"""The history contract: round trips through Parquet and JSON Lines, and typed errors for bad files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from history_io.files import (
    arrow_schema,
    history_files,
    read_file,
    read_jsonl,
    read_parquet,
    write_jsonl,
    write_parquet,
)
from invariants.models import random_register_history
from spec.errors import InputError
from spec.history import (
    FIELDS,
    BadHistory,
    Event,
    Operation,
    OpType,
    object_id,
    pair_events,
    parse_object,
    split_subscription,
    validate_history,
)
from tests.invariants.synthetic import generate


def test_schema_matches_the_contract() -> None:
    schema = arrow_schema()
    assert tuple(schema.names) == FIELDS
    assert not schema.field("history").nullable and schema.field("result").nullable


@given(st.integers(0, 1000), st.integers(1, 40), st.integers(1, 6), st.floats(0, 0.3))
def test_parquet_and_jsonl_round_trip(
    tmp_path_factory: pytest.TempPathFactory, seed: int, n: int, clients: int, crash: float
) -> None:
    ops = random_register_history(seed, ops=n, clients=clients, crash=crash)
    folder = tmp_path_factory.mktemp("rt")
    write_parquet(folder / "h.parquet", ops)
    write_jsonl(folder / "h.jsonl", ops)
    assert read_parquet(folder / "h.parquet") == {ops[0].history: ops}
    assert read_jsonl(folder / "h.jsonl") == {ops[0].history: ops}


def test_transactional_history_round_trips(tmp_path: Path) -> None:
    ops = generate(3)
    write_parquet(tmp_path / "t.parquet", ops)
    back = read_file(tmp_path / "t.parquet", "parquet")["synthetic"]
    assert back == ops and back[0].args == ops[0].args


def test_object_ids() -> None:
    topic = "persistent://public/default/t-partition-0"
    assert parse_object(object_id("partition", topic)) == ("partition", topic)
    assert split_subscription(parse_object(object_id("subscription", f"{topic}#my#sub"))[1]) == (topic, "my#sub")
    with pytest.raises(ValueError):
        object_id("table", "x")
    with pytest.raises(ValueError):
        parse_object("nokind")


def _row(**overrides: object) -> dict[str, object]:
    row: dict[str, object] = {
        "history": "h",
        "index": 0,
        "process": 0,
        "type": "ok",
        "f": "write",
        "object": "register:x",
        "value": "1",
        "result": None,
        "invoked_at": 0,
        "completed_at": 1,
    }
    row.update(overrides)
    return row


@pytest.mark.parametrize(
    "overrides, column",
    [
        ({"type": "done"}, "type"),
        ({"value": "{not json"}, "value"),
        ({"result": "[1,"}, "result"),
        ({"object": "x"}, "object"),
        ({"completed_at": None}, "completed_at"),
        ({"type": "invoke"}, "completed_at"),
        ({"completed_at": -1}, "completed_at"),
        ({"index": "0"}, "index"),
        ({"process": None}, "process"),
        ({"colour": "red"}, "colour"),
        ({"type": "ok", "error": "TransactionConflict"}, "error"),
    ],
)
def test_bad_rows_name_the_field(tmp_path: Path, overrides: dict[str, object], column: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps(_row())
    path.write_text(good + "\n" + json.dumps(_row(**{"index": 1, **overrides})) + "\n")
    with pytest.raises(BadHistory) as info:
        read_jsonl(path)
    assert isinstance(info.value, InputError)
    assert info.value.row == 1 and info.value.column == column
    assert str(path) in str(info.value) and f"field {column!r}" in str(info.value)


@pytest.mark.parametrize(
    "overrides, column",
    [
        ({"type": "done"}, "type"),
        ({"value": "{not json"}, "value"),
        ({"value": "1 2"}, "value"),
        ({"result": "[1,"}, "result"),
        ({"object": "x"}, "object"),
        ({"completed_at": None}, "completed_at"),
        ({"type": "invoke"}, "completed_at"),
        ({"completed_at": -1}, "completed_at"),
        ({"index": -1}, "index"),
        ({"process": None}, "process"),
        ({"type": "ok", "error": "TransactionConflict"}, "error"),
    ],
)
def test_bad_parquet_rows_name_the_row_and_the_field(tmp_path: Path, overrides: dict[str, object], column: str) -> None:
    """The Parquet reader checks types per file and values per row: a bad value is still found at
    its row and field (a null in a required column sends the reader down the row-by-row path)."""
    rows = [_row(), _row(**{"index": 1, **overrides})]
    nullable = pa.schema([field.with_nullable(True) for field in arrow_schema()])  # another writer's file
    table = pa.table({name: [row.get(name) for row in rows] for name in FIELDS}, schema=nullable)
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    with pytest.raises(BadHistory) as info:
        read_parquet(path)
    assert info.value.row == 1 and info.value.column == column, str(info.value)


def test_history_tables_write_the_same_file(tmp_path: Path) -> None:
    """The main job's workers send tables (history_table); the file written from them is the file
    write_parquet writes from the operations, byte for byte."""
    from history_io.files import history_table, write_parquet_tables

    histories = {f"h{k}": [replace(op, history=f"h{k}") for op in generate(k)] for k in range(3)}
    meta = _metadata()
    write_parquet(tmp_path / "ops.parquet", histories, metadata=meta)
    write_parquet_tables(tmp_path / "tables.parquet", [history_table(ops) for ops in histories.values()], metadata=meta)
    assert (tmp_path / "ops.parquet").read_bytes() == (tmp_path / "tables.parquet").read_bytes()
    assert read_parquet(tmp_path / "tables.parquet") == histories


def test_jsonl_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(_row()) + '\n{"history": \n')
    with pytest.raises(BadHistory, match="row 1"):
        read_jsonl(path)
    path.write_bytes(b"\xff\xfe garbage")
    with pytest.raises(BadHistory, match="UTF-8"):
        read_jsonl(path)


def test_truncated_parquet(tmp_path: Path) -> None:
    path = tmp_path / "h.parquet"
    write_parquet(path, random_register_history(1, ops=50, clients=3))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadHistory, match="not a readable Parquet file") as info:
        read_parquet(path)
    assert info.value.where is not None and str(path) in info.value.where


def test_parquet_with_a_wrong_column_type_or_a_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "h.parquet"
    rows = [_row()]
    table = pa.table({name: [row.get(name) for row in rows] for name in FIELDS})
    pq.write_table(table.set_column(FIELDS.index("value"), "value", pa.array([1.5])), path)
    with pytest.raises(BadHistory) as info:
        read_parquet(path)
    assert info.value.column == "value"
    pq.write_table(table.drop(["f"]), path)
    with pytest.raises(BadHistory) as info:
        read_parquet(path)
    assert info.value.column == "f"


def _op(index: int, process: int, at: int, done: int | None, kind: OpType = OpType.OK) -> Operation:
    return Operation("h", index, process, kind, "write", "register:x", "1", None, at, done)


def test_cross_row_rules() -> None:
    validate_history([_op(0, 0, 0, 2), _op(1, 0, 3, 4), _op(2, 1, 1, 5)])
    with pytest.raises(BadHistory, match="appears twice"):
        validate_history([_op(0, 0, 0, 2), _op(0, 1, 3, 4)])
    with pytest.raises(BadHistory, match="while op 0 was open"):
        validate_history([_op(0, 0, 0, 5), _op(1, 0, 3, 6)])
    with pytest.raises(BadHistory, match="never invokes again"):
        validate_history([_op(0, 0, 0, 2, OpType.INFO), _op(1, 0, 3, 4)])


def test_pairing_rules() -> None:
    events = [
        Event(0, OpType.INVOKE, "read", None, 0),
        Event(1, OpType.INVOKE, "write", 3, 1),
        Event(0, OpType.OK, "read", 3, 2),
        Event(1, OpType.INFO, "write", None, 3),
        Event(0, OpType.INVOKE, "write", 4, 4),
    ]
    ops = pair_events("h", events, obj="register:x")
    assert [(o.index, o.process, o.type, o.f, o.args, o.returned, o.invoked_at, o.completed_at) for o in ops] == [
        (0, 0, OpType.OK, "read", None, 3, 0, 2),
        (1, 1, OpType.INFO, "write", 3, None, 1, 3),
        (2, 0, OpType.INVOKE, "write", 4, None, 4, None),
    ]
    assert ops[1].return_time == float("inf") and ops[2].return_time == float("inf")
    with pytest.raises(BadHistory, match="invokes after it got 'info'"):
        pair_events("h", [*events[:4], Event(1, OpType.INVOKE, "read", None, 5)], obj="register:x")
    with pytest.raises(BadHistory, match="still open"):
        pair_events("h", [events[0], Event(0, OpType.INVOKE, "read", None, 1)], obj="register:x")
    with pytest.raises(BadHistory, match="does not match"):
        pair_events("h", [events[0], Event(0, OpType.OK, "write", 1, 1)], obj="register:x")
    with pytest.raises(BadHistory, match="no open invocation"):
        pair_events("h", [Event(0, OpType.OK, "write", 1, 1)], obj="register:x")


def test_history_files(tmp_path: Path) -> None:
    write_parquet(tmp_path / "b" / "x.parquet", random_register_history(1, ops=3, clients=1))
    write_parquet(tmp_path / "a.parquet", random_register_history(2, ops=3, clients=1))
    (tmp_path / ".hidden.parquet").write_bytes(b"")
    assert [p.relative_to(tmp_path).as_posix() for p in history_files(tmp_path, "parquet")] == [
        "a.parquet",
        "b/x.parquet",
    ]
    with pytest.raises(BadHistory, match="no jsonl files"):
        history_files(tmp_path, "jsonl")
    with pytest.raises(BadHistory, match="no such file"):
        history_files(tmp_path / "missing", "parquet")


# --- run metadata ------------------------------------------------------------------------------


def _metadata(**run: object) -> dict[str, object]:
    spec = {
        "workload": "ctp",
        "seed": 3,
        "config": {"managedLedgerMaxEntriesPerLedger": 64},
        "fault_schedule": [{"time_ms": 1200, "kind": "broker-crash", "target": "broker"}],
        **run,
    }
    return {"version": 1, "config": {"managedLedgerMaxEntriesPerLedger": 64}, "runs": {"h": spec}}


def test_run_metadata_round_trips_in_parquet_and_jsonl(tmp_path: Path) -> None:
    from history_io.files import read_metadata, run_config

    ops = generate(1)
    meta = _metadata(batching=True, fault_rates={"drop_request": 0.01})
    write_parquet(tmp_path / "h.parquet", ops, metadata=meta)
    write_jsonl(tmp_path / "h.jsonl", ops, metadata=meta)
    assert read_metadata(tmp_path / "h.parquet") == meta
    assert read_metadata(tmp_path / "h.jsonl") == meta
    assert (tmp_path / "h.jsonl.meta.json").exists()
    # The rows are untouched, and the metadata sidecar is not a history file.
    assert read_parquet(tmp_path / "h.parquet") == read_jsonl(tmp_path / "h.jsonl")
    assert history_files(tmp_path, "jsonl") == [tmp_path / "h.jsonl"]
    assert run_config(read_metadata(tmp_path / "h.parquet")).managed_ledger_max_entries_per_ledger == 64
    # Without metadata: None (and a stale sidecar goes away with a rewrite).
    write_parquet(tmp_path / "plain.parquet", ops)
    write_jsonl(tmp_path / "h.jsonl", ops)
    assert read_metadata(tmp_path / "plain.parquet") is None and read_metadata(tmp_path / "h.jsonl") is None
    assert run_config(None).managed_ledger_max_entries_per_ledger == 50000


@pytest.mark.parametrize(
    ("meta", "column"),
    [
        ({"version": 2, "config": {}, "runs": {}}, "version"),
        ({"version": 1, "config": {"noSuchKey": 1}, "runs": {}}, "config"),
        ({"version": 1, "config": {"managedLedgerMaxEntriesPerLedger": "many"}, "runs": {}}, "config"),
        ({"version": 1, "config": {}, "runs": []}, "runs"),
        (_metadata(seed="3"), "runs.h.seed"),
        (_metadata(fault_schedule=[{"time_ms": "soon", "kind": "x", "target": "y"}]), "runs.h.fault_schedule[0]"),
        (_metadata(config={"transactionCoordinatorEnabled": "maybe"}), "runs.h.config"),
    ],
)
def test_malformed_run_metadata_is_a_typed_error(tmp_path: Path, meta: dict[str, object], column: str) -> None:
    from history_io.files import METADATA_KEY, BadMetadata, read_metadata

    ops = generate(2)
    with pytest.raises(BadMetadata) as refused:
        write_parquet(tmp_path / "w.parquet", ops, metadata=meta)
    assert refused.value.column == column
    # A file written by someone else carries it anyway: the reader names the file and the field.
    path = tmp_path / "x.parquet"
    write_parquet(path, ops)
    table = pq.read_table(path)
    pq.write_table(
        table.replace_schema_metadata({**table.schema.metadata, METADATA_KEY.encode(): json.dumps(meta).encode()}), path
    )
    with pytest.raises(BadMetadata) as caught:
        read_metadata(path)
    assert caught.value.column == column and str(path) in str(caught.value)
    assert isinstance(caught.value, BadHistory) and isinstance(caught.value, InputError)


def test_run_metadata_that_is_not_json(tmp_path: Path) -> None:
    from history_io.files import BadMetadata, read_metadata

    write_jsonl(tmp_path / "h.jsonl", generate(2))
    (tmp_path / "h.jsonl.meta.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(BadMetadata, match="not JSON"):
        read_metadata(tmp_path / "h.jsonl")
    (tmp_path / "h.jsonl.meta.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(BadMetadata, match="JSON object"):
        read_metadata(tmp_path / "h.jsonl")
