"""Batch messages end to end: one entry, several messages, batch-index acks (PIP-54) and txns."""

from __future__ import annotations

import json

import pytest

from engine.broker import (
    BatchedMessage,
    decode_batch_payload,
    decode_stored_message,
    encode_batch_payload,
    partition_name,
)
from engine.scheduler import Future
from engine.simulation.client import (
    BatchMessageId,
    Client,
    Cluster,
    Consumer,
    ConsumerType,
    Message,
    OperationFailed,
    OperationTimeout,
    Producer,
)
from spec.history import validate_history
from spec.types import Position

P0 = partition_name("topic", 0)


def _batch(cluster: Cluster, producer: Producer, texts: list[str], **kwargs: object) -> list[BatchMessageId]:
    """Send ``texts`` through handles of ``producer`` on fresh clients (one process each), so they
    meet in one batch, and wait for all of them."""
    handles = [producer.share(cluster.client()) for _ in texts]
    futures: list[Future[Position]] = [h.send_async(t, **kwargs) for h, t in zip(handles, texts, strict=True)]  # type: ignore[arg-type]
    cluster.sim.run_until(lambda: all(f.done for f in futures))
    out = [f.result() for f in futures]
    assert all(isinstance(m, BatchMessageId) for m in out)
    return out  # type: ignore[return-value]


def _receive_all(consumer: Consumer, limit: int = 20) -> list[Message]:
    got = []
    for _ in range(limit):
        msg = consumer.receive(30)
        if msg is None:
            break
        got.append(msg)
    return got


def _setup(
    seed: int, consumer_type: ConsumerType = ConsumerType.Exclusive, max_messages: int = 3
) -> tuple[Cluster, Client, Consumer, Producer]:
    cluster = Cluster.start(seed=seed)
    client = cluster.client()
    consumer = client.subscribe("topic", "sub", consumer_type=consumer_type)
    producer = client.create_producer(
        "topic", batching_enabled=True, batching_max_messages=max_messages, batching_max_publish_delay_ms=10
    )
    return cluster, client, consumer, producer


def test_batch_payload_round_trips() -> None:
    messages = (BatchedMessage(b"a", "k1"), BatchedMessage(b"", None), BatchedMessage(b"ccc" * 50, "k3"))
    assert decode_batch_payload(encode_batch_payload(messages), 3) == messages
    with pytest.raises(ValueError, match="bytes after"):
        decode_batch_payload(encode_batch_payload(messages) + b"x", 3)


def test_a_full_batch_is_one_entry_and_each_send_gets_its_batch_index() -> None:
    cluster, _, _, producer = _setup(1)
    ids = _batch(cluster, producer, ["m0", "m1", "m2"])
    entry = ids[0].position
    assert ids == [BatchMessageId.of(entry, i, 3) for i in range(3)]
    part = cluster.broker.partition(P0)
    assert part.ledger is not None
    stored = decode_stored_message(entry, part.ledger.read_entry(entry))
    assert stored.batch is not None and [m.payload for m in stored.batch] == [b"m0", b"m1", b"m2"]
    ops = [op for op in cluster.history() if op.f == "send"]
    assert [json.loads(op.result or "null") for op in ops] == [
        {"position": [entry.ledger_id, entry.entry_id], "batch_index": i, "batch_size": 3} for i in range(3)
    ]


def test_a_partial_batch_is_sent_after_the_publish_delay() -> None:
    cluster, _, _, producer = _setup(2, max_messages=100)
    ids = _batch(cluster, producer, ["a", "b"])
    assert [m.batch_size for m in ids] == [2, 2] and ids[0].position == ids[1].position


def test_a_delayed_message_is_not_batched_and_flushes_the_open_batch_first() -> None:
    cluster, _, _, producer = _setup(3, max_messages=100)
    handle = producer.share(cluster.client())
    first = handle.send_async("batched")
    plain = producer.send("delayed", deliver_at=cluster.sim.now + 1)
    cluster.sim.run_until(lambda: first.done)
    got = first.result()
    assert isinstance(got, BatchMessageId) and isinstance(plain, Position)
    assert got.position < plain


def test_consumers_get_each_message_with_its_index_and_ack_one_index() -> None:
    cluster, _, consumer, producer = _setup(4)
    ids = _batch(cluster, producer, ["m0", "m1", "m2"])
    got = _receive_all(consumer)
    assert [(m.data(), m.message_id()) for m in got] == [
        (t.encode(), i) for t, i in zip(["m0", "m1", "m2"], ids, strict=True)
    ]
    consumer.acknowledge(got[1])
    sub = cluster.broker.subscription(P0, "sub")
    assert sub is not None and sub.cursor is not None
    entry = ids[0].position
    assert not sub.cursor.is_deleted(entry)
    assert sub.cursor.batch_ack_set(entry) == (0b101,)  # index 1 acked: its bit cleared
    consumer.redeliver_unacknowledged_messages()
    again = _receive_all(consumer)
    assert [(m.data(), m.batch_index, m.redelivery_count) for m in again] == [(b"m0", 0, 1), (b"m2", 2, 1)]
    for m in again:
        consumer.acknowledge(m)
    assert sub.cursor.is_deleted(entry)
    ops = cluster.history()
    validate_history(ops)
    ack = next(op for op in ops if op.f == "ack")
    assert json.loads(ack.value) == {"position": [entry.ledger_id, entry.entry_id], "batch_index": 1}
    receive = next(op for op in ops if op.f == "receive")
    assert json.loads(receive.result or "null")["batch_index"] == 0


def test_cumulative_ack_of_a_batch_index_covers_the_indexes_before_it() -> None:
    cluster, _, consumer, producer = _setup(5)
    ids = _batch(cluster, producer, ["m0", "m1", "m2"])
    got = _receive_all(consumer)
    consumer.acknowledge_cumulative(got[1])
    sub = cluster.broker.subscription(P0, "sub")
    assert sub is not None and sub.cursor is not None
    assert sub.cursor.mark_delete_position < ids[0].position
    assert sub.cursor.batch_ack_set(ids[0].position) == (0b100,)
    consumer.redeliver_unacknowledged_messages()
    assert [m.data() for m in _receive_all(consumer)] == [b"m2"]


def test_txn_batch_is_invisible_until_commit_and_gone_after_abort() -> None:
    cluster, client, consumer, producer = _setup(6)
    txn = client.new_transaction(60_000)
    _batch(cluster, producer, ["t0", "t1"], txn=txn)
    assert consumer.receive(30) is None
    txn.commit()
    assert [m.data() for m in _receive_all(consumer)] == [b"t0", b"t1"]
    aborted = client.new_transaction(60_000)
    _batch(cluster, producer, ["x0", "x1"], txn=aborted)
    aborted.abort()
    assert _receive_all(consumer) == []


def test_a_send_of_another_txn_closes_the_open_batch() -> None:
    cluster, client, _, producer = _setup(7, max_messages=100)
    txn = client.new_transaction(60_000)
    first = producer.share(cluster.client()).send_async("plain")
    second = producer.share(cluster.client()).send_async("in-txn", txn=txn)
    cluster.sim.run_until(lambda: first.done and second.done)
    a, b = first.result(), second.result()
    assert isinstance(a, BatchMessageId) and isinstance(b, BatchMessageId)
    assert a.position < b.position and a.batch_size == b.batch_size == 1


def test_txn_acks_of_different_indexes_commit_and_abort_independently() -> None:
    """Fact sheet 5.3.7 (testPendingAckBatchMessageCommit): txn1 acks index 0, txn2 index 1 of one
    batch; commit txn1, abort txn2; index 1 comes back and txn3 may ack it; index 0 conflicts (5.3.8)."""
    cluster, client, consumer, producer = _setup(8, ConsumerType.Shared, max_messages=5)
    ids = _batch(cluster, producer, [f"m{i}" for i in range(5)])
    got = _receive_all(consumer)
    assert len(got) == 5
    t1, t2 = client.new_transaction(60_000), client.new_transaction(60_000)
    consumer.acknowledge(got[0], txn=t1)
    consumer.acknowledge(got[1], txn=t2)
    t1.commit()
    t2.abort()
    sub = cluster.broker.subscription(P0, "sub")
    assert sub is not None and sub.cursor is not None
    assert sub.cursor.batch_ack_set(ids[0].position) == (0b11110,)
    # The abort redelivers the entry; what the consumer gets is what is neither acknowledged nor
    # pending: index 1 again, and the indexes it had not acked yet (Pulsar resends the entry with
    # its ack set, 5.9), never index 0.
    again = _receive_all(consumer)
    assert [m.batch_index for m in again] == [1, 2, 3, 4]
    t3 = client.new_transaction(60_000)
    consumer.acknowledge(again[0], txn=t3)
    with pytest.raises(OperationFailed) as conflict:
        consumer.acknowledge(got[0], txn=t3)
    assert conflict.value.error.name == "TransactionConflict"
    t3.abort()


def test_batch_acks_survive_a_broker_restart() -> None:
    cluster, _, consumer, producer = _setup(9)
    _batch(cluster, producer, ["m0", "m1", "m2"])
    got = _receive_all(consumer)
    consumer.acknowledge(got[0])
    consumer.acknowledge(got[2])
    cluster.broker.crash()
    cluster.broker.restart()
    assert [(m.data(), m.batch_index) for m in _receive_all(consumer)] == [(b"m1", 1)]


def test_key_shared_routes_a_batch_by_its_key() -> None:
    cluster, client, consumer, producer = _setup(10, ConsumerType.KeyShared)
    consumers = [consumer] + [client.subscribe("topic", "sub", consumer_type=ConsumerType.KeyShared) for _ in range(2)]
    _batch(cluster, producer, ["a", "b", "c"], partition_key="k")
    got = {c.consumer_id: [m.data() for m in _receive_all(c)] for c in consumers}
    assert sorted(got.values()) == [[], [], [b"a", b"b", b"c"]]


def test_a_lost_batch_request_does_not_hold_back_the_next_one() -> None:
    """A batching producer sends one request at a time; one that is never answered (the broker is
    down) fails by the client's operation timeout, and the next batch goes out after it."""
    cluster = Cluster.start(seed=2, topics={"in": 1})
    client = cluster.client(operation_timeout_ms=1_000)
    producer = client.create_producer("in", batching_enabled=True, batching_max_messages=1)
    cluster.broker.crash()
    lost = producer.send_async("lost")
    cluster.sim.advance(10)
    cluster.broker.restart()
    later = producer.share(cluster.client(operation_timeout_ms=1_000)).send_async("later")
    cluster.sim.run_until(lambda: lost.done and later.done)
    assert isinstance(lost.error, OperationTimeout)
    assert later.error is None and cluster.sim.now >= 1_000
    consumer = cluster.client().subscribe("in", "sub")
    got = consumer.receive(100)
    assert got is not None and got.data() == b"later"
