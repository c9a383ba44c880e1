"""Differential state machine: the bucket tracker against the in-memory baseline.

Two subscriptions of one topic, one per tracker, see the same publishes, clock moves, deliveries
and restarts; the bucket side also suffers injected storage failures.  A dispatcher model sits in
front of each tracker: a publish whose add is rejected is delivered at once, a restart replays
every message the subscription has not yet received, and a re-delivered message (the snapshot
still holds it, DD-24) is filtered as the consumer already has it.

Checked after every step: every invariant and step property; while no injected failure has been
consumed the two subscriptions receive the same messages at the same times (DD-13, DD-15, DD-29);
with failures, or after a restart that recovered buckets (re-delivered messages take slots of
``max_messages``), the bucket side may lag (DD-16, DD-24) but never receives anything the baseline
has not, and a full drain with storage healthy brings both to the same set.
"""

from __future__ import annotations

from typing import Any

from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conformance.strategies import delayed as ds
from invariants.base import violated, violated_steps
from invariants.delayed import INVARIANTS, STEP_PROPERTIES, deliver_at_of
from reference import delayed as d
from spec.config import Config
from spec.result import Ok


class Subscription:
    """A dispatcher in front of one tracker."""

    def __init__(self, tracker: d.Tracker) -> None:
        self.tracker = tracker
        self.received: dict[tuple[int, int], int] = {}  # position -> time first delivered

    def step(self, command: Any) -> Any:
        before = self.tracker
        after, result = d.step(before, command)
        assert violated(INVARIANTS, after) == [], (command, violated(INVARIANTS, after))
        assert violated_steps(STEP_PROPERTIES, before, command, result, after) == [], command
        self.tracker = after
        return result

    def publish(self, position: tuple[int, int], deliver_at: int, now: int) -> set[tuple[int, int]]:
        result = self.step(d.AddMessage(position[0], position[1], deliver_at, now))
        assert isinstance(result, Ok)
        if result.value is False:
            return self._deliver({position}, now)
        return set()

    def deliver(self, max_messages: int, now: int) -> set[tuple[int, int]]:
        result = self.step(d.GetScheduledMessages(max_messages, now))
        assert isinstance(result, Ok)
        return self._deliver({(p.ledger_id, p.entry_id) for p in result.value}, now)

    def _deliver(self, positions: set[tuple[int, int]], now: int) -> set[tuple[int, int]]:
        fresh = positions - set(self.received)
        for p in fresh:
            self.received[p] = now
        return fresh


class DifferentialDelayed(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.ledger = 1
        self.entry = 0
        self.published: dict[tuple[int, int], int] = {}
        self.diverged = False

    @initialize(
        tick=ds.TICKS,
        strict=ds.STRICT,
        min_index=ds.MIN_INDEX,
        step_seconds=ds.STEP_SECONDS,
        max_indexes=ds.MAX_INDEXES,
        max_buckets=ds.MAX_BUCKETS,
        async_create=ds.ASYNC_CREATE,
    )
    def setup(
        self,
        tick: int,
        strict: bool,
        min_index: int,
        step_seconds: int,
        max_indexes: int,
        max_buckets: int,
        async_create: bool,
    ) -> None:
        config = Config().with_overrides(
            ds.config_overrides(tick, strict, min_index, step_seconds, max_indexes, max_buckets)
        )
        self.bucket = Subscription(d.initial(config, tracker="bucket", async_create=async_create))
        self.memory = Subscription(d.initial(config, tracker="in_memory"))

    def _failures_consumed(self, before: Any) -> bool:
        tracker = self.bucket.tracker
        return isinstance(tracker, d.BucketTracker) and tracker.storage.failures != before

    def _failures(self) -> Any:
        tracker = self.bucket.tracker
        assert isinstance(tracker, d.BucketTracker)
        return tracker.storage.failures

    def _compare(self, from_bucket: set[tuple[int, int]], from_memory: set[tuple[int, int]]) -> None:
        if not self.diverged:
            assert from_bucket == from_memory, (sorted(from_bucket), sorted(from_memory))
        else:
            assert set(self.bucket.received) <= set(self.published)

    @rule(delay=ds.DELAYS, new_ledger=ds.NEW_LEDGER)
    def publish(self, delay: int, new_ledger: bool) -> None:
        """DD-1, DD-2, DD-6, DD-7, DD-8: a new message, its deliver-at fixed for ever."""
        if new_ledger:
            self.ledger += 1
            self.entry = 0
        position = (self.ledger, self.entry)
        self.entry += 1
        deliver_at = self.now + delay
        self.published[position] = deliver_at
        failures = self._failures()
        got_bucket = self.bucket.publish(position, deliver_at, self.now)
        got_memory = self.memory.publish(position, deliver_at, self.now)
        self.diverged |= self._failures_consumed(failures)
        self._compare(got_bucket, got_memory)

    @rule(ms=ds.ADVANCE_MS)
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule(max_messages=ds.MAX_MESSAGES)
    def get_scheduled_messages(self, max_messages: int) -> None:
        """DD-10, DD-12, DD-13, DD-15: same selection order, same limits."""
        failures = self._failures()
        tracker = self.bucket.tracker
        # DD-31: a bucket whose snapshot is still being created holds back its boundary.
        self.diverged |= isinstance(tracker, d.BucketTracker) and bool(tracker.pending_creates)
        got_bucket = self.bucket.deliver(max_messages, self.now)
        got_memory = self.memory.deliver(max_messages, self.now)
        self.diverged |= self._failures_consumed(failures)
        self._compare(got_bucket, got_memory)
        healthy = not any(self._failures().values()) and not self._pending()
        if max_messages >= 1000 and healthy and not self._failures_consumed(failures):
            # A full drain with healthy storage: both subscriptions have everything due.
            assert set(self.bucket.received) == set(self.memory.received)
            self.diverged = False

    @rule()
    def restart(self) -> None:
        """DD-24, DD-27, DD-29: both restart; the dispatcher replays what each has not received."""
        before = self.bucket.tracker
        failures = self._failures()
        self.bucket.step(d.Restart(self.now))
        self.memory.step(d.Restart(self.now))
        after = self.bucket.tracker
        assert isinstance(before, d.BucketTracker) and isinstance(after, d.BucketTracker)
        if not after.fallback:
            self._check_recovered(before, after)
        # A recovered segment may still hold messages the subscription already received: the
        # bucket side re-delivers them (filtered here) and they take slots of max_messages, so
        # deliveries may lag until the next full drain (DD-24).
        self.diverged |= self._failures_consumed(failures) or bool(after.buckets)
        self._replay()

    def _replay(self) -> None:
        """The dispatcher re-reads from the mark-delete position and re-adds what it has not
        delivered yet; already tracked messages are duplicates (DD-3)."""
        got: list[set[tuple[int, int]]] = []
        for sub in (self.bucket, self.memory):
            fresh: set[tuple[int, int]] = set()
            for position, deliver_at in sorted(self.published.items()):
                if position not in sub.received:
                    fresh |= sub.publish(position, deliver_at, self.now)
            got.append(fresh)
        self._compare(got[0], got[1])

    def _check_recovered(self, before: d.BucketTracker, after: d.BucketTracker) -> None:
        """DD-24: every message of a persisted bucket not yet due survives the restart with its
        deliver-at; the mutable bucket does not (it is replayed)."""
        cutoff = before.params.cutoff(self.now)
        due_at = deliver_at_of(before)
        recovered = deliver_at_of(after)
        for b in before.buckets:
            if b.bucket_id < 0 or b.bucket_id not in before.storage.snapshots:
                continue
            for ledger, bm in b.bitmaps.items():
                for entry in bm:
                    ts = due_at[(ledger, entry)]
                    if ts > cutoff:
                        assert recovered.get((ledger, entry)) == ts, (ledger, entry)

    @rule(operation=ds.STORAGE_OPERATIONS, count=ds.FAILURE_COUNTS)
    def inject_storage_failure(self, operation: str, count: int) -> None:
        """DD-14, DD-16, DD-17, DD-21, DD-27."""
        self.bucket.step(d.InjectStorageFailure(operation, count))

    @rule()
    def clear(self) -> None:
        """DD-23: both subscriptions' trackers are cleared, then the dispatcher replays."""
        failures = self._failures()
        self.bucket.step(d.Clear())
        self.memory.step(d.Clear())
        self.diverged |= self._failures_consumed(failures)
        self._replay()

    @rule()
    def has_message_available_and_timer(self) -> None:
        """DD-13, DD-25: availability re-arms the timer; a live timer fires once, a stale one never."""
        for sub in (self.bucket, self.memory):
            sub.step(d.HasMessageAvailable(self.now))
            target = sub.tracker.timer.target
            if target is not None:
                stale = sub.step(d.TimerFired(target + 1, self.now))
                assert stale == Ok(False)
                live = sub.step(d.TimerFired(target, max(self.now, target)))
                assert live == Ok(True, (d.ReadMoreEntries(),))

    @precondition(lambda self: hasattr(self, "bucket"))
    @rule()
    def mark_delete(self) -> None:
        """DD-22: the cursor's mark-delete moves to the first ledger with an unreceived message."""
        pending = [p[0] for p in self.published if p not in self.bucket.received or p not in self.memory.received]
        ledger = min(pending, default=self.ledger)
        failures = self._failures()
        self.bucket.step(d.MarkDelete(ledger))
        self.memory.step(d.MarkDelete(ledger))
        self.diverged |= self._failures_consumed(failures)

    def _pending(self) -> bool:
        tracker = self.bucket.tracker
        return isinstance(tracker, d.BucketTracker) and bool(tracker.pending_creates)

    @precondition(lambda self: hasattr(self, "bucket"))
    @rule(succeeded=ds.SUCCEEDED)
    def complete_bucket_snapshot(self, succeeded: bool) -> None:
        """DD-31: the oldest snapshot creation in flight finishes."""
        tracker = self.bucket.tracker
        assert isinstance(tracker, d.BucketTracker)
        if tracker.pending_creates:
            result = self.bucket.step(d.CompleteBucketSnapshot(min(tracker.pending_creates), succeeded))
            assert isinstance(result, Ok)

    @precondition(lambda self: self.diverged)
    @rule()
    def settle(self) -> None:
        """With storage healthy again, draining both trackers gives the same received sets."""
        tracker = self.bucket.tracker
        assert isinstance(tracker, d.BucketTracker)
        for request in sorted(tracker.pending_creates):
            self.bucket.step(d.CompleteBucketSnapshot(request, True))
        tracker = self.bucket.tracker
        assert isinstance(tracker, d.BucketTracker)
        self.bucket.tracker = d.BucketTracker(
            **{
                **{f: getattr(tracker, f) for f in d.BucketTracker.__dataclass_fields__},
                "storage": d.Storage(
                    tracker.storage.snapshots, tracker.storage.properties, tracker.storage.next_bucket_id
                ),
            }
        )
        self.now += 1000
        for _ in range(3):
            self.bucket.deliver(10**6, self.now)
            self.memory.deliver(10**6, self.now)
        due = {p for p, t in self.published.items() if t <= self.now}
        assert due <= set(self.memory.received)
        assert set(self.bucket.received) == set(self.memory.received)
        self.diverged = False

    @invariant()
    def never_early(self) -> None:
        """DD-1: nobody receives a message before deliver_at (strict) or deliver_at - tick."""
        if not hasattr(self, "bucket"):
            return
        params = self.bucket.tracker.params
        for sub in (self.bucket, self.memory):
            for position, when in sub.received.items():
                assert self.published[position] <= params.cutoff(when)


TestDifferentialDelayed = DifferentialDelayed.TestCase


class BucketOnly(RuleBasedStateMachine):
    """Every command of the bucket tracker, including a snapshot lost behind its back; every
    invariant and step property after every step (DD-4, DD-5, DD-10, DD-11, DD-19, DD-24)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.ledger = 1
        self.entry = 0

    @initialize(
        min_index=ds.BUCKET_ONLY_MIN_INDEX,
        max_buckets=ds.BUCKET_ONLY_MAX_BUCKETS,
        max_indexes=ds.BUCKET_ONLY_MAX_INDEXES,
        async_create=ds.ASYNC_CREATE,
    )
    def setup(self, min_index: int, max_buckets: int, max_indexes: int, async_create: bool) -> None:
        self.sub = Subscription(
            d.initial(
                Config().with_overrides(ds.bucket_only_overrides(min_index, max_buckets, max_indexes)),
                async_create=async_create,
            )
        )

    @rule(delay=ds.BUCKET_ONLY_DELAYS, new_ledger=ds.NEW_LEDGER, old_ledger=ds.OLD_LEDGERS)
    def add_message(self, delay: int, new_ledger: bool, old_ledger: int) -> None:
        if new_ledger:
            self.ledger += 1
        self.entry += 1
        # Mostly in ledger order, sometimes an older ledger (a re-read): DD-6, DD-7.
        ledger = max(1, self.ledger - old_ledger) if old_ledger == 3 else self.ledger
        self.sub.publish((ledger, self.entry), self.now + delay, self.now)

    @rule(ms=ds.BUCKET_ONLY_ADVANCE_MS, max_messages=ds.BUCKET_ONLY_MAX_MESSAGES)
    def get_scheduled_messages(self, ms: int, max_messages: int) -> None:
        self.now += ms
        self.sub.deliver(max_messages, self.now)

    @rule(ledger=ds.BUCKET_ONLY_MARK_DELETE)
    def mark_delete(self, ledger: int) -> None:
        self.sub.step(d.MarkDelete(ledger))

    @rule()
    def restart(self) -> None:
        self.sub.step(d.Restart(self.now))

    @rule()
    def clear(self) -> None:
        self.sub.step(d.Clear())

    @rule(operation=ds.STORAGE_OPERATIONS, count=ds.FAILURE_COUNTS)
    def inject_storage_failure(self, operation: str, count: int) -> None:
        self.sub.step(d.InjectStorageFailure(operation, count))

    @rule(pick=ds.PICKS, succeeded=ds.SUCCEEDED)
    def complete_bucket_snapshot(self, pick: int, succeeded: bool) -> None:
        tracker = self.sub.tracker
        assert isinstance(tracker, d.BucketTracker)
        requests = sorted(tracker.pending_creates)
        if requests:
            self.sub.step(d.CompleteBucketSnapshot(requests[pick % len(requests)], succeeded))
        else:
            assert not self.sub.step(d.CompleteBucketSnapshot(99, succeeded)).ok

    @rule(pick=ds.PICKS)
    def lose_bucket_snapshot(self, pick: int) -> None:
        tracker = self.sub.tracker
        assert isinstance(tracker, d.BucketTracker)
        ids = sorted(tracker.storage.snapshots)
        if ids:
            self.sub.step(d.LoseBucketSnapshot(ids[pick % len(ids)]))


TestBucketOnly = BucketOnly.TestCase
