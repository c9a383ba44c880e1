"""The coordinator service: :mod:`reference.coordinator` over its transaction log.

The log is a :class:`~engine.storage.record_log.RecordLog` (PIP-160 batching on or off).  The
service writes and deletes log records, sends END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION with
the low watermark to the participants (through :class:`Participants`, Pulsar's transaction-buffer
client) and feeds their answers back, re-runs ends the machine schedules, and ticks the timeout
tracker every ``TIMEOUT_TRACKER_TICK_MS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Protocol, TypeVar

from engine.broker.component import BrokerError, BrokerHost, Component, after, all_of, error_of, fail, quiet, read_all
from engine.scheduler import Future
from engine.storage.ledger import LedgerError
from engine.storage.record_log import LogWriteFailed, RecordLog, RecordPosition
from reference import batched_log as bl
from reference import coordinator as tc
from spec.config import END_TXN_RETRY_INTERVAL_MS, TIMEOUT_TRACKER_TICK_MS
from spec.envelope import LogKind
from spec.history import object_id, state_digest
from spec.pb import PulsarTransactionMetadata_pb2
from spec.result import Effect, Err, Ok
from spec.types import Subscription, TxnAction, TxnID

__all__ = ["MAX_LOCAL_TXN_ID", "CoordinatorService", "Participants"]

MAX_LOCAL_TXN_ID = "max_local_txn_id"  # the transaction log's managed-ledger property (TC-23)

T = TypeVar("T")


class Participants(Protocol):
    """Phase 2 of END_TXN as the coordinator sees it: one request per participant, answered (or
    failed with a :class:`BrokerError`) by the partition or subscription it names (TC-14)."""

    def end_txn_on_partition(self, name: str, txn_id: TxnID, action: TxnAction, lwm: int) -> Future[None]: ...

    def end_txn_on_subscription(
        self, sub: Subscription, txn_id: TxnID, action: TxnAction, lwm: int
    ) -> Future[None]: ...


class CoordinatorService(Component[tc.CoordinatorState, tc.Command, tc.Result]):
    """One transaction coordinator (id ``coordinator_id``) and its transaction log."""

    machine = "coordinator"

    def __init__(self, host: BrokerHost, participants: Participants, coordinator_id: int = 0) -> None:
        super().__init__(host)
        self.participants = participants
        self.coordinator_id = coordinator_id
        self.log_name = f"__transaction_log_{coordinator_id}"
        self.log: RecordLog | None = None
        self._positions: dict[int, RecordPosition] = {}
        self._doomed: set[int] = set()  # record ids deleted before their write completed
        self._waiters: dict[tuple[TxnID, TxnAction], list[Future[None]]] = {}
        self.loads = 0

    @property
    def obj(self) -> str:
        """The history's object id of this coordinator."""
        return object_id("coordinator", self.coordinator_id)

    def _machine_step(self, state: tc.CoordinatorState, command: tc.Command) -> tc.Step:
        return tc.step(state, command)

    # -- lifecycle ------------------------------------------------------------------------------

    def load(self) -> bool:
        """Replay the transaction log into a Ready store (TC-21 .. TC-24); False if the read failed."""
        self._new_epoch()
        try:
            ledger = self.host.store.open(self.log_name, closes_on_write_failure=True)
            log = RecordLog(
                self.sim,
                ledger,
                LogKind.TRANSACTION_LOG,
                self.config,
                batching=self.host.batching,
                metrics=self.host.writer_metrics.get(LogKind.TRANSACTION_LOG),
                owner=self,
            )
            durable, replayed = log.read_back()
            last = read_all(ledger)
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
            for entry in bl.read_entry(LogKind.TRANSACTION_LOG, position, data):
                record = entry.record
                assert isinstance(record, PulsarTransactionMetadata_pb2.TransactionMetadataEntry)
                if record.HasField("max_local_txn_id"):
                    max_local = max(max_local, record.max_local_txn_id)
        self.log = log
        self.state, effects = tc.recover(
            self.config, self.coordinator_id, records, max_local, next_record_id=len(records)
        )
        self._observe_recovery(
            {
                "coordinator_id": self.coordinator_id,
                "records": records,
                "max_local_txn_id": max_local,
                "next_record_id": len(records),
                **log.recovery_inputs(durable),
                "recovered": state_digest(self.state),
            }
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
        epoch = self._epoch  # a write that failed at once has crashed it: its ticks are void
        self._schedule_tick(epoch)
        # END_TXN requests kept across a reload are re-run, as Pulsar re-runs a failed end (TC-16).
        for txn_id, action in sorted(self._waiters):
            self._schedule_resume(tc.ScheduleResumeEndTxn(txn_id, action, False, END_TXN_RETRY_INTERVAL_MS), epoch)
        return True

    def crash(self) -> None:
        """Memory is gone: the store, buffered log records, waiting requests (never answered)."""
        self._new_epoch()
        if self.log is not None:
            self.log.crash()
        self.state = None
        self.log = None
        self._waiters = {}
        self._observe_crash()

    def reload(self) -> None:
        """A log write failed: reload the store from its log.  Pulsar re-runs a failed end after
        ``END_TXN_RETRY_INTERVAL_MS`` on the same future (TC-16); here the reload's re-drive of every
        COMMITTING/ABORTING txn (TC-24) answers the END_TXN requests still waiting, so they are kept."""
        waiters = self._waiters
        self.crash()
        self._waiters = waiters
        self.host.restart_later(self)

    def _schedule_tick(self, epoch: int) -> None:
        def tick() -> None:
            self._step(tc.Tick(self.sim.now))
            self._schedule_tick(epoch)

        self.sim.schedule(TIMEOUT_TRACKER_TICK_MS, self._while_live(epoch, tick))

    # -- stepping and effects -------------------------------------------------------------------

    def _step(self, command: tc.Command) -> tuple[tc.Result, Future[None]]:
        """Step the machine and carry out its effects; the future completes when its writes did."""
        result = self._advance(command)
        writes: list[Future[None]] = []
        self._carry_out(result.effects, writes)
        return result, all_of(writes)

    def _carry_out(self, effects: Iterable[Effect], writes: list[Future[None]]) -> None:
        """Effects in order; a message or timer that follows a log write waits until the write is
        durable (Pulsar sends phase 2 only after COMMITTING/ABORTING is logged), and is dropped if it
        failed (the store reloads)."""
        epoch = self._epoch
        for effect in effects:
            match effect:
                case tc.AppendRecord():
                    writes.append(self._append(effect))
                case tc.DeleteRecords():
                    # TC-9: a finished txn's records go only once its final record is durable.
                    after(all_of(list(writes)), partial(self._delete, effect.record_ids))
                case tc.EndTxnInTransactionBuffer():
                    after(all_of(list(writes)), partial(self._end_in_participants, effect, epoch))
                case tc.ScheduleResumeEndTxn():
                    after(all_of(list(writes)), partial(self._schedule_resume, effect, epoch))
                # CloseTransactionLog: the simulation never closes a store on purpose.

    def _append(self, effect: tc.AppendRecord) -> Future[None]:
        assert self.log is not None
        done: Future[None] = Future()
        written = self.log.add(effect.record.to_pb().SerializeToString())
        rid, epoch = effect.record_id, self._epoch

        def complete(f: Future[RecordPosition]) -> None:
            if not self._current(epoch):
                return
            if f.error is not None:
                done.set_exception(f.error)
                self.reload()  # the store's memory ran ahead of its log
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
        try:
            self.log.delete(known)
        except LedgerError:
            # The log's cursor could not be written (a disk error in a store that commits every
            # change): the machine ran ahead of its log, so reload it as after any failed write.
            self.reload()

    def _schedule_resume(self, effect: tc.ScheduleResumeEndTxn, epoch: int) -> None:
        def resume() -> None:
            result, written = self._step(tc.ResumeEndTxn(effect.txn_id, effect.action, self.sim.now, effect.is_timeout))
            self._settle(effect.txn_id, effect.action, result, written)

        self.sim.schedule(effect.delay_ms, self._while_live(epoch, resume))

    def _end_in_participants(self, effect: tc.EndTxnInTransactionBuffer, epoch: int) -> None:
        """Phase 2: END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION to every participant (TC-14)."""
        answers: list[Future[None]] = []
        for name in effect.partitions:
            answers.append(
                self.participants.end_txn_on_partition(name, effect.txn_id, effect.action, effect.low_water_mark)
            )
        for sub in effect.subscriptions:
            answers.append(
                self.participants.end_txn_on_subscription(sub, effect.txn_id, effect.action, effect.low_water_mark)
            )

        def all_answered(_: Future[None]) -> None:
            if not self._live(epoch):
                return
            errors = tuple(error_of(f.error).name for f in answers if f.error is not None)
            result, written = self._step(
                tc.EndTxnInTransactionBufferResult(
                    effect.txn_id, effect.action, self.sim.now, effect.is_timeout, errors
                )
            )
            self._settle(effect.txn_id, effect.action, result, written)

        all_of([quiet(a) for a in answers]).add_done_callback(all_answered)

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

    def _request(self, command: tc.Command, answer_of: Callable[[object], T]) -> Future[T]:
        """A client request: answered with ``answer_of(value)`` once the step's writes are durable."""
        if self.state is None:
            return Future()  # down: never answered
        result, written = self._step(command)
        if isinstance(result, Err):
            if not result.error.answered:
                return Future()  # TC-4: no response at all; the client's own timeout ends the request
            return fail(result.error)
        answer: Future[T] = Future()
        value = result.value

        def done(w: Future[None]) -> None:
            if w.error is not None:
                answer.set_exception(BrokerError(error_of(w.error)))
            else:
                answer.set_result(answer_of(value))

        written.add_done_callback(done)
        return answer

    def new_txn(self, timeout_ms: int, owner: str | None = None) -> Future[TxnID]:
        return self._request(tc.NewTxn(timeout_ms, self.sim.now, owner), _new_txn_id)

    def add_partition(self, txn_id: TxnID, partition: str) -> Future[None]:
        return self._request(tc.AddPartitionToTxn(txn_id, (partition,), self.sim.now), _no_value)

    def add_subscription(self, txn_id: TxnID, subscription: Subscription) -> Future[None]:
        return self._request(tc.AddSubscriptionToTxn(txn_id, (subscription,), self.sim.now), _no_value)

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


def _new_txn_id(value: object) -> TxnID:
    """NEW_TXN's answer: the TxnID the coordinator issued."""
    assert isinstance(value, TxnID)
    return value


def _no_value(value: object) -> None:
    """ADD_PARTITION_TO_TXN / ADD_SUBSCRIPTION_TO_TXN answer with nothing (TC-10)."""
    assert value is None
