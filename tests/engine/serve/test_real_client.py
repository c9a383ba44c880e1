"""The official ``pulsar-client`` (C++ core) against ``txnmodel serve``: produce and consume.

Each behaviour a client relies on is checked end to end on a real socket: every subscription type,
batching producers, Key_Shared per-key order, individual and cumulative acks, negative acks and
redelivery, delayed delivery never early, partitioned topics, and ``get_last_message_id``.
"""

from __future__ import annotations

import datetime
import functools
import operator
import time

import pulsar
import pytest

from runners.serve import serve
from tests.engine.serve.conftest import CONFIG, drain, new_client, unique

TYPES = [
    pulsar.ConsumerType.Exclusive,
    pulsar.ConsumerType.Shared,
    pulsar.ConsumerType.Failover,
    pulsar.ConsumerType.KeyShared,
]


@pytest.mark.parametrize("kind", TYPES, ids=lambda k: str(k).rsplit(".", 1)[-1])
def test_produce_then_consume_on_each_subscription_type(client: pulsar.Client, kind: pulsar.ConsumerType) -> None:
    topic = unique()
    producer = client.create_producer(topic)
    sent = [producer.send(f"m{i}".encode()) for i in range(20)]
    assert len({str(m) for m in sent}) == 20
    consumer = client.subscribe(topic, "sub", consumer_type=kind, initial_position=pulsar.InitialPosition.Earliest)
    got = drain(consumer)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(20)]
    assert [str(m.message_id()) for m in got] == [str(m) for m in sent]
    assert all(m.topic_name() == f"persistent://public/default/{topic}" for m in got)


def test_messages_sent_after_subscribing_are_pushed(client: pulsar.Client) -> None:
    topic = unique()
    consumer = client.subscribe(topic, "sub")  # Latest: only what comes after
    producer = client.create_producer(topic)
    producer.send(b"first")
    assert consumer.receive(timeout_millis=3000).data() == b"first"


def test_properties_keys_and_event_time_travel(client: pulsar.Client) -> None:
    topic = unique()
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, producer_name="orders-writer")
    producer.send(b"x", partition_key="k1", event_timestamp=1234, properties={"trace": "t-1", "n": "2"})
    message = consumer.receive(timeout_millis=3000)
    # The entry is the message as the producer sent it: every metadata field comes back.
    assert message.partition_key() == "k1"
    assert message.event_timestamp() == 1234
    assert message.properties() == {"trace": "t-1", "n": "2"}
    assert message.publish_timestamp() > 0


def test_batching_producer(client: pulsar.Client) -> None:
    topic = unique()
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    ids = []
    for i in range(30):
        producer.send_async(f"b{i}".encode(), lambda res, mid: ids.append((res, mid)), properties={"i": str(i)})
    producer.flush()
    assert len(ids) == 30 and all(res == pulsar.Result.Ok for res, _ in ids)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    got = drain(consumer)
    assert [m.data() for m in got] == [f"b{i}".encode() for i in range(30)]
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(30)]  # SingleMessageMetadata kept
    assert any(m.message_id().batch_index() > 0 for m in got)  # batches, not one entry per message


def test_key_shared_keeps_each_keys_order(client: pulsar.Client) -> None:
    topic = unique()
    consumers = [client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared) for _ in range(2)]
    producer = client.create_producer(topic)
    for i in range(40):
        producer.send(f"{i}".encode(), partition_key=f"key{i % 5}")
    seen: dict[str, list[int]] = {}
    owner: dict[str, int] = {}
    for n, consumer in enumerate(consumers):
        for message in drain(consumer):
            key = message.partition_key()
            seen.setdefault(key, []).append(int(message.data()))
            assert owner.setdefault(key, n) == n  # one consumer per key
    assert sorted(functools.reduce(operator.iadd, seen.values(), [])) == list(range(40))
    for numbers in seen.values():
        assert numbers == sorted(numbers)
    assert len(set(owner.values())) == 2


def test_individual_acks_are_not_redelivered(client: pulsar.Client) -> None:
    topic = unique()
    producer = client.create_producer(topic)
    for i in range(6):
        producer.send(f"m{i}".encode())
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    received = drain(consumer, ack=False)
    for message in received[::2]:
        consumer.acknowledge(message)
    consumer.close()
    again = client.subscribe(topic, "sub")
    assert [m.data() for m in drain(again)] == [b"m1", b"m3", b"m5"]


def test_cumulative_ack(client: pulsar.Client) -> None:
    topic = unique()
    producer = client.create_producer(topic)
    for i in range(6):
        producer.send(f"m{i}".encode())
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    received = drain(consumer, ack=False)
    consumer.acknowledge_cumulative(received[3])
    consumer.close()
    again = client.subscribe(topic, "sub")
    assert [m.data() for m in drain(again)] == [b"m4", b"m5"]


def test_negative_ack_redelivers_with_a_count(client: pulsar.Client) -> None:
    topic = unique()
    consumer = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100
    )
    producer = client.create_producer(topic)
    producer.send(b"x")
    first = consumer.receive(timeout_millis=3000)
    assert first.redelivery_count() == 0
    consumer.negative_acknowledge(first)
    again = consumer.receive(timeout_millis=3000)
    assert again.data() == b"x" and again.redelivery_count() == 1
    consumer.acknowledge(again)


def test_ack_timeout_redelivers(client: pulsar.Client) -> None:
    # The C++ client refuses an ack timeout under 10 s, so this test takes that long.
    topic = unique()
    consumer = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, unacked_messages_timeout_ms=10_000
    )
    producer = client.create_producer(topic)
    producer.send(b"x")
    consumer.receive(timeout_millis=3000)
    again = consumer.receive(timeout_millis=15_000)
    assert again.data() == b"x" and again.redelivery_count() == 1


def test_redeliver_unacknowledged(client: pulsar.Client) -> None:
    topic = unique()
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    assert [m.data() for m in drain(consumer, ack=False)] == [b"m0", b"m1", b"m2"]
    consumer.redeliver_unacknowledged_messages()
    assert [m.data() for m in drain(consumer)] == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("how", ["deliver_after", "deliver_at"])
def test_delayed_delivery_is_never_early(client: pulsar.Client, how: str) -> None:
    topic = unique()
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    producer.send(b"now")
    due: dict[bytes, float] = {}
    for delay in (300, 150, 450):
        name = f"d{delay}".encode()
        due[name] = time.time() + delay / 1000
        if how == "deliver_after":
            producer.send(name, deliver_after=datetime.timedelta(milliseconds=delay))
        else:
            producer.send(name, deliver_at=int(due[name] * 1000))
    order = []
    for _ in range(4):
        message = consumer.receive(timeout_millis=3000)
        arrived = time.time()
        consumer.acknowledge(message)
        order.append(message.data())
        if message.data() in due:
            assert arrived >= due[message.data()] - 0.005, (
                f"{message.data()!r} early by {due[message.data()] - arrived}"
            )
    assert order == [b"now", b"d150", b"d300", b"d450"]


def test_delayed_delivery_through_the_bucket_tracker() -> None:
    from engine.delayed.service import BUCKET_FACTORY

    config = CONFIG.with_overrides({"delayedDeliveryTrackerFactoryClassName": BUCKET_FACTORY})
    with serve(config=config) as url:
        client = new_client(url)
        try:
            topic = unique()
            consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
            producer = client.create_producer(topic)
            due = {}
            for i in range(5):
                due[f"d{i}".encode()] = time.time() + (200 + 20 * i) / 1000
                producer.send(f"d{i}".encode(), deliver_after=datetime.timedelta(milliseconds=200 + 20 * i))
            got = []
            for _ in range(5):
                message = consumer.receive(timeout_millis=3000)
                assert time.time() >= due[message.data()] - 0.005, f"{message.data()!r} delivered early"
                consumer.acknowledge(message)
                got.append(message.data())
            assert sorted(got) == [f"d{i}".encode() for i in range(5)]
        finally:
            client.close()


def test_partitioned_topic_auto_created() -> None:
    config = CONFIG.with_overrides({"allowAutoTopicCreationType": "partitioned", "defaultNumPartitions": 3})
    with serve(config=config) as url:
        client = new_client(url)
        try:
            topic = unique()
            assert client.get_topic_partitions(topic) == [
                f"persistent://public/default/{topic}-partition-{i}" for i in range(3)
            ]
            producer = client.create_producer(topic)
            ids = [producer.send(f"m{i}".encode()) for i in range(12)]
            assert {m.partition() for m in ids} == {0, 1, 2}
            consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
            assert sorted(m.data() for m in drain(consumer)) == sorted(f"m{i}".encode() for i in range(12))
        finally:
            client.close()


def test_auto_creation_off_refuses_unknown_topics() -> None:
    with serve(config=CONFIG.with_overrides({"allowAutoTopicCreation": False})) as url:
        client = new_client(url)
        try:
            with pytest.raises(pulsar.TopicNotFound):
                client.create_producer(unique())
        finally:
            client.close()


def test_get_last_message_id(client: pulsar.Client) -> None:
    topic = unique()
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    sent = [producer.send(f"m{i}".encode()) for i in range(3)]
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (sent[-1].ledger_id(), sent[-1].entry_id())


def test_exclusive_subscription_refuses_a_second_consumer(client: pulsar.Client) -> None:
    topic = unique()
    client.subscribe(topic, "sub")
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub")


def test_unsubscribe_deletes_the_subscription(client: pulsar.Client) -> None:
    topic = unique()
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"a")
    consumer.unsubscribe()
    fresh = client.subscribe(topic, "sub")  # Latest again: the old cursor is gone
    producer.send(b"b")
    assert [m.data() for m in drain(fresh)] == [b"b"]


def test_restart_over_a_file_ledger_loses_nothing_acknowledged() -> None:
    import tempfile

    data = tempfile.mkdtemp(prefix="serve-restart-")
    topic = unique()
    acked: list[int] = []

    def sent(i: int) -> object:
        return lambda res, _mid: acked.append(i) if res == pulsar.Result.Ok else None

    with serve(config=CONFIG, ledger="file", data=data) as url:
        client = new_client(url)
        plain = client.create_producer(topic)
        batching = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=2)
        for i in range(20):
            plain.send_async(f"m{i}".encode(), sent(i))
        plain.flush()
        for i in range(20, 40):
            batching.send_async(f"m{i}".encode(), sent(i))
        batching.flush()
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        for message in [consumer.receive(timeout_millis=3000) for _ in range(10)]:
            consumer.acknowledge(message)
        client.close()
    assert sorted(acked) == list(range(40))
    with serve(config=CONFIG, ledger="file", data=data) as url:
        client = new_client(url)
        consumer = client.subscribe(topic, "sub")
        rest = [m.data() for m in drain(consumer, timeout_ms=500)]
        client.close()
    # Every acknowledged send is there; nothing the consumer acknowledged comes back.
    assert rest == [f"m{i}".encode() for i in range(10, 40)]
