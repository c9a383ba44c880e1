"""What must always hold of a transaction buffer (``reference.buffer.BufferState``).

Stated once here; the stateful tests check every one after every step, ``proofs/buffer.py``
encodes the ``max_read_position`` and dispatch facts in Z3, and the bulk checker imports them.
Rule ids refer to ``spec/rules/buffer.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from invariants.base import Invariant, StepProperty
from reference.buffer import (
    BufferState,
    BufferStatus,
    EntryKind,
    LogEntry,
    WriteSnapshotSegment,
    dispatchable,
    first_ongoing_position,
    is_message_aborted,
    is_txn_aborted,
    last_confirmed_entry,
    readable_max_read_position,
    segment_capacity,
)
from spec.config import Config
from spec.types import Position, TxnID

__all__ = ["INVARIANTS", "STEP_PROPERTIES", "messages_with_next_end", "snapshot_records_problem"]

_RECOVERED = (BufferStatus.READY, BufferStatus.NO_SNAPSHOT)


def _entry_at(state: BufferState, position: Position) -> LogEntry | None:
    for entry in state.entries:
        if entry.position == position:
            return entry
    return None


def _data_of(state: BufferState, txn_id: TxnID) -> list[Position]:
    return [e.position for e in state.entries if e.kind is EntryKind.TXN_DATA and e.txn_id == txn_id]


def _aborted_message(s: BufferState, e: LogEntry) -> bool:
    """TB-16: a message (not a marker) that ``isTxnAborted(txn, position)`` filters."""
    return e.kind is EntryKind.TXN_DATA and e.txn_id is not None and is_message_aborted(s, e.txn_id, e.position)


def mrp_before_every_ongoing(s: BufferState) -> bool:
    """TB-7: max_read_position is strictly before the first position of every ongoing txn."""
    return all(s.max_read_position < p for p in s.ongoing.values())


def mrp_right_before_first_ongoing(s: BufferState) -> bool:
    """TB-7: with txns ongoing, no stored entry lies strictly between max_read_position and the first
    ongoing position (it is previous(first), up to ledgers deleted since)."""
    first = first_ongoing_position(s)
    if first is None:
        return True
    return not any(s.max_read_position < e.position < first for e in s.entries)


def mrp_at_lac_when_idle(s: BufferState) -> bool:
    """TB-9, TB-11, TB-12: recovered and nothing ongoing, every entry after max_read_position is a
    message of an aborted txn (so nothing a reader may see is held back); in NoSnapshot, nothing at all."""
    if s.status not in _RECOVERED or s.ongoing:
        return True
    later = [e for e in s.entries if e.position > s.max_read_position]
    if s.status is BufferStatus.NO_SNAPSHOT:
        return not later
    return all(_aborted_message(s, e) for e in later)


def mrp_not_beyond_lac(s: BufferState) -> bool:
    """TB-7, TB-9: max_read_position never names an entry that does not exist yet."""
    return s.max_read_position <= last_confirmed_entry(s)


def ongoing_first_is_own_message(s: BufferState) -> bool:
    """TB-6: an ongoing txn's first position holds a message of that txn."""
    for txn_id, position in s.ongoing.items():
        entry = _entry_at(s, position)
        if entry is None or entry.kind is not EntryKind.TXN_DATA or entry.txn_id != txn_id:
            return False
    return True


def ongoing_never_aborted(s: BufferState) -> bool:
    """TB-8, TB-12: an aborted txn is never ongoing."""
    return not any(is_txn_aborted(s, t) for t in s.ongoing)


def first_ongoing_above_low_water_mark(s: BufferState) -> bool:
    """TB-5, TB-13: the first ongoing txn is above its coordinator's low water mark: an append at or
    below the mark is refused, and an end that raises the mark aborts the first ongoing txns until
    one is above its own coordinator's mark."""
    if not s.ongoing:
        return True
    first = min(s.ongoing.items(), key=lambda kv: kv[1])[0]
    mark = s.low_water_marks.get(first.most_sig_bits)
    return mark is None or first.least_sig_bits > mark


def committed_message_never_aborted(s: BufferState) -> bool:
    """TB-16: a message whose txn's first end marker after it is a commit marker is dispatchable once it
    is at or before the readable max_read_position, even when a later abort of the txn (the
    low-water-mark abort of a late send that re-opened it, TB-8, TB-13) put the txn in the aborted
    set (unless the quirk abort-hides-committed is on)."""
    if s.config.txnmodel_quirk_abort_hides_committed:
        return True
    visible = set(dispatchable(s))
    limit = readable_max_read_position(s)
    return not any(
        end is EntryKind.TXN_COMMIT and e.position <= limit and e.position not in visible
        for e, end in messages_with_next_end(s)
    )


def messages_with_next_end(s: BufferState) -> Iterator[tuple[LogEntry, EntryKind | None]]:
    """TB-16: every stored transactional message with the kind of its txn's first end marker stored
    after it (None while there is none), last entry first: the marker that decides the message."""
    next_end: dict[TxnID, EntryKind] = {}
    for e in reversed(s.entries):
        if e.txn_id is None:
            continue
        if e.kind.is_marker:
            next_end[e.txn_id] = e.kind
        else:
            yield e, next_end.get(e.txn_id)


def nothing_aborted_or_marker_dispatchable(s: BufferState) -> bool:
    """TB-16: a reader never receives a marker or a message of an aborted txn."""
    visible = set(dispatchable(s))
    for e in s.entries:
        if e.position not in visible:
            continue
        if e.kind.is_marker:
            return False
        if _aborted_message(s, e):
            return False
    return True


def open_txn_messages_hidden(s: BufferState) -> bool:
    """TB-15: no message of an ongoing txn at or after its first position is dispatchable."""
    visible = set(dispatchable(s))
    return all(p not in visible for t, first in s.ongoing.items() for p in _data_of(s, t) if p >= first)


def visible_iff_at_or_before_mrp(s: BufferState) -> bool:
    """TB-15, TB-19: a message of a txn that is not aborted is dispatchable exactly when it is at or
    before the readable max_read_position; so what is visible of a txn is a prefix of its messages."""
    visible = set(dispatchable(s))
    limit = readable_max_read_position(s)
    for e in s.entries:
        committed_or_open = e.kind is EntryKind.TXN_DATA and not _aborted_message(s, e)
        if committed_or_open and (e.position in visible) != (e.position <= limit):
            return False
    return True


def quiescent_all_committed_visible(s: BufferState) -> bool:
    """TB-19: recovered with nothing ongoing, every normal message and every message of a txn that is
    not aborted is dispatchable (atomic visibility once no txn is open)."""
    if s.status not in _RECOVERED or s.ongoing:
        return True
    visible = set(dispatchable(s))
    for e in s.entries:
        if e.kind is EntryKind.NORMAL and e.position not in visible:
            return False
        not_aborted = e.kind is EntryKind.TXN_DATA and not _aborted_message(s, e)
        if not_aborted and e.position not in visible:
            return False
    return True


def snapshot_before_every_ongoing(s: BufferState) -> bool:
    """TB-20, TB-24: the persisted snapshot's max_read_position is before the first message of every
    ongoing txn, so replaying the entries after it finds each one."""
    store = s.snapshot_store
    marks = []
    if store.snapshot is not None:
        marks.append(store.snapshot.max_read_position)
    if store.indexes is not None:
        marks.append(store.indexes.snapshot.max_read_position)
    return all(m < p for m in marks for p in s.ongoing.values())


def aborted_marker_stored_or_ledger_gone(s: BufferState) -> bool:
    """TB-12, TB-23: an aborted txn's marker is stored at its recorded position, unless retention
    deleted that ledger (then the next commit or abort trims it)."""
    live = {info.ledger_id for info in s.ledgers}
    for txn_id, marker in s.aborted.items():
        if marker.ledger_id not in live:
            continue
        entry = _entry_at(s, marker)
        if entry is None or entry.kind is not EntryKind.TXN_ABORT or entry.txn_id != txn_id:
            return False
    return True


def aborted_messages_before_marker(s: BufferState) -> bool:
    """TB-8, TB-12: every stored message of an aborted txn lies before the txn's abort marker (a late
    append of an aborted txn is refused), so an end marker of its txn follows it and decides it for good
    (TB-16).  Not under the quirk append-after-abort, which stores the late message after the marker."""
    if s.config.txnmodel_quirk_append_after_abort:
        return True
    for e in s.entries:
        marker = s.aborted.get(e.txn_id) if e.kind is EntryKind.TXN_DATA and e.txn_id is not None else None
        if marker is not None and e.position > marker:
            return False
    return True


def _sealed_full(ids: int, capacity: int) -> bool:
    """A sealed segment holds at least capacity ids: exactly, unless an upgrade from a single
    snapshot overfilled the unsealed list it was sealed from (TB-22)."""
    return ids >= capacity


def segments_respect_capacity(s: BufferState) -> bool:
    """TB-22: every sealed segment holds at least capacity ids (:func:`_sealed_full`), and once a
    segment is sealed the unsealed list is below capacity."""
    if not s.config.transaction_buffer_segmented_snapshot_enabled:
        return not s.unsealed and not s.segments
    cap = segment_capacity(s.config, s.topic)
    return all(_sealed_full(len(seg.aborts), cap) for seg in s.segments) and (len(s.unsealed) < cap or not s.segments)


def snapshot_records_problem(config: Config, topic: str, records: Iterable[object]) -> str | None:
    """The first write to the snapshot topics (a ``recover`` row's ``snapshot_records``) that the
    buffer of ``topic`` could not have made with ``config``, or None: in segmented mode a segment is
    sealed only once its unsealed list is full (TB-22, :func:`_sealed_full`).  A segment sealed
    early recovers the same aborted set, so only the durable records show it."""
    if not config.transaction_buffer_segmented_snapshot_enabled:
        return None  # segments written under another configuration stay readable (TB-24)
    cap = segment_capacity(config, topic)
    for i, record in enumerate(records):
        if isinstance(record, WriteSnapshotSegment) and not _sealed_full(len(record.segment.aborts), cap):
            return (
                f"snapshot record {i}: segment {record.segment.sequence_id} sealed with "
                f"{len(record.segment.aborts)} aborted txn ids, below the segment capacity {cap} (TB-22)"
            )
    return None


def parked_appends_only_while_waiting(s: BufferState) -> bool:
    """TB-4: appends are parked only while Initializing or FirstSnapshotting."""
    if s.pending_appends:
        return s.status in (BufferStatus.INITIALIZING, BufferStatus.FIRST_SNAPSHOTTING)
    return True


def no_snapshot_means_no_txn_data(s: BufferState) -> bool:
    """TB-1, TB-4: a NoSnapshot buffer has stored no txn message and knows no txn; a Ready one has a
    snapshot persisted."""
    if s.status is BufferStatus.NO_SNAPSHOT:
        no_data = not any(e.kind is EntryKind.TXN_DATA for e in s.entries)
        return no_data and not s.ongoing and not s.aborted and not s.unsealed and not s.segments
    if s.status is BufferStatus.READY:
        return s.snapshot_store.snapshot is not None or s.snapshot_store.indexes is not None
    return True


INVARIANTS: tuple[Invariant[BufferState], ...] = (
    Invariant("mrp_before_every_ongoing", ("TB-7",), mrp_before_every_ongoing),
    Invariant("mrp_right_before_first_ongoing", ("TB-7",), mrp_right_before_first_ongoing),
    Invariant("mrp_at_lac_when_idle", ("TB-9", "TB-11", "TB-12"), mrp_at_lac_when_idle),
    Invariant("mrp_not_beyond_lac", ("TB-7", "TB-9"), mrp_not_beyond_lac),
    Invariant("ongoing_first_is_own_message", ("TB-6",), ongoing_first_is_own_message),
    Invariant("ongoing_never_aborted", ("TB-8", "TB-12"), ongoing_never_aborted),
    Invariant("first_ongoing_above_low_water_mark", ("TB-5", "TB-13"), first_ongoing_above_low_water_mark),
    Invariant("nothing_aborted_or_marker_dispatchable", ("TB-16",), nothing_aborted_or_marker_dispatchable),
    Invariant("committed_message_never_aborted", ("TB-16",), committed_message_never_aborted),
    Invariant("open_txn_messages_hidden", ("TB-15",), open_txn_messages_hidden),
    Invariant("visible_iff_at_or_before_mrp", ("TB-15", "TB-19"), visible_iff_at_or_before_mrp),
    Invariant("quiescent_all_committed_visible", ("TB-19",), quiescent_all_committed_visible),
    Invariant("snapshot_before_every_ongoing", ("TB-20", "TB-24"), snapshot_before_every_ongoing),
    Invariant("aborted_marker_stored_or_ledger_gone", ("TB-12", "TB-23"), aborted_marker_stored_or_ledger_gone),
    Invariant("aborted_messages_before_marker", ("TB-8", "TB-12"), aborted_messages_before_marker),
    Invariant("segments_respect_capacity", ("TB-22",), segments_respect_capacity),
    Invariant("parked_appends_only_while_waiting", ("TB-4",), parked_appends_only_while_waiting),
    Invariant("no_snapshot_means_no_txn_data", ("TB-1", "TB-4"), no_snapshot_means_no_txn_data),
)


# --- properties of one step ------------------------------------------------------------------


def readable_mrp_monotone(before: BufferState, command: Any, result: Any, after: BufferState) -> bool:
    """TB-10: between two recovered states the readable max_read_position never moves backwards."""
    if before.status in _RECOVERED and after.status in _RECOVERED:
        return readable_max_read_position(after) >= readable_max_read_position(before)
    return True


def no_backfill(before: BufferState, command: Any, result: Any, after: BufferState) -> bool:
    """TB-17, TB-23: a position that becomes dispatchable lies after everything dispatchable before
    (a reader that has read up to X never misses a later-visible entry below X), except the messages
    of an aborted txn that TB-23's trim forgot in this step."""
    old = dispatchable(before)
    if not old:
        return True
    horizon = old[-1]
    old_set = set(old)
    forgotten = {t for t in _all_aborted(before) if not is_txn_aborted(after, t)}
    for position in dispatchable(after):
        if position in old_set or position > horizon:
            continue
        entry = _entry_at(after, position)
        if entry is None or entry.txn_id not in forgotten:
            return False
    return True


def _all_aborted(s: BufferState) -> set[TxnID]:
    ids = set(s.aborted) | set(s.unsealed)
    for seg in s.segments:
        ids |= seg.aborts
    return ids


def rejection_changes_nothing(before: BufferState, command: Any, result: Any, after: BufferState) -> bool:
    """Every rejected command leaves the state as it was (the machines' contract; TB-5, TB-1)."""
    return bool(getattr(result, "ok", True)) or after == before


STEP_PROPERTIES: tuple[StepProperty[BufferState], ...] = (
    StepProperty("readable_mrp_monotone", ("TB-10",), readable_mrp_monotone),
    StepProperty("no_backfill", ("TB-17", "TB-23"), no_backfill),
    StepProperty("rejection_changes_nothing", ("TB-1", "TB-5"), rejection_changes_nothing),
)
