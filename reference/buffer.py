"""The transaction buffer of one topic partition (Pulsar's ``TopicTransactionBuffer``), pure.

The machine owns two things: the buffer's in-memory state (status, ``max_read_position``,
ongoing and aborted transactions, low water marks, snapshot bookkeeping) and the *view of the
topic's managed ledger* the buffer needs to compute ``previous()``, the last confirmed entry and
what a reader may see: the ledgers (ids and entry counts) and, for every entry still stored, what
kind of entry it is.  Every write to the topic goes through :func:`step`, and the machine itself
assigns the position of each write: the next entry id of the current ledger.  Ledger roll-over
and retention's deletion of the oldest ledger are commands too.

Persistence is an output: :class:`AppendEntry` (a message or a marker written to the topic) and
the snapshot records (:class:`WriteSnapshot`, :class:`WriteSnapshotSegment`,
:class:`WriteSnapshotIndexes`, :class:`DeleteSnapshotSegment`, :class:`ClearSnapshot`).  The
state also keeps the persisted view of the snapshot system topic (``snapshot_store``, the fold of
the snapshot effects written so far) because the buffer reads it back when it recovers.
:func:`recover` is the pure fold a broker performs on topic load: latest snapshot + replay of the
entries after its ``max_read_position``.

Rule ids refer to ``spec/rules/buffer.md``.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import immutables

from reference.conformance import MachineVectors
from reference.persistent import HashOnce, Log, evolve
from spec import topic_entry
from spec.config import Config
from spec.errors import NotAllowed, ServiceUnitNotReady
from spec.pb import PulsarApi_pb2 as api_pb
from spec.pb import TransactionBufferSnapshot_pb2 as snap_pb
from spec.result import Effect, Err, Ok
from spec.types import EARLIEST, LedgerInfo, Position, PulsarName, TxnID, previous_position

__all__ = [
    "NOT_RECOVERED",
    "VECTORS",
    "AbortTxn",
    "AbortTxnMetadata",
    "AbortedSegment",
    "AppendBufferToTxn",
    "AppendEntry",
    "AppendOutcome",
    "BufferState",
    "BufferStatus",
    "ClearSnapshot",
    "ClearTransactionBufferSnapshot",
    "CloseTransactionBuffer",
    "CommitTxn",
    "CompleteFirstSnapshot",
    "CompleteRecovery",
    "DeleteLedger",
    "DeleteSnapshotSegment",
    "Dispatch",
    "EntryKind",
    "LogEntry",
    "PublishMessage",
    "Queued",
    "ReloadTopic",
    "RollOverLedger",
    "SnapshotStore",
    "StartRecovery",
    "TakeSnapshot",
    "TransactionBufferSnapshot",
    "TransactionBufferSnapshotIndex",
    "TransactionBufferSnapshotIndexes",
    "TransactionBufferSnapshotIndexesMetadata",
    "TransactionBufferSnapshotSegment",
    "WriteSnapshot",
    "WriteSnapshotIndexes",
    "WriteSnapshotSegment",
    "classify_entry",
    "dispatch",
    "dispatchable",
    "entry_from_metadata",
    "entry_metadata",
    "first_ongoing_position",
    "get_last_message_id",
    "initial",
    "is_message_aborted",
    "is_txn_aborted",
    "last_confirmed_entry",
    "last_dispatchable_position",
    "marker_type",
    "readable_max_read_position",
    "recover",
    "recovery_view",
    "restart",
    "segment_capacity",
    "step",
]

DEFAULT_TOPIC = "persistent://public/default/txn-topic-partition-0"


# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------


class BufferStatus(PulsarName, enum.Enum):
    """``TopicTransactionBufferState.State``; the value is Pulsar's spelling.  (TB-1)"""

    NONE = "None"
    INITIALIZING = "Initializing"
    READY = "Ready"
    NO_SNAPSHOT = "NoSnapshot"
    FIRST_SNAPSHOTTING = "FirstSnapshotting"
    CLOSE = "Close"
    CLOSED_AND_CLEARED = "ClosedAndCleared"


class EntryKind(PulsarName, enum.Enum):
    """What one topic entry is, as the buffer and the dispatcher classify it (TB-16)."""

    NORMAL = "NORMAL"  # a message without a txn id
    TXN_DATA = "TXN_DATA"  # a message of a transaction
    TXN_COMMIT = "TXN_COMMIT"  # marker_type 21
    TXN_ABORT = "TXN_ABORT"  # marker_type 22

    @property
    def is_marker(self) -> bool:
        return self in (EntryKind.TXN_COMMIT, EntryKind.TXN_ABORT)


@dataclass(frozen=True, slots=True)
class LogEntry:
    position: Position
    kind: EntryKind
    txn_id: TxnID | None = None

    def __hash__(self) -> int:
        # The same fields the generated hash covers, flattened: a topic's log hashes every entry
        # it appends (reference.persistent.Log), and the generated one calls three more hashes.
        p, t = self.position, self.txn_id
        txn = None if t is None else (t.most_sig_bits, t.least_sig_bits)
        return hash((p.ledger_id, p.entry_id, self.kind._name_, txn))


# --------------------------------------------------------------------------------------------
# Snapshot records (TB-20 .. TB-24), with converters to the protobuf messages
# --------------------------------------------------------------------------------------------


def _to_long(value: int) -> int:
    """Java keeps txn id bits in a ``long``: an unsigned 64-bit value is stored two's complement."""
    return value - (1 << 64) if value >= (1 << 63) else value


def _from_long(value: int) -> int:
    return value + (1 << 64) if value < 0 else value


@dataclass(frozen=True, slots=True)
class AbortTxnMetadata:
    txn_id: TxnID
    marker_position: Position

    def to_pb(self) -> snap_pb.AbortTxnMetadata:
        return snap_pb.AbortTxnMetadata(
            txnIdMostBits=_to_long(self.txn_id.most_sig_bits),
            txnIdLeastBits=_to_long(self.txn_id.least_sig_bits),
            ledgerId=self.marker_position.ledger_id,
            entryId=self.marker_position.entry_id,
        )

    @classmethod
    def from_pb(cls, msg: snap_pb.AbortTxnMetadata) -> AbortTxnMetadata:
        txn_id = TxnID(_from_long(msg.txnIdMostBits), _from_long(msg.txnIdLeastBits))
        return cls(txn_id, Position(msg.ledgerId, msg.entryId))


@dataclass(frozen=True, slots=True)
class TransactionBufferSnapshot(HashOnce):
    """Single-mode snapshot: ``max_read_position`` and every aborted txn with its marker.  (TB-20)"""

    __hash__ = HashOnce.__hash__

    topic_name: str
    max_read_position: Position
    aborts: tuple[AbortTxnMetadata, ...]

    def to_pb(self) -> snap_pb.TransactionBufferSnapshot:
        return snap_pb.TransactionBufferSnapshot(
            topicName=self.topic_name,
            maxReadPositionLedgerId=self.max_read_position.ledger_id,
            maxReadPositionEntryId=self.max_read_position.entry_id,
            aborts=[a.to_pb() for a in self.aborts],
        )

    @classmethod
    def from_pb(cls, msg: snap_pb.TransactionBufferSnapshot) -> TransactionBufferSnapshot:
        return cls(
            msg.topicName,
            Position(msg.maxReadPositionLedgerId, msg.maxReadPositionEntryId),
            tuple(AbortTxnMetadata.from_pb(a) for a in msg.aborts),
        )


def _txn_to_pb(txn: TxnID) -> snap_pb.TxnIDData:
    return snap_pb.TxnIDData(mostSigBits=_to_long(txn.most_sig_bits), leastSigBits=_to_long(txn.least_sig_bits))


def _txn_from_pb(msg: snap_pb.TxnIDData) -> TxnID:
    return TxnID(_from_long(msg.mostSigBits), _from_long(msg.leastSigBits))


@dataclass(frozen=True, slots=True)
class TransactionBufferSnapshotSegment:
    """A sealed segment of aborted txn ids; ``persistent_position`` is the abort marker of the last.  (TB-22)"""

    topic_name: str
    sequence_id: int
    persistent_position: Position
    aborts: tuple[TxnID, ...]

    def to_pb(self) -> snap_pb.TransactionBufferSnapshotSegment:
        return snap_pb.TransactionBufferSnapshotSegment(
            topicName=self.topic_name,
            sequenceId=self.sequence_id,
            persistentPositionLedgerId=self.persistent_position.ledger_id,
            persistentPositionEntryId=self.persistent_position.entry_id,
            aborts=[_txn_to_pb(t) for t in self.aborts],
        )

    @classmethod
    def from_pb(cls, msg: snap_pb.TransactionBufferSnapshotSegment) -> TransactionBufferSnapshotSegment:
        return cls(
            msg.topicName,
            msg.sequenceId,
            Position(msg.persistentPositionLedgerId, msg.persistentPositionEntryId),
            tuple(_txn_from_pb(t) for t in msg.aborts),
        )


@dataclass(frozen=True, slots=True)
class TransactionBufferSnapshotIndex:
    """One index entry.  The segment record's own position in the segments topic is the engine's
    business (the model names a segment by ``sequence_id``); it is ``None`` until the engine knows it."""

    sequence_id: int
    aborted_mark_position: Position
    segment_position: Position | None = None

    def to_pb(self) -> snap_pb.TransactionBufferSnapshotIndex:
        seg = self.segment_position if self.segment_position is not None else EARLIEST
        return snap_pb.TransactionBufferSnapshotIndex(
            sequenceID=self.sequence_id,
            abortedMarkLedgerID=self.aborted_mark_position.ledger_id,
            abortedMarkEntryID=self.aborted_mark_position.entry_id,
            segmentLedgerID=seg.ledger_id,
            segmentEntryID=seg.entry_id,
        )

    @classmethod
    def from_pb(cls, msg: snap_pb.TransactionBufferSnapshotIndex) -> TransactionBufferSnapshotIndex:
        seg = Position(msg.segmentLedgerID, msg.segmentEntryID)
        return cls(
            msg.sequenceID,
            Position(msg.abortedMarkLedgerID, msg.abortedMarkEntryID),
            None if seg == EARLIEST else seg,
        )


@dataclass(frozen=True, slots=True)
class TransactionBufferSnapshotIndexesMetadata:
    max_read_position: Position
    aborts: tuple[TxnID, ...]  # the unsealed aborted ids

    def to_pb(self) -> snap_pb.TransactionBufferSnapshotIndexesMetadata:
        return snap_pb.TransactionBufferSnapshotIndexesMetadata(
            maxReadPositionLedgerId=self.max_read_position.ledger_id,
            maxReadPositionEntryId=self.max_read_position.entry_id,
            aborts=[_txn_to_pb(t) for t in self.aborts],
        )

    @classmethod
    def from_pb(cls, msg: snap_pb.TransactionBufferSnapshotIndexesMetadata) -> TransactionBufferSnapshotIndexesMetadata:
        return cls(
            Position(msg.maxReadPositionLedgerId, msg.maxReadPositionEntryId),
            tuple(_txn_from_pb(t) for t in msg.aborts),
        )


@dataclass(frozen=True, slots=True)
class TransactionBufferSnapshotIndexes(HashOnce):
    """The segmented mode's snapshot: the segment index plus ``max_read_position`` and unsealed ids.  (TB-22)"""

    __hash__ = HashOnce.__hash__

    topic_name: str
    index_list: tuple[TransactionBufferSnapshotIndex, ...]
    snapshot: TransactionBufferSnapshotIndexesMetadata

    def to_pb(self) -> snap_pb.TransactionBufferSnapshotIndexes:
        return snap_pb.TransactionBufferSnapshotIndexes(
            topicName=self.topic_name,
            indexList=[i.to_pb() for i in self.index_list],
            snapshot=self.snapshot.to_pb(),
        )

    @classmethod
    def from_pb(cls, msg: snap_pb.TransactionBufferSnapshotIndexes) -> TransactionBufferSnapshotIndexes:
        return cls(
            msg.topicName,
            tuple(TransactionBufferSnapshotIndex.from_pb(i) for i in msg.indexList),
            TransactionBufferSnapshotIndexesMetadata.from_pb(msg.snapshot),
        )


# --------------------------------------------------------------------------------------------
# Entry metadata (TB-16)
# --------------------------------------------------------------------------------------------
# The bytes are spec.topic_entry's; what a buffer's entry carries, and how a stored one is
# classified, is this rule's.

TXN_MARKER_PRODUCER = "pulsar.txn.marker"
_MARKER_TYPES = {EntryKind.TXN_COMMIT: topic_entry.TXN_COMMIT_MARKER, EntryKind.TXN_ABORT: topic_entry.TXN_ABORT_MARKER}


def marker_type(kind: EntryKind) -> int | None:
    """The ``marker_type`` of an entry of ``kind``: 21 for a commit marker, 22 for an abort marker,
    none for a message.  (TB-16)"""
    return _MARKER_TYPES.get(kind)


def entry_metadata(
    entry: LogEntry, *, publish_time_ms: int, producer_name: str = "producer", sequence_id: int = 0
) -> api_pb.MessageMetadata:
    """The ``MessageMetadata`` an entry carries on the wire.  A marker is written by the buffer with
    producer ``pulsar.txn.marker``, sequence id -1 (Java's long, so 2^64-1 as the proto's uint64),
    ``marker_type`` 21 or 22 and the txn id; a transactional message carries the txn id.  (TB-16)"""
    if entry.kind.is_marker:
        producer_name, sequence_id = TXN_MARKER_PRODUCER, (1 << 64) - 1
    return topic_entry.message_metadata(
        topic_entry.TopicEntry(
            producer_name=producer_name,
            sequence_id=sequence_id,
            publish_time=publish_time_ms,
            txn_id=entry.txn_id,
            marker_type=marker_type(entry.kind),
        )
    )


def entry_from_metadata(position: Position, md: api_pb.MessageMetadata) -> LogEntry:
    """Classify a stored entry by its metadata (:func:`classify_entry`).  (TB-16)"""
    decoded = topic_entry.entry_from_metadata(md)
    return classify_entry(position, decoded.marker_type, decoded.txn_id)


def classify_entry(position: Position, marker: int | None, txn_id: TxnID | None) -> LogEntry:
    """Classify a stored entry as the buffer and the dispatcher do: ``marker_type`` 21/22 is a txn
    marker (``isTxnMarker``), a txn id without a marker type is a transactional message, anything
    else is a normal message (other server-only markers are outside this machine).  (TB-16)"""
    if marker in (topic_entry.TXN_COMMIT_MARKER, topic_entry.TXN_ABORT_MARKER):
        if txn_id is None:
            raise ValueError(f"txn marker at {position} without a txn id")
        kind = EntryKind.TXN_COMMIT if marker == topic_entry.TXN_COMMIT_MARKER else EntryKind.TXN_ABORT
        return LogEntry(position, kind, txn_id)
    if txn_id is not None:
        return LogEntry(position, EntryKind.TXN_DATA, txn_id)
    return LogEntry(position, EntryKind.NORMAL)


# --------------------------------------------------------------------------------------------
# Effects
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendEntry(Effect):
    """Write this entry to the topic's managed ledger (a message or a txn marker)."""

    entry: LogEntry


@dataclass(frozen=True, slots=True)
class WriteSnapshot(Effect):
    """Put the single-mode snapshot under the topic's key in ``__transaction_buffer_snapshot``."""

    snapshot: TransactionBufferSnapshot


@dataclass(frozen=True, slots=True)
class WriteSnapshotSegment(Effect):
    """Put a sealed segment under ``multiple-<seq>-<topic>`` in ``__transaction_buffer_snapshot_segments``."""

    segment: TransactionBufferSnapshotSegment


@dataclass(frozen=True, slots=True)
class DeleteSnapshotSegment(Effect):
    """Tombstone the segment ``sequence_id`` (its marker ledger was deleted)."""

    topic_name: str
    sequence_id: int


@dataclass(frozen=True, slots=True)
class WriteSnapshotIndexes(Effect):
    """Put the index record under the topic's key in ``__transaction_buffer_snapshot_indexes``."""

    indexes: TransactionBufferSnapshotIndexes


@dataclass(frozen=True, slots=True)
class ClearSnapshot(Effect):
    """Tombstone every snapshot record of the topic (the topic is deleted)."""

    topic_name: str


SnapshotEffect = WriteSnapshot | WriteSnapshotSegment | DeleteSnapshotSegment | WriteSnapshotIndexes | ClearSnapshot


@dataclass(frozen=True, slots=True)
class SnapshotStore(HashOnce):
    """The persisted content of the snapshot system topics for this topic: the fold of snapshot effects."""

    __hash__ = HashOnce.__hash__

    snapshot: TransactionBufferSnapshot | None = None
    indexes: TransactionBufferSnapshotIndexes | None = None
    segments: immutables.Map[int, TransactionBufferSnapshotSegment] = field(default_factory=immutables.Map)

    def apply(self, effect: Effect) -> SnapshotStore:
        if isinstance(effect, WriteSnapshot):
            return evolve(self, snapshot=effect.snapshot)
        if isinstance(effect, WriteSnapshotIndexes):
            return evolve(self, indexes=effect.indexes)
        if isinstance(effect, WriteSnapshotSegment):
            return evolve(self, segments=self.segments.set(effect.segment.sequence_id, effect.segment))
        if isinstance(effect, DeleteSnapshotSegment):
            # A tombstone for a key the compacted topic no longer holds is harmless.
            if effect.sequence_id not in self.segments:
                return self
            return evolve(self, segments=self.segments.delete(effect.sequence_id))
        if isinstance(effect, ClearSnapshot):
            return SnapshotStore()
        return self


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Queued:
    """An append parked until recovery or the first snapshot completes (TB-4); ``ticket`` is its place."""

    ticket: int


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """What became of a parked append when the queue was flushed."""

    txn_id: TxnID
    position: Position | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Dispatch:
    """What a reader reading forward from ``after`` gets: messages, and entries the dispatcher acks itself."""

    delivered: tuple[Position, ...]
    auto_acked: tuple[Position, ...]


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AbortedSegment(HashOnce):
    __hash__ = HashOnce.__hash__

    sequence_id: int
    persistent_position: Position
    aborts: frozenset[TxnID]


@dataclass(frozen=True, slots=True)
class BufferState(HashOnce):
    __hash__ = HashOnce.__hash__

    config: Config
    topic: str
    status: BufferStatus
    # --- the managed-ledger view (persisted by the topic, not by the buffer) ---
    ledgers: tuple[LedgerInfo, ...]
    entries: Log[LogEntry]  # in position order; a persistent log, so a write does not copy the topic
    # --- the buffer's memory ---
    max_read_position: Position
    ongoing: immutables.Map[TxnID, Position]
    aborted: immutables.Map[TxnID, Position]  # single mode: txn -> abort marker position
    low_water_marks: immutables.Map[int, int]
    change_max_read_position_count: int
    pending_appends: tuple[TxnID, ...]
    # --- segmented mode ---
    unsealed: tuple[TxnID, ...]
    segments: tuple[AbortedSegment, ...]
    next_segment_sequence_id: int
    # --- what the snapshot topics hold for this topic ---
    snapshot_store: SnapshotStore
    # --- lookups the steps keep beside ``aborted`` and ``unsealed``, so that neither is sorted or
    # scanned on a step.  Not part of the value (not compared, not hashed): ``__init__`` rebuilds
    # them, so a state made by hand or by ``replace()`` has them, and the steps keep them current.
    aborted_by_marker: Log[tuple[Position, TxnID]] = field(init=False, compare=False, repr=False)
    unsealed_ids: immutables.Map[TxnID, None] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.entries, Log):
            object.__setattr__(self, "entries", Log(self.entries))
        object.__setattr__(self, "aborted_by_marker", _by_marker(self.aborted))
        object.__setattr__(self, "unsealed_ids", _ids(self.unsealed))


def _by_marker(aborted: immutables.Map[TxnID, Position]) -> Log[tuple[Position, TxnID]]:
    """``aborted`` in marker order (ties, which only a hand-made state has, as the map iterates)."""
    return Log(sorted(((marker, txn_id) for txn_id, marker in aborted.items()), key=lambda pair: pair[0]))


def _ids(txn_ids: Iterable[TxnID]) -> immutables.Map[TxnID, None]:
    return immutables.Map(dict.fromkeys(txn_ids))


def _position(entry: LogEntry) -> Position:
    return entry.position


def _ledger_of(entry: LogEntry) -> int:
    return entry.position.ledger_id


def segment_capacity(config: Config, topic: str) -> int:
    """Txn ids per sealed segment: ``(segmentSize - 8 - len(topic)) / 3``, at least 1.  (TB-22)"""
    return max(1, (config.transaction_buffer_snapshot_segment_size - 8 - len(topic)) // 3)


def last_confirmed_entry(state: BufferState) -> Position:
    """The LAC: ``previous()`` of the next position to write, i.e. the last stored entry or, with none,
    ``(first ledger, -1)``; the same "before everything" spelling ``previous()`` gives.  (TB-2)"""
    current = state.ledgers[-1]
    return _previous(state, Position(current.ledger_id, current.entries))


def _previous(state: BufferState, position: Position) -> Position:
    return previous_position(position, state.ledgers)


def first_ongoing_position(state: BufferState) -> Position | None:
    """Positions grow with insertion, so the first ongoing txn (Pulsar's insertion-ordered map head)
    is the one with the smallest first position."""
    return min(state.ongoing.values()) if state.ongoing else None


def _first_ongoing(state: BufferState) -> tuple[TxnID, Position] | None:
    if not state.ongoing:
        return None
    return min(state.ongoing.items(), key=lambda kv: kv[1])


def is_txn_aborted(state: BufferState, txn_id: TxnID) -> bool:
    """``isTxnAborted(txn, position)``: membership only, the position is ignored.  (TB-16)"""
    if txn_id in state.aborted or txn_id in state.unsealed_ids:
        return True
    return any(txn_id in seg.aborts for seg in state.segments)


def _end_markers(state: BufferState, after: Position = EARLIEST) -> dict[TxnID, list[LogEntry]]:
    """The commit and abort markers of every txn among the stored entries after ``after``, in log order."""
    out: dict[TxnID, list[LogEntry]] = {}
    for e in state.entries.iter_from(state.entries.bisect_right(after, key=_position)):
        if e.kind.is_marker and e.txn_id is not None:
            out.setdefault(e.txn_id, []).append(e)
    return out


class _AbortedMessages:
    """``isTxnAborted(txn, position)`` for the messages one read looks at (all after ``after``): the
    markers are scanned once, and only when a message of a txn in the aborted set is met.  (TB-16)"""

    __slots__ = ("after", "markers", "state")

    def __init__(self, state: BufferState, after: Position = EARLIEST) -> None:
        self.state, self.after = state, after
        self.markers: dict[TxnID, list[LogEntry]] | None = None

    def __call__(self, txn_id: TxnID, position: Position) -> bool:
        if not is_txn_aborted(self.state, txn_id):
            return False
        if self.state.config.txnmodel_quirk_abort_hides_committed:
            return True
        if self.markers is None:
            self.markers = _end_markers(self.state, self.after)
        markers = self.markers.get(txn_id, ())
        i = bisect.bisect_right(markers, position, key=_position)
        return i == len(markers) or markers[i].kind is not EntryKind.TXN_COMMIT


def is_message_aborted(state: BufferState, txn_id: TxnID, position: Position) -> bool:
    """``isTxnAborted(txn, position)``: a message belongs to the first end marker of its txn stored after
    it, so the message of ``txn_id`` at ``position`` is aborted when the txn is in the aborted set and
    that marker is not a commit marker (an abort marker, or none yet).  An abort therefore decides
    only the messages the txn wrote here since its previous end: the low-water-mark abort of a
    committed txn that a late send re-opened (TB-8, TB-13) filters the late message, not what the
    commit made visible.  Under the quirk abort-hides-committed, Pulsar's membership test alone.  (TB-16)"""
    return _AbortedMessages(state, position)(txn_id, position)


def readable_max_read_position(state: BufferState) -> Position:
    """``getMaxReadPosition()``: the field in Ready and NoSnapshot, EARLIEST otherwise.  (TB-3)"""
    if state.status in (BufferStatus.READY, BufferStatus.NO_SNAPSHOT):
        return state.max_read_position
    return EARLIEST


def initial(
    config: Config,
    *,
    topic: str = DEFAULT_TOPIC,
    ledger_id: int = 1,
    recovered: bool = True,
) -> BufferState:
    """A brand-new topic with one empty ledger.  With ``recovered`` the buffer has already run its
    recovery and found no snapshot (NoSnapshot, TB-1/TB-2); otherwise it is freshly constructed (None).
    """
    ledgers = (LedgerInfo(ledger_id, 0),)
    state = BufferState(
        config=config,
        topic=topic,
        status=BufferStatus.NONE,
        ledgers=ledgers,
        entries=Log(),
        max_read_position=Position(ledger_id, -1),
        ongoing=immutables.Map(),
        aborted=immutables.Map(),
        low_water_marks=immutables.Map(),
        change_max_read_position_count=0,
        pending_appends=(),
        unsealed=(),
        segments=(),
        next_segment_sequence_id=0,
        snapshot_store=SnapshotStore(),
    )
    if recovered:
        state, _ = step(state, StartRecovery())
        state, _ = step(state, CompleteRecovery())
    return state


def restart(state: BufferState) -> BufferState:
    """The topic is loaded again after a crash or unload: memory is lost, the ledgers and the snapshot
    topics are kept, and a new buffer is constructed in state None with ``max_read_position`` = LAC.  (TB-2)
    """
    fresh = initial(state.config, topic=state.topic, recovered=False)
    return evolve(
        fresh,
        ledgers=state.ledgers,
        entries=state.entries,
        max_read_position=last_confirmed_entry(state),
        snapshot_store=state.snapshot_store,
    )


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendBufferToTxn:
    """A transactional message from a producer (``appendBufferToTxn``)."""

    txn_id: TxnID


@dataclass(frozen=True, slots=True)
class PublishMessage:
    """A normal (non-transactional) publish persisted on the topic."""


@dataclass(frozen=True, slots=True)
class CommitTxn:
    """``END_TXN_ON_PARTITION`` with COMMIT; ``low_water_mark`` is ``txnid_least_bits_of_low_watermark``."""

    txn_id: TxnID
    low_water_mark: int = -1


@dataclass(frozen=True, slots=True)
class AbortTxn:
    """``END_TXN_ON_PARTITION`` with ABORT."""

    txn_id: TxnID
    low_water_mark: int = -1


@dataclass(frozen=True, slots=True)
class RollOverLedger:
    """The managed ledger closes its current ledger and opens the next (id = last + 1)."""


@dataclass(frozen=True, slots=True)
class DeleteLedger:
    """Retention deletes the oldest ledger."""

    ledger_id: int


@dataclass(frozen=True, slots=True)
class TakeSnapshot:
    """The periodic snapshot timer (``transactionBufferSnapshotMinTimeInMillis``) fires."""


@dataclass(frozen=True, slots=True)
class StartRecovery:
    """The topic starts the buffer's recovery (None -> Initializing)."""


@dataclass(frozen=True, slots=True)
class CompleteRecovery:
    """The recovery read the snapshot and replayed the entries after it."""


@dataclass(frozen=True, slots=True)
class CompleteFirstSnapshot:
    """The first snapshot (written on the first txn message) is durable."""


@dataclass(frozen=True, slots=True)
class ReloadTopic:
    """The broker crashes or the topic is unloaded and loaded again: memory is lost (see :func:`restart`)."""


@dataclass(frozen=True, slots=True)
class CloseTransactionBuffer:
    """The topic is closed or unloaded."""


@dataclass(frozen=True, slots=True)
class ClearTransactionBufferSnapshot:
    """The topic is deleted: its snapshot records are tombstoned."""


Command = (
    AppendBufferToTxn
    | PublishMessage
    | CommitTxn
    | AbortTxn
    | RollOverLedger
    | DeleteLedger
    | TakeSnapshot
    | StartRecovery
    | CompleteRecovery
    | CompleteFirstSnapshot
    | ReloadTopic
    | CloseTransactionBuffer
    | ClearTransactionBufferSnapshot
)

Result = Ok[object] | Err
Step = tuple[BufferState, Result]


# --------------------------------------------------------------------------------------------
# Internal transitions (each returns the new state and the effects it asks for)
# --------------------------------------------------------------------------------------------

_Effects = tuple[Effect, ...]


def _write(state: BufferState, kind: EntryKind, txn_id: TxnID | None) -> tuple[BufferState, LogEntry]:
    """Append one entry at the next position of the current ledger."""
    current = state.ledgers[-1]
    entry = LogEntry(Position(current.ledger_id, current.entries), kind, txn_id)
    ledgers = (*state.ledgers[:-1], LedgerInfo(current.ledger_id, current.entries + 1))
    return evolve(state, ledgers=ledgers, entries=state.entries.append(entry)), entry


def _move_max_read_position(state: BufferState, position: Position) -> BufferState:
    """Set ``max_read_position``; a forward move counts towards the next snapshot unless NoSnapshot.  (TB-10)"""
    count = state.change_max_read_position_count
    if position > state.max_read_position and state.status is not BufferStatus.NO_SNAPSHOT:
        count += 1
    return evolve(state, max_read_position=position, change_max_read_position_count=count)


def _update_max_read_position(state: BufferState) -> BufferState:
    """previous(first ongoing) or, with nothing ongoing, the LAC.  (TB-7, TB-9)"""
    first = first_ongoing_position(state)
    target = _previous(state, first) if first is not None else last_confirmed_entry(state)
    return _move_max_read_position(state, target)


def _snapshot_effect(state: BufferState) -> Effect:
    """The snapshot of the current memory: single record, or the index record in segmented mode.  (TB-20, TB-22)"""
    if state.config.transaction_buffer_segmented_snapshot_enabled:
        return WriteSnapshotIndexes(_indexes(state))
    # The marker order is kept (aborted_by_marker); sorting it again only orders equal markers.
    aborts = tuple(AbortTxnMetadata(t, p) for p, t in sorted(_aborted_in_marker_order(state)))
    return WriteSnapshot(TransactionBufferSnapshot(state.topic, state.max_read_position, aborts))


def _aborted_in_marker_order(state: BufferState) -> Iterator[tuple[Position, TxnID]]:
    """``aborted`` as (marker, txn) pairs, oldest marker first (a txn aborted twice is where its
    last marker is)."""
    aborted = state.aborted
    return ((p, t) for p, t in state.aborted_by_marker if aborted.get(t) == p)


def _indexes(state: BufferState) -> TransactionBufferSnapshotIndexes:
    index_list = tuple(TransactionBufferSnapshotIndex(s.sequence_id, s.persistent_position) for s in state.segments)
    meta = TransactionBufferSnapshotIndexesMetadata(state.max_read_position, state.unsealed)
    return TransactionBufferSnapshotIndexes(state.topic, index_list, meta)


def _persist(state: BufferState, effects: Iterable[Effect]) -> tuple[BufferState, _Effects]:
    effects = tuple(effects)
    store = state.snapshot_store
    for effect in effects:
        store = store.apply(effect)
    return evolve(state, snapshot_store=store), effects


def _take_snapshot(state: BufferState) -> tuple[BufferState, _Effects]:
    state = evolve(state, change_max_read_position_count=0)
    return _persist(state, (_snapshot_effect(state),))


def _snapshot_by_count(state: BufferState) -> tuple[BufferState, _Effects]:
    """After a commit or abort: snapshot once ``max_read_position`` moved often enough.  (TB-21)"""
    limit = state.config.transaction_buffer_snapshot_max_transaction_count
    if state.status is BufferStatus.READY and state.change_max_read_position_count >= limit:
        return _take_snapshot(state)
    return state, ()


def _ledger_exists(state: BufferState, ledger_id: int) -> bool:
    return any(info.ledger_id == ledger_id for info in state.ledgers)


def _trim_expired_aborted(state: BufferState) -> tuple[BufferState, _Effects]:
    """Drop aborted txns whose abort marker's ledger was deleted, oldest first.  (TB-23)"""
    if state.config.transaction_buffer_segmented_snapshot_enabled:
        segments = state.segments
        effects: list[Effect] = []
        while segments and not _ledger_exists(state, segments[0].persistent_position.ledger_id):
            effects.append(DeleteSnapshotSegment(state.topic, segments[0].sequence_id))
            segments = segments[1:]
        if not effects:
            return state, ()
        state = evolve(state, segments=segments)
        effects.append(WriteSnapshotIndexes(_indexes(state)))
        return _persist(state, effects)
    aborted = state.aborted
    passed = 0  # index pairs looked at: trimmed txns, and stale pairs of txns aborted again since
    for marker, txn_id in state.aborted_by_marker:
        if aborted.get(txn_id) == marker:
            if _ledger_exists(state, marker.ledger_id):
                break
            aborted = aborted.delete(txn_id)
        passed += 1
    if not passed:
        return state, ()
    return evolve(state, aborted=aborted, aborted_by_marker=state.aborted_by_marker.drop_first(passed)), ()


def _add_aborted(state: BufferState, txn_id: TxnID, marker: Position) -> tuple[BufferState, _Effects]:
    """Remember an aborted txn; in segmented mode seal a full unsealed list into a segment.  (TB-12, TB-22)"""
    if not state.config.transaction_buffer_segmented_snapshot_enabled:
        return evolve(
            state,
            aborted=state.aborted.set(txn_id, marker),
            aborted_by_marker=state.aborted_by_marker.append((marker, txn_id)),
        ), ()
    if is_txn_aborted(state, txn_id):
        return state, ()
    unsealed = (*state.unsealed, txn_id)
    if len(unsealed) < segment_capacity(state.config, state.topic):
        return evolve(state, unsealed=unsealed, unsealed_ids=state.unsealed_ids.set(txn_id, None)), ()
    seq = state.next_segment_sequence_id
    segment = AbortedSegment(seq, marker, frozenset(unsealed))
    state = evolve(
        state,
        unsealed=(),
        unsealed_ids=_ids(()),
        segments=(*state.segments, segment),
        next_segment_sequence_id=seq + 1,
    )
    record = TransactionBufferSnapshotSegment(state.topic, seq, marker, unsealed)
    return _persist(state, (WriteSnapshotSegment(record), WriteSnapshotIndexes(_indexes(state))))


def _remove_and_update(state: BufferState, txn_id: TxnID) -> BufferState:
    return _update_max_read_position(
        evolve(state, ongoing=state.ongoing.delete(txn_id) if txn_id in state.ongoing else state.ongoing)
    )


def _internal_append(state: BufferState, txn_id: TxnID) -> tuple[BufferState, Ok[Position] | Err, _Effects]:
    """Low-water-mark check, the aborted check, write, then the txn's first position and
    ``max_read_position``.  (TB-5 .. TB-8)"""
    lwm = state.low_water_marks.get(txn_id.most_sig_bits)
    if lwm is not None and txn_id.least_sig_bits <= lwm:
        message = f"Transaction [{txn_id}] has been ended. Please use a new transaction to send message."
        return state, Err(NotAllowed(message)), ()
    if is_txn_aborted(state, txn_id) and not state.config.txnmodel_quirk_append_after_abort:
        # TB-8: a late send of a txn this partition already aborted is refused, so aborted data is never
        # stored after its marker (Pulsar writes it: the quirk append-after-abort keeps that).
        message = f"Transaction [{txn_id}] has been aborted on this partition."
        return state, Err(NotAllowed(message)), ()
    state, entry = _write(state, EntryKind.TXN_DATA, txn_id)
    if txn_id not in state.ongoing and not is_txn_aborted(state, txn_id):
        state = evolve(state, ongoing=state.ongoing.set(txn_id, entry.position))
        state = _update_max_read_position(state)
    return state, Ok(entry.position), (AppendEntry(entry),)


def _flush_pending(state: BufferState) -> tuple[BufferState, tuple[AppendOutcome, ...], _Effects]:
    """Ready: write the parked appends in arrival order.  (TB-4)"""
    outcomes: list[AppendOutcome] = []
    effects: list[Effect] = []
    pending, state = state.pending_appends, evolve(state, pending_appends=())
    for txn_id in pending:
        state, result, eff = _internal_append(state, txn_id)
        effects.extend(eff)
        if isinstance(result, Ok):
            outcomes.append(AppendOutcome(txn_id, result.value))
        else:
            outcomes.append(AppendOutcome(txn_id, None, result.error.name))
    return state, tuple(outcomes), tuple(effects)


def _handle_low_water_mark(state: BufferState, txn_id: TxnID, lwm: int) -> tuple[BufferState, _Effects]:
    """Raise the TC's mark, then abort the first ongoing txn while it is at or below its own TC's mark.  (TB-13)"""
    tc = txn_id.most_sig_bits
    old = state.low_water_marks.get(tc)
    if old is None or lwm > old:
        state = evolve(state, low_water_marks=state.low_water_marks.set(tc, lwm))
    effects: list[Effect] = []
    # At most one abort per txn ongoing now: each abort ends the txn it aborts, so a correct buffer
    # never needs more, and a step stays a step (Pulsar's loop is asynchronous, one marker at a time).
    for _ in range(len(state.ongoing)):
        if state.status is not BufferStatus.READY:
            break
        first = _first_ongoing(state)
        if first is None:
            break
        head = first[0]
        mark = state.low_water_marks.get(head.most_sig_bits)
        if mark is None or head.least_sig_bits > mark:
            break
        state, _, eff = _abort_core(state, head)
        effects.extend(eff)
        # The abort ends with handleLowWaterMark(head, mark): the same mark, so only the loop goes on.
    return state, tuple(effects)


def _abort_core(state: BufferState, txn_id: TxnID) -> tuple[BufferState, Position, _Effects]:
    """Abort marker, aborted set, ``max_read_position``, trim, snapshot by count.  (TB-12)"""
    state, marker = _write(state, EntryKind.TXN_ABORT, txn_id)
    effects: list[Effect] = [AppendEntry(marker)]
    state, eff = _add_aborted(state, txn_id, marker.position)
    effects.extend(eff)
    state = _remove_and_update(state, txn_id)
    state, eff = _trim_expired_aborted(state)
    effects.extend(eff)
    state, eff = _snapshot_by_count(state)
    effects.extend(eff)
    return state, marker.position, tuple(effects)


# --------------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------------


def _not_ready(state: BufferState, what: str) -> Step:
    return state, Err(ServiceUnitNotReady(f"{what}: transaction buffer is {state.status.value}"))


def _append_buffer_to_txn(state: BufferState, cmd: AppendBufferToTxn) -> Step:
    """Ready: write now; NoSnapshot: park and write the first snapshot; Initializing/FirstSnapshotting:
    park; otherwise ServiceUnitNotReady.  (TB-4, TB-5, TB-6, TB-7, TB-8)"""
    if state.status is BufferStatus.READY:
        new, result, effects = _internal_append(state, cmd.txn_id)
        return new, (Ok(result.value, effects) if isinstance(result, Ok) else result)
    if state.status in (BufferStatus.INITIALIZING, BufferStatus.FIRST_SNAPSHOTTING):
        ticket = len(state.pending_appends)
        return evolve(state, pending_appends=(*state.pending_appends, cmd.txn_id)), Ok(Queued(ticket))
    if state.status is BufferStatus.NO_SNAPSHOT:
        state = evolve(state, status=BufferStatus.FIRST_SNAPSHOTTING, pending_appends=(cmd.txn_id,))
        state, effects = _persist(state, (_snapshot_effect(state),))
        return state, Ok(Queued(0), effects)
    return _not_ready(state, "appendBufferToTxn")


def _publish_message(state: BufferState, cmd: PublishMessage) -> Step:
    """A normal publish; ``max_read_position`` follows the LAC in NoSnapshot, and in Ready when nothing
    is ongoing; otherwise it stays.  (TB-9)"""
    if state.status in (BufferStatus.CLOSE, BufferStatus.CLOSED_AND_CLEARED):
        return _not_ready(state, "publish")
    state, entry = _write(state, EntryKind.NORMAL, None)
    if state.status is BufferStatus.NO_SNAPSHOT or (state.status is BufferStatus.READY and not state.ongoing):
        state = _move_max_read_position(state, entry.position)
    return state, Ok(entry.position, (AppendEntry(entry),))


def _end_guard(state: BufferState, what: str) -> Step | None:
    if state.status in (BufferStatus.NONE, BufferStatus.INITIALIZING):
        return _not_ready(state, what)
    if state.status in (BufferStatus.CLOSE, BufferStatus.CLOSED_AND_CLEARED):
        return _not_ready(state, what)
    return None


def _commit_txn(state: BufferState, cmd: CommitTxn) -> Step:
    """Write a commit marker in any recovered state, even for a txn this buffer never saw (Q6); then
    remove it from ongoing, low water mark, trim, snapshot by count.  (TB-11, TB-13, TB-14)"""
    guard = _end_guard(state, "commitTxn")
    if guard is not None:
        return guard
    state, marker = _write(state, EntryKind.TXN_COMMIT, cmd.txn_id)
    effects: list[Effect] = [AppendEntry(marker)]
    state = _remove_and_update(state, cmd.txn_id)
    state, eff = _handle_low_water_mark(state, cmd.txn_id, cmd.low_water_mark)
    effects.extend(eff)
    state, eff = _trim_expired_aborted(state)
    effects.extend(eff)
    state, eff = _snapshot_by_count(state)
    effects.extend(eff)
    return state, Ok(marker.position, tuple(effects))


def _abort_txn(state: BufferState, cmd: AbortTxn) -> Step:
    """Outside Ready an abort succeeds and writes nothing (Q6); in Ready: abort marker, aborted set,
    ``max_read_position``, trim, snapshot by count, then the low water mark.  (TB-12, TB-13, TB-14)"""
    guard = _end_guard(state, "abortTxn")
    if guard is not None:
        return guard
    if state.status is not BufferStatus.READY:
        return state, Ok(None)
    state, marker, effects = _abort_core(state, cmd.txn_id)
    state, eff = _handle_low_water_mark(state, cmd.txn_id, cmd.low_water_mark)
    return state, Ok(marker, (*effects, *eff))


def _roll_over_ledger(state: BufferState, cmd: RollOverLedger) -> Step:
    """A new empty ledger becomes current; the LAC does not move.  (TB-2)"""
    new_id = state.ledgers[-1].ledger_id + 1
    return evolve(state, ledgers=(*state.ledgers, LedgerInfo(new_id, 0))), Ok(new_id)


def _delete_ledger(state: BufferState, cmd: DeleteLedger) -> Step:
    """Retention deletes the oldest, non-current ledger once every entry in it is at or before
    ``max_read_position`` of a recovered buffer.  Aborted ids are trimmed later.  (TB-23)"""
    if state.status not in (BufferStatus.READY, BufferStatus.NO_SNAPSHOT):
        return _not_ready(state, "deleteLedger")
    if len(state.ledgers) < 2 or state.ledgers[0].ledger_id != cmd.ledger_id:
        return state, Err(NotAllowed(f"ledger {cmd.ledger_id} is not the oldest non-current ledger"))
    info = state.ledgers[0]
    if info.entries and Position(info.ledger_id, info.entries - 1) > state.max_read_position:
        return state, Err(NotAllowed(f"ledger {cmd.ledger_id} holds entries after the max read position"))
    # The oldest ledger's entries are the front of the log.
    stored = state.entries.bisect_right(cmd.ledger_id, key=_ledger_of)
    return evolve(state, ledgers=state.ledgers[1:], entries=state.entries.drop_first(stored)), Ok(cmd.ledger_id)


def _take_snapshot_by_time(state: BufferState, cmd: TakeSnapshot) -> Step:
    """The timer snapshots only a Ready buffer whose ``max_read_position`` moved since the last one.  (TB-21)"""
    if state.status is not BufferStatus.READY or state.change_max_read_position_count == 0:
        return state, Ok(None)
    state, effects = _take_snapshot(state)
    return state, Ok(None, effects)


def _start_recovery(state: BufferState, cmd: StartRecovery) -> Step:
    """None -> Initializing.  (TB-1)"""
    if state.status is not BufferStatus.NONE:
        return state, Err(NotAllowed(f"recovery already started: transaction buffer is {state.status.value}"))
    return evolve(state, status=BufferStatus.INITIALIZING), Ok(None)


def _complete_recovery(state: BufferState, cmd: CompleteRecovery) -> Step:
    """Initializing -> Ready (a snapshot exists) or NoSnapshot; then the parked appends: with a
    snapshot they are written, without one the first snapshot is written first.  (TB-1, TB-4, TB-24)"""
    if state.status is not BufferStatus.INITIALIZING:
        return state, Err(NotAllowed(f"no recovery in progress: transaction buffer is {state.status.value}"))
    recovered, sealed = _recover_with_effects(
        state.config, state.topic, state.ledgers, state.entries, state.snapshot_store
    )
    recovered = evolve(recovered, pending_appends=state.pending_appends)
    if not recovered.pending_appends:
        return recovered, Ok((), sealed)
    if recovered.status is BufferStatus.READY:
        recovered, outcomes, effects = _flush_pending(recovered)
        return recovered, Ok(outcomes, (*sealed, *effects))
    recovered = evolve(recovered, status=BufferStatus.FIRST_SNAPSHOTTING)
    recovered, effects = _persist(recovered, (_snapshot_effect(recovered),))
    return recovered, Ok((), (*sealed, *effects))


def _complete_first_snapshot(state: BufferState, cmd: CompleteFirstSnapshot) -> Step:
    """FirstSnapshotting -> Ready, then the parked appends in order.  (TB-4)"""
    if state.status is not BufferStatus.FIRST_SNAPSHOTTING:
        return state, Err(NotAllowed(f"no first snapshot in progress: transaction buffer is {state.status.value}"))
    state, outcomes, effects = _flush_pending(evolve(state, status=BufferStatus.READY))
    if not state.ongoing and state.max_read_position < last_confirmed_entry(state):
        # Normal publishes made while FirstSnapshotting did not move max_read_position (TB-9); if no
        # parked append became ongoing, catch up now instead of waiting for the next write (TB-4).
        state = _move_max_read_position(state, last_confirmed_entry(state))
    return state, Ok(outcomes, effects)


def _reload(state: BufferState, cmd: ReloadTopic) -> Step:
    """A new buffer in None over the same ledgers and snapshot topics; a deleted topic stays deleted.  (TB-2, TB-25)"""
    if state.status is BufferStatus.CLOSED_AND_CLEARED:
        return state, Err(NotAllowed("the topic was deleted"))
    return restart(state), Ok(None)


def _close(state: BufferState, cmd: CloseTransactionBuffer) -> Step:
    """Any state -> Close; parked appends fail.  (TB-1)"""
    failed = tuple(AppendOutcome(t, None, "ServiceUnitNotReady") for t in state.pending_appends)
    return evolve(state, status=BufferStatus.CLOSE, pending_appends=()), Ok(failed)


def _clear(state: BufferState, cmd: ClearTransactionBufferSnapshot) -> Step:
    """Close -> ClosedAndCleared with a tombstone for the topic's snapshots.  (TB-1, TB-25)"""
    if state.status is not BufferStatus.CLOSE:
        return state, Err(NotAllowed(f"transaction buffer is {state.status.value}, not Close"))
    state = evolve(state, status=BufferStatus.CLOSED_AND_CLEARED)
    effects: list[Effect] = [DeleteSnapshotSegment(state.topic, s.sequence_id) for s in state.segments]
    effects.append(ClearSnapshot(state.topic))
    state, out = _persist(state, effects)
    return state, Ok(None, out)


def step(state: BufferState, command: Command) -> Step:
    """Apply one command (TB-1 .. TB-25); a rejected command returns ``state`` unchanged and an Err."""
    match command:
        case AppendBufferToTxn():
            return _append_buffer_to_txn(state, command)
        case PublishMessage():
            return _publish_message(state, command)
        case CommitTxn():
            return _commit_txn(state, command)
        case AbortTxn():
            return _abort_txn(state, command)
        case RollOverLedger():
            return _roll_over_ledger(state, command)
        case DeleteLedger():
            return _delete_ledger(state, command)
        case TakeSnapshot():
            return _take_snapshot_by_time(state, command)
        case StartRecovery():
            return _start_recovery(state, command)
        case CompleteRecovery():
            return _complete_recovery(state, command)
        case CompleteFirstSnapshot():
            return _complete_first_snapshot(state, command)
        case ReloadTopic():
            return _reload(state, command)
        case CloseTransactionBuffer():
            return _close(state, command)
        case ClearTransactionBufferSnapshot():
            return _clear(state, command)
    raise TypeError(f"not a transaction-buffer command: {command!r}")


# --------------------------------------------------------------------------------------------
# Dispatch (TB-15 .. TB-19)
# --------------------------------------------------------------------------------------------


def _entry_visible(aborted: _AbortedMessages, entry: LogEntry) -> bool:
    if entry.kind is EntryKind.NORMAL:
        return True
    if entry.kind is EntryKind.TXN_DATA:
        assert entry.txn_id is not None
        return not aborted(entry.txn_id, entry.position)
    return False


def _readable(state: BufferState, after: Position) -> Iterator[LogEntry]:
    """The stored entries after ``after`` up to the readable ``max_read_position``, in log order."""
    limit = readable_max_read_position(state)
    for e in state.entries.iter_from(state.entries.bisect_right(after, key=_position)):
        if e.position > limit:
            return
        yield e


def dispatchable(state: BufferState) -> tuple[Position, ...]:
    """Every position a reader from the start may receive now, in log order: entries at or before the
    readable ``max_read_position`` that are normal messages or messages not aborted.  What is
    visible of one txn is therefore a prefix of its messages.  (TB-15, TB-16, TB-19)"""
    aborted = _AbortedMessages(state)
    return tuple(e.position for e in _readable(state, EARLIEST) if _entry_visible(aborted, e))


def dispatch(state: BufferState, after: Position = EARLIEST) -> Dispatch:
    """What a cursor whose read position is just after ``after`` reads now: delivered messages, and the
    markers and aborted-txn messages the dispatcher individually acks instead; what it delivers of
    one txn is a prefix of its messages.  (TB-15, TB-16, TB-17, TB-19)"""
    delivered: list[Position] = []
    acked: list[Position] = []
    aborted = _AbortedMessages(state, after)
    for e in _readable(state, after):
        (delivered if _entry_visible(aborted, e) else acked).append(e.position)
    return Dispatch(tuple(delivered), tuple(acked))


def last_dispatchable_position(state: BufferState) -> Position:
    """Scan back from the readable ``max_read_position`` over markers and aborted messages; with nothing
    dispatchable, the readable ``max_read_position`` itself.  (TB-18)"""
    limit = readable_max_read_position(state)
    entries = state.entries
    aborted = _AbortedMessages(state)
    for i in range(entries.bisect_right(limit, key=_position) - 1, -1, -1):
        if _entry_visible(aborted, entries[i]):
            return entries[i].position
    return limit


# TB-18's refusal while the buffer recovers (also what a broker answering from the ``last_message_id``
# observer, which gives the error's name only, puts in its reply).
NOT_RECOVERED = "Failed to recover Transaction Buffer."


def get_last_message_id(state: BufferState) -> Ok[Position] | Err:
    """``getLastMessageIds``: waits for recovery (here: fails while not recovered), then the last
    dispatchable position.  (TB-18)"""
    if state.status not in (BufferStatus.READY, BufferStatus.NO_SNAPSHOT, BufferStatus.FIRST_SNAPSHOTTING):
        return Err(ServiceUnitNotReady(NOT_RECOVERED))
    return Ok(last_dispatchable_position(state))


# --------------------------------------------------------------------------------------------
# Recovery (TB-24)
# --------------------------------------------------------------------------------------------


def _fold_store(records: Iterable[Effect]) -> SnapshotStore:
    store = SnapshotStore()
    for record in records:
        store = store.apply(record)
    return store


def recover(
    config: Config,
    *,
    topic: str,
    ledgers: tuple[LedgerInfo, ...],
    entries: Iterable[LogEntry],
    snapshot_records: Iterable[Effect],
) -> BufferState:
    """The buffer a broker builds on topic load from the topic's entries and the snapshot records
    written so far (other effects are ignored): a pure fold.  (TB-24)"""
    state, _ = _recover_with_effects(config, topic, ledgers, entries, _fold_store(snapshot_records))
    return state


def recovery_view(
    config: Config,
    *,
    topic: str,
    ledger_id: int,
    ledgers: tuple[LedgerInfo, ...],
    entries: Iterable[LogEntry],
    snapshot_records: Iterable[Effect],
) -> BufferState:
    """What a loading topic's buffer starts from, before it steps :class:`StartRecovery` (TB-1,
    TB-24): a fresh, unrecovered buffer over the topic's ledgers and entries, with the snapshot
    store folded from the snapshot records written so far.  The broker's load builds it, and a
    history's ``recover`` operation rebuilds the same state from the same inputs."""
    fresh = initial(config, topic=topic, ledger_id=ledger_id, recovered=False)
    return evolve(fresh, ledgers=ledgers, entries=_as_log(entries), snapshot_store=_fold_store(snapshot_records))


def _as_log(entries: Iterable[LogEntry]) -> Log[LogEntry]:
    return entries if isinstance(entries, Log) else Log(entries)


def _recover_with_effects(
    config: Config,
    topic: str,
    ledgers: tuple[LedgerInfo, ...],
    entries: Iterable[LogEntry],
    store: SnapshotStore,
) -> tuple[BufferState, _Effects]:
    """The recovered state, and the segment records a replay that fills the unsealed list seals
    (Pulsar writes them while recovering, too)."""
    base = evolve(
        initial(config, topic=topic, recovered=False),
        ledgers=ledgers,
        entries=_as_log(entries),
        snapshot_store=store,
    )
    lac = last_confirmed_entry(base)
    start: Position | None = None
    if config.transaction_buffer_segmented_snapshot_enabled and store.indexes is not None:
        segments = []
        for index in store.indexes.index_list:
            record = store.segments.get(index.sequence_id)
            if record is None:
                continue  # a trimmed segment whose index entry was not rewritten yet
            segments.append(AbortedSegment(record.sequence_id, record.persistent_position, frozenset(record.aborts)))
        next_seq = max((s.sequence_id for s in segments), default=-1) + 1
        base = evolve(
            base,
            segments=tuple(segments),
            unsealed=store.indexes.snapshot.aborts,
            unsealed_ids=_ids(store.indexes.snapshot.aborts),
            next_segment_sequence_id=next_seq,
        )
        start = store.indexes.snapshot.max_read_position
    elif store.snapshot is not None:
        # Segmented mode without an index falls back to the single snapshot (the upgrade path, #20235).
        snap = store.snapshot
        if config.transaction_buffer_segmented_snapshot_enabled:
            unsealed = tuple(a.txn_id for a in snap.aborts)
            base = evolve(base, unsealed=unsealed, unsealed_ids=_ids(unsealed))
        else:
            aborted = immutables.Map({a.txn_id: a.marker_position for a in snap.aborts})
            base = evolve(base, aborted=aborted, aborted_by_marker=_by_marker(aborted))
        start = snap.max_read_position
    if start is None:
        return evolve(base, status=BufferStatus.NO_SNAPSHOT, max_read_position=lac), ()
    state = evolve(base, status=BufferStatus.READY, max_read_position=start)
    effects: list[Effect] = []
    for entry in base.entries.iter_from(base.entries.bisect_right(start, key=_position)):
        if entry.txn_id is None:
            continue
        txn_id = entry.txn_id
        if entry.kind is EntryKind.TXN_ABORT:
            state, sealed = _add_aborted(state, txn_id, entry.position)
            effects.extend(sealed)
            state = evolve(state, ongoing=state.ongoing.delete(txn_id) if txn_id in state.ongoing else state.ongoing)
        elif entry.kind is EntryKind.TXN_COMMIT:
            if txn_id in state.ongoing:
                state = evolve(state, ongoing=state.ongoing.delete(txn_id))
        elif txn_id not in state.ongoing and not is_txn_aborted(state, txn_id):
            state = evolve(state, ongoing=state.ongoing.set(txn_id, entry.position))
    first = first_ongoing_position(state)
    mrp = _previous(state, first) if first is not None else lac
    return evolve(state, max_read_position=mrp, change_max_read_position_count=0), tuple(effects)


# --------------------------------------------------------------------------------------------
# Vectors adapter
# --------------------------------------------------------------------------------------------


def _decode_init(init: Mapping[str, Any]) -> dict[str, Any]:
    from spec.jsonvalues import from_json

    allowed: dict[str, type] = {"topic": str, "ledger_id": int, "recovered": bool}  # initial()'s parameters
    unknown = set(init) - set(allowed)
    if unknown:
        raise KeyError(f"unknown init parameter(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    return {name: from_json(value, allowed[name], f"$.init.{name}") for name, value in init.items()}


def _obs_max_read_position(state: BufferState) -> Position:
    return readable_max_read_position(state)


def _obs_status(state: BufferState) -> BufferStatus:
    return state.status


def _obs_ongoing(state: BufferState) -> immutables.Map[TxnID, Position]:
    return state.ongoing


def _obs_aborted(state: BufferState) -> tuple[TxnID, ...]:
    ids = set(state.aborted) | set(state.unsealed)
    for seg in state.segments:
        ids |= seg.aborts
    return tuple(sorted(ids))


def _obs_is_txn_aborted(state: BufferState, txn_id: TxnID) -> bool:
    return is_txn_aborted(state, txn_id)


def _obs_dispatch(state: BufferState, after: Position = EARLIEST) -> Dispatch:
    return dispatch(state, after)


def _obs_last_message_id(state: BufferState) -> Position | str:
    result = get_last_message_id(state)
    return result.value if isinstance(result, Ok) else result.error.name


def _obs_lac(state: BufferState) -> Position:
    return last_confirmed_entry(state)


def _obs_low_water_marks(state: BufferState) -> immutables.Map[int, int]:
    return state.low_water_marks


def _obs_snapshot(state: BufferState) -> TransactionBufferSnapshot | None:
    return state.snapshot_store.snapshot


def _obs_snapshot_indexes(state: BufferState) -> TransactionBufferSnapshotIndexes | None:
    return state.snapshot_store.indexes


def _obs_segments(state: BufferState) -> tuple[TransactionBufferSnapshotSegment, ...]:
    return tuple(state.snapshot_store.segments[k] for k in sorted(state.snapshot_store.segments.keys()))


def _obs_unsealed(state: BufferState) -> tuple[TxnID, ...]:
    return state.unsealed


def _obs_change_count(state: BufferState) -> int:
    return state.change_max_read_position_count


def _obs_ledgers(state: BufferState) -> tuple[LedgerInfo, ...]:
    return state.ledgers


def _obs_recovered(state: BufferState) -> dict[str, Any]:
    """Crash now and recover from what is persisted: the recovered buffer's observable state."""
    again = restart(state)
    again, _ = step(again, StartRecovery())
    again, _ = step(again, CompleteRecovery())
    return {
        "status": again.status,
        "max_read_position": readable_max_read_position(again),
        "ongoing": again.ongoing,
        "aborted": _obs_aborted(again),
        "dispatchable": dispatchable(again),
    }


def _init(config: Config, init: Mapping[str, Any]) -> BufferState:
    return initial(config, **_decode_init(init))


SnapshotRecord = WriteSnapshot | WriteSnapshotSegment | WriteSnapshotIndexes | DeleteSnapshotSegment | ClearSnapshot


def decode_snapshot_records(data: Any, path: str = "$.snapshot_records") -> tuple[SnapshotRecord, ...]:
    """The snapshot-topic writes a ``recover`` row's ``snapshot_records`` spells, each by its
    ``@type``; anything else is a KeyError naming its JSON path."""
    from spec.jsonvalues import from_json

    kinds: dict[str, type] = {
        cls.__name__: cls
        for cls in (WriteSnapshot, WriteSnapshotSegment, WriteSnapshotIndexes, DeleteSnapshotSegment, ClearSnapshot)
    }
    records = []
    for i, raw in enumerate(from_json(data, tuple[Any, ...], path)):
        kind = kinds.get(str(raw.get("@type"))) if isinstance(raw, dict) else None
        if kind is None:
            raise KeyError(f"{path}[{i}]: not a snapshot record: {raw!r}")
        records.append(from_json(raw, kind, f"{path}[{i}]"))
    return tuple(records)


def _recover_view(config: Config, inputs: Mapping[str, Any]) -> BufferState:
    """A history's ``recover`` operation: :func:`recovery_view` from its JSON inputs.

    ``{"topic": ..., "ledger_id": 3, "ledgers": [LedgerInfo, ...], "entries": [LogEntry, ...],
    "snapshot_records": [WriteSnapshot | WriteSnapshotSegment | ..., ...]}``."""
    from spec.jsonvalues import from_json

    unknown = set(inputs) - {"topic", "ledger_id", "ledgers", "entries", "snapshot_records"}
    if unknown:
        raise KeyError(f"unknown recovery input(s) {sorted(unknown)}")
    ledgers = from_json(inputs["ledgers"], tuple[LedgerInfo, ...], "$.ledgers")
    return recovery_view(
        config,
        topic=from_json(inputs.get("topic", DEFAULT_TOPIC), str, "$.topic"),
        ledger_id=from_json(inputs.get("ledger_id", ledgers[-1].ledger_id), int, "$.ledger_id"),
        ledgers=ledgers,
        snapshot_records=decode_snapshot_records(inputs.get("snapshot_records", [])),
        entries=from_json(inputs.get("entries", []), tuple[LogEntry, ...], "$.entries"),
    )


def _vectors() -> MachineVectors:
    return MachineVectors(
        name="buffer",
        initial=_init,
        recover=_recover_view,
        step=step,
        commands={
            "append_buffer_to_txn": AppendBufferToTxn,
            "publish_message": PublishMessage,
            "commit_txn": CommitTxn,
            "abort_txn": AbortTxn,
            "roll_over_ledger": RollOverLedger,
            "delete_ledger": DeleteLedger,
            "take_snapshot": TakeSnapshot,
            "start_recovery": StartRecovery,
            "complete_recovery": CompleteRecovery,
            "complete_first_snapshot": CompleteFirstSnapshot,
            "reload_topic": ReloadTopic,
            "close": CloseTransactionBuffer,
            "clear_snapshot": ClearTransactionBufferSnapshot,
        },
        observers={
            "max_read_position": _obs_max_read_position,
            "status": _obs_status,
            "ongoing": _obs_ongoing,
            "aborted": _obs_aborted,
            "is_txn_aborted": _obs_is_txn_aborted,
            "dispatch": _obs_dispatch,
            "last_message_id": _obs_last_message_id,
            "last_confirmed_entry": _obs_lac,
            "low_water_marks": _obs_low_water_marks,
            "snapshot": _obs_snapshot,
            "snapshot_indexes": _obs_snapshot_indexes,
            "snapshot_segments": _obs_segments,
            "unsealed": _obs_unsealed,
            "change_max_read_position_count": _obs_change_count,
            "ledgers": _obs_ledgers,
            "recovered": _obs_recovered,
        },
    )


VECTORS = _vectors()
