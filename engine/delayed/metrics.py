"""Prometheus metrics of the bucket delayed-delivery tracker, as today's Pulsar exposes them (DD-28).

Pulsar's ``BucketDelayedMessageIndexStats`` (one per subscription's ``BucketDelayedDeliveryTracker``)
is printed by the broker's topic metrics with labels ``cluster``, ``namespace``, ``topic`` and,
at subscription level, ``subscription``; the topic-level value of every series is the sum of the
same series over the topic's subscriptions (fact sheet B.15, catalogue C.2 #55):

* ``pulsar_delayed_message_index_bucket_total`` — immutable buckets + 1 (the mutable bucket);
* ``pulsar_delayed_message_index_loaded`` — shared queue + mutable queue sizes;
* ``pulsar_delayed_message_index_bucket_snapshot_size_bytes`` — summed snapshot lengths;
* ``pulsar_delayed_message_index_bucket_op_count{state, type}`` — ``state`` ∈ {succeed, failed,
  all} (``all`` counts triggers), ``type`` ∈ {create, load, delete, merge};
* ``pulsar_delayed_message_index_bucket_op_latency_ms{type, quantile}`` — successes only, counted
  per interval: ``quantile="50"`` counts latencies <= 50 ms, ``"100"`` those in (50, 100], ... up
  to ``"60000"``, and ``"overflow"`` above 60 s (Pulsar's ``StatsBuckets``: the buckets are not
  cumulative, and a bucket with a zero count is not printed); plus
  ``pulsar_delayed_message_index_bucket_op_latency_ms_count{type}`` and ``..._sum{type}`` (ms).

As in Pulsar:

* every family is exposed with ``# TYPE ... gauge`` (Pulsar's ``PrometheusMetricStreams`` writes
  all topic metrics as gauges), so the op count keeps its name, without a ``_total`` suffix;
* the op counts and the latency buckets, count and sum are **read and reset on each scrape**
  (3.x: ``LongAdder.sumThenReset()`` and ``StatsBuckets.refresh()``): each scrape shows what
  happened since the previous one.  Pass ``reset_on_scrape=False`` for cumulative values instead
  (the newest master reads the op counts with ``LongAdder.sum()``, without the reset).  Every
  scrape resets, including ``registry.get_sample_value``: read one exposition and parse it;
* an op-count series appears once its (state, type) was first recorded, a latency ``type`` once
  it had a first success, and stay (at 0) afterwards;
* a subscription without a bucket tracker (in-memory, or a bucket tracker in fallback after a
  failed recovery, DD-27) contributes no series.

Not modelled: the ``partition`` label of ``splitTopicAndPartitionIndexLabel`` and the namespace
level aggregation (``includeTopicMetrics=false``), which sums the topic-level series again.

Where the values come from.  The gauges and op counts are the pure tracker's own
(:func:`reference.delayed.metrics`, DD-28): this module never recomputes them.  The tracker's
counters are cumulative since the last restart; :class:`MeteredBucketTracker` turns them into
Pulsar's per-scrape counts by taking each step's difference (a restart starts a new tracker
whose counts start from zero, as in Pulsar).  As in Pulsar a merge's segment reads are not
``load`` operations (DD-28); recovery's reads are, but are not timed, so the ``load`` count can
exceed the ``load`` latency count after a restart.  Latencies cannot come from the pure machine (it has
no clock): :class:`TimedBucketSnapshotStorage` measures each ``BucketSnapshotStorage`` operation
with an injectable clock (``time.monotonic`` by default), whole milliseconds rounded down as
Pulsar's ``currentTimeMillis`` differences are:

* ``create`` — ``create_bucket_snapshot`` (entry 0 and the segments); ``delete`` —
  ``delete_bucket_snapshot``; ``load`` — ``get_bucket_snapshot_segment``.  The pure tracker serves
  segment loads from its own modelled storage, so :meth:`MeteredBucketTracker.step` reads each
  segment the tracker loaded during the step (a bucket whose current segment advanced, or one
  consumed to its end and deleted) from the engine's snapshot ledger as well, and that read is
  what is timed (recovery reads and a merge's reads are not timed as ``load``);
* ``merge`` — the engine's storage work of a step in which the tracker merged buckets (segment
  reads, the merged snapshot's creation and the sources' deletes).  When the merge was triggered
  by a seal, that step's work also includes the sealed bucket's creation.

A failed operation records no latency (the exception propagates); failures counted by the
tracker (``InjectStorageFailure``) never reach the engine's storage at all.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Mapping
from typing import Final, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from engine.delayed.bucket_storage import BucketSnapshotStorage, segment_reads
from engine.storage.ledger import ManagedCursor, ManagedLedger
from reference import delayed as dd
from spec.result import Err, Ok

__all__ = [
    "BUCKET_TOTAL",
    "GAUGES",
    "LATENCY_BUCKETS_MS",
    "LOADED",
    "OP_COUNT",
    "OP_LATENCY",
    "OP_STATES",
    "OP_TYPES",
    "SNAPSHOT_SIZE_BYTES",
    "BucketIndexStats",
    "Clock",
    "DelayedIndexMetrics",
    "LatencyBuckets",
    "MeteredBucketTracker",
    "MeteredTracker",
    "TimedBucketSnapshotStorage",
    "elapsed_ms",
    "segment_reads",
]

BUCKET_TOTAL: Final = "pulsar_delayed_message_index_bucket_total"
LOADED: Final = "pulsar_delayed_message_index_loaded"
SNAPSHOT_SIZE_BYTES: Final = "pulsar_delayed_message_index_bucket_snapshot_size_bytes"
OP_COUNT: Final = "pulsar_delayed_message_index_bucket_op_count"
OP_LATENCY: Final = "pulsar_delayed_message_index_bucket_op_latency_ms"
# metric name -> the key of reference.delayed.metrics(state) it exposes
GAUGES: Final[Mapping[str, str]] = {
    BUCKET_TOTAL: "bucket_total",
    LOADED: "loaded",
    SNAPSHOT_SIZE_BYTES: "snapshot_size_bytes",
}
LATENCY_BUCKETS_MS: Final = (50, 100, 500, 1000, 5000, 30000, 60000)
OP_STATES: Final = ("succeed", "failed", "all")
OP_TYPES: Final = ("create", "load", "delete", "merge")
_DOC: Final[Mapping[str, str]] = {
    BUCKET_TOTAL: "Bucket delayed-index buckets (immutable buckets + the mutable one).",
    LOADED: "Delayed indexes held in memory (shared queue + mutable bucket).",
    SNAPSHOT_SIZE_BYTES: "Bytes of the bucket snapshots on storage.",
    OP_COUNT: "Bucket snapshot operations since the last scrape, by state and type.",
    OP_LATENCY: "Successful bucket snapshot operations since the last scrape, by latency bucket (ms).",
    OP_LATENCY + "_count": "Successful bucket snapshot operations since the last scrape.",
    OP_LATENCY + "_sum": "Summed latency (ms) of successful bucket snapshot operations since the last scrape.",
}

Clock = Callable[[], float]  # seconds, like time.monotonic
Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]


def elapsed_ms(start: float, end: float) -> int:
    """Whole milliseconds between two clock readings in seconds, rounded down (never negative)."""
    return max(0, math.floor((end - start) * 1000 + 1e-6))


# --------------------------------------------------------------------------------------------
# Pulsar's BucketDelayedMessageIndexStats
# --------------------------------------------------------------------------------------------


class LatencyBuckets:
    """Pulsar's ``StatsBuckets`` over :data:`LATENCY_BUCKETS_MS`: a value ``v`` lands in the first
    bucket whose bound is ``>= v`` (Java's ``Arrays.binarySearch`` insertion point), above the
    last bound in ``overflow``; :meth:`read` is ``refresh()`` (read and reset)."""

    def __init__(self) -> None:
        self._buckets = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self._sum = 0

    def add(self, value_ms: int) -> None:
        self._buckets[bisect.bisect_left(LATENCY_BUCKETS_MS, value_ms)] += 1
        self._sum += value_ms

    def read(self, *, reset: bool = True) -> tuple[tuple[int, ...], int, int]:
        """(per-bucket counts, count, sum) since the last reset."""
        buckets = tuple(self._buckets)
        out = (buckets, sum(buckets), self._sum)
        if reset:
            self._buckets = [0] * len(self._buckets)
            self._sum = 0
        return out


def _quantile_label(i: int) -> str:
    return "overflow" if i == len(LATENCY_BUCKETS_MS) else str(LATENCY_BUCKETS_MS[i])


class BucketIndexStats:
    """One subscription's ``BucketDelayedMessageIndexStats``: op counts and latencies since the
    last scrape.  Gauges are read from the tracker state at scrape time (DD-28)."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}  # (state, type) -> count since last scrape
        self._latency: dict[str, LatencyBuckets] = {}

    def add_op_counts(self, before: Mapping[str, int], after: Mapping[str, int]) -> None:
        """Record the operations between two :func:`reference.delayed.metrics` readings."""
        for op in OP_TYPES:
            for state in OP_STATES:
                key = f"op_count_{op}_{state}"
                delta = after.get(key, 0) - before.get(key, 0)
                if delta < 0:
                    raise ValueError(f"{key} went down ({before.get(key, 0)} -> {after.get(key, 0)}) without a restart")
                if delta or (state, op) in self._counts:
                    self._counts[(state, op)] = self._counts.get((state, op), 0) + delta

    def record_success(self, op: str, latency_ms: int) -> None:
        if op not in OP_TYPES:
            raise ValueError(f"unknown operation {op!r}; one of {OP_TYPES}")
        self._latency.setdefault(op, LatencyBuckets()).add(latency_ms)

    def metric_map(self, state: dd.Tracker, *, reset: bool = True) -> dict[SeriesKey, float]:
        """Pulsar's ``genTopicMetricMap``: every series of this subscription (without the
        cluster/namespace/topic/subscription labels).  Reads and resets the op counts and the
        latencies unless ``reset`` is false.  Empty for a non-bucket tracker."""
        if not isinstance(state, dd.BucketTracker) or state.fallback:
            return {}
        values = dd.metrics(state)
        out: dict[SeriesKey, float] = {(name, ()): float(values[key]) for name, key in GAUGES.items()}
        for (op_state, op), count in self._counts.items():
            out[(OP_COUNT, (("state", op_state), ("type", op)))] = float(count)
            if reset:
                self._counts[(op_state, op)] = 0
        for op, latency in self._latency.items():
            buckets, count, total = latency.read(reset=reset)
            for i, n in enumerate(buckets):
                if n:
                    out[(OP_LATENCY, (("type", op), ("quantile", _quantile_label(i))))] = float(n)
            out[(OP_LATENCY + "_count", (("type", op),))] = float(count)
            out[(OP_LATENCY + "_sum", (("type", op),))] = float(total)
        return out


# --------------------------------------------------------------------------------------------
# The engine: timed snapshot storage and a metered tracker
# --------------------------------------------------------------------------------------------


class TimedBucketSnapshotStorage(BucketSnapshotStorage):
    """:class:`BucketSnapshotStorage` whose create, segment read and delete are timed with
    ``clock``; each success is reported to ``on_success(type, ms)`` (failures are not)."""

    def __init__(
        self,
        open_ledger: Callable[[str], ManagedLedger],
        delete_ledger: Callable[[str], None],
        cursor: ManagedCursor,
        *,
        prefix: str = "delayed-bucket",
        clock: Clock = time.monotonic,
        on_success: Callable[[str, int], None] | None = None,
    ) -> None:
        super().__init__(open_ledger, delete_ledger, cursor, prefix=prefix)
        self.clock = clock
        self.on_success = on_success

    def _done(self, op: str, start: float) -> None:
        if self.on_success is not None:
            self.on_success(op, elapsed_ms(start, self.clock()))

    def create_bucket_snapshot(self, bucket_id: int, snapshot: dd.Snapshot) -> int:
        start = self.clock()
        out = super().create_bucket_snapshot(bucket_id, snapshot)
        self._done("create", start)
        return out

    def get_bucket_snapshot_segment(self, bucket_id: int, first: int, last: int) -> list[dd.Run]:
        start = self.clock()
        out = super().get_bucket_snapshot_segment(bucket_id, first, last)
        self._done("load", start)
        return out

    def delete_bucket_snapshot(self, bucket_id: int) -> None:
        start = self.clock()
        super().delete_bucket_snapshot(bucket_id)
        self._done("delete", start)


class MeteredTracker(Protocol):
    """What the exporter reads of a subscription's tracker: its stats and its current state
    (:class:`MeteredBucketTracker`, or the broker's
    :class:`~engine.delayed.service.DelayedDeliveryService`)."""

    @property
    def stats(self) -> BucketIndexStats: ...

    @property
    def state(self) -> dd.Tracker: ...


class MeteredBucketTracker:
    """One subscription's tracker in the engine: the pure machine (``reference.delayed``), its
    snapshots on managed ledgers (:class:`TimedBucketSnapshotStorage`) and its Pulsar stats.

    :meth:`step` steps the machine, adds the step's operations to the stats (DD-28 counts),
    reads from the ledgers the segments the machine loaded, then carries out the step's storage
    effects; each engine operation's latency goes to the stats.  An exception from the engine's
    storage propagates after the machine's state has advanced (the model already decided)."""

    def __init__(
        self,
        state: dd.Tracker,
        open_ledger: Callable[[str], ManagedLedger],
        delete_ledger: Callable[[str], None],
        cursor: ManagedCursor,
        *,
        prefix: str = "delayed-bucket",
        clock: Clock = time.monotonic,
    ) -> None:
        self.stats = BucketIndexStats()
        self.clock = clock
        self.storage = TimedBucketSnapshotStorage(
            open_ledger, delete_ledger, cursor, prefix=prefix, clock=clock, on_success=self.stats.record_success
        )
        self._state = state

    @property
    def state(self) -> dd.Tracker:
        return self._state

    def step(self, command: dd.Command) -> Ok[object] | Err:
        """Apply one command to the tracker and its storage (DD-28 for the metrics)."""
        old = self._state
        new, result = dd.step(old, command)
        self._state = new
        # A restart builds a new tracker (and Pulsar new stats): its counts start from zero.
        before: Mapping[str, int] = {} if isinstance(command, dd.Restart) else dd.metrics(old)
        after = dd.metrics(new)
        self.stats.add_op_counts(before, after)
        merged = after.get("op_count_merge_succeed", 0) > before.get("op_count_merge_succeed", 0)
        start = self.clock()
        if not isinstance(command, dd.Restart):  # recovery reads are not Pulsar "load" operations
            for bucket_id, entry, load in segment_reads(command, old, new, merged):
                if load:
                    self.storage.get_bucket_snapshot_segment(bucket_id, entry, entry)
                else:
                    BucketSnapshotStorage.get_bucket_snapshot_segment(self.storage, bucket_id, entry, entry)
        self.storage.apply(result.effects)
        if merged:
            self.stats.record_success("merge", elapsed_ms(start, self.clock()))
        return result


# --------------------------------------------------------------------------------------------
# The exporter
# --------------------------------------------------------------------------------------------


class _Collector(Collector):
    def __init__(self, owner: DelayedIndexMetrics) -> None:
        self._owner = owner

    def describe(self) -> list[Metric]:
        return [Metric(name, doc, "gauge") for name, doc in _DOC.items()]

    def collect(self) -> list[Metric]:
        return self._owner._collect()


class DelayedIndexMetrics:
    """Pulsar's bucket delayed-index metrics of every registered subscription, in one registry.

    Subscriptions are added with :meth:`add_subscription` (topic name, subscription name, its
    :class:`MeteredBucketTracker`).  Each scrape (``generate_latest``, :meth:`exposition`)
    emits per subscription the series of :class:`BucketIndexStats` with labels ``cluster``,
    ``namespace``, ``topic``, ``subscription``, and per topic their sum over the subscriptions
    without ``subscription``.  Registering a second exporter in the same registry fails
    (``ValueError: Duplicated timeseries``); :meth:`close` unregisters and may be repeated.
    """

    def __init__(
        self,
        *,
        cluster: str = "standalone",
        namespace: str = "public/default",
        registry: CollectorRegistry | None = None,
        reset_on_scrape: bool = True,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.cluster = cluster
        self.namespace = namespace
        self.reset_on_scrape = reset_on_scrape
        self._topics: dict[str, dict[str, MeteredTracker]] = {}
        self._collector = _Collector(self)
        self.registry.register(self._collector)
        self._closed = False

    def add_subscription(self, topic: str, subscription: str, tracker: MeteredTracker) -> None:
        subs = self._topics.setdefault(topic, {})
        if subscription in subs:
            raise ValueError(f"subscription {subscription!r} of {topic!r} is already registered")
        subs[subscription] = tracker

    def remove_subscription(self, topic: str, subscription: str) -> None:
        subs = self._topics.get(topic, {})
        subs.pop(subscription, None)
        if not subs:
            self._topics.pop(topic, None)

    def _collect(self) -> list[Metric]:
        families = {name: Metric(name, doc, "gauge") for name, doc in _DOC.items()}
        if self._closed:
            return []
        base = {"cluster": self.cluster, "namespace": self.namespace}
        for topic, subs in sorted(self._topics.items()):
            topic_level: dict[SeriesKey, float] = {}
            for subscription, tracker in sorted(subs.items()):
                series = tracker.stats.metric_map(tracker.state, reset=self.reset_on_scrape)
                for (name, labels), value in series.items():
                    families[name].add_sample(
                        name, {**base, "topic": topic, "subscription": subscription, **dict(labels)}, value
                    )
                    topic_level[(name, labels)] = topic_level.get((name, labels), 0.0) + value
            for (name, labels), value in topic_level.items():
                families[name].add_sample(name, {**base, "topic": topic, **dict(labels)}, value)
        return [f for f in families.values() if f.samples]

    def exposition(self) -> str:
        """One scrape of the registry in Prometheus text exposition format (resets the
        per-scrape values, see the module docstring)."""
        return generate_latest(self.registry).decode("utf-8")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.registry.unregister(self._collector)
