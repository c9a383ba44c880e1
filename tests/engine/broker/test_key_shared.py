"""Key_Shared subscriptions: sticky-key routing over auto-split hash ranges, and the recently-joined rule."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from engine.broker import (
    NONE_KEY,
    STICKY_KEY_HASH_RANGE,
    decode_stored_message,
    encode_entry,
    murmur3_32,
    partition_name,
    sticky_key_hash,
)
from engine.simulation.client import Cluster, Consumer, ConsumerType, Message
from reference.buffer import EntryKind, LogEntry
from spec.history import validate_history
from spec.types import Position

P0 = partition_name("topic", 0)
KEYS = [f"key-{i}" for i in range(12)]


def test_murmur3_32_matches_the_reference_vectors() -> None:
    # Published MurmurHash3_x86_32 test values (seed 0 unless given).
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"Hello, world!") == 0xC0363E43
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    assert murmur3_32(b"\x00\x00\x00\x00") == 0x2362F9DE


def test_sticky_key_hash_is_in_range_and_none_key_is_the_default() -> None:
    assert sticky_key_hash(None) == (murmur3_32(NONE_KEY) & 0x7FFFFFFF) % STICKY_KEY_HASH_RANGE
    assert sticky_key_hash("NONE_KEY") == sticky_key_hash(None)
    assert sticky_key_hash("") != sticky_key_hash(None)  # an empty key is a key
    assert all(0 <= sticky_key_hash(k) < STICKY_KEY_HASH_RANGE for k in KEYS)


def test_partition_key_is_in_the_entry_metadata() -> None:
    entry = LogEntry(Position(0, 3), EntryKind.NORMAL)
    stored = decode_stored_message(entry.position, encode_entry(entry, b"v", partition_key="k1"))
    assert stored.partition_key == "k1" and stored.payload == b"v"
    assert decode_stored_message(entry.position, encode_entry(entry, b"v")).partition_key is None


def _drain(consumers: list[Consumer], ack: bool = True) -> dict[int, list[Message]]:
    got: dict[int, list[Message]] = defaultdict(list)
    progress = True
    while progress:
        progress = False
        for consumer in consumers:
            msg = consumer.receive(20)
            if msg is not None:
                got[consumer.consumer_id].append(msg)
                if ack:
                    consumer.acknowledge(msg)
                progress = True
    return got


def _owners(got: dict[int, list[Message]]) -> dict[str | None, set[int]]:
    owners: dict[str | None, set[int]] = defaultdict(set)
    for cid, msgs in got.items():
        for m in msgs:
            owners[m.partition_key()].add(cid)
    return owners


def test_every_message_of_a_key_goes_to_one_consumer_while_the_set_is_stable() -> None:
    cluster = Cluster.start(seed=3)
    client = cluster.client()
    consumers = [client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared) for _ in range(3)]
    producer = client.create_producer("topic")
    for round_ in range(4):
        for key in KEYS:
            producer.send(f"{key}/{round_}", partition_key=key)
    producer.send("no-key")
    got = _drain(consumers)
    owners = _owners(got)
    assert all(len(ids) == 1 for ids in owners.values()), owners
    assert len({next(iter(ids)) for ids in owners.values()}) > 1  # the keys are spread
    # Per key, the consumer saw the messages in publish order.
    for msgs in got.values():
        by_key: dict[str | None, list[str]] = defaultdict(list)
        for m in msgs:
            by_key[m.partition_key()].append(m.data().decode())
        for owned, payloads in by_key.items():
            if owned is not None:
                assert payloads == [f"{owned}/{r}" for r in range(4)]
    validate_history(cluster.history())


def test_routing_follows_the_auto_split_ranges() -> None:
    cluster = Cluster.start(seed=4)
    client = cluster.client()
    first = client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared)
    second = client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared)
    sub = cluster.broker.subscription(P0, "ks")
    assert sub is not None
    # The second consumer took the lower half of the only range: hashes 0 .. 32768.
    assert sub.consumers[second.consumer_id].hash_range_end == STICKY_KEY_HASH_RANGE // 2
    assert sub.consumers[first.consumer_id].hash_range_end == STICKY_KEY_HASH_RANGE
    producer = client.create_producer("topic")
    for key in KEYS:
        producer.send(key, partition_key=key)
    got = _drain([first, second])
    for cid, msgs in got.items():
        for m in msgs:
            low = sticky_key_hash(m.partition_key()) <= STICKY_KEY_HASH_RANGE // 2
            assert (cid == second.consumer_id) == low


def test_a_leaving_top_range_consumer_hands_its_range_down() -> None:
    cluster = Cluster.start(seed=5)
    client = cluster.client()
    first = client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared)
    second = client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared)
    third = client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared)
    sub = cluster.broker.subscription(P0, "ks")
    assert sub is not None
    assert sorted(s.hash_range_end for s in sub.consumers.values()) == [16384, 32768, 65536]
    first.close()
    ends = {cid: s.hash_range_end for cid, s in sub.consumers.items()}
    assert ends == {second.consumer_id: STICKY_KEY_HASH_RANGE, third.consumer_id: 16384}
    producer = client.create_producer("topic")
    for key in KEYS:
        producer.send(key, partition_key=key)
    owners = _owners(_drain([second, third]))
    assert all(len(ids) == 1 for ids in owners.values())


def test_unacked_messages_of_a_closed_consumer_move_to_the_new_owner_of_their_key() -> None:
    cluster = Cluster.start(seed=6)
    client = cluster.client()
    first = client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared)
    second = client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared)
    producer = client.create_producer("topic")
    for key in KEYS:
        producer.send(key, partition_key=key)
    held = _drain([first, second], ack=False)
    first_keys = {m.partition_key() for m in held[first.consumer_id]}
    assert first_keys
    first.close()
    again = _drain([second])
    assert {m.partition_key() for m in again[second.consumer_id]} == first_keys
    assert all(m.redelivery_count == 1 for m in again[second.consumer_id])


def test_a_recently_joined_consumer_waits_until_older_messages_are_acked() -> None:
    cluster = Cluster.start(seed=7)
    client = cluster.client()
    old = client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared)
    producer = client.create_producer("topic")
    for key in KEYS:
        producer.send(f"{key}/0", partition_key=key)
    before = [old.receive(20) for _ in KEYS]  # dispatched, not acknowledged
    assert all(m is not None for m in before)
    new = client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared)
    sub = cluster.broker.subscription(P0, "ks")
    assert sub is not None and sub.consumers[new.consumer_id].joined_after == before[-1].position  # type: ignore[union-attr]
    for key in KEYS:
        producer.send(f"{key}/1", partition_key=key)
    # The old consumer keeps its remaining keys; the keys the new one took over are held back.
    assert new.receive(20) is None
    old_now = _drain([old], ack=False)[old.consumer_id]
    taken = {k for k in KEYS if sticky_key_hash(k) <= STICKY_KEY_HASH_RANGE // 2}
    assert taken and {m.partition_key() for m in old_now} == set(KEYS) - taken
    for m in before:
        assert m is not None
        old.acknowledge(m)
    # Everything read before it joined is acknowledged: the new consumer gets its keys, in order.
    got = _drain([new])[new.consumer_id]
    assert sorted(m.data().decode() for m in got) == sorted(f"{k}/1" for k in taken)
    assert sub.consumers[new.consumer_id].joined_after is None


def test_a_consumer_joining_an_idle_subscription_is_not_held() -> None:
    cluster = Cluster.start(seed=8)
    client = cluster.client()
    old = client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared)
    producer = client.create_producer("topic")
    producer.send("a", partition_key="a")
    msg = old.receive(20)
    assert msg is not None
    old.acknowledge(msg)
    new = client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared)
    sub = cluster.broker.subscription(P0, "ks")
    assert sub is not None and sub.consumers[new.consumer_id].joined_after is None


@given(st.lists(st.sampled_from(KEYS[:6]), min_size=1, max_size=30), st.integers(1, 4), st.integers(0, 2**16))
def test_stickiness_holds_for_any_keys_and_consumer_count(keys: list[str], count: int, seed: int) -> None:
    cluster = Cluster.start(seed=seed)
    client = cluster.client()
    consumers = [client.subscribe("topic", "ks", consumer_type=ConsumerType.KeyShared) for _ in range(count)]
    producer = client.create_producer("topic")
    for i, key in enumerate(keys):
        producer.send(f"{key}/{i}", partition_key=key)
    got = _drain(consumers)
    assert sum(len(v) for v in got.values()) == len(keys)
    assert all(len(ids) == 1 for ids in _owners(got).values())
