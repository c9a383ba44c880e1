"""Transaction-buffer snapshots on the namespace's system topics.

Snapshot records are keyed Avro records (:mod:`spec.snapshot_avro`) on three compacted system
topics of the topic's namespace: the snapshot and the segment index keyed by topic name, each
sealed segment keyed ``multiple-<sequence id>-<topic>``.  A tombstone (``null_value``, no payload)
deletes a key.  A loading topic reads them back as a table view: each key's last value.
"""

from __future__ import annotations

from engine.broker.component import read_all
from engine.storage.ledger import ManagedLedger
from reference import buffer as tb
from spec import snapshot_avro
from spec.errors import BadTopicEntry
from spec.topic_entry import TopicEntry, decode_topic_entry, encode_topic_entry

__all__ = [
    "INDEXES_TOPIC",
    "SEGMENTS_TOPIC",
    "SNAPSHOT_PRODUCER_NAME",
    "SNAPSHOT_TOPIC",
    "decode_keyed_message",
    "encode_keyed_message",
    "latest_by_key",
    "namespace_topic",
    "segment_key",
    "snapshot_messages",
    "snapshot_records",
]

SNAPSHOT_TOPIC = snapshot_avro.SNAPSHOT_TOPICS["TransactionBufferSnapshot"]
SEGMENTS_TOPIC = snapshot_avro.SNAPSHOT_TOPICS["TransactionBufferSnapshotSegment"]
INDEXES_TOPIC = snapshot_avro.SNAPSHOT_TOPICS["TransactionBufferSnapshotIndexes"]
SYSTEM_TOPICS = (SNAPSHOT_TOPIC, SEGMENTS_TOPIC, INDEXES_TOPIC)
_SEGMENT_KEY_PREFIX = "multiple-"
SNAPSHOT_PRODUCER_NAME = "txnmodel-tb-snapshot"  # the producer of every snapshot-topic message


def namespace_topic(topic: str, local_name: str) -> str:
    """The system topic ``local_name`` of ``topic``'s namespace (``persistent://tenant/ns/local_name``)."""
    scheme, _, rest = topic.partition("://")
    tenant, namespace = rest.split("/")[:2]
    return f"{scheme}://{tenant}/{namespace}/{local_name}"


def segment_key(topic: str, sequence_id: int) -> str:
    """The key of a sealed segment: ``multiple-<sequence id>-<topic>``."""
    return f"{_SEGMENT_KEY_PREFIX}{sequence_id}-{topic}"


def _parse_segment_key(key: str) -> tuple[str, int] | None:
    if not key.startswith(_SEGMENT_KEY_PREFIX):
        return None
    sequence, _, topic = key[len(_SEGMENT_KEY_PREFIX) :].partition("-")
    return (topic, int(sequence)) if sequence.isdigit() and topic else None


def encode_keyed_message(key: str, value: bytes | None, publish_time: int = 0, sequence_id: int = 0) -> bytes:
    """A system-topic message: ``partition_key`` is the key, the payload the value; ``value=None``
    is a tombstone (``null_value``, empty payload)."""
    return encode_topic_entry(
        TopicEntry(
            producer_name=SNAPSHOT_PRODUCER_NAME,
            sequence_id=sequence_id,
            publish_time=publish_time,
            partition_key=key,
            null_value=value is None,
            payload=value or b"",
        )
    )


def decode_keyed_message(data: bytes) -> tuple[str, bytes | None]:
    """(key, value) of a system-topic message; value None for a tombstone."""
    message = decode_topic_entry(data)
    if message.partition_key is None:
        raise BadTopicEntry("a snapshot-topic message without a key", offset=4)
    return message.partition_key, None if message.null_value else message.payload


def snapshot_messages(effect: tb.SnapshotEffect) -> list[tuple[str, str, bytes | None]]:
    """The (system topic, key, value) messages that carry out a buffer snapshot effect (TB-20)."""
    if isinstance(effect, tb.WriteSnapshot):
        snap = effect.snapshot
        return [(SNAPSHOT_TOPIC, snap.topic_name, snapshot_avro.encode_snapshot(snap.to_pb()))]
    if isinstance(effect, tb.WriteSnapshotSegment):
        seg = effect.segment
        return [
            (SEGMENTS_TOPIC, segment_key(seg.topic_name, seg.sequence_id), snapshot_avro.encode_segment(seg.to_pb()))
        ]
    if isinstance(effect, tb.WriteSnapshotIndexes):
        return [(INDEXES_TOPIC, effect.indexes.topic_name, snapshot_avro.encode_indexes(effect.indexes.to_pb()))]
    if isinstance(effect, tb.DeleteSnapshotSegment):
        return [(SEGMENTS_TOPIC, segment_key(effect.topic_name, effect.sequence_id), None)]
    if isinstance(effect, tb.ClearSnapshot):
        # The topic's keys on both topics keyed by topic name; its segments get their own tombstones.
        return [(SNAPSHOT_TOPIC, effect.topic_name, None), (INDEXES_TOPIC, effect.topic_name, None)]
    raise TypeError(f"not a snapshot effect: {effect!r}")


def snapshot_records(topic: str, tables: dict[str, dict[str, bytes]]) -> list[tb.SnapshotEffect]:
    """The snapshot effects that rebuild ``topic``'s snapshot store from the system topics' latest
    value per key (``tables``: system topic -> key -> value, tombstoned keys absent)."""
    where = f"{topic} on {namespace_topic(topic, '')}"
    records: list[tb.SnapshotEffect] = []
    value = tables.get(SNAPSHOT_TOPIC, {}).get(topic)
    if value is not None:
        records.append(
            tb.WriteSnapshot(tb.TransactionBufferSnapshot.from_pb(snapshot_avro.decode_snapshot(value, where=where)))
        )
    segments = []
    for key, value in tables.get(SEGMENTS_TOPIC, {}).items():
        parsed = _parse_segment_key(key)
        if parsed is not None and parsed[0] == topic:
            segments.append((parsed[1], value))
    for _, value in sorted(segments):
        records.append(
            tb.WriteSnapshotSegment(
                tb.TransactionBufferSnapshotSegment.from_pb(snapshot_avro.decode_segment(value, where=where))
            )
        )
    value = tables.get(INDEXES_TOPIC, {}).get(topic)
    if value is not None:
        records.append(
            tb.WriteSnapshotIndexes(
                tb.TransactionBufferSnapshotIndexes.from_pb(snapshot_avro.decode_indexes(value, where=where))
            )
        )
    return records


def latest_by_key(ledger: ManagedLedger) -> dict[str, bytes]:
    """What a compacted topic (or a table view) holds: each key's last value, tombstoned keys dropped."""
    table: dict[str, bytes] = {}
    for _, data in read_all(ledger):
        key, value = decode_keyed_message(data)
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table
