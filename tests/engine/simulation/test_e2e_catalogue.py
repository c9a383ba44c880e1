"""End-to-end tests of the fact sheet's catalogue scenarios that need more than one machine.

Each test drives the simulated broker through the Pulsar-shaped client, exactly as a user would,
and checks what the client observed (and, where the scenario says so, the broker's durable state:
cursor positions, coordinator status).  Scenario ids are those of
``pulsar-txn-semantics.md`` section 7.6; rule ids name the rules the scenario exercises.
More scenarios are in ``test_e2e_catalogue_txn.py`` and ``test_e2e_catalogue_pip.py``;
``docs/engine/catalogue.md`` maps every scenario of the fact sheets to its test or vector.
"""

from __future__ import annotations

import pytest

from engine.broker import Broker, partition_name
from engine.simulated.faults import FaultyLedger
from engine.simulation.client import Cluster, ConsumerType, OperationFailed, OperationTimeout
from invariants.transactional import check_transactional
from reference import buffer as tb
from spec.config import Config
from spec.types import ClientTxnState, Position

IN, OUT = partition_name("in", 0), partition_name("out", 0)


def _cluster(**kwargs: object) -> Cluster:
    config = Config().with_overrides(
        {"isDelayedDeliveryDeliverAtTimeStrict": True, "delayedDeliveryTickTimeMillis": 10}
    )
    return Cluster.start(seed=7, topics={"in": 1, "out": 1}, config=config, **kwargs)  # type: ignore[arg-type]


def _drain(consumer: object, limit: int = 50) -> list[str]:
    got = []
    for _ in range(limit):
        msg = consumer.receive(50)  # type: ignore[attr-defined]
        if msg is None:
            break
        got.append(msg.data().decode())
        consumer.acknowledge(msg)  # type: ignore[attr-defined]
    return got


def _clean(cluster: Cluster) -> None:
    verdict = check_transactional(cluster.history())
    assert verdict.ok, [str(a) for a in verdict.anomalies]


def test_consume_transform_produce_commit_and_abort() -> None:
    """PIP-31's motivation: receive, produce the result and ack the input in one txn (TC-13, TB-11, PA-12)."""
    cluster = _cluster()
    client = cluster.client()
    client.create_producer("in").send("a")
    source = client.subscribe("in", "ctp", consumer_type=ConsumerType.Shared)
    sink = client.subscribe("out", "verify")
    out = client.create_producer("out")

    txn = client.new_transaction(10_000)
    msg = source.receive(100)
    assert msg is not None and msg.data() == b"a"
    out.send("A1", txn=txn)
    source.acknowledge(msg, txn=txn)
    assert sink.receive(50) is None  # S20: nothing of an open txn is dispatched (TB-7)
    txn.abort()
    assert sink.receive(50) is None  # S21: aborted output never delivered (TB-16)
    again = source.receive(100)  # PA-13: the aborted ack returns the input to PENDING
    assert again is not None and again.data() == b"a" and again.redelivery_count == 1

    txn = client.new_transaction(10_000)
    out.send("A2", txn=txn)
    source.acknowledge(again, txn=txn)
    txn.commit()
    assert _drain(sink) == ["A2"]
    assert source.receive(50) is None
    sub = cluster.broker.subscription(IN, "ctp")
    assert sub is not None and sub.cursor is not None and sub.cursor.is_deleted(again.position)
    _clean(cluster)


def test_s27_marker_auto_acknowledgement() -> None:
    """S27: markers and aborted messages are acked by the dispatcher, so mark-delete passes them (TB-17)."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub")
    sub = cluster.broker.subscription(IN, "sub")
    assert sub is not None and sub.cursor is not None
    t1, t2 = client.new_transaction(60_000), client.new_transaction(60_000)
    e0 = producer.send("e0", txn=t1)
    e1 = producer.send("e1", txn=t2)
    t1.commit()  # e2
    msg = consumer.receive(100)
    assert msg is not None and msg.position == e0
    consumer.acknowledge(msg)
    assert sub.cursor.mark_delete_position == e0
    t3 = client.new_transaction(60_000)
    e3 = producer.send("e3", txn=t3)
    t2.commit()  # e4
    msg = consumer.receive(100)
    assert msg is not None and msg.position == e1
    consumer.acknowledge(msg)
    assert sub.cursor.mark_delete_position == Position(e0.ledger_id, e0.entry_id + 2)  # e2, the marker
    t4 = client.new_transaction(60_000)
    producer.send("e5", txn=t4)
    t3.commit()  # e6
    msg = consumer.receive(100)
    assert msg is not None and msg.position == e3
    consumer.acknowledge(msg)
    assert sub.cursor.mark_delete_position == Position(e0.ledger_id, e0.entry_id + 4)  # e4
    t4.abort()  # e7
    assert consumer.receive(100) is None
    assert sub.cursor.mark_delete_position == Position(e0.ledger_id, e0.entry_id + 7)  # e7
    _clean(cluster)


def test_s22_interleaved_commits_and_reload() -> None:
    """S22 + TB-24: T1 (m2), T2 (m3), normal m4; T2 commits first; the broker restarts; T1 commits.
    Delivery stays in log order and nothing is delivered before T1 ends."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    producer.send("m0")
    producer.send("m1")
    t1, t2 = client.new_transaction(60_000), client.new_transaction(60_000)
    producer.send("m2", txn=t1)
    producer.send("m3", txn=t2)
    producer.send("m4")
    t2.commit()
    part = cluster.broker.partition(IN)
    assert part.state is not None
    assert part.state.max_read_position == Position(0, 1)  # previous(m2): T1 still ongoing (TB-7)
    cluster.broker.crash()
    cluster.broker.restart()
    assert part.state is not None and part.state.status is tb.BufferStatus.READY
    assert part.state.max_read_position == Position(0, 1)  # recovered from snapshot + replay (TB-24)
    consumer = client.subscribe("in", "sub")
    assert _drain(consumer) == ["m0", "m1"]
    t1.commit()
    assert _drain(consumer) == ["m2", "m3", "m4"]
    _clean(cluster)


def test_end_retried_until_participant_returns_and_coordinator_reload_redrives() -> None:
    """S13 + S16: a participant that is down makes the end retry (TC-16); the coordinator crashes
    while COMMITTING and its replay re-drives the commit (TC-24); the client's commit completes."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("out")
    txn = client.new_transaction(60_000)
    producer.send("x", txn=txn)
    broker: Broker = cluster.broker
    broker.partition(OUT).crash()  # the participant is down: ServiceUnitNotReady, retryable
    commit = txn.commit_async()
    cluster.sim.advance(1_500)
    assert not commit.done
    status = broker.coordinator.state.txns[txn.txn_id.least_sig_bits].status  # type: ignore[union-attr]
    assert status.name == "COMMITTING"
    broker.coordinator.crash()  # the waiting END_TXN is lost with the coordinator's memory
    assert broker.coordinator.load()
    assert broker.partition(OUT).load()
    cluster.sim.advance(2_000)
    assert broker.coordinator.state is not None and txn.txn_id.least_sig_bits not in broker.coordinator.state.txns
    consumer = cluster.client().subscribe("out", "sub")
    assert _drain(consumer) == ["x"]
    # The END_TXN died with the coordinator's memory: the client learns nothing and records `info`.
    cluster.sim.advance(30_000)
    assert commit.done and isinstance(commit.error, OperationTimeout)
    assert [op.type.value for op in cluster.history() if op.f == "commit"] == ["info"]
    _clean(cluster)


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_s39_acks_in_a_txn_and_redelivery(end: str) -> None:
    """S39: acked in T then redeliverUnacknowledged -> nothing; abort -> all again; commit -> never (PA-12, PA-13)."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    for i in range(4):
        producer.send(f"m{i}")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    txn = client.new_transaction(60_000)
    received = [consumer.receive(100) for _ in range(4)]
    for msg in received:
        assert msg is not None
        consumer.acknowledge(msg, txn=txn)
    consumer.redeliver_unacknowledged_messages()
    assert consumer.receive(50) is None
    other = client.new_transaction(60_000)
    with pytest.raises(OperationFailed) as conflict:  # S33: another txn may not ack a PENDING_ACK message
        consumer.acknowledge(received[0], txn=other)  # type: ignore[arg-type]
    assert conflict.value.error.name == "TransactionConflict"
    if end == "abort":
        txn.abort()
        assert sorted(_drain(consumer)) == ["m0", "m1", "m2", "m3"]
    else:
        txn.commit()
        consumer.redeliver_unacknowledged_messages()
        assert consumer.receive(50) is None
    _clean(cluster)


def test_low_watermark_rejects_a_late_send() -> None:
    """S25 (TB-5, TB-13): after the coordinator's low watermark passed a txn, a send of it that arrives
    late at the partition is refused with NotAllowed."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    early = client.new_transaction(60_000)
    producer.send("e", txn=early)
    early.commit()
    late = client.new_transaction(60_000)
    producer.send("l", txn=late)
    late.commit()  # carries low watermark = early's sequence
    part = cluster.broker.partition(IN)
    assert part.state is not None and part.state.low_water_marks[0] >= early.txn_id.least_sig_bits
    answer = part.publish(b"ghost", early.txn_id, None)  # a produce request delayed past the end
    assert answer.done and answer.error is not None and "NotAllowed" in str(answer.error)


def test_delayed_messages_in_transactions() -> None:
    """Delayed delivery mixed with txns (testDelayedTransactionMessages): a committed delayed message
    is delivered at its time, never before; an aborted one never (DD-1, TB-16)."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    now = cluster.sim.now
    committed, aborted = client.new_transaction(60_000), client.new_transaction(60_000)
    producer.send("late", txn=committed, deliver_at=now + 500)
    producer.send("never", txn=aborted, deliver_at=now + 100)
    producer.send("now", deliver_at=now)
    committed.commit()
    aborted.abort()
    assert _drain(consumer) == ["now"]
    assert cluster.sim.now < now + 500
    msg = consumer.receive(1_000)
    assert msg is not None and msg.data() == b"late" and cluster.sim.now >= now + 500
    assert consumer.receive(200) is None
    _clean(cluster)


def test_s45_commit_after_a_failed_send_aborts() -> None:
    """S45 (TC-32): a send of the txn failed, so commit aborts and fails with TransactionHasOperationFailed."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    txn = client.new_transaction(60_000)
    part = cluster.broker.partition(IN)
    assert part.ledger is not None
    faulty = FaultyLedger(part.ledger)
    faulty.fail_appends(1)
    part.ledger = faulty
    with pytest.raises(OperationFailed):
        producer.send("lost", txn=txn)
    with pytest.raises(OperationFailed) as failed:
        txn.commit()
    assert failed.value.error.name == "TransactionHasOperationFailed"
    assert txn.txn_state is ClientTxnState.ABORTED
    cluster.sim.advance(200)
    assert txn.txn_id.least_sig_bits not in cluster.broker.coordinator.state.txns  # type: ignore[union-attr]


def test_s46_timeouts_on_both_sides() -> None:
    """S46 (TC-18, TC-36): the client's txn goes TIME_OUT and refuses sends; the coordinator aborts it."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub")
    txn = client.new_transaction(300)
    producer.send("t", txn=txn)
    cluster.sim.advance(600)
    assert txn.txn_state is ClientTxnState.TIME_OUT
    with pytest.raises(OperationFailed) as refused:
        producer.send("u", txn=txn)
    assert refused.value.error.name == "InvalidTxnStatus"
    assert txn.txn_id.least_sig_bits not in cluster.broker.coordinator.state.txns  # type: ignore[union-attr]
    assert consumer.receive(50) is None  # the timeout abort wrote an abort marker (TB-12)
    part = cluster.broker.partition(IN)
    assert part.state is not None and tb.is_txn_aborted(part.state, txn.txn_id)


def test_s43_first_txn_ack_waits_for_the_lazy_pending_ack_store() -> None:
    """S43 (PA-17): the first txn ack creates the pending-ack store; it is answered after the replay."""
    cluster = _cluster()
    client = cluster.client()
    client.create_producer("in").send("m")
    consumer = client.subscribe("in", "sub")
    sub = cluster.broker.subscription(IN, "sub")
    assert sub is not None and sub.state is not None and sub.state.handle_state.name == "NONE"
    txn = client.new_transaction(60_000)
    msg = consumer.receive(100)
    assert msg is not None
    consumer.acknowledge(msg, txn=txn)
    assert sub.state.handle_state.name == "READY"
    txn.commit()
    assert sub.cursor is not None and sub.cursor.is_deleted(msg.position)


def test_pending_acks_survive_a_broker_crash() -> None:
    """S40 (PA-18): T1's pending acks are replayed after a restart: T2 conflicts, T1's commit deletes them."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    for i in range(3):
        producer.send(f"m{i}")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    t1 = client.new_transaction(60_000)
    msgs = [consumer.receive(100) for _ in range(3)]
    for msg in msgs:
        assert msg is not None
        consumer.acknowledge(msg, txn=t1)
    cluster.broker.crash()
    cluster.broker.restart()
    t2 = client.new_transaction(60_000)
    with pytest.raises(OperationFailed) as conflict:
        consumer.acknowledge(msgs[1], txn=t2)  # type: ignore[arg-type]
    assert conflict.value.error.name == "TransactionConflict"
    t1.commit()
    sub = cluster.broker.subscription(IN, "sub")
    assert sub is not None and sub.cursor is not None
    assert all(sub.cursor.is_deleted(m.position) for m in msgs if m is not None)


def test_low_watermark_cleans_up_txns_whose_end_never_arrived() -> None:
    """TB-13 / PA-14: a txn that produced to a partition and acked on a subscription without
    registering them (so the coordinator never sends them its END) is aborted there as soon as a
    later txn's END carries a low watermark past it: its message is never delivered and its
    pending ack is released and redelivered."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    producer.send("input")
    producer.send("input2")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    msg, msg2 = consumer.receive(100), consumer.receive(100)
    assert msg is not None and msg2 is not None
    stray = client.new_transaction(60_000)
    part = cluster.broker.partition(IN)
    sub = cluster.broker.subscription(IN, "sub")
    assert sub is not None
    # Requests that bypass ADD_PARTITION / ADD_SUBSCRIPTION: the coordinator does not know them.
    orphan = part.publish(b"orphan", stray.txn_id, None)  # the first txn append waits for the first snapshot
    acked = sub.acknowledge(consumer.consumer_id, msg.position, stray.txn_id, False)  # and the pending-ack log
    cluster.sim.advance(10)
    assert orphan.done and orphan.error is None and acked.done and acked.error is None
    stray.commit()  # ends at the coordinator, but no participant hears of it
    assert part.state is not None and stray.txn_id in part.state.ongoing
    later = client.new_transaction(60_000)
    producer.send("later", txn=later)
    consumer.acknowledge(msg2, txn=later)
    later.commit()  # its END carries low watermark = stray's sequence
    assert part.state is not None and stray.txn_id not in part.state.ongoing
    assert tb.is_txn_aborted(part.state, stray.txn_id)
    got = list(iter(lambda: consumer.receive(50), None))
    # "orphan" is never delivered; the stray ack was aborted, so "input" comes back (PA-13).
    assert sorted(m.data() for m in got) == [b"input", b"later"]
    assert [m.redelivery_count for m in got if m.data() == b"input"] == [1]


def test_sequence_survives_log_retention() -> None:
    """TC-23: once every record of the transaction log is deleted and its ledgers are dropped, the
    next load still issues TxnIDs above every one issued (the ledger property carries the sequence)."""
    cluster = _cluster()
    client = cluster.client()
    issued = []
    for _ in range(3):
        txn = client.new_transaction(60_000)
        txn.abort()
        issued.append(txn.txn_id)
    broker = cluster.broker
    for _ in range(3):  # each load deletes the fully-consumed ledgers of the previous owner
        broker.crash()
        broker.restart()
    coordinator = broker.coordinator
    assert coordinator.state is not None and not coordinator.state.txns
    assert coordinator.log is not None
    assert 0 not in [info.ledger_id for info in coordinator.log.ledger.ledgers()]  # the records' ledger is gone
    fresh = cluster.client().new_transaction(60_000)
    assert fresh.txn_id.least_sig_bits > max(t.least_sig_bits for t in issued)
