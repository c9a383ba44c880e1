"""A subscription of a partition: its cursor and :mod:`reference.pending_ack` (the pending-ack
handle), and the parts the handle's steps drive, each in a module of its own:

* :mod:`.pending_ack_log` -- the pending-ack log: appends, trims, the read-back at load;
* :mod:`.dispatcher` -- the consumers and what is handed to them (with :mod:`.redelivery`, the
  redelivery counts);
* :mod:`.delayed_delivery` -- for Shared and Key_Shared subscriptions, the delayed-delivery tracker
  (:mod:`engine.delayed.service` over :mod:`reference.delayed`) or the partition's shared index;
* :mod:`.acks` -- the pending ack's view of the cursor and the cursor writes its effects ask for;
* :mod:`.seek` -- where a seek restarts the subscription.

This module is the handle's lifecycle (load, crash, delete), its steps and their effects, and
what a consumer asks of the subscription: subscribe, receive, acknowledge, redeliver, seek.  A
dispatch reads what the buffer lets it read (:func:`reference.buffer.dispatch`), acknowledges
the markers and aborted messages it skips, lets the delayed part keep what is not due, and hands
the rest to the dispatcher, which asks the pending ack (:func:`reference.pending_ack.message_state`)
what of each entry is still to be delivered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Protocol, cast

from engine.broker.acks import (
    acked_position,
    cursor_view,
    names_no_entry,
    write_cumulative_ack,
    write_individual_ack,
)
from engine.broker.component import BrokerError, BrokerHost, Component, after, all_of, error_of, fail
from engine.broker.delayed_delivery import DelayedDelivery
from engine.broker.dispatcher import ConsumerSlot, Delivered, Dispatcher
from engine.broker.entries import StoredMessage
from engine.broker.pending_ack_log import PendingAckLog
from engine.broker.seek import publish_time_position, reset_command
from engine.delayed.service import DelayedDeliveryService
from engine.delayed.shared import TopicDelayedIndex
from engine.scheduler import Future
from engine.storage.ledger import InitialPosition, LedgerError, ManagedCursor, ManagedLedger
from engine.storage.memory_ledger import non_durable_cursor
from engine.storage.record_log import LogWriteFailed, RecordLog
from reference import buffer as tb
from reference import delayed as dl
from reference import pending_ack as pa
from spec.errors import NotAllowed, PersistenceError, ServiceUnitNotReady
from spec.history import object_id, state_digest
from spec.result import Effect, Err, Ok
from spec.types import AckType, LedgerInfo, MessageState, Position, TxnAction, TxnID

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


def _asked_of(host: BrokerHost) -> Callable[[int], bool]:
    """Whether a consumer asked for messages yet, by its id (the hook is read at call time: a server
    sets it after the broker starts)."""

    def asked(consumer_id: int) -> bool:
        hook = host.consumer_asked
        return hook is None or hook(consumer_id)

    return asked


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
        self.cursor: ManagedCursor | None = None
        self.pending_log = PendingAckLog(
            host, f"{partition.name}-{name}__transaction_pending_ack", owner=self, failed=self.reload
        )
        self.dispatcher = Dispatcher(self.sim, partition, self.sub_type, self.deliverable, asked=_asked_of(host))
        self.delays = DelayedDelivery(host, partition, name, self.sub_type, durable=self.durable, owner=self)
        self._queued: list[Future[None]] = []  # requests the handle queued until its store is ready

    @property
    def obj(self) -> str:
        """The history's object id of this subscription's pending ack."""
        return object_id("subscription", f"{self.partition.name}#{self.name}")

    def _machine_step(
        self, state: pa.PendingAckState, command: pa.Command
    ) -> tuple[pa.PendingAckState, PendingAckResult]:
        return pa.step(state, command)

    @property
    def log_name(self) -> str:
        return self.pending_log.name

    @property
    def log(self) -> RecordLog | None:
        """The pending-ack log's writer (None until a txn acked here, PA-17)."""
        return self.pending_log.log

    @property
    def consumers(self) -> dict[int, ConsumerSlot]:
        return self.dispatcher.consumers

    @property
    def delayed(self) -> DelayedDeliveryService | None:
        """The delayed-delivery tracker, once it was made."""
        return self.delays.service

    @property
    def tracker(self) -> dl.Tracker | None:
        """The delayed-delivery tracker's state (None when delayed delivery does not apply)."""
        return self.delays.tracker

    def delayed_service(self) -> DelayedDeliveryService:
        """The subscription's tracker, made (and recovered) now if it does not exist yet."""
        assert self.cursor is not None
        return self.delays.tracker_for(self.cursor)

    def _mark_delete(self) -> Position | None:
        return None if self.cursor is None else self.cursor.mark_delete_position

    # -- lifecycle --------------------------------------------------------------------------------

    def load(self) -> bool:
        """Open the cursor and replay the pending-ack log over it (PA-17 .. PA-20)."""
        self._new_epoch()
        self.pending_log.reset()
        ledger = self.partition.ledger
        assert ledger is not None
        try:
            if self._start is not None:
                # PA-24: in memory only, never one of the ledger's cursors; a reload starts it afresh
                # (the partition drops its non-durable subscriptions when it crashes).
                self.cursor = non_durable_cursor(ledger, self.name, self._start)
            else:
                self.cursor = ledger.open_cursor(self.name, self.initial_position)
            view = cursor_view(self.cursor, self.partition.messages)
            recovery: dict[str, object] = {"sub_type": self.sub_type, "cursor": view}
            if self._start is not None or not self.pending_log.exists():
                # PA-17: no txn ever acked here, so no pending-ack log: the handle starts lazily.
                self.pending_log.start_lazily()
                self.state = pa.initial(self.config, sub_type=self.sub_type, cursor=view)
            else:
                records, durable = self.pending_log.open()
                self.state = pa.recover(
                    self.config, records, cursor=view, sub_type=self.sub_type, next_record_id=len(records)
                )
                recovery.update(
                    records=records,
                    next_record_id=len(records),
                    **self.pending_log.recovery_inputs(durable),
                    recovered=state_digest(self.state),
                )
                self.pending_log.delete_consumed_ledgers()  # retention of the pending-ack log (PA-16)
        except (LedgerError, LogWriteFailed):
            self.state = None
            return False
        self._observe_recovery(recovery)
        # Pulsar's dispatcher makes its tracker when the first delayed message arrives (dispatch
        # below); one whose buckets the cursor's properties name is recovered now.
        self.delays.load(self.cursor)
        self.dispatcher.rewind(self.cursor.mark_delete_position)
        self._queued = []
        return True

    def crash(self) -> None:
        self._new_epoch()
        self.pending_log.crash()
        self.state = None
        self.delays.close()
        self.dispatcher.crash()  # Pulsar's InMemoryRedeliveryTracker does not survive the broker
        self._queued = []
        self._observe_crash()  # the tracker's own close (above) ends its ops

    def reload(self) -> None:
        """The pending-ack handle's memory ran ahead of its log: the whole topic reloads."""
        self.partition.reload()

    def delete(self) -> None:
        """Unsubscribe: the subscription and everything it owns go for good: its delayed messages'
        snapshots (:meth:`.DelayedDelivery.unsubscribe`), the cursor (it no longer holds back ledger
        deletion), and the pending-ack log, so a new subscription of the same name starts clean.
        Waiting receives get nothing; requests still queued at the handle never hear back."""
        assert self.cursor is not None
        ledger = self.partition.ledger
        assert ledger is not None
        self.dispatcher.end_receives()
        if not self.durable:
            self.crash()  # PA-24: nothing of a reader's subscription is durable
            return
        self.delays.unsubscribe(self.cursor)
        self.pending_log.close()  # the pending-ack log's writer closes before the log goes (BW-18)
        self.crash()
        ledger.delete_cursor(self.name)
        self.host.store.delete(self.log_name)

    # -- stepping ---------------------------------------------------------------------------------

    def _step(self, command: pa.Command) -> tuple[PendingAckResult, Future[None]]:
        result = self._advance(command)
        return result, self._carry_out(result.effects)

    def _carry_out(self, effects: Iterable[Effect]) -> Future[None]:
        """Carry out a step's effects; the returned future completes once its pending-ack records
        are logged and its cursor changes written, and never when a cursor write failed."""
        assert self.cursor is not None
        writes: list[Future[None]] = []
        cursor_writes: list[Future[None]] = []
        trims: list[int] = []
        for effect in effects:
            match effect:
                case pa.AppendPendingAckRecord():
                    writes.append(self.pending_log.append(effect.record_id, effect.record))
                case pa.TrimPendingAckLog():
                    trims.append(effect.record_id)
                case pa.CursorIndividualAck() | pa.CursorCumulativeAck() | pa.RedeliverUnacknowledgedMessages():
                    # Pulsar touches the cursor (or redelivers) only once the pending-ack record is logged.
                    applied: Future[None] = Future()
                    cursor_writes.append(applied)
                    all_of(list(writes)).add_done_callback(
                        partial(self._cursor_effect_after, effect, self._epoch, applied)
                    )
                case pa.InitPendingAckStore():
                    self.sim.schedule(1, self._init_done(self._epoch))
                case pa.ScheduleInitRetry():
                    self.sim.schedule(effect.delay_ms, self._retry_later(self._epoch))
        # The machine trims what its cursor view covers, which holds this step's cursor change (a
        # commit's acks): trimmed before that change is written, a failed write would lose them.
        for record_id in trims:
            after(all_of(writes + cursor_writes), partial(self.pending_log.trim, record_id))
        # A normal ack has no pending-ack record: the cursor write is all that makes it durable, so
        # the ack is answered only once that write succeeded (PA-18, PA-19).
        return all_of(writes + cursor_writes)

    def _cursor_effect_after(
        self, effect: CursorEffect, epoch: int, applied: Future[None], writes: Future[None]
    ) -> None:
        if writes.error is not None:
            applied.set_exception(writes.error)
        else:
            self._cursor_effect(effect, epoch, applied)

    def _cursor_effect(self, effect: CursorEffect, epoch: int, applied: Future[None]) -> None:
        if not self._current(epoch) or self.cursor is None:
            # The subscription's memory went after its pending-ack record was logged: the reload
            # replays the record and the cursor change with it.
            applied.set_result(None)
            return
        try:
            self._apply_cursor_effect(effect)
        except LedgerError:
            # The cursor could not be written (a disk error in a store that commits every change):
            # the pending ack ran ahead of the cursor, so reload both, as after any failed write.
            # What waits for the write is never answered, as after a crash: the change was lost.
            self.reload()
            return
        applied.set_result(None)

    def _apply_cursor_effect(self, effect: CursorEffect) -> None:
        assert self.cursor is not None
        match effect:
            case pa.CursorIndividualAck():
                write_individual_ack(self.cursor, effect)
                self._follow_cursor()
                self._acked(self.dispatcher.acked((a.position for a in effect.positions), self._mark_delete()))
                self._mark_delete_moved()
            case pa.CursorCumulativeAck():
                write_cumulative_ack(self.cursor, effect, self.partition.ledger)
                self._follow_cursor()
                self._acked(self.dispatcher.acked_upto(effect.position.position, self._mark_delete()))
                self._mark_delete_moved()
            case pa.RedeliverUnacknowledgedMessages():
                self.dispatcher.return_unacked(effect.positions)
                self.dispatch()

    def _follow_cursor(self) -> None:
        """PA-25: the durable cursor folded its deletes past where the pending ack's view can (a
        ledger boundary, which the view does not know): the view follows it, so that it holds no
        more than the cursor does, however many ledgers the subscription has read through."""
        if self.state is None or self.cursor is None:
            return
        durable = self.cursor.mark_delete_position
        if durable > self.state.cursor.mark_delete_position:
            self._step(pa.FollowCursor(durable))

    def _acked(self, released: bool) -> None:
        if released:
            epoch = self._epoch
            # What was held for it is dispatched after the ack that released it completes.
            self.sim.schedule(0, lambda: self.dispatch() if self._current(epoch) else None)

    def _mark_delete_moved(self) -> None:
        """The cursor's mark-delete position may have moved: the delayed tracker's trim input (DD-22)."""
        if self.cursor is not None:
            self.delays.mark_delete_moved(self.cursor.mark_delete_position)
        self.partition.schedule_trim()  # and topic retention's

    def _init_done(self, epoch: int) -> Callable[[], None]:
        def done() -> None:
            try:
                if self.pending_log.log is None:
                    self.pending_log.open()  # a brand-new log: nothing to replay
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
        self.dispatcher.add_consumer(consumer_id, self._mark_delete())
        self.dispatch()

    def remove_consumer(self, consumer_id: int) -> None:
        slot = self.dispatcher.consumers.pop(consumer_id, None)
        if slot is not None and not self.durable and not self.dispatcher.consumers and not self._kept:
            # PA-24: a reader's subscription goes with its last consumer.
            for waiter in slot.waiting:
                waiter.set_result(None)
            self.crash()
            if self.partition.subscriptions.get(self.name) is self:
                del self.partition.subscriptions[self.name]
            return
        if slot is not None:
            self.dispatcher.hand_over(slot)
            self.dispatch()

    def deliverable(self, position: Position) -> list[int | None]:
        """The messages of an entry still PENDING: ``[None]`` for a single message, else the batch
        indexes neither acknowledged nor held by a txn (the sent ack set of 5.9, #19581)."""
        assert self.state is not None
        message = self.partition.messages.get(position)
        if message is None:
            return []  # the partition holds no such entry: nothing to deliver (it was never written)
        if message.batch is None:
            return [None] if pa.message_state(self.state, position) is MessageState.PENDING else []
        return [
            i for i in range(message.batch_size) if pa.message_state(self.state, position, i) is MessageState.PENDING
        ]

    def dispatch(self) -> None:
        """Hand every readable message to a consumer (TB-15 .. TB-17; the pending-ack filter of 5.9).

        What may be read is the buffer's decision (:func:`reference.buffer.dispatch`: delivered
        messages, and markers / aborted messages to acknowledge instead); whether a message is
        still PENDING is the pending ack's (:func:`reference.pending_ack.message_state`); whether a
        delayed message waits is the tracker's (:class:`reference.delayed.AddMessage`)."""
        buffer = self.partition.state
        if self.state is None or buffer is None:
            return
        active = self.dispatcher.active()
        if not active:
            return
        read = self.dispatcher.read(buffer)
        if read.auto_acked:
            self._step(pa.NormalAck(AckType.INDIVIDUAL, tuple(pa.AckedPosition(p) for p in read.auto_acked)))
            if self.state is None:
                return  # the cursor could not be written: the topic is reloading
        self.dispatcher.advance(buffer, [*read.delivered, *read.auto_acked])
        fresh = []
        shared = self.delays.shared_index()
        for position in read.delivered:
            deliver_at = self.partition.messages[position].deliver_at
            if deliver_at is not None and self.delays.enabled:
                assert self.cursor is not None
                waits = self.delays.add_message(position, deliver_at, shared, self.cursor)
                if self.state is None:
                    return  # the tracker's storage failed: the topic is reloading
                if waits:
                    continue
            fresh.append(position)
        self.dispatcher.replay.update(self.delays.scheduled_messages(shared))
        if self.state is None:
            return
        self.dispatcher.hand_out(fresh, active, self._mark_delete())

    def receive(self, consumer_id: int, wait_ms: int) -> Future[Delivered | None]:
        """The next message for the consumer, or None if none arrives within ``wait_ms``."""
        slot = self.dispatcher.consumers.get(consumer_id)
        if slot is None or self.state is None:
            return Future()
        self.dispatch()
        return self.dispatcher.receive(slot, wait_ms)

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
        no_room = self.host.store.no_room
        if no_room is not None:
            # An ack writes (the cursor, or the pending-ack log): refused while the disk is full,
            # before the pending ack takes it (the message stays unacknowledged, to be redelivered).
            return fail(PersistenceError(f"subscription {self.name} takes no ack now: {no_room}"))
        ledger = self.partition.ledger
        if self.cursor is not None and ledger is not None and names_no_entry(position, cumulative, self.cursor, ledger):
            # Refused before the pending ack takes it, as the cursor would refuse it: a txn holding
            # it would have it redelivered on abort (a message the partition does not hold), and a
            # normal ack's cursor write would fail and reload the topic.
            return fail(NotAllowed(f"message id {position} names no entry of {self.partition.name}"))
        acked = (acked_position(self.partition.messages, position, batch_index, cumulative),)
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
            self.dispatcher.txn_acked(consumer_id, position, cumulative)
        self._answer(waiter, result, written)
        self.dispatch()
        return waiter

    def redeliver(self, consumer_id: int, positions: Sequence[Position] | None) -> Future[None]:
        """redeliverUnacknowledgedMessages / negative acks: the consumer's unacked go back to the dispatcher."""
        slot = self.dispatcher.consumers.get(consumer_id)
        if slot is None or self.state is None:
            return Future()
        self.dispatcher.redeliver(slot, positions)
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
            if self.pending_log.defer(run):
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
        return self.seek(publish_time_position(ledger, self.partition.messages, timestamp))

    def _reset(self, read_position: Position, ack_set: tuple[int, ...] | None) -> None:
        """PA-22: step the machine, then make the cursor and the dispatcher follow."""
        ledger, cursor = self.partition.ledger, self.cursor
        assert ledger is not None and cursor is not None
        command = reset_command(read_position, ack_set, ledger, self.partition.messages)
        result = self._advance(command)
        if isinstance(result, Err):
            raise BrokerError(result.error)
        self.dispatcher.redeliveries.forget_acknowledged(cursor.is_deleted)
        for effect in result.effects:
            if isinstance(effect, pa.TrimPendingAckLog) and self.pending_log.log is not None:
                self.pending_log.trim(effect.record_id)
        try:
            cursor.reset(read_position, None if command.read_position is None else ack_set)
        except LedgerError as exc:
            self.reload()  # the machine reset but the durable cursor did not: load it again
            raise BrokerError(exc.domain_error()) from None
        self.delays.clear()  # DD-23: the tracker was derived from the backlog the seek replaced
        self.dispatcher.rewind(cursor.mark_delete_position, forget_joined=True)
        self._kept = not self.durable
        self._mark_delete_moved()
