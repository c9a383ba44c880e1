"""Examples and edge cases, one group per rule of ``spec/rules/batched_log.md``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference import batched_log as bl
from spec.config import Config
from spec.envelope import PREFIX_LENGTH, LogKind, decode_entry, encode_batch, encode_plain, is_batched
from spec.errors import UnsupportedVersion
from spec.pb import PulsarTransactionMetadata_pb2 as tc_pb
from spec.result import Ok
from spec.types import BatchedPosition, Position

TC = LogKind.TRANSACTION_LOG
PA = LogKind.PENDING_ACK


def writer(
    enabled: bool = True,
    max_records: int = 512,
    max_size: int = 4 * 1024 * 1024,
    delay: int = 1,
    kind: LogKind = TC,
    now_ms: int = 0,
) -> bl.WriterState:
    prefix = "transactionLog" if kind is TC else "transactionPendingAck"
    config = Config().with_overrides(
        {
            f"{prefix}BatchedWriteEnabled": enabled,
            f"{prefix}BatchedWriteMaxRecords": max_records,
            f"{prefix}BatchedWriteMaxSize": max_size,
            f"{prefix}BatchedWriteMaxDelayInMillis": delay,
        }
    )
    return bl.initial(config, kind, now_ms)


def run(state: bl.WriterState, *commands: Any) -> tuple[bl.WriterState, list[Any]]:
    effects: list[Any] = []
    for command in commands:
        state, result = bl.step(state, command)
        assert result.ok, result
        effects.extend(result.effects)
    return state, effects


def add(size: int = 4, seq: int = 0, now: int = 0, kind: LogKind = TC) -> bl.AsyncAddData:
    return bl.AsyncAddData(bl.sample_record(size, seq, kind), now)


def writes(effects: list[Any]) -> list[bl.AsyncAddEntry]:
    return [e for e in effects if isinstance(e, bl.AsyncAddEntry)]


def observed(effects: list[Any]) -> list[bl.FlushObserved]:
    return [e for e in effects if isinstance(e, bl.FlushObserved)]


# --- BW-1, BW-2: configuration ----------------------------------------------------------------


def test_bw1_each_user_reads_its_own_keys_with_pulsar_defaults() -> None:
    """BW-1."""
    defaults = Config()
    for kind in LogKind:
        cfg = bl.writer_config(defaults, kind)
        assert (cfg.enabled, cfg.max_records, cfg.max_size, cfg.max_delay_ms) == (False, 512, 4194304, 1)
    config = Config().with_overrides(
        {"transactionLogBatchedWriteEnabled": True, "transactionPendingAckBatchedWriteMaxRecords": 7}
    )
    assert bl.writer_config(config, TC).enabled and bl.writer_config(config, TC).max_records == 512
    assert not bl.writer_config(config, PA).enabled and bl.writer_config(config, PA).max_records == 7


@pytest.mark.parametrize(
    ("enabled", "max_records", "effective"), [(True, 2, True), (True, 1, False), (False, 512, False)]
)
def test_bw2_effective_batching(enabled: bool, max_records: int, effective: bool) -> None:
    """BW-2."""
    state = writer(enabled, max_records)
    assert state.config.effective is effective
    assert (state.timer_due_ms is not None) is effective
    state, effects = run(state, add())
    assert writes(effects) and writes(effects)[0].batched is False if not effective else not writes(effects)


# --- BW-3, BW-4: states --------------------------------------------------------------------------


def test_bw3_open_closing_closed() -> None:
    """BW-3."""
    state = writer()
    assert state.status is bl.WriterStatus.OPEN
    state, _ = run(state, bl.Close())
    assert state.status is bl.WriterStatus.CLOSING
    state, _ = run(state, bl.FinishClose())
    assert state.status is bl.WriterStatus.CLOSED
    # It never reopens: close again is a no-op, the close task is refused.
    assert bl.step(state, bl.Close())[0] is state
    assert not bl.step(state, bl.FinishClose())[1].ok


@pytest.mark.parametrize("enabled", [True, False])
def test_bw4_closed_writer_fails_adds_with_fenced(enabled: bool) -> None:
    """BW-4."""
    state, _ = run(writer(enabled), bl.Close())
    after, result = bl.step(state, add())
    assert after is state
    assert not result.ok and result.error.name == "ManagedLedgerFenced"
    assert result.error.message == bl.CLOSED_MESSAGE


# --- BW-5 ... BW-11: adding -------------------------------------------------------------------------


def test_bw5_unbatched_record_is_a_plain_entry_with_a_plain_position() -> None:
    """BW-5."""
    record = bl.sample_record(10, 3)
    state, effects = run(writer(enabled=False), bl.AsyncAddData(record))
    (write,) = writes(effects)
    assert write.data == record and not is_batched(write.data) and not write.batched
    state, effects = run(state, bl.AddEntryComplete(write.write_id, Position(5, 0)))
    assert effects == [bl.AddComplete(0, Position(5, 0))]
    assert not isinstance(effects[0].position, BatchedPosition)
    assert state.stats == bl.FlushStats()


def test_bw6_order_of_adds_is_order_in_batches_and_writes() -> None:
    """BW-6."""
    state, effects = run(writer(max_records=3), *(add(4, i) for i in range(7)))
    batches = [w.request_ids for w in writes(effects)]
    assert batches == [(0, 1, 2), (3, 4, 5)]
    assert [b.request_id for b in state.buffer] == [6]
    decoded = decode_entry(writes(effects)[0].data, TC)
    assert [r.txnid_least_bits for r in decoded.records] == [0, 1, 2]


@pytest.mark.parametrize("junk", [b"", b"\xff\xff\xff", b"\x0e\x01\x00\x01", b"\x10\x01"])
def test_bw7_unserializable_record_fails_alone(junk: bytes) -> None:
    """BW-7."""
    state, _ = run(writer(), add(4, 0))
    after, result = bl.step(state, bl.AsyncAddData(junk))
    assert after is state and not result.ok
    assert result.error.name == "ManagedLedgerIntercept"


def test_bw8_large_record_flushes_buffer_then_goes_alone() -> None:
    """BW-8."""
    state, effects = run(writer(max_size=20), add(4, 0), add(4, 1), add(20, 2))
    first, second = writes(effects)
    assert first.batched and first.request_ids == (0, 1)
    assert not second.batched and second.request_ids == (2,) and not is_batched(second.data)
    assert observed(effects) == [bl.FlushObserved(bl.FlushTrigger.LARGE_DATA, 2, 8, 0)]
    state, effects = run(state, bl.AddEntryComplete(0, Position(1, 0)), bl.AddEntryComplete(1, Position(1, 1)))
    assert effects[-1] == bl.AddComplete(2, Position(1, 1))


def test_bw8_large_record_with_empty_buffer_counts_no_trigger() -> None:
    """BW-8."""
    state, effects = run(writer(max_size=20), add(25, 0))
    assert not observed(effects) and state.stats == bl.FlushStats()
    assert len(writes(effects)) == 1


def test_bw8_alternating_small_and_large_records_metrics() -> None:
    """BW-8: Fact sheet A.7 M5: 4 B and 1024 B alternating, maxSize 1024, 100 writes."""
    state = writer(max_size=1024)
    effects: list[Any] = []
    for i in range(100):
        state, more = run(state, add(4 if i % 2 == 0 else 1024, i % 128))
        effects += more
    assert len(writes(effects)) == 100
    assert state.stats.large_data == 50 and state.stats.batches == 50
    assert state.stats.records_sum == 50 and state.stats.bytes_sum == 200


def test_bw9_record_reaching_the_count_is_in_the_batch() -> None:
    """BW-9."""
    state, effects = run(writer(max_records=32), *(add(4, i) for i in range(31)))
    assert not writes(effects)
    state, effects = run(state, add(4, 31))
    (write,) = writes(effects)
    assert len(write.request_ids) == 32 and not state.buffer
    assert observed(effects)[0].trigger is bl.FlushTrigger.MAX_RECORDS


def test_bw10_size_threshold_after_count() -> None:
    """BW-10."""
    state, effects = run(writer(max_size=256), *(add(4, i) for i in range(63)))
    assert not writes(effects) and state.bytes_size == 252
    state, effects = run(state, add(4, 63))
    assert [len(w.request_ids) for w in writes(effects)] == [64]
    assert observed(effects)[0].trigger is bl.FlushTrigger.MAX_SIZE
    # Both thresholds at once: the count wins.
    state, effects = run(writer(max_records=2, max_size=8), add(4, 0), add(4, 1))
    assert observed(effects)[0].trigger is bl.FlushTrigger.MAX_RECORDS


def test_bw11_prefix_and_framing_are_not_counted() -> None:
    """BW-11."""
    _state, effects = run(writer(max_size=16), *(add(4, i) for i in range(4)))
    (write,) = writes(effects)
    assert observed(effects)[0].bytes_size == 16
    assert len(write.data) == PREFIX_LENGTH + 4 * (2 + 4) > 16


@given(
    sizes=st.lists(st.integers(4, 60).filter(lambda n: n != 5), max_size=40),
    max_records=st.integers(2, 6),
    max_size=st.integers(8, 80),
)
def test_bw11_buffer_stays_below_both_thresholds(sizes: list[int], max_records: int, max_size: int) -> None:
    """BW-11."""
    state = writer(max_records=max_records, max_size=max_size)
    for i, size in enumerate(sizes):
        state, _ = run(state, add(size, i % 128))
        assert len(state.buffer) < max_records and state.bytes_size < max_size


# --- BW-12: the timer ------------------------------------------------------------------------------


def test_bw12_tick_flushes_and_rearms_relative_to_the_tick() -> None:
    """BW-12."""
    state = writer(delay=100)
    assert state.timer_due_ms == 100
    state, effects = run(state, add(4, 0, now=10))
    assert not writes(effects)
    assert not bl.step(state, bl.TimerFired(90))[1].ok  # not due yet: nothing written at 90 ms
    state, effects = run(state, bl.TimerFired(103))
    assert [w.request_ids for w in writes(effects)] == [(0,)]
    assert observed(effects) == [bl.FlushObserved(bl.FlushTrigger.MAX_DELAY, 1, 4, 93)]
    assert effects[-1] == bl.ArmTimer(203) and state.timer_due_ms == 203


def test_bw12_count_flush_does_not_reset_the_tick_and_empty_tick_rearms() -> None:
    """BW-12."""
    state, _ = run(writer(max_records=2, delay=5), add(4, 0, 1), add(4, 1, 2))
    assert state.timer_due_ms == 5
    state, effects = run(state, bl.TimerFired(5))
    assert effects == [bl.ArmTimer(10)]


def test_bw12_tick_while_closing_is_not_rearmed() -> None:
    """BW-12."""
    state, _ = run(writer(delay=5), add(4, 0), bl.Close())
    state, effects = run(state, bl.TimerFired(5))
    assert state.timer_due_ms is None and not any(isinstance(e, bl.ArmTimer) for e in effects)


# --- BW-13 ... BW-17: flush and callbacks ------------------------------------------------------------


def test_bw13_flush_is_one_enveloped_entry_in_arrival_order() -> None:
    """BW-13."""
    records = [bl.sample_record(4, i) for i in range(3)]
    _state, effects = run(writer(max_records=3), *(bl.AsyncAddData(r) for r in records))
    (write,) = writes(effects)
    expected = encode_batch([tc_pb.TransactionMetadataEntry.FromString(r) for r in records], TC)
    assert write.data == expected and write.data[:4] == b"\x0e\x01\x00\x01"


def test_bw14_flush_while_closing_fails_the_batch() -> None:
    """BW-14."""
    state, _ = run(writer(delay=5), add(4, 0), add(4, 1), bl.Close())
    state, effects = run(state, bl.TimerFired(5))
    assert not writes(effects)
    assert [e.request_id for e in effects if isinstance(e, bl.AddFailed)] == [0, 1]
    assert all(e.error.name == "ManagedLedgerFenced" for e in effects if isinstance(e, bl.AddFailed))


def test_bw15_batch_positions_are_size_and_index() -> None:
    """BW-15."""
    state, effects = run(writer(max_records=4), *(add(4, i) for i in range(4)))
    state, effects = run(state, bl.AddEntryComplete(0, Position(7, 3)))
    assert [e.position for e in effects] == [BatchedPosition(7, 3, 4, i) for i in range(4)]
    assert [e.request_id for e in effects] == [0, 1, 2, 3]


def test_bw15_timer_flushed_single_record_gets_a_batched_position() -> None:
    """BW-15."""
    state, _ = run(writer(delay=1), add(4, 0), bl.TimerFired(1))
    _, effects = run(state, bl.AddEntryComplete(0, Position(1, 0)))
    assert effects == [bl.AddComplete(0, BatchedPosition(1, 0, 1, 0))]


def test_bw16_failed_write_fails_only_its_batch() -> None:
    """BW-16."""
    state, _ = run(writer(max_records=2), *(add(4, i) for i in range(4)))
    state, effects = run(state, bl.AddEntryFailed(0, "PersistenceError", "bookie down"))
    assert [(e.request_id, e.error.name) for e in effects] == [(0, "PersistenceError"), (1, "PersistenceError")]
    state, effects = run(state, bl.AddEntryComplete(1, Position(1, 0)))
    assert [e.request_id for e in effects] == [2, 3]
    assert (state.succeeded, state.failed) == (2, 2)


def test_bw17_ledger_answers_in_write_order_only() -> None:
    """BW-17."""
    state, _ = run(writer(max_records=1, enabled=False), add(4, 0), add(4, 1))
    with pytest.raises(ValueError, match="out of order"):
        bl.step(state, bl.AddEntryComplete(1, Position(1, 0)))


def test_bw17_close_failures_may_precede_in_flight_successes() -> None:
    """BW-17."""
    state, _ = run(writer(max_records=2), add(4, 0), add(4, 1), add(4, 2), bl.Close())
    state, effects = run(state, bl.FinishClose())
    assert [e.request_id for e in effects if isinstance(e, bl.AddFailed)] == [2]
    state, effects = run(state, bl.AddEntryComplete(0, Position(1, 0)))
    assert [e.request_id for e in effects] == [0, 1]
    assert state.next_request_id == state.succeeded + state.failed


# --- BW-18: close ------------------------------------------------------------------------------------


def test_bw18_close_fails_buffer_cancels_timer_keeps_in_flight() -> None:
    """BW-18."""
    state, _ = run(writer(max_records=2), add(4, 0), add(4, 1), add(4, 2))
    state, effects = run(state, bl.Close())
    assert effects == [] and state.status is bl.WriterStatus.CLOSING
    state, effects = run(state, bl.FinishClose())
    assert effects == [bl.AddFailed(2, effects[0].error), bl.CancelTimer()]
    assert state.in_flight and state.timer_due_ms is None


def test_bw18_unbatched_close_is_immediate() -> None:
    """BW-18."""
    state, effects = run(writer(enabled=False), bl.Close())
    assert state.status is bl.WriterStatus.CLOSED and effects == []


# --- BW-19: metrics -------------------------------------------------------------------------------------


def test_bw19_each_flush_counts_one_trigger() -> None:
    """BW-19: Fact sheet A.7 M5 arithmetic: maxRecords 2, 100 writes of 4 bytes."""
    state, _ = run(writer(max_records=2), *(add(4, i % 128) for i in range(100)))
    assert (state.stats.max_records, state.stats.max_size, state.stats.max_delay, state.stats.large_data) == (
        50,
        0,
        0,
        0,
    )
    assert (state.stats.batches, state.stats.records_sum, state.stats.bytes_sum) == (50, 100, 400)


def test_bw19_disabled_batching_records_nothing() -> None:
    """BW-19."""
    state, _ = run(writer(enabled=False), *(add(4, i % 128) for i in range(100)))
    assert state.stats == bl.FlushStats()


# --- BW-20, BW-21: deletion ----------------------------------------------------------------------------


def _written(max_records: int = 3, n: int = 3) -> tuple[bl.WriterState, list[Any]]:
    state, _ = run(writer(max_records=max_records), *(add(4, i) for i in range(n)))
    state, effects = run(state, bl.AddEntryComplete(0, Position(1, 0)))
    return state, [e.position for e in effects]


def test_bw20_delete_only_the_index_then_the_entry() -> None:
    """BW-20."""
    state, positions = _written()
    state, effects = run(state, bl.DeleteRecords((positions[1],)))
    assert effects == [bl.CursorDelete((bl.CursorDeleteEntry(Position(1, 0), (0b101,)),))]
    assert set(state.entries[Position(1, 0)].remaining) == {0, 2}
    state, _ = run(state, bl.DeleteRecords((positions[0], positions[2])))
    assert Position(1, 0) not in state.entries


@pytest.mark.parametrize(("size", "index"), [(10, 5), (64, 0), (64, 63), (230, 120), (256, 255)])
def test_bw20_ack_set_by_index(size: int, index: int) -> None:
    """BW-20: Catalogue C.1 10 (TxnBatchedPositionImplTest.testSetAckSetByIndex)."""
    from spec.types import words_to_bits

    bits = words_to_bits(BatchedPosition(1, 1, size, index).ack_set() or ())
    assert all((bits >> i & 1) == (i != index) for i in range(size)) and bits >> size == 0


def test_bw20_plain_position_or_batch_of_one_deletes_the_whole_entry() -> None:
    """BW-20."""
    state, _ = _written()
    state, effects = run(state, bl.DeleteRecords((Position(1, 0),)))
    assert effects == [bl.CursorDelete((bl.CursorDeleteEntry(Position(1, 0), None),))]
    assert not state.entries


def test_bw21_deletes_must_name_live_entries_with_their_batch_size() -> None:
    """BW-21."""
    state, positions = _written()
    for bad in (BatchedPosition(1, 0, 4, 1), Position(9, 9)):
        after, result = bl.step(state, bl.DeleteRecords((bad,)))
        assert after is state and not result.ok and result.error.name == "NotAllowed"
    state, _ = run(state, bl.DeleteRecords((positions[1],)))
    state2, _ = run(state, bl.DeleteRecords((positions[1],)))  # twice is harmless
    assert state2.entries == state.entries


def test_bw21_batched_and_plain_positions_are_the_same_key() -> None:
    """BW-21: Catalogue C.1 11 and 12."""
    batched, plain = BatchedPosition(1, 1, 2, 0), Position(1, 1)
    assert batched == plain and plain == batched and hash(batched) == hash(plain)
    assert not batched < plain and not plain < batched
    assert {plain: "x"}[batched] == "x"


# --- BW-22: the switch --------------------------------------------------------------------------------


def test_bw22_switch_off_writes_buffer_and_cancels_timer_then_on_rearms() -> None:
    """BW-22."""
    state, _ = run(writer(), add(4, 0), add(4, 1))
    state, effects = run(state, bl.SetBatchedWrite(False, 3))
    (write,) = writes(effects)
    assert write.batched and write.request_ids == (0, 1) and bl.CancelTimer() in effects
    assert not observed(effects)
    state, effects = run(state, add(4, 2))
    assert not writes(effects)[0].batched
    state, effects = run(state, bl.SetBatchedWrite(True, 10))
    assert effects == [bl.ArmTimer(11)]


def test_bw22_disabling_keeps_batched_entries_readable() -> None:
    """BW-22."""
    _state, effects = run(writer(max_records=2), add(4, 0), add(4, 1), bl.SetBatchedWrite(False), add(4, 2))
    log = [bl.LoggedEntry(Position(1, i), w.data) for i, w in enumerate(writes(effects))]
    assert [r.record.txnid_least_bits for r in bl.replay(TC, log)] == [0, 1, 2]


# --- BW-23, BW-24: reading ------------------------------------------------------------------------------


def test_bw23_mixed_ledger_reads_both_kinds() -> None:
    """BW-23."""
    plain = bl.sample_record(6, 9)
    batch = encode_batch([tc_pb.TransactionMetadataEntry.FromString(bl.sample_record(4, i)) for i in range(3)], TC)
    log = [
        bl.LoggedEntry(Position(1, 0), plain),
        bl.LoggedEntry(Position(1, 1), batch),
        bl.LoggedEntry(Position(2, 0), plain),
    ]
    positions = [r.position for r in bl.replay(TC, log)]
    assert positions == [Position(1, 0), *[BatchedPosition(1, 1, 3, i) for i in range(3)], Position(2, 0)]
    assert isinstance(positions[0], Position) and not isinstance(positions[0], BatchedPosition)


def test_bw23_unknown_version_is_rejected() -> None:
    """BW-23."""
    data = b"\x0e\x01\x00\x02" + encode_batch([], TC)[4:]
    with pytest.raises(UnsupportedVersion):
        bl.read_entry(TC, Position(1, 0), data)


@given(st.lists(st.integers(0, 127), max_size=20), st.sampled_from(list(LogKind)))
def test_bw23_decode_encode_roundtrip(seqs: list[int], kind: LogKind) -> None:
    """BW-23."""
    sizes = (4, 34, 127, 200, 1024)  # one- and two-byte length varints
    records = [kind.record_type.FromString(bl.sample_record(sizes[s % 5], s, kind)) for s in seqs]
    decoded = decode_entry(encode_batch(records, kind), kind)
    assert decoded.batched and list(decoded.records) == records
    for record in records:
        assert not is_batched(encode_plain(record))


def test_bw24_replay_skips_deleted_indexes_and_unbatches_one() -> None:
    """BW-24."""
    batch = encode_batch([tc_pb.TransactionMetadataEntry.FromString(bl.sample_record(4, i)) for i in range(3)], TC)
    one = encode_batch([tc_pb.TransactionMetadataEntry.FromString(bl.sample_record(4, 7))], TC)
    empty = encode_batch([], TC)
    log = [
        bl.LoggedEntry(Position(1, 0), batch, (0b101,)),
        bl.LoggedEntry(Position(1, 1), one),
        bl.LoggedEntry(Position(1, 2), empty),
        bl.LoggedEntry(Position(1, 3), batch, deleted=True),
    ]
    assert [r.position for r in bl.replay(TC, log)] == [
        BatchedPosition(1, 0, 3, 0),
        BatchedPosition(1, 0, 3, 2),
        Position(1, 1),
    ]
    assert not isinstance(bl.replay(TC, log)[2].position, BatchedPosition)


# --- BW-25, BW-26: recovery and ledger roll ----------------------------------------------------------------


def test_bw25_recovery_rebuilds_durable_entries_only() -> None:
    """BW-25."""
    state, positions = _written(max_records=3, n=5)  # two records still buffered
    state, _ = run(state, bl.DeleteRecords((positions[0],)))
    log = [
        bl.LoggedEntry(
            Position(1, 0),
            encode_batch([tc_pb.TransactionMetadataEntry.FromString(bl.sample_record(4, i)) for i in range(3)], TC),
            (0b110,),
        )
    ]
    recovered = bl.recover(
        Config().with_overrides({"transactionLogBatchedWriteEnabled": True, "transactionLogBatchedWriteMaxRecords": 3}),
        log,
        TC,
    )
    assert recovered.entries == state.entries
    assert not recovered.buffer and recovered.next_request_id == 0 and recovered.timer_due_ms == 1


def test_bw26_already_closed_ledger_rolls_before_the_next_write() -> None:
    """BW-26."""
    from engine.simulated.faults import FaultyLedger
    from engine.storage.batched_writer import BatchedLogWriter, WriteFailed
    from engine.storage.memory_ledger import MemoryLedger

    ledger = FaultyLedger(MemoryLedger("bw26"), roll_after_append_failure=True)
    ledger.fail_appends(1)
    w = BatchedLogWriter(ledger, bl.writer_config(Config(), TC))
    try:
        futures = [w.add(bl.sample_record(4, i)) for i in range(3)]
        errors = []
        for future in futures[:2]:
            with pytest.raises(WriteFailed) as failed:
                future.result(timeout=10)
            errors.append(failed.value.error.name)
        assert errors == ["PersistenceError", "ManagedLedgerAlreadyClosed"]
        position = futures[2].result(timeout=10)
        assert w.ledger_rolls == 1 and position.ledger_id > 0
    finally:
        w.close()


def test_results_are_values_not_exceptions() -> None:
    _state, result = bl.step(writer(), add())
    assert isinstance(result, Ok) and result.value == bl.AddAccepted(0)


def test_bw24_read_entry_gives_a_plain_entry_its_plain_position_and_a_batch_its_indexes() -> None:
    """BW-23, BW-24: one record at the entry's position for a plain entry; for a batch, the records
    whose bits are still set, at their batch positions."""
    plain = bl.sample_record(6, 9)
    (only,) = bl.read_entry(TC, Position(1, 0), plain)
    assert only.position == Position(1, 0) and not isinstance(only.position, BatchedPosition)
    batch = encode_batch([tc_pb.TransactionMetadataEntry.FromString(bl.sample_record(4, i)) for i in range(3)], TC)
    assert [r.position for r in bl.read_entry(TC, Position(1, 1), batch)] == [
        BatchedPosition(1, 1, 3, i) for i in range(3)
    ]
    assert [r.position for r in bl.read_entry(TC, Position(1, 1), batch, ack_set=(0b101,))] == [
        BatchedPosition(1, 1, 3, 0),
        BatchedPosition(1, 1, 3, 2),
    ]


def test_bw25_recovery_keeps_the_batch_indexes_not_deleted() -> None:
    """BW-25: the recovered writer knows each durable entry and which of its indexes are left."""
    batch = encode_batch([tc_pb.TransactionMetadataEntry.FromString(bl.sample_record(4, i)) for i in range(3)], TC)
    plain = bl.sample_record(6, 9)
    log = [
        bl.LoggedEntry(Position(1, 0), batch, (0b110,)),
        bl.LoggedEntry(Position(1, 1), plain),
        bl.LoggedEntry(Position(1, 2), batch),
    ]
    state = bl.recover_for(bl.writer_config(Config(), TC), log)
    assert list(state.entries[Position(1, 0)].remaining) == [1, 2]
    assert list(state.entries[Position(1, 2)].remaining) == [0, 1, 2]
    assert state.entries[Position(1, 1)].batched is False and list(state.entries[Position(1, 1)].remaining) == [0]


def test_bw25_a_recover_row_states_the_recovered_writer_and_rebuilds_it() -> None:
    """BW-25 as a history states it (format version 5): the writer's settings and the live entries it
    recovered, which the model's recovery rebuilds into the same state; entries that no batch could
    hold are refused."""
    from spec.history import state_digest
    from spec.jsonvalues import JsonError

    batch = encode_batch([tc_pb.TransactionMetadataEntry.FromString(bl.sample_record(4, i)) for i in range(3)], TC)
    log = [bl.LoggedEntry(Position(1, 0), batch, (0b110,)), bl.LoggedEntry(Position(1, 1), bl.sample_record(6, 9))]
    state = bl.recover(Config(), log, TC, now_ms=40, enabled=True)
    inputs = bl.recovery_inputs(state, 40)
    assert inputs == {
        "kind": "TRANSACTION_LOG",
        "now_ms": 40,
        "enabled": True,
        "entries": [[[1, 0], 3, True, [1, 2]], [[1, 1], 1, False, [0]]],
    }
    assert bl.VECTORS.recover is not None and bl.VECTORS.recovery_rule == "BW-25"
    rebuilt = bl.VECTORS.recover(Config(), inputs)
    assert rebuilt == state and state_digest(rebuilt) == state_digest(state)
    for entries in ([[[1, 0], 3, True, [3]]], [[[1, 0], 0, True, []]], [[[1, 0], 2, True, []]]):
        with pytest.raises(ValueError, match="live indexes"):
            bl.VECTORS.recover(Config(), {**inputs, "entries": entries})
    with pytest.raises(JsonError):
        bl.VECTORS.recover(Config(), {**inputs, "entries": [["1:0", 3, True, [1]]]})
    with pytest.raises(KeyError, match="unknown recovery input"):
        bl.VECTORS.recover(Config(), {**inputs, "log": []})
    with pytest.raises(ValueError, match="is not a log kind"):
        bl.VECTORS.recover(Config(), {**inputs, "kind": "DELAYED_INDEX"})
