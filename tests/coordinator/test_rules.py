"""Examples and edge cases of each coordinator rule (TC-1 .. TC-28)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from invariants.base import violated
from invariants.coordinator import INVARIANTS
from reference import coordinator as tc
from spec.config import Config
from spec.errors import BadRecord
from spec.pb import PulsarTransactionMetadata_pb2
from spec.result import Effect, Err, Ok
from spec.types import Subscription, TxnAction, TxnID, TxnStatus

CONFIG = Config()
COMMIT, ABORT = TxnAction.COMMIT, TxnAction.ABORT


def ok(state: tc.CoordinatorState, command: object) -> tuple[tc.CoordinatorState, Ok[object]]:
    after, result = tc.step(state, command)  # type: ignore[arg-type]
    assert isinstance(result, Ok), result
    assert violated(INVARIANTS, after) == []
    return after, result


def err(state: tc.CoordinatorState, command: object, name: str) -> Err:
    after, result = tc.step(state, command)  # type: ignore[arg-type]
    assert isinstance(result, Err), result
    assert result.error.name == name, result
    assert after == state  # a rejected command changes nothing
    return result


def new_txn(
    state: tc.CoordinatorState, timeout_ms: int = 60_000, now: int = 1_000, owner: str | None = None
) -> tuple[tc.CoordinatorState, TxnID]:
    state, result = ok(state, tc.NewTxn(timeout_ms, now, owner))
    assert isinstance(result.value, TxnID)
    return state, result.value


def of(effects: Iterable[Effect], kind: type) -> list[object]:
    return [e for e in effects if isinstance(e, kind)]


def end(state: tc.CoordinatorState, txn: TxnID, action: TxnAction = COMMIT, now: int = 2_000) -> tc.CoordinatorState:
    state, _ = ok(state, tc.EndTxn(txn, action, now))
    state, _ = ok(state, tc.EndTxnInTransactionBufferResult(txn, action, now))
    return state


# --- TC-1, TC-2 ----------------------------------------------------------------------------------


# Rules: TC-1
def test_tc1_lifecycle_none_initializing_ready_closing_close() -> None:
    s = tc.initial(CONFIG, 3, tc.StoreState.NONE)
    err(s, tc.ReplayComplete(), "TransactionMetadataStoreState")
    s, _ = ok(s, tc.InitStore())
    assert s.store_state is tc.StoreState.INITIALIZING
    err(s, tc.InitStore(), "TransactionMetadataStoreState")
    s, _ = ok(s, tc.ReplayComplete())
    assert s.store_state is tc.StoreState.READY
    err(s, tc.TransactionLogClosed(), "TransactionMetadataStoreState")
    s, r = ok(s, tc.CloseStore())
    assert r.effects == (tc.CloseTransactionLog(),)
    err(s, tc.CloseStore(), "TransactionMetadataStoreState")
    s, _ = ok(s, tc.TransactionLogClosed())
    assert s.store_state is tc.StoreState.CLOSE
    err(s, tc.CloseStore(), "TransactionMetadataStoreState")
    err(s, tc.InitStore(), "TransactionMetadataStoreState")


# Rules: TC-1
@pytest.mark.parametrize("store_state", [tc.StoreState.NONE, tc.StoreState.INITIALIZING])
def test_tc1_close_from_none_and_initializing(store_state: tc.StoreState) -> None:
    s, _ = ok(tc.initial(CONFIG, 0, store_state), tc.CloseStore())
    assert s.store_state is tc.StoreState.CLOSING


# Rules: TC-2
@pytest.mark.parametrize(
    "store_state", [tc.StoreState.NONE, tc.StoreState.INITIALIZING, tc.StoreState.CLOSING, tc.StoreState.CLOSE]
)
def test_tc2_store_operations_need_ready_but_get_txn_meta_does_not(store_state: tc.StoreState) -> None:
    ready, txn = new_txn(tc.initial(CONFIG))
    s = replace(ready, store_state=store_state)
    err(s, tc.NewTxn(1000, 1), "TransactionMetadataStoreState")
    err(s, tc.AddPartitionToTxn(txn, ("p",), 2), "TransactionMetadataStoreState")
    err(s, tc.AddSubscriptionToTxn(txn, (Subscription("t", "s"),), 2), "TransactionMetadataStoreState")
    err(s, tc.UpdateTxnStatus(txn, TxnStatus.COMMITTING, TxnStatus.OPEN, 2), "TransactionMetadataStoreState")
    _, meta = ok(s, tc.GetTxnMeta(txn))
    assert isinstance(meta.value, tc.TxnMeta) and meta.value.status is TxnStatus.OPEN
    _, status = ok(s, tc.GetTxnStatus(txn))
    assert status.value is TxnStatus.OPEN


# --- TC-3, TC-4, TC-5 ----------------------------------------------------------------------------


# Rules: TC-3
def test_tc3_ids_are_coordinator_and_sequence_from_zero() -> None:
    s = tc.initial(CONFIG, 7)
    s, a = new_txn(s)
    s, b = new_txn(s)
    assert (a, b) == (TxnID(7, 0), TxnID(7, 1))
    assert s.sequence_id == 1


# Rules: TC-3
def test_tc3_a_txn_of_another_coordinator_is_coordinator_not_found() -> None:
    s, _ = new_txn(tc.initial(CONFIG, 1))
    for command in (
        tc.EndTxn(TxnID(2, 0), COMMIT, 5),
        tc.AddPartitionToTxn(TxnID(2, 0), ("p",), 5),
        tc.GetTxnMeta(TxnID(2, 0)),
        tc.UpdateTxnStatus(TxnID(2, 0), TxnStatus.ABORTING, TxnStatus.OPEN, 5),
    ):
        err(s, command, "CoordinatorNotFound")


# Rules: TC-4
def test_tc4_max_active_refuses_then_frees_a_slot() -> None:
    s = tc.initial(Config(max_active_transactions_per_coordinator=2))
    s, a = new_txn(s)
    s, _ = new_txn(s)
    err(s, tc.NewTxn(1000, 5), "ReachMaxActiveTxn")
    s = end(s, a)
    s, c = new_txn(s)
    assert c == TxnID(0, 2)
    err(s, tc.NewTxn(1000, 5), "ReachMaxActiveTxn")


# Rules: TC-4
def test_tc4_max_active_is_checked_before_ready() -> None:
    s = tc.initial(Config(max_active_transactions_per_coordinator=1))
    s, _ = new_txn(s)
    s, _ = ok(s, tc.CloseStore())
    err(s, tc.NewTxn(1000, 5), "ReachMaxActiveTxn")


# Rules: TC-5
def test_tc5_new_record_fields() -> None:
    s, r = ok(tc.initial(CONFIG, 4), tc.NewTxn(30_000, 1234, "alice"))
    (append,) = r.effects
    assert append == tc.AppendRecord(
        0,
        tc.TxnLogRecord(
            tc.TxnMetadataOp.NEW,
            TxnID(4, 0),
            timeout_ms=30_000,
            start_time=1234,
            last_modification_time=1234,
            max_local_txn_id=0,
            owner="alice",
        ),
    )
    meta = s.txns[0]
    assert (meta.status, meta.owner, meta.record_ids) == (TxnStatus.OPEN, "alice", (0,))


# Rules: TC-5
@pytest.mark.parametrize("owner", ["", "   "])
def test_tc5_blank_owner_is_illegal_and_consumes_no_sequence(owner: str) -> None:
    s = tc.initial(CONFIG)
    err(s, tc.NewTxn(1000, 1, owner), "IllegalArgument")
    _, txn = new_txn(s)
    assert txn == TxnID(0, 0)


# --- TC-6 .. TC-9 --------------------------------------------------------------------------------


# Rules: TC-6, TC-8
@pytest.mark.parametrize("new", list(TxnStatus))
@pytest.mark.parametrize("current", [TxnStatus.OPEN, TxnStatus.COMMITTING, TxnStatus.ABORTING])
def test_tc6_tc8_update_follows_the_table(current: TxnStatus, new: TxnStatus) -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    if current is not TxnStatus.OPEN:
        s, _ = ok(s, tc.UpdateTxnStatus(txn, current, TxnStatus.OPEN, 2))
    after, result = tc.step(s, tc.UpdateTxnStatus(txn, new, current, 3))
    allowed = {
        TxnStatus.OPEN: {TxnStatus.OPEN, TxnStatus.COMMITTING, TxnStatus.ABORTING},
        TxnStatus.COMMITTING: {TxnStatus.COMMITTING, TxnStatus.COMMITTED},
        TxnStatus.ABORTING: {TxnStatus.ABORTING, TxnStatus.ABORTED},
    }[current]
    if new in allowed:
        assert isinstance(result, Ok) and result.value is new
        assert tc.txn_status(after, txn) is (None if new.is_terminal else new)
    else:
        assert isinstance(result, Err) and result.error.name == "InvalidTxnStatus"
        assert after == s
        rid = s.next_record_id
        assert [type(e) for e in result.effects] == [tc.AppendRecord, tc.DeleteRecords]
        assert result.effects[1] == tc.DeleteRecords((rid,))


# Rules: TC-7
def test_tc7_same_status_shortcut_writes_nothing_and_ignores_expected() -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    s, _ = ok(s, tc.UpdateTxnStatus(txn, TxnStatus.COMMITTING, TxnStatus.OPEN, 2))
    after, r = ok(s, tc.UpdateTxnStatus(txn, TxnStatus.COMMITTING, TxnStatus.OPEN, 3))
    assert r.effects == () and after == s and r.value is TxnStatus.COMMITTING


# Rules: TC-8
def test_tc8_expected_status_mismatch_is_logged_then_deleted() -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    r = err(s, tc.UpdateTxnStatus(txn, TxnStatus.COMMITTING, TxnStatus.COMMITTING, 3), "InvalidTxnStatus")
    assert "to be in COMMITTING status but it is in OPEN status" in r.error.message
    append, delete = r.effects
    assert isinstance(append, tc.AppendRecord) and append.record.metadata_op is tc.TxnMetadataOp.UPDATE
    assert delete == tc.DeleteRecords((append.record_id,))


# Rules: TC-9
def test_tc9_finished_txn_is_forgotten_and_all_records_deleted() -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    s, _ = ok(s, tc.AddPartitionToTxn(txn, ("p",), 2))
    s, _ = ok(s, tc.AddSubscriptionToTxn(txn, (Subscription("t", "s"),), 3))
    s, _ = ok(s, tc.UpdateTxnStatus(txn, TxnStatus.COMMITTING, TxnStatus.OPEN, 4))
    s, r = ok(s, tc.UpdateTxnStatus(txn, TxnStatus.COMMITTED, TxnStatus.COMMITTING, 5))
    assert r.effects[-1] == tc.DeleteRecords((0, 1, 2, 3, 4))
    assert not s.txns and tc.live_record_ids(s) == frozenset()
    for command in (tc.GetTxnMeta(txn), tc.EndTxn(txn, COMMIT, 6), tc.AddPartitionToTxn(txn, ("q",), 6)):
        err(s, command, "TransactionNotFound")


# --- TC-10, TC-11, TC-12 -------------------------------------------------------------------------


# Rules: TC-10
def test_tc10_partitions_are_a_sorted_set_and_records_keep_the_request() -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    s, r = ok(s, tc.AddPartitionToTxn(txn, ("p2", "p0", "p1", "p2"), 2))
    assert r.effects[0].record.partitions == ("p2", "p0", "p1", "p2")  # type: ignore[attr-defined]
    s, _ = ok(s, tc.AddPartitionToTxn(txn, ("p2", "p3", "p4"), 3))
    assert s.txns[0].sorted_partitions() == ("p0", "p1", "p2", "p3", "p4")
    subs = (Subscription("b", "x"), Subscription("a", "y"), Subscription("a", "x"), Subscription("a", "x"))
    s, _ = ok(s, tc.AddSubscriptionToTxn(txn, subs, 4))
    assert s.txns[0].sorted_subscriptions() == (Subscription("a", "x"), Subscription("a", "y"), Subscription("b", "x"))


# Rules: TC-10
@pytest.mark.parametrize("kind", ["partition", "subscription"])
def test_tc10_adding_to_a_txn_not_open_logs_then_deletes(kind: str) -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    s, _ = ok(s, tc.AddPartitionToTxn(txn, ("p0",), 2))
    s, _ = ok(s, tc.EndTxn(txn, COMMIT, 3))
    command: object = (
        tc.AddPartitionToTxn(txn, ("p5", "p6"), 4)
        if kind == "partition"
        else tc.AddSubscriptionToTxn(txn, (Subscription("t", "s"),), 4)
    )
    r = err(s, command, "InvalidTxnStatus")
    append, delete = r.effects
    assert isinstance(append, tc.AppendRecord) and delete == tc.DeleteRecords((append.record_id,))
    assert s.txns[0].sorted_partitions() == ("p0",)


# Rules: TC-11
def test_tc11_unknown_txn_and_get_txn_status_is_not_found() -> None:
    s, _ = new_txn(tc.initial(CONFIG, 1))
    err(s, tc.GetTxnStatus(TxnID(1, 12345)), "TransactionNotFound")
    err(s, tc.GetTxnMeta(TxnID(1, 12345)), "TransactionNotFound")
    err(s, tc.UpdateTxnStatus(TxnID(1, 9), TxnStatus.ABORTING, TxnStatus.OPEN, 3), "TransactionNotFound")


# Rules: TC-12
def test_tc12_owner_check_hides_the_txn() -> None:
    s, txn = new_txn(tc.initial(CONFIG), owner="alice")
    r = err(s, tc.EndTxn(txn, COMMIT, 3, caller="mallory"), "TransactionNotFound")
    assert "neither the owner" in r.error.message
    err(s, tc.AddPartitionToTxn(txn, ("p",), 3, caller=None), "TransactionNotFound")
    err(s, tc.AddSubscriptionToTxn(txn, (Subscription("t", "s"),), 3, caller="bob"), "TransactionNotFound")
    ok(s, tc.AddPartitionToTxn(txn, ("p",), 3, caller="alice"))


# Rules: TC-12
def test_tc12_super_user_only_with_authentication_and_authorization() -> None:
    for auth, allowed in ((False, False), (True, True)):
        config = Config(authentication_enabled=auth, authorization_enabled=auth, super_user_roles=("admin",))
        s, txn = new_txn(tc.initial(config), owner="alice")
        _, r = tc.step(s, tc.EndTxn(txn, ABORT, 3, caller="admin"))
        assert isinstance(r, Ok) is allowed


# Rules: TC-12
def test_tc12_txn_without_owner_is_open_to_all() -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    ok(s, tc.EndTxn(txn, ABORT, 3, caller="anyone"))


# --- TC-13 .. TC-16 ------------------------------------------------------------------------------


# Rules: TC-13, TC-14, TC-15
def test_tc13_tc14_tc15_full_commit_with_participants() -> None:
    s, older = new_txn(tc.initial(CONFIG))
    s, txn = new_txn(s)
    s, _ = ok(s, tc.AddPartitionToTxn(txn, ("t1",), 2))
    s, _ = ok(s, tc.AddSubscriptionToTxn(txn, (Subscription("t2", "s"),), 3))
    s, r = ok(s, tc.EndTxn(txn, COMMIT, 4))
    assert r.value is TxnStatus.COMMITTING
    (send,) = of(r.effects, tc.EndTxnInTransactionBuffer)
    assert send == tc.EndTxnInTransactionBuffer(txn, COMMIT, False, -1, ("t1",), (Subscription("t2", "s"),))
    s, r = ok(s, tc.EndTxnInTransactionBufferResult(txn, COMMIT, 5))
    assert r.value is TxnStatus.COMMITTED and tc.txn_status(s, txn) is None
    # The older txn now pins the low watermark.
    assert tc.low_water_mark(s) == older.least_sig_bits - 1


# Rules: TC-13
def test_tc13_unsupported_action() -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    r = err(s, tc.EndTxn(txn, 2, 3), "UnsupportedTxnAction")
    assert "2" in r.error.message


# Rules: TC-13
def test_tc13_redrive_same_action_writes_nothing() -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    s, _ = ok(s, tc.AddPartitionToTxn(txn, ("t",), 2))
    s, _ = ok(s, tc.EndTxn(txn, COMMIT, 3))
    again, r = ok(s, tc.EndTxn(txn, COMMIT, 4))
    assert again == s
    assert [type(e) for e in r.effects] == [tc.EndTxnInTransactionBuffer]


# Rules: TC-13
@pytest.mark.parametrize("first, second", [(COMMIT, ABORT), (ABORT, COMMIT)])
def test_tc13_opposite_action_is_invalid_status_at_once(first: TxnAction, second: TxnAction) -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    s, _ = ok(s, tc.EndTxn(txn, first, 3))
    r = err(s, tc.EndTxn(txn, second, 4), "InvalidTxnStatus")
    assert not of(r.effects, tc.ScheduleResumeEndTxn)


# Rules: TC-15
def test_tc15_second_run_of_the_same_end_finds_the_txn_gone() -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    s, _ = ok(s, tc.EndTxn(txn, ABORT, 3))
    s, _ = ok(s, tc.EndTxn(txn, ABORT, 4))  # a client retry: a second run
    s, _ = ok(s, tc.EndTxnInTransactionBufferResult(txn, ABORT, 5))
    err(s, tc.EndTxnInTransactionBufferResult(txn, ABORT, 6), "TransactionNotFound")


# Rules: TC-16
@pytest.mark.parametrize("error", ["ServiceUnitNotReady", "PersistenceError", "RequestTimeout"])
def test_tc16_retryable_participant_failure_schedules_a_rerun(error: str) -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    s, _ = ok(s, tc.EndTxn(txn, COMMIT, 3))
    r = err(s, tc.EndTxnInTransactionBufferResult(txn, COMMIT, 4, errors=(error,)), error)
    assert r.effects == (tc.ScheduleResumeEndTxn(txn, COMMIT, False, 1000),)
    s, r2 = ok(s, tc.ResumeEndTxn(txn, COMMIT, 1004))
    assert of(r2.effects, tc.EndTxnInTransactionBuffer)
    s, _ = ok(s, tc.EndTxnInTransactionBufferResult(txn, COMMIT, 1005))
    assert not s.txns


# Rules: TC-16
@pytest.mark.parametrize("error", ["NotAllowed", "TransactionConflict"])
def test_tc16_non_retryable_participant_failure_fails_the_request(error: str) -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    s, _ = ok(s, tc.EndTxn(txn, COMMIT, 3))
    r = err(s, tc.EndTxnInTransactionBufferResult(txn, COMMIT, 4, errors=("ServiceUnitNotReady", error)), error)
    assert r.effects == ()
    assert tc.txn_status(s, txn) is TxnStatus.COMMITTING


# Rules: TC-16
def test_tc16_store_not_ready_in_phase_one_and_three_retries() -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    closing, _ = ok(s, tc.CloseStore())
    r = err(closing, tc.EndTxn(txn, COMMIT, 3), "TransactionMetadataStoreState")
    assert r.effects == (tc.ScheduleResumeEndTxn(txn, COMMIT, False, 1000),)
    # COMMITTING + COMMIT while not Ready: phase 2 runs, phase 3 retries.
    s, _ = ok(s, tc.EndTxn(txn, COMMIT, 3))
    closing, _ = ok(s, tc.CloseStore())
    closing, r1 = ok(closing, tc.EndTxn(txn, COMMIT, 4))
    assert of(r1.effects, tc.EndTxnInTransactionBuffer)
    r = err(closing, tc.EndTxnInTransactionBufferResult(txn, COMMIT, 5), "TransactionMetadataStoreState")
    assert r.effects == (tc.ScheduleResumeEndTxn(txn, COMMIT, False, 1000),)


# --- TC-17 ---------------------------------------------------------------------------------------


# Rules: TC-17
def test_tc17_low_water_mark_zero_when_empty_else_min_minus_one() -> None:
    s = tc.initial(CONFIG)
    assert tc.low_water_mark(s) == 0 and tc.effective_low_water_mark(s) == -1
    s, a = new_txn(s)
    s, b = new_txn(s)
    assert tc.low_water_mark(s) == -1
    s = end(s, a)
    assert tc.low_water_mark(s) == 0 == tc.effective_low_water_mark(s)
    s = end(s, b)
    assert tc.low_water_mark(s) == 0 and tc.effective_low_water_mark(s) == 1


# --- TC-18, TC-19, TC-20 -------------------------------------------------------------------------


# Rules: TC-18
def test_tc18_tick_aborts_expired_open_txns_in_deadline_order_and_leaves_ending_ones() -> None:
    s, a = new_txn(tc.initial(CONFIG), timeout_ms=3000, now=0)
    s, b = new_txn(s, timeout_ms=1000, now=0)
    s, c = new_txn(s, timeout_ms=1000, now=0)
    s, _ = ok(s, tc.EndTxn(c, COMMIT, 10))
    same, r = ok(s, tc.Tick(1000))  # deadline must be strictly before now
    assert r.value == () and same == s
    s, r = ok(s, tc.Tick(1001))
    assert r.value == (b,)
    assert tc.txn_status(s, b) is TxnStatus.ABORTING and tc.txn_status(s, c) is TxnStatus.COMMITTING
    (send,) = of(r.effects, tc.EndTxnInTransactionBuffer)
    assert send.is_timeout  # type: ignore[attr-defined]
    assert s.stats.timeout == 1
    s, r = ok(s, tc.Tick(5000))
    assert r.value == (a,)


# Rules: TC-18
def test_tc18_tick_does_nothing_unless_ready() -> None:
    s, _ = new_txn(tc.initial(CONFIG), timeout_ms=100, now=0)
    s, _ = ok(s, tc.CloseStore())
    after, r = ok(s, tc.Tick(10_000))
    assert r.value == () and after == s


# Rules: TC-19
@pytest.mark.parametrize("timeout_ms, aborted", [(0, True), (50, True), (99, True), (100, False)])
def test_tc19_timeouts_under_100ms_abort_at_once(timeout_ms: int, aborted: bool) -> None:
    s, r = ok(tc.initial(CONFIG), tc.NewTxn(timeout_ms, 0))
    assert r.value == TxnID(0, 0)
    status = tc.txn_status(s, TxnID(0, 0))
    assert status is (TxnStatus.ABORTING if aborted else TxnStatus.OPEN)
    assert bool(of(r.effects, tc.EndTxnInTransactionBuffer)) is aborted
    assert s.stats.timeout == int(aborted)


# Rules: TC-20
def test_tc20_counters() -> None:
    s, a = new_txn(tc.initial(CONFIG))
    s, b = new_txn(s)
    s = end(s, a, COMMIT)
    s = end(s, b, ABORT)
    assert s.stats == tc.CoordinatorStats(created=2, committed=1, aborted=1, timeout=0)


# --- TC-21 .. TC-25 ------------------------------------------------------------------------------


def _new(seq: int, start: int = 0, timeout: int = 5000) -> tc.TxnLogRecord:
    return tc.TxnLogRecord(
        tc.TxnMetadataOp.NEW,
        TxnID(0, seq),
        timeout_ms=timeout,
        start_time=start,
        last_modification_time=start,
        max_local_txn_id=seq,
    )


def _update(seq: int, expected: TxnStatus, new: TxnStatus, max_id: int) -> tc.TxnLogRecord:
    return tc.TxnLogRecord(
        tc.TxnMetadataOp.UPDATE,
        TxnID(0, seq),
        expected_status=expected,
        new_status=new,
        last_modification_time=7,
        max_local_txn_id=max_id,
    )


# Rules: TC-21, TC-24
def test_tc21_tc24_replay_recreates_open_and_redrives_committing() -> None:
    records = [(0, _new(0)), (1, _new(1)), (2, _update(1, TxnStatus.OPEN, TxnStatus.COMMITTING, 1))]
    s, effects = tc.recover(CONFIG, 0, records, max_local_txn_id=1)
    assert s.store_state is tc.StoreState.READY
    assert tc.txn_status(s, TxnID(0, 0)) is TxnStatus.OPEN
    assert effects == (tc.ScheduleResumeEndTxn(TxnID(0, 1), COMMIT, False, 0),)
    s, _ = ok(s, tc.ResumeEndTxn(TxnID(0, 1), COMMIT, 10))
    s, _ = ok(s, tc.EndTxnInTransactionBufferResult(TxnID(0, 1), COMMIT, 11))
    assert tc.txn_status(s, TxnID(0, 1)) is None
    _, txn = new_txn(s)
    assert txn == TxnID(0, 2)


# Rules: TC-21
def test_tc21_orphans_are_deleted() -> None:
    orphan_add = tc.TxnLogRecord(tc.TxnMetadataOp.ADD_PARTITION, TxnID(0, 5), partitions=("p",), max_local_txn_id=5)
    records = [(3, orphan_add), (4, _update(6, TxnStatus.OPEN, TxnStatus.ABORTING, 6))]
    s, effects = tc.recover(CONFIG, 0, records, max_local_txn_id=6)
    assert not s.txns
    assert effects == (tc.DeleteRecords((3,)), tc.DeleteRecords((4,)))
    assert s.sequence_id == 6 and s.next_record_id == 5


# Rules: TC-21
def test_tc21_new_for_a_known_sequence_only_adds_the_record() -> None:
    s, _ = tc.recover(CONFIG, 0, [(0, _new(0)), (1, _new(0, start=99))])
    assert s.txns[0].record_ids == (0, 1) and s.txns[0].start_time == 0


# Rules: TC-22
def test_tc22_invalid_transitions_are_skipped_and_terminal_deletes_everything() -> None:
    records = [
        (0, _new(3)),
        (1, _update(3, TxnStatus.OPEN, TxnStatus.COMMITTED, 3)),  # not allowed: deleted
        (2, _update(3, TxnStatus.COMMITTING, TxnStatus.COMMITTED, 3)),  # wrong expected: deleted
        (3, tc.TxnLogRecord(tc.TxnMetadataOp.UPDATE, TxnID(0, 3), max_local_txn_id=3)),  # no statuses: deleted
        (4, _update(3, TxnStatus.OPEN, TxnStatus.ABORTING, 3)),
        (5, tc.TxnLogRecord(tc.TxnMetadataOp.ADD_PARTITION, TxnID(0, 3), partitions=("p",))),  # not OPEN
        (6, _update(3, TxnStatus.ABORTING, TxnStatus.ABORTED, 3)),
    ]
    s, effects = tc.recover(CONFIG, 0, records)
    assert not s.txns
    assert effects == (
        tc.DeleteRecords((1,)),
        tc.DeleteRecords((2,)),
        tc.DeleteRecords((3,)),
        tc.DeleteRecords((5,)),
        tc.DeleteRecords((0, 4, 6)),
    )


# Rules: TC-23
def test_tc23_sequence_survives_even_when_every_record_was_deleted() -> None:
    s, txn = new_txn(tc.initial(CONFIG))
    s = end(s, txn)
    assert tc.live_record_ids(s) == frozenset()
    recovered, _ = tc.recover(CONFIG, 0, [], max_local_txn_id=0)
    _, nxt = new_txn(recovered)
    assert nxt == TxnID(0, 1)


# Rules: TC-23
def test_tc23_replay_raises_the_sequence_from_records() -> None:
    s, _ = tc.recover(CONFIG, 0, [(0, _new(0)), (1, _new(4))], max_local_txn_id=-1)
    assert s.sequence_id == 4


# Rules: TC-24
def test_tc24_open_txn_keeps_its_absolute_deadline_after_reload() -> None:
    s, _ = tc.recover(CONFIG, 0, [(0, _new(0, start=1000, timeout=2000))])
    _, r = ok(s, tc.Tick(2999))
    assert r.value == ()
    _, r = ok(s, tc.Tick(3001))
    assert r.value == (TxnID(0, 0),)


# Rules: TC-25
def test_tc25_after_crash_is_what_recovery_yields() -> None:
    s, a = new_txn(tc.initial(CONFIG), owner="alice")
    s, b = new_txn(s)
    s, _ = ok(s, tc.AddPartitionToTxn(a, ("p", "q"), 2, caller="alice"))
    s, _ = ok(s, tc.EndTxn(b, ABORT, 3))
    log: dict[int, tc.TxnLogRecord] = {}
    # Replay the effects the steps asked for.
    replay = tc.initial(CONFIG)
    commands = (
        tc.NewTxn(60_000, 1_000, "alice"),
        tc.NewTxn(60_000, 1_000),
        tc.AddPartitionToTxn(a, ("p", "q"), 2, caller="alice"),
        tc.EndTxn(b, ABORT, 3),
    )
    for command in commands:
        replay, r = tc.step(replay, command)
        for e in r.effects:
            if isinstance(e, tc.AppendRecord):
                log[e.record_id] = e.record
            elif isinstance(e, tc.DeleteRecords):
                for rid in e.record_ids:
                    del log[rid]
    assert replay == s
    recovered, effects = tc.recover(CONFIG, 0, sorted(log.items()), max_local_txn_id=1)
    assert recovered == tc.after_crash(s)
    assert effects == (tc.ScheduleResumeEndTxn(b, ABORT, False, 0),)


# --- TC-26, TC-27, TC-28 -------------------------------------------------------------------------

statuses = st.none() | st.sampled_from(TxnStatus)
u64 = st.none() | st.integers(0, (1 << 64) - 1)
records = st.builds(
    tc.TxnLogRecord,
    metadata_op=st.sampled_from(tc.TxnMetadataOp),
    txn_id=st.builds(TxnID, st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 64) - 1)),
    expected_status=statuses,
    new_status=statuses,
    partitions=st.lists(st.text(max_size=5)).map(tuple),
    subscriptions=st.lists(st.builds(Subscription, st.text(max_size=3), st.text(max_size=3))).map(tuple),
    timeout_ms=u64,
    start_time=u64,
    last_modification_time=u64,
    max_local_txn_id=u64,
    owner=st.none() | st.text(max_size=5),
)


# Rules: TC-26
@given(records)
def test_tc26_record_round_trips_through_the_proto(record: tc.TxnLogRecord) -> None:
    entry = record.to_pb()
    again = PulsarTransactionMetadata_pb2.TransactionMetadataEntry.FromString(entry.SerializeToString())
    assert tc.TxnLogRecord.from_pb(again) == record


# Rules: TC-26
def test_tc26_record_without_op_is_bad_input() -> None:
    with pytest.raises(BadRecord):
        tc.TxnLogRecord.from_pb(PulsarTransactionMetadata_pb2.TransactionMetadataEntry(txnid_least_bits=1))


# Rules: TC-26
@pytest.mark.parametrize("out_of_range", [-1, 1 << 64])
@pytest.mark.parametrize("others", ["none", "in range", "out of range"])
def test_tc26_a_record_field_outside_uint64_is_refused(out_of_range: int, others: str) -> None:
    """The proto's fields are uint64: a record (from a history's JSON, say) with a time, timeout or
    id outside that range is refused, whatever the other fields hold -- unset, in range, or out of
    range themselves."""
    names = ("timeout_ms", "start_time", "last_modification_time", "max_local_txn_id")
    rest: int | None = {"none": None, "in range": 7, "out of range": out_of_range}[others]
    for name in names:
        fields = dict.fromkeys(names, rest) | {name: out_of_range}
        with pytest.raises(ValueError, match="is not a uint64"):
            tc.TxnLogRecord(tc.TxnMetadataOp.NEW, TxnID(0, 1), **fields)  # type: ignore[arg-type]


# Rules: TC-27
def test_tc27_slow_transactions_compare_timeouts() -> None:
    s, a = new_txn(tc.initial(CONFIG), timeout_ms=10_000, now=0)
    s, _ = new_txn(s, timeout_ms=500, now=0)
    _, r = ok(s, tc.GetSlowTransactions(1000))
    assert r.value == (a,)


# Rules: TC-28
def test_tc28_effects_are_the_only_persistence() -> None:
    """TC-28: steps are pure: the same state and command give the same result, twice."""
    s, txn = new_txn(tc.initial(CONFIG))
    assert tc.step(s, tc.EndTxn(txn, COMMIT, 3)) == tc.step(s, tc.EndTxn(txn, COMMIT, 3))
    assert hash(s) == hash(tc.step(tc.initial(CONFIG), tc.NewTxn(60_000, 1_000))[0])
