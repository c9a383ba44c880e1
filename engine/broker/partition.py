"""One topic partition: its managed ledger and :mod:`reference.buffer`.

The buffer assigns every entry's position; the partition writes the entry and checks the ledger
agrees.  Snapshot records are keyed Avro messages on the namespace's system topics
(:mod:`.snapshot_topics`), read back on load; consumed ledgers go when the buffer agrees (TB-23).
The partition owns its subscriptions (:mod:`.subscription`): they load and crash with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import cast

from engine.broker.component import BrokerError, BrokerHost, Component, fail, named_error, read_all
from engine.broker.entries import (
    NO_BODY,
    BatchedMessage,
    MessageBody,
    StoredMessage,
    decode_stored_message,
    encode_entry,
)
from engine.broker.snapshot_topics import (
    SYSTEM_TOPICS,
    latest_by_key,
    namespace_topic,
    snapshot_messages,
    snapshot_records,
)
from engine.broker.subscription import SubscriptionService
from engine.delayed.shared import TopicDelayedIndex
from engine.scheduler import Future
from engine.storage.ledger import LedgerError, ManagedLedger
from reference import buffer as tb
from reference.ledger import consumed_ledgers
from spec.errors import PersistenceError, ServiceUnitNotReady
from spec.history import object_id
from spec.pb import PulsarApi_pb2 as api_pb
from spec.result import Effect, Err, Ok
from spec.types import Position, TxnAction, TxnID

__all__ = ["Partition"]

# What the buffer's steps return (its values are the machine's: positions, outcomes, Queued).
BufferResult = Ok[object] | Err


class Partition(Component[tb.BufferState, tb.Command, BufferResult]):
    """One topic partition: managed ledger, transaction buffer, snapshot ledger, subscriptions."""

    machine = "buffer"

    def __init__(self, host: BrokerHost, name: str) -> None:
        super().__init__(host)
        self.name = name
        self.ledger: ManagedLedger | None = None
        self.messages: dict[Position, StoredMessage] = {}
        self.subscriptions: dict[str, SubscriptionService] = {}
        self._parked: list[tuple[MessageBody, Future[Position]]] = []
        self._trim_scheduled: int | None = None  # the epoch a pending trim belongs to
        self.trimmed_ledgers: list[int] = []  # every ledger retention deleted, in order
        # The shared delayed index of this load (the broker's shared_delayed_index option, DD-30).
        self.delayed_index: TopicDelayedIndex | None = None

    @property
    def obj(self) -> str:
        """The history's object id of this partition's transaction buffer."""
        return object_id("partition", self.name)

    def _machine_step(self, state: tb.BufferState, command: tb.Command) -> tuple[tb.BufferState, BufferResult]:
        return tb.step(state, command)

    # -- retention ----------------------------------------------------------------------------

    def schedule_trim(self) -> None:
        """Pulsar trims consumed ledgers after a roll-over and when the slowest cursor's mark-delete
        moves; the trim runs as its own event, never inside another step's effects."""
        epoch = self._epoch
        if self._trim_scheduled == epoch:
            return
        self._trim_scheduled = epoch  # one pending trim per incarnation: a crash voids the old one

        def run() -> None:
            if self._current(epoch):
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
            self.reload()  # the buffer let the ledgers go but they are still there: reload the view
            return ()
        for position in [p for p in self.messages if p.ledger_id <= allowed]:
            del self.messages[position]
        self.trimmed_ledgers.extend(deleted)
        return deleted

    # -- lifecycle --------------------------------------------------------------------------------

    def load(self) -> bool:
        """Load the topic: read its entries and snapshot records, recover the buffer (TB-1, TB-24)."""
        self._new_epoch()
        self.delayed_index = None
        try:
            ledger = self.host.store.open(self.name)
            entries = [decode_stored_message(p, d) for p, d in read_all(ledger)]
            # The buffer's snapshot records, as a topic's recovery reads them from the namespace's
            # system topics (a table view: the last value per key).
            tables = {
                local: latest_by_key(self.host.system_topic(namespace_topic(self.name, local)))
                for local in SYSTEM_TOPICS
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
        self._observe_recovery(
            {
                "topic": self.name,
                "ledger_id": current,
                "ledgers": ledgers,
                "entries": view.entries,
                "snapshot_records": tuple(records),
            }
        )
        self.state = view
        self._advance(tb.StartRecovery())
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
        """The partition's memory goes (an unload, a reload after a failed write, a deletion, a
        broker crash); the broker tells whoever serves its producers and consumers."""
        self._new_epoch()
        self.state = None
        self._parked = []
        self.delayed_index = None
        for sub in self.subscriptions.values():
            sub.crash()
        # A reader's subscription dies with the broker's memory of the topic (PA-24).
        self.subscriptions = {name: sub for name, sub in self.subscriptions.items() if sub.durable}
        self._observe_crash()
        self.host.partition_unloaded(self.name)

    # -- stepping ---------------------------------------------------------------------------------

    def _step(self, command: tb.Command, body: MessageBody = NO_BODY) -> tuple[BufferResult, bool]:
        """Step the buffer and write what it asks; returns the result and whether every write held."""
        assert self.state is not None and self.ledger is not None
        self._finish_roll_over()
        before = self.state.max_read_position
        result = self._advance(command)
        assert self.state is not None
        if self.state.max_read_position != before:
            # TB-23 may now let a consumed ledger go.  Pulsar finds out at its periodic retention
            # check (retentionCheckIntervalInSeconds, 120 s), longer than a simulated run; the
            # engine checks at once, which changes when ledgers go, never which.
            self.schedule_trim()
        return result, self._carry_out(result.effects, body)

    def _carry_out(self, effects: Iterable[Effect], body: MessageBody = NO_BODY) -> bool:
        assert self.ledger is not None and self.state is not None
        for effect in effects:
            try:
                match effect:
                    case tb.AppendEntry():
                        if not self._append(effect.entry, body):
                            return False
                    case (
                        tb.WriteSnapshot()
                        | tb.WriteSnapshotSegment()
                        | tb.DeleteSnapshotSegment()
                        | tb.WriteSnapshotIndexes()
                        | tb.ClearSnapshot()
                    ):
                        for local, key, value in snapshot_messages(effect):
                            self.host.write_system_topic(namespace_topic(self.name, local), key, value)
                    case _:
                        raise TypeError(f"not a snapshot effect: {effect!r}")
            except LedgerError:
                self.reload()
                return False
        return True

    def _append(self, entry: tb.LogEntry, body: MessageBody) -> bool:
        """Write one entry where the buffer placed it; False (and a reload) if it cannot be."""
        assert self.ledger is not None
        current = self.ledger.ledgers()[-1]
        if current.ledger_id > entry.position.ledger_id:
            # An earlier entry of this same step filled the ledger and it rolled over, but the buffer
            # placed this one in the ledger it knew (a low-watermark abort writes a commit marker and
            # abort markers in one step).  Its memory no longer matches the log: reload from what is
            # durable, as after a failed write, and write nothing at a position the buffer did not
            # choose.
            self.reload()
            return False
        if self.ledger.roll_owed():
            # The ledger is full and its roll-over failed (and failed again before this step): the
            # managed ledger opens the next ledger before it writes, not where the buffer placed
            # this entry.  Reload rather than write elsewhere.
            self.reload()
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
                sent=carried.sent,
            )
        )
        if written != entry.position:
            raise AssertionError(f"{self.name}: the buffer placed {entry} but the ledger wrote {written}")
        published = (
            carried.sent[0].publish_time if carried.sent is not None and not entry.kind.is_marker else self.sim.now
        )
        self.messages[written] = StoredMessage(
            entry, carried.payload, carried.deliver_at, carried.partition_key, carried.batch, published
        )
        self._follow_roll_over()
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
        self.host.store.delete(self.name)
        return True

    def _finish_roll_over(self) -> None:
        """A full ledger whose roll-over failed (a disk error creating the next ledger's file) is
        still the current one, and the managed ledger rolls it before its next append (Pulsar's
        ClosedLedger state), so that append lands at the next ledger's entry 0, not where the
        buffer would place it.  Roll it now, before the buffer places anything; if the roll fails
        again, ``_append`` reloads instead of writing."""
        assert self.ledger is not None
        if not self.ledger.roll_owed():
            return
        try:
            self.ledger.roll_over()
        except LedgerError:
            return
        self._follow_roll_over()

    def _follow_roll_over(self) -> None:
        """The managed ledger rolled over on its own (full ledger): tell the buffer's view."""
        assert self.ledger is not None and self.state is not None
        while self.ledger.ledgers()[-1].ledger_id > self.state.ledgers[-1].ledger_id:
            self._advance(tb.RollOverLedger())
            self.schedule_trim()

    def _changed(self) -> None:
        for sub in self.subscriptions.values():
            sub.dispatch()

    def shared_delayed_index(self) -> TopicDelayedIndex:
        """This load's shared delayed index (DD-30), made on first use; its wake-ups dispatch every
        subscription of this load (a later load has an index of its own)."""
        if self.delayed_index is None:
            epoch = self._epoch

            def schedule(delay_ms: int) -> None:
                def wake() -> None:
                    if self._epoch == epoch and self.state is not None:
                        self._changed()

                self.sim.schedule(delay_ms, wake)

            self.delayed_index = TopicDelayedIndex(self.config, lambda: self.sim.now, schedule)
        return self.delayed_index

    # -- requests ---------------------------------------------------------------------------------

    def publish(
        self,
        payload: bytes,
        txn_id: TxnID | None,
        deliver_at: int | None,
        *,
        partition_key: str | None = None,
        batch: Sequence[BatchedMessage] | None = None,
        sent: tuple[api_pb.MessageMetadata, bytes] | None = None,
    ) -> Future[Position]:
        """A producer's send: a normal publish or ``appendBufferToTxn`` (TB-4 .. TB-9).  A batch is
        one entry holding several messages, all of one txn (or none).  ``sent``: the producer's
        metadata and payload as they came over the wire, stored as they are."""
        body = MessageBody(payload, deliver_at, partition_key, None if batch is None else tuple(batch), sent)
        if self.state is None:
            return Future()
        no_room = self.host.store.no_room
        if no_room is not None:
            # A full disk refuses the write before the buffer places it: the topic stays loaded and
            # its consumers read on, instead of a failed append reloading it.
            return fail(PersistenceError(f"{self.name} takes no message now: {no_room}"))
        command: tb.Command = tb.PublishMessage() if txn_id is None else tb.AppendBufferToTxn(txn_id)
        if isinstance(command, tb.AppendBufferToTxn) and self.state.status is not tb.BufferStatus.READY:
            # It may be parked (TB-4); remember the payload so the flush can write it.
            self._parked.append((body, Future()))
            parked = self._parked[-1][1]
            result, held = self._step(command)
            if isinstance(result, Err):
                self._parked.pop()
                return fail(result.error)
            if not held:
                return fail(ServiceUnitNotReady(f"{self.name} is reloading"))
            if isinstance(result.value, tb.Queued) and self.state.status is tb.BufferStatus.FIRST_SNAPSHOTTING:
                self.sim.schedule(1, self._first_snapshot_done(self._epoch))
            return parked
        result, held = self._step(command, body)
        if isinstance(result, Err):
            return fail(result.error)
        if not held:
            return fail(ServiceUnitNotReady(f"{self.name} is reloading after a write failure"))
        self._changed()
        return Future.completed(cast(Position, result.value))

    def _first_snapshot_done(self, epoch: int) -> Callable[[], None]:
        def done() -> None:
            assert self.state is not None
            if self.state.status is not tb.BufferStatus.FIRST_SNAPSHOTTING:
                return
            self._flush_parked(self._advance(tb.CompleteFirstSnapshot()))

        return self._while_live(epoch, done)

    def _flush_parked(self, result: BufferResult) -> None:
        """Write the parked appends in order; each learns its position or its error (TB-4)."""
        assert isinstance(result, Ok)
        parked, self._parked = self._parked, []
        outcomes = cast(tuple[tb.AppendOutcome, ...], result.value or ())
        appends = [e for e in result.effects if isinstance(e, tb.AppendEntry)]
        others = [e for e in result.effects if not isinstance(e, tb.AppendEntry)]
        by_position = {e.entry.position: e for e in appends}
        ok = True
        for (body, future), outcome in zip(parked, outcomes, strict=True):
            if outcome.position is None:
                future.set_exception(BrokerError(named_error(outcome.error or "ServiceUnitNotReady")))
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
            return fail(ServiceUnitNotReady(f"topic {self.name} is not loaded"))
        command: tb.Command = (
            tb.CommitTxn(txn_id, low_water_mark) if action is TxnAction.COMMIT else tb.AbortTxn(txn_id, low_water_mark)
        )
        result, held = self._step(command)
        if isinstance(result, Err):
            return fail(result.error)
        if not held:
            return fail(ServiceUnitNotReady(f"{self.name} is reloading after a write failure"))
        self._changed()
        return Future.completed(None)

    def _schedule_snapshot(self, epoch: int) -> None:
        """The periodic snapshot timer, ``transactionBufferSnapshotMinTimeInMillis`` (TB-21 decides)."""

        def fire() -> None:
            self._step(tb.TakeSnapshot())
            self._schedule_snapshot(epoch)

        self.sim.schedule(self.config.transaction_buffer_snapshot_min_time_in_millis, self._while_live(epoch, fire))
