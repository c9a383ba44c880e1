"""The client programs of the named workloads: generator processes that drive clients of one
:class:`~engine.simulation.client.Cluster` (see :mod:`engine.simulation.workloads`).

* ``ctp`` -- feeders write ``in``; each processor owns one input partition and, per transaction,
  receives, produces a transformed message to ``out`` and acknowledges its input; verifiers read ``out``.
* ``multi`` -- each transaction writes one message to every partition of ``multi``; a reader per partition.
* ``delayed`` -- sends with ``deliver_at`` in and out of transactions to a Shared subscription
  (with the shared delayed index a second subscription reads too), two last messages due after
  the writers stop, and readers that wait in long receives for them.

Every random choice is drawn from the simulation's ``random.Random(seed)``, in the order the
processes run, so a seed gives one history.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Generator
from typing import Any, NamedTuple

from engine.scheduler import Future
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
from engine.simulation.runspec import RunSpec
from spec.types import Position

__all__ = [
    "ERRORS",
    "KEYS",
    "KEY_SHARED_READERS",
    "LIVENESS_BOUND_MS",
    "LONG_RECEIVE_MS",
    "TAIL_DELAYS_MS",
    "Budget",
    "Proc",
    "Programs",
    "WorkloadPrograms",
    "attempt",
]

Proc = Generator[Future[Any], Any, None]
# What a failed operation raises: the step of the program that made it ends there.
ERRORS = (OperationFailed, OperationTimeout, ClientLibraryError)

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
# ``bounds`` runs: the bound the clients state on a delayed message's delivery after it is due and
# on a negatively acknowledged message's redelivery (the delivery oracle's lag bound, LAG_BOUND_MS:
# the broker's tick, the readers' polls and the network's delays fit well within it), and the share
# of first deliveries a reader gives back by negative ack.
LIVENESS_BOUND_MS = 1_000
NACK_SHARE = 0.2
# ``acks``: how many more messages a reader's slow transaction stays open for after its ack
SLOW_TXN_MESSAGES = 3


class Budget:
    """The transactions a run attempts, over all its clients: ``n``, or as many as start before
    ``until_ms`` of simulated time."""

    def __init__(self, n: int, clock: Callable[[], int], until_ms: int | None) -> None:
        self.left = n
        self.clock = clock
        self.until_ms = until_ms

    def take(self) -> bool:
        """Whether another transaction may start (and if so, one fewer is left)."""
        if self.until_ms is not None and self.clock() >= self.until_ms:
            return False
        self.left -= 1
        return self.left >= 0


def attempt(body: Callable[[], Proc]) -> Proc:
    """Run a step of a worker; a failed or timed-out operation just ends the step."""
    try:
        yield from body()
    except ERRORS:
        return


class WorkloadPrograms(NamedTuple):
    """A workload's processes: feeders start first, then the workers (the transactions), and the
    readers with them or, in the quiesce mix, once the heal is over."""

    feeders: list[Proc]
    workers: list[Proc]
    readers: list[Proc]


class Settling:
    """The ``acks`` variant's ways for a reader to settle a message it received (part of
    :class:`Programs`, which holds the state they share)."""

    rng: random.Random
    txn_timeout: Callable[[int], int]
    committed: int
    aborted: int
    # a reader's slow transaction, open with one ack while the reader goes on, and how many more of
    # its messages it stays open for
    lingering: dict[Consumer, tuple[Any, int]]
    end: Callable[[Any], Proc]  # Programs.end: commit, or now and then abort

    def settle(self, client: Client, consumer: Consumer, got: Any, kind: ConsumerType) -> Proc:
        """``acks``: a reader acknowledges ``got`` in one of the ways an application may, drawn per
        message: individually; cumulatively (a cumulative ack on a Shared or Key_Shared subscription
        is refused or ignored, PA-10, so it is followed by an individual one); twice (the second
        names a position already deleted, PA-3, PA-11); in a transaction, individually or
        cumulatively, that commits (PA-12) or aborts (PA-13: the message comes back); in a
        transaction while another transaction holds it, individually or (on an ordered
        subscription) cumulatively (PA-6, PA-8, PA-9: TransactionConflict), the other then committing
        (or, beside a cumulative holder, committing an individual ack of its own first); plainly
        (on an ordered subscription now and then cumulatively), then again in a transaction that
        aborts (the position, or the batch index, is already deleted on the cursor, or at or below
        the mark-delete position: TransactionConflict, and nothing comes back, PA-3, PA-9); a
        transaction's cumulative ack twice (the second not above its own: TransactionConflict, and
        the commit becomes an abort, TC-32); or, on an ordered
        subscription, in a slow transaction that stays open for the next few messages and then
        aborts, or in a transaction that also acks the message after the next one and leaves the one
        between for a plain ack (:meth:`settle_around`)."""
        slow = self.lingering.pop(consumer, None)
        if slow is not None and slow[1] > 0:
            self.lingering[consumer] = (slow[0], slow[1] - 1)
        elif slow is not None:
            yield from self.let_go(slow[0])
        draw = self.rng.random()
        ordered = kind in (ConsumerType.Exclusive, ConsumerType.Failover)
        try:
            yield from self.settle_by(client, consumer, got, draw, ordered)
        except ERRORS:
            # As an application does when its transaction failed: acknowledge the message plainly, so
            # it is not kept for good (on Key_Shared a kept message stalls the keys of a consumer
            # that joined after it).
            yield consumer.acknowledge_async(got)

    def settle_by(self, client: Client, consumer: Consumer, got: Any, draw: float, ordered: bool) -> Proc:
        """The ways of :meth:`settle`, by ``draw``."""
        if draw < 0.2:
            yield consumer.acknowledge_cumulative_async(got)
            if not ordered:
                yield consumer.acknowledge_async(got)
        elif draw < 0.35:
            yield consumer.acknowledge_async(got)
            yield consumer.acknowledge_async(got)
        elif draw < 0.6:
            txn = yield client.new_transaction_async(self.txn_timeout(client.process))
            if self.rng.random() < 0.3:
                yield consumer.acknowledge_cumulative_async(got, txn=txn)
                if ordered and draw >= 0.55:
                    # the same cumulative ack again: not above the transaction's own (PA-9,
                    # TransactionConflict), and the failed ack turns the commit into an abort (TC-32)
                    with contextlib.suppress(*ERRORS):
                        yield consumer.acknowledge_cumulative_async(got, txn=txn)
            else:
                yield consumer.acknowledge_async(got, txn=txn)
            yield from self.end(txn)
            if not ordered:
                yield consumer.acknowledge_async(got)  # whatever the cumulative ack in the txn did
        elif draw < 0.7:
            holder = yield client.new_transaction_async(self.txn_timeout(client.process))
            cumulative = ordered and self.rng.random() < 0.5
            if cumulative:
                # the holder's cumulative ack: the other's abort then meets a slot it does not own
                # (PA-13: logged, the slot kept)
                yield consumer.acknowledge_cumulative_async(got, txn=holder)
            else:
                yield consumer.acknowledge_async(got, txn=holder)
            other = yield client.new_transaction_async(self.txn_timeout(client.process))
            taken = False
            with contextlib.suppress(*ERRORS):
                if cumulative and draw < 0.63:
                    # a cumulative ack of its own while the holder's slot stands (PA-9)
                    yield consumer.acknowledge_cumulative_async(got, txn=other)
                else:
                    yield consumer.acknowledge_async(got, txn=other)
                taken = True
            if taken and cumulative and self.rng.random() < 0.5:
                # An individual ack is checked against the individual acks only (PA-6), so the other
                # holds the message beside the holder's cumulative slot.  Its commit deletes the
                # entry; once the mark-delete position reaches the slot the cursor wins and the slot
                # goes (PA-11), and the holder's commit then finds no cumulative ack of its own.
                yield other.commit_async()
                self.committed += 1
            else:
                yield other.abort_async()
            yield holder.commit_async()
            self.committed += 1
        elif draw < 0.8:
            cumulative = ordered and draw >= 0.75
            if cumulative:
                yield consumer.acknowledge_cumulative_async(got)
            else:
                yield consumer.acknowledge_async(got)
            late = yield client.new_transaction_async(self.txn_timeout(client.process))
            with contextlib.suppress(*ERRORS):
                if cumulative:
                    # at or below the mark-delete position the plain ack moved (PA-9)
                    yield consumer.acknowledge_cumulative_async(got, txn=late)
                else:
                    yield consumer.acknowledge_async(got, txn=late)
            yield late.abort_async()
            self.aborted += 1
        elif draw < 0.84 and ordered:
            yield from self.settle_around(client, consumer, got)
        elif draw >= 0.9 and ordered and consumer not in self.lingering:
            # A slow transaction: it acks the message and stays open while the reader goes on, then
            # aborts a few messages later (PA-13: the message comes back).  A plain cumulative ack
            # meanwhile takes the message from it (the cursor wins, PA-11): its abort then gives
            # nothing back.
            slow = yield client.new_transaction_async(self.txn_timeout(client.process))
            self.lingering[consumer] = (slow, SLOW_TXN_MESSAGES)
            yield consumer.acknowledge_async(got, txn=slow)
        else:
            yield consumer.acknowledge_async(got)

    def settle_around(self, client: Client, consumer: Consumer, got: Any) -> Proc:
        """A transaction that acknowledges ``got`` and the message after the next one, and leaves the
        one between for later: its commit moves the mark-delete position to ``got`` and leaves the
        other deleted above the gap (PA-3, PA-12), until the plain ack of the one between folds both
        in.  (An abort gives both back, PA-13.)  What a failure leaves unsettled is acknowledged
        plainly, as :meth:`settle` does."""
        txn = yield client.new_transaction_async(self.txn_timeout(client.process))
        yield consumer.acknowledge_async(got, txn=txn)
        between = after = None
        with contextlib.suppress(*ERRORS):
            between = yield consumer.receive_async(20)
            if between is not None:
                after = yield consumer.receive_async(20)
        try:
            if after is not None:
                yield consumer.acknowledge_async(after, txn=txn)
            yield from self.end(txn)
        except ERRORS:
            for message in (got, after):
                if message is not None:
                    with contextlib.suppress(*ERRORS):
                        yield consumer.acknowledge_async(message)
        if between is not None:
            with contextlib.suppress(*ERRORS):
                yield consumer.acknowledge_async(between)

    def let_go(self, txn: Any) -> Proc:
        """A reader's slow transaction ends: it aborts (an abort that fails leaves it to its timeout)."""
        try:
            yield txn.abort_async()
            self.aborted += 1
        except ERRORS:
            pass


class Programs(Settling):
    """The client programs of one run, and what they share: the budget of transactions, the
    producers of ``batch_messages`` runs, the counts of commits and aborts."""

    def __init__(self, spec: RunSpec, cluster: Cluster, txn_timeout: Callable[[int], int]) -> None:
        """``txn_timeout``: the timeout of a transaction the given process opens (the fault schedule's)."""
        self.spec = spec
        self.cluster = cluster
        self.sim = cluster.sim
        self.rng = self.sim.rng
        self.txn_timeout = txn_timeout
        self.budget = Budget(spec.ops, lambda: self.sim.now, spec.duration_ms)
        self.committed = 0
        self.aborted = 0
        self.producers: dict[tuple[str, int, Client | None], Producer] = {}  # (topic, partition, owner)
        self.inputs: list[Consumer] = []  # ``reread``: the processors' input consumers, kept open
        self.lookers = 0  # Readers opened so far (``readers``): each gets a subscription name of its own
        self.sending: dict[Client, Future[Any]] = {}  # ``pipelined``: each helper session's send in flight
        self.lingering = {}  # ``acks``: see Settling
        bucket = spec.workload == "delayed" and spec.delayed_tracker == "bucket"
        self.max_delay_ms = BUCKET_MAX_DELAY_MS if bucket else MAX_DELAY_MS

    def workload(self, writers_done: Callable[[], bool], workers_done: Callable[[], bool]) -> WorkloadPrograms:
        """The processes of the run's workload.  Readers drain once ``writers_done()``; the delayed
        workload's wait in long receives once ``workers_done()``."""
        spec = self.spec
        feeders: list[Proc] = []
        # Key_Shared runs read every partition with several consumers; the others with one.
        copies = KEY_SHARED_READERS if spec.key_shared else 1

        def kind(otherwise: ConsumerType) -> ConsumerType:
            return ConsumerType.KeyShared if spec.key_shared else otherwise

        if spec.workload == "ctp":
            count = spec.clients if spec.batch_messages else 1
            feeders = [self.feeder("in", spec.ops + spec.ops // 4, first, count) for first in range(count)]
            workers = [self.ctp_worker(w) for w in range(spec.clients)]
            readers = [
                self.reader("out", "verify", p, kind(ConsumerType.Exclusive), writers_done)
                for p in range(spec.partitions)
                for _ in range(copies)
            ]
        elif spec.workload == "multi":
            workers = [self.multi_writer(w) for w in range(spec.clients)]
            readers = [
                self.reader("multi", "read", p, kind(ConsumerType.Exclusive), writers_done)
                for p in range(spec.partitions)
                for _ in range(copies)
            ]
        else:
            workers = [self.delayed_writer(w) for w in range(spec.clients)]
            # With the shared delayed index a second subscription reads the topic too: the two
            # share one index (DD-30), and each must get every message, each when it is due.
            subs = ("read", "read-shared") if spec.shared_delayed else ("read",)
            readers = [
                self.reader("delayed", sub, 0, kind(ConsumerType.Shared), writers_done, workers_done)
                for sub in subs
                for _ in range(copies)
            ]
        return WorkloadPrograms(feeders, workers, readers)

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
        # ``bounds``: a delayed message sent outside a transaction states when it must be delivered.
        within = LIVENESS_BOUND_MS if self.spec.bounds and txn is None and deliver_at is not None else None
        try:
            return (
                yield producer.send_async(
                    text, txn=txn, deliver_at=deliver_at, partition_key=self.key(), deliver_within_ms=within
                )
            )
        except OperationTimeout:
            if self.spec.batch_messages and self.producers.get(key) is (before or producer):
                del self.producers[key]
            raise

    def key(self) -> str | None:
        """A send's partition key (``key_shared`` runs only: other runs draw nothing, so they stay as they were)."""
        return self.rng.choice(KEYS) if self.spec.key_shared else None

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
        # ``bounds``: each consumer is named (its client's process), so the history accounts for them all.
        name = f"{sub}-p{client.process}" if self.spec.bounds else None
        while True:
            try:
                consumer: Consumer = yield client.subscribe_async(
                    topic, sub, partition=partition, consumer_type=kind, consumer_name=name
                )
                return consumer
            except ERRORS:
                yield self.sim.sleep(100)

    def feeder(self, topic: str, count: int, first: int = 0, feeders: int = 1) -> Proc:
        """Messages ``first``, ``first + feeders``, ... of ``count``; the feeders' k-th messages go to
        the same partition, so that several feeders' sends meet in a batch."""
        client = self.cluster.client()
        for i in range(first, count, feeders):

            def send(i: int = i) -> Proc:
                yield from self.send(client, topic, (i // feeders) % self.spec.clients, f"{topic}-{i}")

            yield from attempt(send)
            yield self.sim.sleep(self.rng.randint(0, 5))

    def ctp_worker(self, w: int) -> Proc:
        client = self.cluster.client()
        # ``pipelined``: a second session of the processor sends while the first acknowledges and commits.
        helper = self.cluster.client() if self.spec.pipelined else None
        # Each processor owns one input partition (Exclusive), so its empty receive means "nothing left".
        consumer: Consumer = yield from self.subscribe(client, "in", "ctp", w, ConsumerType.Exclusive)
        n = 0
        while self.budget.take():
            n += 1

            def one(n: int = n) -> Proc:
                if helper is not None:
                    yield from self.pipelined(client, helper, consumer, f"w{w}.{n}")
                    return
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
                if self.spec.acks and self.rng.random() < 0.25:
                    # The input once more, in a transaction of its own that then aborts, as a processor
                    # that lost track of what it committed would: once the commit deleted the position
                    # or its batch index on the cursor, the pending ack refuses it (PA-3:
                    # TransactionConflict) and nothing comes back; after an abort it is taken again.
                    late = yield client.new_transaction_async(self.txn_timeout(client.process))
                    with contextlib.suppress(*ERRORS):
                        yield consumer.acknowledge_async(msg, txn=late)
                    yield late.abort_async()
                    self.aborted += 1
                if self.spec.queries:
                    # Asked again once the txn ended: no txn holds it now, so the answer is where the
                    # pending ack's own view of the cursor puts it (MarkDelete at or below its
                    # mark-delete position, else NotInPendingAck), a view no other answer shows.
                    yield from self.query(lambda: consumer.check_position_in_pending_ack_async(msg))

            yield from attempt(one)
        if self.spec.rereads:
            # Read again once the heal has ended everything and the input partition recovered.
            self.inputs.append(consumer)
            return
        yield from self.close_input(consumer)

    def pipelined(self, client: Client, helper: Client, consumer: Consumer, tag: str) -> Proc:
        """``pipelined``: one ctp transaction whose client does not wait for one operation before the
        next.  The output is sent from a second session of the processor and not waited for; the
        input is acknowledged meanwhile, and the commit is asked for while the send may still be in
        flight: the client holds END_TXN back until every operation of the transaction is answered,
        and a commit whose send failed becomes an abort (TC-32).  A commit that fails is asked for
        once more (TC-32, TC-33: a retried end)."""
        before = self.sending.pop(helper, None)
        if before is not None and not before.done:
            # A session invokes one operation at a time: the last send, if a timed-out commit left
            # it in flight, ends first.
            with contextlib.suppress(*ERRORS):
                yield before
        txn = yield client.new_transaction_async(self.txn_timeout(client.process))
        msg = yield consumer.receive_async(20)
        if msg is None:
            yield txn.abort_async()
            return
        target = self.rng.randrange(self.spec.partitions)
        producer = self.producers.get(("out", target, helper))
        if producer is None:
            # The helper's own producer, never a batching one: a batch that is never answered would
            # hold every later send of this processor back.
            producer = self.producers[("out", target, helper)] = helper.create_producer("out", target)
        self.sending[helper] = producer.send_async(f"{msg.payload.decode()}>{tag}", txn=txn, partition_key=self.key())
        yield consumer.acknowledge_async(msg, txn=txn)
        try:
            yield txn.commit_async()
            self.committed += 1
        except OperationFailed:
            yield txn.commit_async()
            self.committed += 1
        if self.spec.queries:
            # the admin check once the txn ended, as the processor that waits asks it (ctp_worker)
            yield from self.query(lambda: consumer.check_position_in_pending_ack_async(msg))

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
            except ERRORS:
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

            yield from attempt(one)
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

            yield from attempt(one)
            yield self.sim.sleep(self.rng.randint(0, 10))
        # Two last messages, due after the writer has stopped: the last writer's fall due while no
        # send makes the dispatcher read, so only the tracker's timer (DD-25) delivers them to the
        # readers then waiting in long receives, the second one after the tracker popped the first
        # and had to re-arm for what it still holds.
        for k, delay in enumerate(TAIL_DELAYS_MS):

            def tail(k: int = k, delay: int = delay) -> Proc:
                yield from self.send(client, "delayed", 0, f"w{w}.end{k}", deliver_at=self.sim.now + delay)

            yield from attempt(tail)

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
                    if self.spec.bounds and got.redelivery_count == 0 and self.rng.random() < NACK_SHARE:
                        # Given back: it must come again within the stated bound (lost-redelivery).
                        yield consumer.negative_acknowledge_async(got, redeliver_within_ms=LIVENESS_BOUND_MS)
                    elif self.spec.acks:
                        yield from self.settle(client, consumer, got, kind)
                    else:
                        yield consumer.acknowledge_async(got)
            except ERRORS:
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
        slow = self.lingering.pop(consumer, None)
        if slow is not None:
            yield from self.let_go(slow[0])
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
        except ERRORS:
            return
        try:
            yield from self.read_to_end(reader)
            yield reader.seek_async(since)
            yield from self.read_to_end(reader)
        except ERRORS:
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
        except ERRORS:
            consumer.close()

    @staticmethod
    def query(ask: Callable[[], Future[Any]]) -> Proc:
        """A question that changes nothing (its answer is in the history): a failure is no reason
        to stop what the asker was doing."""
        try:
            yield ask()
        except ERRORS:
            return
