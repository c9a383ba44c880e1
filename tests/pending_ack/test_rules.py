"""Examples and edge cases for each rule of spec/rules/pending_ack.md (scenarios live in the vectors)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from invariants.base import violated
from invariants.pending_ack import INVARIANTS
from reference.pending_ack import (
    AbortTxn,
    AckedPosition,
    AppendPendingAckRecord,
    ClosePendingAckHandle,
    CommitTxn,
    CumulativeAck,
    CursorCumulativeAck,
    CursorIndividualAck,
    CursorView,
    HandleState,
    Ignored,
    IndividualAck,
    InitPendingAckStore,
    NormalAck,
    PendingAckInitComplete,
    PendingAckInitFailed,
    PendingAckOp,
    PendingAckRecord,
    PendingAckState,
    PositionInPendingAck,
    Queued,
    RedeliverUnacknowledgedMessages,
    ResetCursor,
    ResetSubscriptionCursor,
    RetryPendingAckInit,
    ScheduleInitRetry,
    SubType,
    TrimPendingAckLog,
    check_position_in_pending_ack_state,
    initial,
    log_index_lag_backoff,
    message_state,
    pending_ack_view,
    recover,
    step,
    surviving_records,
    txn_positions,
)
from spec.config import Config
from spec.errors import BadRecord, NotAllowed, ServiceUnitNotReady, TransactionConflict
from spec.pb import TransactionPendingAck_pb2 as pb
from spec.result import Effect, Err, Ok
from spec.types import AckType, MessageState, Position, TxnID

PENDING, PENDING_ACK, DELETED = MessageState.PENDING, MessageState.PENDING_ACK, MessageState.DELETED
T1, T2, T3 = TxnID(1, 1), TxnID(1, 2), TxnID(1, 3)


def m(e: int) -> Position:
    return Position(0, e)


def whole(e: int, batch_size: int = 1) -> AckedPosition:
    return AckedPosition(m(e), None, batch_size)


def idx(e: int, size: int, *indexes: int) -> AckedPosition:
    return AckedPosition.of_indexes(m(e), size, indexes)


class Run:
    """A subscription driven step by step, keeping every effect (the log is what survives)."""

    def __init__(self, state: PendingAckState | None = None, config: Config | None = None) -> None:
        self.config = config or Config()
        self.state = state or replace(initial(self.config), handle_state=HandleState.READY)
        self.effects: list[Effect] = []

    def __call__(self, command: Any) -> Ok[Any] | Err:
        self.state, result = step(self.state, command)
        self.effects.extend(result.effects)
        assert violated(INVARIANTS, self.state) == []
        return result

    def restart(self) -> PendingAckState:
        recovered = recover(
            self.config,
            surviving_records(self.effects),
            cursor=self.state.cursor,
            sub_type=self.state.sub_type,
            log_mark_delete=self.state.log_mark_delete,
            next_record_id=self.state.next_record_id,
        )
        assert pending_ack_view(recovered) == pending_ack_view(self.state)
        self.state = recovered
        return recovered

    def state_of(self, e: int, batch_index: int | None = None) -> MessageState:
        return message_state(self.state, m(e), batch_index)


def conflict(result: Ok[Any] | Err) -> bool:
    return isinstance(result, Err) and isinstance(result.error, TransactionConflict)


# --- PA-1, PA-2, PA-3 ---------------------------------------------------------------------------


def test_pa1_states_are_read_from_cursor_then_pending_maps() -> None:
    run = Run()
    run(NormalAck(AckType.INDIVIDUAL, (whole(1),)))
    run(IndividualAck(T1, (whole(2), idx(3, 4, 1))))
    run(CumulativeAck(T2, (whole(6),)))
    assert run.state_of(1) is DELETED
    assert run.state_of(2) is PENDING_ACK
    assert run.state_of(3) is PENDING_ACK and run.state_of(3, 1) is PENDING_ACK and run.state_of(3, 0) is PENDING_ACK
    assert run.state_of(7) is PENDING
    # Entries 3 (index 0), 4 and 5 lie under T2's cumulative pending ack.
    assert run.state_of(4) is PENDING_ACK and run.state_of(6) is PENDING_ACK


def test_pa1_a_batch_entry_is_deleted_only_whole() -> None:
    run = Run()
    run(NormalAck(AckType.INDIVIDUAL, (idx(3, 3, 0),)))
    assert run.state_of(3, 0) is DELETED and run.state_of(3, 1) is PENDING and run.state_of(3) is PENDING
    run(NormalAck(AckType.INDIVIDUAL, (idx(3, 3, 1, 2),)))
    assert run.state_of(3) is DELETED and run.state_of(3, 2) is DELETED


def test_pa2_ack_set_words_and_padding() -> None:
    acked = idx(0, 5, 0)
    assert acked.ack_set == (30,)
    assert acked.acked == 0b1
    # Bits from the batch size up are padding: a word with them cleared still acks index 0 only.
    assert AckedPosition(m(0), (0b11110,), 5).acked == AckedPosition(m(0), (0b11110 | (1 << 63) - (1 << 62),), 5).acked
    assert whole(0, 5).acked is None
    # 64 messages fill one word; Java prints the word signed.
    assert idx(0, 64, 63).ack_set == ((1 << 63) - 1,)
    assert idx(0, 64, 0).ack_set == (-2,)


def test_pa3_deleted_is_absorbing_for_every_command() -> None:
    run = Run()
    run(IndividualAck(T1, (whole(1),)))
    run(CommitTxn(T1))
    for command in (
        IndividualAck(T2, (whole(1),)),
        CumulativeAck(T2, (whole(3),)),
        AbortTxn(T2),
        AbortTxn(T1),
        NormalAck(AckType.INDIVIDUAL, (whole(1),)),
        CommitTxn(T2),
    ):
        run(command)
        assert run.state_of(1) is DELETED


def test_pa3_contiguous_deletes_fold_into_the_mark_delete_position() -> None:
    run = Run()
    run(IndividualAck(T1, (whole(1), whole(0))))
    run(CommitTxn(T1))
    assert run.state.cursor.mark_delete_position == m(1)
    assert run.state.cursor.individually_deleted == frozenset()


# --- PA-4 .. PA-8: individual txn acks -----------------------------------------------------------


def test_pa4_an_accepted_ack_is_logged_before_it_is_applied() -> None:
    run = Run()
    result = run(IndividualAck(T1, (whole(1), idx(2, 4, 1))))
    assert isinstance(result, Ok)
    (append,) = result.effects
    assert isinstance(append, AppendPendingAckRecord)
    assert append.record == PendingAckRecord(PendingAckOp.ACK, AckType.INDIVIDUAL, T1, (whole(1), idx(2, 4, 1)))


def test_pa4_an_empty_request_is_logged_but_registers_nothing() -> None:
    run = Run()
    result = run(IndividualAck(T1, ()))
    assert isinstance(result, Ok) and len(result.effects) == 1
    assert run.state.txn_order == ()


def test_pa5_conflict_with_a_cursor_deletion() -> None:
    run = Run()
    run(NormalAck(AckType.CUMULATIVE, (whole(2),)))
    assert conflict(run(IndividualAck(T1, (whole(2),))))
    run(NormalAck(AckType.INDIVIDUAL, (idx(5, 4, 0),)))
    assert conflict(run(IndividualAck(T1, (idx(5, 4, 0, 1),))))
    assert isinstance(run(IndividualAck(T1, (idx(5, 4, 1),))), Ok)


def test_pa5_whole_entry_ack_of_a_partly_deleted_batch_is_accepted() -> None:
    run = Run()
    run(NormalAck(AckType.INDIVIDUAL, (idx(5, 4, 0),)))
    assert isinstance(run(IndividualAck(T1, (whole(5, 4),))), Ok)
    assert run.state_of(5, 0) is DELETED and run.state_of(5, 1) is PENDING_ACK
    run(CommitTxn(T1))
    assert run.state_of(5) is DELETED


def test_pa6_same_txn_acking_twice_conflicts_with_itself() -> None:
    run = Run()
    run(IndividualAck(T1, (whole(1),)))
    assert conflict(run(IndividualAck(T1, (whole(1),))))


def test_pa6_different_indexes_of_one_batch_for_different_txns() -> None:
    run = Run()
    assert isinstance(run(IndividualAck(T1, (idx(3, 5, 0),))), Ok)
    assert isinstance(run(IndividualAck(T2, (idx(3, 5, 1),))), Ok)
    assert conflict(run(IndividualAck(T3, (idx(3, 5, 1, 2),))))
    assert conflict(run(IndividualAck(T3, (whole(3, 5),))))


def test_pa6_cumulative_pending_ack_does_not_lock_individual_acks_below_it() -> None:
    run = Run()
    run(CumulativeAck(T1, (whole(5),)))
    assert isinstance(run(IndividualAck(T2, (whole(3),))), Ok)


def test_pa7_one_conflict_fails_the_whole_request() -> None:
    run = Run()
    run(IndividualAck(T1, (whole(3),)))
    before = run.state
    result = run(IndividualAck(T2, (whole(1), whole(2), whole(3))))
    assert conflict(result) and result.effects == ()
    assert run.state == before
    assert run.state_of(1) is PENDING


def test_pa7_an_ack_set_acking_nothing_is_not_allowed() -> None:
    run = Run()
    result = run(IndividualAck(T1, (AckedPosition(m(1), (0b1111,), 4),)))
    assert isinstance(result, Err) and isinstance(result.error, NotAllowed)


def test_pa8_indexes_accumulate_and_txns_register_in_order() -> None:
    run = Run()
    run(IndividualAck(T2, (idx(3, 4, 0),)))
    run(IndividualAck(T1, (idx(3, 4, 2),)))
    run(IndividualAck(T2, (idx(3, 4, 1),)))
    assert txn_positions(run.state, T2) == ((m(3), 0b011),)
    assert run.state.individual_ack_positions[m(3)].acked == 0b111
    assert run.state.txn_order == (T2, T1)


# --- PA-9, PA-10: cumulative acks ------------------------------------------------------------------


def test_pa9_compare_with_ack_set_on_the_same_entry() -> None:
    run = Run()
    assert isinstance(run(CumulativeAck(T1, (idx(4, 4, 0, 1),))), Ok)
    assert conflict(run(CumulativeAck(T1, (idx(4, 4, 0, 1, 3),))))  # first unacked index is still 2
    assert isinstance(run(CumulativeAck(T1, (idx(4, 4, 0, 1, 2),))), Ok)
    assert isinstance(run(CumulativeAck(T1, (whole(4, 4),))), Ok)  # the whole entry sorts last
    assert conflict(run(CumulativeAck(T1, (whole(4, 4),))))


def test_pa9_slot_owner_and_mark_delete() -> None:
    run = Run()
    run(NormalAck(AckType.CUMULATIVE, (whole(2),)))
    assert conflict(run(CumulativeAck(T1, (whole(2),))))
    assert isinstance(run(CumulativeAck(T1, (whole(3),))), Ok)
    assert conflict(run(CumulativeAck(T2, (whole(9),))))


@pytest.mark.parametrize("sub_type", [SubType.Shared, SubType.Key_Shared])
def test_pa10_cumulative_acks_ignored_on_shared_subscriptions(sub_type: SubType) -> None:
    run = Run(replace(initial(Config(), sub_type=sub_type), handle_state=HandleState.READY))
    for command in (CumulativeAck(T1, (whole(3),)), NormalAck(AckType.CUMULATIVE, (whole(3),))):
        result = run(command)
        assert isinstance(result, Ok) and isinstance(result.value, Ignored) and result.effects == ()
    assert run.state_of(3) is PENDING


def test_pa10_cumulative_ack_with_several_ids_is_ignored() -> None:
    run = Run()
    result = run(CumulativeAck(T1, (whole(1), whole(2))))
    assert isinstance(result, Ok) and isinstance(result.value, Ignored)
    # Even before the handle exists: the Consumer layer answers first.
    lazy = Run(initial(Config()))
    result = lazy(CumulativeAck(T1, ()))
    assert isinstance(result.value, Ignored) and lazy.state.handle_state is HandleState.NONE


# --- PA-11: normal acks ----------------------------------------------------------------------------


def test_pa11_normal_ack_of_a_pending_batch_index_takes_it_from_the_txn() -> None:
    run = Run()
    run(IndividualAck(T1, (idx(3, 4, 0, 1),)))
    result = run(NormalAck(AckType.INDIVIDUAL, (idx(3, 4, 0),)))
    assert result.effects == (CursorIndividualAck((idx(3, 4, 0),)),)
    assert run.state_of(3, 0) is DELETED and run.state_of(3, 1) is PENDING_ACK
    assert txn_positions(run.state, T1) == ((m(3), 0b10),)


def test_pa11_cursor_taking_every_ack_forgets_the_txn() -> None:
    run = Run()
    run(IndividualAck(T1, (whole(1), whole(2))))
    run(NormalAck(AckType.CUMULATIVE, (whole(2),)))
    assert len(run.state.individual_ack_of_transaction) == 0
    result = run(AbortTxn(T1))
    assert not any(isinstance(e, RedeliverUnacknowledgedMessages) for e in result.effects)


def test_pa11_a_committed_cumulative_range_takes_other_txns_acks() -> None:
    run = Run()
    run(IndividualAck(T2, (whole(2), whole(7))))
    run(CumulativeAck(T1, (whole(4),)))
    run(CommitTxn(T1))
    assert txn_positions(run.state, T2) == ((m(7), None),)


# --- PA-12, PA-13, PA-14: commit, abort, low watermark -----------------------------------------------


def test_pa12_commit_acks_the_cursor_with_ack_sets() -> None:
    run = Run()
    run(IndividualAck(T1, (whole(1), idx(3, 4, 2))))
    result = run(CommitTxn(T1))
    assert CursorIndividualAck((whole(1), idx(3, 4, 2))) in result.effects
    assert run.state_of(3, 2) is DELETED and run.state_of(3, 1) is PENDING


def test_pa12_commit_of_cumulative_batch_slot_moves_mark_delete_to_previous_entry() -> None:
    run = Run()
    run(CumulativeAck(T1, (idx(4, 4, 0, 1),)))
    result = run(CommitTxn(T1))
    assert CursorCumulativeAck(idx(4, 4, 0, 1)) in result.effects
    assert run.state.cursor.mark_delete_position == m(3)
    assert run.state_of(4, 1) is DELETED and run.state_of(4, 2) is PENDING


def test_pa12_q3_owner_of_slot_also_commits_its_individual_acks() -> None:
    run = Run()
    run(CumulativeAck(T1, (whole(3),)))
    run(IndividualAck(T1, (whole(8),)))
    result = run(CommitTxn(T1))
    ops = [(e.record.op, e.record.ack_type) for e in result.effects if isinstance(e, AppendPendingAckRecord)]
    assert ops == [(PendingAckOp.COMMIT, AckType.CUMULATIVE), (PendingAckOp.COMMIT, AckType.INDIVIDUAL)]
    assert run.state_of(8) is DELETED and run.state_of(3) is DELETED


def test_pa13_abort_reverts_only_its_own_indexes() -> None:
    run = Run()
    run(IndividualAck(T1, (idx(3, 4, 0),)))
    run(IndividualAck(T2, (idx(3, 4, 1),)))
    result = run(AbortTxn(T1))
    assert RedeliverUnacknowledgedMessages((m(3),)) in result.effects
    assert run.state_of(3, 0) is PENDING and run.state_of(3, 1) is PENDING_ACK
    assert run.state.individual_ack_positions[m(3)].acked == 0b10


def test_pa13_abort_with_slot_of_another_txn_logs_abort_cumulative() -> None:
    run = Run()
    run(CumulativeAck(T1, (whole(3),)))
    result = run(AbortTxn(T2))
    assert [e.record.ack_type for e in result.effects if isinstance(e, AppendPendingAckRecord)] == [AckType.CUMULATIVE]
    assert run.state.cumulative_ack is not None and run.state.cumulative_ack.txn_id == T1


def test_pa14_low_watermark_chain_aborts_consecutive_stale_txns() -> None:
    run = Run()
    a, b, c = TxnID(1, 0), TxnID(1, 1), TxnID(1, 5)
    run(IndividualAck(a, (whole(1),)))
    run(IndividualAck(b, (whole(2),)))
    run(IndividualAck(c, (whole(3),)))
    run(IndividualAck(TxnID(1, 4), (whole(4),)))
    run(CommitTxn(TxnID(1, 4), low_water_mark=2))
    assert run.state.txn_order == (c,)
    assert run.state_of(1) is PENDING and run.state_of(2) is PENDING and run.state_of(3) is PENDING_ACK


def test_pa14_other_coordinators_watermarks_are_their_own() -> None:
    run = Run()
    other = TxnID(2, 0)
    run(IndividualAck(other, (whole(1),)))
    run(IndividualAck(T1, (whole(2),)))
    run(CommitTxn(T1, low_water_mark=9))
    assert run.state.txn_order == (other,)
    assert dict(run.state.low_water_marks.items()) == {1: 9}


def test_pa14_end_of_unknown_txn_does_not_touch_watermarks() -> None:
    run = Run()
    run(CommitTxn(T3, low_water_mark=9))
    assert len(run.state.low_water_marks) == 0


# --- PA-15, PA-16: the log ------------------------------------------------------------------------------


def test_pa15_records_round_trip_through_protobuf() -> None:
    record = PendingAckRecord(
        PendingAckOp.ACK, AckType.INDIVIDUAL, TxnID(7, 1 << 63), (whole(1), idx(2, 64, 0, 63), idx(3, 5, 4))
    )
    data = record.to_bytes()
    entry = pb.PendingAckMetadataEntry.FromString(data)
    assert entry.pending_ack_op == pb.ACK and entry.txnid_most_bits == 7
    assert list(entry.pending_ack_metadata[1].ack_set) == [(1 << 63) - 2]
    assert PendingAckRecord.from_bytes(data) == record


def test_pa15_a_record_without_op_is_bad_input() -> None:
    entry = pb.PendingAckMetadataEntry(txnid_most_bits=1, txnid_least_bits=1, ack_type=0)
    with pytest.raises(BadRecord):
        PendingAckRecord.from_pb(entry)
    with pytest.raises(BadRecord):
        PendingAckRecord.from_bytes(b"\xff\xff\xff")


def test_pa16_log_index_lag_backoff_values() -> None:
    # LogIndexLagBackOffTest.
    assert [log_index_lag_backoff(1, 10, 1, n) for n in (0, 6, 77)] == [1, 6, 10]
    assert log_index_lag_backoff(1, 10, 2, 3) == 9
    with pytest.raises(ValueError, match="min lag must be > 0"):
        log_index_lag_backoff(0, 10, 1, 1)
    with pytest.raises(ValueError, match="maxLag should be >= minLag"):
        log_index_lag_backoff(5, 1, 1, 1)
    with pytest.raises(ValueError):
        log_index_lag_backoff(1, 10, 0, 1)


def test_pa16_replay_builds_the_sparse_index() -> None:
    # MLPendingAckStoreTest: 100 single-record entries acking position i, minLag 10.
    config = Config().with_overrides({"transactionPendingAckLogIndexMinLag": 10})
    records = [
        (i, PendingAckRecord(PendingAckOp.ACK, AckType.INDIVIDUAL, TxnID(1, i), (whole(i),))) for i in range(100)
    ]
    state = recover(config, records, cursor=CursorView(Position(0, -1)))
    assert [(k.entry_id, v) for k, v in state.log_index] == [(9, 9), (19, 19), (39, 39), (69, 69)]


def test_pa16_trim_effect_names_the_last_popped_record() -> None:
    run = Run(config=Config().with_overrides({"transactionPendingAckLogIndexMinLag": 1}))
    run(IndividualAck(T1, (whole(0),)))
    run(CommitTxn(T1))
    result = run(IndividualAck(T2, (whole(1),)))
    assert TrimPendingAckLog(1) in result.effects
    assert run.state.log_mark_delete == 1
    run.restart()


# --- PA-17: the handle ------------------------------------------------------------------------------------


def test_pa17_lazy_init_queues_in_order() -> None:
    run = Run(initial(Config()))
    first = run(IndividualAck(T1, (whole(1),)))
    assert first == Ok(Queued(1), (InitPendingAckStore(),))
    assert run(CommitTxn(T1)) == Ok(Queued(2))
    result = run(PendingAckInitComplete())
    assert isinstance(result, Ok) and [type(o) for o in result.value] == [Ok, Ok]
    assert run.state_of(1) is DELETED


def test_pa17_retry_backoff_doubles() -> None:
    run = Run(initial(Config()))
    run(IndividualAck(T1, (whole(1),)))
    delays = []
    for _ in range(3):
        result = run(PendingAckInitFailed(retryable=True))
        (effect,) = result.effects
        assert isinstance(effect, ScheduleInitRetry)
        delays.append(effect.delay_ms)
        assert run(RetryPendingAckInit()).effects == (InitPendingAckStore(),)
    assert delays == [100, 200, 400]


def test_pa17_error_and_close() -> None:
    run = Run(initial(Config()))
    run(IndividualAck(T1, (whole(1),)))
    result = run(PendingAckInitFailed(retryable=False))
    assert isinstance(result, Ok) and isinstance(result.value[0].error, ServiceUnitNotReady)
    failed = run(AbortTxn(T1))
    assert isinstance(failed, Err) and "not replay error" in failed.error.message
    run(ClosePendingAckHandle())
    closed = run(IndividualAck(T1, (whole(1),)))
    assert isinstance(closed, Err) and "have been closed" in closed.error.message


def test_pa17_out_of_order_lifecycle_events_are_refused() -> None:
    run = Run()
    assert isinstance(run(PendingAckInitComplete()), Err)
    assert isinstance(run(RetryPendingAckInit()), Err)
    assert isinstance(run(PendingAckInitFailed(True)), Err)


# --- PA-18 .. PA-21: replay and the admin check ----------------------------------------------------------


def test_pa18_q2_commit_cumulative_of_non_owner_is_ignored_at_replay() -> None:
    records = [
        (0, PendingAckRecord(PendingAckOp.ACK, AckType.CUMULATIVE, T1, (whole(5),))),
        (1, PendingAckRecord(PendingAckOp.COMMIT, AckType.CUMULATIVE, T2)),
    ]
    state = recover(Config(), records, cursor=CursorView())
    assert state.cumulative_ack is not None and state.cumulative_ack.txn_id == T1
    assert state.cursor.mark_delete_position == Position(0, -1)


def test_pa18_replay_can_be_left_initializing() -> None:
    state = recover(Config(), [], cursor=CursorView(), ready=False)
    assert state.handle_state is HandleState.INITIALIZING
    state, result = step(state, IndividualAck(T1, (whole(1),)))
    assert result == Ok(Queued(1))


def test_pa19_replay_after_normal_ack_keeps_the_other_positions() -> None:
    # Pulsar rejects the whole record at replay (position 1 is deleted) and loses position 2.
    run = Run()
    run(IndividualAck(T1, (whole(1), whole(2))))
    run(NormalAck(AckType.INDIVIDUAL, (whole(1),)))
    recovered = run.restart()
    assert message_state(recovered, m(2)) is PENDING_ACK


def test_pa19_replay_keeps_the_batch_indexes_the_cursor_did_not_delete_since() -> None:
    # A normal ack took index 1 of the txn's batch ack (PA-11); at replay the record's indexes lose
    # the deleted one and the rest is held again (mutation flip pending_ack:345 skips that rest).
    run = Run()
    run(IndividualAck(T1, (idx(3, 4, 1, 2),)))
    run(NormalAck(AckType.INDIVIDUAL, (idx(3, 4, 1),)))
    recovered = run.restart()
    assert message_state(recovered, m(3), 2) is PENDING_ACK
    assert message_state(recovered, m(3), 1) is DELETED


def test_pa19_replay_of_a_rejected_cumulative_ack_cannot_happen() -> None:
    run = Run()
    run(CumulativeAck(T1, (whole(4),)))
    assert conflict(run(CumulativeAck(T2, (whole(7),))))
    run(CommitTxn(T1))
    assert run.restart().cumulative_ack is None


def test_pa20_watermarks_and_order_are_not_restored() -> None:
    run = Run()
    run(IndividualAck(T1, (whole(1),)))
    run(IndividualAck(T2, (whole(2),)))
    run(CommitTxn(T2, low_water_mark=0))
    assert dict(run.state.low_water_marks.items()) == {1: 0}
    recovered = run.restart()
    assert len(recovered.low_water_marks) == 0


def test_pa21_admin_check_position() -> None:
    run = Run()
    assert check_position_in_pending_ack_state(initial(Config()), m(1)) is PositionInPendingAck.PendingAckNotReady
    run(NormalAck(AckType.CUMULATIVE, (whole(1),)))
    run(IndividualAck(T1, (idx(3, 4, 2),)))
    run(CumulativeAck(T2, (whole(6),)))
    check = check_position_in_pending_ack_state
    assert check(run.state, m(1)) is PositionInPendingAck.MarkDelete
    assert check(run.state, m(3), 2) is PositionInPendingAck.PendingAck
    assert check(run.state, m(3), 1) is PositionInPendingAck.NotInPendingAck
    assert check(run.state, m(3), 4) is PositionInPendingAck.InvalidPosition
    assert check(run.state, m(5)) is PositionInPendingAck.NotInPendingAck  # cumulative acks are not consulted


def test_pa15_a_log_record_round_trips_through_its_proto_with_every_position() -> None:
    """PA-15: every position of a record, whole entries and batch ack sets, survives to_pb/from_pb
    (what replay reads after a restart, PA-18)."""
    record = PendingAckRecord(
        PendingAckOp.ACK, AckType.INDIVIDUAL, T1, (whole(1), idx(2, 4, 1), AckedPosition(Position(3, 0)))
    )
    back = PendingAckRecord.from_pb(pb.PendingAckMetadataEntry.FromString(record.to_pb().SerializeToString()))
    assert back == record
    assert [p.position for p in back.positions] == [m(1), m(2), Position(3, 0)]


# --- PA-22: seek --------------------------------------------------------------------------------


def test_pa22_a_seek_back_makes_acknowledged_messages_pending_again_and_trims_the_log() -> None:
    run = Run()
    run(NormalAck(AckType.CUMULATIVE, (whole(3),)))
    run(NormalAck(AckType.INDIVIDUAL, (whole(5), idx(6, 3, 0))))
    run(IndividualAck(T1, (whole(7),)))
    run(CommitTxn(T1, -1))  # the log holds T1's ACK and COMMIT records
    assert run.state_of(7) is DELETED
    result = run(ResetCursor(m(1), idx(2, 4, 0, 1)))
    assert isinstance(result, Ok)
    assert result.effects == (TrimPendingAckLog(1), ResetSubscriptionCursor(m(1), idx(2, 4, 0, 1)))
    assert [run.state_of(e) for e in (1, 3, 5, 6, 7)] == [DELETED, PENDING, PENDING, PENDING, PENDING]
    assert run.state_of(2, 0) is DELETED and run.state_of(2, 2) is PENDING
    # A restart replays nothing: T1's commit does not delete entry 7 again (PA-19 stays exact).
    assert surviving_records(run.effects) == []
    run.restart()
    assert run.state_of(7) is PENDING
    # The usual rules apply after it: acks delete again, txns ack again.
    assert isinstance(run(IndividualAck(T2, (whole(7),))), Ok)
    assert run.state_of(7) is PENDING_ACK


def test_pa22_a_seek_forward_deletes_everything_before_it() -> None:
    run = Run()
    result = run(ResetCursor(m(4)))
    assert isinstance(result, Ok) and run.state.cursor.mark_delete_position == m(4)
    assert run.state_of(4) is DELETED and run.state_of(5) is PENDING
    assert result.effects == (ResetSubscriptionCursor(m(4), None),)


def test_pa22_a_seek_is_refused_while_a_txn_holds_a_pending_ack() -> None:
    run = Run()
    run(IndividualAck(T1, (whole(2),)))
    before = run.state
    refused = run(ResetCursor(m(0)))
    assert isinstance(refused, Err) and isinstance(refused.error, NotAllowed)
    assert "(1,1)" in (refused.error.message or "")
    assert run.state == before
    run(AbortTxn(T1, -1))
    assert isinstance(run(ResetCursor(m(0))), Ok)
    # A cumulative pending ack blocks it too.
    run(CumulativeAck(T2, (whole(4),)))
    assert isinstance(run(ResetCursor(m(-1))), Err)
    run(CommitTxn(T2, -1))
    assert isinstance(run(ResetCursor(m(-1))), Ok)
    assert run.state_of(0) is PENDING


def test_pa22_a_seek_waits_for_no_handle_and_fails_on_a_broken_one() -> None:
    fresh = Run(initial(Config()))  # no pending-ack log yet: the handle is None
    assert isinstance(fresh(ResetCursor(m(2))), Ok)
    queued = Run(initial(Config()))
    queued(IndividualAck(T1, (whole(3),)))  # starts the lazy init; the ack waits
    refused = queued(ResetCursor(m(0)))
    assert isinstance(refused, Err) and isinstance(refused.error, NotAllowed)
    closed = Run()
    closed(ClosePendingAckHandle())
    refused = closed(ResetCursor(m(0)))
    assert isinstance(refused, Err) and isinstance(refused.error, ServiceUnitNotReady)


def test_pa11_an_individual_commit_that_reaches_another_txns_cumulative_slot_drops_it() -> None:
    """An individual ack is checked against the individual acks only (PA-6), so T2 may hold the
    entry T1's cumulative slot names.  T2's commit deletes it, the mark-delete position reaches the
    slot, and the cursor wins (PA-11): the slot goes, and another txn may ack cumulatively past it.
    A slot left behind would refuse that ack as held by T1 (mutation flip pending_ack:411, which no
    history of the main job shows: there the mark-delete position rarely sits just below the slot)."""
    run = Run()
    assert isinstance(run(CumulativeAck(T1, (whole(1),))), Ok)
    assert isinstance(run(IndividualAck(T2, (whole(0), whole(1)))), Ok)
    run(CommitTxn(T2))
    assert run.state.cursor.mark_delete_position == m(1)
    assert run.state.cumulative_ack is None
    assert isinstance(run(CumulativeAck(T3, (whole(2),))), Ok)
