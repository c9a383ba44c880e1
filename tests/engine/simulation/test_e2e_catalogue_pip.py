"""End-to-end tests of the multi-machine scenarios of ``pulsar-pip160-pip195.md`` (catalogue C.1, C.2).

PIP-160's batched writer under the coordinator's and the pending-ack stores' logs, and PIP-195's
delayed-delivery tracker inside a subscription's dispatcher, driven through the Pulsar-shaped
client.  Single-machine items of the catalogue are conformance vectors (``spec/vectors/batched_log``,
``spec/vectors/delayed``); ``docs/engine/catalogue.md`` maps every item to its test or vector.
"""

from __future__ import annotations

import pytest

from engine.broker import SubscriptionService, latest_by_key, namespace_topic, partition_name
from engine.simulation.client import BatchMessageId, Cluster, Consumer, ConsumerType, OperationFailed
from invariants.transactional import check_transactional
from reference import delayed as dl
from spec.config import Config
from spec.pb import PulsarTransactionMetadata_pb2
from spec.types import BatchedPosition, Position

IN = partition_name("in", 0)
BUCKET_FACTORY = "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"


def _at(sent: Position | BatchMessageId) -> Position:
    """The position of a message sent without batching."""
    assert isinstance(sent, Position)
    return sent


def _cluster(*, batching: bool = False, **overrides: object) -> Cluster:
    config = Config().with_overrides(
        {"isDelayedDeliveryDeliverAtTimeStrict": True, "delayedDeliveryTickTimeMillis": 10, **overrides}
    )
    return Cluster.start(seed=13, topics={"in": 1}, config=config, batching=batching)


def _subscription(cluster: Cluster, name: str) -> SubscriptionService:
    sub = cluster.broker.subscription(IN, name)
    assert sub is not None and sub.state is not None
    return sub


def _receive_all(consumer: Consumer, wait_ms: int = 50) -> list[str]:
    got = []
    while (msg := consumer.receive(wait_ms)) is not None:
        got.append(msg.data().decode())
        consumer.acknowledge(msg)
    return got


# --------------------------------------------------------------------------------------------
# PIP-160 under the stores


@pytest.mark.parametrize("batching", [False, True])
def test_s7_finished_txns_delete_their_log_records_batched_or_not(batching: bool) -> None:
    """S7 / MLTransactionMetadataStoreTest.testDeleteLog, with PIP-160 on and off (TC-9, BW-20):
    after one txn commits and another aborts, every record of both is deleted, so the transaction
    log's cursor mark-delete position reaches its last entry."""
    cluster = _cluster(batching=batching)
    client = cluster.client()
    producer = client.create_producer("in")
    committed, aborted = client.new_transaction(60_000), client.new_transaction(60_000)
    producer.send("c", txn=committed)
    producer.send("a", txn=aborted)
    committed.commit()
    aborted.abort()
    cluster.sim.advance(50)  # the deletes of the last batch
    log = cluster.broker.coordinator.log
    assert log is not None
    assert log.cursor.mark_delete_position == log.ledger.last_confirmed()
    cluster.broker.crash()
    cluster.broker.restart()
    state = cluster.broker.coordinator.state
    assert state is not None and not state.txns  # nothing replays


def test_a9_batched_coordinator_log_deletes_batch_indexes() -> None:
    """MLTransactionLogImplTest (fact sheet A.9 D2, D4, D5; TC-9, TC-21, BW-15, BW-20, BW-24): with
    PIP-160 on, the NEW records of concurrent txns share entries; ending txns deletes only their
    batch indexes, so an entry that still holds a live txn's record keeps an ack set with exactly
    those bits, a fully ended entry is deleted, and a restart replays exactly the live txns."""
    cluster = _cluster(batching=True, transactionLogBatchedWriteMaxRecords=4)
    clients = [cluster.client() for _ in range(8)]
    pending = [c.new_transaction_async(600_000) for c in clients]
    cluster.sim.run_until(lambda: all(p.done for p in pending))
    txns = {p.result().txn_id.least_sig_bits: p.result() for p in pending}
    log = cluster.broker.coordinator.log
    assert log is not None
    new_records: dict[int, BatchedPosition | Position] = {}
    for position, record in log.replay():  # only NEW records so far: nothing was sent
        assert isinstance(record, PulsarTransactionMetadata_pb2.TransactionMetadataEntry)
        new_records[record.txnid_least_bits] = position
    assert set(new_records) == set(txns)
    batched = [p for p in new_records.values() if isinstance(p, BatchedPosition) and p.batch_size > 1]
    assert batched, "concurrent NEW records share an entry"
    shared = batched[0]
    entry = Position(shared.ledger_id, shared.entry_id)
    in_entry = {
        seq: p for seq, p in new_records.items() if (p.ledger_id, p.entry_id) == (entry.ledger_id, entry.entry_id)
    }
    keep = sorted(in_entry)[-1]  # the live txn whose record pins the entry
    for seq, txn in sorted(txns.items()):
        if seq != keep:
            txn.commit()
    cluster.sim.advance(50)  # the deletes of the last batch
    kept_index = in_entry[keep]
    assert isinstance(kept_index, BatchedPosition)
    assert not log.cursor.is_deleted(entry)
    assert log.cursor.batch_ack_set(entry) == (1 << kept_index.batch_index,)  # set bit = still present
    others = {Position(p.ledger_id, p.entry_id) for seq, p in new_records.items() if seq not in in_entry}
    assert others and all(log.cursor.is_deleted(p) for p in others)
    cluster.broker.crash()
    cluster.broker.restart()
    state = cluster.broker.coordinator.state
    assert state is not None and set(state.txns) == {keep}
    recovered = cluster.broker.coordinator.log
    assert recovered is not None
    assert [p for p, _ in recovered.replay() if (p.ledger_id, p.entry_id) == (entry.ledger_id, entry.entry_id)] == [
        kept_index
    ]


def _ack_all(cluster: Cluster, count: int, per_tick: int) -> tuple[list[Position], SubscriptionService]:
    """``count`` messages, each acknowledged in one txn by a bare CommandAck, ``per_tick`` in one
    logical millisecond (so PIP-160 can batch them)."""
    client = cluster.client()
    producer = client.create_producer("in")
    positions = [_at(producer.send(f"m{i}")) for i in range(count)]
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    txn = client.new_transaction(600_000)
    sub = _subscription(cluster, "sub")
    for start in range(0, count, per_tick):
        answers = [
            sub.acknowledge(consumer.consumer_id, p, txn.txn_id, False) for p in positions[start : start + per_tick]
        ]
        cluster.sim.run_until(lambda answers=answers: all(a.done for a in answers))  # type: ignore[misc]
        assert all(a.error is None for a in answers)
    return positions, sub


def test_c1_14_pending_ack_log_index_replay_unbatched() -> None:
    """C.1 #14 (MLPendingAckStoreTest, K6; PA-16, PA-18): 100 single-record entries acking position
    i, minLag 10: the sparse index has keys m9, m19, m39, m69 at log records 9, 19, 39, 69, live and
    after the broker reloads the pending-ack log."""
    cluster = _cluster(transactionPendingAckLogIndexMinLag=10)
    positions, sub = _ack_all(cluster, 100, 1)
    expected = tuple((positions[i], i) for i in (9, 19, 39, 69))
    assert sub.state is not None and sub.state.log_index == expected
    assert sub.log is not None and len(sub.log.ledger.read(Position(0, 0), 1000)) == 100
    cluster.broker.crash()
    cluster.broker.restart()
    replayed = _subscription(cluster, "sub").state
    assert replayed is not None and replayed.log_index == expected


def test_c1_14_pending_ack_log_index_replay_batched() -> None:
    """C.1 #14 batched (MLPendingAckStoreTest, K4, K6; PA-16 and its Divergence, BW-15, BW-24): 7
    PIP-160 entries of 10 ACK records each (message i acked by record i), minLag 1.  Pulsar advances
    the lag per entry and indexes entries 0, 1, 3, 6 (keys m9, m19, m39, m69); the machine advances
    it per record, so the same backoff (1, 1, 2, 3, ...) lands on records 0, 1, 3, 6, 10, ... --
    and the live and replayed indexes agree, with the log batched into 7 entries."""
    cluster = _cluster(
        batching=True, transactionPendingAckLogIndexMinLag=1, transactionPendingAckBatchedWriteMaxRecords=10
    )
    positions, sub = _ack_all(cluster, 70, 10)
    assert sub.log is not None and len(sub.log.ledger.read(Position(0, 0), 1000)) == 7
    expected = tuple((positions[r], r) for r in (0, 1, 3, 6, 10, 15, 21, 28, 36, 45, 55, 66))
    assert sub.state is not None and sub.state.log_index == expected
    cluster.broker.crash()
    cluster.broker.restart()
    replayed = _subscription(cluster, "sub").state
    assert replayed is not None and replayed.log_index == expected


# --------------------------------------------------------------------------------------------
# PIP-195 in a subscription


def test_c2_57_delays_by_subscription_type_and_ordering() -> None:
    """C.2 #57 (DelayedDeliveryTest.testDelayedDelivery / testInterleavedMessages / testOrderingDispatch;
    DD-1, DD-12, DD-13): a Failover subscription ignores delays; a Shared one holds delayed messages
    back without holding back the immediate ones, and delivers equal delays in message-id order."""
    cluster = _cluster()
    client = cluster.client()
    failover = client.subscribe("in", "f", consumer_type=ConsumerType.Failover)
    shared = client.subscribe("in", "s", consumer_type=ConsumerType.Shared)
    producer = client.create_producer("in")
    due = cluster.sim.now + 1_000
    producer.send("d1", deliver_at=due)
    producer.send("n1")
    producer.send("d2", deliver_at=due)
    producer.send("n2")
    producer.send("d3", deliver_at=due)
    assert _receive_all(failover) == ["d1", "n1", "d2", "n2", "d3"]
    assert _receive_all(shared) == ["n1", "n2"]
    assert cluster.sim.now < due
    got = []
    while (msg := shared.receive(2_000)) is not None:
        assert cluster.sim.now >= due
        got.append(msg.data().decode())
        shared.acknowledge(msg)
    assert got == ["d1", "d2", "d3"]


def test_c2_57_checker_accepts_failover_ignoring_delays() -> None:
    """C.2 #57 against the history checker: a Failover subscription receiving a delayed message at
    once is Pulsar's behaviour, not an anomaly."""
    cluster = _cluster()
    client = cluster.client()
    failover = client.subscribe("in", "f", consumer_type=ConsumerType.Failover)
    client.create_producer("in").send("d", deliver_at=cluster.sim.now + 1_000)
    assert _receive_all(failover) == ["d"]
    verdict = check_transactional(cluster.history())
    assert verdict.ok, [str(a) for a in verdict.anomalies]


def test_c2_53_delayed_index_survives_all_consumers_disconnecting() -> None:
    """C.2 #53 (BucketDelayedDeliveryTest.testBucketDelayedDeliveryWithAllConsumersDisconnecting;
    DD-3, DD-4, DD-11): delayed messages on a Shared subscription, some sealed into buckets; the only
    consumer closes and a new one subscribes: the tracker still holds every message with the same
    bucket keys, nothing is delivered early, and each is delivered exactly once when due."""
    cluster = _cluster(
        delayedDeliveryMinIndexCountPerBucket=5,
        managedLedgerMaxEntriesPerLedger=10,
        delayedDeliveryTrackerFactoryClassName=BUCKET_FACTORY,
    )
    client = cluster.client()
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    producer = client.create_producer("in")
    due = cluster.sim.now + 3_600_000
    sent = [f"m{i}" for i in range(30)]
    for text in sent:
        producer.send(text, deliver_at=due)
    assert consumer.receive(100) is None
    sub = _subscription(cluster, "sub")
    tracker = sub.tracker
    assert isinstance(tracker, dl.BucketTracker)
    keys = [b.key for b in tracker.buckets]
    assert dl.number_of_delayed_messages(tracker) == 30 and keys  # some were sealed
    consumer.close()
    again = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    assert again.receive(100) is None
    tracker = sub.tracker
    assert isinstance(tracker, dl.BucketTracker)
    assert dl.number_of_delayed_messages(tracker) == 30
    assert [b.key for b in tracker.buckets] == keys
    cluster.sim.advance(due - cluster.sim.now)
    got = _receive_all(again, wait_ms=200)
    assert sorted(got) == sorted(sent)
    assert again.receive(1_000) is None


def _sealed_delayed(cluster: Cluster, count: int) -> tuple[Consumer, list[str], int]:
    """``count`` messages delayed by an hour on a Shared subscription, ten entries per ledger, so
    the tracker seals buckets as the ledgers roll."""
    client = cluster.client()
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    producer = client.create_producer("in")
    due = cluster.sim.now + 3_600_000
    sent = [f"m{i}" for i in range(count)]
    for text in sent:
        producer.send(text, deliver_at=due)
    assert consumer.receive(100) is None
    return consumer, sent, due


def _bucket_ledgers(cluster: Cluster) -> list[str]:
    """The snapshot ledgers the cursor's bucket catalogue names (DD-18: key -> bucket id)."""
    sub = _subscription(cluster, "sub")
    assert sub.cursor is not None and sub.delayed is not None
    prefix = dl.bucket_key(0, 0).rsplit("_", 2)[0]
    ids = [int(v) for k, v in sub.cursor.properties.items() if k.startswith(prefix)]
    return [sub.delayed.storage.name_of(i) for i in ids]


def test_c2_39_delayed_index_recovered_after_a_broker_restart() -> None:
    """C.2 #39 / B.12 R5 end to end (BucketDelayedDeliveryTest; DD-18, DD-24): sealed buckets come back
    from their snapshot ledgers and the cursor's catalogue, the mutable bucket's messages are re-added
    as the dispatcher re-reads them; nothing is delivered early and every message exactly once."""
    cluster = _cluster(
        delayedDeliveryMinIndexCountPerBucket=5,
        managedLedgerMaxEntriesPerLedger=10,
        delayedDeliveryTrackerFactoryClassName=BUCKET_FACTORY,
    )
    consumer, sent, due = _sealed_delayed(cluster, 30)
    ledgers = _bucket_ledgers(cluster)
    assert ledgers and all(cluster.broker.store.exists(name) for name in ledgers)
    cluster.broker.crash()
    cluster.broker.restart()
    assert consumer.receive(1_000) is None
    tracker = _subscription(cluster, "sub").tracker
    assert tracker is not None and dl.number_of_delayed_messages(tracker) == 30
    cluster.sim.advance(due - cluster.sim.now)
    assert sorted(_receive_all(consumer, wait_ms=200)) == sorted(sent)
    assert consumer.receive(1_000) is None


def test_c2_56_deleting_the_topic_removes_every_bucket_ledger() -> None:
    """C.2 #56 (BucketDelayedDeliveryTest.testDeleteTopic..., DD-23, TB-1, TB-25): buckets sealed and a
    snapshot taken; deleting the topic is refused while a consumer is connected, then (forced) the
    bucket ledgers, the topic's ledger and its buffer snapshot record are all gone."""
    cluster = _cluster(
        delayedDeliveryMinIndexCountPerBucket=5,
        managedLedgerMaxEntriesPerLedger=10,
        delayedDeliveryTrackerFactoryClassName=BUCKET_FACTORY,
    )
    _sealed_delayed(cluster, 30)
    client = cluster.client()
    txn = client.new_transaction(60_000)
    client.create_producer("in").send("t", txn=txn)  # a txn append: the buffer writes its first snapshot
    txn.commit()
    ledgers = _bucket_ledgers(cluster)
    assert ledgers and all(cluster.broker.store.exists(name) for name in ledgers)
    cluster.sim.advance(cluster.broker.config.transaction_buffer_snapshot_min_time_in_millis + 10)
    snapshots = cluster.broker.system_topic(namespace_topic(IN, "__transaction_buffer_snapshot"))
    assert IN in latest_by_key(snapshots)
    with pytest.raises(OperationFailed):
        cluster.delete_topic("in")
    assert all(cluster.broker.store.exists(name) for name in ledgers)
    cluster.delete_topic("in", force=True)
    assert not any(cluster.broker.store.exists(name) for name in ledgers)
    assert not cluster.broker.store.exists(IN)
    assert IN not in cluster.broker.partitions
    assert IN not in latest_by_key(snapshots)  # the buffer's record is tombstoned (TB-25)


def test_c2_54_unsubscribe_after_restart_deletes_every_bucket_ledger() -> None:
    """C.2 #54 (BucketDelayedDeliveryTest.testUnsubscribe; DD-19, DD-23): buckets sealed, broker
    restarted, then the subscription is deleted: every bucket snapshot ledger is gone."""
    cluster = _cluster(
        delayedDeliveryMinIndexCountPerBucket=5,
        managedLedgerMaxEntriesPerLedger=10,
        delayedDeliveryTrackerFactoryClassName=BUCKET_FACTORY,
    )
    consumer, _, _ = _sealed_delayed(cluster, 30)
    ledgers = _bucket_ledgers(cluster)
    assert ledgers and all(cluster.broker.store.exists(name) for name in ledgers)
    cluster.broker.crash()
    cluster.broker.restart()
    assert consumer.receive(100) is None
    consumer.unsubscribe()
    assert not any(cluster.broker.store.exists(name) for name in ledgers)
    assert cluster.broker.subscription(IN, "sub") is None
