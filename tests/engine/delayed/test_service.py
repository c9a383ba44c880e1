"""The broker's delayed-delivery service: the bucket tracker's snapshots on real ledgers, recovery
from them across broker crashes, trim, and storage failures (DD-14, DD-16, DD-17, DD-18, DD-19,
DD-22, DD-24, DD-25, DD-27, DD-29, DD-31)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from engine.broker import Broker, SubscriptionService, partition_name
from engine.delayed.bucket_storage import BucketSnapshotStorage, SnapshotStorageFailed
from engine.delayed.service import (
    BUCKET_FACTORY,
    IN_MEMORY_FACTORY,
    DelayedDeliveryService,
    delete_managed_ledger,
    recovery_inputs,
    tracker_kind,
)
from engine.ledger_store import LedgerStore
from engine.scheduler import Simulation
from engine.storage.ledger import InitialPosition
from reference import delayed as dd
from spec.config import Config
from spec.errors import RecoverDelayedDeliveryTracker
from spec.history import object_id
from spec.result import Err, Ok
from spec.types import Position

P = partition_name("t", 0)
SUB = "sub"
FAR = 100_000  # deliver-at offset: far enough that nothing falls due while the test sets up


class Observer:
    """A stand-in for the broker's machine observer: every call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, Any, Any]] = []

    def stepped(self, obj: str, machine: str, command: Any, result: Ok[Any] | Err) -> None:
        self.calls.append(("stepped", obj, machine, command, result))

    def recovered(self, obj: str, machine: str, inputs: Mapping[str, Any]) -> None:
        self.calls.append(("recovered", obj, machine, inputs, None))

    def crashed(self, obj: str) -> None:
        self.calls.append(("crashed", obj, "", None, None))


def _config(**overrides: Any) -> Config:
    base: dict[str, Any] = {
        "delayedDeliveryTrackerFactoryClassName": BUCKET_FACTORY,
        "delayedDeliveryMinIndexCountPerBucket": 3,
        "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": 2,
        "managedLedgerMaxEntriesPerLedger": 4,
        "isDelayedDeliveryDeliverAtTimeStrict": True,
        "delayedDeliveryTickTimeMillis": 10,
    }
    base.update(overrides)
    return Config().with_overrides(base)


class Harness:
    """One broker with topic ``t`` and a Shared subscription, driven without the client."""

    def __init__(
        self, config: Config, ledger: str = "memory", directory: Path | None = None, *, async_create: bool = False
    ) -> None:
        self.sim = Simulation(3)
        self.store = LedgerStore(ledger, config, directory=directory)
        self.broker = Broker(self.sim, self.store, config, topics={"t": 1}, delayed_async_create=async_create)
        self.observer = Observer()
        self.broker.observer = self.observer  # type: ignore[assignment]
        self.consumer = 0
        self.published: dict[Position, int] = {}
        self.delivered: dict[Position, int] = {}  # first delivery time
        self.subscribe()

    def subscribe(self) -> None:
        self.consumer += 1
        self.sim.wait(self.broker.subscribe(P, SUB, "Shared", InitialPosition.EARLIEST, self.consumer))

    @property
    def sub(self) -> SubscriptionService:
        found = self.broker.subscription(P, SUB)
        assert found is not None
        return found

    @property
    def service(self) -> DelayedDeliveryService:
        return self.sub.delayed_service()  # made on first use, as the dispatcher makes it

    @property
    def tracker(self) -> dd.BucketTracker:
        state = self.service.state
        assert isinstance(state, dd.BucketTracker)
        return state

    def publish(self, count: int, delay: int = FAR, step: int = 100) -> list[Position]:
        out = []
        for i in range(count):
            deliver_at = self.sim.now + delay + i * step
            position = self.sim.wait(
                self.broker.partition(P).publish(f"m{len(self.published)}".encode(), None, deliver_at)
            )
            self.published[position] = deliver_at
            out.append(position)
        self.sim.advance(1)
        return out

    def crash_and_restart(self) -> None:
        self.broker.crash()
        self.sim.advance(5)
        self.broker.restart()
        self.sim.advance(1)

    def drain(self, until: int) -> None:
        """Receive and acknowledge everything that arrives until ``until`` (ms)."""
        while self.sim.now < until:
            if not self.broker.partition(P).ready or not self.sub.ready:
                self.sim.advance(50)
                if self.sub.ready and self.consumer not in self.sub.consumers:
                    self.subscribe()
                continue
            if self.consumer not in self.sub.consumers:
                self.subscribe()
            got = self.sim.wait(self.sub.receive(self.consumer, 200))
            if got is None:
                continue
            self.delivered.setdefault(got.position, self.sim.now)
            self.sub.acknowledge(self.consumer, got.position, None, False)

    def assert_delivered_on_time(self) -> None:
        assert set(self.delivered) == set(self.published)
        early = {p: (t, self.published[p]) for p, t in self.delivered.items() if t < self.published[p]}
        assert early == {}

    def ledgers_of(self, bucket_ids: tuple[int, ...] | list[int]) -> list[bool]:
        return [self.store.exists(self.service.ledger_name(b)) for b in bucket_ids]

    def bucket_properties(self) -> dict[str, str]:
        assert self.sub.cursor is not None
        return {k: v for k, v in self.sub.cursor.properties.items() if k.startswith(dd.BUCKET_PROPERTY_PREFIX)}


def _ledger_kinds() -> list[str]:
    return ["memory", "file"]


def _harness(kind: str, tmp_path: Path, config: Config | None = None, **kwargs: Any) -> Harness:
    return Harness(config or _config(), kind, tmp_path if kind == "file" else None, **kwargs)


# --------------------------------------------------------------------------------------------
# Recovery from the snapshot ledgers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", _ledger_kinds())
def test_dd24_buckets_survive_a_broker_crash_through_their_snapshot_ledgers(kind: str, tmp_path: Path) -> None:
    """DD-18, DD-24: sealed buckets are on snapshot ledgers named in the cursor's properties; after a
    crash the tracker is rebuilt from them by the machine's Restart, before any replay; nothing is
    delivered early or lost."""
    h = _harness(kind, tmp_path)
    h.publish(14)
    before = h.tracker
    assert len(before.buckets) >= 2
    ids = h.service.bucket_ids
    assert ids and all(h.ledgers_of(ids))
    assert h.bucket_properties() == {b.key: str(b.bucket_id) for b in before.buckets}
    in_buckets = sum(b.count for b in before.buckets)

    h.observer.calls.clear()
    h.crash_and_restart()
    after = h.tracker
    # Recovered from the ledgers, not by replay: no consumer is connected, so nothing was re-read.
    assert h.sub.consumers == {}
    assert dd.bucket_ranges(after) == dd.bucket_ranges(before)
    assert [b.bucket_id for b in after.buckets] == [b.bucket_id for b in before.buckets]
    assert isinstance(h.service.recovery, Ok) and h.service.recovery.value == in_buckets
    assert after.count == in_buckets and after.mutable.size == 0
    assert {p for b in before.buckets for p in _bits(b.bitmaps)} == dd.tracked(after)
    assert len(h.service.inputs["snapshots"]) == len(ids)
    json.dumps(h.service.inputs)  # a JSON value, as the history stores it

    obj = object_id("tracker", f"{P}#{SUB}")
    kinds = [(c[0], c[3] if c[0] == "stepped" else None) for c in h.observer.calls if c[1] == obj and c[0] != "crashed"]
    assert kinds[:2] == [("recovered", None), ("stepped", dd.Restart(h.service.recovery_time))]
    # The recorded inputs rebuild the state the tracker restarted from, purely.
    restarted, result = dd.step(dd.recover_from_json(_config(), h.service.inputs), dd.Restart(h.service.recovery_time))
    assert result == h.service.recovery and dd.tracked(restarted) == dd.tracked(after)

    h.subscribe()
    h.drain(h.sim.now + FAR + 3_000)
    h.assert_delivered_on_time()
    assert h.bucket_properties() == {} and not any(h.ledgers_of(ids))  # DD-19: consumed buckets are deleted


def _bits(bitmaps: dd.Bitmaps) -> set[tuple[int, int]]:
    return {(ledger, e) for ledger, bm in bitmaps.items() for e in bm}


@pytest.mark.parametrize("kind", _ledger_kinds())
def test_no_message_early_or_lost_across_repeated_restarts(kind: str, tmp_path: Path) -> None:
    """DD-2, DD-3, DD-24: crashes between deliveries; recovered buckets and replayed messages meet
    without duplicates or losses."""
    h = _harness(kind, tmp_path)
    h.publish(10, delay=2_000, step=150)
    h.drain(h.sim.now + 2_400)
    h.crash_and_restart()
    h.publish(6, delay=1_000, step=90)
    h.drain(h.sim.now + 1_200)
    h.crash_and_restart()
    h.drain(h.sim.now + 4_000)
    h.assert_delivered_on_time()


def test_dd24_a_missing_snapshot_ledger_is_dropped_and_its_messages_come_back_by_replay() -> None:
    """DD-24: a property whose ledger is gone is removed at recovery; the dispatcher re-reads the
    messages from the cursor, so none is lost."""
    h = _harness("memory", Path())
    h.publish(8)
    lost = h.service.bucket_ids[0]
    h.broker.crash()
    delete_managed_ledger(h.store, h.service.ledger_name(lost))
    h.broker.restart()
    h.sim.advance(1)
    assert lost not in h.service.bucket_ids
    assert all(v != str(lost) for v in h.bucket_properties().values())
    h.subscribe()
    h.drain(h.sim.now + FAR + 2_000)
    h.assert_delivered_on_time()


def test_dd27_an_unreadable_snapshot_at_recovery_falls_back_and_keeps_the_snapshots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DD-17, DD-27: a metadata read failing every retry is handed to the machine, which falls back
    to in-memory mode; the snapshots and properties stay for the next restart, and replay delivers."""
    h = _harness("memory", Path())
    h.publish(8)
    ids = h.service.bucket_ids
    properties = h.bucket_properties()

    def broken(self: BucketSnapshotStorage, bucket_id: int) -> Any:
        raise SnapshotStorageFailed("injected")

    monkeypatch.setattr(BucketSnapshotStorage, "get_bucket_snapshot_metadata", broken)
    h.crash_and_restart()
    monkeypatch.undo()
    assert isinstance(h.service.recovery, Err)
    assert isinstance(h.service.recovery.error, RecoverDelayedDeliveryTracker)
    assert h.tracker.fallback and h.tracker.buckets == ()
    assert h.service.inputs["failures"] == [["metadata", dd.ATTEMPTS]]
    assert h.bucket_properties() == properties and all(h.ledgers_of(ids))
    h.subscribe()
    h.drain(h.sim.now + FAR + 2_000)
    h.assert_delivered_on_time()
    # The next restart recovers them again; what they hold was acknowledged, so nothing is redelivered.
    delivered = dict(h.delivered)
    h.crash_and_restart()
    assert not h.tracker.fallback
    h.subscribe()
    h.drain(h.sim.now + 2_000)
    assert h.delivered == delivered


# --------------------------------------------------------------------------------------------
# Storage failures while running
# --------------------------------------------------------------------------------------------


def test_dd14_a_create_failing_every_retry_keeps_the_bucket_in_memory() -> None:
    """DD-14, DD-17: the model decides the creation failed: no ledger, no property, every message
    still delivered on time."""
    h = _harness("memory", Path())
    h.service.inject_failure("create", dd.ATTEMPTS)
    h.publish(5)  # four entries fill the first ledger; the fifth, in the next, seals it
    assert [b.bucket_id for b in h.tracker.buckets] == [-1]
    assert h.bucket_properties() == {}
    h.drain(h.sim.now + FAR + 1_000)
    h.assert_delivered_on_time()


def test_dd17_three_failed_attempts_are_retried_and_the_snapshot_is_created() -> None:
    """DD-17: one try and three retries, on the engine's ledgers too."""
    h = _harness("memory", Path())
    h.service.storage.inject_failure("create", dd.ATTEMPTS - 1)
    h.publish(5)
    (bucket,) = h.tracker.buckets
    assert bucket.bucket_id >= 0 and all(h.ledgers_of([bucket.bucket_id]))
    assert h.service.storage.pending_failures("create") == 0


def test_a_snapshot_the_ledgers_cannot_take_reloads_the_topic() -> None:
    """The tracker adopted a snapshot its ledger then refused (every retry): its memory ran ahead of
    storage, so the topic reloads from durable state; no property names the failed snapshot and no
    message is lost."""
    h = _harness("memory", Path())
    partition = h.broker.partition(P)
    h.service.storage.inject_failure("create", dd.ATTEMPTS)
    h.publish(5)
    h.sim.advance(200)
    assert partition.ready and h.sub.ready
    obj = object_id("tracker", f"{P}#{SUB}")
    assert [c[0] for c in h.observer.calls if c[1] == obj and c[0] != "stepped"] == ["recovered", "crashed"]
    assert h.bucket_properties() == {}
    h.drain(h.sim.now + FAR + 1_000)
    # No property names a bucket, so the reloaded dispatcher made a new tracker only when it re-read
    # the first delayed message.
    assert [c[0] for c in h.observer.calls if c[1] == obj and c[0] != "stepped"] == [
        "recovered",
        "crashed",
        "recovered",
    ]
    h.assert_delivered_on_time()


def test_dd16_a_failed_segment_load_is_retried_on_a_later_round() -> None:
    """DD-16: the round stops at the boundary; a later round loads the segment; nothing is lost."""
    h = _harness("memory", Path())
    h.publish(6, delay=500, step=50)
    assert any(b.last_segment > 1 for b in h.tracker.buckets)
    h.service.inject_failure("load", dd.ATTEMPTS)
    h.drain(h.sim.now + 2_000)
    assert h.tracker.op_counts.get("load.failed", 0) >= 1
    h.assert_delivered_on_time()


@pytest.mark.parametrize("level", ["model", "engine"])
def test_dd19_a_failed_delete_leaves_ledger_and_property(level: str) -> None:
    """DD-19: the delete of a consumed bucket fails every retry: the ledger and its property stay (an
    orphan the next recovery finds), and delivery is unaffected."""
    h = _harness("memory", Path())
    h.publish(5, delay=300, step=10)
    (bucket_id,) = h.service.bucket_ids
    if level == "model":
        h.service.inject_failure("delete", dd.ATTEMPTS)
    else:
        h.service.storage.inject_failure("delete", dd.ATTEMPTS)
    h.drain(h.sim.now + 1_000)
    h.assert_delivered_on_time()
    assert h.ledgers_of([bucket_id]) == [True]
    assert str(bucket_id) in h.bucket_properties().values()
    # Recovery finds the orphan; all its segments are past due, so the machine deletes it (DD-24).
    h.crash_and_restart()
    assert h.ledgers_of([bucket_id]) == [False] and h.bucket_properties() == {}


# --------------------------------------------------------------------------------------------
# Trim
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", _ledger_kinds())
def test_dd22_buckets_below_the_mark_delete_ledger_are_deleted(kind: str, tmp_path: Path) -> None:
    """DD-22: acknowledging a bucket's messages before they are due moves the cursor's mark-delete
    into a later ledger; the service feeds MarkDelete and the tracker deletes the buckets below it,
    ledgers and properties; they are never delivered."""
    h = _harness(kind, tmp_path)
    positions = h.publish(13)
    ids = h.service.bucket_ids
    assert len(ids) >= 2 and all(h.ledgers_of(ids))
    first_ledgers = {p.ledger_id for p in positions[:8]}
    for p in positions[:9]:
        h.sim.wait(h.sub.acknowledge(h.consumer, p, None, False))
    assert h.sub.cursor is not None
    mark = h.sub.cursor.mark_delete_position.ledger_id
    assert mark > max(first_ledgers)
    assert h.tracker.mark_delete_ledger == mark
    assert any(isinstance(c[3], dd.MarkDelete) for c in h.observer.calls if c[0] == "stepped")
    h.sim.advance(1)
    below = [b for b in ids if b not in h.service.bucket_ids]
    assert below and not any(h.ledgers_of(below))
    assert all(v not in {str(b) for b in below} for v in h.bucket_properties().values())
    h.drain(h.sim.now + FAR + 2_000)
    assert not set(h.delivered) & set(positions[:9])
    assert set(h.delivered) == set(positions[9:])


def test_dd22_trim_at_seal_with_a_bucket_limit() -> None:
    """DD-20, DD-22: with a bucket limit, a seal trims the buckets below the mark-delete ledger first."""
    h = _harness("memory", Path(), _config(delayedDeliveryMaxNumBuckets=1))
    positions = h.publish(8)
    for p in positions[:5]:
        h.sim.wait(h.sub.acknowledge(h.consumer, p, None, False))
    ids = h.service.bucket_ids
    h.publish(5)
    assert not any(h.ledgers_of([b for b in ids if b not in h.service.bucket_ids]))
    h.drain(h.sim.now + FAR + 3_000)
    assert set(h.delivered) == set(positions[5:]) | (set(h.published) - set(positions))


# --------------------------------------------------------------------------------------------
# Asynchronous creation, in-memory tracker, recovery inputs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("succeed", [True, False])
def test_dd31_asynchronous_creation_completes_later(succeed: bool) -> None:
    """DD-31: the snapshot ledger is written after the seal and the outcome stepped back; a failure
    sends the bucket to memory mode without reloading anything."""
    h = _harness("memory", Path(), async_create=True)
    if not succeed:
        h.service.storage.inject_failure("create", dd.ATTEMPTS)
    partition = h.broker.partition(P)
    h.publish(5)
    completes = [c for c in h.observer.calls if c[0] == "stepped" and isinstance(c[3], dd.CompleteBucketSnapshot)]
    assert [c[3].succeeded for c in completes] == [succeed]
    (bucket,) = h.tracker.buckets
    assert bucket.pending_create == 0
    if succeed:
        assert h.ledgers_of([bucket.bucket_id]) == [True]
        assert h.bucket_properties() == {bucket.key: str(bucket.bucket_id)}
    else:
        assert bucket.bucket_id == -1 and h.bucket_properties() == {}
    assert h.broker.partition(P) is partition and partition.ready
    h.drain(h.sim.now + FAR + 1_000)
    h.assert_delivered_on_time()


@pytest.mark.parametrize("operation", ["metadata", "load"])
def test_dd27_a_recovery_whose_reads_the_bookies_fail_falls_back(operation: str) -> None:
    """DD-17, DD-27: ``fail_next_recovery`` (the bucket_faults variant's recovery fault) makes the next
    recovery's snapshot reads fail on the ledgers past their retries: the tracker falls back, keeps
    the snapshots for a later restart, and the dispatcher's replay delivers everything on time."""
    h = _harness("memory", Path())
    h.publish(8)
    ids = h.service.bucket_ids
    assert ids
    h.sub.delays.fail_next_recovery(operation, dd.ATTEMPTS)
    h.crash_and_restart()
    assert isinstance(h.service.recovery, Err)
    assert h.tracker.fallback and h.service.inputs["failures"] == [[operation, dd.ATTEMPTS]]
    assert all(h.ledgers_of(ids))
    h.subscribe()
    h.drain(h.sim.now + FAR + 2_000)
    h.assert_delivered_on_time()
    h.crash_and_restart()  # the failures were the one recovery's
    assert not h.tracker.fallback


def test_dd13_an_asynchronous_tracker_is_asked_has_message_available_first() -> None:
    """DD-13: with ``async_create`` the dispatcher asks ``HasMessageAvailable`` and asks for the
    scheduled messages only when it answers true, as Pulsar's dispatcher does."""
    h = _harness("memory", Path(), async_create=True)
    h.publish(3, delay=500)
    h.drain(h.sim.now + 2_000)
    h.assert_delivered_on_time()
    steps = [c[3] for c in h.observer.calls if c[0] == "stepped"]
    asks = [k for k, c in enumerate(steps) if isinstance(c, dd.HasMessageAvailable)]
    gets = [k for k, c in enumerate(steps) if isinstance(c, dd.GetScheduledMessages)]
    assert asks and gets and all(k - 1 in asks for k in gets)


def test_dd29_the_in_memory_tracker_by_default() -> None:
    """DD-29: Pulsar's default factory is the in-memory tracker: nothing on ledgers, a restart starts
    empty and the dispatcher's replay brings the messages back."""
    assert tracker_kind(Config()) == "in_memory"
    h = _harness("memory", Path(), _config(delayedDeliveryTrackerFactoryClassName=IN_MEMORY_FACTORY))
    h.publish(6, delay=500)
    assert isinstance(h.service.state, dd.InMemoryTracker) and h.service.state.count == 6
    h.crash_and_restart()
    assert h.service.inputs == {"tracker": "in_memory", "async_create": False}
    assert isinstance(h.service.state, dd.InMemoryTracker) and h.service.state.count == 0
    h.subscribe()
    h.drain(h.sim.now + 2_000)
    h.assert_delivered_on_time()
    assert h.bucket_properties() == {}


def test_unknown_tracker_factory_is_refused() -> None:
    with pytest.raises(ValueError, match="delayedDeliveryTrackerFactoryClassName"):
        tracker_kind(Config().with_overrides({"delayedDeliveryTrackerFactoryClassName": "x.Y"}))


def test_recovery_inputs_round_trip_through_json() -> None:
    """DD-24: the JSON recovery inputs rebuild the storage the machine restarts from."""
    config = _config()
    state: dd.Tracker = dd.initial(config)
    for i in range(9):
        state, _ = dd.step(state, dd.AddMessage(1 + i // 3, i, 5_000 + 7 * i, 0))
    assert isinstance(state, dd.BucketTracker) and state.storage.snapshots
    inputs = json.loads(json.dumps(recovery_inputs(state.storage, mark_delete_ledger=2, failures={"load": 1})))
    rebuilt = dd.recover_from_json(config, inputs)
    assert isinstance(rebuilt, dd.BucketTracker)
    assert rebuilt.storage.snapshots == state.storage.snapshots
    assert rebuilt.storage.properties == state.storage.properties
    assert rebuilt.mark_delete_ledger == 2 and dict(rebuilt.storage.failures) == {"load": 1}
    ok = dd.step(rebuilt, dd.Restart(100))
    expected = dd.recover(
        state.params,
        dd.Storage(
            state.storage.snapshots, state.storage.properties, state.storage.next_bucket_id, rebuilt.storage.failures
        ),
        100,
        mark_delete_ledger=2,
    )
    assert ok == expected


def test_same_seed_same_tracker_steps() -> None:
    """The service keeps the simulation deterministic: two runs step the tracker identically."""
    logs = []
    for _ in range(2):
        h = _harness("memory", Path())
        h.publish(9, delay=400, step=30)
        h.crash_and_restart()
        h.subscribe()
        h.drain(h.sim.now + 1_500)
        logs.append([(c[0], c[1], repr(c[3]), repr(c[4])) for c in h.observer.calls])
    assert logs[0] == logs[1] and len(logs[0]) > 20


def test_simulated_tracker_history_is_checked_against_the_machine(tmp_path: Path) -> None:
    """The delayed workload under faults with the bucket tracker: the tracker's recorded steps and
    recoveries (snapshots included) linearize against ``reference.delayed``, and the file ledger
    records exactly what the memory ledger does."""
    from engine.simulation.workloads import RunSpec, run
    from invariants.linearizability import Verdict, check_object
    from invariants.models import MachineModel

    config = _config(managedLedgerMaxEntriesPerLedger=4, delayedDeliveryTickTimeMillis=100)
    rows = {}
    for ledger in ("memory", "file"):
        result = run(
            RunSpec(
                workload="delayed",
                seed=0,
                ops=40,
                faults=True,
                config=config,
                ledger=ledger,
                data_dir=str(tmp_path / "data") if ledger == "file" else None,
            )
        )
        ops = [op for op in result.operations if op.object.startswith("tracker:")]
        rows[ledger] = [{k: v for k, v in op.to_row().items() if k != "history"} for op in ops]
        assert any(op.f == "recover" and op.args.get("snapshots") for op in ops)  # buckets came back from ledgers
        verdict = check_object(MachineModel.from_vectors(dd.VECTORS, config), ops)
        assert verdict.verdict is Verdict.OK, verdict.reason
    assert rows["memory"] == rows["file"]


def test_dd28_the_service_exports_pulsars_bucket_metrics() -> None:
    """DD-28: the service's stats and state feed the exporter like a MeteredBucketTracker."""
    from engine.delayed.metrics import DelayedIndexMetrics

    h = _harness("memory", Path())
    metrics = DelayedIndexMetrics()
    metrics.add_subscription(P, SUB, h.service)
    h.publish(9)
    text = metrics.exposition()
    buckets = len(h.tracker.buckets)
    assert (
        f'pulsar_delayed_message_index_bucket_total{{cluster="standalone",namespace="public/default",'
        f'subscription="{SUB}",topic="{P}"}} {float(buckets + 1)}' in text
    )
    assert 'state="succeed",subscription="sub",topic' in text and 'type="create"' in text
    metrics.close()
