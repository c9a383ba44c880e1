"""The simulated broker: Pulsar's transaction machinery built from the reference machines.

Every decision is a ``step`` of a pure machine; this module carries out what the step returns:

* :class:`CoordinatorService` -- :mod:`reference.coordinator` over its transaction log
  (:class:`~reference.engine.record_log.RecordLog`, PIP-160 batching on or off).  It writes and
  deletes log records, sends END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION with the low watermark
  to the participants and feeds their answers back, re-runs ends the machine schedules, and ticks
  the timeout tracker every ``TIMEOUT_TRACKER_TICK_MS``.
* :class:`Partition` -- one topic partition: its managed ledger and :mod:`reference.buffer`.  The
  buffer assigns every entry's position; the engine writes the entry and checks the ledger agrees.
  Snapshot records are keyed Avro messages on the namespace's system topics, read back on load;
  consumed ledgers go when the buffer agrees (TB-23).
* :class:`SubscriptionService` -- a durable cursor on the partition, :mod:`reference.pending_ack`
  with its pending-ack log, the dispatcher (Key_Shared routing, batch entries handed out per
  index), and for Shared and Key_Shared subscriptions the delayed-delivery service
  (:mod:`reference.engine.delayed_service` over :mod:`reference.delayed`).

Every machine step and every load is reported to ``Broker.observer`` when one is set (the
machine-level history the bulk checker replays against the reference machines).

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
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import immutables
from google.protobuf.message import DecodeError
from prometheus_client import CollectorRegistry

from reference import batched_log as bl
from reference import buffer as tb
from reference import coordinator as tc
from reference import delayed as dl
from reference import pending_ack as pa
from spec import snapshot_avro
from spec.config import END_TXN_RETRY_INTERVAL_MS, TIMEOUT_TRACKER_TICK_MS, Config
from spec.envelope import LogKind
from spec.errors import (
    DomainError,
    NotAllowed,
    RequestTimeout,
    ServiceUnitNotReady,
    SubscriptionBusy,
    error_by_name,
)
from spec.history import object_id
from spec.jsonvalues import to_json
from spec.pb import PulsarApi_pb2, PulsarTransactionMetadata_pb2
from spec.pb import TransactionPendingAck_pb2 as pa_pb
from spec.result import Err, Ok
from spec.types import (
    EARLIEST,
    AckType,
    MessageState,
    Position,
    Subscription,
    TxnAction,
    TxnID,
    previous_position,
    words_to_bits,
)

from .bufferedwriter_metrics import BufferedWriterMetrics
from .delayed_service import DelayedDeliveryService
from .ledger import InitialPosition, LedgerError, ManagedCursor, ManagedLedger
from .memory_ledger import consumed_ledgers
from .record_log import LogWriteFailed, RecordLog, RecordPosition
from .sim import Future, Simulation
from .storage import LedgerStore

if TYPE_CHECKING:
    from .recorder import MachineObserver

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
class BatchedMessage:
    """One message of a batch entry: its ``SingleMessageMetadata`` frame and payload."""

    payload: bytes
    partition_key: str | None = None


@dataclass(frozen=True, slots=True)
class MessageBody:
    """What a producer's send carries besides the transaction: one message, or a batch of them."""

    payload: bytes = b""
    deliver_at: int | None = None
    partition_key: str | None = None
    batch: tuple[BatchedMessage, ...] | None = None  # a batch entry (num_messages_in_batch = len)


NO_BODY = MessageBody()


@dataclass(frozen=True, slots=True)
class StoredMessage:
    entry: tb.LogEntry
    payload: bytes = b""
    deliver_at: int | None = None
    partition_key: str | None = None
    batch: tuple[BatchedMessage, ...] | None = None

    @property
    def batch_size(self) -> int:
        return 1 if self.batch is None else len(self.batch)


def encode_batch_payload(messages: Sequence[BatchedMessage]) -> bytes:
    """A batch entry's payload: per message ``[4-byte size][SingleMessageMetadata][payload]``."""
    out = bytearray()
    for index, message in enumerate(messages):
        single = PulsarApi_pb2.SingleMessageMetadata(payload_size=len(message.payload), sequence_id=index)
        if message.partition_key is not None:
            single.partition_key = message.partition_key
        meta = single.SerializeToString()
        out += _SIZE.pack(len(meta)) + meta + message.payload
    return bytes(out)


def decode_batch_payload(data: bytes, count: int) -> tuple[BatchedMessage, ...]:
    out = []
    pos = 0
    for _ in range(count):
        (size,) = _SIZE.unpack_from(data, pos)
        single = PulsarApi_pb2.SingleMessageMetadata()
        try:
            single.ParseFromString(data[pos + 4 : pos + 4 + size])
        except DecodeError as exc:
            raise ValueError(f"SingleMessageMetadata at byte {pos + 4} of a batch: {exc}") from None
        pos += 4 + size
        length = single.payload_size
        key = single.partition_key if single.HasField("partition_key") else None
        out.append(BatchedMessage(data[pos : pos + length], key))
        pos += length
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes after the {count} messages of a batch")
    return tuple(out)


def encode_entry(
    entry: tb.LogEntry,
    payload: bytes = b"",
    deliver_at: int | None = None,
    publish_time: int = 0,
    *,
    partition_key: str | None = None,
    batch: Sequence[BatchedMessage] | None = None,
    null_value: bool = False,
) -> bytes:
    meta = PulsarApi_pb2.MessageMetadata(
        producer_name="txnmodel", sequence_id=entry.position.entry_id, publish_time=publish_time
    )
    if entry.txn_id is not None:
        meta.txnid_most_bits = entry.txn_id.most_sig_bits
        meta.txnid_least_bits = entry.txn_id.least_sig_bits
    if entry.kind is tb.EntryKind.TXN_COMMIT:
        meta.marker_type = MARKER_COMMIT
    elif entry.kind is tb.EntryKind.TXN_ABORT:
        meta.marker_type = MARKER_ABORT
    if deliver_at is not None:
        meta.deliver_at_time = deliver_at
    if partition_key is not None:
        meta.partition_key = partition_key
    if null_value:
        meta.null_value = True  # a tombstone: the key's value is deleted (compaction drops the key)
    if batch is not None:
        meta.num_messages_in_batch = len(batch)
        payload = encode_batch_payload(batch)
    raw = meta.SerializeToString()
    return _SIZE.pack(len(raw)) + raw + payload


def decode_entry(position: Position, data: bytes) -> StoredMessage:
    meta = _entry_metadata(data)
    txn = TxnID(meta.txnid_most_bits, meta.txnid_least_bits) if meta.HasField("txnid_most_bits") else None
    if meta.HasField("marker_type"):
        kind = tb.EntryKind.TXN_COMMIT if meta.marker_type == MARKER_COMMIT else tb.EntryKind.TXN_ABORT
    else:
        kind = tb.EntryKind.NORMAL if txn is None else tb.EntryKind.TXN_DATA
    deliver_at = meta.deliver_at_time if meta.HasField("deliver_at_time") else None
    key = meta.partition_key if meta.HasField("partition_key") else None
    (size,) = _SIZE.unpack_from(data, 0)
    payload = data[4 + size :]
    batch = (
        decode_batch_payload(payload, meta.num_messages_in_batch) if meta.HasField("num_messages_in_batch") else None
    )
    return StoredMessage(tb.LogEntry(position, kind, txn), payload if batch is None else b"", deliver_at, key, batch)


def _entry_metadata(data: bytes) -> PulsarApi_pb2.MessageMetadata:
    (size,) = _SIZE.unpack_from(data, 0)
    meta = PulsarApi_pb2.MessageMetadata()
    meta.ParseFromString(data[4 : 4 + size])
    return meta


# Transaction-buffer snapshots: keyed Avro records on the namespace's compacted system topics
# (spec/snapshot_avro.py), a tombstone (null_value, no payload) deleting a key.
SNAPSHOT_TOPIC = snapshot_avro.SNAPSHOT_TOPICS["TransactionBufferSnapshot"]
SEGMENTS_TOPIC = snapshot_avro.SNAPSHOT_TOPICS["TransactionBufferSnapshotSegment"]
INDEXES_TOPIC = snapshot_avro.SNAPSHOT_TOPICS["TransactionBufferSnapshotIndexes"]
_SEGMENT_KEY_PREFIX = "multiple-"


def namespace_topic(topic: str, local_name: str) -> str:
    """The system topic ``local_name`` of ``topic``'s namespace (``persistent://tenant/ns/local_name``)."""
    scheme, _, rest = topic.partition("://")
    tenant, namespace = rest.split("/")[:2]
    return f"{scheme}://{tenant}/{namespace}/{local_name}"


def segment_key(topic: str, sequence_id: int) -> str:
    """The key of a sealed segment: ``multiple-<sequence id>-<topic>``."""
    return f"{_SEGMENT_KEY_PREFIX}{sequence_id}-{topic}"


def _parse_segment_key(key: str) -> tuple[str, int] | None:
    if not key.startswith(_SEGMENT_KEY_PREFIX):
        return None
    sequence, _, topic = key[len(_SEGMENT_KEY_PREFIX) :].partition("-")
    return (topic, int(sequence)) if sequence.isdigit() and topic else None


def encode_keyed_message(key: str, value: bytes | None, publish_time: int = 0, sequence_id: int = 0) -> bytes:
    """A system-topic message: ``[4-byte size][MessageMetadata with partition_key][payload]``;
    ``value=None`` is a tombstone (``null_value``, empty payload)."""
    meta = PulsarApi_pb2.MessageMetadata(
        producer_name="txnmodel-tb-snapshot", sequence_id=sequence_id, publish_time=publish_time, partition_key=key
    )
    if value is None:
        meta.null_value = True
    raw = meta.SerializeToString()
    return _SIZE.pack(len(raw)) + raw + (value or b"")


def decode_keyed_message(data: bytes) -> tuple[str, bytes | None]:
    """(key, value) of a system-topic message; value None for a tombstone."""
    meta = _entry_metadata(data)
    if not meta.HasField("partition_key"):
        raise ValueError("a snapshot-topic message without a key")
    (size,) = _SIZE.unpack_from(data, 0)
    return meta.partition_key, None if meta.null_value else data[4 + size :]


def snapshot_messages(effect: Any) -> list[tuple[str, str, bytes | None]]:
    """The (system topic, key, value) messages that carry out a buffer snapshot effect (TB-20)."""
    if isinstance(effect, tb.WriteSnapshot):
        snap = effect.snapshot
        return [(SNAPSHOT_TOPIC, snap.topic_name, snapshot_avro.encode_snapshot(snap.to_pb()))]
    if isinstance(effect, tb.WriteSnapshotSegment):
        seg = effect.segment
        return [
            (SEGMENTS_TOPIC, segment_key(seg.topic_name, seg.sequence_id), snapshot_avro.encode_segment(seg.to_pb()))
        ]
    if isinstance(effect, tb.WriteSnapshotIndexes):
        return [(INDEXES_TOPIC, effect.indexes.topic_name, snapshot_avro.encode_indexes(effect.indexes.to_pb()))]
    if isinstance(effect, tb.DeleteSnapshotSegment):
        return [(SEGMENTS_TOPIC, segment_key(effect.topic_name, effect.sequence_id), None)]
    if isinstance(effect, tb.ClearSnapshot):
        # The topic's keys on both topics keyed by topic name; its segments get their own tombstones.
        return [(SNAPSHOT_TOPIC, effect.topic_name, None), (INDEXES_TOPIC, effect.topic_name, None)]
    raise TypeError(f"not a snapshot effect: {effect!r}")


def snapshot_records(topic: str, tables: dict[str, dict[str, bytes]]) -> list[Any]:
    """The snapshot effects that rebuild ``topic``'s snapshot store from the system topics' latest
    value per key (``tables``: system topic -> key -> value, tombstoned keys absent)."""
    where = f"{topic} on {namespace_topic(topic, '')}"
    records: list[Any] = []
    value = tables.get(SNAPSHOT_TOPIC, {}).get(topic)
    if value is not None:
        records.append(
            tb.WriteSnapshot(tb.TransactionBufferSnapshot.from_pb(snapshot_avro.decode_snapshot(value, where=where)))
        )
    segments = []
    for key, value in tables.get(SEGMENTS_TOPIC, {}).items():
        parsed = _parse_segment_key(key)
        if parsed is not None and parsed[0] == topic:
            segments.append((parsed[1], value))
    for _, value in sorted(segments):
        records.append(
            tb.WriteSnapshotSegment(
                tb.TransactionBufferSnapshotSegment.from_pb(snapshot_avro.decode_segment(value, where=where))
            )
        )
    value = tables.get(INDEXES_TOPIC, {}).get(topic)
    if value is not None:
        records.append(
            tb.WriteSnapshotIndexes(
                tb.TransactionBufferSnapshotIndexes.from_pb(snapshot_avro.decode_indexes(value, where=where))
            )
        )
    return records


def latest_by_key(ledger: ManagedLedger) -> dict[str, bytes]:
    """What a compacted topic (or a table view) holds: each key's last value, tombstoned keys dropped."""
    table: dict[str, bytes] = {}
    for _, data in _read_all(ledger):
        key, value = decode_keyed_message(data)
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


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
            log = RecordLog(
                self.sim,
                ledger,
                LogKind.TRANSACTION_LOG,
                self.config,
                batching=self.broker.batching,
                metrics=self.broker.writer_metrics.get(LogKind.TRANSACTION_LOG),
            )
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
        self.state, effects = tc.recover(
            self.config, self.coordinator_id, records, max_local, next_record_id=len(records)
        )
        _observe_recovery(
            self.broker,
            self.obj,
            "coordinator",
            {
                "coordinator_id": self.coordinator_id,
                "records": records,
                "max_local_txn_id": max_local,
                "next_record_id": len(records),
            },
        )
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
            self._schedule_resume(
                tc.ScheduleResumeEndTxn(txn_id, action, False, END_TXN_RETRY_INTERVAL_MS), self._epoch
            )
        return True

    def crash(self) -> None:
        """Memory is gone: the store, buffered log records, waiting requests (never answered)."""
        self._epoch += 1
        if self.log is not None:
            self.log.crash()
        self.state = None
        self.log = None
        self._waiters = {}
        if self.broker.observer is not None:
            self.broker.observer.crashed(self.obj)

    @property
    def obj(self) -> str:
        """The history's object id of this coordinator."""
        return object_id("coordinator", self.coordinator_id)

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
        _observe_step(self.broker, self.obj, "coordinator", command, result)
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
            result, written = self._step(tc.ResumeEndTxn(effect.txn_id, effect.action, self.sim.now, effect.is_timeout))
            self._settle(effect.txn_id, effect.action, result, written)

        self.sim.schedule(effect.delay_ms, resume)

    def _end_in_participants(self, effect: tc.EndTxnInTransactionBuffer, epoch: int) -> None:
        """Phase 2: END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION to every participant (TC-14)."""
        answers: list[Future[None]] = []
        for name in effect.partitions:
            answers.append(self.broker.end_txn_on_partition(name, effect.txn_id, effect.action, effect.low_water_mark))
        for sub in effect.subscriptions:
            answers.append(
                self.broker.end_txn_on_subscription(sub, effect.txn_id, effect.action, effect.low_water_mark)
            )

        def all_answered(_: Future[None]) -> None:
            if epoch != self._epoch or self.state is None:
                return
            errors = tuple(_error_of(f.error).name for f in answers if f.error is not None)
            result, written = self._step(
                tc.EndTxnInTransactionBufferResult(
                    effect.txn_id, effect.action, self.sim.now, effect.is_timeout, errors
                )
            )
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
            if not result.error.answered:
                return Future()  # TC-4: no response at all; the client's own timeout ends the request
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


def _observe_step(broker: Broker, obj: str, machine: str, command: Any, result: Ok[Any] | Err) -> None:
    """Tell the machine-level recorder (if any) about one step of a machine."""
    if broker.observer is not None:
        broker.observer.stepped(obj, machine, command, result)


def _observe_recovery(broker: Broker, obj: str, machine: str, inputs: dict[str, Any]) -> None:
    """Tell the recorder what a component's recovery read (values spelled as JSON here)."""
    if broker.observer is not None:
        broker.observer.recovered(obj, machine, {key: to_json(value) for key, value in inputs.items()})


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
    batch_index: int | None = None  # the message's index in a batch entry
    batch_size: int = 1
    partition_key: str | None = None


class Partition:
    """One topic partition: managed ledger, transaction buffer, snapshot ledger, subscriptions."""

    def __init__(self, broker: Broker, name: str) -> None:
        self.broker = broker
        self.sim = broker.sim
        self.config = broker.config
        self.name = name
        self.state: tb.BufferState | None = None
        self.ledger: ManagedLedger | None = None
        self.messages: dict[Position, StoredMessage] = {}
        self.subscriptions: dict[str, SubscriptionService] = {}
        self._parked: list[tuple[MessageBody, Future[Position]]] = []
        self._epoch = 0
        self._trim_scheduled: int | None = None  # the epoch a pending trim belongs to
        self.trimmed_ledgers: list[int] = []  # every ledger retention deleted, in order

    @property
    def ready(self) -> bool:
        return self.state is not None

    # -- retention ----------------------------------------------------------------------------

    def schedule_trim(self) -> None:
        """Pulsar trims consumed ledgers after a roll-over and when the slowest cursor's mark-delete
        moves; the trim runs as its own event, never inside another step's effects."""
        epoch = self._epoch
        if self._trim_scheduled == epoch:
            return
        self._trim_scheduled = epoch  # one pending trim per incarnation: a crash voids the old one

        def run() -> None:
            if epoch == self._epoch:
                self._trim_scheduled = None
                self.trim()

        self.sim.schedule(0, run)

    def trim(self) -> tuple[int, ...]:
        """Topic retention with Pulsar's default zero retention: a closed ledger every subscription's
        mark-delete has passed is deleted, oldest first, if the buffer agrees (TB-23: nothing in it
        after ``max_read_position``).  A topic without subscriptions is not trimmed (Pulsar would
        drop all its closed ledgers): a subscription created later at EARLIEST then sees every
        message, which the transactional checker's no-loss rule assumes.  Returns the deleted ids."""
        if self.state is None or self.ledger is None:
            return ()
        marks = [c.mark_delete_position for c in self.ledger.cursors()]
        if not marks:
            return ()
        allowed: int | None = None
        infos = self.ledger.ledgers()
        for ledger_id in consumed_ledgers(infos, infos[-1].ledger_id, marks):
            result, held = self._step(tb.DeleteLedger(ledger_id))
            if not held:
                return ()
            if isinstance(result, Err):
                break
            allowed = ledger_id
        if allowed is None:
            return ()
        try:
            deleted = self.ledger.delete_consumed_ledgers(up_to=allowed)
        except LedgerError:
            self._reload()  # the buffer let the ledgers go but they are still there: reload the view
            return ()
        for position in [p for p in self.messages if p.ledger_id <= allowed]:
            del self.messages[position]
        self.trimmed_ledgers.extend(deleted)
        return deleted

    def load(self) -> bool:
        """Load the topic: read its entries and snapshot records, recover the buffer (TB-1, TB-24)."""
        self._epoch += 1
        try:
            ledger = self.broker.store.open(self.name)
            entries = [decode_entry(p, d) for p, d in _read_all(ledger)]
            # The buffer's snapshot records, as a topic's recovery reads them from the namespace's
            # system topics (a table view: the last value per key).
            tables = {
                local: latest_by_key(self.broker.system_topic(namespace_topic(self.name, local)))
                for local in (SNAPSHOT_TOPIC, SEGMENTS_TOPIC, INDEXES_TOPIC)
            }
            records = snapshot_records(self.name, tables)
        except LedgerError:
            return False
        self.ledger = ledger
        self.messages = {m.entry.position: m for m in entries}
        # The managed-ledger view the buffer reads: what the topic's ledger holds.
        ledgers, current = ledger.ledgers(), ledger.ledgers()[-1].ledger_id
        view = tb.recovery_view(
            self.config,
            topic=self.name,
            ledger_id=current,
            ledgers=ledgers,
            entries=tuple(m.entry for m in entries),
            snapshot_records=records,
        )
        _observe_recovery(
            self.broker,
            self.obj,
            "buffer",
            {
                "topic": self.name,
                "ledger_id": current,
                "ledgers": ledgers,
                "entries": view.entries,
                "snapshot_records": tuple(records),
            },
        )
        self.state, started = tb.step(view, tb.StartRecovery())
        _observe_step(self.broker, self.obj, "buffer", tb.StartRecovery(), started)
        self._parked = []
        self._step(tb.CompleteRecovery())
        self._schedule_snapshot(self._epoch)
        for sub in self.subscriptions.values():
            if not sub.load():
                self.crash()  # a subscription could not read its logs: the topic is not loaded
                return False
        self.schedule_trim()
        return True

    def crash(self) -> None:
        self._epoch += 1
        self.state = None
        self._parked = []
        for sub in self.subscriptions.values():
            sub.crash()
        if self.broker.observer is not None:
            self.broker.observer.crashed(self.obj)

    @property
    def obj(self) -> str:
        """The history's object id of this partition's transaction buffer."""
        return object_id("partition", self.name)

    def _reload(self) -> None:
        self.crash()
        self.broker.restart_later(self)

    # -- stepping ---------------------------------------------------------------------------------

    def _step(self, command: Any, body: MessageBody = NO_BODY) -> tuple[Ok[Any] | Err, bool]:
        """Step the buffer and write what it asks; returns the result and whether every write held."""
        assert self.state is not None and self.ledger is not None
        before = self.state.max_read_position
        self.state, result = tb.step(self.state, command)
        _observe_step(self.broker, self.obj, "buffer", command, result)
        if self.state.max_read_position != before:
            # TB-23 may now let a consumed ledger go.  Pulsar finds out at its periodic retention
            # check (retentionCheckIntervalInSeconds, 120 s), longer than a simulated run; the
            # engine checks at once, which changes when ledgers go, never which.
            self.schedule_trim()
        return result, self._carry_out(result.effects, body)

    def _carry_out(self, effects: Iterable[Any], body: MessageBody = NO_BODY) -> bool:
        assert self.ledger is not None and self.state is not None
        for effect in effects:
            try:
                if isinstance(effect, tb.AppendEntry):
                    entry = effect.entry
                    current = self.ledger.ledgers()[-1]
                    if current.ledger_id > entry.position.ledger_id:
                        # An earlier entry of this same step filled the ledger and it rolled over, but
                        # the buffer placed this one in the ledger it knew (a low-watermark abort
                        # writes a commit marker and abort markers in one step).  Its memory no longer
                        # matches the log: reload from what is durable, as after a failed write, and
                        # write nothing at a position the buffer did not choose.
                        self._reload()
                        return False
                    carried = body if entry.kind in (tb.EntryKind.NORMAL, tb.EntryKind.TXN_DATA) else NO_BODY
                    written = self.ledger.append(
                        encode_entry(
                            entry,
                            carried.payload,
                            carried.deliver_at,
                            self.sim.now,
                            partition_key=carried.partition_key,
                            batch=carried.batch,
                        )
                    )
                    if written != entry.position:
                        raise AssertionError(f"{self.name}: the buffer placed {entry} but the ledger wrote {written}")
                    self.messages[written] = StoredMessage(
                        entry, carried.payload, carried.deliver_at, carried.partition_key, carried.batch
                    )
                    self._follow_roll_over()
                else:
                    for local, key, value in snapshot_messages(effect):
                        self.broker.write_system_topic(namespace_topic(self.name, local), key, value)
            except LedgerError:
                self._reload()
                return False
        return True

    def delete(self) -> bool:
        """The topic is deleted: every subscription goes (with its delayed-index snapshots, DD-23),
        the buffer closes and tombstones its snapshot records (TB-1, TB-25), and the topic's ledger
        is deleted.  False if a write failed: the partition then reloads and nothing is deleted
        beyond the subscriptions already gone (Pulsar's deletion is not atomic either)."""
        for name, sub in list(self.subscriptions.items()):
            sub.delete()
            del self.subscriptions[name]
        _, held = self._step(tb.CloseTransactionBuffer())
        parked, self._parked = self._parked, []
        for _, future in parked:
            future.set_exception(BrokerError(ServiceUnitNotReady(f"topic {self.name} is deleted")))
        if not held:
            return False
        _, held = self._step(tb.ClearTransactionBufferSnapshot())
        if not held:
            return False
        self.crash()
        self.broker.store.delete(self.name)
        return True

    def _follow_roll_over(self) -> None:
        """The managed ledger rolled over on its own (full ledger): tell the buffer's view."""
        assert self.ledger is not None and self.state is not None
        while self.ledger.ledgers()[-1].ledger_id > self.state.ledgers[-1].ledger_id:
            self.state, rolled = tb.step(self.state, tb.RollOverLedger())
            _observe_step(self.broker, self.obj, "buffer", tb.RollOverLedger(), rolled)
            self.schedule_trim()

    def _changed(self) -> None:
        for sub in self.subscriptions.values():
            sub.dispatch()

    # -- requests ---------------------------------------------------------------------------------

    def publish(
        self,
        payload: bytes,
        txn_id: TxnID | None,
        deliver_at: int | None,
        *,
        partition_key: str | None = None,
        batch: Sequence[BatchedMessage] | None = None,
    ) -> Future[Position]:
        """A producer's send: a normal publish or ``appendBufferToTxn`` (TB-4 .. TB-9).  A batch is
        one entry holding several messages, all of one txn (or none)."""
        body = MessageBody(payload, deliver_at, partition_key, None if batch is None else tuple(batch))
        if self.state is None:
            return Future()
        command: Any = tb.PublishMessage() if txn_id is None else tb.AppendBufferToTxn(txn_id)
        if isinstance(command, tb.AppendBufferToTxn) and self.state.status is not tb.BufferStatus.READY:
            # It may be parked (TB-4); remember the payload so the flush can write it.
            self._parked.append((body, Future()))
            parked = self._parked[-1][1]
            result, held = self._step(command)
            if isinstance(result, Err):
                self._parked.pop()
                return _fail(result.error)
            if not held:
                return _fail(ServiceUnitNotReady(f"{self.name} is reloading"))
            if isinstance(result.value, tb.Queued) and self.state.status is tb.BufferStatus.FIRST_SNAPSHOTTING:
                self.sim.schedule(1, self._first_snapshot_done(self._epoch))
            return parked
        result, held = self._step(command, body)
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
            _observe_step(self.broker, self.obj, "buffer", tb.CompleteFirstSnapshot(), result)
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
        for (body, future), outcome in zip(parked, outcomes, strict=True):
            if outcome.position is None:
                future.set_exception(BrokerError(_named_error(outcome.error or "ServiceUnitNotReady")))
                continue
            if ok:
                ok = self._carry_out((by_position[outcome.position],), body)
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
        command: Any = (
            tb.CommitTxn(txn_id, low_water_mark) if action is TxnAction.COMMIT else tb.AbortTxn(txn_id, low_water_mark)
        )
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


# Key_Shared routing (Pulsar's HashRangeAutoSplitStickyKeyConsumerSelector, AUTO_SPLIT mode with
# subscriptionKeySharedUseConsistentHashing=false).  A message's sticky key is its ordering key, else
# its partition key, else the bytes "NONE_KEY"; the hash is Murmur3_32 (seed 0) with the sign bit
# cleared, taken modulo the range size 2^16.
STICKY_KEY_HASH_RANGE = 1 << 16
NONE_KEY = b"NONE_KEY"


@dataclass
class Handout:
    """One dispatch of an entry to a consumer: its messages (a batch's indexes) share one redelivery count."""

    position: Position
    redelivery_count: int | None = None  # taken when the first of its messages is received


@dataclass
class ConsumerSlot:
    consumer_id: int
    queue: list[tuple[Handout, int | None]] = field(default_factory=list)  # (entry, batch index)
    unacked: set[Position] = field(default_factory=set)  # entries handed out, as Pulsar's pendingAcks
    waiting: list[Future[Delivered | None]] = field(default_factory=list)
    hash_range_end: int = STICKY_KEY_HASH_RANGE  # Key_Shared: this consumer serves hashes up to here
    joined_after: Position | None = None  # Key_Shared: recently joined, held to entries up to here

    def drop(self, keep: Callable[[Position, int | None], bool]) -> None:
        """Forget queued messages ``keep`` rejects."""
        self.queue = [(h, i) for h, i in self.queue if keep(h.position, i)]


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 as an unsigned 32-bit value."""
    mask = 0xFFFFFFFF

    def mix(k: int) -> int:
        k = (k * 0xCC9E2D51) & mask
        k = ((k << 15) | (k >> 17)) & mask
        return (k * 0x1B873593) & mask

    h = seed & mask
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        h ^= mix(int.from_bytes(data[i : i + 4], "little"))
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    h ^= mix(int.from_bytes(data[whole:], "little"))
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    return h ^ (h >> 16)


def sticky_key_hash(partition_key: str | None) -> int:
    """The hash slot, in [0, 2^16), of a message's sticky key."""
    key = NONE_KEY if partition_key is None else partition_key.encode()
    return (murmur3_32(key) & 0x7FFFFFFF) % STICKY_KEY_HASH_RANGE


def _split_range(slots: Iterable[ConsumerSlot]) -> int:
    """The range end a joining consumer takes: it splits the widest range (ties: the lowest) and takes
    its lower half; the consumer that had it keeps the upper half."""
    ends = sorted(s.hash_range_end for s in slots)
    if not ends:
        return STICKY_KEY_HASH_RANGE
    best_end, best_width, lower = STICKY_KEY_HASH_RANGE, 0, 0
    for end in ends:
        if end - lower > best_width:
            best_end, best_width = end, end - lower
        lower = end
    if best_width <= 1:
        raise BrokerError(ServiceUnitNotReady("no hash range left for another Key_Shared consumer"))
    below = best_end - best_width
    return best_end - ((best_end - below) >> 1)


def _select(slots: Sequence[ConsumerSlot], hash_slot: int) -> ConsumerSlot:
    """The consumer whose range holds ``hash_slot``: the lowest range end at or above it."""
    return min((s for s in slots if s.hash_range_end >= hash_slot), key=lambda s: s.hash_range_end)


_SUB_TYPES = {
    "Exclusive": pa.SubType.Exclusive,
    "Shared": pa.SubType.Shared,
    "Failover": pa.SubType.Failover,
    "Key_Shared": pa.SubType.Key_Shared,
}


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
        self.delayed: DelayedDeliveryService | None = None
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

    @property
    def tracker(self) -> dl.Tracker | None:
        """The delayed-delivery tracker's state (None when delayed delivery does not apply)."""
        return self.delayed.state if self.delayed is not None else None

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
            view = self._cursor_view(self.cursor)
            recovery: dict[str, Any] = {"sub_type": self.sub_type, "cursor": view}
            if not self.broker.store.exists(self.log_name):
                # PA-17: no txn ever acked here, so no pending-ack log: the handle starts lazily.
                self.log = None
                self.state = pa.initial(self.config, sub_type=self.sub_type, cursor=view)
            else:
                records = self._open_log()
                self.state = pa.recover(
                    self.config, records, cursor=view, sub_type=self.sub_type, next_record_id=len(records)
                )
                recovery.update(records=records, next_record_id=len(records))
                assert self.log is not None
                self.log.ledger.delete_consumed_ledgers()  # retention of the pending-ack log (PA-16)
        except (LedgerError, LogWriteFailed):
            self.state = None
            return False
        _observe_recovery(self.broker, self.obj, "pending_ack", recovery)
        if self.delayed is not None:
            self.delayed.close()
        # Pulsar's dispatcher makes its tracker when the first delayed message arrives (dispatch
        # below).  A cursor whose properties name buckets has a tracker to recover now (DD-24: from
        # its snapshot ledgers and those properties).
        self.delayed = None
        if self.delayed_enabled and any(key.startswith(dl.BUCKET_PROPERTY_PREFIX) for key in self.cursor.properties):
            self.delayed = self._open_delayed()
        self.read_after = self.cursor.mark_delete_position
        self.replay = set()
        self._queued = []
        for slot in self.consumers.values():
            slot.queue.clear()
            slot.unacked.clear()
        return True

    def delayed_service(self) -> DelayedDeliveryService:
        """The subscription's tracker, made (and recovered) now if it does not exist yet."""
        if self.delayed is None:
            self.delayed = self._open_delayed()
        return self.delayed

    def _open_delayed(self) -> DelayedDeliveryService:
        assert self.cursor is not None
        return DelayedDeliveryService.load(
            self.sim,
            self.broker.store,
            self.config,
            self.cursor,
            partition=self.partition.name,
            subscription=self.name,
            read_more=self.dispatch,
            failed=self._reload,
            observer=lambda: getattr(self.broker, "observer", None),
            async_create=self.broker.delayed_async_create,
        )

    @property
    def log_name(self) -> str:
        return f"{self.partition.name}-{self.name}__transaction_pending_ack"

    def _open_log(self) -> list[tuple[int, pa.PendingAckRecord]]:
        """Open (create) the pending-ack log and read its live records, numbered in log order."""
        log = RecordLog(
            self.sim,
            self.broker.store.open(self.log_name),
            LogKind.PENDING_ACK,
            self.config,
            batching=self.broker.batching,
            metrics=self.broker.writer_metrics.get(LogKind.PENDING_ACK),
        )
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
        if self.delayed is not None:
            self.delayed.close()
        self.consumers = {}
        self._queued = []
        self.redeliveries = {}  # Pulsar's InMemoryRedeliveryTracker does not survive the broker
        if self.broker.observer is not None:
            self.broker.observer.crashed(self.obj)  # the tracker's own close (above) ends its ops

    @property
    def obj(self) -> str:
        """The history's object id of this subscription's pending ack."""
        return object_id("subscription", f"{self.partition.name}#{self.name}")

    # -- stepping ---------------------------------------------------------------------------------

    def _step(self, command: Any) -> tuple[Ok[Any] | Err, Future[None]]:
        assert self.state is not None
        self.state, result = pa.step(self.state, command)
        _observe_step(self.broker, self.obj, "pending_ack", command, result)
        return result, self._carry_out(result.effects)

    def _carry_out(self, effects: Iterable[Any]) -> Future[None]:
        assert self.cursor is not None
        writes: list[Future[None]] = []
        for effect in effects:
            if isinstance(effect, pa.AppendPendingAckRecord):
                writes.append(self._append(effect))
            elif isinstance(effect, pa.TrimPendingAckLog):
                _after(_all(list(writes)), partial(self._trim, effect.record_id))
            elif isinstance(
                effect, pa.CursorIndividualAck | pa.CursorCumulativeAck | pa.RedeliverUnacknowledgedMessages
            ):
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
            self._mark_delete_moved()
        elif isinstance(effect, pa.CursorCumulativeAck):
            acked = effect.position
            if acked.ack_set is None or not any(acked.ack_set):
                self.cursor.mark_delete(acked.position)
            else:
                # Up to a batch index (PIP-54): up to the entry before, and that entry's ack set.
                assert self.partition.ledger is not None
                before = previous_position(acked.position, self.partition.ledger.ledgers())
                if before > self.cursor.mark_delete_position:
                    self.cursor.mark_delete(before)
                self.cursor.delete([acked.position], {acked.position: acked.ack_set})
            self._acked_upto(acked.position)
            self._mark_delete_moved()
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
        if consumer_id not in self.consumers:
            slot = ConsumerSlot(consumer_id)
            if self.sub_type is pa.SubType.Key_Shared:
                slot.hash_range_end = _split_range(self.consumers.values())
                # Pulsar's recently-joined rule (the classic Key_Shared dispatcher): while entries
                # read before it joined are unacknowledged, a new consumer may get only those, so a
                # key it takes over does not overtake messages of that key still held elsewhere.
                if self.consumers and self.cursor is not None and self.read_after > self.cursor.mark_delete_position:
                    slot.joined_after = self.read_after
            self.consumers[consumer_id] = slot
        self.dispatch()

    def delete(self) -> None:
        """Unsubscribe: the subscription and everything it owns go for good.  The bucket tracker's
        ``Clear`` deletes every snapshot (DD-23, DL6); without a live tracker the cursor's bucket
        properties name what to delete (CP4).  The cursor goes (it no longer holds back ledger
        deletion), and so does the pending-ack log, so a new subscription of the same name starts
        clean.  Waiting receives get nothing; requests still queued at the handle never hear back."""
        assert self.cursor is not None
        ledger = self.partition.ledger
        assert ledger is not None
        for waiter in [w for slot in self.consumers.values() for w in slot.waiting]:
            waiter.set_result(None)
        if self.delayed is not None:
            self.delayed.clear()
        else:
            DelayedDeliveryService.clean_residual(
                self.broker.store, self.cursor, partition=self.partition.name, subscription=self.name
            )
        if self.log is not None:
            self.log.close()  # the pending-ack log's writer closes before the log goes (BW-18)
        self.crash()
        ledger.delete_cursor(self.name)
        self.broker.store.delete(self.log_name)

    def remove_consumer(self, consumer_id: int) -> None:
        slot = self.consumers.pop(consumer_id, None)
        if slot is not None:
            if (
                self.sub_type is pa.SubType.Key_Shared
                and slot.hash_range_end == STICKY_KEY_HASH_RANGE
                and self.consumers
            ):
                # The top range goes to the consumer just below it (the selector's removal rule).
                below = max(self.consumers.values(), key=lambda s: s.hash_range_end)
                below.hash_range_end = STICKY_KEY_HASH_RANGE
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

    def _cursor_view(self, cursor: ManagedCursor) -> pa.CursorView:
        """The durable cursor as the pending ack reads it, batch entries' ack sets included (PA-2)."""
        deleted = frozenset(cursor.individually_deleted())
        in_part: dict[Position, pa.AckBits] = {}
        for position, message in self.partition.messages.items():
            if message.batch is None or position <= cursor.mark_delete_position or position in deleted:
                continue
            words = cursor.batch_ack_set(position)
            acked = 0 if words is None else ((1 << message.batch_size) - 1) & ~words_to_bits(words)
            if acked:
                in_part[position] = pa.AckBits(message.batch_size, acked)
        return pa.CursorView(cursor.mark_delete_position, deleted, immutables.Map(in_part))

    def _deliverable(self, position: Position) -> list[int | None]:
        """The messages of an entry still PENDING: ``[None]`` for a single message, else the batch
        indexes neither acknowledged nor held by a txn (the sent ack set of 5.9, #19581)."""
        assert self.state is not None
        message = self.partition.messages.get(position)
        if message is None or message.batch is None:
            return [None] if self._message_state(position) is MessageState.PENDING else []
        return [
            i for i in range(message.batch_size) if pa.message_state(self.state, position, i) is MessageState.PENDING
        ]

    def _route(self, position: Position, active: Sequence[ConsumerSlot]) -> ConsumerSlot | None:
        """The consumer an entry goes to, or None while Key_Shared holds it back."""
        if self.sub_type is not pa.SubType.Key_Shared:
            slot = active[self._rr % len(active)]
            self._rr += 1
            return slot
        chosen = _select(active, sticky_key_hash(self.partition.messages[position].partition_key))
        if chosen.joined_after is not None and position > chosen.joined_after:
            return None
        return chosen

    def _release_joined(self) -> bool:
        """A recently joined consumer is released once everything read before it joined is
        acknowledged; True if one was."""
        released = False
        if self.cursor is not None:
            for slot in self.consumers.values():
                if slot.joined_after is not None and self.cursor.mark_delete_position >= slot.joined_after:
                    slot.joined_after = None
                    released = True
        return released

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
            if message.deliver_at is not None and self.delayed_enabled:
                waits = self.delayed_service().add_message(position, message.deliver_at)
                if self.state is None:
                    return  # the tracker's storage failed: the topic is reloading
                if waits:
                    continue
            fresh.append(position)
        if self.delayed is not None:
            self.replay.update(self.delayed.scheduled_messages())
            if self.state is None:
                return
        outgoing = sorted(self.replay) + fresh
        self.replay = set()
        self._release_joined()
        for position in outgoing:
            indexes = self._deliverable(position)
            if not indexes:
                continue  # acked, or pending in a txn: filtered (5.9)
            if any(position in s.unacked for s in self.consumers.values()):
                continue
            slot = self._route(position, active)
            if slot is None:
                self.replay.add(position)  # held for a recently joined consumer
                continue
            slot.unacked.add(position)
            handout = Handout(position)
            slot.queue.extend((handout, i) for i in indexes)
        for slot in active:
            self._serve(slot)

    def _mark_delete_moved(self) -> None:
        """The cursor's mark-delete position may have moved: the delayed tracker's trim input (DD-22)."""
        if self.delayed is not None and self.cursor is not None:
            self.delayed.mark_delete_moved(self.cursor.mark_delete_position)
        self.partition.schedule_trim()  # and topic retention's

    def _serve(self, slot: ConsumerSlot) -> None:
        while slot.waiting and slot.queue:
            handout, index = slot.queue.pop(0)
            waiter = slot.waiting.pop(0)
            waiter.set_result(self._delivered(handout, index))

    def _delivered(self, handout: Handout, index: int | None) -> Delivered:
        position = handout.position
        message = self.partition.messages[position]
        if handout.redelivery_count is None:
            handout.redelivery_count = self.redeliveries.get(position, 0)
            self.redeliveries[position] = handout.redelivery_count + 1
        if message.batch is None or index is None:
            return Delivered(
                position,
                message.payload,
                message.entry.txn_id,
                message.deliver_at,
                handout.redelivery_count,
                partition_key=message.partition_key,
            )
        single = message.batch[index]
        return Delivered(
            position,
            single.payload,
            message.entry.txn_id,
            message.deliver_at,
            handout.redelivery_count,
            batch_index=index,
            batch_size=message.batch_size,
            partition_key=single.partition_key,
        )

    def receive(self, consumer_id: int, wait_ms: int) -> Future[Delivered | None]:
        """The next message for the consumer, or None if none arrives within ``wait_ms``."""
        slot = self.consumers.get(consumer_id)
        if slot is None or self.state is None:
            return Future()
        self.dispatch()
        if slot.queue:
            return Future.completed(self._delivered(*slot.queue.pop(0)))
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
            live = self._deliverable(position)

            def keep(p: Position, i: int | None, position: Position = position, live: list[int | None] = live) -> bool:
                return p != position or i in live

            for slot in self.consumers.values():
                # 5.9: a batch entry stays with its consumer until no index of it is left PENDING.
                if not live:
                    slot.unacked.discard(position)
                slot.drop(keep)
        if self._release_joined():
            epoch = self._epoch
            # What was held for it is dispatched after the ack that released it completes.
            self.sim.schedule(0, lambda: self.dispatch() if epoch == self._epoch else None)

    def _acked_upto(self, position: Position) -> None:
        for slot in self.consumers.values():
            slot.unacked = {p for p in slot.unacked if p >= position}
            slot.drop(lambda p, _: p >= position)
        # A cumulative ack of a batch index leaves the rest of that entry (PIP-54).
        self._acked([position])

    def _acked_position(self, position: Position, batch_index: int | None, cumulative: bool) -> pa.AckedPosition:
        """The message id of an ack on the wire: a batch index is an ack set over the entry (PIP-54,
        ``acknowledgmentAtBatchIndexLevelEnabled``); a cumulative one covers indexes 0..i."""
        message = self.partition.messages.get(position)
        if batch_index is None or message is None or message.batch is None:
            return pa.AckedPosition(position)
        indexes = range(batch_index + 1) if cumulative else (batch_index,)
        return pa.AckedPosition.of_indexes(position, message.batch_size, indexes)

    def acknowledge(
        self,
        consumer_id: int,
        position: Position,
        txn_id: TxnID | None,
        cumulative: bool,
        batch_index: int | None = None,
    ) -> Future[None]:
        """CommandAck, with or without a txn (PA-4 .. PA-11); ``batch_index`` acks one message of a batch."""
        if self.state is None:
            return Future()
        acked = (self._acked_position(position, batch_index, cumulative),)
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
                    slot.unacked = {p for p in slot.unacked if p >= position}
                if not self._deliverable(position):
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
        slot.drop(lambda p, _: p not in chosen)
        self.replay |= chosen
        self.dispatch()
        return Future.completed(None)

    def end_txn(self, txn_id: TxnID, action: TxnAction, low_water_mark: int) -> Future[None]:
        """END_TXN_ON_SUBSCRIPTION (PA-12 .. PA-14)."""
        if self.state is None:
            return _fail(ServiceUnitNotReady(f"subscription {self.name} is not loaded"))
        command: Any = (
            pa.CommitTxn(txn_id, low_water_mark) if action is TxnAction.COMMIT else pa.AbortTxn(txn_id, low_water_mark)
        )
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

    def __init__(
        self,
        sim: Simulation,
        store: LedgerStore,
        config: Config,
        *,
        topics: dict[str, int],
        batching: bool = False,
        faults: BrokerFaults | None = None,
        restart_delay_ms: int = 50,
        observer: MachineObserver | None = None,
        delayed_async_create: bool = False,
    ) -> None:
        self.sim = sim
        self.store = store
        self.config = config
        # PIP-195's asynchronous snapshot creation (DD-31) has no broker.conf key: an engine option.
        self.delayed_async_create = delayed_async_create
        # PIP-160's *_bufferedwriter_* collectors, one set per log kind shared by every log of that
        # kind on this broker (BW-19); a disabled writer flushes no batches, so none are made then.
        self.metrics_registry = CollectorRegistry()
        self.writer_metrics: dict[LogKind, BufferedWriterMetrics] = (
            {
                kind: BufferedWriterMetrics(kind, registry=self.metrics_registry)
                for kind in (LogKind.TRANSACTION_LOG, LogKind.PENDING_ACK)
            }
            if batching
            else {}
        )
        # The machine-level recorder: every step and every load of a machine is reported to it.
        self.observer = observer
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
        self._system: dict[str, ManagedLedger] = {}  # namespace system topics (TB snapshots)
        self._system_generation = 0
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

    def system_topic(self, name: str) -> ManagedLedger:
        """The broker's handle on a namespace system topic, shared by every partition of the namespace
        (Pulsar's system-topic client); opened at first use after each start."""
        if self._system_generation != self.crashes:
            self._system_generation, self._system = self.crashes, {}
        handle = self._system.get(name)
        if handle is None:
            handle = self._system[name] = self.store.open(name)
        return handle

    def write_system_topic(self, name: str, key: str, value: bytes | None) -> Position:
        """Publish a keyed message (``None``: a tombstone) to a system topic.  A failed write drops the
        handle, so the next user opens the topic afresh (the system-topic producer reconnects)."""
        try:
            return self.system_topic(name).append(encode_keyed_message(key, value, self.sim.now))
        except LedgerError:
            self._system.pop(name, None)
            raise

    def _serving(self, partition: str) -> Partition | None:
        """The partition if this broker can serve a request on it now; None: the request goes unanswered."""
        if not self.up:
            return None
        part = self.partition(partition)
        return part if part.ready else None

    def subscribe(
        self, partition: str, name: str, sub_type: str, initial_position: InitialPosition, consumer_id: int
    ) -> Future[None]:
        part = self._serving(partition)
        if part is None:
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

    def delete_topic(self, topic: str, *, force: bool = False) -> Future[None]:
        """The admin API's topic deletion, every partition of ``topic``.  Without ``force`` it is
        refused while a consumer is connected (Pulsar's non-forced delete fails on a busy topic)."""
        if not self.up:
            return Future()
        names = [partition_name(topic, i) for i in range(self.topics.get(topic, 0))]
        if not names:
            return _fail(NotAllowed(f"no topic {topic!r}"))
        parts = [self.partition(name) for name in names]
        if not all(p.ready and all(s.ready for s in p.subscriptions.values()) for p in parts):
            return Future()
        if not force and any(s.consumers for p in parts for s in p.subscriptions.values()):
            return _fail(NotAllowed(f"topic {topic} has connected consumers"))
        for part in parts:
            try:
                done = part.delete()
            except LedgerError as exc:
                part._reload()
                return _fail(exc.domain_error())
            if not done:
                return _fail(ServiceUnitNotReady(f"{part.name}: a write failed while deleting"))
            del self.partitions[part.name]
        del self.topics[topic]
        return Future.completed(None)

    def unsubscribe(self, partition: str, name: str, consumer_id: int) -> Future[None]:
        """CommandUnsubscribe: only the subscription's last connected consumer may delete it."""
        part = self._serving(partition)
        sub = None if part is None else part.subscriptions.get(name)
        if part is None or sub is None or not sub.ready:
            return Future()
        if set(sub.consumers) - {consumer_id}:
            return _fail(SubscriptionBusy("Unconnected or shared consumer attempting to unsubscribe"))
        try:
            sub.delete()
        except LedgerError as exc:
            part._reload()  # the cursor or a ledger could not be deleted: the topic reloads
            return _fail(exc.domain_error())
        del part.subscriptions[name]
        return Future.completed(None)

    # -- the END_TXN path between the coordinator and the participants ------------------------

    def _participant(self, call: Callable[[], Future[None]]) -> Future[None]:
        """An END_TXN_ON_* request from the coordinator's TB client, with its own latency and timeout."""
        answer: Future[None] = Future()
        if self.faults.participant_timeout and self.sim.rng.random() < self.faults.participant_timeout:
            self.sim.schedule(
                self.config.transaction_buffer_client_operation_timeout_in_mills,
                lambda: answer.set_exception(BrokerError(RequestTimeout("TB client timeout"))),
            )
            return answer

        def deliver() -> None:
            call().add_done_callback(
                lambda f: answer.set_exception(f.error) if f.error is not None else answer.set_result(None)
            )

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
