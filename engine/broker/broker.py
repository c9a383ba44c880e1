"""The broker: a coordinator and a set of partitioned topics, with the requests clients send.

It owns the components' lifecycle at the broker level: start (load every component), crash
(every component's memory goes, ledgers keep what they acknowledged), restart, and the
restart-later loop that reloads a component whose ledger failed, and the containment of a
component that raised (:meth:`Broker.contain`: it crashes and is reloaded, and the failure is
listed in :attr:`Broker.failures`).  The END_TXN path from the
coordinator to the participants goes through :class:`TransactionBufferClient` (Pulsar's name for
the coordinator's client of the transaction buffers), with its own latency and timeout faults.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry

from engine.broker.component import BrokerError, Component, ComponentFailure, Restartable, fail
from engine.broker.coordinator import CoordinatorService
from engine.broker.partition import Partition
from engine.broker.snapshot_topics import encode_keyed_message
from engine.broker.subscription import SubscriptionService, reader_start
from engine.delayed.service import DelayedDeliveryService
from engine.ledger_store import LedgerStore
from engine.recorder import is_recorded
from engine.scheduler import Future, Simulation
from engine.storage.bufferedwriter_metrics import BufferedWriterMetrics
from engine.storage.ledger import InitialPosition, LedgerError, ManagedLedger
from engine.storage.record_log import RecordLog
from reference import buffer as tb
from reference import pending_ack as pa
from spec.config import Config
from spec.envelope import LogKind
from spec.errors import (
    BadRecord,
    InputError,
    NotAllowed,
    RequestTimeout,
    ServiceUnitNotReady,
    SubscriptionBusy,
    SubscriptionNotFound,
    error_by_name,
)
from spec.result import Err, Ok
from spec.types import Position, Subscription, TxnAction, TxnID

if TYPE_CHECKING:
    from engine.recorder import MachineObserver

__all__ = ["MAX_COMPONENT_FAILURES", "Broker", "BrokerFaults", "TransactionBufferClient", "partition_name"]

# A component that raised this many times stays down (it would raise again on every reload, and a
# run must end); its requests go unanswered, as a component that cannot load.
MAX_COMPONENT_FAILURES = 5
_ROOT = Path(__file__).resolve().parents[2]


class _Failing(Restartable, Protocol):
    """What :meth:`Broker.contain` needs of the component that raised (every Component has it)."""

    @property
    def obj(self) -> str: ...

    def crash(self) -> None: ...


def partition_name(topic: str, index: int) -> str:
    """Pulsar's partition naming: ``persistent://public/default/<topic>-partition-<i>``."""
    base = topic if "://" in topic else f"persistent://public/default/{topic}"
    return f"{base}-partition-{index}"


@dataclass
class BrokerFaults:
    """Probabilities of broker-side faults in the END_TXN path (each drawn from the run's rng)."""

    participant_timeout: float = 0.0  # an END_TXN_ON_* request times out (RequestTimeout, retryable)


class TransactionBufferClient:
    """The coordinator's side of phase 2 (:class:`~.coordinator.Participants`): each
    END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION reaches the participant one millisecond later,
    or times out (``faults.participant_timeout``).  A participant that does not exist answers
    success (2.4 of the fact sheet).  ``partitions`` is the broker's own table: topics deleted
    later are gone from it."""

    def __init__(
        self, sim: Simulation, config: Config, partitions: Mapping[str, Partition], faults: BrokerFaults
    ) -> None:
        self.sim = sim
        self.config = config
        self.partitions = partitions
        self.faults = faults

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
                return fail(ServiceUnitNotReady(f"topic {sub.topic} is not loaded"))
            found = part.subscriptions.get(sub.subscription)
            if found is None:
                return Future.completed(None)  # 2.4: subscription absent -> success
            return found.end_txn(txn_id, action, lwm)

        return self._participant(call)


class Broker:
    """One broker owning a coordinator and a set of partitioned topics.

    ``topics`` maps a topic name to its number of partitions.  All requests are methods returning
    :class:`~engine.scheduler.Future`; a component that is down never answers.
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
        shared_delayed_index: bool = False,
        own_ledgers: bool = False,
    ) -> None:
        self.sim = sim
        self.store = store
        self.config = config
        # Whether every ledger this broker reads was written by this broker's own machines (a
        # simulation's store): then a record its machine cannot decode is that machine's bug,
        # contained as any other raise.  A data folder from elsewhere (``serve --data``) can hold
        # anything: there it is bad input, which ends the start with one line (see contain).
        self.own_ledgers = own_ledgers
        # PIP-195's asynchronous snapshot creation (DD-31) has no broker.conf key: an engine option.
        self.delayed_async_create = delayed_async_create
        # PIP-195's shared delayed index across subscriptions (DD-30), never built in Pulsar: an
        # engine option, the in-memory tracker shared by every subscription of a partition.
        self.shared_delayed_index = shared_delayed_index
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
        self.restart_delay_ms = restart_delay_ms
        self.topics = dict(topics)
        self.partitions: dict[str, Partition] = {}
        self.tb_client = TransactionBufferClient(sim, config, self.partitions, faults or BrokerFaults())
        self.coordinator = CoordinatorService(self, self.tb_client)
        for topic, count in topics.items():
            for i in range(count):
                name = partition_name(topic, i)
                self.partitions[name] = Partition(self, name)
        self.up = False
        self.crashes = 0
        self._system: dict[str, ManagedLedger] = {}  # namespace system topics (TB snapshots)
        self._system_generation = 0
        self._restarting: set[int] = set()
        # Exceptions contained as crashes of the component that raised them (see contain).
        self.failures: list[ComponentFailure] = []
        # Told the name of a partition whose memory went while the broker stays up (an unload, a
        # reload after a failed write, a deletion): a server sends its producers and consumers away.
        self.unload_listeners: list[Callable[[str], None]] = []
        # Set by a server whose clients give their consumers permits (FLOW): a Shared or Key_Shared
        # dispatcher hands nothing to a consumer that has not asked yet (see Dispatcher.asked).
        self.consumer_asked: Callable[[int], bool] | None = None
        self.start()

    @property
    def faults(self) -> BrokerFaults:
        """The END_TXN path's faults (the transaction-buffer client's); a run may swap them."""
        return self.tb_client.faults

    @faults.setter
    def faults(self, faults: BrokerFaults) -> None:
        self.tb_client.faults = faults

    def start(self) -> None:
        self.up = True
        components: list[Restartable] = [self.coordinator, *self.partitions.values()]
        for component in components:
            # A load that raises at start-up is contained as any other component's failure (it is
            # outside every event when the broker is built); the other components still load.
            try:
                loaded = component.load()
            except Exception as exc:
                if not self.contain(exc):
                    raise
                continue
            if not loaded:
                self.restart_later(component)

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

    def partition_unloaded(self, name: str) -> None:
        """A partition's memory went.  In a broker crash nobody is told: every connection goes
        with the broker."""
        if self.up:
            for listener in list(self.unload_listeners):
                listener(name)

    def restart_later(self, component: Restartable) -> None:
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

    def contain(self, exc: Exception) -> bool:
        """An event raised ``exc``: if a component was running (the innermost on the stack; a
        subscription's partition, which owns its memory), crash it, reload it later from its durable
        state, list the failure and return True (the run goes on, its history is still recorded).
        False, to raise it on, for bad durable input (``InputError``: the run cannot go on; but a
        record that does not decode, on ledgers only this broker wrote, is its machine's bug) and
        for an exception no component raised (a workload's or the simulator's own)."""
        if isinstance(exc, InputError) and not (self.own_ledgers and isinstance(exc, BadRecord)):
            return False
        owner: Component[object, object, Ok[object] | Err] | None = None
        where = ""
        for frame, line in traceback.walk_tb(exc.__traceback__):
            candidate = frame.f_locals.get("self")
            # A component's record log (the PIP-160 writer and its timers) and a subscription's
            # delayed tracker (its timers, its snapshot completions) raise on their owner's behalf.
            if isinstance(candidate, RecordLog | DelayedDeliveryService):
                candidate = getattr(candidate, "owner", None)
            if isinstance(candidate, Component):
                owner = candidate
            path = Path(frame.f_code.co_filename)
            shown = path.relative_to(_ROOT) if path.is_relative_to(_ROOT) else path
            where = f"{shown}:{line} in {frame.f_code.co_qualname}"
        if owner is None:
            return False
        if self.observer is not None and not is_recorded(exc):
            # Raised outside a step the history records (a step that raised is recorded as failed):
            # the component's object gets a ``raised`` operation, which no model accepts.
            self.observer.raised(owner.obj, owner.machine, type(exc).__name__, where)
        component: _Failing = owner
        if isinstance(component, SubscriptionService) and isinstance(component.partition, Partition):
            component = component.partition
        self.failures.append(ComponentFailure(self.sim.now, component.obj, f"{type(exc).__name__}: {exc}", where))
        component.crash()
        if sum(f.component == component.obj for f in self.failures) < MAX_COMPONENT_FAILURES:
            self.restart_later(component)
        return True

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
        self,
        partition: str,
        name: str,
        sub_type: str,
        initial_position: InitialPosition,
        consumer_id: int,
        *,
        durable: bool = True,
        start_message: Position | None = None,
    ) -> Future[None]:
        """CommandSubscribe; ``durable=False`` is a reader's subscription, starting at
        ``start_message`` when it is created (PA-24)."""
        part = self._serving(partition)
        if part is None:
            return Future()
        sub = part.subscriptions.get(name)
        if sub is not None and sub.ready and sub.durable != durable:
            kind = "durable" if sub.durable else "non-durable"
            return fail(NotAllowed(f"subscription {name} of {partition} exists and is {kind}"))
        if sub is None:
            start = None
            if not durable:
                assert part.ledger is not None
                infos, last = part.ledger.ledgers(), part.ledger.last_confirmed()
                start = reader_start(start_message, initial_position, infos, last)
            sub = SubscriptionService(part, name, sub_type, initial_position, self, start=start)
            if not sub.load():
                return Future()
            part.subscriptions[name] = sub
        elif not sub.ready:
            return Future()
        sub.add_consumer(consumer_id)
        return Future.completed(None)

    def get_last_message_id(self, partition: str) -> Future[Position]:
        """CommandGetLastMessageId: the partition's last dispatchable position (TB-18), never past
        its ``max_read_position``; refused while its transaction buffer recovers."""
        part = self._serving(partition)
        if part is None or part.state is None:
            return Future()
        # recorded as a query row of the buffer (the observer answers the position, or the error's
        # name while it recovers), judged against the state the buffer's steps built
        answer = part.query("last_message_id")
        if isinstance(answer, str):
            return fail(error_by_name(answer)(tb.NOT_RECOVERED))
        assert isinstance(answer, Position)
        return Future.completed(answer)

    def scrape_metrics(self) -> None:
        """A scrape of the broker's metrics endpoint: the coordinator's
        ``TransactionMetadataStoreStats`` (its counters of created, committed, aborted and timed-out
        transactions) and every subscription's delayed-index stats (DD-28).  Each is answered from
        its machine's state and recorded as a query row (the observers ``stats`` and ``metrics``),
        which the checker judges against the state the recorded steps built: counters no client
        operation shows."""
        if not self.up:
            return
        asks: list[Callable[[], object]] = []
        if self.coordinator.state is not None:
            asks.append(lambda: self.coordinator.query("stats"))
        for part in self.partitions.values():
            for sub in part.subscriptions.values():
                service = sub.delayed
                if service is not None and service.alive:
                    asks.append(partial(service.query, "metrics"))
        for ask in asks:
            # outside every event (as start-up is): a raise is contained here, as its component's failure
            try:
                ask()
            except Exception as exc:
                if not self.contain(exc):
                    raise

    def check_position_in_pending_ack(
        self, partition: str, name: str, position: Position, batch_index: int | None
    ) -> Future[pa.PositionInPendingAck]:
        """The admin API's ``checkPositionInPendingAckState`` (PA-21): where ``position`` (a batch
        index of it) stands in the subscription's pending ack.  A subscription that is not loaded
        is refused as not ready, an unknown one as not found."""
        part = self._serving(partition)
        if part is None:
            return Future()
        sub = part.subscriptions.get(name)
        if sub is None:
            return fail(SubscriptionNotFound(f"subscription {name} of {partition} does not exist"))
        if sub.state is None:
            return fail(ServiceUnitNotReady(f"subscription {name} of {partition} is not loaded"))
        # asked of the subscription's machine as its own work (a raise is contained as its failure)
        # and recorded as a query row, which the checker judges against the state the steps built
        where = sub.query("check_position_in_pending_ack_state", position=position, batch_index=batch_index)
        assert isinstance(where, pa.PositionInPendingAck)
        return Future.completed(where)

    def delete_topic(self, topic: str, *, force: bool = False) -> Future[None]:
        """The admin API's topic deletion, every partition of ``topic``.  Without ``force`` it is
        refused while a consumer is connected (Pulsar's non-forced delete fails on a busy topic)."""
        if not self.up:
            return Future()
        names = [partition_name(topic, i) for i in range(self.topics.get(topic, 0))]
        if not names:
            return fail(NotAllowed(f"no topic {topic!r}"))
        parts = [self.partition(name) for name in names]
        if not all(p.ready and all(s.ready for s in p.subscriptions.values()) for p in parts):
            return Future()
        if not force and any(s.consumers for p in parts for s in p.subscriptions.values()):
            return fail(NotAllowed(f"topic {topic} has connected consumers"))
        for part in parts:
            try:
                done = part.delete()
            except LedgerError as exc:
                part.reload()
                return fail(exc.domain_error())
            if not done:
                return fail(ServiceUnitNotReady(f"{part.name}: a write failed while deleting"))
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
            return fail(SubscriptionBusy("Unconnected or shared consumer attempting to unsubscribe"))
        try:
            sub.delete()
        except LedgerError as exc:
            part.reload()  # the cursor or a ledger could not be deleted: the topic reloads
            return fail(exc.domain_error())
        del part.subscriptions[name]
        return Future.completed(None)
