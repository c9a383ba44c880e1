"""The simulated broker: Pulsar's transaction machinery built from the reference machines.

Every decision is a ``step`` of a pure machine; this module carries out what the step returns:

* :class:`CoordinatorService` -- :mod:`reference.coordinator` over its transaction log
  (:class:`~reference.engine.record_log.RecordLog`, PIP-160 batching on or off).  It writes and
  deletes log records, sends END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION with the low watermark
  to the participants and feeds their answers back, re-runs ends the machine schedules, and ticks
  the timeout tracker every ``TIMEOUT_TRACKER_TICK_MS``.
* :class:`Partition` -- one topic partition: its managed ledger and :mod:`reference.buffer`.  The
  buffer assigns every entry's position; the engine writes the entry and checks the ledger agrees.
  Snapshot records go to the partition's snapshot ledger and are read back on load.
* :class:`SubscriptionService` -- a durable cursor on the partition, :mod:`reference.pending_ack`
  with its pending-ack log, the dispatcher, and (for Shared subscriptions) the delayed-delivery
  tracker :mod:`reference.delayed`.

Failure policy.  A machine's new state is adopted as soon as it steps (Pulsar's in-memory
structures move before the write completes, too).  When a write the step asked for fails, the
component is *reloaded from its durable state* -- exactly what a broker does when it fences or
unloads a topic or a coordinator whose ledger failed -- and the request fails with the ledger's
error.  A broker crash loses all memory; :meth:`Broker.restart` reloads every component from the
ledgers.  Requests that reach a component that is down are never answered (the client times out).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from reference import batched_log as bl
from reference import buffer as tb
from reference import coordinator as tc
from reference import delayed as dl
from reference import pending_ack as pa
from spec.config import END_TXN_RETRY_INTERVAL_MS, TIMEOUT_TRACKER_TICK_MS, Config
from spec.envelope import LogKind
from spec.errors import DomainError, RequestTimeout, ServiceUnitNotReady, error_by_name
from spec.pb import PulsarApi_pb2, PulsarTransactionMetadata_pb2
from spec.pb import TransactionBufferSnapshot_pb2 as snap_pb
from spec.pb import TransactionPendingAck_pb2 as pa_pb
from spec.result import Err, Ok
from spec.types import EARLIEST, AckType, MessageState, Position, Subscription, TxnAction, TxnID

from .ledger import InitialPosition, LedgerError, ManagedCursor, ManagedLedger
from .record_log import LogWriteFailed, RecordLog, RecordPosition
from .sim import Future, Simulation
from .storage import LedgerStore

__all__ = [
    "Broker",
    "BrokerError",
    "BrokerFaults",
    "ConsumerSlot",
    "CoordinatorService",
    "Delivered",
    "Partition",
    "StoredMessage",
    "SubscriptionService",
    "decode_entry",
    "encode_entry",
    "partition_name",
]

MAX_LOCAL_TXN_ID = "max_local_txn_id"  # the transaction log's managed-ledger property (TC-23)
MARKER_COMMIT = 21  # PulsarMarkers.proto MarkerType.TXN_COMMIT
MARKER_ABORT = 22  # MarkerType.TXN_ABORT
_SIZE = struct.Struct(">I")


class BrokerError(Exception):
    """A request failed with a domain error (its ``name`` is what the history records)."""

    def __init__(self, error: DomainError) -> None:
        super().__init__(str(error))
        self.error = error


def partition_name(topic: str, index: int) -> str:
    """Pulsar's partition naming: ``persistent://public/default/<topic>-partition-<i>``."""
    base = topic if "://" in topic else f"persistent://public/default/{topic}"
    return f"{base}-partition-{index}"


# --------------------------------------------------------------------------------------------
# Topic entries: [4-byte metadata size][MessageMetadata][payload], markers with marker_type.


@dataclass(frozen=True, slots=True)
class StoredMessage:
    entry: tb.LogEntry
    payload: bytes = b""
    deliver_at: int | None = None


def encode_entry(entry: tb.LogEntry, payload: bytes = b"", deliver_at: int | None = None,
                 publish_time: int = 0) -> bytes:
    meta = PulsarApi_pb2.MessageMetadata(producer_name="txnmodel", sequence_id=entry.position.entry_id,
                                         publish_time=publish_time)
    if entry.txn_id is not None:
        meta.txnid_most_bits = entry.txn_id.most_sig_bits
        meta.txnid_least_bits = entry.txn_id.least_sig_bits
    if entry.kind is tb.EntryKind.TXN_COMMIT:
        meta.marker_type = MARKER_COMMIT
    elif entry.kind is tb.EntryKind.TXN_ABORT:
        meta.marker_type = MARKER_ABORT
    if deliver_at is not None:
        meta.deliver_at_time = deliver_at
    raw = meta.SerializeToString()
    return _SIZE.pack(len(raw)) + raw + payload


def decode_entry(position: Position, data: bytes) -> StoredMessage:
    (size,) = _SIZE.unpack_from(data, 0)
    meta = PulsarApi_pb2.MessageMetadata()
    meta.ParseFromString(data[4:4 + size])
    txn = TxnID(meta.txnid_most_bits, meta.txnid_least_bits) if meta.HasField("txnid_most_bits") else None
    if meta.HasField("marker_type"):
        kind = tb.EntryKind.TXN_COMMIT if meta.marker_type == MARKER_COMMIT else tb.EntryKind.TXN_ABORT
    else:
        kind = tb.EntryKind.NORMAL if txn is None else tb.EntryKind.TXN_DATA
    deliver_at = meta.deliver_at_time if meta.HasField("deliver_at_time") else None
    return StoredMessage(tb.LogEntry(position, kind, txn), data[4 + size:], deliver_at)


def _snapshot_record(effect: Any) -> bytes:
    """The snapshot-topic record of a buffer snapshot effect: a one-byte tag and the proto."""
    if isinstance(effect, tb.WriteSnapshot):
        return b"S" + effect.snapshot.to_pb().SerializeToString()
    if isinstance(effect, tb.WriteSnapshotSegment):
        return b"G" + effect.segment.to_pb().SerializeToString()
    if isinstance(effect, tb.WriteSnapshotIndexes):
        return b"I" + effect.indexes.to_pb().SerializeToString()
    if isinstance(effect, tb.DeleteSnapshotSegment):
        return b"D" + _SIZE.pack(effect.sequence_id) + effect.topic_name.encode()
    if isinstance(effect, tb.ClearSnapshot):
        return b"C" + effect.topic_name.encode()
    raise TypeError(f"not a snapshot effect: {effect!r}")


def _snapshot_effect(data: bytes) -> Any:
    tag, body = data[:1], data[1:]
    if tag == b"S":
        s = snap_pb.TransactionBufferSnapshot()
        s.ParseFromString(body)
        return tb.WriteSnapshot(tb.TransactionBufferSnapshot.from_pb(s))
    if tag == b"G":
        g = snap_pb.TransactionBufferSnapshotSegment()
        g.ParseFromString(body)
        return tb.WriteSnapshotSegment(tb.TransactionBufferSnapshotSegment.from_pb(g))
    if tag == b"I":
        i = snap_pb.TransactionBufferSnapshotIndexes()
        i.ParseFromString(body)
        return tb.WriteSnapshotIndexes(tb.TransactionBufferSnapshotIndexes.from_pb(i))
    if tag == b"D":
        (seq,) = _SIZE.unpack_from(body, 0)
        return tb.DeleteSnapshotSegment(body[4:].decode(), seq)
    if tag == b"C":
        return tb.ClearSnapshot(body.decode())
    raise ValueError(f"unknown snapshot record tag {tag!r}")


def _read_all(ledger: ManagedLedger) -> list[tuple[Position, bytes]]:
    infos = ledger.ledgers()
    if not infos:
        return []
    return [(e.position, e.data) for e in ledger.read(Position(infos[0].ledger_id, 0), 1 << 62)]


def _fail(error: DomainError) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(BrokerError(error))
    return future


def _error_of(exc: BaseException) -> DomainError:
    if isinstance(exc, BrokerError):
        return exc.error
    if isinstance(exc, LogWriteFailed):
        return exc.error
    if isinstance(exc, LedgerError):
        return exc.domain_error()
    raise exc


def _all(futures: Sequence[Future[Any]]) -> Future[None]:
    """Completes when every future did; fails with the first failure (in list order)."""
    out: Future[None] = Future()
    remaining = [len(futures)]
    if not futures:
        out.set_result(None)
        return out

    def one(_: Future[Any]) -> None:
        remaining[0] -= 1
        if remaining[0] == 0:
            failed = next((f.error for f in futures if f.error is not None), None)
            if failed is not None:
                out.set_exception(failed)
            else:
                out.set_result(None)

    for future in futures:
        future.add_done_callback(one)
    return out


# --------------------------------------------------------------------------------------------
# The coordinator service


class CoordinatorService:
    """One transaction coordinator (id ``coordinator_id``) and its transaction log."""

    def __init__(self, broker: Broker, coordinator_id: int = 0) -> None:
        self.broker = broker
        self.sim = broker.sim
        self.config = broker.config
        self.coordinator_id = coordinator_id
        self.log_name = f"__transaction_log_{coordinator_id}"
        self.state: tc.CoordinatorState | None = None
        self.log: RecordLog | None = None
        self._positions: dict[int, RecordPosition] = {}
        self._doomed: set[int] = set()  # record ids deleted before their write completed
        self._waiters: dict[tuple[TxnID, TxnAction], list[Future[None]]] = {}
        self._epoch = 0
        self.loads = 0

    @property
    def ready(self) -> bool:
        return self.state is not None

    # -- lifecycle ------------------------------------------------------------------------------

    def load(self) -> bool:
        """Replay the transaction log into a Ready store (TC-21 .. TC-24); False if the read failed."""
        self._epoch += 1
        try:
            ledger = self.broker.store.open(self.log_name)
            log = RecordLog(self.sim, ledger, LogKind.TRANSACTION_LOG, self.config,
                            batching=self.broker.batching)
            replayed = log.replay()
            last = _read_all(ledger)
        except (LedgerError, LogWriteFailed):
            return False
        records: list[tuple[int, tc.TxnLogRecord]] = []
        self._positions = {}
        self._doomed = set()
        for rid, (position, message) in enumerate(replayed):
            assert isinstance(message, PulsarTransactionMetadata_pb2.TransactionMetadataEntry)
            records.append((rid, tc.TxnLogRecord.from_pb(message)))
            self._positions[rid] = position
        # TC-23: the sequence-id interceptor reads max_local_txn_id off the log's last entry, or the
        # managed-ledger property written before older ledgers were deleted.
        max_local = int(ledger.properties.get(MAX_LOCAL_TXN_ID, "-1"))
        for position, data in last[-1:]:
            for record in _decoded_records(LogKind.TRANSACTION_LOG, position, data):
                assert isinstance(record, PulsarTransactionMetadata_pb2.TransactionMetadataEntry)
                if record.HasField("max_local_txn_id"):
                    max_local = max(max_local, record.max_local_txn_id)
        self.log = log
        state, effects = tc.recover(self.config, self.coordinator_id, records, max_local)
        self.state = replace(state, next_record_id=max(state.next_record_id, len(records)))
        try:
            # Retention: ledgers every record of which is deleted go, once the sequence they carried
            # is kept where the next load finds it (TC-23).
            ledger.set_property(MAX_LOCAL_TXN_ID, str(self.state.sequence_id))
            ledger.delete_consumed_ledgers()
        except LedgerError:
            pass  # retention is best effort; the next load tries again
        self.loads += 1
        self._carry_out(effects, [])
        self._schedule_tick(self._epoch)
        # END_TXN requests kept across a reload are re-run, as Pulsar re-runs a failed end (TC-16).
        for txn_id, action in sorted(self._waiters):
            self._schedule_resume(tc.ScheduleResumeEndTxn(txn_id, action, False, END_TXN_RETRY_INTERVAL_MS),
                                  self._epoch)
        return True

    def crash(self) -> None:
        """Memory is gone: the store, buffered log records, waiting requests (never answered)."""
        self._epoch += 1
        if self.log is not None:
            self.log.crash()
        self.state = None
        self.log = None
        self._waiters = {}

    def _reload(self) -> None:
        """A log write failed: reload the store from its log.  Pulsar re-runs a failed end after
        ``END_TXN_RETRY_INTERVAL_MS`` on the same future (TC-16); here the reload's re-drive of every
        COMMITTING/ABORTING txn (TC-24) answers the END_TXN requests still waiting, so they are kept."""
        waiters = self._waiters
        self.crash()
        self._waiters = waiters
        self.broker.restart_later(self)

    def _schedule_tick(self, epoch: int) -> None:
        def tick() -> None:
            if epoch != self._epoch or self.state is None:
                return
            self._step(tc.Tick(self.sim.now))
            self._schedule_tick(epoch)

        self.sim.schedule(TIMEOUT_TRACKER_TICK_MS, tick)

    # -- stepping and effects -------------------------------------------------------------------

    def _step(self, command: Any) -> tuple[tc.Result, Future[None]]:
        """Step the machine and carry out its effects; the future completes when its writes did."""
        assert self.state is not None
        self.state, result = tc.step(self.state, command)
        writes: list[Future[None]] = []
        self._carry_out(result.effects, writes)
        return result, _all(writes)

    def _carry_out(self, effects: Iterable[Any], writes: list[Future[None]]) -> None:
        """Effects in order; a message or timer that follows a log write waits until the write is
        durable (Pulsar sends phase 2 only after COMMITTING/ABORTING is logged), and is dropped if it
        failed (the store reloads)."""
        epoch = self._epoch
        for effect in effects:
            if isinstance(effect, tc.AppendRecord):
                writes.append(self._append(effect))
            elif isinstance(effect, tc.DeleteRecords):
                # TC-9: a finished txn's records go only once its final record is durable.
                _after(_all(list(writes)), partial(self._delete, effect.record_ids))
            elif isinstance(effect, tc.EndTxnInTransactionBuffer):
                _after(_all(list(writes)), partial(self._end_in_participants, effect, epoch))
            elif isinstance(effect, tc.ScheduleResumeEndTxn):
                _after(_all(list(writes)), partial(self._schedule_resume, effect, epoch))
            # CloseTransactionLog: the simulation never closes a store on purpose.

    def _append(self, effect: tc.AppendRecord) -> Future[None]:
        assert self.log is not None
        done: Future[None] = Future()
        written = self.log.add(effect.record.to_pb().SerializeToString())
        rid, epoch = effect.record_id, self._epoch

        def complete(f: Future[RecordPosition]) -> None:
            if epoch != self._epoch:
                return
            if f.error is not None:
                done.set_exception(f.error)
                self._reload()  # the store's memory ran ahead of its log
                return
            self._positions[rid] = f.result()
            if rid in self._doomed:
                self._doomed.discard(rid)
                self._delete((rid,))
            done.set_result(None)

        written.add_done_callback(complete)
        return done

    def _delete(self, record_ids: Iterable[int]) -> None:
        assert self.log is not None
        known = []
        for rid in record_ids:
            position = self._positions.pop(rid, None)
            if position is None:
                self._doomed.add(rid)
            else:
                known.append(position)
        self.log.delete(known)

    def _schedule_resume(self, effect: tc.ScheduleResumeEndTxn, epoch: int) -> None:
        def resume() -> None:
            if epoch != self._epoch or self.state is None:
                return
            result, written = self._step(tc.ResumeEndTxn(effect.txn_id, effect.action, self.sim.now,
                                                         effect.is_timeout))
            self._settle(effect.txn_id, effect.action, result, written)

        self.sim.schedule(effect.delay_ms, resume)

    def _end_in_participants(self, effect: tc.EndTxnInTransactionBuffer, epoch: int) -> None:
        """Phase 2: END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION to every participant (TC-14)."""
        answers: list[Future[None]] = []
        for name in effect.partitions:
            answers.append(self.broker.end_txn_on_partition(name, effect.txn_id, effect.action,
                                                            effect.low_water_mark))
        for sub in effect.subscriptions:
            answers.append(self.broker.end_txn_on_subscription(sub, effect.txn_id, effect.action,
                                                               effect.low_water_mark))

        def all_answered(_: Future[None]) -> None:
            if epoch != self._epoch or self.state is None:
                return
            errors = tuple(_error_of(f.error).name for f in answers if f.error is not None)
            result, written = self._step(tc.EndTxnInTransactionBufferResult(
                effect.txn_id, effect.action, self.sim.now, effect.is_timeout, errors))
            self._settle(effect.txn_id, effect.action, result, written)

        _all([_quiet(a) for a in answers]).add_done_callback(all_answered)

    def _settle(self, txn_id: TxnID, action: TxnAction, result: tc.Result, written: Future[None]) -> None:
        """Answer the END_TXN requests waiting on ``txn_id`` once phase 3 decided (TC-15, TC-16)."""
        if isinstance(result, Err) and any(isinstance(e, tc.ScheduleResumeEndTxn) for e in result.effects):
            return  # re-run scheduled: the client keeps waiting
        if isinstance(result, Ok) and any(isinstance(e, tc.EndTxnInTransactionBuffer) for e in result.effects):
            return  # phase 2 re-sent: its answer settles
        key = (txn_id, action)
        waiters = self._waiters.pop(key, [])
        if not waiters:
            return

        def answer(w: Future[None]) -> None:
            if w.error is not None and isinstance(result, Ok):
                # The final record did not reach the log: the reload re-drives the end (TC-24).
                self._waiters.setdefault(key, []).extend(waiters)
                return
            for waiter in waiters:
                if isinstance(result, Err):
                    waiter.set_exception(BrokerError(result.error))
                else:
                    waiter.set_result(None)

        written.add_done_callback(answer)

    # -- requests from clients --------------------------------------------------------------------

    def _request(self, command: Any) -> Future[Any]:
        if self.state is None:
            return Future()  # down: never answered
        result, written = self._step(command)
        if isinstance(result, Err):
            return _fail(result.error)
        answer: Future[Any] = Future()
        value = result.value

        def done(w: Future[None]) -> None:
            if w.error is not None:
                answer.set_exception(BrokerError(_error_of(w.error)))
            else:
                answer.set_result(value)

        written.add_done_callback(done)
        return answer

    def new_txn(self, timeout_ms: int, owner: str | None = None) -> Future[TxnID]:
        return self._request(tc.NewTxn(timeout_ms, self.sim.now, owner))

    def add_partition(self, txn_id: TxnID, partition: str) -> Future[None]:
        return self._request(tc.AddPartitionToTxn(txn_id, (partition,), self.sim.now))

    def add_subscription(self, txn_id: TxnID, subscription: Subscription) -> Future[None]:
        return self._request(tc.AddSubscriptionToTxn(txn_id, (subscription,), self.sim.now))

    def end_txn(self, txn_id: TxnID, action: TxnAction) -> Future[None]:
        """END_TXN: answered only after phase 3 (or a non-retryable failure) (TC-13 .. TC-16)."""
        if self.state is None:
            return Future()
        waiter: Future[None] = Future()
        key = (txn_id, action)
        self._waiters.setdefault(key, []).append(waiter)
        result, written = self._step(tc.EndTxn(txn_id, action, self.sim.now))
        if isinstance(result, Err) and not any(isinstance(e, tc.ScheduleResumeEndTxn) for e in result.effects):
            self._waiters[key].remove(waiter)
            if not self._waiters[key]:
                del self._waiters[key]
            waiter.set_exception(BrokerError(result.error))
        else:
            self._settle(txn_id, action, result, written)
        return waiter


def _after(writes: Future[None], action: Callable[[], None]) -> None:
    """Run ``action`` once ``writes`` succeeded (at once if they already did); never if they failed."""
    if writes.done and writes.error is None:
        action()
    else:
        writes.add_done_callback(lambda w: action() if w.error is None else None)


def _quiet(future: Future[Any]) -> Future[None]:
    """A future that completes (successfully) when ``future`` does, whatever its outcome."""
    out: Future[None] = Future()
    future.add_done_callback(lambda _: out.set_result(None))
    return out


def _decoded_records(kind: LogKind, position: Position, data: bytes) -> list[Any]:
    return [r.record for r in bl.read_entry(kind, position, data)]


# --------------------------------------------------------------------------------------------
# Partitions


@dataclass
class Delivered:
    """A message handed to a consumer."""

    position: Position
    payload: bytes
    txn_id: TxnID | None
    deliver_at: int | None
    redelivery_count: int


class Partition:
    """One topic partition: managed ledger, transaction buffer, snapshot ledger, subscriptions."""

    def __init__(self, broker: Broker, name: str) -> None:
        self.broker = broker
        self.sim = broker.sim
        self.config = broker.config
        self.name = name
        self.state: tb.BufferState | None = None
        self.ledger: ManagedLedger | None = None
        self.snapshots: ManagedLedger | None = None
        self.messages: dict[Position, StoredMessage] = {}
        self.subscriptions: dict[str, SubscriptionService] = {}
        self._parked: list[tuple[bytes, int | None, Future[Position]]] = []
        self._epoch = 0

    @property
    def ready(self) -> bool:
        return self.state is not None

    def load(self) -> bool:
        """Load the topic: read its entries and snapshot records, recover the buffer (TB-1, TB-24)."""
        self._epoch += 1
        try:
            ledger = self.broker.store.open(self.name)
            snapshots = self.broker.store.open(f"__transaction_buffer_snapshot/{self.name}")
            entries = [decode_entry(p, d) for p, d in _read_all(ledger)]
            records = [_snapshot_effect(d) for _, d in _read_all(snapshots)]
        except LedgerError:
            return False
        self.ledger, self.snapshots = ledger, snapshots
        self.messages = {m.entry.position: m for m in entries}
        fresh = tb.initial(self.config, topic=self.name, ledger_id=ledger.ledgers()[-1].ledger_id, recovered=False)
        # The managed-ledger view the buffer reads: what the topic's ledger holds.
        view = replace(fresh, ledgers=ledger.ledgers(), entries=tuple(m.entry for m in entries),
                       snapshot_store=tb.recover(self.config, topic=self.name, ledgers=ledger.ledgers(),
                                                 entries=(), snapshot_records=records).snapshot_store)
        self.state, _ = tb.step(view, tb.StartRecovery())
        self._parked = []
        self._step(tb.CompleteRecovery())
        self._schedule_snapshot(self._epoch)
        for sub in self.subscriptions.values():
            if not sub.load():
                self.crash()  # a subscription could not read its logs: the topic is not loaded
                return False
        return True

    def crash(self) -> None:
        self._epoch += 1
        self.state = None
        self._parked = []
        for sub in self.subscriptions.values():
            sub.crash()

    def _reload(self) -> None:
        self.crash()
        self.broker.restart_later(self)

    # -- stepping ---------------------------------------------------------------------------------

    def _step(self, command: Any, payload: bytes = b"", deliver_at: int | None = None
              ) -> tuple[Ok[Any] | Err, bool]:
        """Step the buffer and write what it asks; returns the result and whether every write held."""
        assert self.state is not None and self.ledger is not None and self.snapshots is not None
        self.state, result = tb.step(self.state, command)
        return result, self._carry_out(result.effects, payload, deliver_at)

    def _carry_out(self, effects: Iterable[Any], payload: bytes = b"", deliver_at: int | None = None) -> bool:
        assert self.ledger is not None and self.snapshots is not None and self.state is not None
        for effect in effects:
            try:
                if isinstance(effect, tb.AppendEntry):
                    entry = effect.entry
                    body, when = b"", None
                    if entry.kind is tb.EntryKind.NORMAL or entry.kind is tb.EntryKind.TXN_DATA:
                        body, when = payload, deliver_at
                    written = self.ledger.append(encode_entry(entry, body, when, self.sim.now))
                    if written != entry.position:
                        raise AssertionError(f"{self.name}: the buffer placed {entry} but the ledger wrote "
                                             f"{written}")
                    self.messages[written] = StoredMessage(entry, body, when)
                    self._follow_roll_over()
                else:
                    self.snapshots.append(_snapshot_record(effect))
            except LedgerError:
                self._reload()
                return False
        return True

    def _follow_roll_over(self) -> None:
        """The managed ledger rolled over on its own (full ledger): tell the buffer's view."""
        assert self.ledger is not None and self.state is not None
        while self.ledger.ledgers()[-1].ledger_id > self.state.ledgers[-1].ledger_id:
            self.state, _ = tb.step(self.state, tb.RollOverLedger())

    def _changed(self) -> None:
        for sub in self.subscriptions.values():
            sub.dispatch()

    # -- requests ---------------------------------------------------------------------------------

    def publish(self, payload: bytes, txn_id: TxnID | None, deliver_at: int | None) -> Future[Position]:
        """A producer's send: a normal publish or ``appendBufferToTxn`` (TB-4 .. TB-9)."""
        if self.state is None:
            return Future()
        command: Any = tb.PublishMessage() if txn_id is None else tb.AppendBufferToTxn(txn_id)
        if isinstance(command, tb.AppendBufferToTxn) and self.state.status is not tb.BufferStatus.READY:
            # It may be parked (TB-4); remember the payload so the flush can write it.
            self._parked.append((payload, deliver_at, Future()))
            parked = self._parked[-1][2]
            result, held = self._step(command)
            if isinstance(result, Err):
                self._parked.pop()
                return _fail(result.error)
            if not held:
                return _fail(ServiceUnitNotReady(f"{self.name} is reloading"))
            if isinstance(result.value, tb.Queued) and self.state.status is tb.BufferStatus.FIRST_SNAPSHOTTING:
                self.sim.schedule(1, self._first_snapshot_done(self._epoch))
            return parked
        result, held = self._step(command, payload, deliver_at)
        if isinstance(result, Err):
            return _fail(result.error)
        if not held:
            return _fail(ServiceUnitNotReady(f"{self.name} is reloading after a write failure"))
        self._changed()
        return Future.completed(result.value)

    def _first_snapshot_done(self, epoch: int) -> Callable[[], None]:
        def done() -> None:
            if epoch != self._epoch or self.state is None:
                return
            if self.state.status is not tb.BufferStatus.FIRST_SNAPSHOTTING:
                return
            self.state, result = tb.step(self.state, tb.CompleteFirstSnapshot())
            self._flush_parked(result)

        return done

    def _flush_parked(self, result: Ok[Any] | Err) -> None:
        """Write the parked appends in order; each learns its position or its error (TB-4)."""
        assert isinstance(result, Ok)
        parked, self._parked = self._parked, []
        outcomes: tuple[tb.AppendOutcome, ...] = result.value or ()
        appends = [e for e in result.effects if isinstance(e, tb.AppendEntry)]
        others = [e for e in result.effects if not isinstance(e, tb.AppendEntry)]
        by_position = {e.entry.position: e for e in appends}
        ok = True
        for (payload, deliver_at, future), outcome in zip(parked, outcomes, strict=True):
            if outcome.position is None:
                future.set_exception(BrokerError(_named_error(outcome.error or "ServiceUnitNotReady")))
                continue
            if ok:
                ok = self._carry_out((by_position[outcome.position],), payload, deliver_at)
            if ok:
                future.set_result(outcome.position)
            else:
                future.set_exception(BrokerError(ServiceUnitNotReady(f"{self.name} is reloading")))
        if ok:
            ok = self._carry_out(others)
        if ok:
            self._changed()

    def end_txn(self, txn_id: TxnID, action: TxnAction, low_water_mark: int) -> Future[None]:
        """END_TXN_ON_PARTITION (TB-11 .. TB-14)."""
        if self.state is None:
            return _fail(ServiceUnitNotReady(f"topic {self.name} is not loaded"))
        command: Any = (tb.CommitTxn(txn_id, low_water_mark) if action is TxnAction.COMMIT
                        else tb.AbortTxn(txn_id, low_water_mark))
        result, held = self._step(command)
        if isinstance(result, Err):
            return _fail(result.error)
        if not held:
            return _fail(ServiceUnitNotReady(f"{self.name} is reloading after a write failure"))
        self._changed()
        return Future.completed(None)

    def _schedule_snapshot(self, epoch: int) -> None:
        """The periodic snapshot timer, ``transactionBufferSnapshotMinTimeInMillis`` (TB-21 decides)."""

        def fire() -> None:
            if epoch != self._epoch or self.state is None:
                return
            self._step(tb.TakeSnapshot())
            self._schedule_snapshot(epoch)

        self.sim.schedule(self.config.transaction_buffer_snapshot_min_time_in_millis, fire)


def _named_error(name: str) -> DomainError:
    return error_by_name(name)(name)


# --------------------------------------------------------------------------------------------
# Subscriptions: cursor, pending ack, dispatcher, delayed tracker


@dataclass
class ConsumerSlot:
    consumer_id: int
    queue: list[Position] = field(default_factory=list)
    unacked: set[Position] = field(default_factory=set)
    waiting: list[Future[Delivered | None]] = field(default_factory=list)


_SUB_TYPES = {"Exclusive": pa.SubType.Exclusive, "Shared": pa.SubType.Shared, "Failover": pa.SubType.Failover,
              "Key_Shared": pa.SubType.Key_Shared}


class SubscriptionService:
    """One subscription of a partition."""

    def __init__(self, partition: Partition, name: str, sub_type: str, initial_position: InitialPosition) -> None:
        self.partition = partition
        self.broker = partition.broker
        self.sim = partition.sim
        self.config = partition.config
        self.name = name
        self.sub_type = _SUB_TYPES[sub_type]
        self.initial_position = initial_position
        self.state: pa.PendingAckState | None = None
        self.tracker: Any = None
        self.cursor: ManagedCursor | None = None
        self.log: RecordLog | None = None
        self.consumers: dict[int, ConsumerSlot] = {}
        self.read_after: Position = EARLIEST
        self.replay: set[Position] = set()
        self.redeliveries: dict[Position, int] = {}
        self._positions: dict[int, RecordPosition] = {}
        self._trimmed = -1
        self._queued: list[Future[None]] = []
        self._rr = 0
        self._epoch = 0

    @property
    def ready(self) -> bool:
        return self.state is not None

    @property
    def delayed_enabled(self) -> bool:
        return self.config.delayed_delivery_enabled and self.sub_type in (pa.SubType.Shared, pa.SubType.Key_Shared)

    # -- lifecycle --------------------------------------------------------------------------------

    def load(self) -> bool:
        """Open the cursor and replay the pending-ack log over it (PA-17 .. PA-20)."""
        self._epoch += 1
        ledger = self.partition.ledger
        assert ledger is not None
        self._positions = {}
        self._trimmed = -1
        try:
            self.cursor = ledger.open_cursor(self.name, self.initial_position)
            view = pa.CursorView(self.cursor.mark_delete_position, frozenset(self.cursor.individually_deleted()))
            if not self.broker.store.exists(self.log_name):
                # PA-17: no txn ever acked here, so no pending-ack log: the handle starts lazily.
                self.log = None
                self.state = pa.initial(self.config, sub_type=self.sub_type, cursor=view)
            else:
                records = self._open_log()
                self.state = pa.recover(self.config, records, cursor=view, sub_type=self.sub_type,
                                        next_record_id=len(records))
                assert self.log is not None
                self.log.ledger.delete_consumed_ledgers()  # retention of the pending-ack log (PA-16)
        except (LedgerError, LogWriteFailed):
            self.state = None
            return False
        self.tracker = dl.initial(self.config) if self.delayed_enabled else None
        self.read_after = self.cursor.mark_delete_position
        self.replay = set()
        self._queued = []
        for slot in self.consumers.values():
            slot.queue.clear()
            slot.unacked.clear()
        return True

    @property
    def log_name(self) -> str:
        return f"{self.partition.name}-{self.name}__transaction_pending_ack"

    def _open_log(self) -> list[tuple[int, pa.PendingAckRecord]]:
        """Open (create) the pending-ack log and read its live records, numbered in log order."""
        log = RecordLog(self.sim, self.broker.store.open(self.log_name), LogKind.PENDING_ACK, self.config,
                        batching=self.broker.batching)
        records = []
        self._positions = {}
        for rid, (position, message) in enumerate(log.replay()):
            assert isinstance(message, pa_pb.PendingAckMetadataEntry)
            records.append((rid, pa.PendingAckRecord.from_pb(message)))
            self._positions[rid] = position
        self.log = log
        return records

    def crash(self) -> None:
        self._epoch += 1
        if self.log is not None:
            self.log.crash()
        self.state = None
        self.log = None
        self.consumers = {}
        self._queued = []
        self.redeliveries = {}  # Pulsar's InMemoryRedeliveryTracker does not survive the broker

    # -- stepping ---------------------------------------------------------------------------------

    def _step(self, command: Any) -> tuple[Ok[Any] | Err, Future[None]]:
        assert self.state is not None
        self.state, result = pa.step(self.state, command)
        return result, self._carry_out(result.effects)

    def _carry_out(self, effects: Iterable[Any]) -> Future[None]:
        assert self.cursor is not None
        writes: list[Future[None]] = []
        for effect in effects:
            if isinstance(effect, pa.AppendPendingAckRecord):
                writes.append(self._append(effect))
            elif isinstance(effect, pa.TrimPendingAckLog):
                _after(_all(list(writes)), partial(self._trim, effect.record_id))
            elif isinstance(effect, pa.CursorIndividualAck | pa.CursorCumulativeAck
                            | pa.RedeliverUnacknowledgedMessages):
                # Pulsar touches the cursor (or redelivers) only once the pending-ack record is logged.
                _after(_all(list(writes)), partial(self._cursor_effect, effect, self._epoch))
            elif isinstance(effect, pa.InitPendingAckStore):
                self.sim.schedule(1, self._init_done(self._epoch))
            elif isinstance(effect, pa.ScheduleInitRetry):
                self.sim.schedule(effect.delay_ms, self._retry_later(self._epoch))
        return _all(writes)

    def _cursor_effect(self, effect: Any, epoch: int) -> None:
        if epoch != self._epoch or self.cursor is None:
            return
        if isinstance(effect, pa.CursorIndividualAck):
            whole = [a.position for a in effect.positions if a.ack_set is None]
            sets = {a.position: a.ack_set for a in effect.positions if a.ack_set is not None}
            if whole:
                self.cursor.delete(whole)
            if sets:
                self.cursor.delete(list(sets), sets)
            self._acked(a.position for a in effect.positions)
        elif isinstance(effect, pa.CursorCumulativeAck):
            self.cursor.mark_delete(effect.position.position)
            self._acked_upto(effect.position.position)
        else:
            self.replay.update(effect.positions)
            for slot in self.consumers.values():
                slot.unacked.difference_update(effect.positions)
            self.dispatch()

    def _append(self, effect: pa.AppendPendingAckRecord) -> Future[None]:
        assert self.log is not None
        done: Future[None] = Future()
        rid, epoch = effect.record_id, self._epoch

        def complete(f: Future[RecordPosition]) -> None:
            if epoch != self._epoch:
                return
            if f.error is not None:
                done.set_exception(f.error)
                self._reload()
                return
            self._positions[rid] = f.result()
            if rid <= self._trimmed:
                self._trim(self._trimmed)
            done.set_result(None)

        self.log.add(effect.record.to_pb().SerializeToString()).add_done_callback(complete)
        return done

    def _trim(self, record_id: int) -> None:
        """PA-16: the pending-ack log is deleted up to ``record_id``."""
        assert self.log is not None
        self._trimmed = max(self._trimmed, record_id)
        doomed = sorted(r for r in self._positions if r <= self._trimmed)
        self.log.delete([self._positions.pop(r) for r in doomed])

    def _reload(self) -> None:
        # The pending-ack handle's memory ran ahead of its log: reload the whole topic.
        self.partition._reload()

    def _init_done(self, epoch: int) -> Callable[[], None]:
        def done() -> None:
            if epoch != self._epoch or self.state is None:
                return
            try:
                if self.log is None:
                    self._open_log()  # a brand-new log: nothing to replay
            except (LedgerError, LogWriteFailed):
                self._step(pa.PendingAckInitFailed(retryable=True))
                return
            result, written = self._step(pa.PendingAckInitComplete())
            queued, self._queued = self._queued, []
            outcomes = result.value if isinstance(result, Ok) else ()
            for waiter, outcome in zip(queued, outcomes, strict=True):
                self._answer(waiter, outcome, written)
            self.dispatch()

        return done

    def _retry_later(self, epoch: int) -> Callable[[], None]:
        def retry() -> None:
            if epoch == self._epoch and self.state is not None:
                self._step(pa.RetryPendingAckInit())

        return retry

    @staticmethod
    def _answer(waiter: Future[None], outcome: Ok[Any] | Err, written: Future[None]) -> None:
        if isinstance(outcome, Err):
            waiter.set_exception(BrokerError(outcome.error))
            return

        def done(w: Future[None]) -> None:
            if w.error is not None:
                waiter.set_exception(BrokerError(_error_of(w.error)))
            else:
                waiter.set_result(None)

        written.add_done_callback(done)

    # -- consumers and dispatch -------------------------------------------------------------------

    def add_consumer(self, consumer_id: int) -> None:
        self.consumers.setdefault(consumer_id, ConsumerSlot(consumer_id))
        self.dispatch()

    def remove_consumer(self, consumer_id: int) -> None:
        slot = self.consumers.pop(consumer_id, None)
        if slot is not None:
            self.replay.update(slot.unacked)
            for waiter in slot.waiting:
                waiter.set_result(None)
            self.dispatch()

    def _active(self) -> list[ConsumerSlot]:
        slots = sorted(self.consumers.values(), key=lambda s: s.consumer_id)
        if self.sub_type in (pa.SubType.Exclusive, pa.SubType.Failover):
            return slots[:1]
        return slots

    def _message_state(self, position: Position) -> MessageState:
        assert self.state is not None
        return pa.message_state(self.state, position)

    def dispatch(self) -> None:
        """Hand every readable message to a consumer (TB-15 .. TB-17; the pending-ack filter of 5.9).

        What may be read is the buffer's decision (:func:`reference.buffer.dispatch`: delivered
        messages, and markers / aborted messages to acknowledge instead); whether a message is
        still PENDING is the pending ack's (:func:`reference.pending_ack.message_state`); whether a
        delayed message waits is the tracker's (:class:`reference.delayed.AddMessage`)."""
        buffer = self.partition.state
        if self.state is None or buffer is None:
            return
        active = self._active()
        if not active:
            return
        read = tb.dispatch(buffer, self.read_after)
        if read.auto_acked:
            self._step(pa.NormalAck(AckType.INDIVIDUAL, tuple(pa.AckedPosition(p) for p in read.auto_acked)))
        seen = [*read.delivered, *read.auto_acked]
        if seen:
            self.read_after = max(self.read_after, *seen)
        fresh = []
        for position in read.delivered:
            message = self.partition.messages[position]
            if self.tracker is not None and message.deliver_at is not None:
                self.tracker, added = dl.step(self.tracker, dl.AddMessage(position.ledger_id, position.entry_id,
                                                                          message.deliver_at, self.sim.now))
                self._tracker_effects(added)
                if isinstance(added, Ok) and added.value:
                    continue
            fresh.append(position)
        if self.tracker is not None:
            self.tracker, due = dl.step(self.tracker, dl.GetScheduledMessages(1 << 30, self.sim.now))
            self._tracker_effects(due)
            if isinstance(due, Ok):
                self.replay.update(due.value)
        outgoing = sorted(self.replay) + fresh
        self.replay = set()
        for position in outgoing:
            if self._message_state(position) is not MessageState.PENDING:
                continue  # acked, or pending in a txn: filtered (5.9)
            if any(position in s.unacked for s in self.consumers.values()):
                continue
            slot = active[self._rr % len(active)]
            self._rr += 1
            slot.unacked.add(position)
            slot.queue.append(position)
        for slot in active:
            self._serve(slot)

    def _tracker_effects(self, result: Ok[Any] | Err) -> None:
        """Carry out the delayed tracker's timer (DD rules decide when); its snapshots live in its state."""
        epoch = self._epoch
        for effect in result.effects:
            if isinstance(effect, dl.ScheduleTimer):
                target = effect.target

                def fire(target: int = target) -> None:
                    if epoch == self._epoch and self.tracker is not None:
                        self.tracker, fired = dl.step(self.tracker, dl.TimerFired(target, self.sim.now))
                        self._tracker_effects(fired)
                        self.dispatch()

                self.sim.schedule(max(0, effect.delay_ms), fire)

    def _serve(self, slot: ConsumerSlot) -> None:
        while slot.waiting and slot.queue:
            position = slot.queue.pop(0)
            waiter = slot.waiting.pop(0)
            waiter.set_result(self._delivered(position))

    def _delivered(self, position: Position) -> Delivered:
        message = self.partition.messages[position]
        count = self.redeliveries.get(position, 0)
        self.redeliveries[position] = count + 1
        return Delivered(position, message.payload, message.entry.txn_id, message.deliver_at, count)

    def receive(self, consumer_id: int, wait_ms: int) -> Future[Delivered | None]:
        """The next message for the consumer, or None if none arrives within ``wait_ms``."""
        slot = self.consumers.get(consumer_id)
        if slot is None or self.state is None:
            return Future()
        self.dispatch()
        if slot.queue:
            return Future.completed(self._delivered(slot.queue.pop(0)))
        waiter: Future[Delivered | None] = Future()
        slot.waiting.append(waiter)

        def expire() -> None:
            if waiter in slot.waiting:
                slot.waiting.remove(waiter)
                waiter.set_result(None)

        self.sim.schedule(wait_ms, expire)
        return waiter

    def _acked(self, positions: Iterable[Position]) -> None:
        for position in positions:
            for slot in self.consumers.values():
                slot.unacked.discard(position)
                if position in slot.queue:
                    slot.queue.remove(position)

    def _acked_upto(self, position: Position) -> None:
        for slot in self.consumers.values():
            slot.unacked = {p for p in slot.unacked if p > position}
            slot.queue = [p for p in slot.queue if p > position]

    def acknowledge(self, consumer_id: int, position: Position, txn_id: TxnID | None, cumulative: bool
                    ) -> Future[None]:
        """CommandAck, with or without a txn (PA-4 .. PA-11)."""
        if self.state is None:
            return Future()
        acked = (pa.AckedPosition(position),)
        command: Any
        if txn_id is None:
            command = pa.NormalAck(AckType.CUMULATIVE if cumulative else AckType.INDIVIDUAL, acked)
        elif cumulative:
            command = pa.CumulativeAck(txn_id, acked)
        else:
            command = pa.IndividualAck(txn_id, acked)
        result, written = self._step(command)
        if isinstance(result, Err):
            return _fail(result.error)
        waiter: Future[None] = Future()
        if isinstance(result.value, pa.Queued):
            self._queued.append(waiter)
            return waiter
        if txn_id is not None and not isinstance(result.value, pa.Ignored):
            # 5.9: a txn-acked message leaves the consumer's unacked set at once.
            slot = self.consumers.get(consumer_id)
            if slot is not None:
                if cumulative:
                    slot.unacked = {p for p in slot.unacked if p > position}
                else:
                    slot.unacked.discard(position)
        self._answer(waiter, result, written)
        self.dispatch()
        return waiter

    def redeliver(self, consumer_id: int, positions: Sequence[Position] | None) -> Future[None]:
        """redeliverUnacknowledgedMessages / negative acks: the consumer's unacked go back to the dispatcher."""
        slot = self.consumers.get(consumer_id)
        if slot is None or self.state is None:
            return Future()
        chosen = set(slot.unacked) if positions is None else set(positions) & slot.unacked
        slot.unacked -= chosen
        slot.queue = [p for p in slot.queue if p not in chosen]
        self.replay |= chosen
        self.dispatch()
        return Future.completed(None)

    def end_txn(self, txn_id: TxnID, action: TxnAction, low_water_mark: int) -> Future[None]:
        """END_TXN_ON_SUBSCRIPTION (PA-12 .. PA-14)."""
        if self.state is None:
            return _fail(ServiceUnitNotReady(f"subscription {self.name} is not loaded"))
        command: Any = (pa.CommitTxn(txn_id, low_water_mark) if action is TxnAction.COMMIT
                        else pa.AbortTxn(txn_id, low_water_mark))
        result, written = self._step(command)
        if isinstance(result, Err):
            return _fail(result.error)
        waiter: Future[None] = Future()
        if isinstance(result.value, pa.Queued):
            self._queued.append(waiter)
        else:
            self._answer(waiter, result, written)
        self.dispatch()
        return waiter


# --------------------------------------------------------------------------------------------
# The broker


@dataclass
class BrokerFaults:
    """Probabilities of broker-side faults in the END_TXN path (each drawn from the run's rng)."""

    participant_timeout: float = 0.0  # an END_TXN_ON_* request times out (RequestTimeout, retryable)


class Broker:
    """One broker owning a coordinator and a set of partitioned topics.

    ``topics`` maps a topic name to its number of partitions.  All requests are methods returning
    :class:`~reference.engine.sim.Future`; a component that is down never answers.
    """

    def __init__(self, sim: Simulation, store: LedgerStore, config: Config, *, topics: dict[str, int],
                 batching: bool = False, faults: BrokerFaults | None = None,
                 restart_delay_ms: int = 50) -> None:
        self.sim = sim
        self.store = store
        self.config = config
        self.batching = batching
        self.faults = faults or BrokerFaults()
        self.restart_delay_ms = restart_delay_ms
        self.topics = dict(topics)
        self.coordinator = CoordinatorService(self)
        self.partitions: dict[str, Partition] = {}
        for topic, count in topics.items():
            for i in range(count):
                name = partition_name(topic, i)
                self.partitions[name] = Partition(self, name)
        self.up = False
        self.crashes = 0
        self._restarting: set[int] = set()
        self.start()

    def start(self) -> None:
        self.up = True
        if not self.coordinator.load():
            self.restart_later(self.coordinator)
        for partition in self.partitions.values():
            if not partition.load():
                self.restart_later(partition)

    def crash(self) -> None:
        """Power off: every component's memory is lost; ledgers keep what they acknowledged."""
        self.up = False
        self.crashes += 1
        self.coordinator.crash()
        for partition in self.partitions.values():
            partition.crash()
        self.store.close_all()

    def restart(self) -> None:
        self.start()

    def restart_later(self, component: CoordinatorService | Partition) -> None:
        """Reload a component after ``restart_delay_ms`` (retried while its ledger reads fail)."""
        key = id(component)
        if key in self._restarting:
            return
        self._restarting.add(key)

        def again() -> None:
            self._restarting.discard(key)
            if self.up and not component.ready and not component.load():
                self.restart_later(component)

        self.sim.schedule(self.restart_delay_ms, again)

    def partition(self, name: str) -> Partition:
        found = self.partitions.get(name)
        if found is None:
            raise KeyError(f"no partition {name!r}; partitions are {sorted(self.partitions)}")
        return found

    def subscription(self, partition: str, name: str) -> SubscriptionService | None:
        return self.partition(partition).subscriptions.get(name)

    def subscribe(self, partition: str, name: str, sub_type: str, initial_position: InitialPosition,
                  consumer_id: int) -> Future[None]:
        if not self.up:
            return Future()
        part = self.partition(partition)
        if not part.ready:
            return Future()
        sub = part.subscriptions.get(name)
        if sub is None:
            sub = SubscriptionService(part, name, sub_type, initial_position)
            if not sub.load():
                return Future()
            part.subscriptions[name] = sub
        elif not sub.ready:
            return Future()
        sub.add_consumer(consumer_id)
        return Future.completed(None)

    # -- the END_TXN path between the coordinator and the participants ------------------------

    def _participant(self, call: Callable[[], Future[None]]) -> Future[None]:
        """An END_TXN_ON_* request from the coordinator's TB client, with its own latency and timeout."""
        answer: Future[None] = Future()
        if self.faults.participant_timeout and self.sim.rng.random() < self.faults.participant_timeout:
            self.sim.schedule(self.config.transaction_buffer_client_operation_timeout_in_mills,
                              lambda: answer.set_exception(BrokerError(RequestTimeout("TB client timeout"))))
            return answer

        def deliver() -> None:
            call().add_done_callback(lambda f: answer.set_exception(f.error) if f.error is not None
                                     else answer.set_result(None))

        self.sim.schedule(1, deliver)
        return answer

    def end_txn_on_partition(self, name: str, txn_id: TxnID, action: TxnAction, lwm: int) -> Future[None]:
        part = self.partitions.get(name)
        if part is None:
            return Future.completed(None)  # 2.4: no such topic ledger -> success
        return self._participant(lambda: part.end_txn(txn_id, action, lwm))

    def end_txn_on_subscription(self, sub: Subscription, txn_id: TxnID, action: TxnAction, lwm: int) -> Future[None]:
        part = self.partitions.get(sub.topic)
        if part is None:
            return Future.completed(None)

        def call() -> Future[None]:
            if not part.ready:
                return _fail(ServiceUnitNotReady(f"topic {sub.topic} is not loaded"))
            found = part.subscriptions.get(sub.subscription)
            if found is None:
                return Future.completed(None)  # 2.4: subscription absent -> success
            return found.end_txn(txn_id, action, lwm)

        return self._participant(call)


