"""BucketSnapshotStorage on the engine's MemoryLedger: layout, catalogue, failures, recovery
equivalence with the model's own storage (DD-17, DD-18, DD-19, DD-24)."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from engine.delayed.bucket_storage import (
    BucketSnapshotStorage,
    SnapshotStorageFailed,
    clean_residual_snapshots,
    decode_segment,
    encode_segment,
)
from engine.storage.ledger import ManagedCursor, ManagedLedger
from engine.storage.memory_ledger import MemoryLedger
from reference import delayed as dd
from spec.config import Config
from spec.result import Ok
from spec.types import Position


class Ledgers:
    """Named managed ledgers, as a BookKeeper client would create and delete them."""

    def __init__(self) -> None:
        self.open: dict[str, MemoryLedger] = {}

    def open_ledger(self, name: str) -> ManagedLedger:
        ledger = self.open.get(name)
        if ledger is None:
            ledger = self.open[name] = MemoryLedger(name)
        return ledger

    def delete_ledger(self, name: str) -> None:
        self.open.pop(name, None)


def _setup() -> tuple[Ledgers, ManagedCursor, BucketSnapshotStorage]:
    topic = MemoryLedger("topic")
    cursor = topic.open_cursor("sub")
    ledgers = Ledgers()
    return ledgers, cursor, BucketSnapshotStorage(ledgers.open_ledger, ledgers.delete_ledger, cursor)


def _drive(storage: BucketSnapshotStorage, state: dd.Tracker, command: object) -> dd.Tracker:
    state, result = dd.step(state, command)  # type: ignore[arg-type]
    storage.apply(result.effects)
    return state


def _tracker(**overrides: object) -> dd.Tracker:
    return dd.initial(Config().with_overrides(overrides))


def test_dd18_layout_entry0_metadata_then_segments() -> None:
    """DD-18: catalogue #45 — metadata and inclusive, clamped segment ranges round-trip."""
    ledgers, cursor, storage = _setup()
    state = _tracker(delayedDeliveryMinIndexCountPerBucket=4, delayedDeliveryMaxIndexesPerBucketSnapshotSegment=2)
    for i in range(5):
        state = _drive(storage, state, dd.AddMessage(100 if i < 4 else 101, i, 5000 + i, 0))
    assert isinstance(state, dd.BucketTracker)
    (bucket,) = state.buckets
    snapshot = state.storage.snapshots[bucket.bucket_id]
    assert cursor.properties == {"#pulsar.internal.delayed.bucket_100_100": str(bucket.bucket_id)}
    assert storage.get_bucket_snapshot_metadata(bucket.bucket_id) == snapshot.metadata
    segments = storage.get_bucket_snapshot_segment(bucket.bucket_id, 1, 99)
    assert [list(r.indexes()) for r in segments] == [list(r.indexes()) for r in snapshot.segments]
    assert [list(r.indexes()) for r in storage.get_bucket_snapshot_segment(bucket.bucket_id, 2, 2)] == [
        [(5002, 100, 2), (5003, 100, 3)]
    ]
    assert storage.get_bucket_snapshot_length(bucket.bucket_id) == snapshot.length
    ledger = ledgers.open[f"delayed-bucket-{bucket.bucket_id}"]
    first = ledger.ledgers()[0].ledger_id
    assert len(ledger.read(Position(first, 0), 10)) == 3  # metadata + two segments


@given(st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40), st.integers(0, 2**31)), max_size=20))
def test_segment_codec_round_trip(indexes: list[tuple[int, int, int]]) -> None:
    run = dd.compact_run(sorted(indexes))
    assert list(decode_segment(encode_segment(run)).indexes()) == sorted(indexes)
    assert len(encode_segment(run)) == dd.segment_length(run)


def test_dd19_delete_removes_ledger_then_property_and_missing_is_fine() -> None:
    """DD-19: the bucket is deleted when its last segment is consumed."""
    ledgers, cursor, storage = _setup()
    state = _tracker(delayedDeliveryMinIndexCountPerBucket=2)
    for i in range(3):
        state = _drive(storage, state, dd.AddMessage(1 if i < 2 else 2, i, 5000 + i, 0))
    assert len(ledgers.open) == 1 and len(cursor.properties) == 1
    state = _drive(storage, state, dd.GetScheduledMessages(10, 100_000))
    assert ledgers.open == {} and dict(cursor.properties) == {}
    storage.delete_bucket_snapshot(12345)


def test_dd17_injected_failures_raise_typed_errors() -> None:
    """DD-17: each call consumes one injected failure."""
    _, _, storage = _setup()
    storage.inject_failure("create", 1)
    snapshot = dd.Snapshot(1, 1, (), (), 0)
    with pytest.raises(SnapshotStorageFailed) as info:
        storage.create_bucket_snapshot(7, snapshot)
    assert info.value.domain_error().name == "BucketSnapshotPersistence"
    assert storage.create_bucket_snapshot(7, snapshot) == 7
    with pytest.raises(Exception) as missing:
        storage.get_bucket_snapshot_metadata(8)
    assert missing.value.domain_error().name == "BucketNotExist"  # type: ignore[attr-defined]


@given(
    adds=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 80), st.booleans()), min_size=1, max_size=40),
    deliveries=st.lists(st.integers(0, 3), max_size=4),
    restart_at=st.integers(0, 90),
    async_create=st.booleans(),
)
def test_dd24_recovery_from_ledgers_equals_recovery_from_the_model(
    adds: list[tuple[int, int, bool]], deliveries: list[int], restart_at: int, async_create: bool
) -> None:
    """DD-24, DD-31: a tracker recovered from the engine's ledgers and cursor properties equals
    the one recovered from the model's storage (creations completed late, or failed)."""
    _, _, storage = _setup()
    state = dd.initial(
        Config().with_overrides(
            {
                "delayedDeliveryMinIndexCountPerBucket": 3,
                "delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds": 0,
                "delayedDeliveryMaxNumBuckets": 3,
                "delayedDeliveryTickTimeMillis": 1,
            }
        ),
        async_create=async_create,
    )
    ledger = 1
    for entry, (step, delay, succeed) in enumerate(adds, start=1):
        ledger += step
        state = _drive(storage, state, dd.AddMessage(ledger, entry, delay, 0))
        assert isinstance(state, dd.BucketTracker)
        for request in sorted(state.pending_creates):
            state = _drive(storage, state, dd.CompleteBucketSnapshot(request, succeed))
    for n in deliveries:
        state = _drive(storage, state, dd.GetScheduledMessages(n, restart_at // 2))
    assert isinstance(state, dd.BucketTracker)
    loaded = storage.load()
    assert dict(loaded.properties) == dict(state.storage.properties)
    assert set(loaded.snapshots) == set(state.storage.snapshots)
    from_model, r1 = dd.recover(state.params, state.storage, restart_at)
    from_ledgers, r2 = dd.recover(state.params, loaded, restart_at)
    assert isinstance(r1, Ok) and isinstance(r2, Ok) and r1.value == r2.value
    assert dd.tracked(from_model) == dd.tracked(from_ledgers)
    assert dd.bucket_ranges(from_model) == dd.bucket_ranges(from_ledgers)
    assert [list(r.indexes()) for r in from_model.shared] == [list(r.indexes()) for r in from_ledgers.shared]


def test_unsubscribe_cleans_residual_snapshots() -> None:
    """Catalogue #54: deleting the subscription deletes every bucket ledger (DD-19 order reversed: CP4)."""
    ledgers, cursor, storage = _setup()
    state = _tracker(delayedDeliveryMinIndexCountPerBucket=1)
    for ledger in range(1, 6):
        state = _drive(storage, state, dd.AddMessage(ledger, 0, 5000, 0))
    assert len(ledgers.open) == 4
    assert len(clean_residual_snapshots(storage, cursor)) == 4
    assert ledgers.open == {} and dict(cursor.properties) == {}


def test_dd18_a_snapshot_spanning_several_ledgers_reads_back_in_order() -> None:
    """DD-18: entries are counted from entry 0 across the snapshot's rolled-over ledgers."""
    small = Config().with_overrides({"managedLedgerMaxEntriesPerLedger": 2})
    ledgers: dict[str, MemoryLedger] = {}

    def open_ledger(name: str) -> ManagedLedger:
        return ledgers.setdefault(name, MemoryLedger(name, small))

    def delete_ledger(name: str) -> None:
        ledgers.pop(name, None)

    storage = BucketSnapshotStorage(open_ledger, delete_ledger, MemoryLedger("topic").open_cursor("sub"))
    runs = tuple(dd.compact_run([(1000 + 10 * k + i, 5, 3 * k + i) for i in range(3)]) for k in range(5))
    metadata = tuple(dd.SegmentMeta(r.index(0)[0], r.index(len(r) - 1)[0], dd._freeze({})) for r in runs)
    storage.create_bucket_snapshot(1, dd.Snapshot(5, 5, metadata, runs, 0))
    assert len(ledgers["delayed-bucket-1"].ledgers()) >= 3  # metadata + 5 segments, two entries a ledger
    assert storage.get_bucket_snapshot_metadata(1) == metadata
    for k in range(5):
        (run,) = storage.get_bucket_snapshot_segment(1, k + 1, k + 1)
        assert list(run.indexes()) == list(runs[k].indexes())
    assert [list(r.indexes()) for r in storage.get_bucket_snapshot_segment(1, 2, 9)] == [
        list(r.indexes()) for r in runs[1:]
    ]
