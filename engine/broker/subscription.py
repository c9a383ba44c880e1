"""A subscription of a partition: its cursor, :mod:`reference.pending_ack` with its pending-ack
log, the dispatcher, and for Shared and Key_Shared subscriptions the delayed-delivery service.

The dispatcher reads forward from its read position.  What may be read is the buffer's decision
(:func:`reference.buffer.dispatch`), whether a message is still deliverable is the pending ack's
(:func:`reference.pending_ack.message_state`), whether a delayed message waits is the tracker's
(:mod:`engine.delayed.service` over :mod:`reference.delayed`).  Exclusive and Failover
subscriptions have one active consumer (the lowest id); Shared ones round-robin; Key_Shared ones
route by key (:mod:`.key_shared`), batch entries handed out per index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Protocol, cast

import immutables

from engine.broker.component import BrokerError, BrokerHost, Component, after, all_of, error_of, fail
from engine.broker.dispatcher import ConsumerSlot, Delivered, Handout
from engine.broker.entries import StoredMessage
from engine.broker.key_shared import hand_over_top_range, select, split_range, sticky_key_hash
from engine.delayed.service import DelayedDeliveryService
from engine.delayed.shared import TopicDelayedIndex
from engine.scheduler import Future
from engine.storage.ledger import InitialPosition, LedgerError, ManagedCursor, ManagedLedger
from engine.storage.memory_ledger import non_durable_cursor
from engine.storage.record_log import LogWriteFailed, RecordLog, RecordPosition
from reference import batched_log as bl
from reference import buffer as tb
from reference import delayed as dl
from reference import pending_ack as pa
from reference.cursor import reset_read_position
from spec.envelope import LogKind
from spec.errors import NotAllowed, ServiceUnitNotReady
from spec.history import object_id, state_digest
from spec.pb import TransactionPendingAck_pb2 as pa_pb
from spec.result import Effect, Err, Ok
from spec.types import (
    EARLIEST,
    AckType,
    LedgerInfo,
    MessageState,
    Position,
    TxnAction,
    TxnID,
    previous_position,
    words_to_bits,
)

__all__ = ["SubscriptionService", "Topic", "reader_start"]

# What the pending ack's steps return (its values are the machine's: outcomes, Queued, Ignored).
PendingAckResult = Ok[object] | Err
# The effects that touch the cursor or the dispatcher once the pending-ack record is logged.
CursorEffect = pa.CursorIndividualAck | pa.CursorCumulativeAck | pa.RedeliverUnacknowledgedMessages

_SUB_TYPES = {
    "Exclusive": pa.SubType.Exclusive,
    "Shared": pa.SubType.Shared,
    "Failover": pa.SubType.Failover,
    "Key_Shared": pa.SubType.Key_Shared,
}


class Topic(Protocol):
    """What a subscription needs of its partition: the topic's ledger and the messages written to
    it, the buffer's state (what may be dispatched), retention, the reload a failed pending-ack
    write asks for (the whole topic reloads), and the shared delayed index of this load (DD-30)."""

    name: str
    ledger: ManagedLedger | None
    messages: dict[Position, StoredMessage]
    state: tb.BufferState | None
    subscriptions: dict[str, SubscriptionService]
    delayed_index: TopicDelayedIndex | None

    def schedule_trim(self) -> None: ...

    def shared_delayed_index(self) -> TopicDelayedIndex: ...

    def reload(self) -> None: ...


def reader_start(
    start_message: Position | None,
    initial_position: InitialPosition,
    ledgers: Sequence[LedgerInfo],
    last_confirmed: Position,
) -> Position:
    """The mark-delete position a reader's non-durable cursor starts with (PA-24).

    A start message ``(ledger, entry)`` starts after ``(ledger, entry - 1)``: the start message is
    delivered again and the client drops what it must not show.  ``(-1, -1)`` (``earliest``)
    starts before the first live entry; no start message, or one past the last entry (``latest``),
    starts after the last entry, or before the first with initial position EARLIEST."""
    first = Position(ledgers[0].ledger_id, -1) if ledgers else last_confirmed
    start = start_message
    if start is not None and start.ledger_id >= 0 and start.entry_id >= 0:
        start = Position(start.ledger_id, start.entry_id - 1)
    if start is None or start > last_confirmed:
        return first if initial_position is InitialPosition.EARLIEST else last_confirmed
    if start < first:
        return first
    return start


class SubscriptionService(Component[pa.PendingAckState, pa.Command, PendingAckResult]):
    """One subscription of a partition."""

    machine = "pending_ack"

    def __init__(
        self,
        partition: Topic,
        name: str,
        sub_type: str,
        initial_position: InitialPosition,
        host: BrokerHost,
        *,
        start: Position | None = None,
    ) -> None:
        """``start``: a reader's non-durable subscription (PA-24), whose cursor starts with this
        mark-delete position; None: a durable subscription, whose cursor is the ledger's."""
        super().__init__(host)
        self.partition = partition
        self.name = name
        self.durable = start is None
        self._start = start
        self._kept = False  # a non-durable subscription outlives its consumers' leaving once (a seek)
        self.sub_type = _SUB_TYPES[sub_type]
        self.initial_position = initial_position
        self.delayed: DelayedDeliveryService | None = None
        self.cursor: ManagedCursor | None = None
        self.log: RecordLog | None = None
        self.consumers: dict[int, ConsumerSlot] = {}
        self.read_after: Position = EARLIEST
        # The buffer state and read position of the last dispatch that consulted the buffer.
        self._dispatched: tuple[tb.BufferState | None, Position] = (None, EARLIEST)
        self.replay: set[Position] = set()
        self.redeliveries: dict[Position, int] = {}
        self._positions: dict[int, RecordPosition] = {}
        self._trimmed = -1
        self._queued: list[Future[None]] = []
        self._rr = 0
        self._writing = 0  # pending-ack records being written
        self._settled: list[Callable[[], None]] = []  # what waits for them (a seek)

    @property
    def obj(self) -> str:
        """The history's object id of this subscription's pending ack."""
        return object_id("subscription", f"{self.partition.name}#{self.name}")

    def _machine_step(
        self, state: pa.PendingAckState, command: pa.Command
    ) -> tuple[pa.PendingAckState, PendingAckResult]:
        return pa.step(state, command)

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
        self._new_epoch()
        self._writing, self._settled = 0, []
        ledger = self.partition.ledger
        assert ledger is not None
        self._positions = {}
        self._trimmed = -1
        try:
            if self._start is not None:
                # PA-24: in memory only, never one of the ledger's cursors; a reload starts it afresh
                # (the partition drops its non-durable subscriptions when it crashes).
                self.cursor = non_durable_cursor(ledger, self.name, self._start)
            else:
                self.cursor = ledger.open_cursor(self.name, self.initial_position)
            view = self._cursor_view(self.cursor)
            recovery: dict[str, object] = {"sub_type": self.sub_type, "cursor": view}
            if self._start is not None or not self.host.store.exists(self.log_name):
                # PA-17: no txn ever acked here, so no pending-ack log: the handle starts lazily.
                self.log = None
                self.state = pa.initial(self.config, sub_type=self.sub_type, cursor=view)
            else:
                records, durable = self._open_log()
                self.state = pa.recover(
                    self.config, records, cursor=view, sub_type=self.sub_type, next_record_id=len(records)
                )
                recovery.update(
                    records=records,
                    next_record_id=len(records),
                    log=bl.durable_entries(durable),
                    recovered=state_digest(self.state),
                )
                assert self.log is not None
                self.log.ledger.delete_consumed_ledgers()  # retention of the pending-ack log (PA-16)
        except (LedgerError, LogWriteFailed):
            self.state = None
            return False
        self._observe_recovery(recovery)
        if self.delayed is not None:
            self.delayed.close()
        # Pulsar's dispatcher makes its tracker when the first delayed message arrives (dispatch
        # below).  A cursor whose properties name buckets has a tracker to recover now (DD-24: from
        # its snapshot ledgers and those properties).
        self.delayed = None
        if self.delayed_enabled and any(key.startswith(dl.BUCKET_PROPERTY_PREFIX) for key in self.cursor.properties):
            self.delayed = self._open_delayed()
        self.read_after = self.cursor.mark_delete_position
        self._dispatched = (None, EARLIEST)
        self.replay = set()
        self._queued = []
        for slot in self.consumers.values():
            slot.clear()
            slot.unacked.clear()
        return True

    @property
    def shares_delayed_index(self) -> bool:
        """Whether this subscription's delayed messages wait in its partition's shared index (the
        broker's ``shared_delayed_index`` option, DD-30) instead of a tracker of its own."""
        return self.host.shared_delayed_index and self.delayed_enabled and self.durable

    def delayed_service(self) -> DelayedDeliveryService:
        """The subscription's tracker, made (and recovered) now if it does not exist yet."""
        if self.delayed is None:
            self.delayed = self._open_delayed()
        return self.delayed

    def _open_delayed(self) -> DelayedDeliveryService:
        assert self.cursor is not None
        return DelayedDeliveryService.load(
            self.sim,
            self.host.store,
            self.config,
            self.cursor,
            partition=self.partition.name,
            subscription=self.name,
            read_more=self.dispatch,
            failed=self.reload,
            observer=lambda: self.host.observer,
            async_create=self.host.delayed_async_create,
        )

    @property
    def log_name(self) -> str:
        return f"{self.partition.name}-{self.name}__transaction_pending_ack"

    def _open_log(self) -> tuple[list[tuple[int, pa.PendingAckRecord]], tuple[bl.LoggedEntry, ...]]:
        """Open (create) the pending-ack log and read its live records, numbered in log order, and
        the durable entries they were decoded from."""
        log = RecordLog(
            self.sim,
            self.host.store.open(self.log_name, closes_on_write_failure=True),
            LogKind.PENDING_ACK,
            self.config,
            batching=self.host.batching,
            metrics=self.host.writer_metrics.get(LogKind.PENDING_ACK),
            owner=self,
        )
        records = []
        self._positions = {}
        durable, replayed = log.read_back()
        for rid, (position, message) in enumerate(replayed):
            assert isinstance(message, pa_pb.PendingAckMetadataEntry)
            records.append((rid, pa.PendingAckRecord.from_pb(message)))
            self._positions[rid] = position
        self.log = log
        return records, durable

    def crash(self) -> None:
        self._new_epoch()
        self._writing, self._settled = 0, []
        if self.log is not None:
            self.log.crash()
        self.state = None
        self.log = None
        if self.delayed is not None:
            self.delayed.close()
        self.consumers = {}
        self._queued = []
        self.redeliveries = {}  # Pulsar's InMemoryRedeliveryTracker does not survive the broker
        self._observe_crash()  # the tracker's own close (above) ends its ops

    def reload(self) -> None:
        """The pending-ack handle's memory ran ahead of its log: the whole topic reloads."""
        self.partition.reload()

    # -- stepping ---------------------------------------------------------------------------------

    def _step(self, command: pa.Command) -> tuple[PendingAckResult, Future[None]]:
        result = self._advance(command)
        return result, self._carry_out(result.effects)

    def _carry_out(self, effects: Iterable[Effect]) -> Future[None]:
        assert self.cursor is not None
        writes: list[Future[None]] = []
        for effect in effects:
            match effect:
                case pa.AppendPendingAckRecord():
                    writes.append(self._append(effect))
                case pa.TrimPendingAckLog():
                    after(all_of(list(writes)), partial(self._trim, effect.record_id))
                case pa.CursorIndividualAck() | pa.CursorCumulativeAck() | pa.RedeliverUnacknowledgedMessages():
                    # Pulsar touches the cursor (or redelivers) only once the pending-ack record is logged.
                    after(all_of(list(writes)), partial(self._cursor_effect, effect, self._epoch))
                case pa.InitPendingAckStore():
                    self.sim.schedule(1, self._init_done(self._epoch))
                case pa.ScheduleInitRetry():
                    self.sim.schedule(effect.delay_ms, self._retry_later(self._epoch))
        return all_of(writes)

    def _cursor_effect(self, effect: CursorEffect, epoch: int) -> None:
        if not self._current(epoch) or self.cursor is None:
            return
        try:
            self._apply_cursor_effect(effect)
        except LedgerError:
            # The cursor could not be written (a disk error in a store that commits every change):
            # the pending ack ran ahead of the cursor, so reload both, as after any failed write.
            self.reload()

    def _apply_cursor_effect(self, effect: CursorEffect) -> None:
        assert self.cursor is not None
        match effect:
            case pa.CursorIndividualAck():
                whole = [a.position for a in effect.positions if a.ack_set is None]
                sets = {a.position: a.ack_set for a in effect.positions if a.ack_set is not None}
                if whole:
                    self.cursor.delete(whole)
                if sets:
                    self.cursor.delete(list(sets), sets)
                self._acked(a.position for a in effect.positions)
                self._mark_delete_moved()
            case pa.CursorCumulativeAck():
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
            case pa.RedeliverUnacknowledgedMessages():
                self.replay.update(effect.positions)
                for slot in self.consumers.values():
                    slot.unacked.difference_update(effect.positions)
                self.dispatch()

    def _append(self, effect: pa.AppendPendingAckRecord) -> Future[None]:
        assert self.log is not None
        done: Future[None] = Future()
        rid, epoch = effect.record_id, self._epoch
        self._writing += 1

        def complete(f: Future[RecordPosition]) -> None:
            if not self._current(epoch):
                return
            self._writing -= 1
            if f.error is not None:
                done.set_exception(f.error)
                self.reload()
                return
            self._positions[rid] = f.result()
            if rid <= self._trimmed:
                self._trim(self._trimmed)
            done.set_result(None)  # the cursor changes waiting for the record run now
            if not self._writing:
                settled, self._settled = self._settled, []
                for action in settled:
                    action()

        self.log.add(effect.record.to_pb().SerializeToString()).add_done_callback(complete)
        return done

    def _trim(self, record_id: int) -> None:
        """PA-16: the pending-ack log is deleted up to ``record_id``."""
        assert self.log is not None
        self._trimmed = max(self._trimmed, record_id)
        doomed = sorted(r for r in self._positions if r <= self._trimmed)
        try:
            self.log.delete([self._positions.pop(r) for r in doomed])
        except LedgerError:
            self.reload()  # the log's cursor could not be written: reload, as after any failed write

    def _init_done(self, epoch: int) -> Callable[[], None]:
        def done() -> None:
            try:
                if self.log is None:
                    self._open_log()  # a brand-new log: nothing to replay
            except (LedgerError, LogWriteFailed):
                self._step(pa.PendingAckInitFailed(retryable=True))
                return
            result, written = self._step(pa.PendingAckInitComplete())
            queued, self._queued = self._queued, []
            # The queued requests' own outcomes, in the order they were queued (PA-17).
            outcomes = cast(tuple[PendingAckResult, ...], result.value) if isinstance(result, Ok) else ()
            for waiter, outcome in zip(queued, outcomes, strict=True):
                self._answer(waiter, outcome, written)
            self.dispatch()

        return self._while_live(epoch, done)

    def _retry_later(self, epoch: int) -> Callable[[], None]:
        def retry() -> None:
            self._step(pa.RetryPendingAckInit())

        return self._while_live(epoch, retry)

    @staticmethod
    def _answer(waiter: Future[None], outcome: PendingAckResult, written: Future[None]) -> None:
        if isinstance(outcome, Err):
            waiter.set_exception(BrokerError(outcome.error))
            return

        def done(w: Future[None]) -> None:
            if w.error is not None:
                waiter.set_exception(BrokerError(error_of(w.error)))
            else:
                waiter.set_result(None)

        written.add_done_callback(done)

    # -- consumers and dispatch -------------------------------------------------------------------

    def add_consumer(self, consumer_id: int) -> None:
        self._kept = False
        if consumer_id not in self.consumers:
            slot = ConsumerSlot(consumer_id)
            if self.sub_type is pa.SubType.Key_Shared:
                slot.hash_range_end = split_range(self.consumers.values())
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
        if not self.durable:
            self.crash()  # PA-24: nothing of a reader's subscription is durable
            return
        if self.shares_delayed_index and self.partition.delayed_index is not None:
            self.partition.delayed_index.unsubscribe(self.name)
        if self.delayed is not None:
            self.delayed.clear()
        else:
            DelayedDeliveryService.clean_residual(
                self.host.store, self.cursor, partition=self.partition.name, subscription=self.name
            )
        if self.log is not None:
            self.log.close()  # the pending-ack log's writer closes before the log goes (BW-18)
        self.crash()
        ledger.delete_cursor(self.name)
        self.host.store.delete(self.log_name)

    def remove_consumer(self, consumer_id: int) -> None:
        slot = self.consumers.pop(consumer_id, None)
        if slot is not None and not self.durable and not self.consumers and not self._kept:
            # PA-24: a reader's subscription goes with its last consumer.
            for waiter in slot.waiting:
                waiter.set_result(None)
            self.crash()
            if self.partition.subscriptions.get(self.name) is self:
                del self.partition.subscriptions[self.name]
            return
        if slot is not None:
            if self.sub_type is pa.SubType.Key_Shared:
                hand_over_top_range(slot, self.consumers.values())
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
        chosen = select(active, sticky_key_hash(self.partition.messages[position].partition_key))
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
        if buffer is self._dispatched[0] and self.read_after == self._dispatched[1]:
            # The buffer has not stepped and nothing was read since the last call, which read every
            # entry up to the readable limit: the buffer's answer would be empty.
            read = tb.Dispatch((), ())
        else:
            read = tb.dispatch(buffer, self.read_after)
        if read.auto_acked:
            self._step(pa.NormalAck(AckType.INDIVIDUAL, tuple(pa.AckedPosition(p) for p in read.auto_acked)))
            if self.state is None:
                return  # the cursor could not be written: the topic is reloading
        seen = [*read.delivered, *read.auto_acked]
        if seen:
            self.read_after = max(self.read_after, *seen)
        self._dispatched = (buffer, self.read_after)
        fresh = []
        shared = self.partition.shared_delayed_index() if self.shares_delayed_index else None
        for position in read.delivered:
            message = self.partition.messages[position]
            if message.deliver_at is not None and self.delayed_enabled:
                if shared is not None:
                    if shared.add_message(self.name, position, message.deliver_at):
                        continue
                    fresh.append(position)
                    continue
                waits = self.delayed_service().add_message(position, message.deliver_at)
                if self.state is None:
                    return  # the tracker's storage failed: the topic is reloading
                if waits:
                    continue
            fresh.append(position)
        if shared is not None:
            self.replay.update(shared.scheduled_messages(self.name))
        elif self.delayed is not None:
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
            for i in indexes:
                slot.push(handout, i)
        for slot in active:
            self._serve(slot)

    def _mark_delete_moved(self) -> None:
        """The cursor's mark-delete position may have moved: the delayed tracker's trim input (DD-22)."""
        if self.delayed is not None and self.cursor is not None:
            self.delayed.mark_delete_moved(self.cursor.mark_delete_position)
        self.partition.schedule_trim()  # and topic retention's

    def _serve(self, slot: ConsumerSlot) -> None:
        while slot.waiting and slot.queue:
            handout, index = slot.pop()
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
            return Future.completed(self._delivered(*slot.pop()))
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
                slot.drop_position(position, keep)
        if self._release_joined():
            epoch = self._epoch
            # What was held for it is dispatched after the ack that released it completes.
            self.sim.schedule(0, lambda: self.dispatch() if self._current(epoch) else None)

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
        if txn_id is not None and not self.durable:
            return fail(NotAllowed(f"transactional acks on the non-durable subscription {self.name} (PA-24)"))
        acked = (self._acked_position(position, batch_index, cumulative),)
        command: pa.Command
        if txn_id is None:
            command = pa.NormalAck(AckType.CUMULATIVE if cumulative else AckType.INDIVIDUAL, acked)
        elif cumulative:
            command = pa.CumulativeAck(txn_id, acked)
        else:
            command = pa.IndividualAck(txn_id, acked)
        result, written = self._step(command)
        if isinstance(result, Err):
            return fail(result.error)
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
        if not self.durable:
            return Future.completed(None)  # PA-24: no txn acks here, so the end of a txn unknown here
        if self.state is None:
            return fail(ServiceUnitNotReady(f"subscription {self.name} is not loaded"))
        command: pa.Command = (
            pa.CommitTxn(txn_id, low_water_mark) if action is TxnAction.COMMIT else pa.AbortTxn(txn_id, low_water_mark)
        )
        result, written = self._step(command)
        if isinstance(result, Err):
            return fail(result.error)
        waiter: Future[None] = Future()
        if isinstance(result.value, pa.Queued):
            self._queued.append(waiter)
        else:
            self._answer(waiter, result, written)
        self.dispatch()
        return waiter

    # -- seek (PA-22, PA-23) ----------------------------------------------------------------------

    def seek(self, read_position: Position, ack_set: tuple[int, ...] | None = None) -> Future[None]:
        """CommandSeek with a message id: the subscription restarts at ``read_position`` (PA-22).

        Waits for the pending-ack records being written (a commit's cursor change follows its
        record), then the machine decides; the durable cursor, the delayed tracker, the redelivery
        counts and the dispatcher follow.  The caller disconnects the consumers (they reconnect
        with fresh permits, as Pulsar's ``disconnectActiveConsumers(isResetCursor=true)``)."""
        if self.state is None:
            return Future()
        done: Future[None] = Future()
        epoch = self._epoch

        def run() -> None:
            if not self._live(epoch):
                return  # crashed meanwhile: never answered, the client's timeout ends it
            if self._writing:
                self._settled.append(run)
                return
            try:
                self._reset(read_position, ack_set)
            except BrokerError as exc:
                done.set_exception(exc)
                return
            done.set_result(None)

        run()
        return done

    def seek_time(self, timestamp: int) -> Future[None]:
        """CommandSeek with a publish time (PA-23): the entry after the newest one published
        before ``timestamp``, or the first live entry when none was."""
        ledger = self.partition.ledger
        if self.state is None or ledger is None:
            return Future()
        earlier = [p for p, m in self.partition.messages.items() if m.publish_time < timestamp]
        if not earlier:
            infos = ledger.ledgers()
            first = next((Position(i.ledger_id, 0) for i in infos if i.entries > 0), ledger.last_confirmed().next())
            return self.seek(first)
        newest = max(earlier)
        return self.seek(Position(newest.ledger_id, newest.entry_id + 1))

    def _reset(self, read_position: Position, ack_set: tuple[int, ...] | None) -> None:
        """PA-22: step the machine, then make the cursor and the dispatcher follow."""
        ledger, cursor = self.partition.ledger, self.cursor
        assert ledger is not None and cursor is not None
        infos, last = ledger.ledgers(), ledger.last_confirmed()
        start = reset_read_position(read_position, infos, last)
        mark_delete = last if start is None else previous_position(start, infos)
        read: pa.AckedPosition | None = None
        stored = None if start is None else self.partition.messages.get(start)
        if start == read_position and ack_set is not None and stored is not None and stored.batch is not None:
            read = pa.AckedPosition(read_position, ack_set, stored.batch_size)
        result = self._advance(pa.ResetCursor(mark_delete, read))
        if isinstance(result, Err):
            raise BrokerError(result.error)
        # What was acknowledged before the seek starts its redelivery count afresh (Pulsar's
        # redelivery tracker forgets a position when it is acked); what was held keeps counting.
        self.redeliveries = {p: n for p, n in self.redeliveries.items() if not cursor.is_deleted(p)}
        for effect in result.effects:
            if isinstance(effect, pa.TrimPendingAckLog) and self.log is not None:
                self._trim(effect.record_id)
        try:
            cursor.reset(read_position, None if read is None else ack_set)
        except LedgerError as exc:
            self.reload()  # the machine reset but the durable cursor did not: load it again
            raise BrokerError(exc.domain_error()) from None
        if self.delayed is not None:
            self.delayed.clear()  # DD-23: the tracker was derived from the backlog the seek replaced
        self.read_after = cursor.mark_delete_position
        self._dispatched = (None, EARLIEST)
        self.replay = set()
        for slot in self.consumers.values():
            slot.clear()
            slot.unacked.clear()
            slot.joined_after = None
        self._kept = not self.durable
        self._mark_delete_moved()
