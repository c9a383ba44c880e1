"""An ack is answered only once the cursor holds it (PA-18, PA-19).

The soak's multi seed 13 on a file ledger: a normal ack's cursor write failed (a disk error in a
store that commits every change), the subscription reloaded its topic, and the ack was still
answered OK: its step had no pending-ack record to wait for, and the cursor write it did not wait
for was lost, so the acked message came back.  A step's answer now waits for its cursor changes,
and a failed cursor write leaves it unanswered, as a crash does.
"""

from __future__ import annotations

import pytest

from engine.broker import partition_name, subscription
from engine.simulation.client import Cluster, ConsumerType
from engine.storage.ledger import LedgerError
from spec.types import Position

P0 = partition_name("topic", 0)


def _one_message_to_ack() -> tuple[Cluster, subscription.SubscriptionService, int]:
    """A cluster whose Exclusive subscription ``sub`` holds one message, m0 at 0:0, and its consumer."""
    cluster = Cluster.start(seed=11)
    client = cluster.client()
    producer = client.create_producer("topic")
    client.subscribe("topic", "sub", consumer_type=ConsumerType.Exclusive)
    producer.send("m0")
    sub = cluster.broker.subscription(P0, "sub")
    assert sub is not None and sub.ready and sub.cursor is not None
    return cluster, sub, next(iter(sub.consumers))


def test_an_ack_whose_cursor_write_failed_is_not_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, sub, consumer_id = _one_message_to_ack()

    def failing_write(*_args: object) -> None:
        raise LedgerError("injected: the cursor write failed")

    monkeypatch.setattr(subscription, "write_individual_ack", failing_write)
    answer = sub.acknowledge(consumer_id, Position(0, 0), None, cumulative=False)
    assert not answer.done  # never answered: the ack was lost with the topic's memory
    assert not sub.ready  # the topic reloads, as after any failed write
    cluster.close()


def test_an_ack_whose_cursor_write_succeeded_is_answered() -> None:
    cluster, sub, consumer_id = _one_message_to_ack()
    answer = sub.acknowledge(consumer_id, Position(0, 0), None, cumulative=False)
    assert answer.done and answer.error is None
    assert sub.cursor is not None and sub.cursor.mark_delete_position >= Position(0, 0)
    cluster.close()
