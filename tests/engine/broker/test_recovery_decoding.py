"""A recovery that misreads or misreplays its durable log is flagged at its ``recover`` row.

Format version 3 (spec.history): a coordinator's or pending ack's ``recover`` row carries the live
durable entries the recovery read (``log``: the bytes the ledger stored, with the cursor's batch ack
sets) and the digest of the state the component recovered (``recovered``).  The per-object check
decodes the entries with the reference's own reader (``reference.batched_log.replay``, then the
record's ``from_pb``), recovers from them, and accepts the row only if the engine's decoded
``records`` and its recovered state agree (TC-21 and PA-18, with BW-23 for a misread).

Each faulty engine below runs with one function replaced (a decoding or replay slip), the checker
afterwards with the unmodified reference, as ``txnmodel verify`` judges any other implementation:

* the unmodified engine's histories carry the log and the digest, and pass;
* a coordinator that reads a record's ``expected_status`` back wrong (TxnLogRecord.from_pb),
  a log reader that reads a batched entry as a plain one (batched_log.read_entry), and a pending
  ack whose replay drops the records it reads (replay_record) are flagged at their ``recover``
  row, with the rule id, although no later step of theirs shows it;
* the same histories without the version-3 fields (a version-2 history) still verify: the checker
  then recovers from the records as the engine decoded them, as before;
* a PIP-160 writer that lets a batch grow past maxRecords, or writes every record alone although
  the row states that batching was on (``batched_write``), writes a log that decodes and replays
  correctly, yet is flagged at the ``recover`` row that carries it (BW-9, BW-8, read off the
  entries' layout by ``invariants.batched_log.log_layout_problem``); so is a buffer that seals its
  aborted-txn segments before they are full (TB-22, ``invariants.buffer.snapshot_records_problem``),
  whose recovery gives the same aborted set.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from engine.simulation.client import Cluster
from invariants.linearizability import Verdict, check_history
from invariants.models import model_by_name
from reference import batched_log as bl
from reference import buffer as tb
from reference import coordinator as tc
from reference import pending_ack as pa
from reference.conformance import RecoveryDiverged
from spec.config import Config
from spec.envelope import LogKind
from spec.history import ORDERED, RECOVER, BadHistory, Operation, is_machine_operation, parse_object, state_digest

MACHINE_OF = {"coordinator": "coordinator", "subscription": "pending_ack"}


def _machine_ops(ops: list[Operation], kind: str) -> list[Operation]:
    return [op for op in ops if is_machine_operation(op) and parse_object(op.object)[0] == kind]


def _crash_mid_commit(
    *, batching: bool = False, txns: int = 1, config: Config | None = None
) -> tuple[Cluster, list[Operation]]:
    """Transactions that send and ack; their commits reach the coordinator, then the broker dies
    and loads again: the coordinator replays COMMITTING records, the subscription its ACK records."""
    cluster = Cluster.start(seed=4, topics={"in": 1}, batching=batching, config=config)
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub")
    for i in range(txns):
        producer.send(f"m{i}")
    opened = [cluster.client().new_transaction_async() for _ in range(txns)]  # one process each
    cluster.sim.advance(50)
    for i, future in enumerate(opened):
        txn = future.result()
        producer.send(f"t{i}", txn=txn)
        got = consumer.receive(50)
        assert got is not None
        consumer.acknowledge(got, txn=txn)
    for future in opened:
        future.result().commit_async()
    cluster.sim.advance(4)
    cluster.broker.crash()
    cluster.broker.restart()
    return cluster, cluster.history(machines=True)


def _last_recover(ops: list[Operation], kind: str) -> Operation:
    return [op for op in _machine_ops(ops, kind) if op.f == RECOVER][-1]


def _verdict(ops: list[Operation], kind: str) -> Any:
    return check_history(model_by_name(MACHINE_OF[kind]), _machine_ops(ops, kind))


def _as_version_2(ops: list[Operation]) -> list[Operation]:
    """The history without the version-3 fields of its ``recover`` rows."""
    out = []
    for op in ops:
        if op.f == RECOVER and is_machine_operation(op):
            value = {k: v for k, v in op.args.items() if k not in ("log", "batched_write", "recovered")}
            text = json.dumps(value, separators=(",", ":"))
            op = dataclasses.replace(op, value=text, _value=json.loads(text))
        out.append(op)
    return out


@contextmanager
def _engine_with(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    """``owner.name`` replaced while the engine runs; the checker runs after, unmodified."""
    original = owner.__dict__[name]
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _blocked_text(ops: list[Operation], kind: str) -> tuple[Operation, str]:
    result = _verdict(ops, kind)
    assert result.verdict is Verdict.ILLEGAL
    failing = result.failing()
    assert failing is not None
    by_index = {op.index: op for op in ops}
    blocked = by_index[failing.blocked]
    model = model_by_name(MACHINE_OF[kind])
    op_input, op_output = model.decode(blocked)
    return blocked, model.describe_op(op_input, op_output)


def test_recover_rows_carry_the_durable_log_and_the_recovered_digest() -> None:
    cluster, ops = _crash_mid_commit()
    broker = cluster.broker
    coordinator = _last_recover(ops, "coordinator")
    assert coordinator.args["recovered"] == state_digest(broker.coordinator.state)
    entries = bl.logged_entries(coordinator.args["log"])
    decoded = [tc.TxnLogRecord.from_pb(r.record) for r in bl.replay(LogKind.TRANSACTION_LOG, entries)]
    assert [rid for rid, _ in coordinator.args["records"]] == list(range(len(decoded)))
    assert any(r.new_status is not None for r in decoded)  # the COMMITTING record is replayed
    sub = next(iter(broker.partitions.values())).subscriptions["sub"]
    pending = _last_recover(ops, "subscription")
    assert pending.args["recovered"] == state_digest(sub.state) and pending.args["log"]
    for kind in MACHINE_OF:
        assert _verdict(ops, kind).verdict is Verdict.OK


def test_a_coordinator_that_reads_a_record_back_wrong_is_flagged() -> None:
    original = tc.TxnLogRecord.from_pb

    def misread(cls: type[tc.TxnLogRecord], entry: Any) -> tc.TxnLogRecord:
        record = original(entry)
        return dataclasses.replace(record, expected_status=None)  # expected_status read back wrong

    with _engine_with(tc.TxnLogRecord, "from_pb", classmethod(misread)):
        _, ops = _crash_mid_commit()
    blocked, text = _blocked_text(ops, "coordinator")
    assert blocked.f == RECOVER and "(TC-21, BW-23)" in text and '"expected_status":"OPEN"' in text, text
    assert _verdict(_as_version_2(ops), "coordinator").verdict is Verdict.OK  # what version 2 missed


def test_a_log_reader_that_reads_a_batched_entry_as_plain_is_flagged() -> None:
    original = bl.read_entry

    def as_plain(kind: LogKind, position: Any, data: bytes, ack_set: Any = None) -> tuple[bl.ReplayedRecord, ...]:
        replayed = original(kind, position, data, ack_set)
        return replayed[:1] if len(replayed) > 1 else replayed  # a batch read as one plain record

    with _engine_with(bl, "read_entry", as_plain):
        _, ops = _crash_mid_commit(batching=True, txns=3)
    logs = [bl.logged_entries(op.args["log"]) for op in _machine_ops(ops, "coordinator") if op.f == RECOVER]
    batched = [
        e
        for log in logs
        for e in log
        if len(original(LogKind.TRANSACTION_LOG, e.position, e.data, e.ack_set)) > 1  # the run batched
    ]
    assert batched
    blocked, text = _blocked_text(ops, "coordinator")
    assert blocked.f == RECOVER and "(TC-21, BW-23)" in text, text
    assert _verdict(_as_version_2(ops), "coordinator").verdict is Verdict.OK


def test_a_pending_ack_whose_replay_drops_records_is_flagged() -> None:
    def forgetful(state: pa.PendingAckState, record_id: int, record: pa.PendingAckRecord) -> pa.PendingAckState:
        return state  # the record is read, and nothing of it replayed

    with _engine_with(pa, "replay_record", forgetful):
        _, ops = _crash_mid_commit()
    blocked, text = _blocked_text(ops, "subscription")
    assert blocked.f == RECOVER and "(PA-18)" in text, text
    assert _verdict(_as_version_2(ops), "subscription").verdict is Verdict.OK


def test_a_writer_that_batches_past_max_records_is_flagged() -> None:
    original = bl.async_add_data

    def never_full(state: bl.WriterState, cmd: bl.AsyncAddData) -> Any:
        # the count threshold forgotten (BW-9): the size threshold and the timer still flush
        cfg = state.config
        after, result = original(dataclasses.replace(state, config=dataclasses.replace(cfg, max_records=1 << 30)), cmd)
        return dataclasses.replace(after, config=cfg), result

    config = Config().with_overrides({"transactionLogBatchedWriteMaxRecords": 2})
    _, clean = _crash_mid_commit(batching=True, txns=4, config=config)
    assert _verdict(clean, "coordinator").verdict is Verdict.OK
    with _engine_with(bl, "async_add_data", never_full):
        _, ops = _crash_mid_commit(batching=True, txns=4, config=config)
    blocked, text = _blocked_text(ops, "coordinator")
    assert blocked.f == RECOVER and "more than maxRecords 2 (BW-9)" in text, text
    assert "could not have written" in text and "records, more than" in text


_ADD_DATA = bl.async_add_data


def _unbatched(state: bl.WriterState, cmd: bl.AsyncAddData) -> Any:
    """A writer slip: every record written alone although batching is on (BW-8); the log reads back
    the same records, so only its layout shows it."""
    cfg = state.config
    after, result = _ADD_DATA(dataclasses.replace(state, config=dataclasses.replace(cfg, enabled=False)), cmd)
    return dataclasses.replace(after, config=cfg), result


def test_recover_rows_state_the_writers_switch_and_a_writer_that_ignores_it_is_flagged() -> None:
    for batching in (False, True):
        _, ops = _crash_mid_commit(batching=batching, txns=2)
        for kind in MACHINE_OF:
            rows = [op for op in _machine_ops(ops, kind) if op.f == RECOVER and "log" in op.args]
            assert rows and all(op.args["batched_write"] is batching for op in rows)
    with _engine_with(bl, "async_add_data", _unbatched):
        _, ops = _crash_mid_commit(batching=True, txns=2)
    blocked, text = _blocked_text(ops, "coordinator")
    assert blocked.f == RECOVER and "written alone with batching on" in text and "(BW-8)" in text, text
    # without the switch stated, a plain entry says nothing (BW-22 may have switched batching off)
    unstated = []
    for op in ops:
        if op.f == RECOVER and is_machine_operation(op) and "batched_write" in op.args:
            text = json.dumps({k: v for k, v in op.args.items() if k != "batched_write"}, separators=(",", ":"))
            op = dataclasses.replace(op, value=text, _value=json.loads(text))
        unstated.append(op)
    assert _verdict(unstated, "coordinator").verdict is Verdict.OK


def test_a_stated_switch_that_is_not_a_boolean_is_one_line_of_bad_input() -> None:
    _, ops = _crash_mid_commit(batching=True)
    bad = []
    for op in ops:
        if op.f == RECOVER and is_machine_operation(op) and "batched_write" in op.args:
            text = json.dumps(dict(op.args, batched_write="yes"), separators=(",", ":"))
            op = dataclasses.replace(op, value=text, _value=json.loads(text))
        bad.append(op)
    with pytest.raises(BadHistory, match=r"not the recovery inputs of coordinator: \$\.batched_write: "):
        _verdict(bad, "coordinator")


def _aborts_then_reload() -> list[Operation]:
    """Eight transactions that send and abort on a partition whose segmented snapshot seals every
    four aborted ids, then a crash: the buffer recovers from its segments."""
    config = Config().with_overrides(
        # capacity (64 - 8 - len("persistent://public/default/in-partition-0")) // 3 = 4 (TB-22)
        {"transactionBufferSegmentedSnapshotEnabled": True, "transactionBufferSnapshotSegmentSize": 64}
    )
    cluster = Cluster.start(seed=4, topics={"in": 1}, config=config)
    producer = cluster.client().create_producer("in")
    for i in range(8):
        txn = cluster.client().new_transaction()
        producer.send(f"t{i}", txn=txn)
        txn.abort()
    cluster.broker.crash()
    cluster.broker.restart()
    return cluster.history(machines=True)


def test_a_buffer_that_seals_segments_early_is_flagged() -> None:
    clean = _aborts_then_reload()
    rows = [op for op in _machine_ops(clean, "partition") if op.f == RECOVER and op.args["snapshot_records"]]
    segments = [r for op in rows for r in tb.decode_snapshot_records(op.args["snapshot_records"])]
    assert any(isinstance(r, tb.WriteSnapshotSegment) for r in segments)
    assert check_history(model_by_name("buffer"), _machine_ops(clean, "partition")).verdict is Verdict.OK

    original = tb.segment_capacity
    with _engine_with(tb, "segment_capacity", lambda config, topic: max(1, original(config, topic) - 1)):
        ops = _aborts_then_reload()
    result = check_history(model_by_name("buffer"), _machine_ops(ops, "partition"))
    assert result.verdict is Verdict.ILLEGAL
    failing = result.failing()
    assert failing is not None
    blocked = {op.index: op for op in ops}[failing.blocked]
    model = model_by_name("buffer")
    text = model.describe_op(*model.decode(blocked))
    assert blocked.f == RECOVER and "below the segment capacity 4 (TB-22)" in text, text


@pytest.mark.parametrize("slip", ["unbatched", "early-seal"])
def test_the_durable_checks_fire_on_a_main_job_history(slip: str) -> None:
    """At the main job's own options (ctp seed 1: batching and the limits variant's thresholds and
    segmented snapshot), ``verify``'s per-object check flags each slip at a ``recover`` row."""
    from engine.simulation.options import main_job_spec
    from engine.simulation.workloads import run
    from invariants.verify import VerifyOptions
    from invariants.verify import check_history as verify_history

    def judged(ops: list[Operation]) -> str:
        return str(verify_history(ops[0].history, ops, "ctp-seed1", VerifyOptions()))

    clean = judged(run(main_job_spec("ctp", 1)).operations)
    assert "BW-" not in clean and "TB-22" not in clean
    # the engine runs with the slip; the checker afterwards, unmodified
    if slip == "unbatched":
        with _engine_with(bl, "async_add_data", _unbatched):
            ops = run(main_job_spec("ctp", 1)).operations
        text = judged(ops)
        assert "written alone with batching on" in text and "(BW-8)" in text
    else:
        capacity = tb.segment_capacity
        with _engine_with(tb, "segment_capacity", lambda config, topic: max(1, capacity(config, topic) - 1)):
            ops = run(main_job_spec("ctp", 1)).operations
        text = judged(ops)
        assert "below the segment capacity" in text and "(TB-22)" in text


def test_the_reference_decodes_a_row_log_and_checks_the_engine_records() -> None:
    _, ops = _crash_mid_commit()
    row = _last_recover(ops, "coordinator")
    inputs = {k: v for k, v in row.args.items() if k not in ("@type", "machine", "config", ORDERED)}
    config = Config().with_overrides(row.args["config"])
    assert tc.VECTORS.recover is not None
    assert state_digest(tc.VECTORS.recover(config, inputs)) == row.args["recovered"]
    tampered = json.loads(json.dumps(inputs))
    tampered["records"][-1][1]["new_status"] = "ABORTING"
    with pytest.raises(RecoveryDiverged) as caught:
        tc.VECTORS.recover(config, tampered)
    assert caught.value.rule == "TC-21, BW-23"
    assert f"record {len(tampered['records']) - 1} of the durable log" in str(caught.value)
    dropped = dict(inputs, records=inputs["records"][:-1])
    with pytest.raises(RecoveryDiverged, match=r"decodes to \d+ live records, but the engine recovered from"):
        tc.VECTORS.recover(config, dropped)
