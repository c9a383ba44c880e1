"""PIP-160's batched log writer (Pulsar's ``TxnLogBufferedWriter``) as a pure machine.

The writer sits between a log user (the coordinator's transaction log, or one subscription's
pending-ack store) and its managed ledger.  It buffers records and writes many of them as one
ledger entry in the PIP-160 envelope (:mod:`spec.envelope`); each caller learns where its record
went as ``(ledger, entry, batch size, batch index)``.

This module is the policy only.  A step is what the writer's single executor thread does with
one event, so there is no concurrency inside it:

* :class:`AsyncAddData` is a caller's ``asyncAddData`` reaching the executor;
* :class:`TimerFired` is the one-shot delay timer's executor task;
* :class:`AddEntryComplete` / :class:`AddEntryFailed` are the managed ledger's answers to a write
  this machine asked for with an :class:`AsyncAddEntry` effect;
* :class:`Close` is ``close()``'s compare-and-set, :class:`FinishClose` the executor task it queues;
* :class:`DeleteRecords` is a log user deleting records at batch-index level (PIP-45 ack sets).

The engine (``engine/storage/batched_writer.py``) owns the thread, the timer and the ledger and
carries out the effects.  Reading a ledger back (batched and plain entries mixed) is the pure
function :func:`read_entry` and its fold :func:`replay`; :func:`recover` rebuilds the durable part
of the state from the ledger and the cursor.

Rules: ``spec/rules/batched_log.md`` (prefix BW).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import immutables
from google.protobuf.message import DecodeError, Message
from pyroaring import FrozenBitMap

from reference.conformance import MachineVectors
from reference.persistent import HashOnce, evolve, evolver, slot_init
from spec.config import Config
from spec.envelope import MAGIC, LogKind, decode_entry, encode_batch, encode_plain, is_batched
from spec.errors import (
    DomainError,
    InputError,
    ManagedLedgerFenced,
    ManagedLedgerIntercept,
    NotAllowed,
    error_by_name,
)
from spec.result import Effect, Err, Ok
from spec.types import BatchedPosition, Position, PulsarName, bits_to_words, words_to_bits

__all__ = [
    "CLOSED_MESSAGE",
    "VECTORS",
    "AddAccepted",
    "AddComplete",
    "AddEntryComplete",
    "AddEntryFailed",
    "AddFailed",
    "ArmTimer",
    "AsyncAddData",
    "AsyncAddEntry",
    "Buffered",
    "CancelTimer",
    "Close",
    "CursorDelete",
    "CursorDeleteEntry",
    "DeleteRecords",
    "EntryView",
    "FinishClose",
    "FlushObserved",
    "FlushStats",
    "FlushTrigger",
    "InFlight",
    "LoggedEntry",
    "ReplayedRecord",
    "SetBatchedWrite",
    "TimerFired",
    "WriterConfig",
    "WriterState",
    "WriterStatus",
    "canonical_record",
    "durable_entries",
    "initial",
    "initial_for",
    "logged_entries",
    "read_entry",
    "recover",
    "recover_for",
    "recovery_inputs",
    "replay",
    "sample_record",
    "step",
    "writer_config",
]

# TxnLogBufferedWriter.BUFFERED_WRITER_CLOSED_EXCEPTION's message.
CLOSED_MESSAGE: Final = "Transaction log buffered write has closed"


class WriterStatus(PulsarName, enum.Enum):
    OPEN = "OPEN"
    CLOSING = "CLOSING"
    CLOSED = "CLOSED"


class FlushTrigger(PulsarName, enum.Enum):
    """Why a batch was flushed; each names one ``*_bufferedwriter_flush_trigger_*`` counter."""

    MAX_RECORDS = "max_records"
    MAX_SIZE = "max_size"
    MAX_DELAY = "max_delay"
    LARGE_DATA = "large_data"


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """The four settings of one writer, copied from broker.conf when its store opens (BW-1)."""

    kind: LogKind
    enabled: bool
    max_records: int
    max_size: int
    max_delay_ms: int

    @property
    def effective(self) -> bool:
        """Batching is on only when enabled and more than one record may share an entry (BW-2)."""
        return self.enabled and self.max_records > 1


def writer_config(config: Config, kind: LogKind, *, enabled: bool | None = None) -> WriterConfig:
    """The writer settings of ``kind`` from its own broker.conf keys (BW-1).

    ``enabled`` overrides the key: it is how the engine's run-time switch (BW-22) opens the next
    writer with batching on or off.
    """
    if kind is LogKind.TRANSACTION_LOG:
        return WriterConfig(
            kind,
            config.transaction_log_batched_write_enabled if enabled is None else enabled,
            config.transaction_log_batched_write_max_records,
            config.transaction_log_batched_write_max_size,
            config.transaction_log_batched_write_max_delay_in_millis,
        )
    return WriterConfig(
        kind,
        config.transaction_pending_ack_batched_write_enabled if enabled is None else enabled,
        config.transaction_pending_ack_batched_write_max_records,
        config.transaction_pending_ack_batched_write_max_size,
        config.transaction_pending_ack_batched_write_max_delay_in_millis,
    )


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------


@slot_init
@dataclass(frozen=True, slots=True)
class Buffered(HashOnce):
    """A record waiting in the buffer: its request, canonical bytes and arrival time."""

    __hash__ = HashOnce.__hash__

    request_id: int
    data: bytes
    added_ms: int


@slot_init
@dataclass(frozen=True, slots=True)
class InFlight(HashOnce):
    """A write handed to the managed ledger and not yet answered."""

    __hash__ = HashOnce.__hash__

    write_id: int
    request_ids: tuple[int, ...]
    batched: bool


@slot_init
@dataclass(frozen=True, slots=True)
class EntryView(HashOnce):
    """A durable entry this writer wrote and the batch indexes of it not yet deleted."""

    __hash__ = HashOnce.__hash__

    batch_size: int
    batched: bool
    remaining: FrozenBitMap


@dataclass(frozen=True, slots=True)
class FlushStats(HashOnce):
    """What the metrics of BW-19 count, kept in the state so vectors can observe them."""

    # These and the writer's other parts keep their hashes: a new writer state (every step) is
    # hashed when the model checker interns it, and it shares most of its parts with the last one.
    __hash__ = HashOnce.__hash__

    max_records: int = 0
    max_size: int = 0
    max_delay: int = 0
    large_data: int = 0
    batches: int = 0
    records_sum: int = 0
    bytes_sum: int = 0
    delay_ms_sum: int = 0

    def observe(self, trigger: FlushTrigger, records: int, size: int, delay_ms: int) -> FlushStats:
        counted = {trigger.value: getattr(self, trigger.value) + 1}
        return evolve(
            self,
            batches=self.batches + 1,
            records_sum=self.records_sum + records,
            bytes_sum=self.bytes_sum + size,
            delay_ms_sum=self.delay_ms_sum + delay_ms,
            **counted,
        )


@dataclass(frozen=True, slots=True)
class WriterState(HashOnce):
    __hash__ = HashOnce.__hash__

    config: WriterConfig
    status: WriterStatus
    buffer: tuple[Buffered, ...]
    bytes_size: int
    timer_due_ms: int | None
    in_flight: tuple[InFlight, ...]
    next_request_id: int
    next_write_id: int
    succeeded: int
    failed: int
    last_succeeded: int
    entries: immutables.Map[Position, EntryView]
    stats: FlushStats

    @property
    def accepted(self) -> int:
        return self.next_request_id


def initial(
    config: Config, kind: LogKind = LogKind.TRANSACTION_LOG, now_ms: int = 0, enabled: bool | None = None
) -> WriterState:
    """A freshly constructed writer: OPEN, empty, its timer armed if batching is effective (BW-3, BW-12)."""
    cfg = writer_config(config, kind, enabled=enabled)
    return _fresh(cfg, now_ms, immutables.Map())


def initial_for(cfg: WriterConfig, now_ms: int = 0) -> WriterState:
    """A fresh writer from already-resolved settings (the engine's entry point) (BW-3, BW-12)."""
    return _fresh(cfg, now_ms, immutables.Map())


def _fresh(cfg: WriterConfig, now_ms: int, entries: immutables.Map[Position, EntryView]) -> WriterState:
    return WriterState(
        config=cfg,
        status=WriterStatus.OPEN,
        buffer=(),
        bytes_size=0,
        timer_due_ms=now_ms + cfg.max_delay_ms if cfg.effective else None,
        in_flight=(),
        next_request_id=0,
        next_write_id=0,
        succeeded=0,
        failed=0,
        last_succeeded=-1,
        entries=entries,
        stats=FlushStats(),
    )


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AsyncAddData:
    """``asyncAddData(record)``: ``data`` is the serialized record (TransactionMetadataEntry or
    PendingAckMetadataEntry, by the writer's kind)."""

    data: bytes
    now_ms: int = 0


@dataclass(frozen=True, slots=True)
class TimerFired:
    now_ms: int


@dataclass(frozen=True, slots=True)
class AddEntryComplete:
    write_id: int
    position: Position


@dataclass(frozen=True, slots=True)
class AddEntryFailed:
    write_id: int
    error: str = "PersistenceError"
    message: str = ""


@dataclass(frozen=True, slots=True)
class Close:
    pass


@dataclass(frozen=True, slots=True)
class FinishClose:
    pass


@dataclass(frozen=True, slots=True)
class DeleteRecords:
    positions: tuple[BatchedPosition | Position, ...]


@dataclass(frozen=True, slots=True)
class SetBatchedWrite:
    """The PIP's run-time switch (``set-txn-tc-batch-log`` / ``set-txn-pending-ack-batch-log``)
    reaching one writer's executor.  Pulsar never merged it (BW-22)."""

    enabled: bool
    now_ms: int = 0


Command = (
    AsyncAddData
    | TimerFired
    | AddEntryComplete
    | AddEntryFailed
    | Close
    | FinishClose
    | DeleteRecords
    | SetBatchedWrite
)
Result = Ok[object] | Err
Step = tuple[WriterState, Result]

# The members the steps every record goes through read, as module constants: reading a member
# off its enum class goes through EnumType's __getattr__ hook on Python 3.11.
_OPEN: Final = WriterStatus.OPEN
_MAX_RECORDS: Final = FlushTrigger.MAX_RECORDS
_MAX_DELAY: Final = FlushTrigger.MAX_DELAY

# The updates of the steps every record goes through, called directly (persistent.evolver).
_BUFFERED: Final = evolver(WriterState, "buffer", "bytes_size", "next_request_id")
_ISSUED: Final = evolver(WriterState, "next_write_id", "in_flight")
_FLUSHED: Final = evolver(WriterState, "buffer", "bytes_size", "stats")
_TIMER: Final = evolver(WriterState, "timer_due_ms")
_ANSWERED: Final = evolver(WriterState, "in_flight")
_WRITTEN: Final = evolver(WriterState, "succeeded", "last_succeeded", "entries")
_ENTRIES: Final = evolver(WriterState, "entries")
_REMAINING: Final = evolver(EntryView, "remaining")


# --------------------------------------------------------------------------------------------
# Results and effects
# --------------------------------------------------------------------------------------------


@slot_init
@dataclass(frozen=True, slots=True)
class AddAccepted:
    request_id: int


@slot_init
@dataclass(frozen=True, slots=True)
class Flushed:
    records: int


@slot_init
@dataclass(frozen=True, slots=True)
class Completed:
    records: int


@dataclass(frozen=True, slots=True)
class CloseResult:
    status: WriterStatus


@dataclass(frozen=True, slots=True)
class BatchedWriteSwitched:
    was_effective: bool
    effective: bool


@dataclass(frozen=True, slots=True)
class Deleted:
    fully_deleted: tuple[Position, ...]


@slot_init
@dataclass(frozen=True, slots=True)
class AsyncAddEntry(Effect):
    """Write ``data`` as one ledger entry; answer with AddEntryComplete/Failed(``write_id``)."""

    write_id: int
    data: bytes
    request_ids: tuple[int, ...]
    batched: bool


@slot_init
@dataclass(frozen=True, slots=True)
class AddComplete(Effect):
    """The success callback of one request."""

    request_id: int
    position: BatchedPosition | Position


@dataclass(frozen=True, slots=True)
class AddFailed(Effect):
    """The failure callback of one request."""

    request_id: int
    error: DomainError


@dataclass(frozen=True, slots=True)
class ArmTimer(Effect):
    due_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer(Effect):
    pass


@dataclass(frozen=True, slots=True)
class FlushObserved(Effect):
    """One batch flush for the metrics: a trigger counter and one observation per histogram."""

    trigger: FlushTrigger
    records: int
    bytes_size: int
    delay_ms: int


@dataclass(frozen=True, slots=True)
class CursorDeleteEntry:
    """One entry of a cursor delete: ``ack_set`` None deletes the whole entry; otherwise it is
    ANDed into the entry's batch ack set (bit set = still present)."""

    position: Position
    ack_set: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class CursorDelete(Effect):
    entries: tuple[CursorDeleteEntry, ...]


# --------------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------------


def step(state: WriterState, command: Command) -> Step:
    """Apply one event on the writer's executor."""
    match command:
        case AsyncAddData():
            return async_add_data(state, command)
        case TimerFired():
            return timer_fired(state, command)
        case AddEntryComplete():
            return add_entry_complete(state, command)
        case AddEntryFailed():
            return add_entry_failed(state, command)
        case Close():
            return close(state)
        case FinishClose():
            return finish_close(state)
        case DeleteRecords():
            return delete_records(state, command)
        case SetBatchedWrite():
            return set_batched_write(state, command)
    raise TypeError(f"not a batched_log command: {command!r}")


def canonical_record(data: bytes, kind: LogKind) -> bytes | DomainError:
    """The record's canonical serialization, or the error that sizing it raises (BW-7).

    A record must parse as the kind's record type, carry its op and not look like an envelope:
    that is what Pulsar's serializer can size and serialize.
    """
    if is_batched(data):
        return ManagedLedgerIntercept("a record may not start with the batched-entry magic 0x0E01")
    # Fast path for the common, well-formed record: the runtime parser alone.  Anything it
    # rejects, or a record without its op, goes through the envelope codec for a located error.
    try:
        message = kind.record_type.FromString(data)
    except DecodeError:
        message = None
    if message is not None and data and data[0] != MAGIC >> 8 and message.HasField(kind.op_field):
        return message.SerializeToString(deterministic=True)
    try:
        decoded = decode_entry(data, kind)
    except InputError as exc:
        return ManagedLedgerIntercept(f"record cannot be serialized: {exc}")
    return encode_plain(decoded.records[0])


def async_add_data(state: WriterState, cmd: AsyncAddData) -> Step:
    """``asyncAddData`` on the executor (BW-4, BW-5, BW-6, BW-7, BW-8, BW-9, BW-10, BW-11).

    Closed writers reject at once; unserializable records fail alone; with batching off every
    record is its own entry; a record of at least ``max_size`` bytes flushes the buffer and is
    written alone; otherwise it is buffered and the count, then the size threshold is checked
    with the new record included.
    """
    cfg = state.config
    if state.status is not _OPEN:
        return state, Err(ManagedLedgerFenced(CLOSED_MESSAGE))
    record = canonical_record(cmd.data, cfg.kind)
    if isinstance(record, DomainError):
        return state, Err(record)
    request_id = state.next_request_id
    if not cfg.effective:
        state, write = _issue_write(evolve(state, next_request_id=request_id + 1), record, (request_id,), batched=False)
        return state, Ok(AddAccepted(request_id), (write,))
    if len(record) >= cfg.max_size:
        state = evolve(state, next_request_id=request_id + 1)
        effects: list[Effect] = []
        if state.buffer:
            state = _flush(state, FlushTrigger.LARGE_DATA, cmd.now_ms, effects)
        state, write = _issue_write(state, record, (request_id,), batched=False)
        effects.append(write)
        return state, Ok(AddAccepted(request_id), tuple(effects))
    state = _BUFFERED(
        state, (*state.buffer, Buffered(request_id, record, cmd.now_ms)), state.bytes_size + len(record), request_id + 1
    )
    effects = []
    if len(state.buffer) >= cfg.max_records:
        state = _flush(state, _MAX_RECORDS, cmd.now_ms, effects)
    elif state.bytes_size >= cfg.max_size:
        state = _flush(state, FlushTrigger.MAX_SIZE, cmd.now_ms, effects)
    return state, Ok(AddAccepted(request_id), tuple(effects))


def _issue_write(
    state: WriterState, data: bytes, request_ids: tuple[int, ...], *, batched: bool
) -> tuple[WriterState, AsyncAddEntry]:
    write = AsyncAddEntry(state.next_write_id, data, request_ids, batched)
    state = _ISSUED(state, state.next_write_id + 1, (*state.in_flight, InFlight(write.write_id, request_ids, batched)))
    return state, write


def _flush(state: WriterState, trigger: FlushTrigger, now_ms: int, effects: list[Effect]) -> WriterState:
    """Write the whole buffer as one batched entry, or fail it if the writer is closing (BW-13, BW-14, BW-19)."""
    buffer = state.buffer
    delay_ms = max(0, now_ms - buffer[0].added_ms)
    effects.append(FlushObserved(trigger, len(buffer), state.bytes_size, delay_ms))
    stats = state.stats.observe(trigger, len(buffer), state.bytes_size, delay_ms)
    state = _FLUSHED(state, (), 0, stats)
    if state.status is not _OPEN:
        error = ManagedLedgerFenced(CLOSED_MESSAGE)
        effects.extend(AddFailed(b.request_id, error) for b in buffer)
        return evolve(state, failed=state.failed + len(buffer))
    return _write_batch(state, buffer, effects)


def _write_batch(state: WriterState, buffer: tuple[Buffered, ...], effects: list[Effect]) -> WriterState:
    """One ledger write of ``buffer`` in the PIP-160 envelope, records in arrival order (BW-13)."""
    kind = state.config.kind
    data = encode_batch([kind.record_type.FromString(b.data) for b in buffer], kind)
    state, write = _issue_write(state, data, tuple(b.request_id for b in buffer), batched=True)
    effects.append(write)
    return state


def timer_fired(state: WriterState, cmd: TimerFired) -> Step:
    """The delay timer's executor task: flush a non-empty buffer, then re-arm unless closing (BW-12)."""
    due = state.timer_due_ms
    if due is None:
        return state, Err(NotAllowed("no timer is armed"))
    if cmd.now_ms < due:
        return state, Err(NotAllowed(f"timer is due at {due} ms, not {cmd.now_ms} ms"))
    effects: list[Effect] = []
    flushed = len(state.buffer)
    if state.buffer:
        state = _flush(state, _MAX_DELAY, cmd.now_ms, effects)
    if state.status is _OPEN:
        next_due = cmd.now_ms + state.config.max_delay_ms
        state = _TIMER(state, next_due)
        effects.append(ArmTimer(next_due))
    else:
        state = _TIMER(state, None)
    return state, Ok(Flushed(flushed), tuple(effects))


def _pop_write(state: WriterState, write_id: int) -> tuple[WriterState, InFlight]:
    # The managed ledger answers writes in the order they were issued; anything else is an
    # engine bug, not a domain event.
    if not state.in_flight or state.in_flight[0].write_id != write_id:
        head = state.in_flight[0].write_id if state.in_flight else None
        raise ValueError(f"write {write_id} answered out of order (oldest in flight: {head})")
    return _ANSWERED(state, state.in_flight[1:]), state.in_flight[0]


def add_entry_complete(state: WriterState, cmd: AddEntryComplete) -> Step:
    """The ledger wrote an entry: every record of it learns its position, in batch order (BW-15, BW-17)."""
    state, write = _pop_write(state, cmd.write_id)
    if cmd.position in state.entries:
        raise ValueError(f"position {cmd.position} was already written by this writer")
    n = len(write.request_ids)
    effects: tuple[Effect, ...]
    if write.batched:
        effects = tuple(
            AddComplete(rid, BatchedPosition(cmd.position.ledger_id, cmd.position.entry_id, n, i))
            for i, rid in enumerate(write.request_ids)
        )
    else:
        effects = (AddComplete(write.request_ids[0], cmd.position),)
    view = EntryView(n, write.batched, FrozenBitMap(range(n)))
    state = _WRITTEN(state, state.succeeded + n, write.request_ids[-1], state.entries.set(cmd.position, view))
    return state, Ok(Completed(n), effects)


def add_entry_failed(state: WriterState, cmd: AddEntryFailed) -> Step:
    """The ledger failed an entry: every record of it fails with that error, in batch order (BW-16)."""
    error = error_by_name(cmd.error)(cmd.message)
    state, write = _pop_write(state, cmd.write_id)
    effects = tuple(AddFailed(rid, error) for rid in write.request_ids)
    return evolve(state, failed=state.failed + len(write.request_ids)), Ok(Completed(0), effects)


def close(state: WriterState) -> Step:
    """``close()``'s compare-and-set (BW-3, BW-18): OPEN goes to CLOSING (batching effective, a
    :class:`FinishClose` task follows) or straight to CLOSED; closing twice is a no-op, and nothing
    leads back to OPEN."""
    if state.status is not WriterStatus.OPEN:
        return state, Ok(CloseResult(state.status))
    if not state.config.effective:
        return evolve(state, status=WriterStatus.CLOSED), Ok(CloseResult(WriterStatus.CLOSED))
    return evolve(state, status=WriterStatus.CLOSING), Ok(CloseResult(WriterStatus.CLOSING))


def finish_close(state: WriterState) -> Step:
    """The close task on the executor: fail what is buffered, cancel the timer, CLOSED (BW-3, BW-18)."""
    if state.status is not WriterStatus.CLOSING:
        return state, Err(NotAllowed(f"close task runs only while CLOSING, writer is {state.status.value}"))
    error = ManagedLedgerFenced(CLOSED_MESSAGE)
    effects: list[Effect] = [AddFailed(b.request_id, error) for b in state.buffer]
    if state.timer_due_ms is not None:
        effects.append(CancelTimer())
    state = evolve(
        state,
        status=WriterStatus.CLOSED,
        buffer=(),
        bytes_size=0,
        timer_due_ms=None,
        failed=state.failed + len(state.buffer),
    )
    return state, Ok(CloseResult(WriterStatus.CLOSED), tuple(effects))


def set_batched_write(state: WriterState, cmd: SetBatchedWrite) -> Step:
    """Turn batching on or off for this writer from the next record on (BW-22).

    Turning it off writes what is buffered as one batched entry first (no flush trigger is
    counted: none of the four applies) and cancels the timer; turning it on arms the timer.
    Entries already written stay readable either way, because every reader accepts both
    formats (BW-23).
    """
    if state.status is not WriterStatus.OPEN:
        return state, Err(ManagedLedgerFenced(CLOSED_MESSAGE))
    was = state.config.effective
    state = evolve(state, config=replace(state.config, enabled=cmd.enabled))
    now = state.config.effective
    effects: list[Effect] = []
    if was and not now:
        if state.buffer:
            buffer = state.buffer
            state = _write_batch(evolve(state, buffer=(), bytes_size=0), buffer, effects)
        if state.timer_due_ms is not None:
            effects.append(CancelTimer())
        state = evolve(state, timer_due_ms=None)
    elif now and not was:
        due = cmd.now_ms + state.config.max_delay_ms
        state = evolve(state, timer_due_ms=due)
        effects.append(ArmTimer(due))
    return state, Ok(BatchedWriteSwitched(was, now), tuple(effects))


def delete_records(state: WriterState, cmd: DeleteRecords) -> Step:
    """Delete records at batch-index level (BW-20, BW-21).

    A batched position deletes only its index (ack set: all of ``[0, batch size)`` but it); a
    plain position, or a batch of one, deletes the whole entry.  The entry is gone when no index
    is left.  Deleting an index twice is harmless; a position this writer did not write, or a
    batch size that is not the entry's, rejects the whole command.
    """
    removals: dict[Position, FrozenBitMap | list[int]] = {}  # the whole entry's bits, or indexes
    ack_sets: dict[Position, int | None] = {}
    for raw in cmd.positions:
        position = raw.position if isinstance(raw, BatchedPosition) else raw
        view = state.entries.get(position)
        if view is None:
            return state, Err(NotAllowed(f"{position} is not a live entry of this log"))
        whole = not isinstance(raw, BatchedPosition) or raw.batch_size == 1
        if not whole and isinstance(raw, BatchedPosition) and raw.batch_size != view.batch_size:
            return state, Err(NotAllowed(f"{raw}: the entry at {position} holds {view.batch_size} records"))
        if whole:
            removals[position] = view.remaining
            ack_sets[position] = None
            continue
        assert isinstance(raw, BatchedPosition)
        indexes = removals.setdefault(position, [])
        if isinstance(indexes, list):
            indexes.append(raw.batch_index)
        own = raw.ack_bits()
        if position not in ack_sets:
            ack_sets[position] = own
        elif (previous := ack_sets[position]) is not None:
            ack_sets[position] = previous & own
    entries = state.entries
    fully: list[Position] = []
    with entries.mutate() as mutable:
        for position, removed in removals.items():
            view = mutable[position]
            remaining = FrozenBitMap(
                view.remaining - (removed if isinstance(removed, FrozenBitMap) else FrozenBitMap(removed))
            )
            if remaining:
                mutable[position] = _REMAINING(view, remaining)
            else:
                del mutable[position]
                fully.append(position)
        entries = mutable.finish()
    deletes = tuple(CursorDeleteEntry(p, None if bits is None else bits_to_words(bits)) for p, bits in ack_sets.items())
    return _ENTRIES(state, entries), Ok(Deleted(tuple(fully)), (CursorDelete(deletes),))


# --------------------------------------------------------------------------------------------
# Reading and recovery
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplayedRecord:
    position: BatchedPosition | Position
    record: Message


def read_entry(
    kind: LogKind, position: Position, data: bytes, ack_set: Sequence[int] | None = None
) -> tuple[ReplayedRecord, ...]:
    """The live records of one entry, batched or plain, with the positions their writers got (BW-23, BW-24).

    ``ack_set`` is the cursor's batch ack set of the entry (bit set = still present); indexes
    whose bit is cleared were deleted and are skipped.  A batch of one record replays with the
    plain position, an empty batch yields nothing.
    """
    decoded = decode_entry(data, kind, where=str(position))
    if not decoded.batched:
        return (ReplayedRecord(position, decoded.records[0]),)
    n = decoded.batch_size
    if n == 0:
        return ()
    if n == 1:
        return (ReplayedRecord(position, decoded.records[0]),)
    present = None if ack_set is None else words_to_bits(ack_set)
    return tuple(
        ReplayedRecord(BatchedPosition(position.ledger_id, position.entry_id, n, i), record)
        for i, record in enumerate(decoded.records)
        if present is None or present >> i & 1
    )


@dataclass(frozen=True, slots=True)
class LoggedEntry(HashOnce):
    """One entry of the ledger as a reader sees it, with the cursor's view of it."""

    # The model checker interns ledgers of these: each new ledger is hashed with all its entries.
    __hash__ = HashOnce.__hash__

    position: Position
    data: bytes
    ack_set: tuple[int, ...] | None = None
    deleted: bool = False


def replay(kind: LogKind, log: Iterable[LoggedEntry]) -> tuple[ReplayedRecord, ...]:
    """Every live record of a ledger in log order; deleted entries and indexes are skipped (BW-23, BW-24)."""
    out: list[ReplayedRecord] = []
    for entry in log:
        if not entry.deleted:
            out.extend(read_entry(kind, entry.position, entry.data, entry.ack_set))
    return tuple(out)


# A live durable entry as a history's ``recover`` row spells it (spec/history.md, version 3):
# ``[position, bytes, ack_set]`` in spec.jsonvalues spellings (``[[3, 12], {"@bytes": "0e01..."}, null]``).
DurableEntry = tuple[Position, bytes, tuple[int, ...] | None]


def durable_entries(log: Iterable[LoggedEntry]) -> tuple[DurableEntry, ...]:
    """The live entries of ``log`` as a ``recover`` row carries them (deleted entries are dropped:
    a reader never returns them, BW-24)."""
    return tuple((entry.position, entry.data, entry.ack_set) for entry in log if not entry.deleted)


def logged_entries(data: Any, path: str = "$.log") -> tuple[LoggedEntry, ...]:
    """The entries a ``recover`` row's ``log`` spells (:func:`durable_entries`), for :func:`replay`;
    a bad spelling is a :class:`~spec.jsonvalues.JsonError` naming its JSON path."""
    from spec.jsonvalues import from_json

    entries = from_json(data, tuple[DurableEntry, ...], path)
    return tuple(LoggedEntry(position, payload, ack_set) for position, payload, ack_set in entries)


def recover(
    config: Config,
    log: Iterable[LoggedEntry],
    kind: LogKind = LogKind.TRANSACTION_LOG,
    now_ms: int = 0,
    enabled: bool | None = None,
) -> WriterState:
    """A writer reopened over an existing ledger (BW-25): the durable entries and their live
    indexes come back; buffered and in-flight records of the crashed writer do not."""
    return recover_for(writer_config(config, kind, enabled=enabled), log, now_ms)


def recover_for(cfg: WriterConfig, log: Iterable[LoggedEntry], now_ms: int = 0) -> WriterState:
    """:func:`recover` from already-resolved settings (the engine's entry point) (BW-25)."""
    entries: dict[Position, EntryView] = {}
    for entry in log:
        if entry.deleted:
            continue
        decoded = decode_entry(entry.data, cfg.kind, where=str(entry.position))
        n = decoded.batch_size
        if n == 0:
            continue
        remaining = FrozenBitMap(range(n))
        if entry.ack_set is not None and n > 1:
            bits = words_to_bits(entry.ack_set)
            remaining = FrozenBitMap(i for i in range(n) if bits >> i & 1)
        if remaining:
            entries[entry.position] = EntryView(n, decoded.batched, remaining)
    return _fresh(cfg, now_ms, immutables.Map(entries))


def sample_record(size: int, seq: int = 0, kind: LogKind = LogKind.TRANSACTION_LOG) -> bytes:
    """A valid record of exactly ``size`` serialized bytes (a NEW txn, or an ACK), for vectors,
    tests and benchmarks.  The smallest is 4 bytes; ``seq`` (< 128) tells records apart."""
    if not 0 <= seq < 128:
        raise ValueError("seq must be in [0, 128) so that it takes one byte")
    record_type: Any = kind.record_type
    # The padding field's cost per unit: 1 byte per string character, 2 per ack-set word.
    unit = 1 if kind is LogKind.TRANSACTION_LOG else 2
    for extra in range(0, 11):
        for pad in range(max(0, size // unit - 16), size // unit + 2):
            if kind is LogKind.TRANSACTION_LOG:
                message = record_type(metadata_op=0, txnid_least_bits=seq)
                if extra:
                    message.txnid_most_bits = (1 << (7 * extra)) - 1 if extra < 10 else (1 << 64) - 1
                if pad:
                    message.partitions.append("p" * (pad - 1))
            else:
                message = record_type(pending_ack_op=1, txnid_least_bits=seq)
                if extra:
                    message.txnid_most_bits = (1 << (7 * extra)) - 1 if extra < 10 else (1 << 64) - 1
                if pad:
                    meta = message.pending_ack_metadata.add(ledgerId=seq, entryId=0)
                    meta.ack_set.extend([1] * (pad - 1))
            data = encode_plain(message)
            if len(data) == size:
                return data
    raise ValueError(f"no {kind.value} record of exactly {size} bytes (the smallest is 4)")


# --------------------------------------------------------------------------------------------
# Vectors adapter
# --------------------------------------------------------------------------------------------


def _decode_init(config: Config, init: Mapping[str, Any]) -> WriterState:
    unknown = set(init) - {"kind", "now_ms", "enabled"}
    if unknown:
        raise KeyError(f"unknown init key(s) {', '.join(sorted(unknown))}; known: kind, now_ms, enabled")
    kind = LogKind[init.get("kind", "TRANSACTION_LOG")]
    return initial(config, kind, int(init.get("now_ms", 0)), init.get("enabled"))


# What a history's ``recover`` row of a writer states (history format version 5, spelled by
# :func:`recovery_inputs`, read by :func:`_decode_recover`): the writer's settings and the entries
# its recovery found, each ``[position, batch size, batched, the live batch indexes]``.
RecoveredEntry = tuple[Position, int, bool, tuple[int, ...]]


def recovery_inputs(state: WriterState, now_ms: int) -> dict[str, Any]:
    """What a ``recover`` row carries of a writer just recovered at ``now_ms`` (BW-25): its log kind,
    its PIP-160 switch and the live entries it holds, not their bytes (its owner's own ``recover``
    row carries those, and the owner's recovery decodes them)."""
    from spec.jsonvalues import to_json

    entries = [
        (position, view.batch_size, view.batched, tuple(view.remaining)) for position, view in state.entries.items()
    ]
    return {
        "kind": state.config.kind.name,
        "now_ms": now_ms,
        "enabled": state.config.enabled,
        "entries": to_json(tuple(sorted(entries))),
    }


def _decode_recover(config: Config, inputs: Mapping[str, Any]) -> WriterState:
    """A history's ``recover`` row of a writer (:func:`recovery_inputs`): the writer :func:`recover`
    builds over a log with exactly those live entries."""
    from spec.jsonvalues import from_json

    unknown = set(inputs) - {"kind", "now_ms", "enabled", "entries"}
    if unknown:
        raise KeyError(f"unknown recovery input(s) {sorted(unknown)}")
    kind_name = from_json(inputs.get("kind", "TRANSACTION_LOG"), str, "$.kind")
    if kind_name not in LogKind.__members__:
        raise ValueError(f"$.kind: {kind_name!r} is not a log kind; kinds are {', '.join(LogKind.__members__)}")
    kind = LogKind[kind_name]
    now_ms = from_json(inputs.get("now_ms", 0), int, "$.now_ms")
    enabled = from_json(inputs.get("enabled"), bool | None, "$.enabled")
    cfg = writer_config(config, kind, enabled=enabled)
    found: dict[Position, EntryView] = {}
    for position, size, batched, remaining in from_json(
        inputs.get("entries", []), tuple[RecoveredEntry, ...], "$.entries"
    ):
        if size < 1 or not remaining or any(not 0 <= i < size for i in remaining):
            raise ValueError(f"entry {position}: live indexes {list(remaining)} of a batch of {size}")
        found[position] = EntryView(size, batched, FrozenBitMap(remaining))
    return _fresh(cfg, now_ms, immutables.Map(found))


def _entry(state: WriterState, position: Position) -> EntryView | None:
    return state.entries.get(position)


def _buffered_requests(state: WriterState) -> tuple[int, ...]:
    return tuple(b.request_id for b in state.buffer)


def _in_flight(state: WriterState) -> tuple[tuple[int, ...], ...]:
    return tuple(w.request_ids for w in state.in_flight)


VECTORS = MachineVectors(
    name="batched_log",
    initial=_decode_init,
    recover=_decode_recover,
    recovery_rule="BW-25",
    step=step,
    commands={
        "async_add_data": AsyncAddData,
        "timer_fired": TimerFired,
        "add_entry_complete": AddEntryComplete,
        "add_entry_failed": AddEntryFailed,
        "close": Close,
        "finish_close": FinishClose,
        "delete_records": DeleteRecords,
        "set_batched_write": SetBatchedWrite,
    },
    observers={
        "status": lambda s: s.status,
        "effective_batching": lambda s: s.config.effective,
        "buffered_requests": _buffered_requests,
        "buffered_bytes": lambda s: s.bytes_size,
        "timer_due_ms": lambda s: s.timer_due_ms,
        "in_flight": _in_flight,
        "succeeded": lambda s: s.succeeded,
        "failed": lambda s: s.failed,
        "accepted": lambda s: s.next_request_id,
        "stats": lambda s: s.stats,
        "entry": _entry,
        "live_entries": lambda s: len(s.entries),
    },
)
