"""The delayed-delivery trackers' strategies (``tests/delayed/test_stateful.py`` draws from these) and the driver.

The driver plays the dispatcher in front of one tracker (bucket or in-memory, drawn with the
broker.conf settings the stateful test varies) and the clock: it publishes messages with a
deliver-at around now, asks for due messages, checks availability and fires the timer (live or
stale), moves the cursor's mark-delete, clears, restarts, and (for the bucket tracker) injects
storage failures, finishes snapshot creations and loses snapshots behind the tracker's back.  A
restart is the tracker's own ``restart`` command (its storage is part of the machine, DD-24); the
dispatcher then re-adds what the subscription has not received (``replay``).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from conformance.strategies.base import Driver, Observation, Rule, Setup
from reference import delayed as d
from spec.result import Err, Ok

__all__ = [
    "ADVANCE_MS",
    "ASYNC_CREATE",
    "BUCKET_ONLY",
    "BUCKET_ONLY_ADVANCE_MS",
    "BUCKET_ONLY_DELAYS",
    "BUCKET_ONLY_MARK_DELETE",
    "BUCKET_ONLY_MAX_BUCKETS",
    "BUCKET_ONLY_MAX_INDEXES",
    "BUCKET_ONLY_MAX_MESSAGES",
    "BUCKET_ONLY_MIN_INDEX",
    "DELAYS",
    "FAILURE_COUNTS",
    "MAX_BUCKETS",
    "MAX_INDEXES",
    "MAX_MESSAGES",
    "MIN_INDEX",
    "NEW_LEDGER",
    "OLD_LEDGERS",
    "PICKS",
    "STEP_SECONDS",
    "STORAGE_OPERATIONS",
    "STRICT",
    "SUCCEEDED",
    "TICKS",
    "TRACKERS",
    "DelayedDriver",
    "bucket_only_overrides",
    "config_overrides",
]

TICKS = st.sampled_from([1, 5])
STRICT = st.booleans()
MIN_INDEX = st.sampled_from([1, 2, 3, 5])
STEP_SECONDS = st.sampled_from([0, 1])
MAX_INDEXES = st.sampled_from([-1, 1, 2, 3])
MAX_BUCKETS = st.sampled_from([-1, 2, 3])
ASYNC_CREATE = st.booleans()
DELAYS = st.integers(-5, 60)
NEW_LEDGER = st.booleans()
ADVANCE_MS = st.integers(0, 25)
MAX_MESSAGES = st.sampled_from([1, 2, 3, 1000])
STORAGE_OPERATIONS = st.sampled_from(["create", "load", "delete", "metadata"])
FAILURE_COUNTS = st.integers(1, 4)
SUCCEEDED = st.booleans()
TRACKERS = st.sampled_from(["bucket", "bucket", "in_memory"])

# The bucket tracker alone (``BucketOnly``): a 1 ms tick, small buckets and segments, messages
# mostly in ledger order and sometimes into an older ledger (a re-read, DD-6, DD-7).
BUCKET_ONLY = st.booleans()
BUCKET_ONLY_MIN_INDEX = st.sampled_from([1, 2, 4])
BUCKET_ONLY_MAX_BUCKETS = st.sampled_from([-1, 2])
BUCKET_ONLY_MAX_INDEXES = st.sampled_from([-1, 1, 2])
BUCKET_ONLY_DELAYS = st.integers(-3, 40)
OLD_LEDGERS = st.integers(0, 3)
BUCKET_ONLY_ADVANCE_MS = st.integers(0, 15)
BUCKET_ONLY_MAX_MESSAGES = st.sampled_from([1, 3, 100])
BUCKET_ONLY_MARK_DELETE = st.integers(0, 6)
PICKS = st.integers(0, 5)


def config_overrides(
    tick: int, strict: bool, min_index: int, step_seconds: int, max_indexes: int, max_buckets: int
) -> dict[str, Any]:
    """The broker.conf keys the differential stateful test varies."""
    return {
        "delayedDeliveryTickTimeMillis": tick,
        "isDelayedDeliveryDeliverAtTimeStrict": strict,
        "delayedDeliveryMinIndexCountPerBucket": min_index,
        "delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds": step_seconds,
        "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": max_indexes,
        "delayedDeliveryMaxNumBuckets": max_buckets,
    }


def bucket_only_overrides(min_index: int, max_buckets: int, max_indexes: int) -> dict[str, Any]:
    """The broker.conf keys of the bucket-only stateful test."""
    return {
        "delayedDeliveryTickTimeMillis": 1,
        "delayedDeliveryMinIndexCountPerBucket": min_index,
        "delayedDeliveryMaxNumBuckets": max_buckets,
        "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": max_indexes,
        "delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds": 0,
    }


class DelayedDriver(Driver):
    machine = "delayed"

    def __init__(self, commands: frozenset[str] | None = None, crashes: bool = True) -> None:
        super().__init__(commands, crashes)
        self.now = 0
        self.ledger = 1
        self.entry = 0
        self.published: dict[tuple[int, int], int] = {}  # position -> deliver-at
        self.received: set[tuple[int, int]] = set()
        self.bucket_only = False

    def setup(self, data: st.DataObject) -> Setup:
        if data.draw(BUCKET_ONLY, label="bucket_only"):
            self.bucket_only = True
            config = bucket_only_overrides(
                data.draw(BUCKET_ONLY_MIN_INDEX, label="min_index"),
                data.draw(BUCKET_ONLY_MAX_BUCKETS, label="max_buckets"),
                data.draw(BUCKET_ONLY_MAX_INDEXES, label="max_indexes"),
            )
            return Setup(config, {"tracker": "bucket", "async_create": data.draw(ASYNC_CREATE, label="async_create")})
        config = config_overrides(
            data.draw(TICKS, label="tick"),
            data.draw(STRICT, label="strict"),
            data.draw(MIN_INDEX, label="min_index"),
            data.draw(STEP_SECONDS, label="step_seconds"),
            data.draw(MAX_INDEXES, label="max_indexes"),
            data.draw(MAX_BUCKETS, label="max_buckets"),
        )
        tracker = data.draw(TRACKERS, label="tracker")
        init: dict[str, Any] = {"tracker": tracker}
        if tracker == "bucket":
            init["async_create"] = data.draw(ASYNC_CREATE, label="async_create")
        return Setup(config, init)

    def rules(self) -> list[Rule]:
        bucket = _is_bucket
        return [
            Rule("add_message", self._publish),
            Rule("add_message", self._replay, lambda s: bool(self._unreceived())),
            Rule("get_scheduled_messages", self._deliver),
            Rule("has_message_available", self._available),
            Rule("timer_fired", self._timer, lambda s: s.timer.target is not None),
            Rule("mark_delete", self._mark_delete),
            Rule("clear", lambda data, state: d.Clear()),
            Rule("restart", lambda data, state: d.Restart(self.now)),
            Rule("inject_storage_failure", self._inject, bucket),
            Rule("complete_bucket_snapshot", self._complete, bucket),
            Rule("lose_bucket_snapshot", self._lose, lambda s: bucket(s) and bool(s.storage.snapshots)),
        ]

    def _publish(self, data: st.DataObject, state: Any) -> d.AddMessage:
        if self.bucket_only:
            return self._publish_bucket_only(data)
        if data.draw(NEW_LEDGER, label="new_ledger"):
            self.ledger += 1
            self.entry = 0
        position = (self.ledger, self.entry)
        self.entry += 1
        self.published[position] = self.now + data.draw(DELAYS, label="delay")
        return d.AddMessage(position[0], position[1], self.published[position], self.now)

    def _publish_bucket_only(self, data: st.DataObject) -> d.AddMessage:
        delay = data.draw(BUCKET_ONLY_DELAYS, label="delay")
        if data.draw(NEW_LEDGER, label="new_ledger"):
            self.ledger += 1
        self.entry += 1
        old = data.draw(OLD_LEDGERS, label="old_ledger")
        ledger = max(1, self.ledger - old) if old == 3 else self.ledger
        self.published[(ledger, self.entry)] = self.now + delay
        return d.AddMessage(ledger, self.entry, self.now + delay, self.now)

    def _unreceived(self) -> list[tuple[int, int]]:
        return sorted(p for p in self.published if p not in self.received)

    def _replay(self, data: st.DataObject, state: Any) -> d.AddMessage:
        """The dispatcher re-reads a message the subscription has not received (after a restart or
        a clear, DD-3: one still tracked is a duplicate)."""
        position = data.draw(st.sampled_from(self._unreceived()), label="unreceived")
        return d.AddMessage(position[0], position[1], self.published[position], self.now)

    def _deliver(self, data: st.DataObject, state: Any) -> d.GetScheduledMessages:
        self.now += data.draw(BUCKET_ONLY_ADVANCE_MS if self.bucket_only else ADVANCE_MS, label="advance")
        limits = BUCKET_ONLY_MAX_MESSAGES if self.bucket_only else MAX_MESSAGES
        return d.GetScheduledMessages(data.draw(limits, label="max_messages"), self.now)

    def _available(self, data: st.DataObject, state: Any) -> d.HasMessageAvailable:
        self.now += data.draw(ADVANCE_MS, label="advance")
        return d.HasMessageAvailable(self.now)

    def _timer(self, data: st.DataObject, state: Any) -> d.TimerFired:
        """DD-25: the armed timer fires (at or after its target), or a stale one does."""
        target = state.timer.target
        self.now = max(self.now, target)
        stale = data.draw(st.booleans(), label="stale")
        return d.TimerFired(target + 1 if stale else target, self.now)

    def _mark_delete(self, data: st.DataObject, state: Any) -> d.MarkDelete:
        ledgers = BUCKET_ONLY_MARK_DELETE if self.bucket_only else st.integers(0, self.ledger + 1)
        return d.MarkDelete(data.draw(ledgers, label="ledger"))

    def _inject(self, data: st.DataObject, state: Any) -> d.InjectStorageFailure:
        operation = data.draw(STORAGE_OPERATIONS, label="operation")
        return d.InjectStorageFailure(operation, data.draw(FAILURE_COUNTS, label="count"))

    def _complete(self, data: st.DataObject, state: Any) -> d.CompleteBucketSnapshot:
        """DD-31: a snapshot creation in flight finishes (or, with none, an unknown one: refused)."""
        requests = sorted(state.pending_creates)
        pick = data.draw(PICKS, label="pick")
        request = requests[pick % len(requests)] if requests else 99
        return d.CompleteBucketSnapshot(request, data.draw(SUCCEEDED, label="succeeded"))

    def _lose(self, data: st.DataObject, state: Any) -> d.LoseBucketSnapshot:
        ids = sorted(state.storage.snapshots)
        return d.LoseBucketSnapshot(ids[data.draw(PICKS, label="pick") % len(ids)])

    def after(self, step: object, result: Ok[Any] | Err, state: Any) -> None:
        if not isinstance(result, Ok):
            return
        if isinstance(step, d.AddMessage) and result.value is False:
            self.received.add((step.ledger_id, step.entry_id))  # not tracked: dispatched at once
        elif isinstance(step, d.GetScheduledMessages):
            self.received |= {(p.ledger_id, p.entry_id) for p in result.value}

    def observations(self, state: Any) -> list[Observation]:
        plain: list[Observation] = [
            (name, {})
            for name in (
                "number_of_delayed_messages",
                "next_delivery_time",
                "bucket_ranges",
                "bucket_segments",
                "metrics",
                "timer_target",
                "cursor_properties",
                "fallback",
            )
        ]
        held: list[Observation] = [
            ("contains_message", {"ledger_id": ledger, "entry_id": entry}) for ledger, entry in sorted(self.published)
        ]
        return [*plain, *held, ("has_message_available", {"now_ms": self.now})]


def _is_bucket(state: Any) -> bool:
    return isinstance(state, d.BucketTracker)
