"""Examples and edge cases for each rule of spec/rules/buffer.md (ids in the test names and docstrings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from invariants.base import violated
from invariants.buffer import INVARIANTS
from reference import buffer as tb
from runners.vectors import run_paths
from spec.config import QUIRKS, Config
from spec.errors import NotAllowed, ServiceUnitNotReady
from spec.pb import PulsarApi_pb2 as api_pb
from spec.pb import TransactionBufferSnapshot_pb2 as snap_pb
from spec.result import Err, Ok
from spec.types import EARLIEST, LedgerInfo, Position, TxnID

T0, T1, T2 = TxnID(0, 0), TxnID(0, 1), TxnID(0, 2)
VECTORS_DIR = Path(__file__).resolve().parents[2] / "spec" / "vectors" / "buffer"


def run(state: tb.BufferState, *commands: Any) -> tuple[tb.BufferState, list[Ok[Any] | Err]]:
    results = []
    for command in commands:
        state, result = tb.step(state, command)
        results.append(result)
        assert violated(INVARIANTS, state) == []
    return state, results


def ready(config: Config | None = None, first: TxnID = T0, **init: Any) -> tb.BufferState:
    """A Ready buffer whose first txn message (of ``first``) is at (1,0)."""
    state, _ = run(tb.initial(config or Config(), **init), tb.AppendBufferToTxn(first), tb.CompleteFirstSnapshot())
    assert state.status is tb.BufferStatus.READY
    return state


# --- TB-1 / TB-3: states ---------------------------------------------------------------------


def test_tb1_lifecycle_none_initializing_nosnapshot() -> None:
    """TB-1: None -> Initializing -> NoSnapshot; recovery cannot start twice."""
    s = tb.initial(Config(), recovered=False)
    assert s.status is tb.BufferStatus.NONE
    s, (r1, r2, r3) = run(s, tb.StartRecovery(), tb.StartRecovery(), tb.CompleteRecovery())
    assert r1.ok and isinstance(r2, Err) and isinstance(r2.error, NotAllowed) and r3.ok
    assert s.status is tb.BufferStatus.NO_SNAPSHOT


def test_tb1_close_from_any_state_and_clear_only_from_close() -> None:
    """TB-1, TB-25: Close from anywhere; ClosedAndCleared only from Close."""
    s = tb.initial(Config())
    _, (r,) = run(s, tb.ClearTransactionBufferSnapshot())
    assert isinstance(r, Err)
    for start in (tb.initial(Config(), recovered=False), s, ready()):
        closed, _ = run(start, tb.CloseTransactionBuffer())
        assert closed.status is tb.BufferStatus.CLOSE
    cleared, _ = run(closed, tb.ClearTransactionBufferSnapshot())
    assert cleared.status is tb.BufferStatus.CLOSED_AND_CLEARED


def test_tb1_rejections_leave_state_unchanged() -> None:
    """TB-1: every rejected command returns the state it was given."""
    s, _ = run(tb.initial(Config()), tb.CloseTransactionBuffer())
    for cmd in (tb.AppendBufferToTxn(T0), tb.PublishMessage(), tb.CommitTxn(T0), tb.AbortTxn(T0), tb.StartRecovery()):
        after, result = tb.step(s, cmd)
        assert isinstance(result, Err) and after == s


def test_tb3_max_read_position_unreadable_unless_recovered() -> None:
    """TB-3: EARLIEST in None, Initializing, FirstSnapshotting, Close."""
    s = tb.initial(Config(), recovered=False)
    assert tb.readable_max_read_position(s) == EARLIEST
    s, _ = run(tb.initial(Config()), tb.PublishMessage())
    assert tb.readable_max_read_position(s) == Position(1, 0)
    s, _ = run(s, tb.AppendBufferToTxn(T0))
    assert s.status is tb.BufferStatus.FIRST_SNAPSHOTTING
    assert tb.readable_max_read_position(s) == EARLIEST and tb.dispatchable(s) == ()


# --- TB-2: ledger view -----------------------------------------------------------------------


def test_tb2_positions_assigned_by_the_machine_and_roll_over() -> None:
    """TB-2: writes take the next entry of the current ledger; roll-over opens last+1 and keeps the LAC."""
    s, rs = run(tb.initial(Config()), tb.PublishMessage(), tb.RollOverLedger(), tb.PublishMessage())
    assert [r.value for r in rs if isinstance(r, Ok)] == [Position(1, 0), 2, Position(2, 0)]
    s, _ = run(tb.initial(Config()), tb.PublishMessage(), tb.RollOverLedger())
    assert tb.last_confirmed_entry(s) == Position(1, 0)


def test_tb2_lac_of_empty_topic_is_before_everything() -> None:
    """TB-2: with nothing stored the LAC is (first ledger, -1), also after roll-overs."""
    s, _ = run(tb.initial(Config(), ledger_id=5), tb.RollOverLedger(), tb.RollOverLedger())
    assert tb.last_confirmed_entry(s) == Position(5, -1)


def test_tb2_restart_keeps_ledgers_and_snapshots_loses_memory() -> None:
    """TB-2: a reloaded topic starts in None with max_read_position = LAC."""
    s, _ = run(ready(), tb.CommitTxn(T0, 3))
    again, (r,) = run(s, tb.ReloadTopic())
    assert r.ok and again.status is tb.BufferStatus.NONE
    assert again.entries == s.entries and again.snapshot_store == s.snapshot_store
    assert dict(again.low_water_marks) == {} and again.max_read_position == tb.last_confirmed_entry(s)


# --- TB-4 .. TB-8: appends -------------------------------------------------------------------


def test_tb4_first_append_writes_first_snapshot_then_flushes_in_order() -> None:
    """TB-4: parked appends keep arrival order behind the first snapshot."""
    s, rs = run(tb.initial(Config()), tb.AppendBufferToTxn(T0), tb.AppendBufferToTxn(T1), tb.AppendBufferToTxn(T0))
    assert [r.value for r in rs if isinstance(r, Ok)] == [tb.Queued(0), tb.Queued(1), tb.Queued(2)]
    assert isinstance(rs[0].effects[0], tb.WriteSnapshot)
    assert not rs[1].effects
    s, (r,) = run(s, tb.CompleteFirstSnapshot())
    assert isinstance(r, Ok)
    assert [o.position for o in r.value] == [Position(1, 0), Position(1, 1), Position(1, 2)]


def test_tb4_parked_appends_during_recovery_without_snapshot() -> None:
    """TB-4: recovery finding no snapshot writes the first snapshot before the parked appends."""
    s, _ = run(tb.initial(Config(), recovered=False), tb.StartRecovery(), tb.AppendBufferToTxn(T0))
    s, (r,) = run(s, tb.CompleteRecovery())
    assert s.status is tb.BufferStatus.FIRST_SNAPSHOTTING and isinstance(r.effects[0], tb.WriteSnapshot)


def test_tb4_parked_appends_during_recovery_with_snapshot_are_written() -> None:
    """TB-4, TB-24: with a snapshot, recovery completes Ready and writes the parked appends."""
    s, _ = run(ready(), tb.ReloadTopic(), tb.StartRecovery(), tb.AppendBufferToTxn(T1))
    s, (r,) = run(s, tb.CompleteRecovery())
    assert s.status is tb.BufferStatus.READY
    assert r.value == (tb.AppendOutcome(T1, Position(1, 1)),)


def test_tb4_close_fails_parked_appends() -> None:
    """TB-4, TB-25: closing fails what is parked."""
    _, (_, r) = run(tb.initial(Config()), tb.AppendBufferToTxn(T0), tb.CloseTransactionBuffer())
    assert r.value == (tb.AppendOutcome(T0, None, "ServiceUnitNotReady"),)


def test_tb4_catch_up_after_first_snapshot_when_no_append_became_ongoing() -> None:
    """TB-4 (divergence): normal messages published while FirstSnapshotting are released at its end."""
    s, _ = run(tb.initial(Config()), tb.CommitTxn(T1, 5), tb.AppendBufferToTxn(T0), tb.PublishMessage())
    s, (r,) = run(s, tb.CompleteFirstSnapshot())
    assert r.value[0].error == "NotAllowed"
    assert tb.readable_max_read_position(s) == Position(1, 1)


@pytest.mark.parametrize(("seq", "ok"), [(4, False), (5, False), (6, True)])
def test_tb5_low_water_mark_rejection(seq: int, ok: bool) -> None:
    """TB-5: at or below the coordinator's mark is rejected, nothing written."""
    s, _ = run(ready(first=TxnID(0, 9)), tb.CommitTxn(TxnID(0, 8), 5))
    after, (r,) = run(s, tb.AppendBufferToTxn(TxnID(0, seq)))
    assert r.ok is ok
    if not ok:
        assert isinstance(r, Err) and isinstance(r.error, NotAllowed) and after == s
        assert f"Transaction [(0,{seq})] has been ended" in r.error.message


def test_tb5_low_water_mark_is_per_coordinator() -> None:
    """TB-5: TC 0's mark does not reject TC 1's txns."""
    s, _ = run(ready(first=TxnID(0, 9)), tb.CommitTxn(TxnID(0, 8), 5))
    _, (r,) = run(s, tb.AppendBufferToTxn(TxnID(1, 0)))
    assert r.ok


def test_tb6_first_position_is_kept() -> None:
    """TB-6: later messages of an ongoing txn do not move its first position."""
    s, _ = run(ready(), tb.AppendBufferToTxn(T0), tb.AppendBufferToTxn(T0))
    assert dict(s.ongoing) == {T0: Position(1, 0)}


def test_tb7_previous_crosses_ledgers() -> None:
    """TB-7: previous() of entry 0 is the last entry of the nearest earlier non-empty ledger."""
    s, _ = run(
        tb.initial(Config()),
        tb.PublishMessage(),
        tb.PublishMessage(),
        tb.RollOverLedger(),
        tb.RollOverLedger(),
        tb.AppendBufferToTxn(T0),
        tb.CompleteFirstSnapshot(),
    )
    assert dict(s.ongoing) == {T0: Position(3, 0)}
    assert tb.readable_max_read_position(s) == Position(1, 1)


def test_tb7_max_read_position_follows_earliest_ongoing() -> None:
    """TB-7: ending a later txn does not release the earlier one; ending the earliest moves to the next."""
    s, _ = run(ready(), tb.AppendBufferToTxn(T1), tb.AppendBufferToTxn(T2), tb.CommitTxn(T1))
    assert s.max_read_position == Position(1, -1)
    s, _ = run(s, tb.CommitTxn(T0))
    assert s.max_read_position == Position(1, 1)  # previous(first of T2 at (1,2))


def test_tb8_append_of_aborted_txn_is_refused() -> None:
    """TB-8: a late message of a txn this partition aborted is refused; nothing is written."""
    s, _ = run(ready(), tb.AbortTxn(T0))
    after, r = tb.step(s, tb.AppendBufferToTxn(T0))
    assert isinstance(r, Err) and r.error.name == "NotAllowed" and after == s


def test_tb8_quirk_append_after_abort_writes_it_filtered() -> None:
    """TB-8 divergence (quirk append-after-abort): Pulsar stores it, filtered, without pinning
    max_read_position."""
    quirky = Config().with_overrides(QUIRKS["append-after-abort"])
    s, _ = run(ready(quirky), tb.AbortTxn(T0))
    s, (r,) = run(s, tb.AppendBufferToTxn(T0))
    assert r.value == Position(1, 2) and T0 not in s.ongoing
    assert Position(1, 2) in tb.dispatch(s).auto_acked or tb.readable_max_read_position(s) < Position(1, 2)


def test_tb8_aborted_messages_before_marker_is_checked() -> None:
    """TB-8, TB-12: the invariant holds under the quirk append-after-abort, which stores the late message
    after the abort marker, and flags the same state read with the quirk off."""
    from reference.persistent import evolve

    quirky = Config().with_overrides(QUIRKS["append-after-abort"])
    s, _ = run(ready(quirky), tb.AbortTxn(T0), tb.AppendBufferToTxn(T0))
    assert "aborted_messages_before_marker" not in violated(INVARIANTS, s)
    assert "aborted_messages_before_marker" in violated(INVARIANTS, evolve(s, config=Config()))


def test_tb8_committed_txn_reopens() -> None:
    """TB-8 (Q8): a message for a committed txn above the mark re-opens it and pins max_read_position."""
    s, _ = run(ready(), tb.CommitTxn(T0), tb.AppendBufferToTxn(T0), tb.PublishMessage())
    assert dict(s.ongoing) == {T0: Position(1, 2)}
    assert tb.readable_max_read_position(s) == Position(1, 1)


def _reopened_then_lwm_aborted(config: Config) -> tb.BufferState:
    """T0 committed at (1,1), a late copy of its send at (1,2) re-opens it, T1 at (1,3) commits with a
    low water mark of 0: the commit marker (1,4), then the low-water-mark abort of T0 at (1,5)."""
    s, _ = run(ready(config), tb.CommitTxn(T0), tb.AppendBufferToTxn(T0), tb.AppendBufferToTxn(T1))
    s, _ = run(s, tb.CommitTxn(T1, 0))
    assert not s.ongoing and tb.is_txn_aborted(s, T0)
    return s


def test_tb16_low_water_mark_abort_of_reopened_txn_keeps_committed_visible() -> None:
    """TB-8, TB-13, TB-16: the abort filters only the late copy stored after T0's commit marker; the
    committed message stays dispatchable, to a reader from the start as to one that had read nothing."""
    s = _reopened_then_lwm_aborted(Config())
    assert tb.dispatch(s) == tb.Dispatch(
        (Position(1, 0), Position(1, 3)), (Position(1, 1), Position(1, 2), Position(1, 4), Position(1, 5))
    )
    assert tb.dispatchable(s) == (Position(1, 0), Position(1, 3))
    assert not tb.is_message_aborted(s, T0, Position(1, 0)) and tb.is_message_aborted(s, T0, Position(1, 2))
    assert tb.last_dispatchable_position(s) == Position(1, 3)


def test_tb16_quirk_abort_hides_committed() -> None:
    """TB-16 divergence (quirk abort-hides-committed): Pulsar's isTxnAborted ignores the position, so
    the same abort hides the committed message too."""
    s = _reopened_then_lwm_aborted(Config().with_overrides(QUIRKS["abort-hides-committed"]))
    assert tb.dispatchable(s) == (Position(1, 3),)
    assert tb.is_message_aborted(s, T0, Position(1, 0))


def test_tb16_a_message_belongs_to_the_first_end_after_it() -> None:
    """TB-16: a message followed by an abort marker stays aborted when a commit of the same txn comes
    later (the aborted set decides with the first end marker after the message, not any commit)."""
    s, _ = run(ready(), tb.AbortTxn(T0), tb.CommitTxn(T0))
    assert tb.is_message_aborted(s, T0, Position(1, 0))
    assert Position(1, 0) not in tb.dispatchable(s)


def test_tb13_first_ongoing_above_low_water_mark_is_checked() -> None:
    """TB-13: the invariant flags a buffer whose first ongoing txn is at or below its coordinator's
    mark (what the pre-#12312 loop left: it aborted the txn being ended instead)."""
    s, _ = run(ready(), tb.CommitTxn(T0), tb.AppendBufferToTxn(T0))
    from reference.persistent import evolve

    stale = evolve(s, low_water_marks=s.low_water_marks.set(0, 0))
    assert violated(INVARIANTS, stale) == ["first_ongoing_above_low_water_mark"]


# --- TB-9 / TB-10: normal publishes ----------------------------------------------------------


def test_tb9_normal_publish_behind_open_txn_is_held() -> None:
    """TB-9: Ready with an ongoing txn keeps max_read_position; nothing ongoing follows the LAC."""
    s, _ = run(
        tb.initial(Config()),
        tb.PublishMessage(),
        tb.AppendBufferToTxn(T0),
        tb.CompleteFirstSnapshot(),
        tb.PublishMessage(),
    )
    assert tb.dispatchable(s) == (Position(1, 0),)
    s, _ = run(s, tb.CommitTxn(T0), tb.PublishMessage())
    assert tb.readable_max_read_position(s) == Position(1, 4)


def test_tb9_normal_publish_in_none_does_not_move() -> None:
    """TB-9: None/Initializing do not move max_read_position; recovery sets it to the LAC."""
    s, _ = run(tb.initial(Config(), recovered=False), tb.PublishMessage())
    assert s.max_read_position == Position(1, -1)
    s, _ = run(s, tb.StartRecovery(), tb.CompleteRecovery())
    assert tb.readable_max_read_position(s) == Position(1, 0)


def test_tb10_counter_not_moved_in_nosnapshot() -> None:
    """TB-10: NoSnapshot moves do not count; Ready moves do."""
    s, _ = run(tb.initial(Config()), tb.PublishMessage(), tb.PublishMessage())
    assert s.change_max_read_position_count == 0
    s, _ = run(ready(), tb.CommitTxn(T0), tb.PublishMessage())
    assert s.change_max_read_position_count == 2


# --- TB-11 .. TB-14: ending ------------------------------------------------------------------


def test_tb11_commit_unknown_txn_writes_marker_in_every_recovered_state() -> None:
    """TB-11 (Q6): NoSnapshot, FirstSnapshotting and Ready all write a commit marker."""
    for s in (tb.initial(Config()), run(tb.initial(Config()), tb.AppendBufferToTxn(T0))[0], ready()):
        _, (r,) = run(s, tb.CommitTxn(T2))
        assert any(isinstance(e, tb.AppendEntry) and e.entry.kind is tb.EntryKind.TXN_COMMIT for e in r.effects)


def test_tb11_recommit_writes_second_marker() -> None:
    """TB-11: the buffer does not remember commits."""
    _, rs = run(ready(), tb.CommitTxn(T0), tb.CommitTxn(T0))
    assert [r.value for r in rs] == [Position(1, 1), Position(1, 2)]


def test_tb12_abort_outside_ready_is_noop() -> None:
    """TB-12 (Q6): NoSnapshot and FirstSnapshotting aborts write nothing."""
    for s in (tb.initial(Config()), run(tb.initial(Config()), tb.AppendBufferToTxn(T0))[0]):
        after, (r,) = run(s, tb.AbortTxn(T0))
        assert r.value is None and r.effects == () and after == s


def test_tb12_abort_records_marker_position() -> None:
    """TB-12: the aborted set maps the txn to its abort marker."""
    s, _ = run(ready(), tb.AbortTxn(T0))
    assert dict(s.aborted) == {T0: Position(1, 1)} and not s.ongoing


def test_tb13_loop_aborts_first_ongoing_not_the_ended_txn() -> None:
    """TB-13 (#12312): the stale first ongoing txn is aborted, with its own marker."""
    s, _ = run(ready(), tb.AppendBufferToTxn(T1))
    s, (r,) = run(s, tb.CommitTxn(T2, 1))
    kinds = [(e.entry.kind, e.entry.txn_id) for e in r.effects if isinstance(e, tb.AppendEntry)]
    assert kinds == [(tb.EntryKind.TXN_COMMIT, T2), (tb.EntryKind.TXN_ABORT, T0), (tb.EntryKind.TXN_ABORT, T1)]
    assert not s.ongoing and set(s.aborted) == {T0, T1}


def test_tb13_loop_stops_at_first_txn_above_its_mark() -> None:
    """TB-13: a txn of another coordinator at the head stops the loop."""
    s, _ = run(ready(first=TxnID(1, 7)), tb.AppendBufferToTxn(T0))
    s, _ = run(s, tb.CommitTxn(T2, 5))
    assert set(s.ongoing) == {TxnID(1, 7), T0}


def test_tb13_mark_only_rises() -> None:
    """TB-13: a lower mark does not lower the stored one."""
    s, _ = run(ready(), tb.CommitTxn(T1, 4), tb.CommitTxn(T2, 2))
    assert dict(s.low_water_marks) == {0: 4}


def test_tb14_end_before_recovery_is_retryable() -> None:
    """TB-14: None and Initializing reject ends with a retryable ServiceUnitNotReady."""
    for s in (tb.initial(Config(), recovered=False), run(tb.initial(Config(), recovered=False), tb.StartRecovery())[0]):
        for cmd in (tb.CommitTxn(T0), tb.AbortTxn(T0)):
            after, r = tb.step(s, cmd)
            assert isinstance(r, Err) and isinstance(r.error, ServiceUnitNotReady) and r.error.retryable
            assert after == s


# --- TB-15 .. TB-19: dispatch ----------------------------------------------------------------


def test_tb15_tb16_dispatch_filters_and_auto_acks() -> None:
    """TB-15, TB-16: markers and aborted messages are auto-acked; nothing beyond max_read_position."""
    s, _ = run(ready(), tb.PublishMessage(), tb.AppendBufferToTxn(T1), tb.AbortTxn(T0), tb.PublishMessage())
    d = tb.dispatch(s)
    assert d.delivered == (Position(1, 1),)
    assert d.auto_acked == (Position(1, 0),)  # the abort marker (1,3) lies behind T1's first message


def test_tb16_aborted_check_ignores_position() -> None:
    """TB-16: every message of an aborted txn is filtered, wherever it is (a message after the marker
    exists only under the quirk append-after-abort, TB-8)."""
    quirky = Config().with_overrides(QUIRKS["append-after-abort"])
    s, _ = run(ready(quirky), tb.AbortTxn(T0), tb.AppendBufferToTxn(T0), tb.PublishMessage())
    assert tb.dispatchable(s) == (Position(1, 3),)


def test_tb17_delivery_in_log_order_not_commit_order() -> None:
    """TB-17: commit order does not reorder delivery."""
    s, _ = run(ready(), tb.AppendBufferToTxn(T1), tb.CommitTxn(T1), tb.CommitTxn(T0))
    assert tb.dispatchable(s) == (Position(1, 0), Position(1, 1))


def test_tb18_last_message_id_fails_until_recovered() -> None:
    """TB-18: "Failed to recover Transaction Buffer." before recovery."""
    r = tb.get_last_message_id(tb.initial(Config(), recovered=False))
    assert isinstance(r, Err) and r.error.message == "Failed to recover Transaction Buffer."


def test_tb18_last_dispatchable_skips_markers_and_aborted() -> None:
    """TB-18: scan back from max_read_position."""
    s, _ = run(
        tb.initial(Config()), tb.PublishMessage(), tb.AppendBufferToTxn(T0), tb.CompleteFirstSnapshot(), tb.AbortTxn(T0)
    )
    assert tb.get_last_message_id(s) == Ok(Position(1, 0))


def test_tb19_partial_visibility_is_a_prefix() -> None:
    """TB-19: a committed txn straddling an open one is visible up to the open txn's first message."""
    s, _ = run(ready(), tb.AppendBufferToTxn(T1), tb.AppendBufferToTxn(T0), tb.CommitTxn(T0))
    assert tb.dispatchable(s) == (Position(1, 0),)
    s, _ = run(s, tb.CommitTxn(T1))
    assert tb.dispatchable(s) == (Position(1, 0), Position(1, 1), Position(1, 2))


# --- TB-20 .. TB-25: snapshots, trim, recovery -----------------------------------------------

POSITIONS = st.builds(Position, st.integers(0, 2**40), st.integers(-1, 2**40))
TXNS = st.builds(TxnID, st.integers(0, 2**63), st.integers(0, 2**63))


@given(topic=st.text(max_size=20), mrp=POSITIONS, aborts=st.lists(st.tuples(TXNS, POSITIONS), max_size=5))
def test_tb20_snapshot_record_round_trips_through_protobuf(topic: str, mrp: Position, aborts: list[Any]) -> None:
    """TB-20: the frozen record and TransactionBufferSnapshot_pb2 convert both ways without loss."""
    snap = tb.TransactionBufferSnapshot(topic, mrp, tuple(tb.AbortTxnMetadata(t, p) for t, p in aborts))
    wire = snap.to_pb().SerializeToString()
    assert tb.TransactionBufferSnapshot.from_pb(snap_pb.TransactionBufferSnapshot.FromString(wire)) == snap


@given(seq=st.integers(0, 2**40), mrp=POSITIONS, ids=st.lists(TXNS, max_size=5))
def test_tb22_segment_and_index_records_round_trip(seq: int, mrp: Position, ids: list[TxnID]) -> None:
    """TB-22: segment and index records convert both ways without loss."""
    seg = tb.TransactionBufferSnapshotSegment("t", seq, mrp, tuple(ids))
    assert (
        tb.TransactionBufferSnapshotSegment.from_pb(
            snap_pb.TransactionBufferSnapshotSegment.FromString(seg.to_pb().SerializeToString())
        )
        == seg
    )
    idx = tb.TransactionBufferSnapshotIndexes(
        "t",
        (tb.TransactionBufferSnapshotIndex(seq, mrp), tb.TransactionBufferSnapshotIndex(seq + 1, mrp, Position(3, 4))),
        tb.TransactionBufferSnapshotIndexesMetadata(mrp, tuple(ids)),
    )
    assert (
        tb.TransactionBufferSnapshotIndexes.from_pb(
            snap_pb.TransactionBufferSnapshotIndexes.FromString(idx.to_pb().SerializeToString())
        )
        == idx
    )


def test_tb20_snapshot_lists_aborts_in_marker_order() -> None:
    """TB-20: the snapshot holds every aborted txn with its marker."""
    s, _ = run(ready(), tb.AbortTxn(T1), tb.AbortTxn(T0), tb.TakeSnapshot())
    snap = s.snapshot_store.snapshot
    assert snap is not None and snap.max_read_position == Position(1, 2)
    assert snap.aborts == (tb.AbortTxnMetadata(T1, Position(1, 1)), tb.AbortTxnMetadata(T0, Position(1, 2)))


def test_tb21_timer_snapshot_only_when_moved() -> None:
    """TB-21: the timer snapshots a Ready buffer only when max_read_position moved."""
    s, (r,) = run(ready(), tb.TakeSnapshot())
    assert r.effects == ()  # the first append left max_read_position where it was
    s, (_, r) = run(s, tb.CommitTxn(T0), tb.TakeSnapshot())
    assert isinstance(r.effects[0], tb.WriteSnapshot) and s.change_max_read_position_count == 0


def test_tb22_capacity_formula() -> None:
    """TB-22: (segmentSize - 8 - len(topic)) / 3."""
    config = Config().with_overrides({"transactionBufferSnapshotSegmentSize": 262144})
    assert tb.segment_capacity(config, "x" * 40) == (262144 - 8 - 40) // 3


def test_tb22_segmented_take_snapshot_rewrites_index_only() -> None:
    """TB-22: in segmented mode a snapshot is the index record."""
    config = Config().with_overrides({"transactionBufferSegmentedSnapshotEnabled": True})
    s, (_, r) = run(ready(config), tb.AbortTxn(T0), tb.TakeSnapshot())
    assert [type(e) for e in r.effects] == [tb.WriteSnapshotIndexes]
    assert s.unsealed == (T0,) and s.snapshot_store.snapshot is None


def test_tb23_trim_waits_for_next_end_and_is_exact() -> None:
    """TB-23: after deletion the aborted txn is forgotten at the next end, and only it."""
    s, _ = run(
        ready(), tb.AbortTxn(T0), tb.RollOverLedger(), tb.AppendBufferToTxn(T1), tb.AbortTxn(T1), tb.DeleteLedger(1)
    )
    assert set(s.aborted) == {T0, T1}
    s, _ = run(s, tb.CommitTxn(T2))
    assert set(s.aborted) == {T1}


def test_tb23_delete_ledger_refused_beyond_max_read_position() -> None:
    """TB-23: a ledger holding entries after max_read_position cannot be deleted."""
    s, _ = run(ready(), tb.RollOverLedger(), tb.PublishMessage())
    _, (r,) = run(s, tb.DeleteLedger(1))
    assert isinstance(r, Err) and "after the max read position" in r.error.message


def test_tb24_recover_fold_from_records() -> None:
    """TB-24: recover() folds snapshot records and replays entries after the snapshot."""
    s, results = run(
        ready(),
        tb.AbortTxn(T0),
        tb.TakeSnapshot(),
        tb.AppendBufferToTxn(T1),
        tb.AppendBufferToTxn(T2),
        tb.CommitTxn(T1),
    )
    records = list(ready().snapshot_store.snapshot and [tb.WriteSnapshot(ready().snapshot_store.snapshot)])
    records += [e for r in results for e in r.effects if isinstance(e, tb.WriteSnapshot)]
    rec = tb.recover(s.config, topic=s.topic, ledgers=s.ledgers, entries=s.entries, snapshot_records=records)
    assert rec.status is tb.BufferStatus.READY
    assert dict(rec.ongoing) == dict(s.ongoing) == {T2: Position(1, 3)}
    assert set(rec.aborted) == {T0}
    assert rec.max_read_position == s.max_read_position


def test_tb24_recovery_without_snapshot_is_nosnapshot_at_lac() -> None:
    """TB-24: no snapshot record: NoSnapshot at the LAC."""
    rec = tb.recover(Config(), topic="t", ledgers=(LedgerInfo(1, 0),), entries=(), snapshot_records=())
    assert rec.status is tb.BufferStatus.NO_SNAPSHOT and rec.max_read_position == Position(1, -1)


def test_tb24_segmented_recovery_falls_back_to_single_snapshot() -> None:
    """TB-24: segmented mode with no index reads the old single snapshot (upgrade path)."""
    s, _ = run(ready(), tb.AbortTxn(T0), tb.TakeSnapshot())
    config = Config().with_overrides({"transactionBufferSegmentedSnapshotEnabled": True})
    assert s.snapshot_store.snapshot is not None
    rec = tb.recover(
        config,
        topic=s.topic,
        ledgers=s.ledgers,
        entries=s.entries,
        snapshot_records=[tb.WriteSnapshot(s.snapshot_store.snapshot)],
    )
    assert rec.status is tb.BufferStatus.READY and tb.is_txn_aborted(rec, T0)


def test_tb25_clear_tombstones_and_reload_refused() -> None:
    """TB-25: a deleted topic's snapshots are tombstoned and it is not loaded again."""
    s, (_, r, r2) = run(ready(), tb.CloseTransactionBuffer(), tb.ClearTransactionBufferSnapshot(), tb.ReloadTopic())
    assert isinstance(r.effects[-1], tb.ClearSnapshot) and s.snapshot_store == tb.SnapshotStore()
    assert isinstance(r2, Err)


def test_vectors_all_pass() -> None:
    """Every vector of spec/vectors/buffer (TB-1 .. TB-25 scenarios) passes."""
    results = run_paths([VECTORS_DIR])
    assert len(results) >= 20
    assert [r.vector_id for r in results if not r.passed] == []


@given(
    kind=st.sampled_from(list(tb.EntryKind)),
    txn=TXNS,
    entry=st.integers(0, 2**40),
    publish_time=st.integers(0, 2**50),
)
def test_tb16_entry_metadata_round_trips_and_classifies(
    kind: tb.EntryKind, txn: TxnID, entry: int, publish_time: int
) -> None:
    """TB-16: markers carry producer pulsar.txn.marker, sequence id -1 and marker_type 21/22; the
    classification of a stored entry reads them back."""
    e = tb.LogEntry(Position(1, entry), kind, None if kind is tb.EntryKind.NORMAL else txn)
    md = tb.entry_metadata(e, publish_time_ms=publish_time)
    wire = md.SerializeToString()
    decoded = api_pb.MessageMetadata.FromString(wire)
    assert tb.entry_from_metadata(e.position, decoded) == e
    if kind.is_marker:
        assert decoded.producer_name == "pulsar.txn.marker" and decoded.sequence_id == 2**64 - 1
        assert decoded.marker_type == (21 if kind is tb.EntryKind.TXN_COMMIT else 22)
    else:
        assert not decoded.HasField("marker_type")
