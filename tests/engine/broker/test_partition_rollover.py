"""A buffer step that writes several entries across a ledger roll-over (TB-2, TB-13).

A commit whose END carries a low watermark writes its commit marker and then an abort marker for
every stale txn, in one step of the buffer.  When the commit marker fills the ledger, the managed
ledger rolls over and the abort markers no longer go where the buffer placed them: the partition
reloads from what is durable (its failure policy) and the coordinator's retried END finishes the
job.  Whatever the ledger size, the outcome is the one TB-13 describes.
"""

from __future__ import annotations

import pytest

from engine.broker import partition_name
from engine.simulation.client import Cluster, ConsumerType
from invariants.transactional import check_transactional
from reference import buffer as tb
from spec.config import Config

IN = partition_name("in", 0)


@pytest.mark.parametrize("entries_per_ledger", [2, 3, 4, 5, 6, 7])
def test_low_watermark_aborts_across_a_roll_over(entries_per_ledger: int) -> None:
    config = Config().with_overrides({"managedLedgerMaxEntriesPerLedger": str(entries_per_ledger)})
    cluster = Cluster.start(seed=3, topics={"in": 1}, config=config)
    client = cluster.client()
    producer = client.create_producer("in")
    producer.send("input")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    first = consumer.receive(100)
    assert first is not None
    consumer.acknowledge(first)
    strays = [client.new_transaction(60_000) for _ in range(2)]
    part = cluster.broker.partition(IN)
    for stray in strays:
        # Appends that bypass ADD_PARTITION: the coordinator never sends these txns their END.
        orphan = part.publish(b"orphan", stray.txn_id, None)
        cluster.sim.advance(10)
        assert orphan.done and orphan.error is None
        stray.commit()
    later = client.new_transaction(60_000)
    producer.send("later", txn=later)
    later.commit()  # its END carries a low watermark past both strays
    cluster.sim.advance(5_000)  # room for a reload and the coordinator's retried END
    assert part.state is not None
    assert all(tb.is_txn_aborted(part.state, s.txn_id) for s in strays)
    assert not part.state.ongoing
    got = []
    while (msg := consumer.receive(200)) is not None:
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == [b"later"]
    # Every entry sits where the buffer placed it, and the ledger agrees with the buffer's view.
    assert part.ledger is not None
    assert tuple(part.state.ledgers) == part.ledger.ledgers()
    assert {e.position for e in part.state.entries} == set(part.messages)
    verdict = check_transactional(cluster.history())
    assert verdict.ok, [str(a) for a in verdict.anomalies]
