"""Examples and edge cases, rule by rule (spec/rules/delayed.md)."""

from __future__ import annotations

import struct

import immutables
import pytest
from pyroaring import BitMap, FrozenBitMap

from reference import delayed as d
from spec.config import Config
from spec.pb import DelayedMessageIndexBucketMetadata_pb2 as meta_pb
from spec.pb import DelayedMessageIndexBucketSegment_pb2 as seg_pb
from spec.result import Err, Ok
from tests.delayed.helpers import add, bucket, config, get, run

KINDS = ("bucket", "in_memory")


@pytest.mark.parametrize("kind", KINDS)
def test_dd1_dd2_cutoff_non_strict_and_strict(kind: str) -> None:
    """DD-1, DD-2: catalogue #18/#21 and AbstractDeliveryTrackerTest's tick-100 table."""
    state = d.initial(config(delayedDeliveryTickTimeMillis=100), tracker=kind)
    accepted = []
    for deliver_at in (10, 99, 100, 101, 200, -1):
        state, ok = add(state, 1, deliver_at + 1, deliver_at, now=0)
        accepted.append(ok)
    assert accepted == [False, False, False, True, True, False]
    strict = d.initial(config(isDelayedDeliveryDeliverAtTimeStrict=True), tracker=kind)
    outcomes = []
    for i, deliver_at in enumerate((9, 10, 11)):
        strict, ok = add(strict, 1, i, deliver_at, now=10)
        outcomes.append(ok)
    assert outcomes == [False, False, True]
    assert strict.count == 1
    assert not d._has_available(strict, 10)


def test_dd2_rejection_forgets_an_existing_bit() -> None:
    """DD-2: the cutoff check precedes the duplicate check and drops the old bit (#26251)."""
    state, _ = add(bucket(), 1, 1, 5000, now=0)
    assert state.count == 1
    state, ok = add(state, 1, 1, 10, now=3000)
    assert ok is False and state.count == 0 and not d.contains_message(state, 1, 1)
    state, delivered = get(state, 10, 10_000)
    assert delivered == []  # the stale queued index is dropped at pop (DD-15)


def test_dd2_dd8_seal_after_a_due_readd_raises_nothing() -> None:
    """DD-2, DD-8: a due re-add leaves a stale index in the mutable queue; sealing skips it."""
    state = bucket(
        isDelayedDeliveryDeliverAtTimeStrict=True,
        delayedDeliveryTickTimeMillis=1,
        delayedDeliveryMinIndexCountPerBucket=1,
    )
    state, _ = add(state, 1, 0, 100, now=0)
    state, ok = add(state, 1, 0, 100, now=200)
    assert ok is False and state.count == 0
    state, ok = add(state, 2, 0, 500, now=200)  # seals the mutable bucket holding only the stale index
    assert ok is True and state.count == 1 and not d.contains_message(state, 1, 0)
    state, delivered = get(state, 10, 1000)
    assert delivered == [(2, 0)]


def test_dd2_dd8_seal_never_re_tracks_a_delivered_message() -> None:
    """DD-2, DD-8: the stale index is not sealed, and the other message of its ledger keeps its bit."""
    state = bucket(
        isDelayedDeliveryDeliverAtTimeStrict=True,
        delayedDeliveryTickTimeMillis=1,
        delayedDeliveryMinIndexCountPerBucket=2,
    )
    state, _ = add(state, 1, 0, 100, now=0)
    state, _ = add(state, 2, 0, 300, now=0)
    state, _ = add(state, 1, 1, 300, now=0)  # ledger 1 is below the mutable range: routed to the shared queue
    state, ok = add(state, 1, 0, 100, now=200)  # due now: delivered directly by the dispatcher
    assert ok is False
    state, _ = add(state, 3, 0, 500, now=200)  # seals
    assert state.count == 3
    assert d.contains_message(state, 1, 1) and not d.contains_message(state, 1, 0)
    state, delivered = get(state, 10, 1000)
    assert sorted(delivered) == [(1, 1), (2, 0), (3, 0)]
    assert state.count == 0


def test_dd3_duplicates_change_nothing() -> None:
    state, _ = add(bucket(), 3, 3, 5000)
    again, ok = add(state, 3, 3, 5000)
    assert ok is True and again == state


def test_dd29_in_memory_queues_duplicates_twice() -> None:
    state = d.initial(config(), tracker="in_memory")
    state, _ = add(state, 3, 3, 5000)
    state, _ = add(state, 3, 3, 5000)
    assert state.count == 2
    state, delivered = get(state, 10, 10_000)
    assert delivered == [(3, 3)] and state.count == 0
    restarted, result = d.step(state, d.Restart(0))
    assert result == Ok(0) and restarted.count == 0


def test_dd4_dd8_dd9_worked_example_max_indexes_per_segment() -> None:
    """DD-4, DD-8, DD-9: catalogue #31 (C8): 5 buckets of 4 segments, message 101 mutable."""
    state = bucket(
        delayedDeliveryMinIndexCountPerBucket=20,
        delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=3600,
        delayedDeliveryMaxIndexesPerBucketSnapshotSegment=5,
        delayedDeliveryTickTimeMillis=1,
    )
    for i in range(1, 102):
        state, ok = add(state, i, i, 10 * i)
        assert ok
    assert d.bucket_ranges(state) == tuple((20 * k + 1, 20 * k + 20) for k in range(5))
    assert all(b.last_segment == 4 and b.current_segment == 1 for b in state.buckets)
    assert (state.mutable.start_ledger_id, state.mutable.end_ledger_id, state.mutable.size) == (101, 101, 1)
    assert state.count == 101


def test_dd9_time_step_zero_gives_one_index_per_segment_and_ties_split_by_max() -> None:
    params = d.Params(time_step_ms=0, max_indexes_per_segment=-1)
    assert [len(s) for s in d.cut_segments([(1, 1, 1), (1, 1, 2), (2, 1, 3)], params)] == [1, 1, 1]
    params = d.Params(time_step_ms=10_000, max_indexes_per_segment=2)
    cut = d.cut_segments([(5, 1, 1), (5, 1, 2), (5, 1, 3), (20_000, 1, 4)], params)
    assert cut == [[(5, 1, 1), (5, 1, 2)], [(5, 1, 3)], [(20_000, 1, 4)]]
    # A segment spans at most time_step ms: first + step - 1 is the last deliver-at it takes.
    params = d.Params(time_step_ms=10, max_indexes_per_segment=-1)
    assert [len(s) for s in d.cut_segments([(0, 1, 1), (9, 1, 2), (10, 1, 3)], params)] == [2, 1]


def test_dd5_dd6_dd7_placement_and_direct_routing() -> None:
    """DD-5, DD-6, DD-7: a ledger inside a bucket, or below the mutable range, goes to the
    shared queue with its bit in the mutable bitmap; ranges stay disjoint."""
    state = bucket(delayedDeliveryMinIndexCountPerBucket=2)
    for ledger in (1, 2, 3):
        state, _ = add(state, ledger, 0, 10_000 + ledger)
    assert d.bucket_ranges(state) == ((1, 2),)
    state, _ = add(state, 2, 7, 20_000)  # inside bucket [1, 2]
    assert state.mutable.size == 1 and d.contains_message(state, 2, 7)
    assert 7 in state.mutable.bitmaps[2]
    state, _ = add(state, 5, 0, 20_000)
    state, _ = add(state, 4, 0, 20_000)  # below the mutable end
    assert state.mutable.end_ledger_id == 5 and 0 in state.mutable.bitmaps[4]
    # Out of order: a ledger between buckets with an empty mutable range is routed directly.
    state, _ = add(state, 9, 0, 30_000)
    state, _ = add(state, 10, 0, 30_000)  # seals [3..9]
    state, _ = add(state, 0, 0, 30_000)
    assert state.mutable.start_ledger_id > max(e for _, e in d.bucket_ranges(state))


def test_dd10_lazy_loading_and_dd19_delete_on_last_segment() -> None:
    """DD-10, DD-19: segments load one at a time; the bucket is deleted after its last one."""
    state = bucket(
        delayedDeliveryMinIndexCountPerBucket=4,
        delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=0,
    )
    for i in range(1, 6):
        state, _ = add(state, 1 if i < 5 else 2, i, 1000 * i + 5000)
    (b,) = state.buckets
    assert (b.current_segment, b.last_segment) == (1, 4)
    assert d.metrics(state)["loaded"] == 2  # segment 1 + the mutable message
    key = b.key
    state, delivered = get(state, 2, 7000)
    assert delivered == [(1, 1), (1, 2)]
    assert state.buckets[0].current_segment == 3
    state, delivered = get(state, 10, 100_000)
    assert delivered == [(1, 3), (1, 4), (2, 5)]
    assert state.buckets == () and key not in state.storage.properties and not state.storage.snapshots
    assert d.metrics(state)["op_count_delete_succeed"] == 1


def test_dd11_contains_after_delivery() -> None:
    """DD-11: catalogue #25."""
    state, _ = add(bucket(delayedDeliveryTickTimeMillis=1), 1, 1, 10)
    assert d.contains_message(state, 1, 1)
    state, delivered = get(state, 10, 20)
    assert delivered == [(1, 1)] and not d.contains_message(state, 1, 1)
    for i in range(3, 7):
        state, _ = add(state, i, i, 30, now=20)
    assert d.contains_message(state, 3, 3)


def test_dd12_dd13_ordering_limits_and_sorted_result() -> None:
    """DD-12, DD-13: catalogue #18 and #57 — selection by (deliver_at, ledger, entry), result
    sorted by position, at most max."""
    state = bucket(delayedDeliveryTickTimeMillis=1)
    for ledger, entry, t in [(1, 2, 20), (2, 1, 10), (3, 3, 30), (4, 5, 50), (5, 4, 40)]:
        state, _ = add(state, ledger, entry, t)
    assert d.next_delivery_time(state) == 10
    state, delivered = get(state, 1, 60)
    assert delivered == [(2, 1)]
    state, delivered = get(state, 3, 60)
    assert delivered == [(1, 2), (3, 3), (5, 4)]
    assert state.count == 1
    state, delivered = get(state, 5, 60)
    assert delivered == [(4, 5)]
    assert d.next_delivery_time(state) == d.NO_TIMESTAMP
    state, result = run(state, d.HasMessageAvailable(100))
    assert result == Ok(False)


def test_dd14_create_failure_goes_to_memory_mode() -> None:
    """DD-14, DD-17: four create failures exhaust the retries; every segment is queued."""
    state = bucket(
        delayedDeliveryMinIndexCountPerBucket=3,
        delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=0,
    )
    state, _ = run(state, d.InjectStorageFailure("create", 4))
    for ledger in (1, 1, 1, 2):
        state, _ = add(state, ledger, state.count, 5000 + state.count)
    (b,) = state.buckets
    assert b.bucket_id == -1 and b.boundary is None and not state.storage.properties
    assert d.metrics(state)["loaded"] == 4 and d.metrics(state)["op_count_create_failed"] == 1
    state, delivered = get(state, 10, 10_000)
    assert len(delivered) == 4 and state.buckets == ()


def test_dd17_three_failures_are_absorbed_by_retries() -> None:
    state = bucket(delayedDeliveryMinIndexCountPerBucket=1)
    state, _ = run(state, d.InjectStorageFailure("create", 3))
    state, _ = add(state, 1, 0, 5000)
    state, _ = add(state, 2, 0, 5000)
    assert state.buckets[0].bucket_id >= 0 and state.storage.failures["create"] == 0


def test_dd15_dd16_load_failure_stops_the_round_then_recovers() -> None:
    """DD-15, DD-16: catalogue #29 — a failed load returns nothing this round, all later."""
    state = bucket(
        delayedDeliveryMinIndexCountPerBucket=3,
        delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=0,
    )
    for i in range(3):
        state, _ = add(state, 1, i, 5000 + i)
    state, _ = add(state, 2, 0, 9000)
    state, _ = run(state, d.InjectStorageFailure("load", 4))
    state, first = get(state, 100, 20_000)
    assert first == [] and state.buckets[0].current_segment == 1
    state, later = get(state, 100, 20_000)
    assert later == [(1, 0), (1, 1), (1, 2), (2, 0)]


def test_dd18_snapshot_layout_and_portable_bitmaps() -> None:
    """DD-18: catalogue #27/#45 — entry 0 metadata with min/max and portable roaring bitmaps."""
    state = bucket(delayedDeliveryMinIndexCountPerBucket=2, delayedDeliveryMaxIndexesPerBucketSnapshotSegment=1)
    state, _ = add(state, 100, 1, 5000)
    state, _ = add(state, 100, 2, 6000)
    state, result = run(state, d.AddMessage(101, 0, 7000, 0))
    assert isinstance(result, Ok)
    created = [e for e in result.effects if isinstance(e, d.CreateBucketSnapshot)]
    props = [e for e in result.effects if isinstance(e, d.SetCursorProperty)]
    assert len(created) == 1 and props == [d.SetCursorProperty("#pulsar.internal.delayed.bucket_100_100", "1")]
    snapshot = created[0].snapshot
    metadata = d.encode_metadata(snapshot.metadata, meta_pb)
    parsed = meta_pb.SnapshotMetadata.FromString(metadata.SerializeToString())
    assert [(m.min_schedule_timestamp, m.max_schedule_timestamp) for m in parsed.metadata_list] == [
        (5000, 5000),
        (6000, 6000),
    ]
    assert list(BitMap.deserialize(parsed.metadata_list[1].delayed_index_bit_map[100])) == [2]
    segment = seg_pb.SnapshotSegment()
    for ts, ledger, entry in snapshot.segments[0].indexes():
        segment.indexes.add(timestamp=ts, ledger_id=ledger, entry_id=entry)
    assert d.segment_length(snapshot.segments[0]) == len(segment.SerializeToString())
    assert snapshot.length == len(metadata.SerializeToString()) + sum(d.segment_length(s) for s in snapshot.segments)


def test_dd18_pyroaring_serializes_the_portable_format() -> None:
    """DD-18: the documented RoaringBitmap portable format, byte for byte."""
    # No run containers: cookie 12346, container count, key/cardinality-1, offsets, values.
    bm = BitMap([1, 2, 3])
    expected = struct.pack("<IIHHI", 12346, 1, 0, 2, 16) + struct.pack("<HHH", 1, 2, 3)
    assert bm.serialize() == expected
    # With a run container: cookie 12347 | (n-1) << 16, run bitset, key/cardinality-1, runs.
    runs = BitMap(range(100))
    runs.run_optimize()
    assert runs.serialize() == struct.pack("<I", 12347) + b"\x01" + struct.pack("<HHHHH", 0, 99, 1, 0, 99)
    frozen = FrozenBitMap(runs)
    assert FrozenBitMap.deserialize(frozen.serialize()) == frozen
    assert FrozenBitMap.deserialize(frozen.serialize()).serialize() == frozen.serialize()


def _many_buckets(**overrides: object) -> d.BucketTracker:
    state = bucket(
        delayedDeliveryMinIndexCountPerBucket=5,
        delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=0,
        **overrides,
    )
    for i in range(1, 111):
        state, _ = add(state, i, i, 10 * i + 10_000)
    return state


def test_dd20_dd21_merge_snapshot() -> None:
    """DD-20, DD-21: MG6 testMergeSnapshot — bucket count bounded, count kept, restart recovers
    the sum, every message delivered once."""
    state = _many_buckets(delayedDeliveryMaxNumBuckets=10)
    assert len(state.buckets) <= 10 and state.count == 110
    assert d.metrics(state)["op_count_merge_succeed"] > 0
    assert len(state.storage.snapshots) == len(state.buckets)
    expected = sum(b.count for b in state.buckets)
    restarted, result = run(state, d.Restart(0))
    assert result == Ok(expected) or (isinstance(result, Ok) and result.value == expected)
    delivered: list[tuple[int, int]] = []
    for i in range(1, 111):
        restarted, _ = add(restarted, i, i, 10 * i + 10_000)
    restarted, delivered = get(restarted, 1000, 20_000)
    assert delivered == [(i, i) for i in range(1, 111)]


def test_dd20_selection_prefers_fewest_then_earliest() -> None:
    def b(start: int, count: int, next_ts: int) -> d.ImmutableBucket:
        return d.ImmutableBucket(start, start, start, d._EMPTY_BITMAPS, count, 1, 2, (0, next_ts), None)

    # Counts [5, 3, 2, 4, 3]: windows of 4 hold 14 and 12 messages; the second wins.
    assert d.select_merge([b(1, 5, 0), b(2, 3, 0), b(3, 2, 0), b(4, 4, 0), b(5, 3, 0)]) == (1, 5)
    # Equal totals: the earlier next-unloaded segment wins.
    assert d.select_merge([b(1, 1, 9), b(2, 1, 9), b(3, 1, 9), b(4, 1, 9), b(5, 1, 3)]) == (1, 5)
    three = [b(1, 5, 9), b(2, 1, 9), b(3, 1, 9), b(4, 5, 1)]
    assert d.select_merge(three) == (0, 4)
    assert d.select_merge(three[:1]) is None
    # Windows of 3: [0:3] has 7 messages, [1:4] has 7 too but an earlier next segment.
    assert d.select_merge([b(1, 5, 9), b(2, 1, 9), b(3, 1, 9), b(4, 5, 1), b(5, 100, 0)][:4]) == (0, 4)
    ineligible = d.ImmutableBucket(9, 9, 9, d._EMPTY_BITMAPS, 1, 2, 2, (0, 0), None)
    assert d.select_merge([b(1, 5, 9), ineligible, b(10, 1, 1), b(11, 1, 2)]) == (2, 4)


def test_dd20_no_merge_when_within_limit() -> None:
    """DD-20: catalogue #37 (max 50: no merge)."""
    state = _many_buckets(delayedDeliveryMaxNumBuckets=50)
    assert d.metrics(state)["op_count_merge_all"] == 0
    state, _ = add(state, 200, 0, 90_000)
    assert state.count == 111


def test_dd21_failed_merged_snapshot_keeps_the_sources() -> None:
    """DD-21: #26239 — sources are deleted only after the merged snapshot exists."""
    state = bucket(
        delayedDeliveryMinIndexCountPerBucket=2,
        delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=0,
        delayedDeliveryMaxNumBuckets=2,
    )
    for ledger in range(1, 6):
        state, _ = add(state, ledger, 0, 10_000 + ledger)
        state, _ = add(state, ledger, 1, 10_000 + ledger)
    before = dict(state.storage.properties)
    # The seal of ledger 5 uses four attempts (memory mode), the merged snapshot the next four.
    state, _ = run(state, d.InjectStorageFailure("create", 8))
    state, _ = add(state, 6, 0, 20_000)
    assert d.metrics(state)["op_count_merge_failed"] == 1
    assert before == dict(state.storage.properties)
    assert state.count == 11
    restarted, _ = run(state, d.Restart(0))
    # Ledger 5's bucket never reached storage and ledger 6 was mutable: the dispatcher re-adds them.
    assert restarted.count == 8


def test_dd22_trim_and_delete_failure() -> None:
    """DD-22: catalogue #34 — trim stops at the first failed delete; count unchanged."""
    state = bucket(
        delayedDeliveryMinIndexCountPerBucket=5,
        delayedDeliveryMaxNumBuckets=5,
    )
    state, _ = run(state, d.MarkDelete(50))
    state, _ = run(state, d.InjectStorageFailure("delete", 4))
    for i in range(1, 32):
        state, _ = add(state, i, i, 100_000 + i)
    assert state.count == 31
    assert d.metrics(state)["op_count_delete_failed"] >= 1


def test_dd22_trim_drops_buckets_below_mark_delete() -> None:
    state = bucket(delayedDeliveryMinIndexCountPerBucket=5, delayedDeliveryMaxNumBuckets=2)
    for i in range(1, 16):
        state, _ = add(state, i, i, 100_000 + i)
    state, _ = run(state, d.MarkDelete(11))
    for i in range(16, 22):
        state, _ = add(state, i, i, 100_000 + i)
    assert all(b.end_ledger_id >= 11 for b in state.buckets)
    assert all(not d.contains_message(state, i, i) for i in range(1, 11))


def test_dd22_orphaned_messages_are_not_returned() -> None:
    """DD-22: catalogue #38 — messages below the mark-delete ledger are dropped at pop."""
    state = bucket()
    for i in range(1, 6):
        state, _ = add(state, 1, i, 100 * i)
    state, _ = add(state, 2, 1, 600)
    state, _ = run(state, d.MarkDelete(50))
    state, delivered = get(state, 10, 700)
    assert delivered == []
    assert not d._has_available(state, 700)


def test_dd23_clear() -> None:
    """DD-23: catalogue #32/#35."""
    state = bucket(delayedDeliveryMinIndexCountPerBucket=10)
    for i in range(101):
        state, _ = add(state, i // 10 + 1, i, 5000 + i)
    state, _ = run(state, d.InjectStorageFailure("delete", 4))
    state, result = run(state, d.Clear())
    assert isinstance(result, Ok)
    assert state.count == 0 and state.buckets == () and state.shared == () and state.mutable.size == 0
    assert len(state.storage.snapshots) == 1  # the snapshot whose delete failed is an orphan


def test_dd24_recovery_worked_example() -> None:
    """DD-24: C9/R7 testRecoverSnapshot."""
    state = bucket(
        delayedDeliveryMinIndexCountPerBucket=5,
        delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=0,
        isDelayedDeliveryDeliverAtTimeStrict=True,
    )
    for i in range(1, 101):
        state, _ = add(state, i, i, 10 * i)
    assert len(state.buckets) == 19
    state, delivered = get(state, 100, 10)
    assert delivered == [(1, 1)]
    state, _ = add(state, 101, 101, 1010, now=10)
    state, result = run(state, d.Restart(300))
    assert result.ok and isinstance(result, Ok) and result.value == 70
    assert len(state.buckets) == 14 and not d.contains_message(state, 101, 101)
    state, delivered = get(state, 1000, 1000)
    assert delivered == [(i, i) for i in range(31, 101)]


def test_dd24_missing_ledger_is_dropped() -> None:
    state = bucket(delayedDeliveryMinIndexCountPerBucket=2)
    for ledger in (1, 1, 2):
        state, _ = add(state, ledger, state.count, 5000 + state.count)
    bucket_id = state.buckets[0].bucket_id
    state, _ = run(state, d.LoseBucketSnapshot(bucket_id))
    state, result = run(state, d.Restart(0))
    assert result == Ok(0, result.effects) and not state.storage.properties
    _, missing = d.step(state, d.LoseBucketSnapshot(99))
    assert isinstance(missing, Err) and missing.error.name == "BucketNotExist"


def _snapshot(start: int, end: int, deliver_at: int = 50_000) -> d.Snapshot:
    indexes = [(deliver_at + ledger, ledger, 0) for ledger in range(start, end + 1)]
    bits = {ledger: FrozenBitMap([0]) for ledger in range(start, end + 1)}
    meta = d.SegmentMeta(indexes[0][0], indexes[-1][0], immutables.Map(bits))
    return d.Snapshot(start, end, (meta,), (d.compact_run(indexes),), 0)


def test_dd26_overlapping_ranges_on_recovery() -> None:
    """DD-26: catalogue #39/#40 — [1,2] is enclosed by [1,4] and deleted; [3,6] overlaps [1,4]
    without enclosing it and is left alone; [7,7] is recovered."""
    storage = d.Storage(
        snapshots=immutables.Map({1: _snapshot(1, 2), 2: _snapshot(1, 4), 3: _snapshot(3, 6), 4: _snapshot(7, 7)}),
        properties=immutables.Map(
            {d.bucket_key(1, 2): "1", d.bucket_key(1, 4): "2", d.bucket_key(3, 6): "3", d.bucket_key(7, 7): "4"}
        ),
        next_bucket_id=5,
    )
    state, result = d.recover(bucket().params, storage, 0)
    assert isinstance(result, Ok) and result.value == 5
    assert d.bucket_ranges(state) == ((1, 4), (7, 7))
    assert 1 not in state.storage.snapshots and d.bucket_key(1, 2) not in state.storage.properties
    assert 3 in state.storage.snapshots and d.bucket_key(3, 6) in state.storage.properties
    assert [type(e).__name__ for e in result.effects[:2]] == ["DeleteBucketSnapshot", "RemoveCursorProperty"]


def test_dd27_recovery_failure_falls_back_to_in_memory() -> None:
    """DD-27: unreadable metadata -> RecoverDelayedDeliveryTracker, in-memory mode, storage kept."""
    state = bucket(delayedDeliveryMinIndexCountPerBucket=1)
    state, _ = add(state, 1, 0, 5000)
    state, _ = add(state, 2, 0, 5000)
    state, _ = run(state, d.InjectStorageFailure("metadata", 4))
    properties = state.storage.properties
    state, result = run(state, d.Restart(0))
    assert isinstance(result, Err) and result.error.name == "RecoverDelayedDeliveryTracker"
    assert state.fallback and state.count == 0 and state.storage.properties == properties
    for ledger in range(1, 10):
        state, _ = add(state, ledger, 0, 6000)
    assert state.buckets == () and state.mutable.size == 9
    state, result = run(state, d.Restart(0))
    assert isinstance(result, Ok) and not state.fallback and state.count == 1


def test_dd25_timer_targets_and_stale_timers() -> None:
    """DD-25: catalogue #19 (targets 20 -> 10 -> 10) and #52 (a stale timer is ignored)."""
    for kind in KINDS:
        state = d.initial(config(delayedDeliveryTickTimeMillis=1), tracker=kind)
        targets = []
        for ledger, t in ((1, 20), (2, 10), (3, 30)):
            state, _ = add(state, ledger, 0, t)
            targets.append(state.timer.target)
        assert targets == [20, 10, 10]
        same, result = run(state, d.TimerFired(20, 10))
        assert result == Ok(False) and same == state
        state, result = run(state, d.TimerFired(10, 10))
        assert result == Ok(True, (d.ReadMoreEntries(),)) and state.timer.last_tick_run == 10


def test_dd25_timer_never_sooner_than_a_tick_after_the_last_run() -> None:
    """DD-25: catalogue #22 — after a timer run at 10000 a message due at 10001 waits a tick."""
    state = bucket(isDelayedDeliveryDeliverAtTimeStrict=True)
    state, _ = add(state, 1, 0, 10_000)
    state, _ = run(state, d.TimerFired(10_000, 10_000))
    state, result = run(state, d.AddMessage(1, 1, 10_001, 10_000))
    assert isinstance(result, Ok)
    schedule = [e for e in result.effects if isinstance(e, d.ScheduleTimer)]
    assert schedule == [d.ScheduleTimer(10_000, 1000)] or schedule[-1].delay_ms == 1000


def test_dd28_metrics_bucket_total() -> None:
    """DD-28: catalogue #55 — 101 messages, 50 per ledger, minIndex 50 -> 3 buckets in total."""
    state = bucket(delayedDeliveryMinIndexCountPerBucket=50)
    for i in range(101):
        state, _ = add(state, i // 50 + 1, i % 50, 100_000 + i)
    m = d.metrics(state)
    assert m["bucket_total"] == 3 and m["delayed"] == 101
    assert m["snapshot_size_bytes"] == sum(s.length for s in state.storage.snapshots.values()) > 0
    assert m["op_count_create_succeed"] == 2


def test_dd30_is_covered_by_the_engine_tests() -> None:
    """DD-30 lives in engine/delayed/shared.py; see tests/engine/delayed/test_shared.py."""
    from engine.delayed import shared as delayed_shared

    assert delayed_shared.SharedDelayedIndex is not None


def test_programming_errors_raise() -> None:
    with pytest.raises(ValueError):
        d.step(bucket(), d.AddMessage(-1, 0, 5, 0))
    with pytest.raises(ValueError):
        d.step(bucket(), d.InjectStorageFailure("nope"))
    with pytest.raises(ValueError):
        d.initial(config(), tracker="nope")


def _async_bucket(**overrides: object) -> d.BucketTracker:
    state = d.initial(config(**overrides), async_create=True)
    assert isinstance(state, d.BucketTracker)
    return state


def test_dd31_async_create_holds_the_boundary_until_created() -> None:
    """DD-31: the first segment is served at once; the next waits for the snapshot."""
    state = _async_bucket(
        delayedDeliveryMinIndexCountPerBucket=3, delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=0
    )
    for i in range(3):
        state, _ = add(state, 1, i, 5000 + i)
    state, result = run(state, d.AddMessage(2, 0, 9000, 0))
    assert isinstance(result, Ok)
    (request,) = [e for e in result.effects if isinstance(e, d.RequestCreateBucketSnapshot)]
    (b,) = state.buckets
    assert b.bucket_id == -1 and b.pending_create == request.request_id and not state.storage.properties
    state, delivered = get(state, 100, 20_000)
    assert delivered == []  # the boundary (1, 0) is the head and waits: segment 2 cannot be read yet
    state, done = run(state, d.CompleteBucketSnapshot(request.request_id, True))
    assert isinstance(done, Ok) and done.value >= 1
    assert dict(state.storage.properties) == {d.bucket_key(1, 1): str(done.value)}
    state, delivered = get(state, 100, 20_000)
    assert delivered == [(1, 0), (1, 1), (1, 2), (2, 0)] and state.count == 0
    _, unknown = d.step(state, d.CompleteBucketSnapshot(request.request_id, True))
    assert isinstance(unknown, Err)


def test_dd31_async_create_failure_goes_to_memory_mode() -> None:
    """DD-31, DD-14."""
    state = _async_bucket(
        delayedDeliveryMinIndexCountPerBucket=3, delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=0
    )
    for i in range(3):
        state, _ = add(state, 1, i, 5000 + i)
    state, _ = add(state, 2, 0, 9000)
    state, failed = run(state, d.CompleteBucketSnapshot(1, False))
    assert failed == Ok(-1) and state.buckets[0].boundary is None
    state, delivered = get(state, 100, 20_000)
    assert delivered == [(1, 0), (1, 1), (1, 2), (2, 0)]


def test_dd31_merge_sources_deleted_only_after_the_merged_snapshot_exists() -> None:
    """DD-31, DD-21: #26239 with asynchronous creation."""
    state = _async_bucket(
        delayedDeliveryMinIndexCountPerBucket=2,
        delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=0,
        delayedDeliveryMaxNumBuckets=2,
    )

    def merged_pending(s: d.BucketTracker) -> list[d.ImmutableBucket]:
        return [b for b in s.buckets if b.pending_create and b.start_ledger_id < b.end_ledger_id]

    for ledger in range(1, 10):
        state, _ = add(state, ledger, 0, 10_000 + ledger)
        state, _ = add(state, ledger, 1, 10_000 + ledger)
        if merged_pending(state):
            break
        for b in state.buckets:
            if b.pending_create:
                state, _ = run(state, d.CompleteBucketSnapshot(b.pending_create, True))
    (merged,) = merged_pending(state)
    covered = range(merged.start_ledger_id, merged.end_ledger_id + 1)
    keys = [k for k in state.storage.properties if any(f"_{lg}_" in k + "_" for lg in covered)]
    assert keys  # the sources' snapshots are still listed while the merge is pending
    state, _ = run(state, d.CompleteBucketSnapshot(merged.pending_create, False))
    assert all(k in state.storage.properties for k in keys)  # and after it failed
    restarted, _ = run(state, d.Restart(0))
    assert all(d.contains_message(restarted, lg, e) for lg in covered for e in (0, 1))


def test_dd31_trimmed_while_creating_deletes_the_snapshot_when_created() -> None:
    state = _async_bucket(delayedDeliveryMinIndexCountPerBucket=1)
    state, _ = add(state, 1, 0, 5000)
    state, _ = add(state, 2, 0, 5000)
    state, _ = run(state, d.Clear())
    state, result = run(state, d.CompleteBucketSnapshot(1, True))
    assert isinstance(result, Ok)
    assert any(isinstance(e, d.DeleteBucketSnapshot) for e in result.effects)
    assert not state.storage.snapshots and not state.storage.properties


def test_dd24_recovery_inputs_decode_and_unknown_ones_are_refused() -> None:
    """DD-24: the engine's recovery inputs rebuild a tracker; an input it does not know is an error."""
    config = Config()
    assert isinstance(d.recover_from_json(config, {"tracker": "in_memory"}), d.InMemoryTracker)
    bucket = d.recover_from_json(config, {"tracker": "bucket", "mark_delete_ledger": 3, "next_bucket_id": 5})
    assert not isinstance(bucket, d.InMemoryTracker)
    with pytest.raises(KeyError, match="unknown recovery input"):
        d.recover_from_json(config, {"tracker": "bucket", "surprise": 1})


def test_dd29_a_message_on_ledger_zero_is_tracked() -> None:
    """DD-29: ledger ids start at 0; a message there is tracked like any other."""
    state = d.initial(Config(), tracker="in_memory")
    state, result = d.step(state, d.AddMessage(0, 3, 5_000, 0))
    assert isinstance(result, Ok) and result.value is True
