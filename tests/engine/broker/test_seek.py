"""Seek and readers inside the engine's broker (PA-22, PA-23, PA-24), on the memory and the file
ledger, with every machine step recorded and checked against the pending-ack machine.

The official client's view of the same behaviour is ``tests/engine/serve/test_seek_and_readers.py``;
here the subscription is driven directly, so what the broker dispatches after a seek is seen
without a client's own filtering.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.broker import BrokerError, partition_name
from engine.broker.subscription import SubscriptionService, reader_start
from engine.scheduler import Future
from engine.simulation.client import Cluster, Consumer, ConsumerType, Message
from engine.storage.ledger import InitialPosition
from invariants.linearizability import Verdict, check_history
from invariants.models import model_by_name
from reference import delayed as dl
from spec.errors import NotAllowed
from spec.history import is_machine_operation, parse_object, validate_history
from spec.types import LedgerInfo, Position

P0 = partition_name("topic", 0)
P = Position


@pytest.fixture(params=["memory", "file"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    if request.param == "memory":
        yield Cluster.start(seed=11)
    else:
        yield Cluster.start(seed=11, ledger="file", data_dir=str(tmp_path))


def _receive_all(consumer: Consumer, *, ack: bool = True) -> list[Message]:
    out = []
    while (message := consumer.receive(50)) is not None:
        out.append(message)
        if ack:
            consumer.acknowledge(message)
    return out


def _sub(cluster: Cluster, name: str = "sub") -> SubscriptionService:
    sub = cluster.broker.subscription(P0, name)
    assert sub is not None and sub.ready
    return sub


def _done(future: Future[None]) -> None:
    assert future.done and future.error is None, future.error


def _subscriptions_check(cluster: Cluster) -> None:
    """Every recorded subscription (seeks included) is linearizable against the pending-ack machine."""
    ops = cluster.history(machines=True)
    validate_history(ops)
    mine = [op for op in ops if is_machine_operation(op) and parse_object(op.object)[0] == "subscription"]
    assert any(op.f == "reset_cursor" for op in mine)
    result = check_history(model_by_name("pending_ack"), mine)
    assert result.verdict is Verdict.OK, [o.reason for o in result.objects if o.verdict is not Verdict.OK]


def test_pa22_a_seek_back_redelivers_from_the_position_and_is_durable(cluster: Cluster) -> None:
    client = cluster.client()
    producer = client.create_producer("topic")
    sent = [producer.send(f"m{i}") for i in range(6)]
    consumer = client.subscribe("topic", "sub", consumer_type=ConsumerType.Shared)
    assert [m.data() for m in _receive_all(consumer)] == [f"m{i}".encode() for i in range(6)]
    sub = _sub(cluster)
    _done(sub.seek(sent[2]))
    assert sub.cursor is not None and sub.cursor.mark_delete_position == sent[1]
    assert sub.cursor.individually_deleted() == ()
    # The broker delivers from the position itself (a client may drop it: its own start filter).
    again = _receive_all(consumer, ack=False)
    assert [m.data() for m in again] == [f"m{i}".encode() for i in range(2, 6)]
    # Acked before the seek: counted afresh (Pulsar's redelivery tracker forgets acked positions).
    assert [m.redelivery_count for m in again] == [0, 0, 0, 0]
    # The reset is durable: after a broker restart the subscription restarts at the same place.
    cluster.broker.crash()
    cluster.broker.restart()
    assert [m.data() for m in _receive_all(consumer)] == [f"m{i}".encode() for i in range(2, 6)]
    _subscriptions_check(cluster)


def test_pa22_a_seek_forward_and_to_the_ends(cluster: Cluster) -> None:
    client = cluster.client()
    producer = client.create_producer("topic")
    sent = [producer.send(f"m{i}") for i in range(5)]
    consumer = client.subscribe("topic", "sub")
    sub = _sub(cluster)
    _done(sub.seek(sent[3]))
    assert [m.data() for m in _receive_all(consumer)] == [b"m3", b"m4"]
    _done(sub.seek(P(-1, -1)))  # MessageId.earliest
    assert len(_receive_all(consumer)) == 5
    _done(sub.seek(P((1 << 63) - 1, (1 << 63) - 1)))  # MessageId.latest
    assert _receive_all(consumer) == []
    producer.send("later")
    assert [m.data() for m in _receive_all(consumer)] == [b"later"]
    _subscriptions_check(cluster)


def test_pa22_a_seek_waits_for_a_txn_to_end_and_a_restart_does_not_ack_again(cluster: Cluster) -> None:
    client = cluster.client()
    producer = client.create_producer("topic")
    sent = [producer.send(f"m{i}") for i in range(4)]
    consumer = client.subscribe("topic", "sub", consumer_type=ConsumerType.Shared)
    got = _receive_all(consumer, ack=False)
    txn = client.new_transaction()
    consumer.acknowledge(got[0], txn=txn)
    consumer.acknowledge(got[1], txn=txn)
    sub = _sub(cluster)
    refused = sub.seek(sent[0])
    assert refused.done and isinstance(refused.error, BrokerError) and isinstance(refused.error.error, NotAllowed)
    txn.commit()
    for m in got[2:]:
        consumer.acknowledge(m)
    _done(sub.seek(sent[0]))
    # The committed acks' records were trimmed with the seek: a restart replays nothing that
    # would delete m0 and m1 again, so every message is delivered.
    cluster.broker.crash()
    cluster.broker.restart()
    assert sorted(m.data() for m in _receive_all(consumer)) == [b"m0", b"m1", b"m2", b"m3"]
    _subscriptions_check(cluster)


def test_pa22_a_seek_clears_the_delayed_tracker() -> None:
    cluster = Cluster.start(seed=12)
    client = cluster.client()
    producer = client.create_producer("topic")
    consumer = client.subscribe("topic", "sub", consumer_type=ConsumerType.Shared)
    at = cluster.sim.now + 60_000
    sent = [producer.send(f"d{i}", deliver_at=at) for i in range(3)]
    assert _receive_all(consumer) == []
    sub = _sub(cluster)
    assert sub.delayed is not None
    assert dl.tracked(sub.delayed.state) == {(p.ledger_id, p.entry_id) for p in sent}
    # Forward past d0: the tracker (derived from the backlog) is cleared, and what the dispatcher
    # reads again from the new position is tracked again, once each.
    _done(sub.seek(sent[1]))
    assert _receive_all(consumer) == []
    assert dl.tracked(sub.delayed.state) == {(p.ledger_id, p.entry_id) for p in sent[1:]}
    cluster.sim.advance(61_000)
    assert sorted(m.data() for m in _receive_all(consumer)) == [b"d1", b"d2"]
    _subscriptions_check(cluster)


def test_pa23_a_seek_by_publish_time(cluster: Cluster) -> None:
    client = cluster.client()
    producer = client.create_producer("topic")
    sent = []
    for i in range(6):
        sent.append(producer.send(f"m{i}"))
        cluster.sim.advance(10)
    consumer = client.subscribe("topic", "sub")
    assert len(_receive_all(consumer)) == 6
    sub = _sub(cluster)
    times = [sub.partition.messages[p].publish_time for p in sent]  # as written in the entries
    assert times == sorted(set(times))
    _done(sub.seek_time(times[3]))
    assert [m.data() for m in _receive_all(consumer)] == [b"m3", b"m4", b"m5"]
    _done(sub.seek_time(times[3] - 5))  # between m2 and m3
    assert [m.data() for m in _receive_all(consumer)] == [b"m3", b"m4", b"m5"]
    _done(sub.seek_time(0))
    assert len(_receive_all(consumer)) == 6
    _done(sub.seek_time(times[-1] + 1))
    assert _receive_all(consumer) == []


def test_pa24_reader_start_positions() -> None:
    ledgers = (LedgerInfo(3, 4), LedgerInfo(4, 2))
    last = P(4, 1)
    latest, earliest = InitialPosition.LATEST, InitialPosition.EARLIEST
    assert reader_start(P(3, 2), latest, ledgers, last) == P(3, 1)  # the start message is sent again
    assert reader_start(P(4, 0), latest, ledgers, last) == P(4, -1)
    assert reader_start(P(-1, -1), latest, ledgers, last) == P(3, -1)  # earliest
    assert reader_start(P(1, 5), latest, ledgers, last) == P(3, -1)  # a deleted ledger: the first live entry
    assert reader_start(None, latest, ledgers, last) == last
    assert reader_start(P((1 << 63) - 1, (1 << 63) - 1), latest, ledgers, last) == last  # latest
    assert reader_start(None, earliest, ledgers, last) == P(3, -1)
    assert reader_start(P(4, 2), latest, ledgers, last) == last  # one past the last entry


def _reader(cluster: Cluster, name: str, start: Position | None, consumer_id: int) -> SubscriptionService:
    _done(
        cluster.broker.subscribe(
            P0, name, "Exclusive", InitialPosition.LATEST, consumer_id, durable=False, start_message=start
        )
    )
    return _sub(cluster, name)


def _read(sub: SubscriptionService, consumer_id: int) -> list[bytes]:
    out = []
    while True:
        got = sub.receive(consumer_id, 10)
        cluster_sim = sub.sim
        while not got.done:
            cluster_sim.advance(1)
        message = got.result()
        if message is None:
            return out
        out.append(message.payload)
        sub.acknowledge(consumer_id, message.position, None, cumulative=True)


def test_pa24_a_readers_subscription_is_non_durable(cluster: Cluster) -> None:
    client = cluster.client()
    producer = client.create_producer("topic")
    sent = [producer.send(f"m{i}") for i in range(5)]
    durable = client.subscribe("topic", "durable")
    assert len(_receive_all(durable)) == 5
    reader = _reader(cluster, "reader-1", sent[2], 900)
    assert not reader.durable
    ledger = reader.partition.ledger
    assert ledger is not None
    assert "reader-1" not in {c.name for c in ledger.cursors()}  # holds nothing back
    assert _read(reader, 900) == [b"m2", b"m3", b"m4"]
    # Transactional acks are refused on it; normal ones move its in-memory cursor.
    txn = client.new_transaction()
    refused = reader.acknowledge(900, sent[4], txn.txn_id, cumulative=False)
    assert refused.done and isinstance(refused.error, BrokerError) and isinstance(refused.error.error, NotAllowed)
    assert reader.cursor is not None and reader.cursor.mark_delete_position == sent[4]
    # A seek keeps it across its consumer's reconnection; it restarts there.
    _done(reader.seek(sent[0]))
    reader.remove_consumer(900)
    assert cluster.broker.subscription(P0, "reader-1") is reader
    reader.add_consumer(901)
    assert _read(reader, 901) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    # It goes with its last consumer.
    reader.remove_consumer(901)
    assert cluster.broker.subscription(P0, "reader-1") is None
    # And with the broker: a restart forgets it; the durable subscription stays.
    again = _reader(cluster, "reader-2", P(-1, -1), 902)
    assert _read(again, 902)[:1] == [b"m0"]
    cluster.broker.crash()
    cluster.broker.restart()
    assert cluster.broker.subscription(P0, "reader-2") is None
    assert cluster.broker.subscription(P0, "durable") is not None
    # A durable and a non-durable subscription of one name do not mix.
    refused = cluster.broker.subscribe(P0, "durable", "Exclusive", InitialPosition.LATEST, 903, durable=False)
    assert refused.done and isinstance(refused.error, BrokerError)


def test_pa24_a_readers_subscription_goes_with_its_topic_and_on_unsubscribe(cluster: Cluster) -> None:
    client = cluster.client()
    client.create_producer("topic").send("m0")
    reader = _reader(cluster, "reader-3", P(-1, -1), 910)
    assert _read(reader, 910) == [b"m0"]
    _done(cluster.broker.unsubscribe(P0, "reader-3", 910))
    assert cluster.broker.subscription(P0, "reader-3") is None
    _reader(cluster, "reader-4", P(-1, -1), 911)
    cluster.delete_topic("topic", force=True)
    assert cluster.broker.partitions.get(P0) is None
