"""The pending ack of one subscription: PIP-31's PENDING -> PENDING_ACK -> DELETED, as Pulsar realises it.

One value of :class:`PendingAckState` is one subscription seen by the transaction machinery:

* the cursor view the conflict rules read (mark-delete position, individually deleted entries,
  per-entry batch ack sets) -- DELETED lives here;
* the pending-ack handle's maps (``individualAckOfTransaction``, ``individualAckPositions`` with
  the combined ack set per entry, the single cumulative slot) -- PENDING_ACK lives here;
* the low watermarks per coordinator, the handle's lifecycle state with its queue of requests that
  arrived before the handle was ready;
* the pending-ack log bookkeeping: record ids, the sparse log index and ``LogIndexLagBackoff``,
  and the resulting mark-delete of the pending-ack log.

Everything else is PENDING.  Bit sets are Python ints in *acked* form inside the state (bit i set
means batch index i is acknowledged, by the cursor or by a txn); on the wire and in the log they
are Pulsar's ack sets (Java ``BitSet`` long words, bit i set means index i is still *present*),
converted at the boundary with :func:`spec.types.bits_to_words` / :func:`spec.types.words_to_bits`.
The rules are on ``spec/rules/pending_ack.md`` (PA-1 .. PA-21); each function names the ones it
implements.
"""

from __future__ import annotations

import bisect
import enum
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import immutables

from reference.conformance import MachineVectors, decoded_log_records
from reference.persistent import HashOnce, evolve, evolver, slot_init, unchecked
from spec.config import PENDING_ACK_INIT_BACKOFF_INITIAL_MS, Config
from spec.envelope import LogKind
from spec.errors import BadRecord, DomainError, NotAllowed, ServiceUnitNotReady, TransactionConflict
from spec.jsonvalues import from_json
from spec.pb import TransactionPendingAck_pb2 as pb
from spec.result import Effect, Err, Ok
from spec.types import INT64_MAX, AckType, MessageState, Position, PulsarName, TxnID, bits_to_words, words_to_bits

__all__ = [
    "VECTORS",
    "AbortTxn",
    "AckBits",
    "AckedPosition",
    "AppendPendingAckRecord",
    "ClosePendingAckHandle",
    "Command",
    "CommitTxn",
    "CumulativeAck",
    "CumulativeSlot",
    "CursorCumulativeAck",
    "CursorIndividualAck",
    "CursorView",
    "FollowCursor",
    "HandleState",
    "Ignored",
    "IndividualAck",
    "InitPendingAckStore",
    "LoggedRecord",
    "NormalAck",
    "PendingAckInitComplete",
    "PendingAckInitFailed",
    "PendingAckOp",
    "PendingAckRecord",
    "PendingAckState",
    "PendingAckView",
    "PositionInPendingAck",
    "Queued",
    "RedeliverUnacknowledgedMessages",
    "ReloadSubscription",
    "ResetCursor",
    "ResetSubscriptionCursor",
    "RetryPendingAckInit",
    "ScheduleInitRetry",
    "SubType",
    "TrimPendingAckLog",
    "check_position_in_pending_ack_state",
    "initial",
    "log_index_lag_backoff",
    "message_state",
    "pending_ack_view",
    "recover",
    "step",
]

# numMessagesInBatch is an int32 on the wire (MessageMetadata.num_messages_in_batch).
MAX_BATCH_SIZE: Final = 2**31 - 1
# A whole-entry ack holds every batch index of the entry, whatever the batch size: Pulsar stores
# it without an ack set, and an empty Java BitSet reads as "every index acked".
WHOLE: Final = None
# compareToWithAckSet: an entry whose ack set acks every index sorts after any partial ack of it.
_ALL_ACKED_KEY: Final = 1 << 32
# LogIndexLagBackoff as MLPendingAckStore builds it: maxLag = Long.MAX_VALUE, exponent 1.
_LOG_INDEX_MAX_LAG: Final = INT64_MAX
_LOG_INDEX_EXPONENT: Final = 1


def _full(batch_size: int) -> int:
    return (1 << batch_size) - 1


# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------


class HandleState(PulsarName, enum.Enum):
    """PendingAckHandleState (PA-17)."""

    NONE = "None"
    INITIALIZING = "Initializing"
    READY = "Ready"
    ERROR = "Error"
    CLOSED = "Close"


class SubType(PulsarName, enum.Enum):
    """CommandSubscribe.SubType; only whether cumulative acks are honoured matters here (PA-10)."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3


class PendingAckOp(PulsarName, enum.IntEnum):
    """TransactionPendingAck.proto ``PendingAckOp``."""

    ACK = 1
    COMMIT = 2
    ABORT = 3


class PositionInPendingAck(PulsarName, enum.Enum):
    """The admin answer of ``checkPositionInPendingAckState`` (PA-21)."""

    PendingAckNotReady = "PendingAckNotReady"
    MarkDelete = "MarkDelete"
    NotInPendingAck = "NotInPendingAck"
    PendingAck = "PendingAck"
    InvalidPosition = "InvalidPosition"


@slot_init
@dataclass(frozen=True, slots=True)
class AckedPosition:
    """One message id of an ack request, and one ``PendingAckMetadata`` of a log record.

    ``ack_set`` is Pulsar's wire form: Java ``BitSet.toLongArray()`` words where a set bit is an
    index still present (not acked); ``None`` acks the whole entry.  Bits from ``batch_size`` up
    are padding and never count as acked (PA-2).
    """

    position: Position
    ack_set: tuple[int, ...] | None = None
    batch_size: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {self.batch_size!r}")
        if self.batch_size > MAX_BATCH_SIZE:
            raise ValueError(f"batch_size {self.batch_size} is more than a batch holds ({MAX_BATCH_SIZE}, an int32)")

    @classmethod
    def of_indexes(cls, position: Position, batch_size: int, indexes: Iterable[int]) -> AckedPosition:
        """The ack of ``indexes`` of a batch entry, in wire form."""
        acked = 0
        for index in indexes:
            if not 0 <= index < batch_size:
                raise ValueError(f"batch index {index} outside [0, {batch_size})")
            acked |= 1 << index
        return cls(position, bits_to_words(_full(batch_size) & ~acked), batch_size)

    @property
    def acked(self) -> int | None:
        """The acked indexes as a bit set (bit i = index i acked); ``None`` for the whole entry."""
        if self.ack_set is None:
            return WHOLE
        return _full(self.batch_size) & ~words_to_bits(self.ack_set)


@slot_init
@dataclass(frozen=True, slots=True)
class AckBits:
    """What is acknowledged of one entry: ``acked`` bits (bit i = index i) or the whole entry (None)."""

    batch_size: int
    acked: int | None

    def overlaps(self, other_acked: int | None) -> bool:
        if other_acked == 0 or self.acked == 0:
            return False
        if self.acked is None or other_acked is None:
            return True
        return bool(self.acked & other_acked)


@dataclass(frozen=True, slots=True)
class CumulativeSlot(HashOnce):
    """``cumulativeAckOfTransaction``: the one (txn, position) pair a subscription holds (PA-9)."""

    __hash__ = HashOnce.__hash__

    txn_id: TxnID
    position: Position
    batch_size: int = 1
    acked: int | None = None


_FIRST_LEDGER_START: Final = Position(0, -1)
_EMPTY_BATCH: Final[immutables.Map[Position, AckBits]] = immutables.Map()
_NO_ACKS: Final[immutables.Map[Position, AckBits]] = immutables.Map()


@slot_init
@dataclass(frozen=True, slots=True)
class CursorView(HashOnce):
    """The subscription cursor as the pending-ack rules read it.

    An entry is deleted when it is at or below ``mark_delete_position`` or in
    ``individually_deleted``; ``batch_deleted`` holds the acked indexes of batch entries deleted
    only in part (never empty, never all of the entry).
    """

    __hash__ = HashOnce.__hash__

    mark_delete_position: Position = _FIRST_LEDGER_START
    individually_deleted: frozenset[Position] = frozenset()
    batch_deleted: immutables.Map[Position, AckBits] = _EMPTY_BATCH

    def is_deleted(self, position: Position) -> bool:
        return position <= self.mark_delete_position or position in self.individually_deleted

    def deleted_bits(self, position: Position) -> int | None:
        """Acked indexes of ``position`` on the cursor; ``None`` when the whole entry is deleted."""
        if position <= self.mark_delete_position or position in self.individually_deleted:
            return WHOLE
        bits = self.batch_deleted.get(position)
        return 0 if bits is None or bits.acked is None else bits.acked


# The members the steps read on every command, as module constants: reading a member off its
# enum class goes through EnumType's __getattr__ hook on Python 3.11 (about ten times a global's
# cost), once or twice per step.
_OP_ACK: Final = PendingAckOp.ACK
_OP_COMMIT: Final = PendingAckOp.COMMIT
_OP_ABORT: Final = PendingAckOp.ABORT
_INDIVIDUAL: Final = AckType.INDIVIDUAL
_CUMULATIVE: Final = AckType.CUMULATIVE
_READY: Final = HandleState.READY


# --------------------------------------------------------------------------------------------
# Log records (PA-15)
# --------------------------------------------------------------------------------------------


@slot_init
@dataclass(frozen=True, slots=True)
class PendingAckRecord:
    """One ``PendingAckMetadataEntry`` of the subscription's pending-ack log (PA-15)."""

    op: PendingAckOp
    ack_type: AckType
    txn_id: TxnID
    positions: tuple[AckedPosition, ...] = ()

    def to_pb(self) -> pb.PendingAckMetadataEntry:
        entry = pb.PendingAckMetadataEntry()
        entry.pending_ack_op = pb.PendingAckOp.Value(self.op.name)
        entry.ack_type = int(self.ack_type)  # type: ignore[assignment]
        entry.txnid_most_bits = self.txn_id.most_sig_bits
        entry.txnid_least_bits = self.txn_id.least_sig_bits
        for acked in self.positions:
            meta = entry.pending_ack_metadata.add()
            meta.ledgerId = acked.position.ledger_id
            meta.entryId = acked.position.entry_id
            meta.batch_size = acked.batch_size
            if acked.ack_set is not None:
                meta.ack_set.extend(acked.ack_set)
        return entry

    @classmethod
    def from_pb(cls, entry: pb.PendingAckMetadataEntry) -> PendingAckRecord:
        """Decode; a record without an op or txn id is bad input (Pulsar's replay fails, PA-18)."""
        for name in ("pending_ack_op", "ack_type", "txnid_most_bits", "txnid_least_bits"):
            if not entry.HasField(name):
                raise BadRecord(f"PendingAckMetadataEntry without {name}", offset=0)
        positions = []
        for meta in entry.pending_ack_metadata:
            batch_size = meta.batch_size if meta.HasField("batch_size") and meta.batch_size > 0 else 1
            # An empty ack_set on the wire is a batch entry with every index acked, but a record
            # cannot tell it apart from "no ack set"; Pulsar reads both as a whole-entry ack.
            ack_set = tuple(meta.ack_set) if len(meta.ack_set) else None
            positions.append(AckedPosition(Position(meta.ledgerId, meta.entryId), ack_set, batch_size))
        return cls(
            PendingAckOp(entry.pending_ack_op),
            AckType(entry.ack_type),
            TxnID(entry.txnid_most_bits, entry.txnid_least_bits),
            tuple(positions),
        )

    def to_bytes(self) -> bytes:
        return self.to_pb().SerializeToString()

    @classmethod
    def from_bytes(cls, data: bytes) -> PendingAckRecord:
        entry = pb.PendingAckMetadataEntry()
        try:
            entry.ParseFromString(data)
        except Exception as exc:  # protobuf raises its own DecodeError
            raise BadRecord(f"not a PendingAckMetadataEntry: {exc}", offset=0) from None
        return cls.from_pb(entry)


# --------------------------------------------------------------------------------------------
# Effects
# --------------------------------------------------------------------------------------------


@slot_init
@dataclass(frozen=True, slots=True)
class AppendPendingAckRecord(Effect):
    """Append ``record`` to the pending-ack log under the logical id ``record_id`` (PA-15)."""

    record_id: int
    record: PendingAckRecord


@slot_init
@dataclass(frozen=True, slots=True)
class TrimPendingAckLog(Effect):
    """Mark-delete the pending-ack log up to and including ``record_id`` (PA-16)."""

    record_id: int


@slot_init
@dataclass(frozen=True, slots=True)
class CursorIndividualAck(Effect):
    """Acknowledge these positions on the subscription cursor (ack sets in wire form)."""

    positions: tuple[AckedPosition, ...]


@dataclass(frozen=True, slots=True)
class CursorCumulativeAck(Effect):
    """Mark-delete the subscription cursor up to ``position``."""

    position: AckedPosition


@slot_init
@dataclass(frozen=True, slots=True)
class RedeliverUnacknowledgedMessages(Effect):
    """Hand these positions back to the dispatcher for redelivery (PA-12)."""

    positions: tuple[Position, ...]


@dataclass(frozen=True, slots=True)
class ResetSubscriptionCursor(Effect):
    """Reset the durable cursor to ``mark_delete_position`` (and the read entry's ack set) and
    restart dispatching from the entry after it (PA-22)."""

    mark_delete_position: Position
    read_position: AckedPosition | None


@dataclass(frozen=True, slots=True)
class InitPendingAckStore(Effect):
    """Open (create if missing) the pending-ack log and replay it (PA-17)."""


@dataclass(frozen=True, slots=True)
class ScheduleInitRetry(Effect):
    """Retry the initialisation after ``delay_ms`` (doubling from 100 ms, PA-17)."""

    attempt: int
    delay_ms: int


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndividualAck:
    """CommandAck(Individual) with a txn: ``PendingAckHandle.individualAcknowledgeMessage``."""

    txn_id: TxnID
    positions: tuple[AckedPosition, ...]


@dataclass(frozen=True, slots=True)
class CumulativeAck:
    """CommandAck(Cumulative) with a txn: ``PendingAckHandle.cumulativeAcknowledgeMessage``."""

    txn_id: TxnID
    positions: tuple[AckedPosition, ...]


@dataclass(frozen=True, slots=True)
class NormalAck:
    """CommandAck without a txn: ``PersistentSubscription.acknowledgeMessage``."""

    ack_type: AckType
    positions: tuple[AckedPosition, ...]


@dataclass(frozen=True, slots=True)
class CommitTxn:
    """END_TXN_ON_SUBSCRIPTION(COMMIT) with the coordinator's low watermark."""

    txn_id: TxnID
    low_water_mark: int = -1


@dataclass(frozen=True, slots=True)
class AbortTxn:
    """END_TXN_ON_SUBSCRIPTION(ABORT) with the coordinator's low watermark."""

    txn_id: TxnID
    low_water_mark: int = -1


@dataclass(frozen=True, slots=True)
class PendingAckInitComplete:
    """The pending-ack store opened and its replay finished."""


@dataclass(frozen=True, slots=True)
class PendingAckInitFailed:
    """The store could not be opened; ``retryable`` as Pulsar classifies the exception."""

    retryable: bool


@dataclass(frozen=True, slots=True)
class RetryPendingAckInit:
    """The init retry timer fired."""


@dataclass(frozen=True, slots=True)
class ClosePendingAckHandle:
    """The subscription (or topic) is closed or unloaded."""


@dataclass(frozen=True, slots=True)
class LoggedRecord:
    """One surviving record of the pending-ack log, with the id the machine gave it."""

    record_id: int
    record: PendingAckRecord


@dataclass(frozen=True, slots=True)
class ReloadSubscription:
    """The broker unloads and reloads the subscription: the handle replays ``records`` (the log
    above its mark-delete) over the cursor as persisted (PA-18).  In-memory state is lost (PA-20)."""

    records: tuple[LoggedRecord, ...]


@dataclass(frozen=True, slots=True)
class ResetCursor:
    """Seek: the subscription's cursor restarts after ``mark_delete_position`` (the position
    before the entry the seek names; the broker computes it across ledgers).  A seek to a batch
    index carries the read entry's ack set in ``read_position`` (PA-22)."""

    mark_delete_position: Position
    read_position: AckedPosition | None = None


@dataclass(frozen=True, slots=True)
class FollowCursor:
    """The subscription's durable cursor moved its mark-delete position to
    ``mark_delete_position``, past where the view folds its deletes (a ledger boundary, which the
    view does not know): the view follows it (PA-25)."""

    mark_delete_position: Position


TxnCommand = IndividualAck | CumulativeAck | CommitTxn | AbortTxn
Command = (
    TxnCommand
    | NormalAck
    | FollowCursor
    | ResetCursor
    | PendingAckInitComplete
    | PendingAckInitFailed
    | RetryPendingAckInit
    | ClosePendingAckHandle
    | ReloadSubscription
)


@dataclass(frozen=True, slots=True)
class Queued:
    """The request waits for the handle to become Ready; its outcome comes with the init result."""

    queue_length: int


@dataclass(frozen=True, slots=True)
class Ignored:
    """The broker answers success and does nothing (PA-10)."""

    reason: str


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingAckState(HashOnce):
    __hash__ = HashOnce.__hash__

    config: Config
    sub_type: SubType
    cursor: CursorView
    handle_state: HandleState
    # individualAckOfTransaction; ``txn_order`` is its insertion order (the low-watermark rule
    # looks at the first txn only, PA-14).
    individual_ack_of_transaction: immutables.Map[TxnID, immutables.Map[Position, AckBits]]
    txn_order: tuple[TxnID, ...]
    # individualAckPositions: the combined acked bits of every entry some txn holds.
    individual_ack_positions: immutables.Map[Position, AckBits]
    cumulative_ack: CumulativeSlot | None
    low_water_marks: immutables.Map[int, int]
    queued: tuple[TxnCommand, ...]
    init_attempts: int
    # The pending-ack log (PA-15, PA-16).
    next_record_id: int
    log_index: tuple[tuple[Position, int], ...]
    max_ack_position: Position | None
    current_index_lag: int
    max_index_lag: int
    log_mark_delete: int


Result = Ok[object] | Err
Step = tuple[PendingAckState, Result]

# The updates a step makes on its hot path, called directly (persistent.evolver).  The first five
# fields are the log's bookkeeping (PA-15, PA-16), which every logged step changes; the rest are
# what the step changes besides in the same update.
_LOG_FIELDS: Final = ("next_record_id", "max_ack_position", "current_index_lag", "log_index", "max_index_lag")
_LOGGED: Final = evolver(PendingAckState, *_LOG_FIELDS)
_ACK_FIELDS: Final = ("individual_ack_of_transaction", "individual_ack_positions", "txn_order")
_LOGGED_ACK: Final = evolver(PendingAckState, *_LOG_FIELDS, *_ACK_FIELDS)
_SET_ACKS: Final = evolver(PendingAckState, *_ACK_FIELDS)
_LOGGED_LOW_WATER_MARKS: Final = evolver(PendingAckState, *_LOG_FIELDS, "low_water_marks")
_FORGET_COMMITTED: Final = evolver(
    PendingAckState, "cursor", "individual_ack_positions", "individual_ack_of_transaction", "txn_order"
)
# An ack of an entry the state holds: its batch size was checked when the ack came in (PA-2).
_HELD_ACK: Final = unchecked(AckedPosition)


@dataclass(frozen=True, slots=True)
class PendingAckView:
    """The part of the state replay must reproduce (PA-19): cursor and pending-ack maps (PA-20: not
    the low watermarks, the queue, the log index, or the order of the txns)."""

    cursor: CursorView
    individual_ack_of_transaction: immutables.Map[TxnID, immutables.Map[Position, AckBits]]
    individual_ack_positions: immutables.Map[Position, AckBits]
    cumulative_ack: CumulativeSlot | None


def pending_ack_view(state: PendingAckState) -> PendingAckView:
    return PendingAckView(
        state.cursor,
        state.individual_ack_of_transaction,
        state.individual_ack_positions,
        state.cumulative_ack,
    )


def log_index_lag_backoff(min_lag: int, max_lag: int, exponent: int, index_count: int) -> int:
    """``LogIndexLagBackoff.next``: minLag for an empty index, then min(maxLag, minLag * n^exponent) (PA-16)."""
    if min_lag <= 0:
        raise ValueError("min lag must be > 0")
    if max_lag < min_lag:
        raise ValueError("maxLag should be >= minLag")
    if exponent <= 0:
        raise ValueError("exponent must be > 0")
    if index_count <= 0:
        return min_lag
    grown: int = min_lag * index_count**exponent
    return min(max_lag, grown)


def _next_lag(config: Config, index_count: int) -> int:
    return log_index_lag_backoff(
        config.transaction_pending_ack_log_index_min_lag, _LOG_INDEX_MAX_LAG, _LOG_INDEX_EXPONENT, index_count
    )


def initial(
    config: Config,
    *,
    sub_type: SubType = SubType.Exclusive,
    cursor: CursorView | None = None,
) -> PendingAckState:
    """A subscription whose pending-ack log does not exist yet: the handle is None (lazy, PA-17)."""
    return PendingAckState(
        config=config,
        sub_type=sub_type,
        # normal, as the steps keep it (PA-3): a cursor given from outside may not be yet
        cursor=_normalize_cursor(cursor) if cursor is not None else CursorView(),
        handle_state=HandleState.NONE,
        individual_ack_of_transaction=immutables.Map(),
        txn_order=(),
        individual_ack_positions=immutables.Map(),
        cumulative_ack=None,
        low_water_marks=immutables.Map(),
        queued=(),
        init_attempts=0,
        next_record_id=0,
        log_index=(),
        max_ack_position=None,
        current_index_lag=0,
        max_index_lag=_next_lag(config, 0),
        log_mark_delete=-1,
    )


# --------------------------------------------------------------------------------------------
# Observers
# --------------------------------------------------------------------------------------------


def message_state(state: PendingAckState, position: Position, batch_index: int | None = None) -> MessageState:
    """PIP-31's state of a message, or of one batch index of it (PA-1).

    DELETED if the cursor deleted it; PENDING_ACK if a txn holds it individually or it lies within
    the cumulative pending ack; otherwise PENDING.  Without ``batch_index`` a batch entry counts
    as DELETED only when deleted whole, and as PENDING_ACK when a txn holds any of its indexes.
    """
    if batch_index is not None and batch_index < 0:
        raise ValueError(f"batch_index must be >= 0, got {batch_index}")
    deleted = state.cursor.deleted_bits(position)
    if deleted is None or (batch_index is not None and deleted >> batch_index & 1):
        return MessageState.DELETED
    held = state.individual_ack_positions.get(position)
    if held is not None and (batch_index is None or held.acked is None or held.acked >> batch_index & 1):
        return MessageState.PENDING_ACK
    slot = state.cumulative_ack
    if slot is not None:
        if position < slot.position:
            return MessageState.PENDING_ACK
        if position == slot.position and (batch_index is None or slot.acked is None or slot.acked >> batch_index & 1):
            return MessageState.PENDING_ACK
    return MessageState.PENDING


def check_position_in_pending_ack_state(
    state: PendingAckState, position: Position, batch_index: int | None = None
) -> PositionInPendingAck:
    """The admin ``checkPositionInPendingAckState`` (PA-21); it looks at individual acks only."""
    if state.handle_state is not HandleState.READY:
        return PositionInPendingAck.PendingAckNotReady
    if position <= state.cursor.mark_delete_position:
        return PositionInPendingAck.MarkDelete
    held = state.individual_ack_positions.get(position)
    if held is None:
        return PositionInPendingAck.NotInPendingAck
    if batch_index is None or held.acked is None:
        return PositionInPendingAck.PendingAck
    if batch_index >= held.batch_size:
        return PositionInPendingAck.InvalidPosition
    return PositionInPendingAck.PendingAck if held.acked >> batch_index & 1 else PositionInPendingAck.NotInPendingAck


def txn_positions(state: PendingAckState, txn_id: TxnID) -> tuple[tuple[Position, int | None], ...]:
    """The entries ``txn_id`` holds individually, ascending, with acked bits (None = whole entry)."""
    held = state.individual_ack_of_transaction.get(txn_id, immutables.Map())
    return tuple((p, held[p].acked) for p in sorted(held))


# --------------------------------------------------------------------------------------------
# Cursor (what the pending-ack rules need of ManagedCursor)
# --------------------------------------------------------------------------------------------


def _normalize_cursor(cursor: CursorView, *, was_normal: bool = False) -> CursorView:
    """Fold contiguous individual deletes into the mark-delete position, within its ledger (PA-3).

    ``was_normal``: the cursor was normal before entries were individually deleted, so the fold
    is all there is to do (nothing else lies at or below the mark-delete position)."""
    md = cursor.mark_delete_position
    deleted = cursor.individually_deleted
    folded = []
    following = md.next()
    while following in deleted:
        md = following
        folded.append(md)
        following = md.next()
    if was_normal:
        return CursorView(md, deleted.difference(folded), cursor.batch_deleted) if folded else cursor
    kept_deleted = frozenset(p for p in deleted if p > md)
    batch = cursor.batch_deleted
    for p in [p for p in batch if p <= md or p in kept_deleted]:
        batch = batch.delete(p)
    return CursorView(md, kept_deleted, batch)


def _cursor_delete(cursor: CursorView, position: Position, batch_size: int, acked: int | None) -> CursorView:
    """Individually acknowledge ``acked`` bits (None: the whole entry) of ``position``; deletions only grow (PA-3)."""
    return _cursor_delete_distinct(cursor, ((position, batch_size, acked),))


def _cursor_delete_distinct(cursor: CursorView, deletions: Iterable[tuple[Position, int, int | None]]) -> CursorView:
    """Individually acknowledge, for each ``(position, batch_size, acked)`` of distinct positions,
    the ``acked`` bits (None: the whole entry) of ``position``, as one delete after the other
    would; deletions only grow (PA-3)."""
    batch = cursor.batch_deleted
    md = cursor.mark_delete_position
    before = cursor.individually_deleted
    whole: list[Position] = []
    for position, batch_size, acked in deletions:
        if position <= md or position in before:  # already deleted (CursorView.is_deleted)
            continue
        if acked is not None:
            known = batch.get(position)
            size = batch_size
            merged = acked
            if known is not None:
                size = max(batch_size, known.batch_size)
                merged |= known.acked or 0
            if merged & _full(size) != _full(size):
                if merged != 0:
                    batch = batch.set(position, AckBits(size, merged))
                continue
        if position in batch:
            batch = batch.delete(position)
        whole.append(position)
    if not whole:
        return cursor if batch is cursor.batch_deleted else evolve(cursor, batch_deleted=batch)
    # The steps keep the cursor normal, so what folds into the mark-delete position is the run
    # of deleted entries right after it, in its ledger; entry ids are walked as ints, and a
    # position is made for the entries the cursor held deleted before only when it holds any.
    ledger, entry = md.ledger_id, md.entry_id
    new_ids: dict[int, Position] = {}
    for p in whole:
        if p.ledger_id == ledger:
            new_ids[p.entry_id] = p
    while entry + 1 in new_ids or (before and Position(ledger, entry + 1) in before):
        entry += 1
    if entry == md.entry_id:
        return CursorView(md, before.union(whole), batch)
    # what is left above the new mark-delete position: nothing at or below it in its ledger
    # (an entry of ``whole`` there lies above the old one, or the cursor held it deleted)
    kept: list[Position] = []
    for p in whole:
        if p.ledger_id != ledger or p.entry_id > entry:
            kept.append(p)
    if before:
        kept += [p for p in before if p.ledger_id != ledger or p.entry_id > entry]
    # the entry the mark-delete position moves to is a deleted one: its position is reused
    moved = new_ids.get(entry) or Position(ledger, entry)
    return CursorView(moved, frozenset(kept), batch)


def _cursor_mark_delete(cursor: CursorView, position: Position, batch_size: int, acked: int | None) -> CursorView:
    """Cumulatively acknowledge up to ``position``; with an ack set, up to its previous entry plus
    those bits.  The mark-delete position never moves back (PA-3, PA-12)."""
    if acked is None or acked & _full(batch_size) == _full(batch_size):
        target = position
    else:
        target = Position(position.ledger_id, position.entry_id - 1)
    md = max(cursor.mark_delete_position, target)
    moved = _normalize_cursor(CursorView(md, cursor.individually_deleted, cursor.batch_deleted))
    if target != position:
        moved = _cursor_delete(moved, position, batch_size, acked)
    return moved


def _strip_deleted(
    state: PendingAckState, touched: Iterable[Position] | None = None, *, mark_delete_moved: bool = False
) -> PendingAckState:
    """Cursor wins: drop from the pending maps every entry and bit the cursor has deleted (PA-3, PA-11).

    Also drops the cumulative slot once the mark-delete position reached it, and forgets a txn
    whose individual acks the cursor has all taken (replay could not rebuild it once the log
    holding its acks is trimmed, PA-16).

    A live step passes the entries its cursor change deleted (``touched``), and whether a
    cumulative ack moved the mark-delete position (then every held entry at or below it is looked
    at): the cursor won over every other entry when it deleted it, so only these can hold
    something the cursor deleted.  Without ``touched`` (replay, over a cursor read from outside)
    every held entry is looked at.
    """
    cursor = state.cursor
    combined = state.individual_ack_positions
    if touched is None:
        candidates = set(combined.keys())
    else:
        candidates = {p for p in touched if p in combined}
        if mark_delete_moved:
            md = cursor.mark_delete_position
            candidates.update(p for p in combined if p <= md)
    txns = state.individual_ack_of_transaction
    positions = combined
    if candidates:
        for txn, held in state.individual_ack_of_transaction.items():
            new_held = _strip_map(cursor, held, candidates)
            if new_held is not held:
                txns = txns.set(txn, new_held) if new_held else txns.delete(txn)
        positions = _strip_map(cursor, combined, candidates)
    slot = state.cumulative_ack
    if slot is not None and slot.position <= cursor.mark_delete_position:
        slot = None
    if (
        txns is state.individual_ack_of_transaction
        and positions is state.individual_ack_positions
        and slot is state.cumulative_ack
    ):
        return state
    order = state.txn_order if len(txns) == len(state.txn_order) else tuple(t for t in state.txn_order if t in txns)
    return evolve(
        state,
        individual_ack_of_transaction=txns,
        individual_ack_positions=positions,
        cumulative_ack=slot,
        txn_order=order,
    )


def _strip_map(
    cursor: CursorView, held: immutables.Map[Position, AckBits], candidates: Iterable[Position]
) -> immutables.Map[Position, AckBits]:
    out = held
    for position in candidates:
        bits = held.get(position)
        if bits is None:
            continue
        deleted = cursor.deleted_bits(position)
        if deleted is None:
            out = out.delete(position)
        elif deleted and bits.acked is not None and bits.acked & deleted:
            rest = bits.acked & ~deleted
            out = out.set(position, AckBits(bits.batch_size, rest)) if rest else out.delete(position)
    return out


# --------------------------------------------------------------------------------------------
# The log: append, sparse index, trimming
# --------------------------------------------------------------------------------------------


def _append(
    state: PendingAckState, record: PendingAckRecord, make: Callable[..., PendingAckState] = _LOGGED, *more: Any
) -> tuple[PendingAckState, list[Effect]]:
    """Append one record and do the index bookkeeping of its callback (PA-15, PA-16); ``make`` is
    the update of the log's fields followed by fields the step sets besides (values ``more``, which
    the bookkeeping does not read), made in the same update."""
    record_id = state.next_record_id
    effects: list[Effect] = [AppendPendingAckRecord(record_id, record)]
    state, trim = _index_record(state, record, record_id, record_id + 1, make, *more)
    if trim is not None:
        effects.append(trim)
    return state, effects


def _index_record(
    state: PendingAckState,
    record: PendingAckRecord,
    record_id: int,
    next_record_id: int,
    make: Callable[..., PendingAckState] = _LOGGED,
    *more: Any,
) -> tuple[PendingAckState, TrimPendingAckLog | None]:
    """MLPendingAckStore's sparse index: every ``maxIndexLag`` records, remember (max acked
    position -> record id); then pop what the cursor's mark-delete covers and trim the log (PA-16).
    ``next_record_id`` is the id counter after this record; ``make`` updates the log's fields and
    the fields after them (values ``more``) in one update, and must leave the cursor alone (the
    trim reads it)."""
    max_ack = state.max_ack_position
    if record.op is _OP_ACK:
        for acked in record.positions:
            if max_ack is None or acked.position > max_ack:
                max_ack = acked.position
    lag = state.current_index_lag + 1
    index = state.log_index
    max_lag = state.max_index_lag
    if max_ack is not None and lag >= max_lag:
        index = (*tuple(e for e in index if e[0] < max_ack), (max_ack, record_id))
        lag = 0
        max_lag = _next_lag(state.config, len(index))
    state = make(state, next_record_id, max_ack, lag, index, max_lag, *more)
    return _clear_useless_log_data(state)


def _clear_useless_log_data(state: PendingAckState) -> tuple[PendingAckState, TrimPendingAckLog | None]:
    # The index is ascending by position (an entry is added above every one it keeps), so what
    # the mark-delete position covers is a prefix of it.
    index = state.log_index
    md = state.cursor.mark_delete_position
    if not index or index[0][0] > md:
        return state, None
    popped = bisect.bisect_right(index, md, key=_index_position)
    kept = index[popped:]
    last = index[popped - 1][1]
    trimmed = evolve(
        state,
        log_index=kept,
        log_mark_delete=max(state.log_mark_delete, last),
        max_index_lag=_next_lag(state.config, len(kept)),
    )
    return trimmed, TrimPendingAckLog(last)


_first: Final = operator.itemgetter(0)


def _index_position(entry: tuple[Position, int]) -> Position:
    return entry[0]


# --------------------------------------------------------------------------------------------
# The rules, shared by the live path and replay
# --------------------------------------------------------------------------------------------


# An accepted individual ack: each entry it holds, with its batch size and the acked bits (None:
# the whole entry) that the cursor has not deleted.
_Accepted = list[tuple[Position, int, int | None]]


def _individual_checked(
    state: PendingAckState, positions: Sequence[AckedPosition], *, replay: bool
) -> DomainError | _Accepted:
    """The conflict checks of an individual txn ack, in request order (PA-5, PA-6, PA-7), and what
    an accepted one holds (PA-8).

    Live, an entry the cursor deleted is a conflict.  At replay such an entry was deleted after
    the record was accepted (only accepted records are logged, PA-4), so it is skipped, and so are
    the batch indexes the cursor deleted since (PA-19).
    """
    cursor = state.cursor
    combined = state.individual_ack_positions
    accepted: _Accepted = []
    for acked in positions:
        bits = acked.acked
        position = acked.position
        if bits == 0:
            return NotAllowed(f"ack set of {position} acknowledges no batch index")
        deleted = cursor.deleted_bits(position)
        if deleted is None:
            if replay:
                continue
            return TransactionConflict(f"{position} is already acked before (deleted on the cursor)")
        if bits is not None and bits & deleted:
            if replay:
                bits &= ~deleted
                if bits == 0:
                    continue
            else:
                return TransactionConflict(f"batch indexes of {position} are already acked before")
        held = combined.get(position)
        if held is not None and held.overlaps(bits):
            return TransactionConflict(f"{position} is in pending ack status")
        accepted.append((position, acked.batch_size, bits))
    return accepted


def _apply_individual(state: PendingAckState, txn: TxnID, accepted: _Accepted) -> PendingAckState:
    """Record an accepted individual txn ack in both maps (PA-8)."""
    return _SET_ACKS(state, *_individual_changes(state, txn, accepted)) if accepted else state


_AckChanges = tuple[
    immutables.Map[TxnID, immutables.Map[Position, AckBits]], immutables.Map[Position, AckBits], tuple[TxnID, ...]
]


def _individual_changes(state: PendingAckState, txn: TxnID, accepted: _Accepted) -> _AckChanges:
    """The new values of the fields :func:`_apply_individual` changes (``_ACK_FIELDS``), for a step
    that makes them together with others; ``accepted`` is not empty (PA-8)."""
    txns = state.individual_ack_of_transaction
    known = txns.get(txn)
    held = _NO_ACKS if known is None else known
    combined = state.individual_ack_positions
    for position, batch_size, bits in accepted:
        mine = held.get(position)
        theirs = combined.get(position)
        ack = _union(mine, batch_size, bits)
        held = held.set(position, ack)
        # an entry no txn held yet gets the same bits in both maps
        combined = combined.set(position, ack if theirs is None and mine is None else _union(theirs, batch_size, bits))
    order = (*state.txn_order, txn) if known is None else state.txn_order
    return txns.set(txn, held), combined, order


def _union(existing: AckBits | None, batch_size: int, bits: int | None) -> AckBits:
    # Pulsar ANDs ack sets (a cleared bit is acked) and keeps the latest batch size.
    if existing is None:
        return AckBits(batch_size, bits)
    if existing.acked is None or bits is None:
        return AckBits(batch_size, WHOLE)
    return AckBits(batch_size, existing.acked | bits)


def _cum_key(position: Position, batch_size: int, acked: int | None) -> tuple[int, int, int]:
    """``compareToWithAckSet``: same entry compares the first index not acked (PA-9)."""
    if acked is None:
        first = _ALL_ACKED_KEY
    else:
        missing = _full(batch_size) & ~acked
        first = (missing & -missing).bit_length() - 1 if missing else _ALL_ACKED_KEY
    return (position.ledger_id, position.entry_id, first)


def _cumulative_conflict(state: PendingAckState, txn: TxnID, acked: AckedPosition) -> DomainError | None:
    """A cumulative txn ack conflicts at or below the mark-delete position, with another txn's
    slot, or at or below the txn's own earlier cumulative ack (PA-9; an empty ack set, PA-7)."""
    if acked.acked == 0:
        return NotAllowed(f"ack set of {acked.position} acknowledges no batch index")
    if acked.position <= state.cursor.mark_delete_position:
        return TransactionConflict(f"{acked.position} is at or below the mark-delete position")
    slot = state.cumulative_ack
    if slot is not None:
        if slot.txn_id != txn:
            return TransactionConflict(f"the cumulative pending ack is held by {slot.txn_id}")
        if _cum_key(acked.position, acked.batch_size, acked.acked) <= _cum_key(
            slot.position, slot.batch_size, slot.acked
        ):
            return TransactionConflict(f"{acked.position} is not above the txn's cumulative ack {slot.position}")
    return None


def _commit_individual(state: PendingAckState, txn: TxnID) -> tuple[PendingAckState, list[Effect]]:
    """Acknowledge the txn's individual acks on the cursor and forget the txn (PA-12)."""
    held = state.individual_ack_of_transaction.get(txn)
    if held is None:
        return state, []
    acks: list[AckedPosition] = []
    deletions: list[tuple[Position, int, int | None]] = []
    combined = state.individual_ack_positions
    for position, bits in sorted(held.items(), key=_first):
        deletions.append((position, bits.batch_size, bits.acked))
        acks.append(_wire(position, bits.batch_size, bits.acked))
        combined = _release(combined, position, bits.acked)
    cursor = _cursor_delete_distinct(state.cursor, deletions)
    state = _FORGET_COMMITTED(state, cursor, combined, *_forgotten(state, txn))
    # only an entry another txn still holds bits of, or the cumulative slot, can hold something
    # the cursor has now deleted
    shared = [position for position in held if position in combined]
    if shared or state.cumulative_ack is not None:
        state = _strip_deleted(state, shared)
    return state, [CursorIndividualAck(tuple(acks))] if acks else []


def _abort_individual(state: PendingAckState, txn: TxnID) -> tuple[PendingAckState, list[Effect]]:
    """Return the txn's individual acks to PENDING and redeliver them (PA-13)."""
    held = state.individual_ack_of_transaction.get(txn)
    if held is None:
        return state, []
    combined = state.individual_ack_positions
    for position, bits in held.items():
        combined = _release(combined, position, bits.acked)
    state = _forget(state, txn, individual_ack_positions=combined)
    redeliver = tuple(sorted(held))
    return state, [RedeliverUnacknowledgedMessages(redeliver)] if redeliver else []


def _release(
    combined: immutables.Map[Position, AckBits], position: Position, acked: int | None
) -> immutables.Map[Position, AckBits]:
    existing = combined.get(position)
    if existing is None:
        return combined
    if acked is None or existing.acked is None:
        return combined.delete(position)
    rest = existing.acked & ~acked
    return combined.set(position, AckBits(existing.batch_size, rest)) if rest else combined.delete(position)


def _without(order: tuple[TxnID, ...], txn: TxnID) -> tuple[TxnID, ...]:
    if txn not in order:
        return order
    at = order.index(txn)
    return order[:at] + order[at + 1 :]


def _forget(state: PendingAckState, txn: TxnID, **changes: Any) -> PendingAckState:
    """The state without ``txn``'s individual acks, with ``changes`` made at the same time."""
    txns, order = _forgotten(state, txn)
    return evolve(state, **changes, individual_ack_of_transaction=txns, txn_order=order)


def _forgotten(
    state: PendingAckState, txn: TxnID
) -> tuple[immutables.Map[TxnID, immutables.Map[Position, AckBits]], tuple[TxnID, ...]]:
    """``individual_ack_of_transaction`` and ``txn_order`` without ``txn``."""
    return state.individual_ack_of_transaction.delete(txn), _without(state.txn_order, txn)


def _wire(position: Position, batch_size: int, acked: int | None) -> AckedPosition:
    if acked is None:
        return _HELD_ACK(position, None, batch_size)
    return _HELD_ACK(position, bits_to_words(_full(batch_size) & ~acked), batch_size)


def _commit_cumulative(state: PendingAckState) -> tuple[PendingAckState, list[Effect]]:
    slot = state.cumulative_ack
    assert slot is not None
    cursor = _cursor_mark_delete(state.cursor, slot.position, slot.batch_size, slot.acked)
    state = _strip_deleted(evolve(state, cursor=cursor, cumulative_ack=None), (slot.position,), mark_delete_moved=True)
    return state, [CursorCumulativeAck(_wire(slot.position, slot.batch_size, slot.acked))]


# --------------------------------------------------------------------------------------------
# Live commands
# --------------------------------------------------------------------------------------------


def _individual_ack(state: PendingAckState, cmd: IndividualAck) -> Step:
    """Individual txn ack: check every position first; a conflict fails the whole request and
    writes nothing; an accepted request is logged, then applied (PA-4 .. PA-8)."""
    accepted = _individual_checked(state, cmd.positions, replay=False)
    if isinstance(accepted, DomainError):
        return state, Err(accepted)
    record = PendingAckRecord(_OP_ACK, _INDIVIDUAL, cmd.txn_id, cmd.positions)
    # logged, then applied: the two maps change in the same update as the log's bookkeeping
    if accepted:
        state, effects = _append(state, record, _LOGGED_ACK, *_individual_changes(state, cmd.txn_id, accepted))
    else:
        state, effects = _append(state, record)
    return state, Ok(None, tuple(effects))


def _cumulative_ack(state: PendingAckState, cmd: CumulativeAck) -> Step:
    """Cumulative txn ack: one owner of the slot, strictly advancing (PA-9, PA-10)."""
    acked = cmd.positions[0]
    error = _cumulative_conflict(state, cmd.txn_id, acked)
    if error is not None:
        return state, Err(error)
    record = PendingAckRecord(_OP_ACK, _CUMULATIVE, cmd.txn_id, cmd.positions)
    state, effects = _append(state, record)
    slot = CumulativeSlot(cmd.txn_id, acked.position, acked.batch_size, acked.acked)
    return evolve(state, cumulative_ack=slot), Ok(None, tuple(effects))


def _end_txn(state: PendingAckState, txn: TxnID, lwm: int, commit: bool) -> tuple[PendingAckState, list[Effect]]:
    """Commit or abort on the subscription: the cumulative part, then the individual part (PA-12 .. PA-14)."""
    op = _OP_COMMIT if commit else _OP_ABORT
    effects: list[Effect] = []
    slot = state.cumulative_ack
    if slot is not None and (slot.txn_id == txn or not commit):
        # Pulsar logs ABORT/Cumulative whenever a slot exists; it clears the slot only for its owner.
        state, more = _append(state, PendingAckRecord(op, _CUMULATIVE, txn))
        effects += more
        if slot.txn_id == txn:
            if commit:
                state, more = _commit_cumulative(state)
                effects += more
            else:
                state = evolve(state, cumulative_ack=None)
    has_individual = txn in state.individual_ack_of_transaction
    if has_individual or (slot is None and (commit or state.individual_ack_of_transaction)):
        record = PendingAckRecord(op, _INDIVIDUAL, txn)
        if not has_individual:
            state, more = _append(state, record)
            effects += more
            return state, effects
        # The raised watermark (PA-14) goes in with the append: neither the log's bookkeeping nor
        # the commit or abort reads it.
        state, more = _append(state, record, _LOGGED_LOW_WATER_MARKS, _raised_low_water_marks(state, txn, lwm))
        effects += more
        state, more = _commit_individual(state, txn) if commit else _abort_individual(state, txn)
        effects += more
        state, more = _abort_below_low_water_marks(state)
        effects += more
    return state, effects


def _raised_low_water_marks(state: PendingAckState, txn: TxnID, lwm: int) -> immutables.Map[int, int]:
    """The low watermarks with ``txn``'s coordinator's raised to ``lwm`` (PA-14)."""
    tc = txn.most_sig_bits
    if lwm > state.low_water_marks.get(tc, -1):
        return state.low_water_marks.set(tc, lwm)
    return state.low_water_marks


def _abort_below_low_water_marks(state: PendingAckState) -> tuple[PendingAckState, list[Effect]]:
    """Abort the first txn while it is at or below the watermark of its coordinator (PA-14)."""
    effects: list[Effect] = []
    while state.txn_order:
        first = state.txn_order[0]
        if first.least_sig_bits > state.low_water_marks.get(first.most_sig_bits, -1):
            break
        state, more = _end_txn(state, first, -1, commit=False)
        effects += more
    return state, effects


def _normal_ack(state: PendingAckState, cmd: NormalAck) -> Step:
    """A non-transactional ack is applied to the cursor; the cursor wins over pending acks (PA-10, PA-11)."""
    cursor = state.cursor
    if cmd.ack_type is _CUMULATIVE:
        ignored = _ignored_cumulative(state, cmd.positions)
        if ignored is not None:
            return state, Ok(ignored)
        acked = cmd.positions[0]
        cursor = _cursor_mark_delete(cursor, acked.position, acked.batch_size, acked.acked)
        effect: Effect = CursorCumulativeAck(acked)
    else:
        for acked in cmd.positions:
            if acked.acked != 0:
                cursor = _cursor_delete(cursor, acked.position, acked.batch_size, acked.acked)
        effect = CursorIndividualAck(cmd.positions)
    touched = [acked.position for acked in cmd.positions]
    cumulative = cmd.ack_type is _CUMULATIVE
    return _strip_deleted(evolve(state, cursor=cursor), touched, mark_delete_moved=cumulative), Ok(None, (effect,))


_VIEW_AHEAD: Final = "the view's mark-delete position is at or past it"


def _follow_cursor(state: PendingAckState, cmd: FollowCursor) -> Step:
    """PA-25: the view takes the durable cursor's mark-delete position when it is past its own
    (the cursor folded contiguous deletes across a ledger boundary); what lies at or below it leaves
    the view's deletes and the pending maps (PA-11).  Nothing is logged and no cursor effect is
    emitted: the cursor moved already.  A position at or below the view's changes nothing (PA-3)
    and says so (:class:`Ignored`)."""
    cursor = state.cursor
    if cmd.mark_delete_position <= cursor.mark_delete_position:
        # said, not silent: the broker asks only when the durable cursor is past the view, so a
        # history's follow that the view had no need of shows a view that fell behind or ran ahead
        return state, Ok(Ignored(_VIEW_AHEAD))
    moved = _normalize_cursor(CursorView(cmd.mark_delete_position, cursor.individually_deleted, cursor.batch_deleted))
    return _strip_deleted(evolve(state, cursor=moved), (), mark_delete_moved=True), Ok(None)


def _ignored_cumulative(state: PendingAckState, positions: Sequence[AckedPosition]) -> Ignored | None:
    """The Consumer layer drops cumulative acks on Shared/Key_Shared subscriptions and cumulative
    acks with other than one message id, answering success (PA-10)."""
    if state.sub_type in (SubType.Shared, SubType.Key_Shared):
        return Ignored(f"cumulative ack on a {state.sub_type.name} subscription")
    if len(positions) != 1:
        return Ignored("cumulative ack with more than one message id")
    return None


def _run_txn_command(state: PendingAckState, cmd: TxnCommand) -> Step:
    if isinstance(cmd, IndividualAck):
        return _individual_ack(state, cmd)
    if isinstance(cmd, CumulativeAck):
        return _cumulative_ack(state, cmd)
    state, effects = _end_txn(state, cmd.txn_id, cmd.low_water_mark, commit=isinstance(cmd, CommitTxn))
    return state, Ok(None, tuple(effects))


def step(state: PendingAckState, command: Command) -> Step:
    """Apply one command (PA-1 .. PA-18, PA-22, PA-25)."""
    match command:
        case IndividualAck() | CommitTxn() | AbortTxn():
            return _txn_command(state, command)
        case NormalAck():
            return _normal_ack(state, command)
        case FollowCursor():
            return _follow_cursor(state, command)
        case CumulativeAck() if ignored := _ignored_cumulative(state, command.positions):
            return state, Ok(ignored)
        case CumulativeAck():
            return _txn_command(state, command)
        case ResetCursor():
            return _reset_cursor(state, command)
        case PendingAckInitComplete():
            return _init_complete(state)
        case PendingAckInitFailed():
            return _init_failed(state, command.retryable)
        case RetryPendingAckInit():
            return _retry_init(state)
        case ClosePendingAckHandle():
            return _close(state)
        case ReloadSubscription():
            reloaded = recover(
                state.config,
                ((r.record_id, r.record) for r in command.records),
                cursor=state.cursor,
                sub_type=state.sub_type,
                log_mark_delete=state.log_mark_delete,
                next_record_id=state.next_record_id,
            )
            return reloaded, Ok(None)
    raise TypeError(f"not a pending-ack command: {command!r}")


def _reset_cursor(state: PendingAckState, cmd: ResetCursor) -> Step:
    """Seek (PA-22): refused while a txn holds a pending ack here or txn requests wait at the
    handle; otherwise the cursor restarts after the new mark-delete position with nothing deleted
    above it, and the whole pending-ack log is trimmed: every record in it belongs to a txn that
    has ended, and replaying one over the reset cursor would delete again what the seek asked
    to have delivered again (PA-19 stays exact)."""
    if state.handle_state is HandleState.ERROR:
        return state, Err(ServiceUnitNotReady(_NOT_REPLAYED))
    if state.handle_state is HandleState.CLOSED:
        return state, Err(ServiceUnitNotReady(_CLOSED))
    if state.queued or state.handle_state is HandleState.INITIALIZING:
        return state, Err(
            NotAllowed("cannot reset the cursor while transactional requests wait for the pending-ack handle")
        )
    holders = [*state.txn_order]
    if state.cumulative_ack is not None and state.cumulative_ack.txn_id not in holders:
        holders.append(state.cumulative_ack.txn_id)
    if holders:
        names = ", ".join(str(t) for t in holders)
        return state, Err(NotAllowed(f"cannot reset the cursor: transactions {names} hold pending acks on it"))
    read = cmd.read_position
    if read is not None and read.position <= cmd.mark_delete_position:
        return state, Err(NotAllowed(f"read position {read.position} is not after {cmd.mark_delete_position}"))
    batch = _EMPTY_BATCH
    if read is not None and read.acked is not None and 0 < read.acked & _full(read.batch_size) < _full(read.batch_size):
        batch = batch.set(read.position, AckBits(read.batch_size, read.acked & _full(read.batch_size)))
    effects: list[Effect] = []
    last = state.next_record_id - 1
    if last > state.log_mark_delete:
        effects.append(TrimPendingAckLog(last))
    effects.append(ResetSubscriptionCursor(cmd.mark_delete_position, read))
    state = evolve(
        state,
        cursor=CursorView(cmd.mark_delete_position, frozenset(), batch),
        log_index=(),
        max_ack_position=None,
        current_index_lag=0,
        max_index_lag=_next_lag(state.config, 0),
        log_mark_delete=max(state.log_mark_delete, last),
    )
    return state, Ok(None, tuple(effects))


# --------------------------------------------------------------------------------------------
# The handle's lifecycle (PA-17)
# --------------------------------------------------------------------------------------------

_NOT_REPLAYED: Final = "PendingAckHandle not replay error!"
_CLOSED: Final = "PendingAckHandle have been closed!"


def _txn_command(state: PendingAckState, cmd: TxnCommand) -> Step:
    """Txn ops run when Ready, queue while None/Initializing (the first one starts the lazy
    initialisation) and fail when Error or Closed (PA-17)."""
    handle = state.handle_state
    if handle is _READY:
        return _run_txn_command(state, cmd)
    if handle is HandleState.ERROR:
        return state, Err(ServiceUnitNotReady(_NOT_REPLAYED))
    if handle is HandleState.CLOSED:
        return state, Err(ServiceUnitNotReady(_CLOSED))
    queued = (*state.queued, cmd)
    if handle is HandleState.NONE and state.init_attempts == 0:
        state = evolve(state, handle_state=HandleState.INITIALIZING, queued=queued)
        return state, Ok(Queued(len(queued)), (InitPendingAckStore(),))
    return evolve(state, queued=queued), Ok(Queued(len(queued)))


def _init_complete(state: PendingAckState) -> Step:
    if state.handle_state is not HandleState.INITIALIZING:
        return state, Err(NotAllowed(f"pending-ack init completed while {state.handle_state.value}"))
    queued = state.queued
    state = evolve(state, handle_state=HandleState.READY, queued=(), init_attempts=0)
    outcomes: list[Ok[Any] | Err] = []
    effects: list[Effect] = []
    for cmd in queued:
        state, outcome = _run_txn_command(state, cmd)
        outcomes.append(outcome)
        effects.extend(outcome.effects)
    return state, Ok(tuple(_outcome_value(o) for o in outcomes), tuple(effects))


def _outcome_value(outcome: Ok[Any] | Err) -> Ok[Any] | Err:
    # The effects are reported once, on the step; the per-request outcomes carry only the verdict.
    return Ok(outcome.value) if isinstance(outcome, Ok) else Err(outcome.error)


def _init_failed(state: PendingAckState, retryable: bool) -> Step:
    if state.handle_state is not HandleState.INITIALIZING:
        return state, Err(NotAllowed(f"pending-ack init failed while {state.handle_state.value}"))
    if retryable:
        attempt = state.init_attempts + 1
        delay = PENDING_ACK_INIT_BACKOFF_INITIAL_MS << (attempt - 1)
        state = evolve(state, handle_state=HandleState.NONE, init_attempts=attempt)
        return state, Ok(None, (ScheduleInitRetry(attempt, delay),))
    failed = tuple(Err(ServiceUnitNotReady(_NOT_REPLAYED)) for _ in state.queued)
    return evolve(state, handle_state=HandleState.ERROR, queued=(), init_attempts=0), Ok(failed)


def _retry_init(state: PendingAckState) -> Step:
    if state.handle_state is not HandleState.NONE or state.init_attempts == 0:
        return state, Err(NotAllowed(f"no pending-ack init retry is due while {state.handle_state.value}"))
    return evolve(state, handle_state=HandleState.INITIALIZING), Ok(None, (InitPendingAckStore(),))


def _close(state: PendingAckState) -> Step:
    failed = tuple(Err(ServiceUnitNotReady(_CLOSED)) for _ in state.queued)
    return evolve(state, handle_state=HandleState.CLOSED, queued=(), init_attempts=0), Ok(failed)


# --------------------------------------------------------------------------------------------
# Replay (PA-18, PA-19)
# --------------------------------------------------------------------------------------------


def replay_record(state: PendingAckState, record_id: int, record: PendingAckRecord) -> PendingAckState:
    """Apply one logged record during replay: no redelivery, no low-watermark handling (PA-18)."""
    txn = record.txn_id
    if record.op is PendingAckOp.ACK and record.ack_type is AckType.INDIVIDUAL:
        accepted = _individual_checked(state, record.positions, replay=True)
        if not isinstance(accepted, DomainError):
            state = _apply_individual(state, txn, accepted)
    elif record.op is PendingAckOp.ACK:
        if len(record.positions) == 1:
            acked = record.positions[0]
            slot = state.cumulative_ack
            # The mark-delete position is not re-checked: it may have passed the slot since; the
            # strip below drops the slot then, as the live path did (PA-19).
            if slot is None or (
                slot.txn_id == txn
                and _cum_key(acked.position, acked.batch_size, acked.acked)
                > _cum_key(slot.position, slot.batch_size, slot.acked)
            ):
                state = evolve(state, cumulative_ack=CumulativeSlot(txn, acked.position, acked.batch_size, acked.acked))
    elif record.ack_type is AckType.CUMULATIVE:
        slot = state.cumulative_ack
        if slot is not None and slot.txn_id == txn:
            state = (
                _commit_cumulative(state)[0] if record.op is PendingAckOp.COMMIT else evolve(state, cumulative_ack=None)
            )
    elif record.op is PendingAckOp.COMMIT:
        state = _commit_individual(state, txn)[0]
    else:
        state = _abort_individual(state, txn)[0]
    state = _strip_deleted(state)
    state, _trim = _index_record(state, record, record_id, max(state.next_record_id, record_id + 1))
    return state


def recover(
    config: Config,
    records: Iterable[tuple[int, PendingAckRecord]],
    *,
    cursor: CursorView,
    sub_type: SubType = SubType.Exclusive,
    log_mark_delete: int = -1,
    next_record_id: int | None = None,
    ready: bool = True,
) -> PendingAckState:
    """Replay the surviving pending-ack log over the subscription cursor as it is now (PA-18, PA-19, PA-20).

    ``records`` are ``(record_id, record)`` in log order, those above ``log_mark_delete``.  With
    ``ready=False`` the handle is left Initializing, so requests queue until
    :class:`PendingAckInitComplete` (a broker that reloads a subscription whose log exists).
    """
    state = evolve(
        initial(config, sub_type=sub_type, cursor=_normalize_cursor(cursor)),
        log_mark_delete=log_mark_delete,
        next_record_id=log_mark_delete + 1,
    )
    state = _strip_deleted(state)
    for record_id, record in records:
        if record_id <= log_mark_delete:
            continue
        state = replay_record(state, record_id, record)
    if next_record_id is not None:
        state = evolve(state, next_record_id=max(state.next_record_id, next_record_id))
    return evolve(state, handle_state=HandleState.READY if ready else HandleState.INITIALIZING)


def surviving_records(effects: Iterable[Effect]) -> list[tuple[int, PendingAckRecord]]:
    """The records a run of effects leaves in the log: appended and not trimmed (PA-16)."""
    appended: list[tuple[int, PendingAckRecord]] = []
    trimmed = -1
    for effect in effects:
        if isinstance(effect, AppendPendingAckRecord):
            appended.append((effect.record_id, effect.record))
        elif isinstance(effect, TrimPendingAckLog):
            trimmed = max(trimmed, effect.record_id)
    return [(i, r) for i, r in appended if i > trimmed]


# --------------------------------------------------------------------------------------------
# Vectors adapter
# --------------------------------------------------------------------------------------------


def _decode_init(config: Config, init: Mapping[str, Any]) -> PendingAckState:
    unknown = set(init) - {"sub_type", "mark_delete_position", "individually_deleted", "batch_deleted", "handle_state"}
    if unknown:
        raise KeyError(f"unknown init key(s) {', '.join(sorted(unknown))}")
    sub_type = from_json(init.get("sub_type", "Exclusive"), SubType, "$.init.sub_type")
    md = from_json(init.get("mark_delete_position", [0, -1]), Position, "$.init.mark_delete_position")
    deleted = from_json(init.get("individually_deleted", []), frozenset[Position], "$.init.individually_deleted")
    batch: immutables.Map[Position, AckBits] = immutables.Map()
    for acked in from_json(init.get("batch_deleted", []), tuple[AckedPosition, ...], "$.init.batch_deleted"):
        if acked.acked is not None:
            batch = batch.set(acked.position, AckBits(acked.batch_size, acked.acked))
    state = initial(config, sub_type=sub_type, cursor=_normalize_cursor(CursorView(md, deleted, batch)))
    handle = from_json(init.get("handle_state", "NONE"), HandleState, "$.init.handle_state")
    if handle is HandleState.READY:
        # A subscription whose (empty) store is already open.
        state = evolve(state, handle_state=HandleState.READY)
    elif handle is not HandleState.NONE:
        raise ValueError("init handle_state must be NONE or READY")
    return state


def _obs_message_state(state: PendingAckState, position: Position, batch_index: int | None = None) -> MessageState:
    return message_state(state, position, batch_index)


def _obs_check_position(
    state: PendingAckState, position: Position, batch_index: int | None = None
) -> PositionInPendingAck:
    return check_position_in_pending_ack_state(state, position, batch_index)


def _obs_txn_positions(state: PendingAckState, txn_id: TxnID) -> tuple[tuple[Position, tuple[int, ...] | None], ...]:
    held = state.individual_ack_of_transaction.get(txn_id, immutables.Map())
    return tuple((p, None if held[p].acked is None else tuple(_indexes(held[p].acked))) for p in sorted(held))


def _indexes(bits: int | None) -> list[int]:
    out = []
    i = 0
    b = bits or 0
    while b:
        if b & 1:
            out.append(i)
        b >>= 1
        i += 1
    return out


def _obs_cumulative(state: PendingAckState) -> tuple[TxnID, Position] | None:
    slot = state.cumulative_ack
    return None if slot is None else (slot.txn_id, slot.position)


@dataclass(frozen=True, slots=True)
class LogIndexView:
    """What ``MLPendingAckStore``'s tests observe of the sparse log index (PA-16)."""

    size: int
    max_index_lag: int
    current_index_lag: int
    keys: tuple[Position, ...]
    record_ids: tuple[int, ...]
    log_mark_delete: int


def _obs_log_index(state: PendingAckState) -> LogIndexView:
    return LogIndexView(
        len(state.log_index),
        state.max_index_lag,
        state.current_index_lag,
        tuple(p for p, _ in state.log_index),
        tuple(i for _, i in state.log_index),
        state.log_mark_delete,
    )


def _obs_batch_deleted(state: PendingAckState, position: Position) -> tuple[int, ...] | None:
    bits = state.cursor.deleted_bits(position)
    return None if bits is None else tuple(_indexes(bits))


def _read_log(data: object) -> list[PendingAckRecord]:
    """The pending-ack log's live records in a ``recover`` row's ``log`` (BW-23, BW-24)."""
    from reference import batched_log as bl

    out = []
    for replayed in bl.replay(LogKind.PENDING_ACK, bl.logged_entries(data)):
        assert isinstance(replayed.record, pb.PendingAckMetadataEntry)
        out.append(PendingAckRecord.from_pb(replayed.record))
    return out


def _decode_recover(config: Config, inputs: Mapping[str, Any]) -> PendingAckState:
    """A history's ``recover`` operation: what ``SubscriptionService.load`` starts the handle from.

    ``{"sub_type": "Shared", "cursor": CursorView, "records": [[record_id, PendingAckRecord], ...],
    "next_record_id": 2}``: the cursor's durable view and the live log records (PA-18 .. PA-20); without
    ``records`` the subscription has no pending-ack log yet and the handle starts lazily (PA-17).
    Format version 3 adds ``log``, the durable entries those records were read from: the records are
    then decoded from it here, and ``records`` (what the engine decoded) must agree
    (:func:`~reference.conformance.decoded_log_records`); ``recovered`` is the model's to check."""
    unknown = set(inputs) - {"sub_type", "cursor", "records", "next_record_id", "log", "batched_write", "recovered"}
    if unknown:
        raise KeyError(f"unknown recovery input(s) {sorted(unknown)}")
    sub_type = from_json(inputs.get("sub_type", "Exclusive"), SubType, "$.sub_type")
    cursor = from_json(inputs.get("cursor", {}), CursorView, "$.cursor")
    if "records" not in inputs and "log" not in inputs:
        return initial(config, sub_type=sub_type, cursor=cursor)
    from_json(inputs.get("batched_write"), bool | None, "$.batched_write")  # the checkers' (BW-22)
    records = decoded_log_records(inputs, _read_log, PendingAckRecord, "PA-18")
    if records is None:
        records = from_json(inputs["records"], tuple[tuple[int, PendingAckRecord], ...], "$.records")
    next_record_id = from_json(inputs.get("next_record_id"), int | None, "$.next_record_id")
    return recover(config, records, cursor=cursor, sub_type=sub_type, next_record_id=next_record_id)


VECTORS = MachineVectors(
    name="pending_ack",
    initial=_decode_init,
    recover=_decode_recover,
    recovery_rule="PA-18",
    log_kind=LogKind.PENDING_ACK,
    step=step,
    commands={
        "individual_ack": IndividualAck,
        "cumulative_ack": CumulativeAck,
        "acknowledge": NormalAck,
        "commit_txn": CommitTxn,
        "abort_txn": AbortTxn,
        "init_complete": PendingAckInitComplete,
        "init_failed": PendingAckInitFailed,
        "retry_init": RetryPendingAckInit,
        "close": ClosePendingAckHandle,
        "reload_subscription": ReloadSubscription,
        "reset_cursor": ResetCursor,
        "follow_cursor": FollowCursor,
    },
    observers={
        "message_state": _obs_message_state,
        "check_position_in_pending_ack_state": _obs_check_position,
        "txn_positions": _obs_txn_positions,
        "cumulative_ack": _obs_cumulative,
        "handle_state": lambda s: s.handle_state,
        "mark_delete_position": lambda s: s.cursor.mark_delete_position,
        "individually_deleted": lambda s: s.cursor.individually_deleted,
        "cursor_deleted_indexes": _obs_batch_deleted,
        "low_water_marks": lambda s: s.low_water_marks,
        "log_index": _obs_log_index,
        "pending_txns": lambda s: s.txn_order,
    },
)
