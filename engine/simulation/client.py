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

This module holds the cluster (:class:`Cluster`: one simulation, one broker, the history) and
``pulsar.Client`` (:class:`Client`), which records, sends and times out every request.  The
handles a client makes live beside it: :mod:`.transaction` (the client-side transaction,
:mod:`reference.client`, and the requests its effects ask for), :mod:`.producer`, :mod:`.consumer`;
they reach their client through :class:`.session.Session`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

from engine.broker import Broker, BrokerError, partition_name
from engine.ledger_store import LedgerFaults, LedgerStore
from engine.recorder import HistoryRecorder, MachineObserver, OpenOp
from engine.scheduler import NETWORK_LATENCY_MS, Future, Network, NetworkFaults, SimTimeout, Simulation
from engine.simulated.disk import DiskFaults, SimDisk
from engine.simulation.consumer import Consumer
from engine.simulation.messages import BatchMessageId, ConsumerType, Message
from engine.simulation.producer import Producer
from engine.simulation.session import (
    ClientLibraryError,
    Connected,
    OperationFailed,
    OperationTimeout,
    position_json,
    txn_json,
)
from engine.simulation.transaction import Transaction
from engine.storage.disk import FileSystem
from engine.storage.file_store import AdaptiveCommit
from engine.storage.ledger import InitialPosition
from spec.config import CLIENT_DEFAULT_TXN_TIMEOUT_MS, Config
from spec.errors import DomainError
from spec.history import is_machine_operation, object_id
from spec.types import Position

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
U = TypeVar("U")


def _itself(value: T) -> T:
    return value


DEFAULT_OPERATION_TIMEOUT_MS = 30_000


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

        # A store that starts empty (memory, the simulated disk, a new folder): every record the run
        # reads back, its own machines wrote.
        reused = ledger == "file" and disk != "sim" and data_dir is not None and os.path.isdir(data_dir)
        own_ledgers = not (reused and os.listdir(data_dir))
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
            own_ledgers=own_ledgers,
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
        self._consumers: list[Connected] = []

    # -- the operation wrapper: record, call, time out ---------------------------------------------

    def operation(
        self, f: str, obj: str, value: Any, call: Callable[[], Future[T]], render: Callable[[T], Any] = lambda _: None
    ) -> Future[T]:
        """Record ``f`` on ``obj`` as invoked, run ``call``, and record its outcome: ``ok`` with
        ``render`` of its value, ``fail`` with the error, or ``info`` when no answer comes within the
        operation timeout."""
        return self.building(f, obj, value, call, _itself, render)

    def building(
        self,
        f: str,
        obj: str,
        value: Any,
        call: Callable[[], Future[T]],
        build: Callable[[T], U],
        render: Callable[[U], Any] = lambda _: None,
    ) -> Future[U]:
        """:meth:`operation` whose answer the library turns into what the application gets
        (``build``, run before the call returns): a library that raises doing so fails the call."""
        op = self.recorder.begin(self.process, f, obj, value)
        out: Future[U] = Future()
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
            try:
                built = build(done.result())
            except ClientLibraryError as exc:
                self.recorder.fail(op, exc.name)
                out.set_exception(exc)
                return
            self.recorder.ok(op, render(built))
            out.set_result(built)

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

    def wait(self, future: Future[T]) -> T:
        """Run the simulation until ``future`` is done; its value, or its exception raised."""
        self.sim.run_until(lambda: future.done)
        return future.result()

    def forget(self, consumer: Connected) -> None:
        """A consumer closed or unsubscribed: it no longer reconnects with the client."""
        if consumer in self._consumers:
            self._consumers.remove(consumer)

    # -- pulsar.Client -------------------------------------------------------------------------

    def new_transaction_async(self, timeout_ms: int = CLIENT_DEFAULT_TXN_TIMEOUT_MS) -> Future[Transaction]:
        coordinator = self.broker.coordinator
        return self.building(
            "new_txn",
            object_id("coordinator", coordinator.coordinator_id),
            {"timeout_ms": timeout_ms},
            lambda: self.network.call(lambda: coordinator.new_txn(timeout_ms)),
            # the library's own state for the TxnID the coordinator gave (reference.client)
            lambda txn_id: Transaction(self, txn_id, timeout_ms),
            lambda txn: {"txn": txn_json(txn.txn_id)},
        )

    def new_transaction(self, timeout_ms: int = CLIENT_DEFAULT_TXN_TIMEOUT_MS) -> Transaction:
        return self.wait(self.new_transaction_async(timeout_ms))

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
        consumer_name: str | None = None,
    ) -> Future[Consumer]:
        """``consumer_name``: recorded in the subscribe and in every operation of the consumer."""
        name = partition_name(topic, partition) if "-partition-" not in topic else topic
        consumer_id = self.cluster.new_consumer_id()
        spelled = "Earliest" if initial_position is InitialPosition.EARLIEST else "Latest"
        result: Future[Consumer] = Future()
        abandoned = [False]

        def attach() -> Future[None]:
            if abandoned[0]:
                return Future()  # the connection that carried this request is gone
            return self.broker.subscribe(name, subscription_name, consumer_type.value, initial_position, consumer_id)

        value = {"initial_position": spelled, "sub_type": consumer_type.value}
        if consumer_name is not None:
            value["consumer"] = consumer_name
        done_ = self.operation(
            "subscribe",
            object_id("subscription", f"{name}#{subscription_name}"),
            value,
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
                consumer = Consumer(self, name, subscription_name, consumer_id, consumer_type, consumer_name)
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

        done_ = self.operation(
            "subscribe",
            object_id("subscription", f"{name}#{reader_name}"),
            {
                "initial_position": "Earliest",
                "sub_type": ConsumerType.Exclusive.value,
                "durable": False,
                "start_message": position_json(start_message),
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
        return self.wait(
            self.subscribe_async(
                topic,
                subscription_name,
                partition=partition,
                consumer_type=consumer_type,
                initial_position=initial_position,
            )
        )
