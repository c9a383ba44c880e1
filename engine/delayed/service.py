"""A subscription's delayed-delivery service: the pure tracker (PIP-195) carried out on real ledgers.

The tracker :mod:`reference.delayed` decides everything — whether a message waits, what is due,
when to seal, merge, trim, and what a restart recovers.  This service owns one subscription's
tracker state and carries out what each step returns:

* ``CreateBucketSnapshot`` / ``DeleteBucketSnapshot`` / ``SetCursorProperty`` /
  ``RemoveCursorProperty`` on :class:`~engine.delayed.bucket_storage.BucketSnapshotStorage`: one
  managed ledger per bucket (entry 0 metadata, entries 1..N segments, DD-18) and the bucket
  catalogue in the subscription cursor's properties; a delete removes the ledger, then the property
  (DD-19);
* the segment loads the step made (the tracker reads its modelled storage; the service reads the
  same segments from the snapshot ledgers and checks they agree);
* ``ScheduleTimer`` / ``CancelTimer`` on the simulation's clock, ``TimerFired`` back into the
  tracker, and ``ReadMoreEntries`` to the dispatcher (DD-25);
* ``RequestCreateBucketSnapshot`` (DD-31, asynchronous creation): the snapshot ledger is written a
  millisecond later, or up to ``CREATE_LATENCY_MS`` later (a busy bookie), and the outcome is
  stepped as ``CompleteBucketSnapshot``.

It feeds ``MarkDelete`` when the cursor's mark-delete position moves into a later ledger (DD-22),
and at load rebuilds the tracker from what is durable — the cursor's bucket properties and the
snapshot ledgers — by stepping the machine's own ``Restart`` (DD-24, DD-26, DD-27) on the state
:func:`reference.delayed.recover_from_json` decodes from the recovery inputs.

Failures.  Each storage operation is tried ``1 + DELAYED_STORAGE_MAX_RETRIES`` times (DD-17).  At
recovery a read that fails every attempt becomes a queued failure in the recovery inputs, so the
machine itself falls back to the in-memory mode (DD-27).  While running, the tracker's new state is
adopted as it steps (as every machine in the broker); when a write it asked for then fails for good
(a snapshot creation, a cursor property) or a segment it loaded cannot be read back, its memory ran
ahead of its storage and the service reports ``failed`` — the broker reloads the topic, as it does
for any other component.  A failed delete leaves the ledger and its property (an orphan recovery
finds again, DD-19).  Failures decided by the model (``InjectStorageFailure``,
:meth:`DelayedDeliveryService.inject_failure`) never reach the ledgers; failures of the ledgers
themselves (:meth:`DelayedDeliveryService.fail_storage`, and ``storage_failures`` at load) are met
as the service writes or reads: an asynchronous creation's is its failed ``CompleteBucketSnapshot``,
a recovery's its fallback.  The simulation's ``bucket_faults`` variant injects both kinds
(``engine.simulation.fault_schedule``).

Every tracker step goes through :meth:`DelayedDeliveryService._step`, which reports it to the
broker's machine observer (``stepped``); every load reports its inputs (``recovered``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Final, Protocol, TypeVar

from engine.delayed.bucket_storage import BucketSnapshotStorage, clean_residual_snapshots, segment_reads
from engine.delayed.metrics import BucketIndexStats, TimedBucketSnapshotStorage, elapsed_ms
from engine.ledger_store import LedgerStore
from engine.recorder import STEP_RAISED, mark_recorded
from engine.scheduler import Simulation
from engine.storage.ledger import LedgerError, ManagedCursor, ManagedLedger
from reference import delayed as dd
from spec.config import Config
from spec.history import object_id
from spec.jsonvalues import to_json
from spec.result import Err, Ok
from spec.types import Position

__all__ = [
    "BUCKET_FACTORY",
    "IN_MEMORY_FACTORY",
    "DelayedDeliveryService",
    "MachineObserver",
    "delete_managed_ledger",
    "recovery_inputs",
    "tracker_kind",
]

IN_MEMORY_FACTORY: Final = "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory"
BUCKET_FACTORY: Final = "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"
_KINDS: Final[Mapping[str, str]] = {IN_MEMORY_FACTORY: "in_memory", BUCKET_FACTORY: "bucket"}
MACHINE: Final = "delayed"
# The longest an asynchronous snapshot creation takes (DD-31), in simulated ms.
CREATE_LATENCY_MS: Final = 200

T = TypeVar("T")


class MachineObserver(Protocol):
    """What the broker's machine-level recorder offers (``Broker.observer``)."""

    def stepped(self, obj: str, machine: str, command: object, result: Ok[object] | Err) -> None: ...

    def recovered(self, obj: str, machine: str, inputs: Mapping[str, object]) -> None: ...

    def queried(self, obj: str, machine: str, name: str, args: Mapping[str, object], answer: object) -> None: ...


def tracker_kind(config: Config) -> str:
    """``bucket`` or ``in_memory``, from ``delayedDeliveryTrackerFactoryClassName`` as in Pulsar."""
    name = config.delayed_delivery_tracker_factory_class_name
    kind = _KINDS.get(name)
    if kind is None:
        raise ValueError(f"unknown delayedDeliveryTrackerFactoryClassName {name!r}; one of {sorted(_KINDS)}")
    return kind


def delete_managed_ledger(store: LedgerStore, name: str) -> None:
    """Delete the managed ledger ``name`` for good (missing is fine), as a BookKeeper client deletes
    a bucket's ledger."""
    store.delete(name)


def _snapshot_json(
    start: int, end: int, metadata: tuple[dd.SegmentMeta, ...], segments: list[dd.Run], length: int
) -> dict[str, Any]:
    return {
        "start_ledger_id": start,
        "end_ledger_id": end,
        "length": length,
        "metadata": [
            {
                "min_schedule_timestamp": m.min_schedule_timestamp,
                "max_schedule_timestamp": m.max_schedule_timestamp,
                "bitmaps": to_json(m.bitmaps),
            }
            for m in metadata
        ],
        "segments": [[list(index) for index in run.indexes()] for run in segments],
    }


def recovery_inputs(
    storage: dd.Storage,
    *,
    async_create: bool = False,
    mark_delete_ledger: int = -1,
    failures: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The recovery inputs (see :func:`reference.delayed.recover_from_json`) of a model storage."""
    return {
        "tracker": "bucket",
        "async_create": async_create,
        "mark_delete_ledger": mark_delete_ledger,
        "next_bucket_id": storage.next_bucket_id,
        "cursor_properties": to_json(storage.properties),
        "snapshots": [
            [bucket_id, _snapshot_json(s.start_ledger_id, s.end_ledger_id, s.metadata, list(s.segments), s.length)]
            for bucket_id, s in sorted(storage.snapshots.items())
        ],
        "failures": sorted([op, n] for op, n in (failures or {}).items() if n),
    }


def _bucket_range(key: str) -> tuple[int, int] | None:
    parts = key[len(dd.BUCKET_PROPERTY_PREFIX) + 1 :].split("_")
    if not key.startswith(dd.BUCKET_PROPERTY_PREFIX + "_") or len(parts) != 2:
        return None
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return None


class DelayedDeliveryService:
    """One subscription's delayed-delivery tracker on the engine's ledgers.

    ``read_more`` is the dispatcher (called for ``ReadMoreEntries``); ``failed`` is called once when
    storage can no longer follow the tracker (the owner reloads); ``observer`` returns the broker's
    machine observer, if any.  Build it with :meth:`load`.
    """

    def __init__(
        self,
        sim: Simulation,
        store: LedgerStore,
        config: Config,
        cursor: ManagedCursor,
        *,
        partition: str,
        subscription: str,
        read_more: Callable[[], None],
        failed: Callable[[], None],
        observer: Callable[[], MachineObserver | None] = lambda: None,
        async_create: bool = False,
        owner: object = None,
    ) -> None:
        self.sim = sim
        # The broker component this tracker's events (timers, snapshot completions) run for: what
        # they raise is contained as that component's failure (Broker.contain).
        self.owner = owner
        self.store = store
        self.config = config
        self.cursor = cursor
        self.kind = tracker_kind(config)
        self.async_create = async_create
        self.obj = object_id("tracker", f"{partition}#{subscription}")
        self.prefix = f"__delayed_bucket/{partition}/{subscription}"
        # DD-28: Pulsar's stats of this tracker; latencies on the simulation's clock, so runs stay
        # deterministic (register the service with DelayedIndexMetrics.add_subscription to export them).
        self.stats = BucketIndexStats()
        self.storage = TimedBucketSnapshotStorage(
            self._open_fresh,
            self._delete_ledger,
            cursor,
            prefix=self.prefix,
            clock=self._clock,
            on_success=self.stats.record_success,
        )
        self._read_more = read_more
        self._failed = failed
        self._observer = observer
        self.state: dd.Tracker = dd.initial(config, tracker=self.kind, async_create=async_create)
        self.recovery: Ok[Any] | Err | None = None  # what the Restart step answered
        self.recovery_time = 0
        self.inputs: dict[str, Any] = {}
        self.alive = True
        self._timer = 0  # generation of the armed timer; a cancelled or superseded one does nothing
        self._mark_delete_ledger = -1
        self._prewritten: set[int] = set()  # snapshot ledgers written before their CompleteBucketSnapshot
        self._loading = False

    # -- lifecycle --------------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        sim: Simulation,
        store: LedgerStore,
        config: Config,
        cursor: ManagedCursor,
        *,
        partition: str,
        subscription: str,
        read_more: Callable[[], None],
        failed: Callable[[], None],
        observer: Callable[[], MachineObserver | None] = lambda: None,
        async_create: bool = False,
        storage_failures: Mapping[str, int] | None = None,
        owner: object = None,
    ) -> DelayedDeliveryService:
        """Open the service and recover its tracker from the cursor and the snapshot ledgers (DD-24).
        ``storage_failures``: snapshot-storage reads that fail from the start (operation -> count,
        :meth:`fail_storage`), so recovery itself meets them (DD-27)."""
        service = cls(
            sim,
            store,
            config,
            cursor,
            partition=partition,
            subscription=subscription,
            read_more=read_more,
            failed=failed,
            observer=observer,
            async_create=async_create,
            owner=owner,
        )
        for operation, count in sorted((storage_failures or {}).items()):
            service.fail_storage(operation, count)
        service._recover()
        return service

    def clear(self) -> None:
        """The subscription is deleted: the tracker's ``Clear`` deletes every bucket snapshot and its
        property (DD-23, DL6); a delete that fails leaves an orphan, as DD-19 says."""
        self._step(dd.Clear())

    @staticmethod
    def clean_residual(
        store: LedgerStore, cursor: ManagedCursor, *, partition: str, subscription: str
    ) -> tuple[int, ...]:
        """A subscription deleted without a live tracker: every bucket its cursor's properties name is
        removed, property first, then ledger (Pulsar's ``cleanResidualSnapshots``, CP4)."""
        storage = BucketSnapshotStorage(
            store.open,
            partial(delete_managed_ledger, store),
            cursor,
            prefix=f"__delayed_bucket/{partition}/{subscription}",
        )
        return clean_residual_snapshots(storage, cursor)

    def close(self) -> None:
        """The owner crashed or unloaded: timers and creations in flight are dropped (DD-31)."""
        if not self.alive:
            return
        self.alive = False
        crashed = getattr(self._observer(), "crashed", None)
        if callable(crashed):
            crashed(self.obj)  # steps still waiting for their request's answer never get it

    def _recover(self) -> None:
        mark_delete = self.cursor.mark_delete_position.ledger_id
        if self.kind == "in_memory":
            self.inputs = {"tracker": "in_memory", "async_create": self.async_create}
        else:
            self.inputs = self._durable_inputs(mark_delete)
        self.state = dd.recover_from_json(self.config, self.inputs)
        observer = self._observer()
        if observer is not None:
            observer.recovered(self.obj, MACHINE, self.inputs)
        self._mark_delete_ledger = mark_delete
        self.recovery_time = self.sim.now
        self._loading = True
        try:
            self.recovery = self._step(dd.Restart(self.recovery_time))
        finally:
            self._loading = False

    def _durable_inputs(self, mark_delete_ledger: int) -> dict[str, Any]:
        """Read the bucket catalogue and every snapshot ledger it names.  A read failing every attempt
        is handed to the machine as queued failures, and the machine falls back (DD-27)."""
        # A property the tracker could not have written (not a bucket range, not a bucket id) is not
        # part of the catalogue.
        properties = {
            k: v for k, v in sorted(self.cursor.properties.items()) if _bucket_range(k) is not None and v.isdigit()
        }
        snapshots: list[list[Any]] = []
        failures: dict[str, int] = {}
        ids = [int(v) for v in properties.values()]
        for key, value in properties.items():
            bounds = _bucket_range(key)
            assert bounds is not None
            bucket_id = int(value)
            name = self.storage.name_of(bucket_id)
            if not self.store.exists(name):
                continue  # a missing snapshot ledger: the machine deletes its property (DD-24)
            try:
                ledger = self.store.open(name)
                self.storage.attach(bucket_id, ledger, Position(ledger.ledgers()[0].ledger_id, 0))
            except LedgerError:
                failures["metadata"] = dd.ATTEMPTS
                break
            metadata = self._retry(self.storage.get_bucket_snapshot_metadata, bucket_id)
            length = self._retry(self.storage.get_bucket_snapshot_length, bucket_id)
            if metadata is None or length is None:
                failures["metadata"] = dd.ATTEMPTS
                break
            # Recovery's reads are counted by the tracker as loads but not timed (DD-28).
            read = partial(BucketSnapshotStorage.get_bucket_snapshot_segment, self.storage)
            segments = self._retry(read, bucket_id, 1, len(metadata[0])) if metadata[0] else ([],)
            if segments is None:
                # The snapshot is there (its metadata was read) but its segments cannot be: it stays
                # in the inputs, without segments, and the machine's first segment load meets the
                # failure and falls back (DD-27).  Left out, it would read as a missing snapshot,
                # whose property and ledger recovery deletes (DD-24); so would the buckets not yet
                # read, hence no break here.
                failures["load"] = dd.ATTEMPTS
                segments = ([],)
            snapshots.append([bucket_id, _snapshot_json(*bounds, metadata[0], segments[0], length[0])])
        return {
            "tracker": "bucket",
            "async_create": self.async_create,
            "mark_delete_ledger": mark_delete_ledger,
            "next_bucket_id": max([0, *ids]) + 1,
            "cursor_properties": to_json(properties),
            "snapshots": snapshots,
            "failures": sorted([op, n] for op, n in failures.items()),
        }

    # -- what the dispatcher asks -----------------------------------------------------------------

    def add_message(self, position: Position, deliver_at: int) -> bool:
        """True when the tracker keeps the message to deliver later (DD-1 .. DD-8, DD-29)."""
        result = self._step(dd.AddMessage(position.ledger_id, position.entry_id, deliver_at, self.sim.now))
        return isinstance(result, Ok) and bool(result.value)

    def scheduled_messages(self, max_messages: int = 1 << 30) -> tuple[Position, ...]:
        """The messages due now (DD-10, DD-12, DD-13, DD-15, DD-16, DD-22).  With ``async_create``
        (Pulsar's asynchronous tracker) the dispatcher first asks whether one is due, as Pulsar's
        does (``hasMessageAvailable``, which re-arms the timer when none is)."""
        if self.async_create:
            available = self._step(dd.HasMessageAvailable(self.sim.now))
            if not (isinstance(available, Ok) and available.value):
                return ()
        result = self._step(dd.GetScheduledMessages(max_messages, self.sim.now))
        return tuple(result.value) if isinstance(result, Ok) else ()

    def mark_delete_moved(self, position: Position) -> None:
        """The cursor's mark-delete position is now ``position``: a move into a later ledger is the
        tracker's trim input (DD-22).  The in-memory tracker has no use for it."""
        if self.alive and isinstance(self.state, dd.BucketTracker) and position.ledger_id > self._mark_delete_ledger:
            self._mark_delete_ledger = position.ledger_id
            self._step(dd.MarkDelete(position.ledger_id))

    def inject_failure(self, operation: str, count: int = 1) -> None:
        """Queue failures the model decides on (DD-17): ``create``, ``load``, ``delete``, ``metadata``."""
        self._step(dd.InjectStorageFailure(operation, count))

    def fail_storage(self, operation: str, count: int = 1) -> None:
        """Make the next ``count`` attempts of a snapshot-storage ``operation`` fail on the ledgers
        themselves (BookKeeper errors, DD-17): ``create``, ``metadata``, ``load``, ``delete`` or
        ``length``.  Unlike :meth:`inject_failure` the model does not decide them: the service
        meets them as it carries out the tracker's effects (an asynchronous creation that fails is
        stepped as a failed ``CompleteBucketSnapshot``) or reads for a recovery."""
        self.storage.inject_failure(operation, count)

    @property
    def bucket_ids(self) -> tuple[int, ...]:
        """Bucket ids of the tracker's immutable buckets that have a snapshot."""
        if not isinstance(self.state, dd.BucketTracker):
            return ()
        return tuple(b.bucket_id for b in self.state.buckets if b.bucket_id >= 0)

    def ledger_name(self, bucket_id: int) -> str:
        return self.storage.name_of(bucket_id)

    def query(self, name: str, **args: object) -> object:
        """Ask the tracker's ``VECTORS`` observer ``name`` about its current state, as the owner's
        own work (what it raises is contained as the owner's failure), and record the answer as a
        query row, as ``Component.query`` does for the broker's other machines."""
        state = self.state
        observe = dd.VECTORS.observers[name]
        within = getattr(self.owner, "within", None)
        answer = within(lambda: observe(state, **args)) if callable(within) else observe(state, **args)
        observer = self._observer()
        if observer is not None:
            observer.queried(
                self.obj, MACHINE, name, {key: to_json(value) for key, value in args.items()}, to_json(answer)
            )
        return answer

    # -- the funnel -------------------------------------------------------------------------------

    def _step(self, command: dd.Command) -> Ok[Any] | Err:
        """Every tracker step: step the machine, report it, carry out its effects."""
        old = self.state
        try:
            self.state, result = dd.step(old, command)
        except Exception as exc:
            # As Component._advance: the step that raised is recorded as failed, and the broker
            # contains the exception as its subscription's partition crashing.
            failed = getattr(self._observer(), "failed", None)
            if failed is not None:
                failed(self.obj, MACHINE, command, STEP_RAISED)
                mark_recorded(exc)
            raise
        observer = self._observer()
        if observer is not None:
            observer.stepped(self.obj, MACHINE, command, result)
        self._carry_out(command, old, result)
        return result

    def _carry_out(self, command: dd.Command, old: dd.Tracker, result: Ok[Any] | Err) -> None:
        new = self.state
        merged = False
        started = self._clock()
        if isinstance(new, dd.BucketTracker):
            if isinstance(command, dd.Restart):
                self.stats.add_op_counts({}, dd.metrics(new))  # a new tracker counts from zero
            elif isinstance(old, dd.BucketTracker) and old.op_counts is not new.op_counts:
                self.stats.add_op_counts(dd.metrics(old), dd.metrics(new))
        if (
            not isinstance(command, dd.Restart)
            and isinstance(old, dd.BucketTracker)
            and isinstance(new, dd.BucketTracker)
        ):
            merged = new.op_counts.get("merge.succeed", 0) > old.op_counts.get("merge.succeed", 0)
            for bucket_id, entry, load in segment_reads(command, old, new, merged):
                if not self._read_back(old, bucket_id, entry, load):
                    self._fail()
                    return
        read_more = False
        undeleted: set[str] = set()
        for effect in result.effects:
            if isinstance(effect, dd.CreateBucketSnapshot):
                if effect.bucket_id in self._prewritten:
                    self._prewritten.discard(effect.bucket_id)
                    continue
                if self._retry(self.storage.create_bucket_snapshot, effect.bucket_id, effect.snapshot) is None:
                    self._fail()
                    return
            elif isinstance(effect, dd.DeleteBucketSnapshot):
                if self._retry(self.storage.delete_bucket_snapshot, effect.bucket_id) is None:
                    undeleted.add(str(effect.bucket_id))  # DD-19: the ledger stays, and so does its property
            elif isinstance(effect, dd.RemoveCursorProperty):
                if self.cursor.properties.get(effect.key) in undeleted:
                    continue
                if not self._cursor_op(partial(self.cursor.remove_property, effect.key)):
                    return
            elif isinstance(effect, dd.SetCursorProperty):
                if not self._cursor_op(partial(self.cursor.set_property, effect.key, effect.value)):
                    return
            elif isinstance(effect, dd.CancelTimer):
                self._timer += 1
            elif isinstance(effect, dd.ScheduleTimer):
                self._timer += 1
                self.sim.schedule(max(0, effect.delay_ms), self._timer_fire(effect.target, self._timer))
            elif isinstance(effect, dd.ReadMoreEntries):
                read_more = True
            elif isinstance(effect, dd.RequestCreateBucketSnapshot):
                # A BookKeeper write of a few entries: a millisecond, or longer on a busy bookie
                # (so a creation is sometimes still in flight when its bucket's boundary falls due,
                # a merge selects, or a trim or clear takes the bucket, DD-31).
                latency = 1 if self.sim.rng.random() < 0.5 else self.sim.rng.randint(2, CREATE_LATENCY_MS)
                self.sim.schedule(latency, self._complete_create(effect))
        if merged:
            self.stats.record_success("merge", elapsed_ms(started, self._clock()))
        if read_more and self.alive:
            self._read_more()

    def _cursor_op(self, op: Callable[[], None]) -> bool:
        try:
            op()
        except LedgerError:
            self._fail()
            return False
        return True

    def _read_back(self, old: dd.BucketTracker, bucket_id: int, entry: int, load: bool) -> bool:
        """Read segment ``entry`` of a snapshot the tracker loaded from; it must be what the tracker
        wrote.  False when the ledger cannot be read.  A merge's reads are not timed as loads (DD-28)."""
        read = (
            self.storage.get_bucket_snapshot_segment
            if load
            else partial(BucketSnapshotStorage.get_bucket_snapshot_segment, self.storage)
        )
        runs = self._retry(read, bucket_id, entry, entry)
        if runs is None:
            return False
        expected = old.storage.snapshots[bucket_id].segments[entry - 1]
        if [list(r.indexes()) for r in runs[0]] != [list(expected.indexes())]:
            raise AssertionError(f"segment {entry} of bucket snapshot {bucket_id} differs from the tracker's")
        return True

    @staticmethod
    def _retry(op: Callable[..., T], *args: Any) -> tuple[T] | None:
        """DD-17: one try and up to DELAYED_STORAGE_MAX_RETRIES retries; ``(value,)``, or None when
        every attempt failed."""
        for _ in range(dd.ATTEMPTS):
            try:
                return (op(*args),)
            except LedgerError:
                continue
        return None

    def _fail(self) -> None:
        if not self.alive:
            return
        self.close()
        if self._loading:
            # The owner is still loading: it learns of the failure once its load has finished.
            self.sim.schedule(0, self._failed)
        else:
            self._failed()

    # -- timers and asynchronous creation ---------------------------------------------------------

    def _timer_fire(self, target: int, generation: int) -> Callable[[], None]:
        """DD-25: the armed timer steps the tracker at its target time, and the ``ReadMoreEntries``
        it answers runs the dispatcher (``read_more``), which hands what fell due to the consumers
        waiting in a receive: they get it without asking again."""

        def fire() -> None:
            if self.alive and generation == self._timer:
                self._step(dd.TimerFired(target, self.sim.now))

        return fire

    def _complete_create(self, request: dd.RequestCreateBucketSnapshot) -> Callable[[], None]:
        """DD-31: write the snapshot ledger, then tell the tracker how it went.  The bucket id is the
        one the tracker will assign (its next id), so the ledger has its final name."""

        def complete() -> None:
            if not self.alive or not isinstance(self.state, dd.BucketTracker):
                return  # a restart loses creations in flight (DD-31)
            bucket_id = self.state.storage.next_bucket_id
            length = dd.metadata_length(request.metadata) + sum(dd.segment_length(r) for r in request.segments)
            snapshot = dd.Snapshot(
                request.start_ledger_id, request.end_ledger_id, request.metadata, request.segments, length
            )
            written = self._retry(self.storage.create_bucket_snapshot, bucket_id, snapshot) is not None
            if written:
                self._prewritten.add(bucket_id)
            self._step(dd.CompleteBucketSnapshot(request.request_id, written))
            if bucket_id in self._prewritten:  # the tracker did not take it: do not leave it behind
                self._prewritten.discard(bucket_id)
                self._retry(self.storage.delete_bucket_snapshot, bucket_id)

        return complete

    # -- ledgers ----------------------------------------------------------------------------------

    def _clock(self) -> float:
        return self.sim.now / 1000

    def _open_fresh(self, name: str) -> ManagedLedger:
        # A ledger of this name left by a creation whose property was never written (a crash in
        # between) is an orphan: a new snapshot under the same id starts from an empty ledger.
        if self.store.exists(name):
            delete_managed_ledger(self.store, name)
        return self.store.open(name)

    def _delete_ledger(self, name: str) -> None:
        delete_managed_ledger(self.store, name)
