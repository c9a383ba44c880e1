"""A consumer that never asked for messages (engine/serve/consumers.py, Dispatcher.asked).

Found in CI: under faults, a SUBSCRIBE's answer was lost; the client gave up on that consumer after
its operation timeout, but the broker had registered it and its Shared dispatcher handed it entries
it could never send, so a subscription went silent through a recorder's final drain.  Pulsar's
Shared dispatcher gives entries only to consumers with permits, and its Key_Shared dispatcher holds
a key's entries for the consumer that owns the key until it has permits or leaves."""

from __future__ import annotations

import pulsar

from spec.pb import PulsarApi_pb2 as api
from tests.engine.serve.conftest import drain, unique
from tests.engine.serve.rawpeer import RawPeer

T = api.BaseCommand


def _silent_consumer(url: str, topic: str, sub_type: int) -> RawPeer:
    """A consumer subscribed on a raw connection that never sends FLOW (its client saw no answer)."""
    peer = RawPeer(url)
    subscribe = api.CommandSubscribe(
        topic=topic, subscription="s", subType=sub_type, consumer_id=1, request_id=1, consumer_name="silent"
    )
    if sub_type == api.CommandSubscribe.Key_Shared:
        subscribe.keySharedMeta.keySharedMode = api.AUTO_SPLIT
    peer.send(T(type=T.SUBSCRIBE, subscribe=subscribe))
    while (answer := peer.read()) is not None and answer.type != T.SUCCESS:
        assert answer.type != T.ERROR, answer
    return peer


def test_shared_gives_nothing_to_a_consumer_that_never_asked(url: str, client: pulsar.Client) -> None:
    topic = f"persistent://public/default/{unique()}"
    silent = _silent_consumer(url, topic, api.CommandSubscribe.Shared)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        sent = {f"m{i}".encode() for i in range(20)}
        for body in sorted(sent):
            producer.send(body)
        assert {m.data() for m in drain(consumer)} == sent
    finally:
        silent.close()


def test_key_shared_holds_a_silent_consumers_keys_until_it_leaves(url: str, client: pulsar.Client) -> None:
    topic = f"persistent://public/default/{unique()}"
    silent = _silent_consumer(url, topic, api.CommandSubscribe.Key_Shared)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared)
    producer = client.create_producer(topic, batching_enabled=False)
    sent = {f"k{i}".encode() for i in range(40)}
    for body in sorted(sent):
        producer.send(body, partition_key=body.decode())
    first = {m.data() for m in drain(consumer)}
    # The keys the silent consumer owns wait for it (never sent to another: Key_Shared's order)...
    assert first and first < sent
    silent.close()
    # ...and go to the remaining consumer once it leaves: nothing is held for good.
    assert first | {m.data() for m in drain(consumer, timeout_ms=1_000)} == sent
