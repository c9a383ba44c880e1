"""SEEK and readers with the official ``pulsar-client`` against ``txnmodel serve``, on the memory
and the file ledger.

* ``consumer.seek(message_id)`` and ``consumer.seek(timestamp)`` on Exclusive, Shared and Failover
  subscriptions: the subscription restarts there and redelivers from there (PA-22, PA-23).
* ``create_reader`` from earliest, latest and a message id (inclusive or not), ``has_message_available``
  (GET_LAST_MESSAGE_ID), a partition of a partitioned topic, and ``reader.seek`` (PA-24).
* A reader never sees an uncommitted or aborted transactional message, nor a marker (TB-15 ..
  TB-17, through the same dispatcher as a durable subscription).
* A seek while a transaction holds a pending ack on the subscription is refused, and succeeds once
  the transaction ended (PA-22).

What the client shows after a seek by message id is the client's: the broker restarts the
subscription *at* the message, and the C++ client drops that message itself unless its start
message id is inclusive (``ConsumerImpl::isPriorEntryIndex``), so a consumer sees what follows it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from runners.serve import serve
from tests.engine.serve.conftest import CONFIG, drain, new_client, unique
from txnclient.client import WireClient

TYPES = [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Shared, pulsar.ConsumerType.Failover]
EARLIEST = pulsar.InitialPosition.Earliest


@pytest.fixture(scope="module", params=["memory", "file"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "memory":
        with serve(config=CONFIG) as address:
            yield address
        return
    data = tmp_path_factory.mktemp("seek")
    with serve(config=CONFIG, ledger="file", data=data) as address:
        yield address


@pytest.fixture
def client(served: str) -> Iterator[pulsar.Client]:
    c = new_client(served)
    try:
        yield c
    finally:
        c.close()


def _publish(client: pulsar.Client, topic: str, n: int, prefix: str = "m") -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    try:
        return [producer.send(f"{prefix}{i}".encode()) for i in range(n)]
    finally:
        producer.close()


def _payloads(messages: list[pulsar.Message]) -> list[bytes]:
    return [m.data() for m in messages]


def _read_all(reader: pulsar.Reader) -> list[bytes]:
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(5000).data())
    return out


def _m(*indexes: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in indexes]


@pytest.mark.parametrize("kind", TYPES, ids=lambda k: str(k).rsplit(".", 1)[-1])
def test_seek_by_message_id_redelivers_from_there(client: pulsar.Client, kind: pulsar.ConsumerType) -> None:
    topic = unique("seek")
    ids = _publish(client, topic, 10)
    consumer = client.subscribe(topic, "sub", consumer_type=kind, initial_position=EARLIEST)
    assert _payloads(drain(consumer)) == _m(*range(10))
    # Back over acknowledged messages: they are delivered again (PA-22), and acked again.
    consumer.seek(ids[3])
    assert sorted(_payloads(drain(consumer))) == _m(*range(4, 10))
    # Back to the start, acknowledging nothing this time: a new consumer of the subscription
    # (after a restart of this one) gets the same messages again, so the seek was durable.
    consumer.seek(pulsar.MessageId.earliest)
    assert sorted(_payloads(drain(consumer, ack=False))) == _m(*range(10))
    consumer.close()
    again = client.subscribe(topic, "sub", consumer_type=kind)
    assert sorted(_payloads(drain(again))) == _m(*range(10))
    # Forward: everything before the position counts as acknowledged.
    again.seek(ids[7])
    assert sorted(_payloads(drain(again))) == _m(8, 9)
    again.close()
    # The broker restarted the subscription *at* entry 7 and the seeking client dropped it
    # unacknowledged: a newcomer gets exactly that one.
    third = client.subscribe(topic, "sub", consumer_type=kind)
    assert _payloads(drain(third)) == _m(7)
    # To the end: nothing is left to read, and what comes later is delivered.
    third.seek(pulsar.MessageId.latest)
    assert drain(third) == []
    _publish(client, topic, 2, prefix="late")
    assert _payloads(drain(third, timeout_ms=1000)) == _m(0, 1, prefix="late")


@pytest.mark.parametrize("kind", TYPES, ids=lambda k: str(k).rsplit(".", 1)[-1])
def test_seek_by_publish_time_restarts_at_the_first_message_published_at_or_after_it(
    client: pulsar.Client, kind: pulsar.ConsumerType
) -> None:
    topic = unique("time")
    _publish(client, topic, 12)
    consumer = client.subscribe(topic, "sub", consumer_type=kind, initial_position=EARLIEST)
    got = drain(consumer)
    assert _payloads(got) == _m(*range(12))
    times = [m.publish_timestamp() for m in got]
    assert times == sorted(times)
    for pick in (7, 0, 11):
        at = times[pick]
        first = next(i for i, t in enumerate(times) if t >= at)  # PA-23
        consumer.seek(at)
        assert sorted(_payloads(drain(consumer))) == sorted(_m(*range(first, 12)))
    consumer.seek(times[-1] + 60_000)  # after everything: nothing to redeliver
    assert drain(consumer) == []
    consumer.seek(0)  # before everything: all of it
    assert len(drain(consumer)) == 12


def test_seek_redelivers_what_a_shared_subscription_held_unacknowledged(client: pulsar.Client) -> None:
    topic = unique("held")
    ids = _publish(client, topic, 8)
    first = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, initial_position=EARLIEST)
    second = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    held = drain(first, ack=False) + drain(second, ack=False)
    assert sorted(_payloads(held)) == _m(*range(8))
    second.seek(ids[5])  # every consumer of the subscription restarts from entry 5
    after = _payloads(drain(first) + drain(second))
    first.close()
    second.close()
    # Entries 0..4 count as acknowledged now.  Entry 5 went to one of the two: the seeking client
    # drops it (see the module docstring), the other shows it; dropped, it is still there for a
    # newcomer.  Either way each of 5, 6, 7 is seen once, and nothing before 5.
    newcomer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert sorted(after + _payloads(drain(newcomer))) == _m(5, 6, 7)


def test_reader_from_earliest_latest_and_a_message_id(client: pulsar.Client) -> None:
    topic = unique("reader")
    ids = _publish(client, topic, 6)
    assert _read_all(client.create_reader(topic, pulsar.MessageId.earliest)) == _m(*range(6))
    after_two = client.create_reader(topic, ids[2])
    assert _read_all(after_two) == _m(3, 4, 5)
    inclusive = client.create_reader(topic, ids[2], start_message_id_inclusive=True)
    assert _read_all(inclusive) == _m(2, 3, 4, 5)
    last_inclusive = client.create_reader(topic, ids[5], start_message_id_inclusive=True)
    assert _read_all(last_inclusive) == _m(5)
    latest = client.create_reader(topic, pulsar.MessageId.latest)
    assert not latest.has_message_available()
    _publish(client, topic, 1, prefix="new")
    assert latest.has_message_available()
    assert latest.read_next(5000).data() == b"new0"
    assert not latest.has_message_available()
    # A reader's subscription holds nothing back: a durable subscription still sees everything,
    # and two readers read independently.
    durable = client.subscribe(topic, "durable", initial_position=EARLIEST)
    assert len(drain(durable)) == 7
    assert _read_all(after_two) == [b"new0"]


def test_reader_seek_by_id_and_by_time(client: pulsar.Client) -> None:
    topic = unique("rseek")
    ids = _publish(client, topic, 6)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(5000) for _ in range(6)]
    assert _payloads(got) == _m(*range(6))
    assert not reader.has_message_available()
    reader.seek(ids[1])
    assert _read_all(reader) == _m(2, 3, 4, 5)
    at = got[4].publish_timestamp()
    first = next(i for i, m in enumerate(got) if m.publish_timestamp() >= at)
    reader.seek(at)
    assert _read_all(reader) == _m(*range(first, 6))


@pytest.mark.parametrize("ledger", ["memory", "file"])
def test_reader_of_a_partition_of_a_partitioned_topic(ledger: str, tmp_path: Path) -> None:
    config = CONFIG.with_overrides({"allowAutoTopicCreationType": "partitioned", "defaultNumPartitions": 3})
    data = tmp_path if ledger == "file" else None
    topic = unique("parts")
    with serve(config=config, ledger=ledger, data=data) as address:
        client = new_client(address)
        try:
            producer = client.create_producer(
                topic, batching_enabled=False, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
            )
            ids = [producer.send(f"p{i}".encode()) for i in range(12)]
            mine = [i for i, mid in enumerate(ids) if mid.partition() == 1]
            assert len(mine) == 4
            partition = f"persistent://public/default/{topic}-partition-1"
            whole = client.create_reader(partition, pulsar.MessageId.earliest)
            assert _read_all(whole) == [f"p{i}".encode() for i in mine]
            after_first = client.create_reader(partition, ids[mine[0]])
            assert _read_all(after_first) == [f"p{i}".encode() for i in mine[1:]]
        finally:
            client.close()


def _full(topic: str) -> str:
    return f"persistent://public/default/{topic}"


def test_a_reader_never_sees_uncommitted_or_aborted_messages_or_markers(client: pulsar.Client, served: str) -> None:
    topic = unique("rtxn")
    with WireClient(served) as wire:
        producer = wire.create_producer(_full(topic))
        committed = wire.new_transaction(timeout_ms=30_000)
        aborted = wire.new_transaction(timeout_ms=30_000)
        open_txn = wire.new_transaction(timeout_ms=30_000)
        producer.send(b"plain0")
        producer.send(b"c0", txn=committed)
        producer.send(b"a0", txn=aborted)
        producer.send(b"c1", txn=committed)
        committed.commit()
        aborted.abort()
        producer.send(b"plain1")
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert _read_all(reader) == [b"plain0", b"c0", b"c1", b"plain1"]
        producer.send(b"o0", txn=open_txn)
        producer.send(b"plain2")  # behind the open transaction: held back (TB-15)
        assert not reader.has_message_available()
        with pytest.raises(pulsar.Timeout):
            reader.read_next(500)
        open_txn.commit()
        assert [reader.read_next(5000).data() for _ in range(2)] == [b"o0", b"plain2"]
        assert not reader.has_message_available()
        # From a message id in the middle, and after a seek back: the same decisions.
        late = client.create_reader(topic, pulsar.MessageId.earliest)
        assert _read_all(late) == [b"plain0", b"c0", b"c1", b"plain1", b"o0", b"plain2"]
        late.seek(pulsar.MessageId.earliest)
        assert _read_all(late) == [b"plain0", b"c0", b"c1", b"plain1", b"o0", b"plain2"]


def test_a_seek_is_refused_while_a_transaction_holds_a_pending_ack(client: pulsar.Client, served: str) -> None:
    topic = unique("pending")
    ids = _publish(client, topic, 4)
    with WireClient(served) as wire:
        holder = wire.subscribe(_full(topic), "sub", consumer_type="Shared", initial_position="Earliest")
        messages = [holder.receive(timeout_millis=2000) for _ in range(4)]
        assert all(m is not None for m in messages)
        txn = wire.new_transaction(timeout_ms=30_000)
        first = messages[0]
        assert first is not None
        holder.acknowledge(first, txn=txn)
        seeker = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        with pytest.raises(pulsar.NotAllowedError):
            seeker.seek(ids[0])  # PA-22: the transaction must end first
        txn.commit()
        seeker.seek(pulsar.MessageId.earliest)
    # Committed before the seek, the ack is forgotten by it: every message is delivered again.
    assert sorted(_payloads(drain(seeker))) == _m(*range(4))


def test_a_seek_survives_a_restart_of_serve_over_a_file_ledger(tmp_path: Path) -> None:
    data = tmp_path
    topic = unique("restart")
    with serve(config=CONFIG, ledger="file", data=data) as address:
        client = new_client(address)
        ids = _publish(client, topic, 6)
        consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
        assert len(drain(consumer)) == 6
        consumer.seek(ids[2])
        client.close()  # nothing received since the seek: the subscription restarts at entry 2
    with serve(config=CONFIG, ledger="file", data=data) as address:
        client = new_client(address)
        consumer = client.subscribe(topic, "sub")
        assert _payloads(drain(consumer)) == _m(2, 3, 4, 5)
        client.close()


def test_a_partitioned_consumer_seeks_every_partition_by_time() -> None:
    config = CONFIG.with_overrides({"allowAutoTopicCreationType": "partitioned", "defaultNumPartitions": 3})
    topic = unique("pseek")
    with serve(config=config) as address:
        client = new_client(address)
        try:
            producer = client.create_producer(
                topic, batching_enabled=False, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
            )
            for i in range(9):
                producer.send(f"m{i}".encode())
            consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
            got = drain(consumer)
            assert sorted(_payloads(got)) == sorted(_m(*range(9)))
            at = sorted(m.publish_timestamp() for m in got)[4]
            consumer.seek(at)
            expected = sorted(m.data() for m in got if m.publish_timestamp() >= at)
            assert sorted(_payloads(drain(consumer, timeout_ms=1000))) == expected
        finally:
            client.close()


def test_an_inclusive_reader_from_latest_reads_the_last_message(client: pulsar.Client) -> None:
    # has_message_available asks GET_LAST_MESSAGE_ID and seeks to it (ConsumerImpl::
    # hasMessageAvailableAsync: startMessageIdInclusive with MessageId.latest), then compares the
    # last message id with the mark-delete position the broker answers with.
    topic = unique("lastincl")
    _publish(client, topic, 3)
    reader = client.create_reader(topic, pulsar.MessageId.latest, start_message_id_inclusive=True)
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"m2"
    assert not reader.has_message_available()


def test_a_session_with_seeks_and_readers_verifies(tmp_path: Path) -> None:
    """The machine steps of seeks (``reset_cursor``) and of readers' subscriptions are recorded;
    ``txnmodel verify`` finds each machine object linearizable."""
    from runners.serve import finish, start
    from txnmodel.cli import main

    history = tmp_path / "history"
    handle = start(config=CONFIG, history=history, seed=12)
    try:
        client = new_client(handle.url)
        topic = unique("hist")
        ids = _publish(client, topic, 5)
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, initial_position=EARLIEST)
        drain(consumer)
        consumer.seek(ids[1])
        drain(consumer)
        consumer.seek(0)
        drain(consumer)
        reader = client.create_reader(topic, ids[0])
        assert len(_read_all(reader)) == 4
        reader.seek(pulsar.MessageId.earliest)
        assert len(_read_all(reader)) == 5
        client.close()
    finally:
        handle.stop()
        finish(handle)
    assert main(["verify", str(history), "--out", str(tmp_path / "verdicts")]) == 0
