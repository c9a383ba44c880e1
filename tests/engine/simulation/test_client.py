"""The Pulsar-shaped client over the simulated broker, and the history it records."""

from __future__ import annotations

import json

import pytest

from engine.broker import decode_stored_message, encode_entry, partition_name
from engine.scheduler import NetworkFaults
from engine.simulation.client import Cluster, ConsumerType, OperationFailed, OperationTimeout
from reference.buffer import EntryKind, LogEntry
from spec.history import OpType, validate_history
from spec.types import ClientTxnState, Position, TxnID

P0 = partition_name("topic", 0)


def test_notebook_flow_and_history_rows() -> None:
    cluster = Cluster.start(seed=1)
    client = cluster.client()
    producer = client.create_producer("topic")
    consumer = client.subscribe("topic", "sub", consumer_type=ConsumerType.Shared)
    first = producer.send("plain")
    txn = client.new_transaction(timeout_ms=5_000)
    second = producer.send(b"in-txn", txn=txn)
    assert second > first
    got = consumer.receive(50)
    assert got is not None and got.data() == b"plain" and got.topic_name() == P0
    consumer.acknowledge(got)
    assert consumer.receive(50) is None
    txn.commit()
    assert txn.txn_state is ClientTxnState.COMMITTED
    got = consumer.receive(50)
    assert got is not None and got.data() == b"in-txn" and got.txn_id == txn.txn_id
    consumer.negative_acknowledge(got)
    again = consumer.receive(50)
    assert again is not None and again.position == got.position and again.redelivery_count == 1
    consumer.acknowledge_cumulative(again)

    ops = cluster.history()
    validate_history(ops)
    assert [op.f for op in ops] == [
        "subscribe",
        "send",
        "new_txn",
        "send",
        "receive",
        "ack",
        "receive",
        "commit",
        "receive",
        "negative_ack",
        "receive",
        "ack_cumulative",
    ]
    assert all(op.type is OpType.OK for op in ops)
    send = ops[3]
    assert send.object == f"partition:{P0}"
    assert json.loads(send.value) == {"message": "in-txn", "txn": [txn.txn_id.most_sig_bits, txn.txn_id.least_sig_bits]}
    assert json.loads(send.result or "null") == {"position": [second.ledger_id, second.entry_id]}
    receive = ops[4]
    assert receive.object == f"subscription:{P0}#sub"
    assert json.loads(receive.result or "null") == {"message": "plain", "position": [0, 0], "redelivery_count": 0}
    assert ops[6].result is None  # an empty receive has no result
    assert all(op.seed == 1 and op.completed_at is not None and op.completed_at >= op.invoked_at for op in ops)


def test_client_refusals_are_failures() -> None:
    cluster = Cluster.start(seed=2)
    client = cluster.client()
    producer = client.create_producer("topic")
    txn = client.new_transaction()
    txn.abort()
    with pytest.raises(OperationFailed) as refused:
        producer.send("late", txn=txn)
    assert refused.value.error.name == "InvalidTxnStatus"
    with pytest.raises(OperationFailed):
        txn.commit()  # TC-35: ABORTED cannot commit
    kinds = [(op.f, op.type) for op in cluster.history()]
    assert kinds[-2:] == [("send", OpType.FAIL), ("commit", OpType.FAIL)]


def test_lost_answers_are_info_and_the_process_is_replaced() -> None:
    cluster = Cluster.start(seed=3, network_faults=NetworkFaults(drop_response=1.0))
    client = cluster.client(operation_timeout_ms=1_000)
    producer = client.create_producer("topic")
    before = client.process
    with pytest.raises(OperationTimeout):
        producer.send("maybe")
    assert client.process != before  # a process that got info never invokes again
    cluster.network.faults = NetworkFaults()
    producer.send("surely")
    ops = cluster.history()
    validate_history(ops)
    assert [op.type for op in ops] == [OpType.INFO, OpType.OK]
    # The lost answer hid a send that took effect: both messages are on the partition.
    part = cluster.broker.partition(P0)
    assert [m.payload for m in part.messages.values()] == [b"maybe", b"surely"]


def test_topic_entries_are_message_metadata_frames() -> None:
    entry = LogEntry(Position(3, 4), EntryKind.TXN_DATA, TxnID(1, 2))
    decoded = decode_stored_message(entry.position, encode_entry(entry, b"body", 99))
    assert decoded.entry == entry and decoded.payload == b"body" and decoded.deliver_at == 99
    marker = LogEntry(Position(3, 5), EntryKind.TXN_ABORT, TxnID(1, 2))
    assert decode_stored_message(marker.position, encode_entry(marker)).entry == marker


def test_a_consumer_whose_subscribe_answer_was_lost_is_dropped_with_its_connection() -> None:
    cluster = Cluster.start(seed=11)
    client = cluster.client(operation_timeout_ms=1_000)
    producer = client.create_producer("topic")
    for text in ("a", "b", "c"):
        producer.send(text)
    cluster.network.faults = NetworkFaults(drop_response=1.0)
    with pytest.raises(OperationTimeout):
        client.subscribe("topic", "sub", consumer_type=ConsumerType.Shared)
    cluster.network.faults = NetworkFaults()
    sub = cluster.broker.subscription(P0, "sub")
    # The broker did attach the lost attempt's consumer (and dispatched to it); giving up on the
    # subscribe closed the connection, so it is gone and its messages are back with the dispatcher.
    assert sub is not None and sub.consumers == {}
    consumer = client.subscribe("topic", "sub", consumer_type=ConsumerType.Shared)
    got = [consumer.receive(50) for _ in range(3)]
    assert [m.data() for m in got if m is not None] == [b"a", b"b", b"c"]
    assert list(sub.consumers) == [consumer.consumer_id]
    ops = cluster.history()
    validate_history(ops)
    assert [op.type for op in ops if op.f == "subscribe"] == [OpType.INFO, OpType.OK]


def test_a_subscribe_request_arriving_after_the_client_gave_up_attaches_nothing() -> None:
    cluster = Cluster.start(seed=12)
    client = cluster.client(operation_timeout_ms=2)
    cluster.network.latency_ms = (5, 5)  # the request is still travelling when the client gives up
    with pytest.raises(OperationTimeout):
        client.subscribe("topic", "sub", consumer_type=ConsumerType.Shared)
    cluster.sim.advance(20)
    sub = cluster.broker.subscription(P0, "sub")
    assert sub is None or sub.consumers == {}


def test_a_lost_subscribe_retried_leaves_one_consumer_per_attempt_that_succeeded() -> None:
    cluster = Cluster.start(seed=13)
    client = cluster.client(operation_timeout_ms=500)
    producer = client.create_producer("topic")
    producer.send("only")
    cluster.network.faults = NetworkFaults(drop_response=1.0)
    for _ in range(3):
        with pytest.raises(OperationTimeout):
            client.subscribe("topic", "sub", consumer_type=ConsumerType.Exclusive)
    cluster.network.faults = NetworkFaults()
    consumer = client.subscribe("topic", "sub", consumer_type=ConsumerType.Exclusive)
    msg = consumer.receive(50)
    # Exclusive: had a lost attempt's consumer stayed, it would be the active one and hold the message.
    assert msg is not None and msg.data() == b"only"


def test_unsubscribe_deletes_the_subscription_and_a_new_one_starts_clean() -> None:
    """CommandUnsubscribe: refused while another consumer is connected; then the cursor and the
    pending-ack log go, and a subscription of the same name starts over at its initial position."""
    from engine.broker import partition_name
    from engine.simulation.client import Cluster, ConsumerType, OperationFailed

    cluster = Cluster.start(seed=5, topics={"in": 1})
    client = cluster.client()
    producer = client.create_producer("in")
    first = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    second = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    producer.send("m0")
    receiver = first
    msg = first.receive(100)
    if msg is None:
        receiver, msg = second, second.receive(100)
    assert msg is not None
    txn = client.new_transaction(60_000)
    receiver.acknowledge(msg, txn=txn)  # creates the pending-ack log
    txn.commit()
    part = partition_name("in", 0)
    sub = cluster.broker.subscription(part, "sub")
    assert sub is not None and cluster.broker.store.exists(sub.log_name)
    try:
        first.unsubscribe()
        raise AssertionError("unsubscribe with another consumer connected must fail")
    except OperationFailed as refused:
        assert refused.error.name == "SubscriptionBusy"
    second.close()
    first.unsubscribe()
    assert cluster.broker.subscription(part, "sub") is None
    assert not cluster.broker.store.exists(sub.log_name)
    ledger = cluster.broker.partition(part).ledger
    assert ledger is not None and "sub" not in {c.name for c in ledger.cursors()}
    ops = [op for op in cluster.history() if op.f == "unsubscribe"]
    assert [(op.type.value, op.error) for op in ops] == [("fail", "SubscriptionBusy"), ("ok", None)]
    again = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    producer.send("m1")
    got = [again.receive(100), again.receive(100)]
    # A new cursor at the client's initial position (EARLIEST): m0, acked by the deleted
    # subscription, is new to this one.
    assert [m.data() if m else None for m in got] == [b"m0", b"m1"]
