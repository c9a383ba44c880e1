"""What must hold of every pending-ack state, and of every step (``spec/rules/pending_ack.md``).

The tests check these after every step, ``proofs/pending_ack.py`` encodes the state invariants in
Z3 (and a test checks the encoding agrees with these predicates), and the bulk checker reuses them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import immutables

from invariants.base import Invariant, StepProperty
from reference.pending_ack import (
    AbortTxn,
    AckBits,
    CommitTxn,
    CursorView,
    FollowCursor,
    HandleState,
    IndividualAck,
    PendingAckState,
    RedeliverUnacknowledgedMessages,
    ResetCursor,
    ResetSubscriptionCursor,
    TrimPendingAckLog,
    log_index_lag_backoff,
)
from spec.result import Ok
from spec.types import INT64_MAX, Position, TxnID

__all__ = ["INVARIANTS", "STEP_PROPERTIES", "bits_deleted", "overlap"]


def overlap(a: int | None, b: int | None) -> bool:
    """Do two holdings of one entry share an index?  ``None`` is the whole entry (PA-2)."""
    if a == 0 or b == 0:
        return False
    if a is None or b is None:
        return True
    return bool(a & b)


def bits_deleted(cursor: CursorView, position: Position, bits: int | None) -> bool:
    """Has the cursor deleted every index in ``bits`` (None: the whole entry) of ``position``?"""
    deleted = cursor.deleted_bits(position)
    if deleted is None:
        return True
    return bits is not None and bits & ~deleted == 0


def _holdings(state: PendingAckState) -> Iterable[tuple[TxnID, Position, AckBits]]:
    for txn, held in state.individual_ack_of_transaction.items():
        for position, bits in held.items():
            yield txn, position, bits


def individual_acks_exclusive(state: PendingAckState) -> bool:
    """PA-6: no index of an entry is held by two txns."""
    seen: dict[Position, list[int | None]] = {}
    for _txn, position, bits in _holdings(state):
        others = seen.setdefault(position, [])
        if any(overlap(bits.acked, other) for other in others):
            return False
        others.append(bits.acked)
    return True


def combined_is_union(state: PendingAckState) -> bool:
    """PA-8, PA-12, PA-13: individualAckPositions holds exactly the union of every txn's holdings."""
    union: dict[Position, int | None] = {}
    for _txn, position, bits in _holdings(state):
        if position in union:
            prev = union[position]
            union[position] = None if prev is None or bits.acked is None else prev | bits.acked
        else:
            union[position] = bits.acked
    if set(union) != set(state.individual_ack_positions.keys()):
        return False
    return all(state.individual_ack_positions[p].acked == acked for p, acked in union.items())


def no_empty_holdings(state: PendingAckState) -> bool:
    """PA-8, PA-11: a registered txn holds at least one index (the cursor taking all forgets it)."""
    return all(len(held) > 0 for held in state.individual_ack_of_transaction.values())


def pending_never_deleted(state: PendingAckState) -> bool:
    """PA-1, PA-3, PA-11: nothing the cursor deleted is held by a txn (DELETED and PENDING_ACK are disjoint)."""
    cursor = state.cursor
    for _txn, position, bits in _holdings(state):
        deleted = cursor.deleted_bits(position)
        if deleted is None or (bits.acked is not None and bits.acked & deleted):
            return False
    return all(not cursor.is_deleted(position) for position in state.individual_ack_positions)


def cumulative_slot_above_mark_delete(state: PendingAckState) -> bool:
    """PA-9, PA-11: the one cumulative pending ack lies above the cursor's mark-delete position."""
    slot = state.cumulative_ack
    return slot is None or slot.position > state.cursor.mark_delete_position


def ack_bits_well_formed(state: PendingAckState) -> bool:
    """PA-2, PA-3, PA-7: holdings hold at least one index inside their batch; the cursor view is normal."""
    for _txn, _position, bits in _holdings(state):
        if bits.acked is not None and (bits.acked == 0 or bits.acked >> bits.batch_size):
            return False
    for bits in state.individual_ack_positions.values():
        if bits.acked is not None and (bits.acked == 0 or bits.acked >> bits.batch_size):
            return False
    cursor = state.cursor
    md = cursor.mark_delete_position
    if md.next() in cursor.individually_deleted or any(p <= md for p in cursor.individually_deleted):
        return False
    for position, bits in cursor.batch_deleted.items():
        if bits.acked is None or cursor.is_deleted(position):
            return False
        full = (1 << bits.batch_size) - 1
        if bits.acked == 0 or bits.acked & full == full:
            return False
    return True


def txn_order_is_registry(state: PendingAckState) -> bool:
    """PA-8, PA-14: the insertion order lists each registered txn once."""
    order = state.txn_order
    return len(set(order)) == len(order) and set(order) == set(state.individual_ack_of_transaction.keys())


def queue_only_before_ready(state: PendingAckState) -> bool:
    """PA-17: requests wait only while the handle is None or Initializing, and only with an init under way."""
    handle = state.handle_state
    if state.queued and handle not in (HandleState.NONE, HandleState.INITIALIZING):
        return False
    if handle is HandleState.NONE and state.init_attempts == 0 and state.queued:
        return False
    return state.init_attempts == 0 or handle in (HandleState.NONE, HandleState.INITIALIZING)


def log_index_well_formed(state: PendingAckState) -> bool:
    """PA-16: the sparse index is ordered, names live records, and its lag follows LogIndexLagBackoff."""
    index = state.log_index
    keys = [k for k, _ in index]
    ids = [i for _, i in index]
    if keys != sorted(set(keys)) or ids != sorted(set(ids)):
        return False
    if any(not state.log_mark_delete < i < state.next_record_id for i in ids):
        return False
    if state.max_ack_position is not None and any(k > state.max_ack_position for k in keys):
        return False
    expected = log_index_lag_backoff(state.config.transaction_pending_ack_log_index_min_lag, INT64_MAX, 1, len(index))
    if state.max_index_lag != expected:
        return False
    # The lag may reach the new maxIndexLag when a trim shrinks the index; the next record indexes.
    return state.current_index_lag >= 0


INVARIANTS: tuple[Invariant[PendingAckState], ...] = (
    Invariant(
        "individual_acks_exclusive",
        ("PA-6",),
        individual_acks_exclusive,
        "A position or batch index is pending for at most one txn.",
    ),
    Invariant(
        "combined_is_union",
        ("PA-8", "PA-12", "PA-13"),
        combined_is_union,
        "individualAckPositions is the union of the txns' individual acks.",
    ),
    Invariant(
        "pending_never_deleted",
        ("PA-1", "PA-3", "PA-11"),
        pending_never_deleted,
        "No pending index is deleted on the cursor.",
    ),
    Invariant(
        "cumulative_slot_above_mark_delete",
        ("PA-9", "PA-11"),
        cumulative_slot_above_mark_delete,
        "At most one txn holds a cumulative pending ack, and it is above the mark-delete position.",
    ),
    Invariant(
        "ack_bits_well_formed",
        ("PA-2", "PA-3", "PA-7"),
        ack_bits_well_formed,
        "Holdings are non-empty and inside their batch; the cursor view is normalized.",
    ),
    Invariant("no_empty_holdings", ("PA-8", "PA-11"), no_empty_holdings, "Every registered txn holds something."),
    Invariant(
        "txn_order_is_registry",
        ("PA-8", "PA-14"),
        txn_order_is_registry,
        "The insertion order lists exactly the registered txns.",
    ),
    Invariant(
        "queue_only_before_ready",
        ("PA-17",),
        queue_only_before_ready,
        "Requests queue only while the handle is None or Initializing.",
    ),
    Invariant(
        "log_index_well_formed",
        ("PA-16",),
        log_index_well_formed,
        "The sparse log index is ordered and its lag follows LogIndexLagBackoff.",
    ),
)


# ---------------------------------------------------------------------------------------------
# Step properties


def _ran(before: PendingAckState, result: Any) -> bool:
    return before.handle_state is HandleState.READY and isinstance(result, Ok)


def deleted_is_absorbing(before: PendingAckState, command: Any, result: Any, after: PendingAckState) -> bool:
    """PA-3: whatever the cursor deleted stays deleted (but for a seek, PA-22)."""
    if isinstance(command, ResetCursor) and isinstance(result, Ok):
        return True
    b, a = before.cursor, after.cursor
    if a.mark_delete_position < b.mark_delete_position:
        return False
    if any(not a.is_deleted(p) for p in b.individually_deleted):
        return False
    return all(bits_deleted(a, p, bits.acked) for p, bits in b.batch_deleted.items())


def _lwm_aborted(after: PendingAckState, txn: TxnID) -> bool:
    return txn not in after.individual_ack_of_transaction and txn.least_sig_bits <= after.low_water_marks.get(
        txn.most_sig_bits, -1
    )


def _strip(cursor: CursorView, held: immutables.Map[Position, AckBits]) -> dict[Position, int | None]:
    out: dict[Position, int | None] = {}
    for position, bits in held.items():
        deleted = cursor.deleted_bits(position)
        if deleted is None:
            continue
        if bits.acked is None:
            out[position] = None
        elif bits.acked & ~deleted:
            out[position] = bits.acked & ~deleted
    return out


def _others_untouched(before: PendingAckState, txn: TxnID, after: PendingAckState) -> bool:
    for other, held in before.individual_ack_of_transaction.items():
        if other == txn:
            continue
        if other not in after.individual_ack_of_transaction:
            if _strip(after.cursor, held) and not _lwm_aborted(after, other):
                return False
            continue
        now = {p: b.acked for p, b in after.individual_ack_of_transaction[other].items()}
        if now != _strip(after.cursor, held):
            return False
    return True


def commit_deletes_exactly_its_acks(before: PendingAckState, command: Any, result: Any, after: PendingAckState) -> bool:
    """PA-12: a commit deletes the txn's acks on the cursor, deletes nothing else, and leaves
    other txns as they were (but for what its cumulative range covers, PA-11, and PA-14)."""
    if not isinstance(command, CommitTxn) or not _ran(before, result):
        return True
    txn = command.txn_id
    held = before.individual_ack_of_transaction.get(txn, immutables.Map())
    if any(not bits_deleted(after.cursor, p, bits.acked) for p, bits in held.items()):
        return False
    if txn in after.individual_ack_of_transaction:
        return False
    slot = before.cumulative_ack
    owned = slot is not None and slot.txn_id == txn
    if owned:
        assert slot is not None
        if after.cumulative_ack is not None and after.cumulative_ack.txn_id == txn:
            return False
        if not bits_deleted(after.cursor, slot.position, slot.acked):
            return False
    limit = slot.position if owned and slot is not None else None
    for position in _touched(before.cursor, after.cursor):
        if limit is not None and position <= limit:
            continue
        was = before.cursor.deleted_bits(position)
        now = after.cursor.deleted_bits(position)
        mine = held.get(position)
        if mine is None:
            return False
        if mine.acked is not None:
            new = (now if now is not None else (1 << mine.batch_size) - 1) & ~(was or 0)
            if new & ~mine.acked:
                return False
    return _others_untouched(before, txn, after)


def _touched(b: CursorView, a: CursorView) -> list[Position]:
    """Entries whose deletion changed between two cursor views (within the ledgers they name)."""
    out: set[Position] = set(a.individually_deleted - b.individually_deleted)
    out |= {p for p, bits in a.batch_deleted.items() if b.batch_deleted.get(p) != bits}
    lo, hi = b.mark_delete_position, a.mark_delete_position
    if hi > lo:
        if hi.ledger_id == lo.ledger_id:
            out |= {Position(lo.ledger_id, e) for e in range(lo.entry_id + 1, hi.entry_id + 1)}
        else:
            out.add(hi)
    return sorted(p for p in out if b.deleted_bits(p) != a.deleted_bits(p))


def abort_returns_exactly_its_acks(before: PendingAckState, command: Any, result: Any, after: PendingAckState) -> bool:
    """PA-13: an abort leaves the cursor alone, releases exactly the txn's individual acks, redelivers
    their positions, and leaves other txns as they were (but for PA-14)."""
    if not isinstance(command, AbortTxn) or not _ran(before, result):
        return True
    txn = command.txn_id
    if after.cursor != before.cursor or txn in after.individual_ack_of_transaction:
        return False
    held = before.individual_ack_of_transaction.get(txn, immutables.Map())
    for position, bits in held.items():
        now = after.individual_ack_positions.get(position)
        if now is not None and overlap(now.acked, bits.acked):
            return False
    if held:
        redelivered = [e for e in result.effects if isinstance(e, RedeliverUnacknowledgedMessages)]
        if not redelivered or redelivered[0].positions != tuple(sorted(held)):
            return False
    slot = before.cumulative_ack
    if (
        slot is not None
        and slot.txn_id == txn
        and after.cumulative_ack is not None
        and after.cumulative_ack.txn_id == txn
    ):
        return False
    return _others_untouched(before, txn, after)


def failed_ack_changes_nothing(before: PendingAckState, command: Any, result: Any, after: PendingAckState) -> bool:
    """PA-4, PA-7: a rejected txn ack leaves the state as it was and writes nothing."""
    if isinstance(result, Ok):
        return True
    return after == before and result.effects == ()


def accepted_ack_is_held(before: PendingAckState, command: Any, result: Any, after: PendingAckState) -> bool:
    """PA-8: after an accepted individual ack the txn holds every index it acked."""
    if not isinstance(command, IndividualAck) or not _ran(before, result):
        return True
    held = after.individual_ack_of_transaction.get(command.txn_id, immutables.Map())
    for acked in command.positions:
        mine = held.get(acked.position)
        bits = acked.acked
        if mine is None:
            return False
        if mine.acked is not None and (bits is None or bits & ~mine.acked):
            return False
    return True


def reset_cursor_resets_exactly(before: PendingAckState, command: Any, result: Any, after: PendingAckState) -> bool:
    """PA-22: a seek is refused, changing nothing, exactly when a txn holds a pending ack or txn
    requests wait; otherwise nothing is pending before or after, the cursor holds nothing above
    its new mark-delete position but the read entry's ack set, the whole log is trimmed, and the
    durable cursor is told to follow."""
    if not isinstance(command, ResetCursor):
        return True
    busy = bool(
        before.txn_order
        or before.cumulative_ack is not None
        or before.queued
        or before.handle_state not in (HandleState.NONE, HandleState.READY)
    )
    if not isinstance(result, Ok):
        return after == before and (busy or command.read_position is not None)
    if busy or after.individual_ack_positions or after.individual_ack_of_transaction:
        return False
    cursor = after.cursor
    if cursor.mark_delete_position != command.mark_delete_position or cursor.individually_deleted:
        return False
    read = command.read_position
    if any(read is None or p != read.position for p in cursor.batch_deleted):
        return False
    if after.log_index or after.log_mark_delete != max(before.log_mark_delete, before.next_record_id - 1):
        return False
    trims = [e for e in result.effects if isinstance(e, TrimPendingAckLog)]
    if trims != (
        [TrimPendingAckLog(before.next_record_id - 1)] if before.next_record_id - 1 > before.log_mark_delete else []
    ):
        return False
    return ResetSubscriptionCursor(command.mark_delete_position, read) in result.effects


def view_follows_the_cursor(before: PendingAckState, command: Any, result: Any, after: PendingAckState) -> bool:
    """PA-25: following the durable cursor moves the view's mark-delete position to the larger of the
    two and nothing else on the cursor but what now lies at or below it; the pending maps lose only
    what lies at or below it; nothing is logged and no cursor effect is emitted."""
    if not isinstance(command, FollowCursor):
        return True
    if not isinstance(result, Ok) or result.effects:
        return False
    md = max(before.cursor.mark_delete_position, command.mark_delete_position)
    cursor = after.cursor
    if cursor.mark_delete_position < md:
        return False
    if md == before.cursor.mark_delete_position:
        return after == before
    # Past ``md`` the view may fold only the run of deletes that follows it (within its ledger).
    beyond = cursor.mark_delete_position
    if not all(p <= beyond or p in cursor.individually_deleted for p in before.cursor.individually_deleted):
        return False
    if any(p <= beyond for p in cursor.individually_deleted) or any(p <= beyond for p in cursor.batch_deleted):
        return False
    kept = {p: b for p, b in before.individual_ack_positions.items() if p > beyond}
    if dict(after.individual_ack_positions.items()) != kept:
        return False
    slot = before.cumulative_ack
    return after.cumulative_ack == (slot if slot is not None and slot.position > beyond else None)


STEP_PROPERTIES: tuple[StepProperty[PendingAckState], ...] = (
    StepProperty("deleted_is_absorbing", ("PA-3",), deleted_is_absorbing),
    StepProperty("commit_deletes_exactly_its_acks", ("PA-12",), commit_deletes_exactly_its_acks),
    StepProperty("abort_returns_exactly_its_acks", ("PA-13",), abort_returns_exactly_its_acks),
    StepProperty("failed_ack_changes_nothing", ("PA-4", "PA-7"), failed_ack_changes_nothing),
    StepProperty("accepted_ack_is_held", ("PA-8",), accepted_ack_is_held),
    StepProperty("reset_cursor_resets_exactly", ("PA-22",), reset_cursor_resets_exactly),
    StepProperty("view_follows_the_cursor", ("PA-25",), view_follows_the_cursor),
)
