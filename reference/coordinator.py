"""The transaction coordinator (TC) of today's Pulsar as a pure machine.

One state is one coordinator id's metadata store: ``MLTransactionMetadataStore`` over its
transaction log, the parts of ``TransactionMetadataStoreService`` that orchestrate the end of a
transaction, ``TransactionTimeoutTrackerImpl`` and the replay of the log at load time.

Persistence is an output (TC-28).  Every log record the store writes is an :class:`AppendRecord` effect
carrying a logical record id the machine assigns itself (``next_record_id``); deleting records
(Pulsar individually acks their log positions) is a :class:`DeleteRecords` effect naming ids.
Recovery (:func:`recover`) is a pure fold of :class:`HandleMetadataEntry` steps over the records
still live in the log, so replay and live operation share one implementation of every rule.

Ending a transaction has three phases and the middle one talks to other machines, so it is split
into steps (TC-13..TC-16): :class:`EndTxn` (or :class:`ResumeEndTxn`, a re-run) moves the
transaction to COMMITTING/ABORTING and returns an :class:`EndTxnInTransactionBuffer` effect
asking the runner to send END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION with the low watermark;
the runner then delivers :class:`EndTxnInTransactionBufferResult` with what the participants
answered, which finishes the transaction, fails the request, or schedules a re-run
(:class:`ScheduleResumeEndTxn`).  Like Pulsar's futures, concurrent runs for one transaction are
independent; the machine keeps no per-run state.

Rules: ``spec/rules/coordinator.md``, TC-1 .. TC-28 here.  The client-side transaction
(TC-29 .. TC-36) is :mod:`reference.client`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

import immutables

from reference.conformance import MachineVectors, decoded_log_records
from reference.persistent import HashOnce, evolve, slot_init
from spec.config import END_TXN_RETRY_INTERVAL_MS, TIMEOUT_TRACKER_TICK_MS, Config
from spec.envelope import LogKind
from spec.errors import (
    BadRecord,
    CoordinatorNotFound,
    DomainError,
    IllegalArgument,
    InvalidTxnStatus,
    ReachMaxActiveTxn,
    TransactionMetadataStoreState,
    TransactionNotFound,
    UnsupportedTxnAction,
    error_by_name,
)
from spec.pb import PulsarApi_pb2, PulsarTransactionMetadata_pb2
from spec.result import Effect, Err, Ok
from spec.types import PulsarName, Subscription, TxnAction, TxnID, TxnStatus, can_transition

__all__ = [
    "VECTORS",
    "AddPartitionToTxn",
    "AddSubscriptionToTxn",
    "AppendRecord",
    "CloseStore",
    "CloseTransactionLog",
    "CoordinatorState",
    "CoordinatorStats",
    "DeleteRecords",
    "EndTxn",
    "EndTxnInTransactionBuffer",
    "EndTxnInTransactionBufferResult",
    "GetSlowTransactions",
    "GetTxnMeta",
    "GetTxnStatus",
    "HandleMetadataEntry",
    "InitStore",
    "NewTxn",
    "ReplayComplete",
    "ResumeEndTxn",
    "ScheduleResumeEndTxn",
    "StoreState",
    "Tick",
    "TransactionLogClosed",
    "TxnLogRecord",
    "TxnMeta",
    "TxnMetadataOp",
    "UpdateTxnStatus",
    "after_crash",
    "effective_low_water_mark",
    "initial",
    "low_water_mark",
    "recover",
    "step",
]


# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------


class StoreState(PulsarName, enum.Enum):
    """``TransactionMetadataStoreState.State``; Pulsar spells them None, Initializing, Ready, Closing, Close."""

    NONE = "None"
    INITIALIZING = "Initializing"
    READY = "Ready"
    CLOSING = "Closing"
    CLOSE = "Close"


class TxnMetadataOp(PulsarName, enum.IntEnum):
    """``TransactionMetadataEntry.TransactionMetadataOp``."""

    NEW = 0
    ADD_PARTITION = 1
    ADD_SUBSCRIPTION = 2
    UPDATE = 3


_U64_LIMIT: Final = 1 << 64


def _u64(name: str, value: int | None) -> None:
    if value is not None and not 0 <= value < _U64_LIMIT:
        raise ValueError(f"{name}={value} is not a uint64")


@slot_init
@dataclass(frozen=True, slots=True)
class TxnLogRecord:
    """One record of the transaction log, field for field ``TransactionMetadataEntry`` (TC-26).

    ``None`` is an absent optional field.  Which fields a record has depends on its op: NEW has
    the times, timeout, ``max_local_txn_id`` and maybe ``owner``; ADD_* has the names; UPDATE has
    the expected and new status.  Every record the coordinator writes has
    ``last_modification_time`` and ``max_local_txn_id``.
    """

    metadata_op: TxnMetadataOp
    txn_id: TxnID
    expected_status: TxnStatus | None = None
    new_status: TxnStatus | None = None
    partitions: tuple[str, ...] = ()
    subscriptions: tuple[Subscription, ...] = ()
    timeout_ms: int | None = None
    start_time: int | None = None
    last_modification_time: int | None = None
    max_local_txn_id: int | None = None
    owner: str | None = None

    def __post_init__(self) -> None:
        # the common case first: a record the coordinator writes has two of the four, in range
        for value in (self.timeout_ms, self.start_time, self.last_modification_time, self.max_local_txn_id):
            if value is not None and not 0 <= value < _U64_LIMIT:
                for name in ("timeout_ms", "start_time", "last_modification_time", "max_local_txn_id"):
                    _u64(name, getattr(self, name))

    def to_pb(self) -> PulsarTransactionMetadata_pb2.TransactionMetadataEntry:
        """The proto record Pulsar writes (TC-26)."""
        entry = PulsarTransactionMetadata_pb2.TransactionMetadataEntry(
            metadata_op=int(self.metadata_op),  # type: ignore[arg-type]
            txnid_most_bits=self.txn_id.most_sig_bits,
            txnid_least_bits=self.txn_id.least_sig_bits,
            partitions=self.partitions,
            subscriptions=[
                PulsarApi_pb2.Subscription(topic=s.topic, subscription=s.subscription) for s in self.subscriptions
            ],
        )
        if self.expected_status is not None:
            entry.expected_status = int(self.expected_status)  # type: ignore[assignment]
        if self.new_status is not None:
            entry.new_status = int(self.new_status)  # type: ignore[assignment]
        for name in ("timeout_ms", "start_time", "last_modification_time", "max_local_txn_id", "owner"):
            value = getattr(self, name)
            if value is not None:
                setattr(entry, name, value)
        return entry

    @classmethod
    def from_pb(cls, entry: PulsarTransactionMetadata_pb2.TransactionMetadataEntry) -> TxnLogRecord:
        """Read a proto record; an entry without an op or with an unknown op is a :class:`BadRecord`."""
        if not entry.HasField("metadata_op"):
            raise BadRecord("TransactionMetadataEntry has no metadata_op", offset=0)
        try:
            op = TxnMetadataOp(entry.metadata_op)
        except ValueError:
            raise BadRecord(f"unknown metadata_op {entry.metadata_op}", offset=0) from None

        def opt(name: str) -> int | None:
            return getattr(entry, name) if entry.HasField(name) else None  # type: ignore[arg-type]

        return cls(
            metadata_op=op,
            txn_id=TxnID(entry.txnid_most_bits, entry.txnid_least_bits),
            expected_status=TxnStatus(entry.expected_status) if entry.HasField("expected_status") else None,
            new_status=TxnStatus(entry.new_status) if entry.HasField("new_status") else None,
            partitions=tuple(entry.partitions),
            subscriptions=tuple(Subscription(s.topic, s.subscription) for s in entry.subscriptions),
            timeout_ms=opt("timeout_ms"),
            start_time=opt("start_time"),
            last_modification_time=opt("last_modification_time"),
            max_local_txn_id=opt("max_local_txn_id"),
            owner=entry.owner if entry.HasField("owner") else None,
        )


@slot_init
@dataclass(frozen=True, slots=True)
class TxnMeta(HashOnce):
    """What the store knows of one live transaction (``TxnMetaImpl`` plus its log record ids)."""

    __hash__ = HashOnce.__hash__

    txn_id: TxnID
    status: TxnStatus
    produced_partitions: frozenset[str]
    acked_subscriptions: frozenset[Subscription]
    timeout_ms: int
    start_time: int
    last_modification_time: int
    owner: str | None
    record_ids: tuple[int, ...]  # in log order; the first is the NEW record

    @property
    def timeout_at(self) -> int:
        """Absolute deadline used by the timeout tracker (TC-18)."""
        return self.start_time + self.timeout_ms

    def sorted_partitions(self) -> tuple[str, ...]:
        """Produced partitions as Pulsar returns them: a set, sorted (TC-10)."""
        return tuple(sorted(self.produced_partitions))

    def sorted_subscriptions(self) -> tuple[Subscription, ...]:
        """Acked subscriptions, sorted by (topic, subscription) (TC-10)."""
        return tuple(sorted(self.acked_subscriptions))


@dataclass(frozen=True, slots=True)
class CoordinatorStats(HashOnce):
    """In-memory counters of the store (TC-20); Pulsar starts them at 0 on every load."""

    __hash__ = HashOnce.__hash__

    created: int = 0
    committed: int = 0
    aborted: int = 0
    timeout: int = 0


@dataclass(frozen=True, slots=True)
class CoordinatorState(HashOnce):
    """One coordinator's metadata store.

    ``sequence_id`` is ``MLTransactionSequenceIdGenerator``'s counter: the last sequence issued,
    ``-1`` before the first (TC-3).  ``txns`` maps a sequence to its live transaction; finished
    transactions are not in it (TC-9).
    """

    __hash__ = HashOnce.__hash__

    config: Config
    coordinator_id: int
    store_state: StoreState
    sequence_id: int
    next_record_id: int
    txns: immutables.Map[int, TxnMeta]
    stats: CoordinatorStats = field(default_factory=CoordinatorStats)


# --------------------------------------------------------------------------------------------
# Effects
# --------------------------------------------------------------------------------------------


@slot_init
@dataclass(frozen=True, slots=True)
class AppendRecord(Effect):
    """Append ``record`` to the transaction log under the logical id ``record_id``."""

    record_id: int
    record: TxnLogRecord


@dataclass(frozen=True, slots=True)
class DeleteRecords(Effect):
    """Delete (individually acknowledge on the log cursor) these records."""

    record_ids: tuple[int, ...]


@slot_init
@dataclass(frozen=True, slots=True)
class EndTxnInTransactionBuffer(Effect):
    """Phase 2 (TC-14): send END_TXN_ON_SUBSCRIPTION to every subscription and END_TXN_ON_PARTITION
    to every partition, all carrying ``low_water_mark``; when all answered, deliver
    :class:`EndTxnInTransactionBufferResult` with the same ``txn_id``, ``action`` and ``is_timeout``."""

    txn_id: TxnID
    action: TxnAction
    is_timeout: bool
    low_water_mark: int
    partitions: tuple[str, ...]
    subscriptions: tuple[Subscription, ...]


@dataclass(frozen=True, slots=True)
class ScheduleResumeEndTxn(Effect):
    """Deliver :class:`ResumeEndTxn` after ``delay_ms`` (TC-16 retry, TC-24 re-drive).  A request
    whose step returned this effect is still pending: its caller gets the outcome of the re-run."""

    txn_id: TxnID
    action: TxnAction
    is_timeout: bool
    delay_ms: int


@dataclass(frozen=True, slots=True)
class CloseTransactionLog(Effect):
    """Close the transaction log's managed ledger; deliver :class:`TransactionLogClosed` when done."""


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitStore:
    """``MLTransactionMetadataStore.init``: None -> Initializing (TC-1).  ``max_local_txn_id`` is
    what the log's sequence-id interceptor recovered (last entry, else ledger property; TC-23)."""

    max_local_txn_id: int = -1


@dataclass(frozen=True, slots=True)
class HandleMetadataEntry:
    """The replay callback: one record still live in the log, in log order (TC-21, TC-22)."""

    record_id: int
    record: TxnLogRecord


@dataclass(frozen=True, slots=True)
class ReplayComplete:
    """Replay reached the end of the log: Initializing -> Ready and the re-drives (TC-24)."""


@dataclass(frozen=True, slots=True)
class CloseStore:
    """``closeAsync``: None/Initializing/Ready -> Closing (TC-1)."""


@dataclass(frozen=True, slots=True)
class TransactionLogClosed:
    """The log closed: Closing -> Close (TC-1)."""


@dataclass(frozen=True, slots=True)
class NewTxn:
    """CommandNewTxn reaching ``newTransaction(timeoutMs, owner)`` (TC-4, TC-5)."""

    timeout_ms: int
    now_ms: int
    owner: str | None = None

    def __post_init__(self) -> None:
        _u64("timeout_ms", self.timeout_ms)
        _u64("now_ms", self.now_ms)


@dataclass(frozen=True, slots=True)
class AddPartitionToTxn:
    """CommandAddPartitionToTxn from a client whose role is ``caller`` (TC-10, TC-12)."""

    txn_id: TxnID
    partitions: tuple[str, ...]
    now_ms: int
    caller: str | None = None


@dataclass(frozen=True, slots=True)
class AddSubscriptionToTxn:
    """CommandAddSubscriptionToTxn from a client whose role is ``caller`` (TC-10, TC-12)."""

    txn_id: TxnID
    subscriptions: tuple[Subscription, ...]
    now_ms: int
    caller: str | None = None


@dataclass(frozen=True, slots=True)
class UpdateTxnStatus:
    """The store's ``updateTxnStatus(txn, new, expected, isTimeout)`` called directly (TC-7..TC-9)."""

    txn_id: TxnID
    new_status: TxnStatus
    expected_status: TxnStatus
    now_ms: int
    is_timeout: bool = False


@dataclass(frozen=True, slots=True)
class EndTxn:
    """CommandEndTxn from a client whose role is ``caller``.  ``action`` is the wire value
    (COMMIT=0, ABORT=1); anything else is refused (TC-12, TC-13)."""

    txn_id: TxnID
    action: TxnAction | int
    now_ms: int
    caller: str | None = None


@dataclass(frozen=True, slots=True)
class ResumeEndTxn:
    """A re-run of ``TransactionMetadataStoreService.endTransaction`` on the coordinator's own
    behalf: a retry (TC-16) or a re-drive after recovery (TC-24).  No ownership check."""

    txn_id: TxnID
    action: TxnAction
    now_ms: int
    is_timeout: bool = False


@dataclass(frozen=True, slots=True)
class EndTxnInTransactionBufferResult:
    """What the participants of phase 2 answered: error names of ``spec.errors`` (TC-15, TC-16)."""

    txn_id: TxnID
    action: TxnAction
    now_ms: int
    is_timeout: bool = False
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Tick:
    """The timeout tracker's timer fired at ``now_ms`` (TC-18)."""

    now_ms: int


@dataclass(frozen=True, slots=True)
class GetTxnMeta:
    """``getTxnMeta`` (works in any store state, TC-11)."""

    txn_id: TxnID


@dataclass(frozen=True, slots=True)
class GetTxnStatus:
    """``getTxnStatus`` (TC-11; Pulsar's ML store throws NullPointerException for an unknown id)."""

    txn_id: TxnID


@dataclass(frozen=True, slots=True)
class GetSlowTransactions:
    """``getSlowTransactions(timeout)``: live txns whose timeout is bigger than ``timeout_ms`` (TC-27)."""

    timeout_ms: int


Command = (
    InitStore
    | HandleMetadataEntry
    | ReplayComplete
    | CloseStore
    | TransactionLogClosed
    | NewTxn
    | AddPartitionToTxn
    | AddSubscriptionToTxn
    | UpdateTxnStatus
    | EndTxn
    | ResumeEndTxn
    | EndTxnInTransactionBufferResult
    | Tick
    | GetTxnMeta
    | GetTxnStatus
    | GetSlowTransactions
)

Result = Ok[object] | Err
Step = tuple[CoordinatorState, Result]

_ENDING: Final = {TxnAction.COMMIT: TxnStatus.COMMITTING, TxnAction.ABORT: TxnStatus.ABORTING}
_FINAL: Final = {TxnAction.COMMIT: TxnStatus.COMMITTED, TxnAction.ABORT: TxnStatus.ABORTED}


# --------------------------------------------------------------------------------------------
# Construction
# --------------------------------------------------------------------------------------------


def initial(config: Config, coordinator_id: int = 0, store_state: StoreState = StoreState.READY) -> CoordinatorState:
    """An empty store of ``coordinator_id``.  The default (Ready, nothing issued) is exactly what
    recovering an empty log yields (TC-1, TC-3)."""
    if not 0 <= coordinator_id < 1 << 64:
        raise ValueError(f"coordinator_id={coordinator_id} is not a uint64")
    return CoordinatorState(
        config=config,
        coordinator_id=coordinator_id,
        store_state=store_state,
        sequence_id=-1,
        next_record_id=0,
        txns=immutables.Map(),
    )


# --------------------------------------------------------------------------------------------
# Observers
# --------------------------------------------------------------------------------------------


def low_water_mark(state: CoordinatorState) -> int:
    """``getLowWaterMark``: the smallest live sequence minus one, 0 when nothing is live (TC-17)."""
    if not state.txns:
        return 0
    return min(state.txns.keys()) - 1


def effective_low_water_mark(state: CoordinatorState) -> int:
    """Every sequence at or below this is finished: ``min(live ∪ {next sequence}) - 1`` (TC-17).

    Equals :func:`low_water_mark` whenever a txn is live, which is whenever one is sent."""
    lowest: int = min((*state.txns.keys(), state.sequence_id + 1))
    return lowest - 1


def txn_status(state: CoordinatorState, txn_id: TxnID) -> TxnStatus | None:
    meta = _meta_of(state, txn_id)
    return None if meta is None else meta.status


def _meta_of(state: CoordinatorState, txn_id: TxnID) -> TxnMeta | None:
    if txn_id.most_sig_bits != state.coordinator_id:
        return None
    return state.txns.get(txn_id.least_sig_bits)


def live_record_ids(state: CoordinatorState) -> frozenset[int]:
    return frozenset(rid for meta in state.txns.values() for rid in meta.record_ids)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _not_ready(state: CoordinatorState) -> Err | None:
    """TC-2: the store operations need Ready."""
    if state.store_state is StoreState.READY:
        return None
    return Err(
        TransactionMetadataStoreState(
            f"transaction metadata store {state.coordinator_id} is {state.store_state.value}, not Ready"
        )
    )


def _not_found(txn_id: TxnID) -> Err:
    return Err(TransactionNotFound(f"The transaction with this txdID `{txn_id}` not found"))


def _lookup(state: CoordinatorState, txn_id: TxnID) -> TxnMeta | Err:
    """TC-3, TC-11: the coordinator of a txn is its most significant bits."""
    if txn_id.most_sig_bits != state.coordinator_id:
        return Err(CoordinatorNotFound(f"transaction coordinator {txn_id.most_sig_bits} is not loaded here"))
    meta = state.txns.get(txn_id.least_sig_bits)
    return _not_found(txn_id) if meta is None else meta


def _may_access(state: CoordinatorState, meta: TxnMeta, caller: str | None) -> bool:
    """TC-12: the owner, a txn without owner, or (with auth on) a super user."""
    if meta.owner is None or meta.owner == caller:
        return True
    config = state.config
    return (
        config.authentication_enabled
        and config.authorization_enabled
        and caller is not None
        and caller in config.super_user_roles
    )


def _record(state: CoordinatorState, op: TxnMetadataOp, txn_id: TxnID, now_ms: int, **fields: object) -> TxnLogRecord:
    """A ``TransactionMetadataEntry`` to write (TC-26).  The step hands it out as an
    :class:`AppendRecord` effect and from then on treats it as durable (TC-28)."""
    return TxnLogRecord(
        metadata_op=op,
        txn_id=txn_id,
        last_modification_time=now_ms,
        max_local_txn_id=state.sequence_id,
        **fields,  # type: ignore[arg-type]
    )


def _invalid_status(txn_id: TxnID, expected: TxnStatus, actual: TxnStatus) -> InvalidTxnStatus:
    return InvalidTxnStatus(f"Expect Txn `{txn_id}` to be in {expected.name} status but it is in {actual.name} status")


def _with_meta(state: CoordinatorState, meta: TxnMeta, *, records: int = 0, **changes: object) -> CoordinatorState:
    return evolve(
        state,
        txns=state.txns.set(meta.txn_id.least_sig_bits, meta),
        next_record_id=state.next_record_id + records,
        **changes,
    )


# --------------------------------------------------------------------------------------------
# Lifecycle (TC-1)
# --------------------------------------------------------------------------------------------


def _init_store(state: CoordinatorState, cmd: InitStore) -> Step:
    """TC-1, TC-23: None -> Initializing, the sequence generator primed from the log."""
    if state.store_state is not StoreState.NONE:
        return state, Err(TransactionMetadataStoreState(f"cannot init a store in state {state.store_state.value}"))
    return evolve(
        state, store_state=StoreState.INITIALIZING, sequence_id=max(state.sequence_id, cmd.max_local_txn_id)
    ), Ok(None)


def _close_store(state: CoordinatorState) -> Step:
    """TC-1: None/Initializing/Ready -> Closing (compare-and-set)."""
    if state.store_state not in (StoreState.NONE, StoreState.INITIALIZING, StoreState.READY):
        return state, Err(TransactionMetadataStoreState(f"cannot close a store in state {state.store_state.value}"))
    return evolve(state, store_state=StoreState.CLOSING), Ok(None, (CloseTransactionLog(),))


def _log_closed(state: CoordinatorState) -> Step:
    """TC-1: Closing -> Close."""
    if state.store_state is not StoreState.CLOSING:
        return state, Err(TransactionMetadataStoreState(f"store is {state.store_state.value}, not Closing"))
    return evolve(state, store_state=StoreState.CLOSE), Ok(None)


# --------------------------------------------------------------------------------------------
# Replay (TC-21 .. TC-24)
# --------------------------------------------------------------------------------------------


def _replay(state: CoordinatorState, cmd: HandleMetadataEntry) -> Step:
    """TC-21, TC-22, TC-23: apply one live record of the log during Initializing.

    A record that cannot apply (orphan, wrong status, bad transition, missing fields) is deleted
    and replay goes on; it is never an error of the replay itself.
    """
    if state.store_state is not StoreState.INITIALIZING:
        return state, Err(
            TransactionMetadataStoreState(f"replay needs Initializing, store is {state.store_state.value}")
        )
    rid, rec = cmd.record_id, cmd.record
    if rid < 0:
        raise ValueError(f"record_id={rid} must be >= 0")
    seq = rec.txn_id.least_sig_bits
    # TC-23: defence in depth; in a consistent log this never raises the interceptor's value.
    base = evolve(
        state,
        next_record_id=max(state.next_record_id, rid + 1),
        sequence_id=max(state.sequence_id, rec.max_local_txn_id if rec.max_local_txn_id is not None else -1),
    )
    drop = (base, Ok(None, (DeleteRecords((rid,)),)))
    meta = base.txns.get(seq)
    if rec.metadata_op is TxnMetadataOp.NEW:
        if meta is not None:
            return _with_meta(base, evolve(meta, record_ids=(*meta.record_ids, rid))), Ok(None)
        start = rec.start_time or 0
        fresh = TxnMeta(
            txn_id=TxnID(state.coordinator_id, seq),
            status=TxnStatus.OPEN,
            produced_partitions=frozenset(),
            acked_subscriptions=frozenset(),
            timeout_ms=rec.timeout_ms or 0,
            start_time=start,
            last_modification_time=rec.last_modification_time if rec.last_modification_time is not None else start,
            owner=rec.owner,
            record_ids=(rid,),
        )
        return _with_meta(evolve(base, sequence_id=max(base.sequence_id, seq)), fresh), Ok(None)
    if meta is None:
        return drop  # TC-21: orphan
    last_mod = rec.last_modification_time if rec.last_modification_time is not None else meta.last_modification_time
    if rec.metadata_op in (TxnMetadataOp.ADD_PARTITION, TxnMetadataOp.ADD_SUBSCRIPTION):
        if meta.status is not TxnStatus.OPEN:
            return drop  # TC-22
        if rec.metadata_op is TxnMetadataOp.ADD_PARTITION:
            meta = evolve(meta, produced_partitions=meta.produced_partitions | frozenset(rec.partitions))
        else:
            meta = evolve(meta, acked_subscriptions=meta.acked_subscriptions | frozenset(rec.subscriptions))
        return _with_meta(base, evolve(meta, record_ids=(*meta.record_ids, rid), last_modification_time=last_mod)), Ok(
            None
        )
    # UPDATE: TxnMetaImpl.updateTxnStatus, which has no same-status shortcut (that is the store's).
    new, expected = rec.new_status, rec.expected_status
    if new is None or expected is None or meta.status is not expected or not can_transition(meta.status, new):
        return drop  # TC-22
    record_ids = (*meta.record_ids, rid)
    if new.is_terminal:
        return evolve(base, txns=base.txns.delete(seq)), Ok(None, (DeleteRecords(record_ids),))
    return _with_meta(base, evolve(meta, status=new, record_ids=record_ids, last_modification_time=last_mod)), Ok(None)


def _replay_complete(state: CoordinatorState) -> Step:
    """TC-24: Initializing -> Ready, then re-drive every COMMITTING/ABORTING txn in sequence order.

    OPEN txns need nothing: their absolute deadline (start + timeout) is in the state, so the
    first :class:`Tick` after Ready aborts those already due (TC-18)."""
    if state.store_state is not StoreState.INITIALIZING:
        return state, Err(TransactionMetadataStoreState(f"store is {state.store_state.value}, not Initializing"))
    effects = tuple(
        ScheduleResumeEndTxn(
            meta.txn_id, TxnAction.COMMIT if meta.status is TxnStatus.COMMITTING else TxnAction.ABORT, False, 0
        )
        for _, meta in sorted(state.txns.items())
        if meta.status in (TxnStatus.COMMITTING, TxnStatus.ABORTING)
    )
    return evolve(state, store_state=StoreState.READY), Ok(None, effects)


# --------------------------------------------------------------------------------------------
# Store operations
# --------------------------------------------------------------------------------------------


def _new_txn(state: CoordinatorState, cmd: NewTxn) -> Step:
    """TC-3, TC-4, TC-5, TC-19: issue the next TxnID and write its NEW record."""
    limit = state.config.max_active_transactions_per_coordinator
    if limit > 0 and len(state.txns) >= limit:
        # TC-4: checked before Ready; the broker then answers nothing at all.
        return state, Err(ReachMaxActiveTxn(f"New txn op reach max active txn! tcId : {state.coordinator_id}"))
    if (bad := _not_ready(state)) is not None:
        return state, bad
    if cmd.owner is not None and not cmd.owner.strip():
        return state, Err(IllegalArgument("Owner can't be blank"))
    seq = state.sequence_id + 1
    txn_id = TxnID(state.coordinator_id, seq)
    grown = evolve(state, sequence_id=seq)
    rid = state.next_record_id
    record = _record(
        grown, TxnMetadataOp.NEW, txn_id, cmd.now_ms, start_time=cmd.now_ms, timeout_ms=cmd.timeout_ms, owner=cmd.owner
    )
    meta = TxnMeta(
        txn_id=txn_id,
        status=TxnStatus.OPEN,
        produced_partitions=frozenset(),
        acked_subscriptions=frozenset(),
        timeout_ms=cmd.timeout_ms,
        start_time=cmd.now_ms,
        last_modification_time=cmd.now_ms,
        owner=cmd.owner,
        record_ids=(rid,),
    )
    after = _with_meta(grown, meta, records=1, stats=evolve(state.stats, created=state.stats.created + 1))
    effects: tuple[Effect, ...] = (AppendRecord(rid, record),)
    if cmd.timeout_ms < TIMEOUT_TRACKER_TICK_MS:
        # TC-19: the tracker aborts at once instead of queueing.
        after, ended = _end_transaction(after, txn_id, TxnAction.ABORT, True, cmd.now_ms)
        effects += ended.effects
    return after, Ok(txn_id, effects)


def _add_to_txn(state: CoordinatorState, cmd: AddPartitionToTxn | AddSubscriptionToTxn) -> Step:
    """TC-10, TC-12: log-before-check; the record is deleted again when the txn is not OPEN."""
    found = _lookup(state, cmd.txn_id)
    if isinstance(found, Err):
        return state, found
    if not _may_access(state, found, cmd.caller):
        return state, _ownership_refused(cmd.txn_id, cmd.caller)
    if (bad := _not_ready(state)) is not None:
        return state, bad
    rid = state.next_record_id
    if isinstance(cmd, AddPartitionToTxn):
        record = _record(state, TxnMetadataOp.ADD_PARTITION, cmd.txn_id, cmd.now_ms, partitions=cmd.partitions)
    else:
        record = _record(state, TxnMetadataOp.ADD_SUBSCRIPTION, cmd.txn_id, cmd.now_ms, subscriptions=cmd.subscriptions)
    if found.status is not TxnStatus.OPEN:
        return state, Err(
            _invalid_status(cmd.txn_id, TxnStatus.OPEN, found.status),
            (AppendRecord(rid, record), DeleteRecords((rid,))),
        )
    if isinstance(cmd, AddPartitionToTxn):
        meta = evolve(found, produced_partitions=found.produced_partitions | frozenset(cmd.partitions))
    else:
        meta = evolve(found, acked_subscriptions=found.acked_subscriptions | frozenset(cmd.subscriptions))
    meta = evolve(meta, last_modification_time=cmd.now_ms, record_ids=(*found.record_ids, rid))
    return _with_meta(state, meta, records=1), Ok(None, (AppendRecord(rid, record),))


def _ownership_refused(txn_id: TxnID, caller: str | None) -> Err:
    # TC-12: Pulsar hides the txn from a caller who may not touch it.
    return Err(TransactionNotFound(f"Transaction {txn_id} not found: {caller} is neither the owner nor a super user"))


def _update_txn_status(
    state: CoordinatorState, txn_id: TxnID, new: TxnStatus, expected: TxnStatus, is_timeout: bool, now_ms: int
) -> Step:
    """TC-2, TC-6, TC-7, TC-8, TC-9, TC-20: the store's ``updateTxnStatus``."""
    if txn_id.most_sig_bits != state.coordinator_id:
        return state, Err(CoordinatorNotFound(f"transaction coordinator {txn_id.most_sig_bits} is not loaded here"))
    if (bad := _not_ready(state)) is not None:
        return state, bad
    meta = state.txns.get(txn_id.least_sig_bits)
    if meta is None:
        return state, _not_found(txn_id)
    if meta.status is new:
        return state, Ok(new)  # TC-7: no record, `expected` not consulted
    rid = state.next_record_id
    record = _record(state, TxnMetadataOp.UPDATE, txn_id, now_ms, expected_status=expected, new_status=new)
    written: tuple[Effect, ...] = (AppendRecord(rid, record),)
    if meta.status is not expected:
        return state, Err(_invalid_status(txn_id, expected, meta.status), (*written, DeleteRecords((rid,))))
    if not can_transition(meta.status, new):
        return state, Err(
            InvalidTxnStatus(f"Transaction `{txn_id}` can not be changed from {meta.status.name} to {new.name}"),
            (*written, DeleteRecords((rid,))),
        )
    stats = state.stats
    if new is TxnStatus.ABORTING and is_timeout:
        stats = evolve(stats, timeout=stats.timeout + 1)
    record_ids = (*meta.record_ids, rid)
    if new.is_terminal:
        # TC-9: forget the txn at once, then delete every record it ever had.
        stats = (
            evolve(stats, committed=stats.committed + 1)
            if new is TxnStatus.COMMITTED
            else evolve(stats, aborted=stats.aborted + 1)
        )
        after = evolve(state, txns=state.txns.delete(txn_id.least_sig_bits), next_record_id=rid + 1, stats=stats)
        return after, Ok(new, (*written, DeleteRecords(record_ids)))
    meta = evolve(meta, status=new, last_modification_time=now_ms, record_ids=record_ids)
    return _with_meta(state, meta, records=1, stats=stats), Ok(new, written)


# --------------------------------------------------------------------------------------------
# Ending a transaction (TC-13 .. TC-16)
# --------------------------------------------------------------------------------------------


def _retry(txn_id: TxnID, action: TxnAction, is_timeout: bool, error: DomainError, effects: tuple[Effect, ...]) -> Err:
    """TC-16: a retryable failure re-runs the whole end after END_TXN_RETRY_INTERVAL_MS."""
    return Err(error, (*effects, ScheduleResumeEndTxn(txn_id, action, is_timeout, END_TXN_RETRY_INTERVAL_MS)))


def _end_transaction(
    state: CoordinatorState, txn_id: TxnID, action: TxnAction | int, is_timeout: bool, now_ms: int
) -> Step:
    """TC-13, TC-14, TC-16: ``TransactionMetadataStoreService.endTransaction`` up to phase 2."""
    if action not in (TxnAction.COMMIT, TxnAction.ABORT):
        return state, Err(UnsupportedTxnAction(f"Unsupported txnAction {int(action)}"))
    act = TxnAction(action)
    target = _ENDING[act]
    found = _lookup(state, txn_id)
    if isinstance(found, Err):
        return state, found
    effects: tuple[Effect, ...] = ()
    if found.status is TxnStatus.OPEN:
        after, updated = _update_txn_status(state, txn_id, target, TxnStatus.OPEN, is_timeout, now_ms)
        if isinstance(updated, Err):
            if updated.error.retryable:
                return state, _retry(txn_id, act, is_timeout, updated.error, updated.effects)
            return state, updated
        state, effects = after, updated.effects
    elif found.status is not target:
        return state, Err(_invalid_status(txn_id, target, found.status))
    meta = state.txns[txn_id.least_sig_bits]
    send = EndTxnInTransactionBuffer(
        txn_id=txn_id,
        action=act,
        is_timeout=is_timeout,
        low_water_mark=low_water_mark(state),
        partitions=meta.sorted_partitions(),
        subscriptions=meta.sorted_subscriptions(),
    )
    return state, Ok(target, (*effects, send))


def _end_txn(state: CoordinatorState, cmd: EndTxn) -> Step:
    """TC-12, TC-13: a client's END_TXN passes the ownership check, then ends the txn."""
    found = _lookup(state, cmd.txn_id)
    if isinstance(found, Err):
        return state, found
    if not _may_access(state, found, cmd.caller):
        return state, _ownership_refused(cmd.txn_id, cmd.caller)
    return _end_transaction(state, cmd.txn_id, cmd.action, False, cmd.now_ms)


def _end_in_buffer_result(state: CoordinatorState, cmd: EndTxnInTransactionBufferResult) -> Step:
    """TC-15, TC-16: phase 3 after every participant answered.

    If any participant failed non-retryably the request fails with that error (the first such
    in ``errors``); otherwise, if any failed, the whole end is re-run after the retry interval.
    """
    failures = [error_by_name(name)(f"participant failed: {name}") for name in cmd.errors]
    final = [e for e in failures if not e.retryable]
    if final:
        return state, Err(final[0])
    if failures:
        return state, _retry(cmd.txn_id, cmd.action, cmd.is_timeout, failures[0], ())
    after, result = _update_txn_status(
        state, cmd.txn_id, _FINAL[cmd.action], _ENDING[cmd.action], cmd.is_timeout, cmd.now_ms
    )
    if isinstance(result, Err) and result.error.retryable:
        return state, _retry(cmd.txn_id, cmd.action, cmd.is_timeout, result.error, result.effects)
    return after, result


# --------------------------------------------------------------------------------------------
# Timeouts (TC-18, TC-19)
# --------------------------------------------------------------------------------------------


def _tick(state: CoordinatorState, cmd: Tick) -> Step:
    """TC-18: abort every OPEN txn whose deadline has passed, in deadline order.

    The tracker runs only while the store is Ready.  A txn already committing or aborting is
    left alone; its end is in the hands of whoever started it."""
    if state.store_state is not StoreState.READY:
        return state, Ok(())
    due = sorted(
        (meta.timeout_at, seq)
        for seq, meta in state.txns.items()
        if meta.status is TxnStatus.OPEN and meta.timeout_at < cmd.now_ms
    )
    aborted: list[TxnID] = []
    effects: list[Effect] = []
    for _, seq in due:
        txn_id = TxnID(state.coordinator_id, seq)
        state, result = _end_transaction(state, txn_id, TxnAction.ABORT, True, cmd.now_ms)
        if not isinstance(result, Ok):  # Ready and OPEN: phase 1 cannot fail
            raise AssertionError(f"timeout abort of {txn_id} failed: {result.error}")
        aborted.append(txn_id)
        effects.extend(result.effects)
    return state, Ok(tuple(aborted), tuple(effects))


# --------------------------------------------------------------------------------------------
# Queries as commands
# --------------------------------------------------------------------------------------------


def _get_txn_meta(state: CoordinatorState, cmd: GetTxnMeta | GetTxnStatus) -> Step:
    """TC-11: any store state; unknown or finished -> TransactionNotFound."""
    found = _lookup(state, cmd.txn_id)
    if isinstance(found, Err):
        return state, found
    return state, Ok(found.status if isinstance(cmd, GetTxnStatus) else found)


def _slow(state: CoordinatorState, cmd: GetSlowTransactions) -> Step:
    """TC-27: compares each txn's timeout (not its deadline) with ``timeout_ms``."""
    return state, Ok(tuple(meta.txn_id for _, meta in sorted(state.txns.items()) if meta.timeout_ms > cmd.timeout_ms))


# --------------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------------


def step(state: CoordinatorState, command: Command) -> Step:
    """One step of the coordinator.  Rejected commands return ``state`` unchanged (TC-1 .. TC-27)."""
    match command:
        case NewTxn():
            return _new_txn(state, command)
        case AddPartitionToTxn() | AddSubscriptionToTxn():
            return _add_to_txn(state, command)
        case UpdateTxnStatus():
            return _update_txn_status(
                state, command.txn_id, command.new_status, command.expected_status, command.is_timeout, command.now_ms
            )
        case EndTxn():
            return _end_txn(state, command)
        case ResumeEndTxn():
            return _end_transaction(state, command.txn_id, command.action, command.is_timeout, command.now_ms)
        case EndTxnInTransactionBufferResult():
            return _end_in_buffer_result(state, command)
        case Tick():
            return _tick(state, command)
        case GetTxnMeta() | GetTxnStatus():
            return _get_txn_meta(state, command)
        case GetSlowTransactions():
            return _slow(state, command)
        case InitStore():
            return _init_store(state, command)
        case HandleMetadataEntry():
            return _replay(state, command)
        case ReplayComplete():
            return _replay_complete(state)
        case CloseStore():
            return _close_store(state)
        case TransactionLogClosed():
            return _log_closed(state)
    raise TypeError(f"not a coordinator command: {command!r}")


# --------------------------------------------------------------------------------------------
# Recovery (TC-21 .. TC-25)
# --------------------------------------------------------------------------------------------


def recover(
    config: Config,
    coordinator_id: int,
    records: Iterable[tuple[int, TxnLogRecord]],
    max_local_txn_id: int = -1,
    *,
    next_record_id: int = 0,
) -> tuple[CoordinatorState, tuple[Effect, ...]]:
    """Load a coordinator from its log: the fold of :class:`HandleMetadataEntry` over the
    ``(record_id, record)`` pairs still live, in log order (TC-21 .. TC-24); what a crash keeps
    (TC-25).

    ``max_local_txn_id`` is what the sequence-id interceptor recovered: the value on the log's
    last entry (live or not) or the ledger property written at roll-over (TC-23).  Returns the
    Ready state and the effects replay asked for: deletion of orphan and invalid records and the
    re-drives of committing/aborting txns.  ``next_record_id`` is a floor for the record-id counter:
    the ids the reader already numbered (records it read but replay dropped must not be reused)."""
    state = initial(config, coordinator_id, StoreState.NONE)
    state, result = step(state, InitStore(max_local_txn_id))
    effects: list[Effect] = []
    for record_id, record in records:
        state, result = step(state, HandleMetadataEntry(record_id, record))
        effects.extend(result.effects)
    state, result = step(state, ReplayComplete())
    effects.extend(result.effects)
    return evolve(state, next_record_id=max(state.next_record_id, next_record_id)), tuple(effects)


def after_crash(state: CoordinatorState) -> CoordinatorState:
    """TC-25: what :func:`recover` yields from the records ``state`` left in the log.

    The store is Ready again; the txns, their statuses, names, times, owners and record ids are
    the same; the sequence is the same (given the interceptor's value); the record-id counter
    continues above the highest live record; the counters start again at zero."""
    records = live_record_ids(state)
    return evolve(
        state,
        store_state=StoreState.READY,
        next_record_id=max(records) + 1 if records else 0,
        stats=CoordinatorStats(),
    )


# --------------------------------------------------------------------------------------------
# Vectors adapter
# --------------------------------------------------------------------------------------------


def _observe_status(state: CoordinatorState, txn_id: TxnID) -> TxnStatus | None:
    return txn_status(state, txn_id)


def _observe_partitions(state: CoordinatorState, txn_id: TxnID) -> tuple[str, ...] | None:
    meta = _meta_of(state, txn_id)
    return None if meta is None else meta.sorted_partitions()


def _observe_subscriptions(state: CoordinatorState, txn_id: TxnID) -> tuple[Subscription, ...] | None:
    meta = _meta_of(state, txn_id)
    return None if meta is None else meta.sorted_subscriptions()


def _observe_records(state: CoordinatorState, txn_id: TxnID) -> tuple[int, ...] | None:
    meta = _meta_of(state, txn_id)
    return None if meta is None else meta.record_ids


def _decode_init(config: Config, init: dict[str, object] | object) -> CoordinatorState:
    params = dict(init) if isinstance(init, dict) else {}
    unknown = set(params) - {"coordinator_id", "store_state"}
    if unknown:
        raise KeyError(f"unknown init parameter(s) {sorted(unknown)}; known: coordinator_id, store_state")
    coordinator_id = params.get("coordinator_id", 0)
    if not isinstance(coordinator_id, int) or isinstance(coordinator_id, bool):
        raise TypeError("coordinator_id must be an integer")
    store_state = StoreState[str(params.get("store_state", "READY"))]
    return initial(config, coordinator_id, store_state)


def _read_log(data: object) -> list[TxnLogRecord]:
    """The transaction log's live records in a ``recover`` row's ``log`` (BW-23, BW-24)."""
    from reference import batched_log as bl

    out = []
    for replayed in bl.replay(LogKind.TRANSACTION_LOG, bl.logged_entries(data)):
        assert isinstance(replayed.record, PulsarTransactionMetadata_pb2.TransactionMetadataEntry)
        out.append(TxnLogRecord.from_pb(replayed.record))
    return out


def _decode_recover(config: Config, inputs: dict[str, object] | object) -> CoordinatorState:
    """A history's ``recover`` operation: what ``CoordinatorService.load`` recovers from (TC-21).

    ``{"coordinator_id": 0, "records": [[record_id, TxnLogRecord], ...], "max_local_txn_id": -1,
    "next_record_id": 3}``: the live log records in log order, the interceptor's value (TC-23), and
    the record-id counter the engine continues from (the records it numbered while reading).  Format
    version 3 adds ``log``, the durable entries those records were read from: the records are then
    decoded from it here, and ``records`` (what the engine decoded) must agree
    (:func:`~reference.conformance.decoded_log_records`); ``recovered`` is the model's to check."""
    from spec.jsonvalues import from_json

    params = dict(inputs) if isinstance(inputs, dict) else {}
    known = {"coordinator_id", "records", "max_local_txn_id", "next_record_id", "log", "batched_write", "recovered"}
    unknown = set(params) - known
    if unknown:
        raise KeyError(f"unknown recovery input(s) {sorted(unknown)}")
    from_json(params.get("batched_write"), bool | None, "$.batched_write")  # the checkers' (BW-22)
    records = decoded_log_records(params, _read_log, TxnLogRecord, "TC-21")
    if records is None:
        records = from_json(params.get("records", []), tuple[tuple[int, TxnLogRecord], ...], "$.records")
    state, _ = recover(
        config,
        from_json(params.get("coordinator_id", 0), int, "$.coordinator_id"),
        records,
        from_json(params.get("max_local_txn_id", -1), int, "$.max_local_txn_id"),
        next_record_id=from_json(params.get("next_record_id", 0), int, "$.next_record_id"),
    )
    return state


VECTORS = MachineVectors(
    name="coordinator",
    initial=lambda config, init: _decode_init(config, init),
    recover=_decode_recover,
    recovery_rule="TC-21",
    log_kind=LogKind.TRANSACTION_LOG,
    step=step,
    commands={
        "init_store": InitStore,
        "handle_metadata_entry": HandleMetadataEntry,
        "replay_complete": ReplayComplete,
        "close_store": CloseStore,
        "transaction_log_closed": TransactionLogClosed,
        "new_txn": NewTxn,
        "add_partition_to_txn": AddPartitionToTxn,
        "add_subscription_to_txn": AddSubscriptionToTxn,
        "update_txn_status": UpdateTxnStatus,
        "end_txn": EndTxn,
        "resume_end_txn": ResumeEndTxn,
        "end_txn_in_transaction_buffer_result": EndTxnInTransactionBufferResult,
        "tick": Tick,
        "get_txn_meta": GetTxnMeta,
        "get_txn_status": GetTxnStatus,
        "get_slow_transactions": GetSlowTransactions,
    },
    observers={
        "txn_status": _observe_status,
        "produced_partitions": _observe_partitions,
        "acked_subscriptions": _observe_subscriptions,
        "record_ids": _observe_records,
        "low_water_mark": low_water_mark,
        "store_state": lambda s: s.store_state,
        "sequence_id": lambda s: s.sequence_id,
        "ongoing_count": lambda s: len(s.txns),
        "live_txns": lambda s: tuple(meta.txn_id for _, meta in sorted(s.txns.items())),
        "live_record_ids": live_record_ids,
        "stats": lambda s: s.stats,
    },
)
