"""Issue 31, item 5: what the broker keeps per message is bounded by what is unacknowledged, not by
what was ever sent.  Counted in entries, not bytes or seconds: after N messages produced and acked
across many ledger rollovers, each per-message structure of the partition and its subscription holds
only what is still unacknowledged or in the ledger being written."""

from __future__ import annotations

import pytest

from engine.broker import partition_name
from engine.simulation.client import Cluster, ConsumerType
from spec.config import Config

IN = partition_name("in", 0)
PER_LEDGER = 10
SENT = 400
HELD = 7  # messages received and left unacknowledged at the end


def _cluster() -> Cluster:
    config = Config().with_overrides({"managedLedgerMaxEntriesPerLedger": str(PER_LEDGER)})
    return Cluster.start(seed=5, topics={"in": 1}, config=config, ledger="memory")


@pytest.mark.parametrize("cumulative", [False, True])
def test_per_message_state_is_bounded_by_the_unacknowledged(cumulative: bool) -> None:
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    kind = ConsumerType.Exclusive if cumulative else ConsumerType.Shared
    consumer = client.subscribe("in", "sub", consumer_type=kind)
    for i in range(SENT):
        producer.send(f"m{i}")
        msg = consumer.receive(100)
        assert msg is not None
        if i < SENT - HELD:
            if cumulative:
                consumer.acknowledge_cumulative(msg)
            else:
                consumer.acknowledge(msg)
    cluster.sim.advance(10)
    part = cluster.broker.partition(IN)
    assert part.ledger is not None and part.state is not None
    dispatcher = part.subscriptions["sub"].dispatcher
    # The redelivery counts went with their acknowledgements (Pulsar's tracker drops an acked
    # position): only the held messages keep theirs.
    assert len(dispatcher.redeliveries) == HELD
    # Retention deleted every ledger the cursor passed: what is stored, in the broker's message map,
    # the managed ledger and the buffer's view of it, is the held messages' ledgers and the current one.
    assert len(part.messages) <= HELD + PER_LEDGER
    assert len(part.ledger.ledgers()) <= HELD // PER_LEDGER + 2
    assert len(part.state.ledgers) == len(part.ledger.ledgers())
    assert len(part.ledger.storage.ledgers) == len(part.ledger.ledgers())  # type: ignore[attr-defined]
    cluster.close()
