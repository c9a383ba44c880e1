"""What must hold of the *composed* system: the coordinator, the buffers of its partitions and the
pending acks of its subscriptions together.  Stated once here; the composed model checker
(:mod:`proofs.check`) evaluates them in every reachable state, and tests import them.

Each machine's own ``INVARIANTS`` say what holds of one machine.  These say what holds *between*
machines, about transactions as the coordinator decided them:

* ``decided`` maps a transaction to the last status the coordinator logged for it (OPEN after
  NEW, then COMMITTING/ABORTING, then COMMITTED/ABORTED).  The coordinator forgets a finished
  transaction (TC-9), so the checker keeps this map as a history variable.
* Safety: a reader may receive a transactional message only once its commit is decided
  (:data:`PARTITION_SAFETY`); a position a committed transaction acknowledged is never handed out
  again (:func:`committed_ack_redelivered`); every component recovers, from what it made durable,
  the state it has live (:data:`RECOVERY`).
* Liveness (:data:`LIVENESS`), under weak fairness of every non-faulty step and finitely many
  faults: every transaction ends, its end reaches every participant, and every committed message
  becomes readable.  Each is a *goal* predicate; the property is "on every fair path the goal holds
  infinitely often", so a violation is a reachable fair cycle (a lasso) on which it never holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from invariants.buffer import messages_with_next_end
from reference import buffer as tb
from reference import coordinator as tc
from reference import pending_ack as pa
from spec.config import Config
from spec.types import Position, Subscription, TxnID, TxnStatus

__all__ = [
    "LIVENESS",
    "LIVENESS_STRICT",
    "PARTITION_SAFETY",
    "RECOVERY",
    "Liveness",
    "PartitionInvariant",
    "RecoveryCheck",
    "SystemView",
    "buffer_recovers_live",
    "committed_ack_redelivered",
    "coordinator_recovers_live",
    "delivered_too_early",
    "pending_ack_recovers_live",
]

Decided = Mapping[TxnID, TxnStatus]
_COMMIT_DECIDED = (TxnStatus.COMMITTING, TxnStatus.COMMITTED)
_FINISHED = (TxnStatus.COMMITTED, TxnStatus.ABORTED)


# --- safety between the coordinator and one partition ---------------------------------------


@dataclass(frozen=True)
class PartitionInvariant:
    """A predicate over one partition's buffer and the coordinator's decisions."""

    name: str
    rules: tuple[str, ...]
    holds: Callable[[tb.BufferState, Decided], bool]
    doc: str = ""


def read_committed(buffer: tb.BufferState, decided: Decided) -> bool:
    """TB-15, TB-16, TC-14: a transactional message a reader may receive now belongs to a
    transaction whose commit the coordinator has decided (COMMITTING or COMMITTED).  So an aborted
    message is never dispatched, and neither is a message of a transaction still open."""
    visible = set(tb.dispatchable(buffer))
    for entry in buffer.entries:
        if entry.kind is tb.EntryKind.TXN_DATA and entry.position in visible:
            assert entry.txn_id is not None
            if decided.get(entry.txn_id) not in _COMMIT_DECIDED:
                return False
    return True


def mrp_before_open_txns(buffer: tb.BufferState, decided: Decided) -> bool:
    """TB-7, TC-13: maxReadPosition (as readers see it) never passes the first message of a
    transaction the coordinator still has OPEN."""
    limit = tb.readable_max_read_position(buffer)
    for entry in buffer.entries:
        if entry.kind is tb.EntryKind.TXN_DATA and entry.position <= limit:
            assert entry.txn_id is not None
            if decided.get(entry.txn_id) is TxnStatus.OPEN:
                return False
    return True


PARTITION_SAFETY: tuple[PartitionInvariant, ...] = (
    PartitionInvariant("read-committed", ("TB-15", "TB-16", "TC-14"), read_committed, read_committed.__doc__ or ""),
    PartitionInvariant(
        "mrp-before-open-txn", ("TB-7", "TC-13"), mrp_before_open_txns, mrp_before_open_txns.__doc__ or ""
    ),
)


# --- checks made when a message is handed to a consumer -------------------------------------


def committed_ack_redelivered(committed_acks: Iterable[Position], position: Position) -> bool:
    """PA-12: handing out ``position`` again after a committed transaction acknowledged it is a
    redelivery of a consumed message (exactly-once broken)."""
    return position in set(committed_acks)


def delivered_too_early(deliver_at: int, now_ms: int) -> bool:
    """DD-1 (strict deliver-at): a delayed message handed to a consumer before its time."""
    return deliver_at >= 0 and now_ms < deliver_at


# --- recovery yields the live state ---------------------------------------------------------


@dataclass(frozen=True)
class RecoveryCheck:
    """Recovering a component from what it made durable gives the state it has live (up to what
    its rules say memory alone holds)."""

    name: str
    rules: tuple[str, ...]
    doc: str = ""


def _meta_view(meta: tc.TxnMeta) -> tuple[Any, ...]:
    return (
        meta.txn_id,
        meta.status,
        meta.produced_partitions,
        meta.acked_subscriptions,
        meta.timeout_ms,
        meta.start_time,
        meta.owner,
    )


def coordinator_recovers_live(
    live: tc.CoordinatorState, records: tuple[tuple[int, tc.TxnLogRecord], ...], max_local_txn_id: int
) -> bool:
    """TC-21 .. TC-25: replaying the live records of the log yields the same transactions, with
    the same statuses, participants, times and owners, and the same sequence.  Record ids are the
    runner's numbering (renumbered by a reload) and the counters are memory only (TC-20)."""
    if live.store_state is not tc.StoreState.READY:
        return True
    recovered, _ = tc.recover(live.config, live.coordinator_id, records, max_local_txn_id)
    mine = {seq: _meta_view(m) for seq, m in live.txns.items()}
    theirs = {seq: _meta_view(m) for seq, m in recovered.txns.items()}
    return mine == theirs and recovered.sequence_id == live.sequence_id


def _aborted_with_live_marker(state: tb.BufferState) -> frozenset[TxnID]:
    live = {info.ledger_id for info in state.ledgers}
    kept = {t for t, marker in state.aborted.items() if marker.ledger_id in live}
    for segment in state.segments:
        if segment.persistent_position.ledger_id in live:
            kept |= segment.aborts
    return frozenset(kept | set(state.unsealed))


def buffer_recovers_live(live: tb.BufferState) -> bool:
    """TB-24: a recovered buffer (latest snapshot, then the entries after it) has the live
    ongoing transactions at the same first positions, lets readers see the same entries, and has
    the same aborted transactions among those whose abort marker is still stored.  Low water marks,
    the move counter and parked appends are memory only (TB-10, TB-13, TB-4); maxReadPosition
    itself may differ over messages of aborted transactions, which no reader sees (TB-9, TB-16);
    an aborted transaction whose marker's ledger is gone may be remembered by one and not the
    other (TB-23)."""
    if live.status not in (tb.BufferStatus.READY, tb.BufferStatus.NO_SNAPSHOT):
        return True
    view = tb.recovery_view(
        live.config,
        topic=live.topic,
        ledger_id=live.ledgers[-1].ledger_id,
        ledgers=live.ledgers,
        entries=live.entries,
        snapshot_records=_snapshot_records(live.snapshot_store),
    )
    again, _ = tb.step(view, tb.StartRecovery())
    again, _ = tb.step(again, tb.CompleteRecovery())
    # TB-24's other exception: a transaction whose messages are stored but whose end marker went with
    # a deleted ledger (only a late append after the abort, under the quirk append-after-abort, stores
    # messages after the marker) is ongoing after a recovery from an older snapshot, and pins
    # maxReadPosition there: the rules say the two differ then.
    marked = {e.txn_id for e in live.entries if e.kind.is_marker}
    if any(
        e.kind is tb.EntryKind.TXN_DATA and e.txn_id not in live.ongoing and e.txn_id not in marked
        for e in live.entries
    ):
        return True
    return (
        dict(again.ongoing) == dict(live.ongoing)
        and tb.dispatchable(again) == tb.dispatchable(live)
        and _aborted_with_live_marker(again) == _aborted_with_live_marker(live)
    )


def _snapshot_records(store: tb.SnapshotStore) -> list[Any]:
    records: list[Any] = []
    if store.snapshot is not None:
        records.append(tb.WriteSnapshot(store.snapshot))
    for key in sorted(store.segments.keys()):
        records.append(tb.WriteSnapshotSegment(store.segments[key]))
    if store.indexes is not None:
        records.append(tb.WriteSnapshotIndexes(store.indexes))
    return records


def pending_ack_recovers_live(
    live: pa.PendingAckState,
    records: tuple[tuple[int, pa.PendingAckRecord], ...],
    log_exists: bool,
) -> bool:
    """PA-18 .. PA-20: replaying the surviving pending-ack log over the durable cursor gives the
    live cursor and pending-ack maps (not the low watermarks, the queue or the log index)."""
    if live.handle_state is not pa.HandleState.READY or not log_exists:
        return True
    again = pa.recover(live.config, records, cursor=live.cursor, sub_type=live.sub_type)
    return pa.pending_ack_view(again) == pa.pending_ack_view(live)


RECOVERY: tuple[RecoveryCheck, ...] = (
    RecoveryCheck("coordinator-recovers-live", ("TC-21", "TC-22", "TC-23", "TC-24", "TC-25"), "see above"),
    RecoveryCheck("buffer-recovers-live", ("TB-24",), "see above"),
    RecoveryCheck("pending-ack-recovers-live", ("PA-18", "PA-19", "PA-20"), "see above"),
)


# --- liveness goals -------------------------------------------------------------------------


@dataclass(frozen=True)
class SystemView:
    """The composed state as the liveness goals read it (names are the model's)."""

    config: Config
    coordinator: tc.CoordinatorState
    decided: Decided
    buffers: Mapping[str, tb.BufferState] = field(default_factory=dict)
    pending_acks: Mapping[Subscription, pa.PendingAckState] = field(default_factory=dict)
    # Delayed messages not yet handed to a consumer although committed and due (the checker's
    # history variable; empty in models without delayed delivery).
    undelivered_due: tuple[Position, ...] = ()
    # Per partition, the transactions a send re-opened after the partition had processed their end
    # (TB-8, quirk Q8): documented to pin maxReadPosition until a later low water mark (TB-13).
    reopened: Mapping[str, frozenset[TxnID]] = field(default_factory=dict)
    # Per subscription, the transactions an acknowledgement re-opened after the subscription had
    # processed their end (a late ack; it waits for a later low water mark, PA-14).
    reopened_acks: Mapping[Subscription, frozenset[TxnID]] = field(default_factory=dict)


@dataclass(frozen=True)
class Liveness:
    """ "On every fair path, ``goal`` holds infinitely often": a violation is a reachable fair cycle
    (or a state with no fair step) where it never holds."""

    name: str
    rules: tuple[str, ...]
    goal: Callable[[SystemView], bool]
    doc: str = ""


def txns_end(view: SystemView) -> bool:
    """TC-13 .. TC-16, TC-18, TC-24: every transaction the coordinator issued is COMMITTED or ABORTED."""
    issued = view.coordinator.sequence_id
    cid = view.coordinator.coordinator_id
    return all(view.decided.get(TxnID(cid, seq)) in _FINISHED for seq in range(issued + 1))


def buffer_ended(buffer: tb.BufferState, decided: Decided, reopened: frozenset[TxnID] = frozenset()) -> bool:
    """TB-11, TB-12, TB-13: a finished transaction is not ongoing on this partition, unless a late
    send re-opened it after its end (TB-8: it then waits for a later low water mark, TB-13)."""
    return not any(decided.get(txn) in _FINISHED and txn not in reopened for txn in buffer.ongoing)


def pending_ack_ended(state: pa.PendingAckState, decided: Decided, reopened: frozenset[TxnID] = frozenset()) -> bool:
    """PA-12 .. PA-14: a finished transaction holds no pending ack on this subscription, unless an
    acknowledgement of it arrived after its end (it waits for a later low water mark, PA-14)."""
    if any(decided.get(txn) in _FINISHED and txn not in reopened for txn in state.individual_ack_of_transaction):
        return False
    slot = state.cumulative_ack
    return slot is None or decided.get(slot.txn_id) not in _FINISHED or slot.txn_id in reopened


def ends_everywhere(view: SystemView) -> bool:
    """TC-14, TB-11 .. TB-13, PA-12 .. PA-14: the end of every finished transaction reached every
    participant: no buffer keeps it ongoing (so its markers landed) and no pending ack holds it."""
    return all(
        buffer_ended(b, view.decided, view.reopened.get(name, frozenset())) for name, b in view.buffers.items()
    ) and all(
        pending_ack_ended(s, view.decided, view.reopened_acks.get(name, frozenset()))
        for name, s in view.pending_acks.items()
    )


def buffer_all_committed_visible(
    buffer: tb.BufferState, decided: Decided, reopened: frozenset[TxnID] = frozenset()
) -> bool:
    """TB-19: every stored normal message and every stored message of a COMMITTED transaction is
    readable, except behind the first position of a transaction a late send re-opened (TB-8), and
    except a message that the first end marker of its transaction after it aborts: a late copy of a
    send stored after the commit marker (TB-8) is not one of the messages the commit decided, and the
    low-water-mark abort that ends the re-opened transaction filters it (TB-13, TB-16)."""
    visible = set(tb.dispatchable(buffer))
    pins = [first for txn, first in buffer.ongoing.items() if txn in reopened]
    horizon = min(pins) if pins else None
    aborted_after = _aborted_by_next_end(buffer)
    for entry in buffer.entries:
        if horizon is not None and entry.position >= horizon:
            break
        if entry.kind is tb.EntryKind.NORMAL and entry.position not in visible:
            return False
        if entry.kind is tb.EntryKind.TXN_DATA and entry.position not in visible:
            assert entry.txn_id is not None
            if decided.get(entry.txn_id) is TxnStatus.COMMITTED and entry.position not in aborted_after:
                return False
    return True


def _aborted_by_next_end(buffer: tb.BufferState) -> set[Position]:
    """The stored messages whose transaction's first end marker after them is an abort marker."""
    return {entry.position for entry, end in messages_with_next_end(buffer) if end is tb.EntryKind.TXN_ABORT}


def committed_visible(view: SystemView) -> bool:
    """TB-19, TC-14: every committed message becomes readable on its partition, and every due
    delayed message of it is handed to a consumer (DD-1, DD-13)."""
    return not view.undelivered_due and all(
        buffer_all_committed_visible(b, view.decided, view.reopened.get(name, frozenset()))
        for name, b in view.buffers.items()
    )


def reopened_txns_end(view: SystemView) -> bool:
    """TB-8, TB-13 (quirk Q8), PA-14: a transaction a late send re-opened on a partition, or a late
    acknowledgement re-opened on a subscription, after its end there is eventually ended there too.
    Pulsar relies on a later end on the same partition or subscription carrying a low water mark
    above it; with no such end the partition's maxReadPosition stays pinned, or the message stays
    PENDING_ACK and is never delivered again."""
    buffers = all(
        not any(txn in view.reopened.get(name, frozenset()) for txn in b.ongoing) for name, b in view.buffers.items()
    )
    acks = all(
        not any(txn in view.reopened_acks.get(name, frozenset()) for txn in s.individual_ack_of_transaction)
        for name, s in view.pending_acks.items()
    )
    return buffers and acks


LIVENESS: tuple[Liveness, ...] = (
    Liveness("txns-end", ("TC-13", "TC-14", "TC-15", "TC-16", "TC-18", "TC-24"), txns_end, txns_end.__doc__ or ""),
    Liveness(
        "ends-everywhere", ("TC-14", "TB-11", "TB-12", "TB-13", "PA-12"), ends_everywhere, ends_everywhere.__doc__ or ""
    ),
    Liveness("committed-visible", ("TB-19", "TC-14", "DD-1"), committed_visible, committed_visible.__doc__ or ""),
)

# Checked on request (``txnmodel check --strict``): what Pulsar's design does not promise.
LIVENESS_STRICT: tuple[Liveness, ...] = (
    Liveness("reopened-txns-end", ("TB-8", "TB-13"), reopened_txns_end, reopened_txns_end.__doc__ or ""),
)
