"""Named workloads under a seeded fault schedule: the runs behind ``txnmodel simulate``.

A run is one :class:`~engine.simulation.client.Cluster` (one seed), many concurrent clients as
generator processes, an optional fault process, a heal phase and a final drain, after which the
history is complete.  Workloads:

* ``ctp`` -- consume-transform-produce across topics (PIP-31's motivation): processors receive
  from ``in``, produce a transformed message to ``out`` and acknowledge the input, all in one
  transaction, then commit (or, sometimes, abort); a verifier reads ``out``.
* ``multi`` -- atomic multi-partition produce: each transaction writes one message to every
  partition of ``multi``; a reader per partition.
* ``delayed`` -- delayed delivery mixed with transactions: sends with ``deliver_at`` in and out of
  transactions to a Shared subscription.

Variants (:class:`RunSpec` fields, each also ``mixed`` on the command line: on for some seeds):
``batch_messages`` -- producers batch messages (PIP-54 batch-index acks), shared by the clients so
that their sends meet in one batch; ``key_shared`` -- sends carry partition keys and the readers
are Key_Shared consumers; ``delayed_tracker`` -- the delayed workload on Pulsar's bucket tracker
(persisted in ledgers) instead of the in-memory default.

Faults (``--faults on``): broker crash and restart, coordinator crash and reload, ledger append
and read failures, lost / delayed / duplicated requests and responses, and short transaction
timeouts.  Everything random comes from the run's ``random.Random(seed)``: same seed, same
history, byte for byte, on either ledger.

Every run carries its metadata (:meth:`RunResult.metadata`): the :class:`RunSpec` (workload, seed,
ledger, batching, fault rates, broker.conf overrides) and the fault schedule actually injected,
which ``txnmodel simulate`` writes into each history file (``history_io.files.read_metadata``).
This module runs and returns histories; the command line (``txnmodel/commands/simulate.py``)
writes them and calls the checkers.
A run stops at its deadline (``RunSpec.deadline_ms`` of simulated time): operations still open are
recorded as ``invoke``, so a run that would never end still yields a finite history to check.
A broker component that raises is contained as its crash (``Broker.contain``): the run goes on,
the history records the step that raised, and :attr:`RunResult.failures` lists it (``txnmodel
simulate`` then exits 1 naming it); an exception no component raised still ends the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator
from typing import Any

from engine.broker import BrokerFaults
from engine.ledger_store import LedgerFaults, LedgerStore, storage_lost
from engine.scheduler import Future, NetworkFaults, SimTimeout, spawn
from engine.simulated.faults import FAULT_RATES, InjectedFault
from engine.simulation.client import (
    Client,
    ClientLibraryError,
    Cluster,
    Consumer,
    ConsumerType,
    OperationFailed,
    OperationTimeout,
    Producer,
)
from engine.simulation.metadata import FaultEvent, RunResult, file_metadata
from engine.simulation.options import (
    FAULT_MIXES,
    MAIN_JOB,
    MIX_CYCLE,
    SimulateOptions,
    fault_mix,
    file_stem,
    main_job_spec,
    variant,
)
from engine.simulation.runspec import DEFAULT_DEADLINE_MS, TRACKERS, WORKLOADS, RunSpec
from engine.storage.disk import DiskFaults, SimDisk
from spec.types import Position

__all__ = [
    "DEFAULT_DEADLINE_MS",
    "FAULT_MIXES",
    "FAULT_RATES",
    "KEYS",
    "KEY_SHARED_READERS",
    "LONG_RECEIVE_MS",
    "MAIN_JOB",
    "MIX_CYCLE",
    "TAIL_DELAYS_MS",
    "TRACKERS",
    "WORKLOADS",
    "FaultEvent",
    "RunResult",
    "RunSpec",
    "SimulateOptions",
    "fault_mix",
    "file_metadata",
    "file_stem",
    "main_job_spec",
    "run",
    "variant",
]

Proc = Generator[Future[Any], Any, None]
_ERRORS = (OperationFailed, OperationTimeout, ClientLibraryError)


# How long a broker crash on a store with group commit may wait for the journal to have changes
# waiting for their commit (half of those crashes do: see _Run.fault_process).
POWER_CUT_WAIT_MS = 2_000
# Partition keys of ``key_shared`` runs: few enough that every Key_Shared consumer gets several.
KEYS = ("k0", "k1", "k2", "k3", "k4", "k5")
# Key_Shared consumers per partition in ``key_shared`` runs.
KEY_SHARED_READERS = 2
# Producer batching of ``batch_messages`` runs: small batches that fill before the delay runs out.
BATCH_MAX_MESSAGES = 4
BATCH_MAX_DELAY_MS = 5
# How far ahead the delayed workload's messages are due.  On the bucket tracker further: a bucket
# whose messages are all delivered is deleted, and only one still holding messages when the
# broker crashes is recovered from its snapshot (most bucket runs then recover at least one).
MAX_DELAY_MS = 600
BUCKET_MAX_DELAY_MS = 3_000
# The delayed workload's readers, once the writers have stopped, wait this long in a receive (twice
# the oracle's LAG_BOUND_MS and more): a message due while they wait must reach them without their
# asking again (DD-25).
LONG_RECEIVE_MS = 2_500
# How long after it is sent each of a delayed writer's two last messages is due: both before a long
# receive that begins as the writers stop is LAG_BOUND_MS from its end.
TAIL_DELAYS_MS = (400, 900)


class _Budget:
    def __init__(self, n: int, clock: Callable[[], int], until_ms: int | None) -> None:
        self.left = n
        self.clock = clock
        self.until_ms = until_ms

    def take(self) -> bool:
        if self.until_ms is not None and self.clock() >= self.until_ms:
            return False
        self.left -= 1
        return self.left >= 0


def _attempt(body: Callable[[], Proc]) -> Proc:
    """Run a step of a worker; a failed or timed-out operation just ends the step."""
    try:
        yield from body()
    except _ERRORS:
        return


class _Run:
    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        rates = spec.rates()
        net = (
            NetworkFaults(
                drop_request=float(rates["drop_request"]),
                drop_response=float(rates["drop_response"]),
                duplicate_request=float(rates["duplicate_request"]),
                max_extra_delay_ms=int(rates["max_extra_delay_ms"]),
            )
            if spec.faults
            else None
        )
        ledger_faults = (
            LedgerFaults(append=float(rates["ledger_append"]), read=float(rates["ledger_read"]))
            if spec.faults
            else None
        )
        topics = {
            "ctp": {"in": spec.clients, "out": spec.partitions},
            "multi": {"multi": spec.partitions},
            "delayed": {"delayed": 1},
        }[spec.workload]
        self.cluster = Cluster.start(
            seed=spec.seed,
            topics=topics,
            config=spec.broker_config(),
            ledger=spec.ledger,
            data_dir=spec.data_dir,
            batching=spec.batching,
            network_faults=net,
            ledger_faults=ledger_faults,
            history=f"{spec.workload}-{spec.ledger}-seed{spec.seed}",
            disk=spec.disk,
            group_commit_ms=spec.group_commit_ms,
            shared_delayed_index=spec.shared_delayed,
            disk_faults=DiskFaults(
                write_eio=float(rates["disk_eio"]) if spec.faults else 0.0,
                sync_eio=float(rates["disk_eio"]) if spec.faults else 0.0,
                capacity=spec.disk_capacity,
            )
            if spec.ledger == "file" and spec.disk == "sim"
            else None,
        )
        self.cluster.on_disk_failure = self.disk_failure
        # A component that raises crashes and reloads; the run goes on and lists it (RunResult.failures).
        self.cluster.sim.on_error = self.cluster.broker.contain
        if rates["participant_timeout"]:
            # END_TXN_ON_* requests time out in the TB client (retryable: the coordinator re-drives the end).
            self.cluster.broker.faults = BrokerFaults(participant_timeout=float(rates["participant_timeout"]))
        self.sim = self.cluster.sim
        self.rng = self.sim.rng
        self.rates = rates
        self.faults: list[FaultEvent] = []
        self.stopped: str | None = None  # set when the store is lost for good: the run ends there
        self.cluster.broker.store.on_fatal = self.storage_lost
        if self.cluster.broker.store.fatal is not None:  # lost while the broker started
            self.storage_lost(self.cluster.broker.store.fatal)
        self.cut = False
        self.budget = _Budget(spec.ops, lambda: self.sim.now, spec.duration_ms)
        self.running = 0
        self.committed = 0
        self.aborted = 0
        self.faults_on = spec.faults
        self.errors: list[BaseException] = []
        self.producers: dict[tuple[str, int, Client | None], Producer] = {}  # (topic, partition, owner)
        self.inputs: list[Consumer] = []  # ``reread``: the processors' input consumers, kept open
        self.lookers = 0  # Readers opened so far (``readers``): each gets a subscription name of its own
        self.ledger_faults: dict[str, int] = {}
        bucket = spec.workload == "delayed" and spec.delayed_tracker == "bucket"
        self.max_delay_ms = BUCKET_MAX_DELAY_MS if bucket else MAX_DELAY_MS
        self.cluster.broker.store.on_fault = self.ledger_fault

    # -- helpers ------------------------------------------------------------------------------------

    def start(self, proc: Proc) -> None:
        self.running += 1

        def exit_(error: BaseException | None) -> None:
            self.running -= 1
            if error is not None:
                self.errors.append(error)

        spawn(self.sim, proc, exit_)

    def producer(self, client: Client, topic: str, partition: int, *, shared: bool) -> Producer:
        """A producer for ``client``.  With ``batch_messages`` a batching one: ``shared``, a handle on
        the run's one producer of the partition, so every client's sends can meet in one batch;
        otherwise the client's own.  Only sends outside a transaction share: a batch carries one
        transaction, so transactions of different clients never meet in one, and a shared producer
        sends one request at a time for every client, which would only slow them down."""
        if not self.spec.batch_messages:
            return client.create_producer(topic, partition)
        key = (topic, partition, None if shared else client)
        mine = self.producers.get(key)
        if mine is None:
            mine = self.producers[key] = client.create_producer(
                topic,
                partition,
                batching_enabled=True,
                batching_max_messages=BATCH_MAX_MESSAGES,
                batching_max_publish_delay_ms=BATCH_MAX_DELAY_MS,
            )
            return mine
        return mine if mine.client is client else mine.share(client)

    def send(
        self, client: Client, topic: str, partition: int, text: str, *, txn: Any = None, deliver_at: int | None = None
    ) -> Generator[Future[Any], Any, Any]:
        """One send through :meth:`producer`.  A batching producer sends one request at a time, so a
        request that is never answered (lost, or a broker crash) would hold every later send through
        it back forever; a timed-out send retires the producer, and the next send opens a new one
        (as Pulsar's producer reconnects and carries on)."""
        key = (topic, partition, None if txn is None else client)
        before = self.producers.get(key)
        producer = self.producer(client, topic, partition, shared=txn is None)
        try:
            return (yield producer.send_async(text, txn=txn, deliver_at=deliver_at, partition_key=self.key()))
        except OperationTimeout:
            if self.spec.batch_messages and self.producers.get(key) is (before or producer):
                del self.producers[key]
            raise

    def key(self) -> str | None:
        """A send's partition key (``key_shared`` runs only: other runs draw nothing, so they stay as they were)."""
        return self.rng.choice(KEYS) if self.spec.key_shared else None

    def ledger_fault(self, fault: InjectedFault) -> None:
        """An injected ledger failure, as it fires: into the schedule, and counted per operation."""
        op = fault.operation.op.value
        self.injected(f"ledger-{op.replace('_', '-')}-failed", fault.operation.ledger)
        self.ledger_faults[f"ledger_{op}_failed"] = self.ledger_faults.get(f"ledger_{op}_failed", 0) + 1

    def disk_failure(self, error: BaseException) -> None:
        """The store's journal failed for good (a disk fault): the broker goes down and comes back."""
        self.injected("disk-failure", "broker")

    def storage_lost(self, error: BaseException) -> None:
        """The store is lost for good (:func:`~engine.ledger_store.storage_lost`): the run
        stops at once, keeping what it recorded, instead of taking it for a ledger error."""
        if self.stopped is None:
            self.stopped = storage_lost(error) or str(error)
            self.injected("storage-lost", "broker")

    def injected(self, kind: str, target: str) -> None:
        self.faults.append(FaultEvent(self.sim.now, kind, target))

    def txn_timeout(self, process: int) -> int:
        if self.faults_on and self.rng.random() < float(self.rates["short_txn_timeout"]):
            timeout = self.rng.randint(50, 400)  # some transactions time out (TC-18, TC-19, TC-36)
            self.injected(f"short-txn-timeout-{timeout}ms", f"process-{process}")
            return timeout
        return 10_000

    def end(self, txn: Any) -> Proc:
        if self.rng.random() < 0.15:
            yield txn.abort_async()
            self.aborted += 1
        else:
            yield txn.commit_async()
            self.committed += 1

    def subscribe(
        self, client: Client, topic: str, sub: str, partition: int, kind: ConsumerType
    ) -> Generator[Future[Any], Any, Consumer]:
        while True:
            try:
                consumer: Consumer = yield client.subscribe_async(topic, sub, partition=partition, consumer_type=kind)
                return consumer
            except _ERRORS:
                yield self.sim.sleep(100)

    # -- workloads ----------------------------------------------------------------------------------

    def feeder(self, topic: str, count: int, first: int = 0, feeders: int = 1) -> Proc:
        """Messages ``first``, ``first + feeders``, ... of ``count``; the feeders' k-th messages go to
        the same partition, so that several feeders' sends meet in a batch."""
        client = self.cluster.client()
        for i in range(first, count, feeders):

            def send(i: int = i) -> Proc:
                yield from self.send(client, topic, (i // feeders) % self.spec.clients, f"{topic}-{i}")

            yield from _attempt(send)
            yield self.sim.sleep(self.rng.randint(0, 5))

    def ctp_worker(self, w: int) -> Proc:
        client = self.cluster.client()
        # Each processor owns one input partition (Exclusive), so its empty receive means "nothing left".
        consumer: Consumer = yield from self.subscribe(client, "in", "ctp", w, ConsumerType.Exclusive)
        n = 0
        while self.budget.take():
            n += 1

            def one(n: int = n) -> Proc:
                txn = yield client.new_transaction_async(self.txn_timeout(client.process))
                msg = yield consumer.receive_async(20)
                if msg is None:
                    yield txn.abort_async()
                    return
                target = self.rng.randrange(self.spec.partitions)
                yield from self.send(client, "out", target, f"{msg.payload.decode()}>w{w}.{n}", txn=txn)
                if self.spec.cumulative:
                    # One processor per input partition (Exclusive): a cumulative ack in the txn
                    # acknowledges this input and everything before it (PA-9, PA-12).
                    yield consumer.acknowledge_cumulative_async(msg, txn=txn)
                else:
                    yield consumer.acknowledge_async(msg, txn=txn)
                if self.spec.queries:
                    # The admin check of what the open txn just acked (PA-21): PendingAck while the
                    # txn holds it.  An admin request that fails leaves the txn to go on.
                    yield from self.query(lambda: consumer.check_position_in_pending_ack_async(msg))
                if self.spec.redeliver:
                    # As a consumer's ack timeout would: everything unacked comes back, but not what
                    # the open txn holds (PA-1); whatever does come is processed in the same txn.
                    yield consumer.redeliver_unacknowledged_messages_async()
                    more = yield consumer.receive_async(20)
                    if more is not None:
                        target = self.rng.randrange(self.spec.partitions)
                        yield from self.send(client, "out", target, f"{more.payload.decode()}>w{w}.{n}b", txn=txn)
                        yield consumer.acknowledge_async(more, txn=txn)
                yield from self.end(txn)

            yield from _attempt(one)
        if self.spec.rereads:
            # Read again once the heal has ended everything and the input partition recovered.
            self.inputs.append(consumer)
            return
        yield from self.close_input(consumer)

    def close_input(self, consumer: Consumer) -> Proc:
        """A processor is done with its input subscription."""
        if self.spec.unsubscribe:
            # The processor's subscription goes with its pending-ack log, whose writer is closed
            # first (BW-3, BW-18); an END_TXN the coordinator re-drives to it later finds it gone,
            # which a participant answers as success (as Pulsar's END_TXN_ON_SUBSCRIPTION does).
            yield from self.unsubscribe(consumer)
        else:
            consumer.close()

    def reread_input(self, consumer: Consumer) -> Proc:
        """``reread``: the processor (the same process, so its subscription is still judged for
        liveness) receives and acknowledges what its recovered subscription still holds, until three
        receives in a row find nothing.  Whatever a committed transaction acknowledged must not come
        back (PA-12, PA-18, PA-19: ``redelivered-after-ack``); what the processors never took, or an
        aborted transaction returned (PA-13), does."""
        empty = 0
        while empty < 3:
            got = None
            try:
                got = yield consumer.receive_async(50)
                if got is not None:
                    yield consumer.acknowledge_async(got)
            except _ERRORS:
                pass
            empty = empty + 1 if got is None else 0
        yield from self.close_input(consumer)

    def multi_writer(self, w: int) -> Proc:
        client = self.cluster.client()
        n = 0
        while self.budget.take():
            n += 1

            def one(n: int = n) -> Proc:
                txn = yield client.new_transaction_async(self.txn_timeout(client.process))
                for p in range(self.spec.partitions):
                    yield from self.send(client, "multi", p, f"w{w}.{n}.p{p}", txn=txn)
                yield from self.end(txn)

            yield from _attempt(one)
            yield self.sim.sleep(self.rng.randint(0, 10))

    def delayed_writer(self, w: int) -> Proc:
        client = self.cluster.client()
        n = 0
        while self.budget.take():
            n += 1

            def one(n: int = n) -> Proc:
                at: int | None = self.sim.now + self.rng.randint(0, self.max_delay_ms)
                if self.rng.random() < 0.5:
                    # A delayed message is never batched: with batching producers some plain sends
                    # carry no deliver-at, so batches form between the delayed ones.
                    if self.spec.batch_messages and self.rng.random() < 0.4:
                        at = None
                    yield from self.send(client, "delayed", 0, f"w{w}.{n}", deliver_at=at)
                    return
                txn = yield client.new_transaction_async(self.txn_timeout(client.process))
                yield from self.send(client, "delayed", 0, f"w{w}.{n}.t", txn=txn, deliver_at=at)
                yield from self.end(txn)

            yield from _attempt(one)
            yield self.sim.sleep(self.rng.randint(0, 10))
        # Two last messages, due after the writer has stopped: the last writer's fall due while no
        # send makes the dispatcher read, so only the tracker's timer (DD-25) delivers them to the
        # readers then waiting in long receives, the second one after the tracker popped the first
        # and had to re-arm for what it still holds.
        for k, delay in enumerate(TAIL_DELAYS_MS):

            def tail(k: int = k, delay: int = delay) -> Proc:
                yield from self.send(client, "delayed", 0, f"w{w}.end{k}", deliver_at=self.sim.now + delay)

            yield from _attempt(tail)

    def reader(
        self,
        topic: str,
        sub: str,
        partition: int,
        kind: ConsumerType,
        done: Callable[[], bool],
        quiet: Callable[[], bool] | None = None,
    ) -> Proc:
        """Receive and acknowledge until ``done()``, then drain: receives that find nothing.

        Receives poll (50 ms).  With ``quiet`` (the delayed workload: the writers have stopped),
        once it holds the reader waits in receives of LONG_RECEIVE_MS, recorded with their wait,
        until one of them comes back empty, and then polls again: what falls due while no send
        makes the dispatcher read reaches it only through the tracker's timer (DD-25), and a
        broker that leaves a due message to the consumer's next receive is late by a whole wait
        (the oracle's ``late-visibility``).  Once per reader, so the polls that make up most of
        the main job's operations stay."""
        client = self.cluster.client()
        consumer: Consumer = yield from self.subscribe(client, topic, sub, partition, kind)
        empty = 0
        last: Position | None = None  # the last message received, and when the first one came
        first_at: int | None = None
        waited = quiet is None  # whether a long receive has come back empty
        while empty < 3:
            got = None
            try:
                if not waited and quiet is not None and quiet():
                    got = yield consumer.receive_async(LONG_RECEIVE_MS, record_timeout=True)
                    waited = got is None
                else:
                    got = yield consumer.receive_async(50)
                if got is not None:
                    last = got.position
                    first_at = self.sim.now if first_at is None else first_at
                    yield consumer.acknowledge_async(got)
            except _ERRORS:
                if client.recorder.crashed(client.process):
                    pass
            if got is None and done():
                empty += 1
            elif got is not None:
                empty = 0
        # A reader that is done closes its consumer, as an application would: on a subscription with
        # several consumers (Key_Shared) what it still held goes to the others, which read to the end.
        # (A consumer that stayed connected without reading would keep its keys' messages for good,
        # in Pulsar too, and the drain of another consumer would then prove nothing.)
        if self.spec.queries:
            # The partition's last message id as the reader stops (TB-18): never a message of a
            # transaction still open or aborted.
            yield from self.query(consumer.get_last_message_id_async)
        if self.spec.readers and last is not None and first_at is not None:
            yield from self.look_back(client, topic, partition, last, first_at)
        if self.spec.unsubscribe:
            # Unsubscribing drops the subscription with its cursor, pending-ack log and delayed
            # tracker (DD-23); a reader that is done may do that instead of closing.
            yield from self.unsubscribe(consumer)
        else:
            consumer.close()

    def look_back(self, client: Client, topic: str, partition: int, start: Position, since: int) -> Proc:
        """A Reader over what is still in the partition: a non-durable subscription whose cursor
        starts at ``start`` and dies with its consumer (PA-24), read to its end, then sought back to
        the messages published at or after ``since`` (PA-23) and read to its end again.  It never
        acknowledges; what it receives must still be only what was committed, never an aborted
        transaction's message (TB-15 .. TB-17).  Nothing of it is durable, so it holds back no ledger
        deletion: what retention deleted meanwhile it cannot read."""
        self.lookers += 1
        try:
            reader: Consumer = yield client.create_reader_async(
                topic, f"look{self.lookers}", start, partition=partition
            )
        except _ERRORS:
            return
        try:
            yield from self.read_to_end(reader)
            yield reader.seek_async(since)
            yield from self.read_to_end(reader)
        except _ERRORS:
            pass
        reader.close()

    def read_to_end(self, consumer: Consumer) -> Proc:
        """Receive without acknowledging until two receives in a row find nothing."""
        empty = 0
        while empty < 2:
            got = yield consumer.receive_async(50)
            empty = empty + 1 if got is None else 0

    def unsubscribe(self, consumer: Consumer) -> Proc:
        """Unsubscribe, or close when that is refused or unanswered."""
        try:
            yield consumer.unsubscribe_async()
        except _ERRORS:
            consumer.close()

    @staticmethod
    def query(ask: Callable[[], Future[Any]]) -> Proc:
        """A question that changes nothing (its answer is in the history): a failure is no reason
        to stop what the asker was doing."""
        try:
            yield ask()
        except _ERRORS:
            return

    def fault_process(self) -> Proc:
        broker = self.cluster.broker
        while self.faults_on:
            yield self.sim.sleep(self.rng.randint(1000, 4000))
            if not self.faults_on:
                break
            roll = self.rng.random()
            crash, reload = float(self.rates["broker_crash"]), float(self.rates["coordinator_crash"])
            unload = float(self.rates["topic_unload"])
            if roll < crash:
                store = broker.store
                if store.deferred and self.rng.random() < 0.5:
                    # A busy moment: the power goes as the journal has changes waiting for their
                    # group commit (a broker is mostly idle in simulated time, so a cut at a
                    # random instant rarely finds any).
                    yield self.store_busy(store, POWER_CUT_WAIT_MS)
                broker.crash()
                self.injected("broker-crash", "broker")
                yield self.sim.sleep(self.rng.randint(20, 300))
                broker.restart()
                self.injected("broker-restart", "broker")
            elif roll < crash + reload:
                broker.coordinator.crash()
                self.injected("coordinator-crash", "coordinator")
                yield self.sim.sleep(self.rng.randint(20, 300))
                if broker.up and not broker.coordinator.ready:
                    loaded = broker.coordinator.load()
                    self.injected("coordinator-reload" if loaded else "coordinator-reload-failed", "coordinator")
                    if not loaded:
                        broker.restart_later(broker.coordinator)
            elif roll < crash + reload + unload:
                partition = self.rng.choice(sorted(broker.partitions))
                broker.partitions[partition].crash()
                self.injected("topic-unload", partition)
                broker.restart_later(broker.partitions[partition])

    def unload_at_heal(self) -> None:
        """``unload_at_heal``: unload partitions once every transaction has ended (they reload on their own)."""
        rate = float(self.rates["unload_at_heal"])
        broker = self.cluster.broker
        if not self.spec.faults or rate <= 0 or not broker.up:
            return
        for name in sorted(broker.partitions):
            if self.rng.random() < rate:
                broker.partitions[name].crash()
                self.injected("topic-unload-at-heal", name)
                broker.restart_later(broker.partitions[name])

    def unload_inputs(self) -> None:
        """``reread``: unload every input partition (``in``) once the heal has ended every transaction;
        each reloads on its own, its subscription recovered from the cursor and the pending-ack log."""
        broker = self.cluster.broker
        if not broker.up:
            return
        for name in sorted(broker.partitions):
            if "/in-partition-" in name:
                broker.partitions[name].crash()
                self.injected("topic-unload-for-reread", name)
                broker.restart_later(broker.partitions[name])

    def store_busy(self, store: LedgerStore, wait_ms: int) -> Future[None]:
        """A future done as soon as ``store`` queues a change for its journal's next commit (or
        after ``wait_ms``, if it stays idle)."""
        busy: Future[None] = Future()
        store.on_queue = lambda: busy.set_result(None)

        def done(_: Future[None]) -> None:
            store.on_queue = None

        busy.add_done_callback(done)
        self.sim.schedule(wait_ms, lambda: busy.set_result(None))
        return busy

    def heal(self) -> None:
        """Stop injecting faults and give pending work time to settle (timeouts, retries)."""
        self.faults_on = False
        self.cluster.network.faults = NetworkFaults()
        self.cluster.broker.store.set_faults(False)
        disk = self.cluster.broker.store.disk
        if isinstance(disk, SimDisk):
            disk.clear_faults()
        self.cluster.broker.faults = BrokerFaults()
        if self.spec.faults:
            self.injected("heal", "cluster")
        if not self.cluster.broker.up:
            self.cluster.broker.restart()
            self.injected("broker-restart", "broker")

    def past_deadline(self) -> bool:
        """The run's deadline: the next event is due after it (the clock stops there), or the
        store is lost (the run stops where it is)."""
        if self.stopped is not None:
            return True
        due = self.sim.next_due()
        if due is None or due <= self.spec.deadline_ms:
            return False
        if not self.cut:
            self.cut = True
            self.sim.now = max(self.sim.now, self.spec.deadline_ms)
            self.injected("deadline", "run")
        return True

    # -- the run ------------------------------------------------------------------------------------

    def execute(self, progress: Callable[[str], None] | None) -> RunResult:
        spec = self.spec
        writers_done = [False]
        workers: list[Proc] = []
        readers: list[Proc] = []
        # Key_Shared runs read every partition with several consumers; the others with one.
        copies = KEY_SHARED_READERS if spec.key_shared else 1

        def kind(otherwise: ConsumerType) -> ConsumerType:
            return ConsumerType.KeyShared if spec.key_shared else otherwise

        if spec.workload == "ctp":
            feeders = spec.clients if spec.batch_messages else 1
            for first in range(feeders):
                self.start(self.feeder("in", spec.ops + spec.ops // 4, first, feeders))
            workers = [self.ctp_worker(w) for w in range(spec.clients)]
            readers = [
                self.reader("out", "verify", p, kind(ConsumerType.Exclusive), lambda: writers_done[0])
                for p in range(spec.partitions)
                for _ in range(copies)
            ]
        elif spec.workload == "multi":
            workers = [self.multi_writer(w) for w in range(spec.clients)]
            readers = [
                self.reader("multi", "read", p, kind(ConsumerType.Exclusive), lambda: writers_done[0])
                for p in range(spec.partitions)
                for _ in range(copies)
            ]
        else:
            workers = [self.delayed_writer(w) for w in range(spec.clients)]
            # With the shared delayed index a second subscription reads the topic too: the two
            # share one index (DD-30), and each must get every message, each when it is due.
            subs = ("read", "read-shared") if spec.shared_delayed else ("read",)
            readers = [
                self.reader(
                    "delayed",
                    sub,
                    0,
                    kind(ConsumerType.Shared),
                    lambda: writers_done[0],
                    lambda: finished[0] >= worker_count,
                )
                for sub in subs
                for _ in range(copies)
            ]
        worker_count = len(workers)
        finished = [0]

        def worker_exit(error: BaseException | None) -> None:
            finished[0] += 1
            if error is not None:
                self.errors.append(error)

        for proc in workers:
            spawn(self.sim, proc, worker_exit)
        # ``unload_at_heal`` (the quiesce mix): the readers start only once every transaction has
        # ended and the partitions were unloaded and reloaded, so everything committed is still
        # unread when the partitions recover with nothing after the recovery (TB-24).
        deferred = spec.faults and float(self.rates["unload_at_heal"]) > 0
        if not deferred:
            for proc in readers:
                self.start(proc)
        if spec.faults:
            spawn(self.sim, self.fault_process())
        last_report = time.monotonic()
        while finished[0] < worker_count and not self.past_deadline():
            if not self.sim.run_one() and self.stopped is None:
                raise SimTimeout("the run stalled with workers still running")
            if progress is not None and time.monotonic() - last_report > 2:
                last_report = time.monotonic()
                progress(
                    f"  {spec.workload} seed {spec.seed}: t={self.sim.now} ms, {len(self.cluster.recorder)} ops, "
                    f"{spec.ops - max(self.budget.left, 0)}/{spec.ops} txns"
                )
        if not self.cut and self.stopped is None:
            self.heal()
            heal_until = self.sim.now + 12_000  # every open transaction times out, every end is re-driven
            while (due := self.sim.next_due()) is not None and due <= heal_until and not self.past_deadline():
                self.sim.run_one()
            if not self.cut:
                self.sim.now = heal_until
            if deferred and not self.cut:
                # Everything has ended: unload the partitions, let them reload, then start reading.
                self.unload_at_heal()
                settled = self.sim.now + 2_000
                while (due := self.sim.next_due()) is not None and due <= settled and not self.past_deadline():
                    self.sim.run_one()
                if not self.cut:
                    self.sim.now = settled
        if spec.rereads and self.stopped is None and not self.cut:
            self.unload_inputs()
            settled = self.sim.now + 2_000
            while (due := self.sim.next_due()) is not None and due <= settled and not self.past_deadline():
                self.sim.run_one()
            if not self.cut:
                self.sim.now = settled
        for consumer in self.inputs:
            self.start(self.reread_input(consumer))
        if deferred and self.stopped is None:
            for proc in readers:
                self.start(proc)
        writers_done[0] = True
        while self.running > 0 and not self.past_deadline():
            if not self.sim.run_one():
                break
        if self.errors and self.stopped is None:  # after a lost store, errors are its consequences
            raise self.errors[0]
        return self.result()

    def result(self) -> RunResult:
        """The run as far as it went: its history, figures and faults."""
        spec = self.spec
        counters = {
            "network_dropped": self.cluster.network.dropped,
            "network_duplicated": self.cluster.network.duplicated,
            **self.ledger_faults,
        }
        if spec.ledger == "file":
            # The store's journal over the run: its syncs, the power cuts, and what recovery replayed.
            store = self.cluster.broker.store
            counters.update({f"journal_{k}": v for k, v in store.journal_stats().items()})
            if isinstance(store.disk, SimDisk):
                counters["disk_faults_injected"] = len(store.disk.injected)
        return RunResult(
            spec,
            self.cluster.recorder.operations(),
            self.sim.now,
            self.sim.events_run,
            self.committed,
            self.aborted,
            self.cluster.broker.crashes,
            list(self.faults),
            counters,
            self.cut,
            list(self.cluster.broker.failures),
            self.stopped,
        )


def run(spec: RunSpec, progress: Callable[[str], None] | None = None) -> RunResult:
    """One seeded run of a workload; returns its history."""
    if spec.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {spec.workload!r}; workloads are {', '.join(WORKLOADS)}")
    runner = _Run(spec)
    try:
        try:
            return runner.execute(progress)
        except Exception:
            if runner.stopped is None:
                raise
            # The lost store's error escaped a callback (a write that could not fail softly): the
            # run stops there all the same, with what it recorded.
            return runner.result()
    finally:
        runner.cluster.close()
        store = runner.cluster.broker.store
        if spec.export_dir is not None and isinstance(store.disk, SimDisk) and store.directory is not None:
            store.disk.export(os.path.abspath(os.fspath(store.directory)), spec.export_dir)
