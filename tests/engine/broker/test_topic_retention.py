"""Topic retention in the broker: consumed ledgers go, as the managed ledger and the buffer agree (TB-23)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.broker import partition_name
from engine.simulation.client import Cluster, ConsumerType
from invariants.transactional import check_transactional
from spec.config import Config

IN = partition_name("in", 0)


def _cluster(ledger: str, tmp_path: Path) -> Cluster:
    config = Config().with_overrides({"managedLedgerMaxEntriesPerLedger": "2"})
    return Cluster.start(
        seed=11, topics={"in": 1}, config=config, ledger=ledger, data_dir=str(tmp_path) if ledger == "file" else None
    )


@pytest.mark.parametrize("ledger", ["memory", "file"])
def test_consumed_ledgers_go_and_an_open_txn_holds_its_ledger(ledger: str, tmp_path: Path) -> None:
    cluster = _cluster(ledger, tmp_path)
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Exclusive)
    open_txn = client.new_transaction(600_000)
    producer.send("t", txn=open_txn)  # entry (0, 0): after it, maxReadPosition stops
    for i in range(6):
        producer.send(f"n{i}")
    part = cluster.broker.partition(IN)
    assert part.state is not None and part.ledger is not None
    # Nothing is readable past the open txn, so the cursor cannot pass ledger 0: nothing goes.
    assert consumer.receive(100) is None
    assert part.trimmed_ledgers == []
    open_txn.commit()
    got = []
    while (msg := consumer.receive(100)) is not None:
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == [b"t", *(f"n{i}".encode() for i in range(6))]
    cluster.sim.advance(10)
    current = part.ledger.ledgers()[-1].ledger_id
    # Every closed ledger is consumed now, and the buffer lets each go (TB-23).
    assert part.trimmed_ledgers and [i.ledger_id for i in part.ledger.ledgers()] == [current]
    assert part.state.ledgers == part.ledger.ledgers()
    assert all(p.ledger_id == current for p in part.messages)
    # A restart reads what is left and agrees.
    cluster.broker.crash()
    cluster.broker.restart()
    again = cluster.broker.partition(IN)
    assert again.state is not None and again.ledger is not None
    assert again.state.ledgers == again.ledger.ledgers()
    assert check_transactional(cluster.history()).ok
    cluster.close()


def test_a_topic_without_subscriptions_keeps_its_ledgers(tmp_path: Path) -> None:
    """Pulsar (zero retention) would drop every closed ledger of a topic nobody subscribes to; the
    engine keeps them so that a later subscription at EARLIEST reads everything."""
    cluster = _cluster("memory", tmp_path)
    producer = cluster.client().create_producer("in")
    for i in range(6):
        producer.send(f"n{i}")
    part = cluster.broker.partition(IN)
    cluster.sim.advance(10)
    assert part.trim() == () and part.trimmed_ledgers == []
    consumer = cluster.client().subscribe("in", "late", consumer_type=ConsumerType.Shared)
    got = [m.data() for m in iter(lambda: consumer.receive(100), None)]
    assert got == [f"n{i}".encode() for i in range(6)]
