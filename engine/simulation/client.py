"""A client with the shape of Pulsar's Python client, over the simulated broker.

::

    cluster = Cluster.start(seed=1, topics={"in": 1, "out": 1})
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    producer.send(b"hello")
    txn = client.new_transaction(timeout_ms=10_000)
    msg = consumer.receive(timeout_millis=1_000)
    client.create_producer("out").send(b"HELLO", txn=txn)
    consumer.acknowledge(msg, txn=txn)
    txn.commit()

Every call is synchronous: it runs the simulation until its answer arrives (or its operation
timeout passes).  ``*_async`` variants return a :class:`~engine.scheduler.Future` for
processes (workloads) that run many clients at once.  Every call is recorded in the cluster's
history as an invocation and a completion.

The client-side transaction is :mod:`reference.client`: this module carries out its effects
(ADD_PARTITION_TO_TXN / ADD_SUBSCRIPTION_TO_TXN before the first use of a partition or a
subscription, END_TXN once every operation of the txn is answered) and completes the user's
commit or abort with the machine's verdict (TC-29 .. TC-36).
"""

from __future__ import annotations

import enum
import itertools
import os
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from engine.broker import BatchedMessage, Broker, BrokerError, Delivered, partition_name
from engine.broker.component import ComponentFailure
from engine.ledger_store import LedgerFaults, LedgerStore
from engine.recorder import HistoryRecorder, MachineObserver, OpenOp
from engine.scheduler import NETWORK_LATENCY_MS, Future, Network, NetworkFaults, SimTimeout, Simulation
from engine.simulated.disk import DiskFaults, SimDisk
from engine.storage.disk import FileSystem
from engine.storage.file_store import AdaptiveCommit
from engine.storage.ledger import InitialPosition
from reference import client as ct
from spec.config import CLIENT_DEFAULT_TXN_TIMEOUT_MS, Config
from spec.errors import DomainError, error_by_name
from spec.history import is_machine_operation, object_id
from spec.result import Err
from spec.types import ClientTxnState, Position, PulsarName, Subscription, TxnAction, TxnID

__all__ = [
    "BatchMessageId",
    "Client",
    "ClientLibraryError",
    "Cluster",
    "Consumer",
    "ConsumerType",
    "Message",
    "OperationFailed",
    "OperationTimeout",
    "Producer",
    "Transaction",
]

T = TypeVar("T")

DEFAULT_OPERATION_TIMEOUT_MS = 30_000


class ConsumerType(PulsarName, enum.Enum):
    Exclusive = "Exclusive"
    Shared = "Shared"
    Failover = "Failover"
    KeyShared = "Key_Shared"


class OperationFailed(Exception):
    """The operation did not take effect: the broker (or the client) refused it with ``error``."""

    def __init__(self, error: DomainError) -> None:
        super().__init__(str(error))
        self.error = error


class OperationTimeout(Exception):
    """No answer within the operation timeout: the outcome is unknown (history type ``info``)."""


class ClientLibraryError(Exception):
    """The client library raised an exception of its own: a bug in the library, not one of Pulsar's
    errors.  A real client library that throws fails the application's call with that exception, so
    the call is recorded ``fail`` with the exception's type name as its error (the client-visible
    check ``unexpected-error``, TC-37, flags it) and the application goes on."""

    def __init__(self, exception: BaseException) -> None:
        super().__init__(f"{type(exception).__name__}: {exception}")
        self.exception = exception

    @property
    def name(self) -> str:
        return type(self.exception).__name__


@dataclass(frozen=True, slots=True)
class BatchMessageId(Position):
    """The id of a message in a batch entry: the entry's position with the message's index and the
    batch size (as Pulsar's ``BatchMessageIdImpl`` extends ``MessageIdImpl``).  Ordered by position,
    then index."""

    batch_index: int = 0
    batch_size: int = 1

    @classmethod
    def of(cls, position: Position, batch_index: int, batch_size: int) -> BatchMessageId:
        return cls(position.ledger_id, position.entry_id, batch_index, batch_size)

    @property
    def position(self) -> Position:
        return Position(self.ledger_id, self.entry_id)

    def __lt__(self, other: object) -> bool:
        if isinstance(other, BatchMessageId) and self.position == other.position:
            return self.batch_index < other.batch_index
        return Position.__lt__(self, other)


@dataclass(frozen=True)
class Message:
    """A received message (``pulsar.Message``'s accessors)."""

    partition: str
    subscription: str
    position: Position
    payload: bytes
    txn_id: TxnID | None
    deliver_at: int | None
    redelivery_count: int
    batch_index: int | None = None  # set for a message of a batch entry
    batch_size: int = 1
    key: str | None = None

    def data(self) -> bytes:
        return self.payload

    def message_id(self) -> Position:
        if self.batch_index is None:
            return self.position
        return BatchMessageId.of(self.position, self.batch_index, self.batch_size)

    def partition_key(self) -> str | None:
        return self.key

    def topic_name(self) -> str:
        return self.partition


def _txn_json(txn: TxnID) -> list[int]:
    return [txn.most_sig_bits, txn.least_sig_bits]


def _pos_json(position: Position) -> list[int]:
    return [position.ledger_id, position.entry_id]


class Cluster:
    """One simulation: the scheduler, the network, the ledgers, one broker and the history."""

    def __init__(
        self,
        sim: Simulation,
        broker: Broker,
        network: Network,
        recorder: HistoryRecorder,
        processes: Iterator[int] | None = None,
    ) -> None:
        self.sim = sim
        self.broker = broker
        self.network = network
        self.recorder = recorder
        # One counter for client and machine-level processes, so their ids never collide.
        self._processes = processes if processes is not None else itertools.count()
        self.disk_failures = 0
        self.on_disk_failure: Callable[[BaseException], None] | None = None
        self._next_consumer = 0
        network.observer = broker.observer

    @classmethod
    def start(
        cls,
        *,
        seed: int = 0,
        topics: dict[str, int] | None = None,
        config: Config | None = None,
        ledger: str = "memory",
        data_dir: str | None = None,
        batching: bool = False,
        network_faults: NetworkFaults | None = None,
        ledger_faults: LedgerFaults | None = None,
        history: str | None = None,
        record_machines: bool = True,
        disk: str | FileSystem = "real",
        group_commit_ms: int | Literal["adaptive"] | None = None,
        disk_faults: DiskFaults | None = None,
        shared_delayed_index: bool = False,
    ) -> Cluster:
        """``record_machines``: also record every machine step and load (spec.history's machine-level
        operations) in the history, for the per-object linearizability checks.

        File ledgers only: ``disk`` is ``real`` (the OS file system under ``data_dir``), ``sim``
        (a :class:`~engine.simulated.disk.SimDisk` seeded from ``seed``, whose broker crashes are
        power cuts; ``disk_faults`` its injected faults), or a file system to use as it is.
        ``group_commit_ms``: the store's journal commits every that many simulated milliseconds, and
        no answer leaves the broker before the commit that makes what it depends on durable; None
        commits every change as it is made; ``adaptive`` paces the commits by the disk
        (:class:`~engine.storage.file_store.AdaptiveCommit`): a batch gathers for the longest
        round trip of the simulated network (so every client the previous commit answered can
        join it) and takes the disk's measured sync time, during which the simulation goes on
        while a worker thread syncs (on the simulated disk: 1 ms, synced inline, so a seed's run
        stays the same).  ``shared_delayed_index``: the broker's subscriptions
        of a partition share one delayed index (DD-30, an engine option)."""
        if isinstance(disk, str) and disk not in ("real", "sim"):
            raise ValueError(f"disk must be real or sim, not {disk!r}")
        sim = Simulation(seed)
        config = config or Config()
        fs: FileSystem | None = None if isinstance(disk, str) else disk
        if ledger == "file" and disk == "sim":
            fs = SimDisk(seed=seed, faults=disk_faults or DiskFaults())
            data_dir = os.path.abspath(data_dir or "/sim/data")
        schedule = None
        adaptive = None
        if ledger == "file" and group_commit_ms == "adaptive":
            simulated = disk == "sim"
            adaptive = AdaptiveCommit(
                # A client an answer released sends its next request within one round trip (two
                # hops of at most NETWORK_LATENCY_MS[1] each): waiting that long gathers them all.
                group_wait_ms=2 * NETWORK_LATENCY_MS[1],
                schedule=sim.schedule,
                now=lambda: sim.now,
                sync_ms=1 if simulated else None,
                background=not simulated,
            )
        elif ledger == "file" and group_commit_ms is not None:
            if isinstance(group_commit_ms, str):
                raise ValueError(f"group_commit_ms must be a number of ms or 'adaptive', not {group_commit_ms!r}")
            delay = group_commit_ms

            def schedule(action: Callable[[], None]) -> None:
                sim.schedule(delay, action)

        store = LedgerStore(
            ledger,
            config,
            directory=data_dir,
            rng=sim.rng,
            faults=ledger_faults,
            disk=fs,
            schedule=schedule,
            adaptive=adaptive,
        )
        recorder = HistoryRecorder(history or f"sim-{seed}", seed, lambda: sim.now)
        processes = itertools.count()
        # The observer exists before the broker: the broker's first loads are recovery operations.
        observer = MachineObserver(recorder, lambda: next(processes), config) if record_machines else None
        broker = Broker(
            sim,
            store,
            config,
            topics=topics or {"topic": 1},
            batching=batching,
            observer=observer,
            shared_delayed_index=shared_delayed_index,
        )
        network = Network(sim, faults=network_faults, barrier=store.barrier if store.deferred else None)
        cluster = cls(sim, broker, network, recorder, processes)
        store.on_failure = cluster._disk_failed
        return cluster

    def _disk_failed(self, error: BaseException) -> None:
        """The store's journal failed for good: the broker goes down as a bookie does, and comes
        back (recovering the store from its journal) after its restart delay."""
        self.disk_failures += 1
        if self.on_disk_failure is not None:
            self.on_disk_failure(error)
        broker = self.broker

        def crash() -> None:
            if broker.up:
                broker.crash()
                self.sim.schedule(broker.restart_delay_ms, restart)

        def restart() -> None:
            if not broker.up:
                broker.restart()

        self.sim.schedule(0, crash)

    def new_process(self) -> int:
        return next(self._processes)

    def new_consumer_id(self) -> int:
        self._next_consumer += 1
        return self._next_consumer

    def client(self, *, operation_timeout_ms: int = DEFAULT_OPERATION_TIMEOUT_MS) -> Client:
        return Client(self, operation_timeout_ms=operation_timeout_ms)

    def history(self, *, machines: bool = False) -> list[Any]:
        """The client operations; with ``machines`` also the machine-level ones (the whole history)."""
        ops = self.recorder.operations()
        return ops if machines else [op for op in ops if not is_machine_operation(op)]

    def delete_topic(self, topic: str, *, force: bool = False) -> None:
        """``pulsar-admin topics delete [--force]``: every partition with its subscriptions, buffer
        snapshots and delayed-index snapshots.  An admin call, not a client operation: not recorded."""
        answer = self.broker.delete_topic(topic, force=force)
        try:
            self.sim.run_until(lambda: answer.done, max_time_ms=self.sim.now + DEFAULT_OPERATION_TIMEOUT_MS)
        except SimTimeout:
            raise OperationTimeout(f"delete_topic {topic}: no answer (the broker or the topic is down)") from None
        if answer.error is not None:
            error = answer.error
            raise OperationFailed(error.error) if isinstance(error, BrokerError) else error

    def close(self) -> None:
        """Release every ledger handle (file ledgers hold file descriptors): a clean shutdown."""
        self.broker.store.close()


class Client:
    """``pulsar.Client``: one history process at a time (a new one after an ``info`` outcome)."""

    def __init__(self, cluster: Cluster, *, operation_timeout_ms: int = DEFAULT_OPERATION_TIMEOUT_MS) -> None:
        self.cluster = cluster
        self.sim = cluster.sim
        self.broker = cluster.broker
        self.network = cluster.network
        self.recorder = cluster.recorder
        self.operation_timeout_ms = operation_timeout_ms
        self.process = cluster.new_process()
        self._consumers: list[Consumer] = []

    # -- the operation wrapper: record, call, time out ---------------------------------------------

    def _op(
        self, f: str, obj: str, value: Any, call: Callable[[], Future[T]], render: Callable[[T], Any] = lambda _: None
    ) -> Future[T]:
        op = self.recorder.begin(self.process, f, obj, value)
        out: Future[T] = Future()
        try:
            answer = call()
        except ClientLibraryError as exc:
            answer = Future()
            answer.set_exception(exc)

        def finish(done: Future[T]) -> None:
            if op.done:
                return
            if done.error is not None:
                error = done.error
                if isinstance(error, BrokerError | OperationFailed):
                    self._fail_with_pulsar_error(op, out, error.error)
                elif isinstance(error, ClientLibraryError):
                    self.recorder.fail(op, error.name)
                    out.set_exception(error)
                elif isinstance(error, OperationTimeout):
                    self._timed_out(op, out)
                else:
                    raise error
                return
            value = done.result()
            self.recorder.ok(op, render(value))
            out.set_result(value)

        answer.add_done_callback(finish)
        self.sim.schedule(self.operation_timeout_ms, lambda: self._timed_out(op, out))
        return out

    def _fail_with_pulsar_error(self, op: OpenOp, out: Future[Any], error: DomainError) -> None:
        """The operation fails with the error the broker answered, or the one the client defines for
        refusing the call: one of Pulsar's errors, as the application sees it.  (TC-37)"""
        self.recorder.fail(op, error.name)
        out.set_exception(OperationFailed(error))

    def _timed_out(self, op: OpenOp, out: Future[Any]) -> None:
        if op.done:
            return
        self.recorder.info(op, "RequestTimeout")
        self.process = self.cluster.new_process()  # a process that got info never invokes again
        # A request without an answer means a broken connection: the client reconnects, and the
        # broker hands every message unacknowledged by its consumers to the dispatcher again.
        for consumer in self._consumers:
            consumer.reconnect()
        out.set_exception(OperationTimeout(f"{op.f} on {op.obj}: no answer in {self.operation_timeout_ms} ms"))

    def _wait(self, future: Future[T]) -> T:
        """Run the simulation until ``future`` is done; its value, or its exception raised."""
        self.sim.run_until(lambda: future.done)
        return future.result()

    # -- pulsar.Client -------------------------------------------------------------------------

    def new_transaction_async(self, timeout_ms: int = CLIENT_DEFAULT_TXN_TIMEOUT_MS) -> Future[Transaction]:
        coordinator = self.broker.coordinator
        result: Future[Transaction] = Future()
        issued = self._op(
            "new_txn",
            object_id("coordinator", coordinator.coordinator_id),
            {"timeout_ms": timeout_ms},
            lambda: self.network.call(lambda: coordinator.new_txn(timeout_ms)),
            lambda txn: {"txn": _txn_json(txn)},
        )

        def made(done: Future[TxnID]) -> None:
            if done.error is not None:
                result.set_exception(done.error)
            else:
                result.set_result(Transaction(self, done.result(), timeout_ms))

        issued.add_done_callback(made)
        return result

    def new_transaction(self, timeout_ms: int = CLIENT_DEFAULT_TXN_TIMEOUT_MS) -> Transaction:
        return self._wait(self.new_transaction_async(timeout_ms))

    def create_producer(
        self,
        topic: str,
        partition: int = 0,
        *,
        batching_enabled: bool = False,
        batching_max_messages: int = 1000,
        batching_max_publish_delay_ms: int = 10,
    ) -> Producer:
        return Producer(
            self,
            partition_name(topic, partition) if "-partition-" not in topic else topic,
            batching_enabled=batching_enabled,
            batching_max_messages=batching_max_messages,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
        )

    def subscribe_async(
        self,
        topic: str,
        subscription_name: str,
        *,
        partition: int = 0,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        initial_position: InitialPosition = InitialPosition.EARLIEST,
    ) -> Future[Consumer]:
        name = partition_name(topic, partition) if "-partition-" not in topic else topic
        consumer_id = self.cluster.new_consumer_id()
        spelled = "Earliest" if initial_position is InitialPosition.EARLIEST else "Latest"
        result: Future[Consumer] = Future()
        abandoned = [False]

        def attach() -> Future[None]:
            if abandoned[0]:
                return Future()  # the connection that carried this request is gone
            return self.broker.subscribe(name, subscription_name, consumer_type.value, initial_position, consumer_id)

        done_ = self._op(
            "subscribe",
            object_id("subscription", f"{name}#{subscription_name}"),
            {"initial_position": spelled, "sub_type": consumer_type.value},
            lambda: self.network.call(attach),
        )

        def made(done: Future[None]) -> None:
            if done.error is not None:
                # The client gave up on this subscribe and closed its connection: Pulsar drops the
                # connection's consumers, so one the broker attached (its answer was lost) goes,
                # and what was dispatched to it is redelivered.
                abandoned[0] = True
                sub = self.broker.subscription(name, subscription_name)
                if sub is not None and sub.ready and self.broker.up:
                    sub.remove_consumer(consumer_id)
                result.set_exception(done.error)
            else:
                consumer = Consumer(self, name, subscription_name, consumer_id, consumer_type)
                self._consumers.append(consumer)
                result.set_result(consumer)

        done_.add_done_callback(made)
        return result

    def create_reader_async(
        self, topic: str, reader_name: str, start_message: Position, *, partition: int = 0
    ) -> Future[Consumer]:
        """``Client.create_reader``: a consumer of a non-durable subscription ``reader_name`` whose
        cursor starts at ``start_message`` (delivered again: the broker starts a reader's cursor just
        before it) and dies with its consumer (PA-24).  Recorded as a ``subscribe`` whose value says
        ``durable: false`` and names the start message."""
        name = partition_name(topic, partition) if "-partition-" not in topic else topic
        consumer_id = self.cluster.new_consumer_id()
        result: Future[Consumer] = Future()

        def attach() -> Future[None]:
            return self.broker.subscribe(
                name,
                reader_name,
                ConsumerType.Exclusive.value,
                InitialPosition.EARLIEST,
                consumer_id,
                durable=False,
                start_message=start_message,
            )

        done_ = self._op(
            "subscribe",
            object_id("subscription", f"{name}#{reader_name}"),
            {
                "initial_position": "Earliest",
                "sub_type": ConsumerType.Exclusive.value,
                "durable": False,
                "start_message": _pos_json(start_message),
            },
            lambda: self.network.call(attach),
        )

        def made(done: Future[None]) -> None:
            if done.error is not None:
                result.set_exception(done.error)
            else:
                consumer = Consumer(self, name, reader_name, consumer_id, ConsumerType.Exclusive)
                self._consumers.append(consumer)
                result.set_result(consumer)

        done_.add_done_callback(made)
        return result

    def subscribe(
        self,
        topic: str,
        subscription_name: str,
        *,
        partition: int = 0,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        initial_position: InitialPosition = InitialPosition.EARLIEST,
    ) -> Consumer:
        return self._wait(
            self.subscribe_async(
                topic,
                subscription_name,
                partition=partition,
                consumer_type=consumer_type,
                initial_position=initial_position,
            )
        )


class Transaction:
    """``pulsar.Transaction``: the client-side state machine :mod:`reference.client` plus its requests."""

    def __init__(self, client: Client, txn_id: TxnID, timeout_ms: int) -> None:
        self.client = client
        self.txn_id = txn_id
        self.state = ct.initial(client.broker.config, txn_id, timeout_ms)
        self._registered: dict[str, Future[None]] = {}
        self._end: Future[None] | None = None
        client.sim.schedule(timeout_ms, self._timeout_fired)

    def _timeout_fired(self) -> None:
        try:
            self._step(ct.TimeoutFired())
        except ClientLibraryError as exc:
            self._fail_end(exc)

    def _fail_end(self, exc: ClientLibraryError) -> None:
        """The library raised in a callback (a timer, an answer): the commit or abort it was
        completing, if any, fails with that exception; otherwise only the run's failures list it."""
        if self._end is not None:
            end, self._end = self._end, None
            end.set_exception(exc)

    @property
    def txn_state(self) -> ClientTxnState:
        return self.state.state

    def _step(self, command: Any) -> ct.Result:
        try:
            self.state, result = ct.step(self.state, command)
        except Exception as exc:
            # A bug in the client library: the caller's operation fails with it, the run goes on,
            # and the run lists it as it lists a broker component that raised (loud: exit 1).
            where = ""
            for frame, line in traceback.walk_tb(exc.__traceback__):
                where = f"{os.path.basename(frame.f_code.co_filename)}:{line} in {frame.f_code.co_qualname}"
            failure = ComponentFailure(
                self.client.sim.now, f"client:{self.client.process}", f"{type(exc).__name__}: {exc}", where
            )
            self.client.broker.failures.append(failure)
            raise ClientLibraryError(exc) from exc
        for effect in result.effects:
            if isinstance(effect, ct.SendAddPartitionToTxn):
                self._registered[effect.topic] = self._add_partition(effect.topic)
            elif isinstance(effect, ct.SendAddSubscriptionToTxn):
                key = f"{effect.subscription.topic}#{effect.subscription.subscription}"
                self._registered[key] = self._add_subscription(effect.subscription)
            elif isinstance(effect, ct.SendEndTxn):
                self._send_end(effect.action)
            elif isinstance(effect, ct.CompleteEnd) and self._end is not None:
                end, self._end = self._end, None
                if effect.error is None:
                    end.set_result(None)
                else:
                    end.set_exception(OperationFailed(error_by_name(effect.error)(effect.error)))
        return result

    def _add_partition(self, partition: str) -> Future[None]:
        coordinator = self.client.broker.coordinator
        return self.client.network.call(lambda: coordinator.add_partition(self.txn_id, partition), idempotent=True)

    def _add_subscription(self, subscription: Subscription) -> Future[None]:
        coordinator = self.client.broker.coordinator
        return self.client.network.call(
            lambda: coordinator.add_subscription(self.txn_id, subscription), idempotent=True
        )

    def _send_end(self, action: TxnAction) -> None:
        coordinator = self.client.broker.coordinator
        # END_TXN is not idempotent in today's Pulsar (a retry after COMMITTED gets TransactionNotFound,
        # #19629), and the client does not resend it on its own: never duplicated.
        answer = self.client.network.call(lambda: coordinator.end_txn(self.txn_id, action))

        def answered(done: Future[None]) -> None:
            error = None if done.error is None else _name(done.error)
            try:
                self._step(ct.EndTxnResponse(error))
            except ClientLibraryError as exc:
                self._fail_end(exc)

        answer.add_done_callback(answered)

    def _registration(self, key: str) -> Future[None]:
        return self._registered.get(key) or Future.completed(None)

    def _use(self, command: ct.Send | ct.Ack, key: str, then: Callable[[], Future[T]]) -> Future[T]:
        """Register the partition/subscription (first use), then run the operation (TC-30, TC-31)."""
        out: Future[T] = Future()
        result = self._step(command)
        if not result.ok:
            assert isinstance(result, Err)
            out.set_exception(OperationFailed(result.error))
            return out

        def registered(done: Future[None]) -> None:
            if done.error is not None:
                try:
                    self._step(ct.OpCompleted(failed=True))
                except ClientLibraryError as exc:
                    out.set_exception(exc)
                    return
                out.set_exception(done.error)
                return

            def finished(op: Future[T]) -> None:
                try:
                    self._step(ct.OpCompleted(failed=op.error is not None))
                except ClientLibraryError as exc:
                    out.set_exception(exc)
                    return
                if op.error is not None:
                    out.set_exception(op.error)
                else:
                    out.set_result(op.result())

            then().add_done_callback(finished)

        self._registration(key).add_done_callback(registered)
        return out

    def _end_async(self, f: str, command: ct.Commit | ct.Abort) -> Future[None]:
        obj = object_id("coordinator", self.txn_id.most_sig_bits)

        def call() -> Future[None]:
            end: Future[None] = Future()
            self._end = end
            try:
                result = self._step(command)
            except ClientLibraryError:
                self._end = None
                raise
            if not result.ok and self._end is end:
                assert isinstance(result, Err)
                self._end = None
                end.set_exception(OperationFailed(result.error))
            return end

        return self.client._op(f, obj, {"txn": _txn_json(self.txn_id)}, call)

    def commit_async(self) -> Future[None]:
        return self._end_async("commit", ct.Commit())

    def abort_async(self) -> Future[None]:
        return self._end_async("abort", ct.Abort())

    def commit(self) -> None:
        self.client._wait(self.commit_async())

    def abort(self) -> None:
        self.client._wait(self.abort_async())


def _message_id(message: Message | Position) -> tuple[Position, int | None]:
    if isinstance(message, Message):
        return message.position, message.batch_index
    if isinstance(message, BatchMessageId):
        return message.position, message.batch_index
    return message, None


def _name(error: BaseException) -> str:
    if isinstance(error, BrokerError | OperationFailed):
        return error.error.name
    return "RequestTimeout"


class Producer:
    """``pulsar.Producer`` on one partition.

    With ``batching_enabled`` sends are collected into a batch, written as one entry
    (``num_messages_in_batch`` messages) when it holds ``batching_max_messages`` messages or
    ``batching_max_publish_delay_ms`` after its first message, whichever comes first, or on
    :meth:`flush`.  A batch carries one transaction (or none): a send of another one, or a delayed
    message (never batched, as in Pulsar's client), sends the open batch first.  A batched send
    completes with a :class:`BatchMessageId`.

    A history process has one operation open at a time, so messages from several application
    threads meet in one batch only through handles of one producer: :meth:`share` gives another
    client (process) a handle on the same batch container.
    """

    def __init__(
        self,
        client: Client,
        partition: str,
        *,
        batching_enabled: bool = False,
        batching_max_messages: int = 1000,
        batching_max_publish_delay_ms: int = 10,
    ) -> None:
        if batching_max_messages < 1 or batching_max_publish_delay_ms < 0:
            raise ValueError("batching_max_messages must be >= 1 and batching_max_publish_delay_ms >= 0")
        self.client = client
        self.partition = partition
        self.batching_enabled = batching_enabled
        self.batching_max_messages = batching_max_messages
        self.batching_max_publish_delay_ms = batching_max_publish_delay_ms
        self._container = _BatchContainer()

    def share(self, client: Client) -> Producer:
        """This producer as used by ``client``'s process: same partition, same open batch."""
        handle = Producer(
            client,
            self.partition,
            batching_enabled=self.batching_enabled,
            batching_max_messages=self.batching_max_messages,
            batching_max_publish_delay_ms=self.batching_max_publish_delay_ms,
        )
        handle._container = self._container
        return handle

    def send_async(
        self,
        content: bytes | str,
        *,
        txn: Transaction | None = None,
        deliver_at: int | None = None,
        partition_key: str | None = None,
    ) -> Future[Position]:
        text = content.decode() if isinstance(content, bytes) else content
        payload = text.encode()
        value: dict[str, Any] = {"message": text}
        if txn is not None:
            value["txn"] = _txn_json(txn.txn_id)
        if deliver_at is not None:
            value["deliver_at_ms"] = deliver_at
        if partition_key is not None:
            value["partition_key"] = partition_key
        self.client.broker.partition(self.partition)  # an unknown partition is a KeyError at once
        txn_id = None if txn is None else txn.txn_id
        batched = self.batching_enabled and deliver_at is None

        def publish() -> Future[Position]:
            if batched:
                return self._add_to_batch(txn_id, BatchedMessage(payload, partition_key))
            if self.batching_enabled:
                # What was batched before goes first: a producer's messages stay in send order.
                self.flush_async()
                return self._after_previous(
                    lambda: self.client.broker.partition(self.partition).publish(
                        payload, txn_id, deliver_at, partition_key=partition_key
                    )
                )
            sent = self.client.network.call(
                lambda: self.client.broker.partition(self.partition).publish(
                    payload, txn_id, deliver_at, partition_key=partition_key
                )
            )
            return sent

        if txn is None:
            call = publish
        else:

            def call() -> Future[Position]:
                return txn._use(ct.Send(self.partition), self.partition, publish)

        return self.client._op("send", object_id("partition", self.partition), value, call, _sent_json)

    def send(
        self,
        content: bytes | str,
        *,
        txn: Transaction | None = None,
        deliver_at: int | None = None,
        partition_key: str | None = None,
    ) -> Position:
        return self.client._wait(self.send_async(content, txn=txn, deliver_at=deliver_at, partition_key=partition_key))

    def _add_to_batch(self, txn_id: TxnID | None, message: BatchedMessage) -> Future[Position]:
        container = self._container
        if container.batch is not None and container.batch.txn_id != txn_id:
            self.flush_async()
        if container.batch is None:
            batch = container.batch = _OpenBatch(txn_id)

            def timer() -> None:
                if container.batch is batch:
                    self.flush_async()

            self.client.sim.schedule(self.batching_max_publish_delay_ms, timer)
        batch = container.batch
        slot: Future[Position] = Future()
        batch.messages.append(message)
        batch.waiters.append(slot)
        if len(batch.messages) >= self.batching_max_messages:
            self.flush_async()
        return slot

    def _after_previous(self, request: Callable[[], Future[Position]]) -> Future[Position]:
        """Send ``request`` once the producer's previous request was answered.  Pulsar keeps a
        producer's messages in order on its connection; here each request travels on its own, so
        a batching producer sends one at a time."""
        container = self._container
        previous = container.tail
        out: Future[Position] = Future()
        # The next request waits for this one's answer, or for the operation timeout: a request lost
        # on the way (or in a crash) fails on the client's side and must not hold back every later
        # send, as Pulsar's producer fails a timed-out send and goes on.
        released: Future[None] = Future()
        container.tail = released

        def release(_: Any = None) -> None:
            if not released.done:
                released.set_result(None)

        out.add_done_callback(release)

        def send(_: Future[Any]) -> None:
            def answered(w: Future[Position]) -> None:
                if w.error is not None:
                    out.set_exception(w.error)
                else:
                    out.set_result(w.result())

            self.client.network.call(request).add_done_callback(answered)
            self.client.sim.schedule(self.client.operation_timeout_ms, release)

        previous.add_done_callback(send)
        return out

    def flush_async(self) -> Future[None]:
        """Send the open batch now; completes when it is written (at once when there is none)."""
        batch, self._container.batch = self._container.batch, None
        if batch is None:
            return Future.completed(None)
        messages = tuple(batch.messages)
        written = self._after_previous(
            lambda: self.client.broker.partition(self.partition).publish(
                b"", batch.txn_id, None, partition_key=messages[0].partition_key, batch=messages
            )
        )
        done: Future[None] = Future()

        def answered(w: Future[Position]) -> None:
            for index, waiter in enumerate(batch.waiters):
                if w.error is not None:
                    waiter.set_exception(w.error)
                else:
                    position = w.result()
                    assert isinstance(position, Position)
                    waiter.set_result(BatchMessageId.of(position, index, len(messages)))
            if w.error is not None:
                done.set_exception(w.error)
            else:
                done.set_result(None)

        written.add_done_callback(answered)
        return done

    def flush(self) -> None:
        self.client._wait(self.flush_async())


@dataclass
class _BatchContainer:
    batch: _OpenBatch | None = None
    tail: Future[Any] = field(default_factory=lambda: Future.completed(None))  # the last request sent


@dataclass
class _OpenBatch:
    txn_id: TxnID | None
    messages: list[BatchedMessage] = field(default_factory=list)
    waiters: list[Future[Position]] = field(default_factory=list)


def _sent_json(sent: Position) -> dict[str, Any]:
    if isinstance(sent, BatchMessageId):
        return {"position": _pos_json(sent.position), "batch_index": sent.batch_index, "batch_size": sent.batch_size}
    return {"position": _pos_json(sent)}


class Consumer:
    """``pulsar.Consumer`` of one subscription on one partition."""

    def __init__(
        self, client: Client, partition: str, subscription: str, consumer_id: int, consumer_type: ConsumerType
    ) -> None:
        self.client = client
        self.partition = partition
        self.subscription = subscription
        self.consumer_id = consumer_id
        self.consumer_type = consumer_type
        self.object = object_id("subscription", f"{partition}#{subscription}")

    def _service(self) -> Any:
        sub = self.client.broker.subscription(self.partition, self.subscription)
        if sub is None or not self.client.broker.up:
            return None
        if self.consumer_id not in sub.consumers and sub.ready:
            sub.add_consumer(self.consumer_id)  # reconnect after a broker restart
        return sub

    def reconnect(self) -> None:
        """The connection broke: the broker forgets this consumer (its unacked messages are
        redelivered) and the consumer subscribes again."""
        sub = self.client.broker.subscription(self.partition, self.subscription)
        if sub is not None and sub.ready and self.client.broker.up:
            sub.remove_consumer(self.consumer_id)
            sub.add_consumer(self.consumer_id)

    def unsubscribe_async(self) -> Future[None]:
        """``Consumer.unsubscribe()``: delete the subscription (its cursor, pending-ack log and
        delayed-index snapshots); refused with ``SubscriptionBusy`` while other consumers are connected."""

        def call() -> Future[None]:
            def handler() -> Future[None]:
                return self.client.broker.unsubscribe(self.partition, self.subscription, self.consumer_id)

            return self.client.network.call(handler)

        out = self.client._op("unsubscribe", self.object, {}, call)

        def gone(done: Future[None]) -> None:
            if done.error is None and self in self.client._consumers:
                self.client._consumers.remove(self)

        out.add_done_callback(gone)
        return out

    def unsubscribe(self) -> None:
        self.client._wait(self.unsubscribe_async())

    def close(self) -> None:
        """``Consumer.close()``: its unacknowledged messages go to the other consumers."""
        sub = self.client.broker.subscription(self.partition, self.subscription)
        if sub is not None and sub.ready:
            sub.remove_consumer(self.consumer_id)
        if self in self.client._consumers:
            self.client._consumers.remove(self)

    def _call(self, action: Callable[[Any], Future[T]]) -> Future[T]:
        def handler() -> Future[T]:
            sub = self._service()
            return Future() if sub is None or not sub.ready else action(sub)

        return self.client.network.call(handler)

    def receive_async(self, timeout_millis: int = 100, *, record_timeout: bool = False) -> Future[Message | None]:
        """``Consumer.receiveAsync`` with a wait: the next message, or None when none arrives in
        ``timeout_millis``.  ``record_timeout`` writes the wait into the history (``timeout_ms``):
        an empty receive then shows that the subscription had nothing for a consumer waiting that
        long (the delivery oracle's ``late-visibility`` judges it, DD-25), not only nothing at the
        moment it asked."""

        def render(got: Message | None) -> Any:
            if got is None:
                return None
            rendered = {
                "message": got.payload.decode(),
                "position": _pos_json(got.position),
                "redelivery_count": got.redelivery_count,
            }
            if got.batch_index is not None:
                rendered.update(batch_index=got.batch_index, batch_size=got.batch_size)
            return rendered

        def call() -> Future[Message | None]:
            out: Future[Message | None] = Future()

            def arrived(done: Future[Delivered | None]) -> None:
                if done.error is not None:
                    out.set_exception(done.error)
                    return
                d = done.result()
                out.set_result(
                    None
                    if d is None
                    else Message(
                        self.partition,
                        self.subscription,
                        d.position,
                        d.payload,
                        d.txn_id,
                        d.deliver_at,
                        d.redelivery_count,
                        d.batch_index,
                        d.batch_size,
                        d.partition_key,
                    )
                )

            self._call(lambda sub: sub.receive(self.consumer_id, timeout_millis)).add_done_callback(arrived)
            return out

        value = {"timeout_ms": timeout_millis} if record_timeout else {}
        return self.client._op("receive", self.object, value, call, render)

    def receive(self, timeout_millis: int = 100) -> Message | None:
        """The next message, or None when none arrives in ``timeout_millis`` (Pulsar raises Timeout)."""
        return self.client._wait(self.receive_async(timeout_millis))

    def _ack_async(
        self, f: str, message: Message | Position, txn: Transaction | None, cumulative: bool
    ) -> Future[None]:
        position, batch_index = _message_id(message)
        value: dict[str, Any] = {"position": _pos_json(position)}
        if batch_index is not None:
            value["batch_index"] = batch_index
        if txn is not None:
            value["txn"] = _txn_json(txn.txn_id)

        def ack() -> Future[None]:
            return self._call(
                lambda sub: sub.acknowledge(
                    self.consumer_id, position, None if txn is None else txn.txn_id, cumulative, batch_index
                )
            )

        if txn is None:
            call = ack
        else:
            sub = Subscription(self.partition, self.subscription)

            def call() -> Future[None]:
                return txn._use(ct.Ack(sub), f"{self.partition}#{self.subscription}", ack)

        return self.client._op(f, self.object, value, call)

    def acknowledge_async(self, message: Message | Position, *, txn: Transaction | None = None) -> Future[None]:
        return self._ack_async("ack", message, txn, False)

    def acknowledge(self, message: Message | Position, *, txn: Transaction | None = None) -> None:
        self.client._wait(self.acknowledge_async(message, txn=txn))

    def acknowledge_cumulative_async(
        self, message: Message | Position, *, txn: Transaction | None = None
    ) -> Future[None]:
        return self._ack_async("ack_cumulative", message, txn, True)

    def acknowledge_cumulative(self, message: Message | Position, *, txn: Transaction | None = None) -> None:
        self.client._wait(self.acknowledge_cumulative_async(message, txn=txn))

    def negative_acknowledge_async(self, message: Message | Position) -> Future[None]:
        position = message.position if isinstance(message, Message) else message
        return self.client._op(
            "negative_ack",
            self.object,
            {"position": _pos_json(position)},
            lambda: self._call(lambda sub: sub.redeliver(self.consumer_id, [position])),
        )

    def negative_acknowledge(self, message: Message | Position) -> None:
        self.client._wait(self.negative_acknowledge_async(message))

    def seek_async(self, publish_time: int) -> Future[None]:
        """``Consumer.seek(timestamp)``: the subscription restarts at the first message published at
        or after ``publish_time`` (PA-23), and this consumer reconnects (what the broker had queued
        for it is dropped).  Recorded as ``seek``."""

        def call() -> Future[None]:
            out: Future[None] = Future()

            def done(answer: Future[None]) -> None:
                if answer.error is not None:
                    out.set_exception(answer.error)
                    return
                self.reconnect()
                out.set_result(None)

            self._call(lambda sub: sub.seek_time(publish_time)).add_done_callback(done)
            return out

        return self.client._op("seek", self.object, {"publish_time": publish_time}, call)

    def seek(self, publish_time: int) -> None:
        self.client._wait(self.seek_async(publish_time))

    def get_last_message_id_async(self) -> Future[Position]:
        """``Consumer.get_last_message_id()``: the last dispatchable position of the partition
        (TB-18), never past its ``max_read_position``.  Recorded as ``get_last_message_id``."""

        def call() -> Future[Position]:
            return self.client.network.call(lambda: self.client.broker.get_last_message_id(self.partition))

        return self.client._op("get_last_message_id", self.object, {}, call, lambda got: {"position": _pos_json(got)})

    def get_last_message_id(self) -> Position:
        return self.client._wait(self.get_last_message_id_async())

    def check_position_in_pending_ack_async(self, message: Message | Position) -> Future[str]:
        """The admin API's ``checkPositionInPendingAckState`` for this subscription (PA-21): where
        the message stands in its pending ack (``PendingAck``, ``MarkDelete``, ``NotInPendingAck``,
        ``PendingAckNotReady``, ``InvalidPosition``).  An admin request, recorded all the same (as
        ``check_position_in_pending_ack``) so the history shows what it answered."""
        position, batch_index = _message_id(message)
        value: dict[str, Any] = {"position": _pos_json(position)}
        if batch_index is not None:
            value["batch_index"] = batch_index

        def call() -> Future[str]:
            out: Future[str] = Future()

            def answered(done: Future[Any]) -> None:
                if done.error is not None:
                    out.set_exception(done.error)
                else:
                    out.set_result(done.result().value)

            self.client.network.call(
                lambda: self.client.broker.check_position_in_pending_ack(
                    self.partition, self.subscription, position, batch_index
                )
            ).add_done_callback(answered)
            return out

        return self.client._op("check_position_in_pending_ack", self.object, value, call, lambda got: {"state": got})

    def check_position_in_pending_ack(self, message: Message | Position) -> str:
        return self.client._wait(self.check_position_in_pending_ack_async(message))

    def redeliver_unacknowledged_messages_async(self) -> Future[None]:
        return self.client._op(
            "redeliver_unacknowledged",
            self.object,
            {},
            lambda: self._call(lambda sub: sub.redeliver(self.consumer_id, None)),
        )

    def redeliver_unacknowledged_messages(self) -> None:
        self.client._wait(self.redeliver_unacknowledged_messages_async())
