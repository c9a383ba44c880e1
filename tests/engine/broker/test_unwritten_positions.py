"""Positions the partition does not hold: refused when acked, never handed out.

A differential driver against ``txnmodel serve`` (issue 31) ended the broker with ``KeyError:
Position(0, 3)`` in the dispatcher's ``_delivered``, reached from a cursor write completing.  The
root cause: the subscription accepted an ack of a position that names no entry (a message id no
broker wrote, or one from another broker's run), a transaction held it, the transaction's abort
redelivered it (PA-13), and the dispatcher handed out a message the partition does not hold.  A
managed cursor refuses such a position; so does the subscription now, before the pending ack
takes it, and the dispatcher hands out nothing the partition does not hold.  A reader's cursor
holds back no ledger deletion (PA-24): what it had already been handed of a ledger that retention
deleted since is its own (the handout carries the entry read), as a Pulsar client keeps what is in
its receiver queue; only a replay of such an entry is skipped.
"""

from __future__ import annotations

from engine.broker import BrokerError, partition_name
from engine.broker.subscription import SubscriptionService
from engine.scheduler import Future
from engine.simulation.client import Cluster, ConsumerType
from engine.storage.ledger import InitialPosition
from spec.config import Config
from spec.errors import NotAllowed
from spec.types import Position, Subscription, TxnAction

P0 = partition_name("topic", 0)


def _sub(cluster: Cluster, name: str = "sub") -> SubscriptionService:
    sub = cluster.broker.subscription(P0, name)
    assert sub is not None and sub.ready
    return sub


def _refused(future: Future[None]) -> bool:
    return future.done and isinstance(future.error, BrokerError) and isinstance(future.error.error, NotAllowed)


def test_a_transactional_ack_of_a_position_never_written_is_refused_and_no_abort_redelivers_it() -> None:
    cluster = Cluster.start(seed=11)
    client = cluster.client()
    producer = client.create_producer("topic")
    consumer = client.subscribe("topic", "sub", consumer_type=ConsumerType.Shared)
    for i in range(3):
        producer.send(f"m{i}")
    sub = _sub(cluster)
    coordinator = cluster.broker.coordinator
    txn = cluster.sim.wait(coordinator.new_txn(60_000))
    cluster.sim.wait(coordinator.add_subscription(txn, Subscription(P0, "sub")))
    consumer_id = next(iter(sub.consumers))
    for position in (Position(0, 7), Position(1, 0), Position(5, -1)):
        assert _refused(sub.acknowledge(consumer_id, position, txn, cumulative=False)), position
    cluster.sim.wait(coordinator.end_txn(txn, TxnAction.ABORT))
    received = []
    while (message := consumer.receive(50)) is not None:
        received.append(message.data())
        consumer.acknowledge(message)
    assert received == [b"m0", b"m1", b"m2"]
    assert cluster.broker.failures == []
    cluster.close()


def test_a_normal_ack_the_cursor_would_refuse_fails_alone() -> None:
    config = Config().with_overrides({"managedLedgerMaxEntriesPerLedger": "2"})
    cluster = Cluster.start(seed=11, config=config)
    client = cluster.client()
    producer = client.create_producer("topic")
    client.subscribe("topic", "sub", consumer_type=ConsumerType.Exclusive)
    for i in range(3):
        producer.send(f"m{i}")  # ledger 0: entries 0 and 1; ledger 1: entry 0
    sub = _sub(cluster)
    consumer_id = next(iter(sub.consumers))
    for position, cumulative in [(Position(1, 5), False), (Position(1, 5), True), (Position(0, 2), False)]:
        assert _refused(sub.acknowledge(consumer_id, position, None, cumulative)), position
    assert sub is _sub(cluster) and cluster.broker.failures == []  # the topic did not reload
    # What the cursor accepts still goes: the place before a live ledger's first entry, cumulatively.
    accepted = sub.acknowledge(consumer_id, Position(1, -1), None, cumulative=True)
    assert accepted.done and accepted.error is None
    cluster.close()


def test_the_dispatcher_hands_out_nothing_the_partition_does_not_hold() -> None:
    cluster = Cluster.start(seed=11)
    client = cluster.client()
    client.create_producer("topic").send("m0")
    consumer = client.subscribe("topic", "sub", consumer_type=ConsumerType.Shared)
    sub = _sub(cluster)
    sub.dispatcher.replay.add(Position(0, 7))  # as an abort's redelivery of such a position did
    sub.dispatch()
    assert [m.data() for m in iter(lambda: consumer.receive(50), None)] == [b"m0"]
    assert cluster.broker.failures == []
    cluster.close()


def test_a_reader_receives_what_it_was_handed_of_a_ledger_retention_deleted() -> None:
    config = Config().with_overrides({"managedLedgerMaxEntriesPerLedger": "2"})
    cluster = Cluster.start(seed=11, config=config)
    client = cluster.client()
    producer = client.create_producer("topic")
    durable = client.subscribe("topic", "durable", consumer_type=ConsumerType.Exclusive)
    for i in range(6):
        producer.send(f"m{i}")
    started = cluster.broker.subscribe(
        P0, "reader", "Exclusive", InitialPosition.EARLIEST, 900, durable=False, start_message=Position(-1, -1)
    )
    assert started.done and started.error is None
    reader = _sub(cluster, "reader")
    reader.dispatch()  # the reader's consumer has every entry queued
    while (message := durable.receive(50)) is not None:
        durable.acknowledge(message)
    cluster.sim.advance(10)
    part = cluster.broker.partition(P0)
    assert part.trimmed_ledgers  # the durable cursor passed ledgers 0 and 1: they went
    got = []
    while True:
        future = reader.receive(900, 10)
        while not future.done:
            cluster.sim.advance(1)
        delivered = future.result()
        if delivered is None:
            break
        got.append(delivered.payload)
    assert got == [f"m{i}".encode() for i in range(6)]  # handed out before their ledgers went
    assert cluster.broker.failures == []
    cluster.close()
