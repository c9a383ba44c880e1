"""Transaction-buffer snapshots on the namespace's system topics, as keyed Avro records (TB-20, TB-24)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.broker import (
    INDEXES_TOPIC,
    SEGMENTS_TOPIC,
    SNAPSHOT_TOPIC,
    decode_keyed_message,
    encode_keyed_message,
    latest_by_key,
    namespace_topic,
    partition_name,
    read_all,
    segment_key,
    snapshot_messages,
    snapshot_records,
)
from engine.ledger_store import _file_name
from engine.simulation.client import Cluster
from engine.storage.inspect import inspect_directory, inspect_entry
from engine.storage.memory_ledger import MemoryLedger
from reference import buffer as tb
from spec import snapshot_avro
from spec.config import Config
from spec.types import Position, TxnID

IN = partition_name("in", 0)
OUT = partition_name("out", 0)
NS = "persistent://public/default"


def _config(**overrides: object) -> Config:
    return Config().with_overrides(dict(overrides))


def _abort_some(cluster: Cluster, count: int, topic: str = "in") -> list[TxnID]:
    client = cluster.client()
    producer = client.create_producer(topic)
    aborted = []
    for i in range(count):
        txn = client.new_transaction(600_000)
        producer.send(f"a{i}", txn=txn)
        txn.abort()
        aborted.append(txn.txn_id)
    return aborted


def _table(cluster: Cluster, local: str) -> dict[str, bytes]:
    return latest_by_key(cluster.broker.system_topic(namespace_topic(IN, local)))


def test_namespace_topic_names() -> None:
    assert namespace_topic(IN, SNAPSHOT_TOPIC) == f"{NS}/__transaction_buffer_snapshot"
    assert (
        namespace_topic("persistent://t1/ns1/x-partition-2", SEGMENTS_TOPIC)
        == "persistent://t1/ns1/__transaction_buffer_snapshot_segments"
    )
    assert segment_key(IN, 7) == f"multiple-7-{IN}"


def test_keyed_messages_and_tombstones_round_trip() -> None:
    assert decode_keyed_message(encode_keyed_message("k", b"\x01\x02", 5)) == ("k", b"\x01\x02")
    assert decode_keyed_message(encode_keyed_message("k", None)) == ("k", None)
    assert decode_keyed_message(encode_keyed_message("k", b"")) == ("k", b"")  # empty is not a tombstone
    ledger = MemoryLedger("t", Config())
    for key, value in [("a", b"1"), ("b", b"2"), ("a", b"3"), ("b", None), ("c", None)]:
        ledger.append(encode_keyed_message(key, value))
    assert latest_by_key(ledger) == {"a": b"3"}


def test_single_mode_writes_avro_snapshots_keyed_by_topic_and_recovers_from_them() -> None:
    cluster = Cluster.start(seed=1, topics={"in": 1, "out": 1})
    aborted = _abort_some(cluster, 2)
    interval = cluster.broker.config.transaction_buffer_snapshot_min_time_in_millis
    cluster.sim.advance(interval + 10)
    table = _table(cluster, SNAPSHOT_TOPIC)
    assert set(table) == {IN}  # "out" never changed, so it took no periodic snapshot
    snapshot = tb.TransactionBufferSnapshot.from_pb(snapshot_avro.decode_snapshot(table[IN]))
    live = cluster.broker.partition(IN).state
    assert live is not None
    assert snapshot.topic_name == IN and snapshot.max_read_position == live.max_read_position
    assert [a.txn_id for a in snapshot.aborts] == aborted
    assert _table(cluster, SEGMENTS_TOPIC) == {} and _table(cluster, INDEXES_TOPIC) == {}
    cluster.broker.crash()
    cluster.broker.restart()
    recovered = cluster.broker.partition(IN).state
    assert recovered is not None
    assert recovered.aborted == live.aborted and recovered.max_read_position == live.max_read_position
    assert recovered.snapshot_store.snapshot == live.snapshot_store.snapshot


def test_partitions_of_a_namespace_share_the_system_topic() -> None:
    cluster = Cluster.start(seed=2, topics={"in": 1, "out": 1})
    _abort_some(cluster, 1, "in")
    _abort_some(cluster, 2, "out")
    cluster.sim.advance(cluster.broker.config.transaction_buffer_snapshot_min_time_in_millis + 10)
    ledger = cluster.broker.system_topic(namespace_topic(IN, SNAPSHOT_TOPIC))
    assert ledger is cluster.broker.system_topic(namespace_topic(OUT, SNAPSHOT_TOPIC))
    keys = [decode_keyed_message(data)[0] for _, data in read_all(ledger)]
    assert set(keys) == {IN, OUT}
    tables = {SNAPSHOT_TOPIC: latest_by_key(ledger)}
    mine = snapshot_records(OUT, tables)
    assert len(mine) == 1 and isinstance(mine[0], tb.WriteSnapshot)
    assert len(mine[0].snapshot.aborts) == 2


def test_segmented_mode_writes_segments_and_indexes_and_recovers_from_them() -> None:
    config = _config(transactionBufferSegmentedSnapshotEnabled=True, transactionBufferSnapshotSegmentSize=64)
    cluster = Cluster.start(seed=3, topics={"in": 1}, config=config)
    aborted = _abort_some(cluster, 8)
    cluster.sim.advance(config.transaction_buffer_snapshot_min_time_in_millis + 10)
    live = cluster.broker.partition(IN).state
    assert live is not None and live.segments  # at least one sealed segment
    segments = _table(cluster, SEGMENTS_TOPIC)
    assert set(segments) == {segment_key(IN, s.sequence_id) for s in live.segments}
    for key, value in segments.items():
        decoded = snapshot_avro.decode_segment(value)
        assert key == segment_key(decoded.topicName, decoded.sequenceId)
    indexes = snapshot_avro.decode_indexes(_table(cluster, INDEXES_TOPIC)[IN])
    assert len(indexes.indexList) == len(live.segments)
    assert _table(cluster, SNAPSHOT_TOPIC) == {}
    cluster.broker.crash()
    cluster.broker.restart()
    recovered = cluster.broker.partition(IN).state
    assert recovered is not None
    assert recovered.segments == live.segments and recovered.aborted == live.aborted
    sealed = {t for segment in recovered.segments for t in segment.aborts}
    assert sealed | set(recovered.aborted) == set(aborted)
    assert recovered.max_read_position == live.max_read_position


def test_segment_delete_and_clear_are_tombstones() -> None:
    delete = snapshot_messages(tb.DeleteSnapshotSegment(IN, 4))
    assert delete == [(SEGMENTS_TOPIC, segment_key(IN, 4), None)]
    clear = snapshot_messages(tb.ClearSnapshot(IN))
    assert clear == [(SNAPSHOT_TOPIC, IN, None), (INDEXES_TOPIC, IN, None)]
    seg = tb.TransactionBufferSnapshotSegment(IN, 4, Position(0, 9), (TxnID(0, 1),))
    ((_topic, key, value),) = snapshot_messages(tb.WriteSnapshotSegment(seg))
    ledger = MemoryLedger("segments", Config())
    ledger.append(encode_keyed_message(key, value))
    assert [type(r) for r in snapshot_records(IN, {SEGMENTS_TOPIC: latest_by_key(ledger)})] == [tb.WriteSnapshotSegment]
    ledger.append(encode_keyed_message(*delete[0][1:]))
    assert snapshot_records(IN, {SEGMENTS_TOPIC: latest_by_key(ledger)}) == []
    # Another topic's segment with a similar name is not this topic's.
    ledger.append(encode_keyed_message(segment_key(IN + "x", 1), value))
    assert snapshot_records(IN, {SEGMENTS_TOPIC: latest_by_key(ledger)}) == []


def test_a_failed_snapshot_write_reloads_the_partition_and_reopens_the_system_topic() -> None:
    cluster = Cluster.start(seed=4, topics={"in": 1})
    _abort_some(cluster, 1)
    name = namespace_topic(IN, SNAPSHOT_TOPIC)
    handle = cluster.broker.system_topic(name)
    handle.close()  # the next append fails
    loads_before = cluster.broker.partition(IN)._epoch
    cluster.sim.advance(cluster.broker.config.transaction_buffer_snapshot_min_time_in_millis + 200)
    assert cluster.broker.partition(IN)._epoch > loads_before
    assert cluster.broker.system_topic(name) is not handle
    assert cluster.broker.partition(IN).ready


def test_inspect_decodes_snapshot_topic_records(tmp_path: Path) -> None:
    config = _config(transactionBufferSegmentedSnapshotEnabled=True, transactionBufferSnapshotSegmentSize=64)
    cluster = Cluster.start(seed=5, topics={"in": 1}, config=config, ledger="file", data_dir=str(tmp_path))
    try:
        _abort_some(cluster, 5)
        cluster.sim.advance(config.transaction_buffer_snapshot_min_time_in_millis + 10)
    finally:
        cluster.close()
    report = inspect_directory(tmp_path / _file_name(namespace_topic(IN, SEGMENTS_TOPIC)))
    assert report["ok"]
    messages = [f["entry"]["message"] for ledger in report["ledgers"] for f in ledger["entries"]]
    assert messages and all(m["key"].startswith("multiple-") for m in messages)
    assert all(m["record"]["TransactionBufferSnapshotSegment"]["topicName"] == IN for m in messages)
    index_report = inspect_directory(tmp_path / _file_name(namespace_topic(IN, INDEXES_TOPIC)))
    first = index_report["ledgers"][0]["entries"][0]["entry"]["message"]
    assert first["key"] == IN and "TransactionBufferSnapshotIndexes" in first["record"]
    tombstone = inspect_entry(encode_keyed_message(IN, None))["message"]
    assert {k: tombstone[k] for k in ("key", "null_value", "num_messages_in_batch", "record", "errors")} == {
        "key": IN,
        "null_value": True,
        "num_messages_in_batch": None,
        "record": {},
        "errors": {},
    }
    assert tombstone["payload"] is None and tombstone["batch"] is None  # a tombstone carries nothing


@pytest.mark.parametrize("batching", [False, True])
def test_snapshot_records_survive_log_batching_settings(batching: bool) -> None:
    cluster = Cluster.start(seed=6, topics={"in": 1}, batching=batching)
    _abort_some(cluster, 3)
    cluster.sim.advance(cluster.broker.config.transaction_buffer_snapshot_min_time_in_millis + 10)
    assert IN in _table(cluster, SNAPSHOT_TOPIC)
