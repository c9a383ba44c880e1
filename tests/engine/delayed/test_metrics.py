"""Pulsar's bucket delayed-index metrics exported through prometheus-client (DD-28).

Gauges and op counts come from the pure tracker's ``metrics(state)`` (DD-28); latencies are
measured around the engine's ``BucketSnapshotStorage`` operations with a fake clock that the fake
ledgers advance, so nothing here depends on wall-clock time.  Catalogue C.2 #55 (fact sheet B.15).
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from engine.delayed.bucket_storage import SnapshotStorageFailed
from engine.delayed.metrics import (
    BUCKET_TOTAL,
    LATENCY_BUCKETS_MS,
    LOADED,
    OP_COUNT,
    OP_LATENCY,
    SNAPSHOT_SIZE_BYTES,
    DelayedIndexMetrics,
    LatencyBuckets,
    MeteredBucketTracker,
    elapsed_ms,
)
from engine.storage.ledger import ManagedLedger
from engine.storage.memory_ledger import MemoryLedger
from reference import delayed as dd
from spec.config import Config
from spec.result import Ok
from spec.types import Position

TOPIC = "persistent://public/default/delayed"
Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


class FakeClock:
    """Seconds, like ``time.monotonic``; moved only by the fake ledgers' costs."""

    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms


class SlowLedger(MemoryLedger):
    def __init__(self, name: str, clock: FakeClock, costs: dict[str, int]) -> None:
        super().__init__(name)
        self._clock, self._costs = clock, costs

    def append(self, data: bytes) -> Position:
        self._clock.advance(self._costs.get("append", 0))
        return super().append(data)

    def read(self, start: Position, max_entries: int) -> list:  # type: ignore[type-arg]
        self._clock.advance(self._costs.get("read", 0))
        return super().read(start, max_entries)


class Ledgers:
    """Named snapshot ledgers whose operations cost fake milliseconds."""

    def __init__(self, clock: FakeClock, **costs: int) -> None:
        self.clock, self.costs = clock, costs
        self.open: dict[str, SlowLedger] = {}

    def open_ledger(self, name: str) -> ManagedLedger:
        if name not in self.open:
            self.open[name] = SlowLedger(name, self.clock, self.costs)
        return self.open[name]

    def delete_ledger(self, name: str) -> None:
        self.clock.advance(self.costs.get("delete", 0))
        self.open.pop(name, None)


def _tracker(
    clock: FakeClock | None = None,
    *,
    subscription: str = "sub",
    costs: dict[str, int] | None = None,
    topic: MemoryLedger | None = None,
    **overrides: object,
) -> MeteredBucketTracker:
    clock = clock or FakeClock()
    ledgers = Ledgers(clock, **(costs or {}))
    cursor = (topic or MemoryLedger("topic")).open_cursor(subscription)
    state = dd.initial(Config().with_overrides(overrides))
    return MeteredBucketTracker(state, ledgers.open_ledger, ledgers.delete_ledger, cursor, clock=clock)


def _scrape(metrics: DelayedIndexMetrics) -> Series:
    """One scrape, parsed back from the text exposition."""
    out: Series = {}
    for family in text_string_to_metric_families(metrics.exposition()):
        assert family.type == "gauge"  # Pulsar writes every topic metric as a gauge
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def _get(series: Series, name: str, **labels: str) -> float | None:
    want = {"cluster": "standalone", "namespace": "public/default", "topic": TOPIC, **labels}
    return series.get((name, frozenset(want.items())))


def _add_c55(tracker: MeteredBucketTracker) -> None:
    """Catalogue #55: 101 messages, 50 entries per ledger, deliver after 3600 + i seconds."""
    for i in range(101):
        tracker.step(dd.AddMessage(1 + i // 50, i % 50, 3_600_000 + i * 1000, 0))


# --------------------------------------------------------------------------------------------


def test_c55_bucket_total_per_subscription_and_topic_sum() -> None:
    """DD-28, catalogue C.2 #55: minIndex 50 → bucket_total 3 per subscription, 6 for the topic
    (the sum over its two subscriptions); every other series sums the same way."""
    metrics = DelayedIndexMetrics(registry=CollectorRegistry())
    topic = MemoryLedger("topic")
    clock = FakeClock()
    for sub in ("test_sub", "test_sub2"):
        tracker = _tracker(
            clock, subscription=sub, topic=topic, costs={"append": 20}, delayedDeliveryMinIndexCountPerBucket=50
        )
        metrics.add_subscription(TOPIC, sub, tracker)
        _add_c55(tracker)
    series = _scrape(metrics)
    for sub in ("test_sub", "test_sub2"):
        assert _get(series, BUCKET_TOTAL, subscription=sub) == 3
        assert 0 < (_get(series, LOADED, subscription=sub) or 0) <= 101
        assert (_get(series, SNAPSHOT_SIZE_BYTES, subscription=sub) or 0) > 0
        assert _get(series, OP_COUNT, subscription=sub, state="succeed", type="create") == 2
        assert _get(series, OP_COUNT, subscription=sub, state="all", type="create") == 2
        # Two snapshots of metadata + one segment, 2 × 20 ms each: both in the 50 ms bucket.
        assert _get(series, OP_LATENCY, subscription=sub, type="create", quantile="50") == 2
        assert _get(series, OP_LATENCY + "_count", subscription=sub, type="create") == 2
        assert _get(series, OP_LATENCY + "_sum", subscription=sub, type="create") == 80
    assert _get(series, BUCKET_TOTAL) == 6
    for name, labels in [
        (LOADED, {}),
        (SNAPSHOT_SIZE_BYTES, {}),
        (OP_COUNT, {"state": "succeed", "type": "create"}),
        (OP_LATENCY, {"type": "create", "quantile": "50"}),
        (OP_LATENCY + "_sum", {"type": "create"}),
    ]:
        subs = [_get(series, name, subscription=s, **labels) or 0 for s in ("test_sub", "test_sub2")]
        assert _get(series, name, **labels) == sum(subs)
    # The gauges are the pure tracker's own values (DD-28), not recomputed.
    state = metrics._topics[TOPIC]["test_sub"].state
    assert _get(series, SNAPSHOT_SIZE_BYTES, subscription="test_sub") == dd.metrics(state)["snapshot_size_bytes"]
    assert _get(series, LOADED, subscription="test_sub") == dd.metrics(state)["loaded"]
    # Series never touched are not printed, as in Pulsar (only recorded (state, type) pairs).
    assert _get(series, OP_COUNT, subscription="test_sub", state="failed", type="create") is None
    assert _get(series, OP_LATENCY + "_count", subscription="test_sub", type="load") is None


def test_op_counts_after_injected_failures() -> None:
    """DD-28, DD-17: a create that fails on every attempt counts failed + all, no latency; the
    delete and load failures likewise; the values equal the tracker's own counters."""
    metrics = DelayedIndexMetrics(registry=CollectorRegistry())
    tracker = _tracker(
        costs={"append": 10, "delete": 5},
        delayedDeliveryMinIndexCountPerBucket=2,
        delayedDeliveryMaxIndexesPerBucketSnapshotSegment=1,
    )
    metrics.add_subscription(TOPIC, "sub", tracker)
    tracker.step(dd.InjectStorageFailure("create", dd.ATTEMPTS))
    for ledger, entry in [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0)]:  # seals [1..1] (fails), [2..2]
        tracker.step(dd.AddMessage(ledger, entry, 10_000 + 10 * ledger + entry, 0))
    series = _scrape(metrics)
    assert _get(series, OP_COUNT, subscription="sub", state="failed", type="create") == 1
    assert _get(series, OP_COUNT, subscription="sub", state="succeed", type="create") == 1
    assert _get(series, OP_COUNT, subscription="sub", state="all", type="create") == 2
    assert _get(series, OP_LATENCY + "_count", subscription="sub", type="create") == 1  # successes only
    assert _get(series, OP_LATENCY + "_sum", subscription="sub", type="create") == 30  # metadata + 2 segments
    totals = dd.metrics(tracker.state)
    assert totals["op_count_create_failed"] == 1 and totals["op_count_create_all"] == 2

    # Loads: every attempt fails once (DD-16: roll back, retry later); then deliveries succeed.
    tracker.step(dd.InjectStorageFailure("load", dd.ATTEMPTS))
    tracker.step(dd.GetScheduledMessages(100, 20_000))
    series = _scrape(metrics)
    assert _get(series, OP_COUNT, subscription="sub", state="failed", type="load") == 1
    assert _get(series, OP_LATENCY + "_count", subscription="sub", type="load") is None
    tracker.step(dd.GetScheduledMessages(100, 20_000))
    series = _scrape(metrics)
    assert (_get(series, OP_COUNT, subscription="sub", state="succeed", type="load") or 0) >= 1
    assert _get(series, OP_COUNT, subscription="sub", state="failed", type="load") == 0
    assert _get(series, OP_COUNT, subscription="sub", state="succeed", type="delete") == 1
    assert _get(series, OP_LATENCY, subscription="sub", type="delete", quantile="50") == 1

    # An engine-side failure (the ledger store, not the model) propagates and records no latency.
    for ledger, entry in [(4, 0), (4, 1), (5, 0)]:
        tracker.step(dd.AddMessage(ledger, entry, 30_000, 0))
    _scrape(metrics)
    tracker.storage.inject_failure("delete")
    with pytest.raises(SnapshotStorageFailed):
        tracker.step(dd.Clear())
    series = _scrape(metrics)
    assert _get(series, OP_COUNT, subscription="sub", state="succeed", type="delete") == 1  # the model's
    assert _get(series, OP_LATENCY + "_count", subscription="sub", type="delete") == 0


def test_latency_buckets_are_pulsars_stats_buckets() -> None:
    """DD-28: bounds 50, 100, 500, 1000, 5000, 30000, 60000, overflow; a value equal to a bound
    lands in that bound's bucket; buckets are per interval, not cumulative."""
    assert LATENCY_BUCKETS_MS == (50, 100, 500, 1000, 5000, 30000, 60000)
    buckets = LatencyBuckets()
    for ms in (0, 50, 51, 100, 499, 1000, 1001, 30000, 60000, 60001, 10**9):
        buckets.add(ms)
    counts, count, total = buckets.read()
    assert counts == (2, 2, 1, 1, 1, 1, 1, 2)
    assert count == 11 and total == sum((0, 50, 51, 100, 499, 1000, 1001, 30000, 60000, 60001, 10**9))
    assert buckets.read() == ((0,) * 8, 0, 0)
    assert elapsed_ms(1.0, 1.0499999) == 49 and elapsed_ms(0.1, 0.3) == 200 and elapsed_ms(2.0, 1.0) == 0


def test_latency_of_create_load_delete_with_a_fake_clock() -> None:
    """DD-28: create = metadata + segment appends, load = one segment read, delete = the ledger
    delete, each measured by the injected clock and bucketed as Pulsar does."""
    metrics = DelayedIndexMetrics(registry=CollectorRegistry())
    tracker = _tracker(
        costs={"append": 35, "read": 600, "delete": 40_000},
        delayedDeliveryMinIndexCountPerBucket=4,
        delayedDeliveryMaxIndexesPerBucketSnapshotSegment=2,
    )
    metrics.add_subscription(TOPIC, "sub", tracker)
    for entry in range(4):
        tracker.step(dd.AddMessage(1, entry, 10_000 + entry, 0))
    tracker.step(dd.AddMessage(2, 0, 10_000, 0))  # seals ledger 1: metadata + 2 segments = 105 ms
    tracker.step(dd.GetScheduledMessages(100, 100_000))  # loads segment 2, consumes it, deletes the bucket
    series = _scrape(metrics)
    assert _get(series, OP_LATENCY, subscription="sub", type="create", quantile="500") == 1
    assert _get(series, OP_LATENCY, subscription="sub", type="load", quantile="1000") == 1
    assert _get(series, OP_LATENCY, subscription="sub", type="delete", quantile="60000") == 1
    assert _get(series, OP_LATENCY + "_sum", subscription="sub", type="create") == 105
    assert _get(series, OP_LATENCY + "_sum", subscription="sub", type="load") == 600
    assert _get(series, OP_LATENCY + "_sum", subscription="sub", type="delete") == 40_000
    assert _get(series, OP_LATENCY, subscription="sub", type="create", quantile="100") is None  # zero: not printed


def test_merge_latency_and_counts() -> None:
    """DD-28, DD-21: a merge counts merge and a create for the merged snapshot; its latency is
    the engine work of the merging step."""
    metrics = DelayedIndexMetrics(registry=CollectorRegistry())
    tracker = _tracker(
        costs={"append": 1, "read": 2, "delete": 3},
        delayedDeliveryMinIndexCountPerBucket=2,
        delayedDeliveryMaxNumBuckets=2,
        delayedDeliveryMaxIndexesPerBucketSnapshotSegment=1,
    )
    metrics.add_subscription(TOPIC, "sub", tracker)
    for ledger in range(1, 5):  # buckets of two one-index segments: mergeable (unloaded segments)
        for entry in range(2):
            tracker.step(dd.AddMessage(ledger, entry, 50_000 + 10 * ledger + entry, 0))
    series = _scrape(metrics)
    merges = dd.metrics(tracker.state)["op_count_merge_succeed"]
    assert merges >= 1
    assert _get(series, OP_COUNT, subscription="sub", state="succeed", type="merge") == merges
    assert _get(series, OP_LATENCY + "_count", subscription="sub", type="merge") == merges
    assert (_get(series, OP_LATENCY + "_sum", subscription="sub", type="merge") or 0) > 0
    assert (
        _get(series, OP_COUNT, subscription="sub", state="succeed", type="create")
        == dd.metrics(tracker.state)["op_count_create_succeed"]
    )


def test_op_counts_and_latencies_are_read_and_reset_per_scrape() -> None:
    """DD-28 (Pulsar's sumThenReset / StatsBuckets.refresh): a second scrape shows zero op counts
    and latencies, the quantile series vanish, the gauges stay; cumulative when asked."""
    registry = CollectorRegistry()
    metrics = DelayedIndexMetrics(registry=registry)
    tracker = _tracker(costs={"append": 20}, delayedDeliveryMinIndexCountPerBucket=50)
    metrics.add_subscription(TOPIC, "sub", tracker)
    _add_c55(tracker)
    first, second = _scrape(metrics), _scrape(metrics)
    assert _get(first, OP_COUNT, subscription="sub", state="all", type="create") == 2
    assert _get(second, OP_COUNT, subscription="sub", state="all", type="create") == 0
    assert _get(second, OP_LATENCY + "_count", subscription="sub", type="create") == 0
    assert _get(second, OP_LATENCY + "_sum", subscription="sub", type="create") == 0
    assert _get(second, OP_LATENCY, subscription="sub", type="create", quantile="50") is None
    assert _get(second, BUCKET_TOTAL, subscription="sub") == _get(first, BUCKET_TOTAL, subscription="sub") == 3
    tracker.step(dd.AddMessage(3, 1, 4_000_000, 0))
    tracker.step(dd.AddMessage(4, 0, 4_000_000, 0))  # no seal: the mutable bucket is small
    assert _get(_scrape(metrics), OP_COUNT, subscription="sub", state="all", type="create") == 0
    metrics.close()

    cumulative = DelayedIndexMetrics(registry=registry, reset_on_scrape=False)
    tracker = _tracker(delayedDeliveryMinIndexCountPerBucket=50)
    cumulative.add_subscription(TOPIC, "sub", tracker)
    _add_c55(tracker)
    for series in (_scrape(cumulative), _scrape(cumulative)):
        assert _get(series, OP_COUNT, subscription="sub", state="all", type="create") == 2
        assert _get(series, OP_LATENCY + "_count", subscription="sub", type="create") == 2


def test_restart_counts_start_from_zero_and_recovery_reads_are_not_loads() -> None:
    """DD-24, DD-28: a restart makes a new tracker (new counters in Pulsar too)."""
    metrics = DelayedIndexMetrics(registry=CollectorRegistry())
    tracker = _tracker(delayedDeliveryMinIndexCountPerBucket=50)
    metrics.add_subscription(TOPIC, "sub", tracker)
    _add_c55(tracker)
    _scrape(metrics)
    result = tracker.step(dd.Restart(0))
    # The two sealed buckets come back; the mutable bucket's messages are re-read by the dispatcher.
    assert isinstance(result, Ok) and result.value == 100
    series = _scrape(metrics)
    recovered = dd.metrics(tracker.state)
    assert _get(series, OP_COUNT, subscription="sub", state="all", type="load") == recovered["op_count_load_all"]
    assert _get(series, OP_COUNT, subscription="sub", state="all", type="create") == 0
    assert _get(series, OP_LATENCY + "_count", subscription="sub", type="load") is None
    assert _get(series, BUCKET_TOTAL, subscription="sub") == 3


def test_non_bucket_trackers_export_nothing() -> None:
    """DD-27, DD-29: the in-memory tracker (and a bucket tracker in fallback) has no bucket stats."""
    metrics = DelayedIndexMetrics(registry=CollectorRegistry())
    ledgers = Ledgers(FakeClock())
    cursor = MemoryLedger("topic").open_cursor("sub")
    in_memory = MeteredBucketTracker(
        dd.initial(Config(), tracker="in_memory"), ledgers.open_ledger, ledgers.delete_ledger, cursor
    )
    in_memory.step(dd.AddMessage(1, 0, 50_000, 0))
    metrics.add_subscription(TOPIC, "sub", in_memory)
    assert _scrape(metrics) == {}


def test_register_duplicate_and_unregister() -> None:
    """DD-28: one exporter per registry; close unregisters, is idempotent, and frees the names."""
    registry = CollectorRegistry()
    metrics = DelayedIndexMetrics(registry=registry)
    tracker = _tracker(delayedDeliveryMinIndexCountPerBucket=50)
    metrics.add_subscription(TOPIC, "sub", tracker)
    _add_c55(tracker)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        DelayedIndexMetrics(registry=registry)
    with pytest.raises(ValueError):
        metrics.add_subscription(TOPIC, "sub", tracker)
    assert BUCKET_TOTAL in metrics.exposition()
    metrics.remove_subscription(TOPIC, "sub")
    assert BUCKET_TOTAL not in metrics.exposition()
    metrics.add_subscription(TOPIC, "sub", tracker)
    metrics.close()
    metrics.close()
    assert "pulsar_delayed_message_index" not in metrics.exposition()
    again = DelayedIndexMetrics(registry=registry)
    again.add_subscription(TOPIC, "sub", tracker)
    assert _get(_scrape(again), BUCKET_TOTAL, subscription="sub") == 3
