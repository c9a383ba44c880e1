"""PIP-195: the bucket delayed-delivery tracker of today's Pulsar, and the in-memory tracker it replaces.

Two pure machines share one command set (rules in ``spec/rules/delayed.md``):

* :class:`InMemoryTracker` — the baseline: one priority queue of ``(deliver_at, ledger, entry)``
  (Pulsar's ``InMemoryDelayedDeliveryTracker`` over ``TripleLongPriorityQueue``).
* :class:`BucketTracker` — ``BucketDelayedDeliveryTracker`` of the 3.x line with the later fixes:
  a last mutable bucket, sealed immutable buckets whose snapshots live in storage (entry 0
  metadata, entries 1..N segments), one loaded segment per bucket in the shared queue, per-ledger
  roaring bitmaps for membership, merge, delete, trim, clear and recovery.

The snapshot store (BookKeeper in Pulsar) is modelled inside the state as :class:`Storage` so
that the machine stays pure and the invariants can see where every message lies; each change to
it is also returned as an effect (``CreateBucketSnapshot``, ``DeleteBucketSnapshot``,
``SetCursorProperty`` ...) so the engine (``reference.engine.bucket_storage``) can write real
ledgers.  Storage failures are injected with :class:`InjectStorageFailure`; each attempt consumes
one queued failure and an operation fails for good after ``1 + DELAYED_STORAGE_MAX_RETRIES``.

Representation.  Indexes are kept in sorted immutable runs of packed big-endian records
(:class:`Run`), so bytes order is ``(deliver_at, ledger, entry)`` order and a run costs 24 bytes
per index (12 bytes for a sealed segment whose values fit relative to a base).  The mutable queue
and the in-memory tracker are log-structured: a tuple of runs merged pairwise as they grow
(amortised O(log n) per add), which keeps every state immutable and hashable without millions
of Python objects.
"""

from __future__ import annotations

import bisect
import heapq
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import immutables
from pyroaring import BitMap, FrozenBitMap

from reference.conformance import MachineVectors
from spec.config import DELAYED_MAX_MERGE_NUM, DELAYED_STORAGE_MAX_RETRIES, Config
from spec.errors import (
    BucketNotExist,
    BucketSnapshotPersistence,
    DomainError,
    RecoverDelayedDeliveryTracker,
)
from spec.result import Effect, Err, Ok
from spec.types import Position

__all__ = [
    "BUCKET_PROPERTY_PREFIX",
    "VECTORS",
    "AddMessage",
    "BucketTracker",
    "Clear",
    "Command",
    "CompleteBucketSnapshot",
    "GetScheduledMessages",
    "HasMessageAvailable",
    "ImmutableBucket",
    "InMemoryTracker",
    "InjectStorageFailure",
    "LoseBucketSnapshot",
    "MarkDelete",
    "Params",
    "Restart",
    "Run",
    "Snapshot",
    "Storage",
    "TimerFired",
    "Tracker",
    "bucket_key",
    "contains_message",
    "cut_segments",
    "initial",
    "next_delivery_time",
    "recover",
    "recover_from_json",
    "step",
    "tracked",
]

BUCKET_PROPERTY_PREFIX: Final = "#pulsar.internal.delayed.bucket"
NO_TIMESTAMP: Final = (1 << 63) - 1  # Long.MAX_VALUE: nextDeliveryTime of an empty tracker (#26080)
ATTEMPTS: Final = 1 + DELAYED_STORAGE_MAX_RETRIES
_ABS: Final = struct.Struct(">QQQ")
_REL: Final = struct.Struct(">III")
_U32: Final = 1 << 32

Index = tuple[int, int, int]  # (deliver_at, ledger_id, entry_id)


T = TypeVar("T")


def _evolve(obj: T, **changes: Any) -> T:
    """``dataclasses.replace`` for our slotted frozen values, without re-running ``__init__``
    (the hot path of every step; several times faster)."""
    cls = type(obj)
    new = cls.__new__(cls)
    for name in cls.__slots__:  # type: ignore[attr-defined]
        object.__setattr__(new, name, changes[name] if name in changes else getattr(obj, name))
    return new


# --------------------------------------------------------------------------------------------
# Runs: sorted immutable sequences of packed indexes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    """A sorted run of indexes.  ``width`` 24: absolute ``>QQQ`` records; 12: ``>III`` records
    relative to ``(base_ts, base_ledger)``.  Records before ``offset`` are consumed."""

    data: bytes
    width: int = 24
    base_ts: int = 0
    base_ledger: int = 0
    offset: int = 0

    def __len__(self) -> int:
        return len(self.data) // self.width - self.offset

    def key(self, i: int) -> bytes:
        """The absolute 24-byte key of record ``offset + i``."""
        at = (self.offset + i) * self.width
        if self.width == 24:
            return self.data[at : at + 24]
        ts, ledger, entry = _REL.unpack_from(self.data, at)
        return _ABS.pack(ts + self.base_ts, ledger + self.base_ledger, entry)

    def index(self, i: int) -> Index:
        at = (self.offset + i) * self.width
        if self.width == 24:
            return _ABS.unpack_from(self.data, at)
        ts, ledger, entry = _REL.unpack_from(self.data, at)
        return (ts + self.base_ts, ledger + self.base_ledger, entry)

    def head(self) -> bytes:
        return self.key(0)

    def indexes(self) -> Iterator[Index]:
        for i in range(len(self)):
            yield self.index(i)

    def key_list(self) -> list[bytes]:
        if self.width == 24:
            start = self.offset * 24
            return [self.data[i : i + 24] for i in range(start, len(self.data), 24)]
        return [self.key(i) for i in range(len(self))]

    def advance(self, n: int = 1) -> Run | None:
        if n >= len(self):
            return None
        return _evolve(self, offset=self.offset + n)

    def resident_bytes(self) -> int:
        return len(self.data) - self.offset * self.width


class _KeyView(Sequence[bytes]):
    """A run's keys as a sequence, for ``bisect`` without materialising them."""

    __slots__ = ("_run",)

    def __init__(self, run: Run) -> None:
        self._run = run

    def __len__(self) -> int:
        return len(self._run)

    def __getitem__(self, i: Any) -> Any:
        return self._run.key(i)


def pack(index: Index) -> bytes:
    return _ABS.pack(*index)


def unpack(key: bytes) -> Index:
    return _ABS.unpack(key)


def run_of_keys(keys: Sequence[bytes]) -> Run:
    """An absolute run of already sorted keys."""
    return Run(b"".join(keys))


def compact_run(indexes: Sequence[Index]) -> Run:
    """A sealed segment: 12-byte relative records when every value fits, else absolute ones."""
    if not indexes:
        return Run(b"")
    base_ts = indexes[0][0]
    base_ledger = min(i[1] for i in indexes)
    if all(i[0] - base_ts < _U32 and i[1] - base_ledger < _U32 and i[2] < _U32 for i in indexes):
        data = b"".join(_REL.pack(t - base_ts, ledger - base_ledger, e) for t, ledger, e in indexes)
        return Run(data, 12, base_ts, base_ledger)
    return Run(b"".join(_ABS.pack(*i) for i in indexes))


def _insert_sorted(runs: tuple[Run, ...], run: Run | None) -> tuple[Run, ...]:
    """Insert into a tuple of runs kept sorted by head key (the shared queue)."""
    if run is None or len(run) == 0:
        return runs
    at = bisect.bisect_right(runs, run.head(), key=Run.head)
    return (*runs[:at], run, *runs[at:])


def _lsm_add(runs: tuple[Run, ...], key: bytes) -> tuple[Run, ...]:
    """Log-structured insert: append a one-record run, merge while the newer run is not smaller
    than half the older (sizes stay geometric, so merges cost O(log n) per record)."""
    out = [*runs, Run(key)]
    while len(out) >= 2 and len(out[-2]) <= 2 * len(out[-1]):
        newer = out.pop()
        older = out.pop()
        out.append(run_of_keys(sorted(older.key_list() + newer.key_list())))
    return tuple(out)


def _lsm_min(runs: tuple[Run, ...]) -> int | None:
    best: int | None = None
    best_key = b""
    for i, run in enumerate(runs):
        head = run.head()
        if best is None or head < best_key:
            best, best_key = i, head
    return best


def _lsm_size(runs: tuple[Run, ...]) -> int:
    return sum(len(r) for r in runs)


def _split_due(runs: tuple[Run, ...], cutoff: int) -> tuple[list[bytes], tuple[Run, ...]]:
    """Remove every index with ``deliver_at <= cutoff`` from sorted runs (each run's due part is a
    prefix); return the due keys sorted and the remaining runs."""
    limit = _ABS.pack(cutoff, (1 << 64) - 1, (1 << 64) - 1)
    due: list[bytes] = []
    rest: list[Run] = []
    for run in runs:
        n = bisect.bisect_right(_KeyView(run), limit)
        if n:
            due.extend(run.key_list()[:n] if run.width == 24 else [run.key(i) for i in range(n)])
        remaining = run.advance(n) if n else run
        if remaining is not None:
            rest.append(remaining)
    due.sort()
    return due, tuple(rest)


# --------------------------------------------------------------------------------------------
# Bitmaps: ledger id -> FrozenBitMap of entry ids
# --------------------------------------------------------------------------------------------

Bitmaps = immutables.Map[int, FrozenBitMap]
_EMPTY_BITMAPS: Bitmaps = immutables.Map()


def _bit_set(bitmaps: Bitmaps, ledger: int, entry: int) -> bool:
    bm = bitmaps.get(ledger)
    return bm is not None and entry in bm


def _bit_add(bitmaps: Bitmaps, ledger: int, entry: int) -> Bitmaps:
    bm = bitmaps.get(ledger)
    return bitmaps.set(ledger, FrozenBitMap([entry]) if bm is None else bm | FrozenBitMap([entry]))


def _bit_remove(bitmaps: Bitmaps, ledger: int, entry: int) -> Bitmaps:
    """Drop one bit that is set; an emptied ledger bitmap is removed (MB4)."""
    bm = bitmaps.get(ledger)
    if bm is None or entry not in bm:
        raise ValueError(f"bit {ledger}:{entry} is not set")  # callers check first: a bug, not a domain error
    if len(bm) == 1:
        return bitmaps.delete(ledger)
    return bitmaps.set(ledger, bm - FrozenBitMap([entry]))


def _cardinality(bitmaps: Bitmaps) -> int:
    return sum(len(bm) for bm in bitmaps.values())


def _freeze(builders: Mapping[int, BitMap]) -> Bitmaps:
    out: dict[int, FrozenBitMap] = {}
    for ledger, bm in builders.items():
        bm.run_optimize()  # Pulsar 3.1+ runs runOptimize before serializing (B.3)
        out[ledger] = FrozenBitMap(bm)
    return immutables.Map(out)


def _union(maps: Iterable[Bitmaps]) -> Bitmaps:
    out: dict[int, BitMap] = {}
    for m in maps:
        for ledger, bm in m.items():
            out.setdefault(ledger, BitMap()).update(bm)
    return _freeze(out)


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Params:
    """The broker.conf keys the trackers read (B.2), time step already in milliseconds (#19615)."""

    tick_ms: int = 1000
    strict: bool = False
    min_index_count_per_bucket: int = 50000
    time_step_ms: int = 300_000
    max_indexes_per_segment: int = 5000
    max_num_buckets: int = -1
    # DD-31: snapshot creation completes later, through CompleteBucketSnapshot (Pulsar's future).
    async_create: bool = False

    @classmethod
    def of(cls, config: Config) -> Params:
        return cls(
            tick_ms=config.delayed_delivery_tick_time_millis,
            strict=config.is_delayed_delivery_deliver_at_time_strict,
            min_index_count_per_bucket=config.delayed_delivery_min_index_count_per_bucket,
            time_step_ms=config.delayed_delivery_max_time_step_per_bucket_snapshot_segment_seconds * 1000,
            max_indexes_per_segment=config.delayed_delivery_max_indexes_per_bucket_snapshot_segment,
            max_num_buckets=config.delayed_delivery_max_num_buckets,
        )

    def cutoff(self, now_ms: int) -> int:
        """DD-1: strict cutoff is ``now``; non-strict is ``now + tick``."""
        return now_ms if self.strict else now_ms + self.tick_ms


@dataclass(frozen=True, slots=True)
class SegmentMeta:
    """``SnapshotSegmentMetadata``: the per-ledger bitmaps of this segment and its time bounds."""

    min_schedule_timestamp: int
    max_schedule_timestamp: int
    bitmaps: Bitmaps


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A bucket snapshot ledger: ``metadata`` is entry 0, ``segments[k-1]`` is entry k."""

    start_ledger_id: int
    end_ledger_id: int
    metadata: tuple[SegmentMeta, ...]
    segments: tuple[Run, ...]
    length: int


@dataclass(frozen=True, slots=True)
class Storage:
    """The modelled snapshot store and cursor properties (Pulsar: BookKeeper and the cursor)."""

    snapshots: immutables.Map[int, Snapshot] = field(default_factory=immutables.Map)
    properties: immutables.Map[str, str] = field(default_factory=immutables.Map)
    next_bucket_id: int = 1
    failures: immutables.Map[str, int] = field(default_factory=immutables.Map)


@dataclass(frozen=True, slots=True)
class PendingCreate:
    """A snapshot creation in flight (DD-31): the segments stay in memory until it completes,
    and the merge sources it replaces are deleted only once it succeeded (#26239)."""

    start_ledger_id: int
    end_ledger_id: int
    metadata: tuple[SegmentMeta, ...]
    segments: tuple[Run, ...]
    sources: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Timer:
    target: int | None = None  # the deliver-at the armed timer is for (TM2)
    last_tick_run: int = 0


@dataclass(frozen=True, slots=True)
class ImmutableBucket:
    """A sealed bucket.  ``bucket_id == -1`` means its snapshot does not exist: either its creation
    is in flight (``pending_create``, DD-31) or it failed and every segment was pushed to the
    shared queue ("memory mode", DD-14)."""

    start_ledger_id: int
    end_ledger_id: int
    bucket_id: int
    bitmaps: Bitmaps
    count: int
    current_segment: int
    last_segment: int
    first_schedule_timestamps: tuple[int, ...]
    boundary: bytes | None  # key of the last index of the loaded segment (snapshotSegmentLastIndex)
    snapshot_length: int = 0
    pending_create: int = 0  # id of the snapshot creation in flight (DD-31), 0 when none

    @property
    def key(self) -> str:
        return bucket_key(self.start_ledger_id, self.end_ledger_id)


@dataclass(frozen=True, slots=True)
class MutableBucket:
    start_ledger_id: int = -1
    end_ledger_id: int = -1
    runs: tuple[Run, ...] = ()
    bitmaps: Bitmaps = _EMPTY_BITMAPS

    @property
    def size(self) -> int:
        return _lsm_size(self.runs)


OP_TYPES: Final = ("create", "load", "delete", "merge")
OP_STATES: Final = ("all", "succeed", "failed")


@dataclass(frozen=True, slots=True)
class BucketTracker:
    params: Params
    mutable: MutableBucket = MutableBucket()
    buckets: tuple[ImmutableBucket, ...] = ()  # sorted by start ledger, never overlapping (DD-5)
    shared: tuple[Run, ...] = ()  # sorted by head key
    count: int = 0
    mark_delete_ledger: int = -1
    timer: Timer = Timer()
    storage: Storage = Storage()
    op_counts: immutables.Map[str, int] = field(default_factory=immutables.Map)
    fallback: bool = False  # recovery failed: behaves as the in-memory tracker (DD-27)
    pending_creates: immutables.Map[int, PendingCreate] = field(default_factory=immutables.Map)
    next_request_id: int = 1


@dataclass(frozen=True, slots=True)
class InMemoryTracker:
    """DD-29: the baseline, one priority queue of every accepted index (no dedup, nothing persisted)."""

    params: Params
    runs: tuple[Run, ...] = ()
    timer: Timer = Timer()

    @property
    def count(self) -> int:
        return _lsm_size(self.runs)


Tracker = BucketTracker | InMemoryTracker


# --------------------------------------------------------------------------------------------
# Commands and effects
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddMessage:
    ledger_id: int
    entry_id: int
    deliver_at: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class GetScheduledMessages:
    max_messages: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class HasMessageAvailable:
    now_ms: int


@dataclass(frozen=True, slots=True)
class TimerFired:
    """The one-shot timer armed for ``target`` fires at ``now_ms``."""

    target: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class MarkDelete:
    """The cursor's mark-delete position moved into ``ledger_id`` (trim input, DD-22)."""

    ledger_id: int


@dataclass(frozen=True, slots=True)
class Clear:
    pass


@dataclass(frozen=True, slots=True)
class Restart:
    """Close the tracker and build a new one from the snapshots and cursor properties (DD-24)."""

    now_ms: int


@dataclass(frozen=True, slots=True)
class InjectStorageFailure:
    """Queue ``count`` failures for ``operation`` ∈ {create, load, delete, metadata}."""

    operation: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class LoseBucketSnapshot:
    """The snapshot ledger ``bucket_id`` disappears behind the tracker's back (missing ledger)."""

    bucket_id: int


@dataclass(frozen=True, slots=True)
class CompleteBucketSnapshot:
    """The snapshot creation ``request_id`` finished (after its retries) with ``succeeded``."""

    request_id: int
    succeeded: bool


Command = (
    AddMessage
    | GetScheduledMessages
    | HasMessageAvailable
    | TimerFired
    | MarkDelete
    | Clear
    | Restart
    | InjectStorageFailure
    | LoseBucketSnapshot
    | CompleteBucketSnapshot
)


@dataclass(frozen=True, slots=True)
class CreateBucketSnapshot(Effect):
    bucket_id: int
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class RequestCreateBucketSnapshot(Effect):
    """DD-31: start creating a snapshot; the runner answers with ``CompleteBucketSnapshot``."""

    request_id: int
    start_ledger_id: int
    end_ledger_id: int
    metadata: tuple[SegmentMeta, ...]
    segments: tuple[Run, ...]


@dataclass(frozen=True, slots=True)
class DeleteBucketSnapshot(Effect):
    bucket_id: int


@dataclass(frozen=True, slots=True)
class SetCursorProperty(Effect):
    key: str
    value: str


@dataclass(frozen=True, slots=True)
class RemoveCursorProperty(Effect):
    key: str


@dataclass(frozen=True, slots=True)
class ScheduleTimer(Effect):
    target: int
    delay_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer(Effect):
    pass


@dataclass(frozen=True, slots=True)
class ReadMoreEntries(Effect):
    pass


def bucket_key(start: int, end: int) -> str:
    """DD-18: the cursor property naming a bucket snapshot."""
    return f"{BUCKET_PROPERTY_PREFIX}_{start}_{end}"


# --------------------------------------------------------------------------------------------
# Construction
# --------------------------------------------------------------------------------------------


def initial(config: Config, *, tracker: str = "bucket", async_create: bool = False) -> Tracker:
    """An empty tracker; ``tracker`` is ``"bucket"`` or ``"in_memory"``; ``async_create`` makes
    snapshot creation complete through a later command (DD-31)."""
    params = _evolve(Params.of(config), async_create=async_create)
    if tracker == "bucket":
        return BucketTracker(params)
    if tracker == "in_memory":
        return InMemoryTracker(params)
    raise ValueError(f"unknown tracker {tracker!r} (bucket, in_memory)")


# --------------------------------------------------------------------------------------------
# Storage (pure, with failure injection)
# --------------------------------------------------------------------------------------------


def _count_op(state: BucketTracker, op: str, outcome: str) -> BucketTracker:
    counts = state.op_counts
    for label in ("all", outcome):
        name = f"{op}.{label}"
        counts = counts.set(name, counts.get(name, 0) + 1)
    return _evolve(state, op_counts=counts)


def _attempt(storage: Storage, op: str) -> tuple[Storage, bool]:
    """One storage operation with its retries (DD-17): consume queued failures; it succeeds
    unless every attempt failed."""
    queued = storage.failures.get(op, 0)
    used = min(queued, ATTEMPTS)
    failures = storage.failures.set(op, queued - used) if used else storage.failures
    return _evolve(storage, failures=failures), used < ATTEMPTS


def segment_length(run: Run) -> int:
    """Serialized size of a ``SnapshotSegment`` holding ``run`` (protobuf varint arithmetic)."""
    total = 0
    for ts, ledger, entry in run.indexes():
        body = 3 + _varint_len(ts) + _varint_len(ledger) + _varint_len(entry)
        total += 1 + _varint_len(body) + body
    return total


def _varint_len(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def metadata_length(metadata: Sequence[SegmentMeta]) -> int:
    from spec.pb import DelayedMessageIndexBucketMetadata_pb2 as pb

    return len(encode_metadata(metadata, pb).SerializeToString())


def encode_metadata(metadata: Sequence[SegmentMeta], pb: Any) -> Any:
    """``SnapshotMetadata`` proto of the given segments (bitmaps in RoaringBitmap portable format)."""
    message = pb.SnapshotMetadata()
    for meta in metadata:
        seg = message.metadata_list.add()
        seg.min_schedule_timestamp = meta.min_schedule_timestamp
        seg.max_schedule_timestamp = meta.max_schedule_timestamp
        for ledger, bm in meta.bitmaps.items():
            seg.delayed_index_bit_map[ledger] = bm.serialize()
    return message


def _create_snapshot(
    state: BucketTracker, start: int, end: int, metadata: tuple[SegmentMeta, ...], segments: tuple[Run, ...]
) -> tuple[BucketTracker, int, list[Effect]]:
    """Create a snapshot ledger and record it in the cursor properties; -1 when it failed (DD-17)."""
    storage, ok = _attempt(state.storage, "create")
    state = _evolve(state, storage=storage)
    if not ok:
        return _count_op(state, "create", "failed"), -1, []
    bucket_id = storage.next_bucket_id
    length = metadata_length(metadata) + sum(segment_length(s) for s in segments)
    snapshot = Snapshot(start, end, metadata, segments, length)
    key = bucket_key(start, end)
    storage = _evolve(
        storage,
        snapshots=storage.snapshots.set(bucket_id, snapshot),
        properties=storage.properties.set(key, str(bucket_id)),
        next_bucket_id=bucket_id + 1,
    )
    effects: list[Effect] = [CreateBucketSnapshot(bucket_id, snapshot), SetCursorProperty(key, str(bucket_id))]
    return _count_op(_evolve(state, storage=storage), "create", "succeed"), bucket_id, effects


def _delete_snapshot(state: BucketTracker, bucket_id: int, key: str) -> tuple[BucketTracker, bool, list[Effect]]:
    """DD-19: delete the ledger first, then the property; a failed delete leaves both (an orphan
    that recovery finds again).  Deleting a missing ledger succeeds (ST4)."""
    if bucket_id < 0:
        return state, True, []
    storage, ok = _attempt(state.storage, "delete")
    state = _evolve(state, storage=storage)
    if not ok:
        return _count_op(state, "delete", "failed"), False, []
    storage = (
        _evolve(storage, snapshots=storage.snapshots.delete(bucket_id)) if bucket_id in storage.snapshots else storage
    )
    effects: list[Effect] = [DeleteBucketSnapshot(bucket_id)]
    if storage.properties.get(key) == str(bucket_id):
        storage = _evolve(storage, properties=storage.properties.delete(key))
        effects.append(RemoveCursorProperty(key))
    return _count_op(_evolve(state, storage=storage), "delete", "succeed"), True, effects


def _load_segment(
    state: BucketTracker, bucket_id: int, entry: int, *, counted: bool = True
) -> tuple[BucketTracker, Run | DomainError | None]:
    """Read segment ``entry`` (1-based); ``None`` when the snapshot has no such entry.  A merge's
    reads are not ``load`` operations in Pulsar's stats (DD-28), hence ``counted``."""

    def count(state: BucketTracker, outcome: str) -> BucketTracker:
        return _count_op(state, "load", outcome) if counted else state

    storage, ok = _attempt(state.storage, "load")
    state = _evolve(state, storage=storage)
    if not ok:
        return count(state, "failed"), BucketSnapshotPersistence(f"load of {bucket_id}:{entry} failed")
    snapshot = storage.snapshots.get(bucket_id)
    if snapshot is None:
        return count(state, "failed"), BucketNotExist(f"bucket snapshot {bucket_id} does not exist")
    state = count(state, "succeed")
    if entry > len(snapshot.segments):
        return state, None
    return state, snapshot.segments[entry - 1]


# --------------------------------------------------------------------------------------------
# Segment cutting (sealing and merging)
# --------------------------------------------------------------------------------------------


def cut_segments(indexes: Sequence[Index], params: Params) -> list[list[Index]]:
    """DD-9: cut a sorted index stream into segments by time window and by max indexes."""
    segments: list[list[Index]] = []
    current: list[Index] = []
    upper = 0
    n = len(indexes)
    for i, index in enumerate(indexes):
        if not current:
            upper = index[0] + params.time_step_ms - 1
        current.append(index)
        last = i + 1 == n
        if (
            last
            or indexes[i + 1][0] > upper
            or (params.max_indexes_per_segment != -1 and len(current) >= params.max_indexes_per_segment)
        ):
            segments.append(current)
            current = []
    return segments


def _build_bucket(
    state: BucketTracker, start: int, end: int, indexes: Sequence[Index]
) -> tuple[BucketTracker, ImmutableBucket, list[Effect]]:
    """Cut, persist and register a new immutable bucket; its first segment goes to the shared
    queue (DD-10); if the snapshot cannot be created every segment does (DD-14)."""
    cut = cut_segments(indexes, state.params)
    metadata: list[SegmentMeta] = []
    runs: list[Run] = []
    all_bits: dict[int, BitMap] = {}
    for seg in cut:
        builders: dict[int, BitMap] = {}
        for _, ledger, entry in seg:
            builders.setdefault(ledger, BitMap()).add(entry)
            all_bits.setdefault(ledger, BitMap()).add(entry)
        metadata.append(SegmentMeta(seg[0][0], seg[-1][0], _freeze(builders)))
        runs.append(compact_run(seg))
    bitmaps = _freeze(all_bits)
    first_ts = tuple(m.min_schedule_timestamp for m in metadata)
    if state.params.async_create:
        request = state.next_request_id
        pending = PendingCreate(start, end, tuple(metadata), tuple(runs))
        boundary = runs[0].key(len(runs[0]) - 1)
        bucket = ImmutableBucket(
            start, end, -1, bitmaps, len(indexes), 1, len(runs), first_ts, boundary, 0, pending_create=request
        )
        state = _evolve(
            state,
            shared=_insert_sorted(state.shared, runs[0]),
            pending_creates=state.pending_creates.set(request, pending),
            next_request_id=request + 1,
        )
        effect = RequestCreateBucketSnapshot(request, start, end, tuple(metadata), tuple(runs))
        return state, bucket, [effect]
    state, bucket_id, effects = _create_snapshot(state, start, end, tuple(metadata), tuple(runs))
    shared = state.shared
    if bucket_id == -1:
        for run in runs:
            shared = _insert_sorted(shared, run)
        bucket = ImmutableBucket(start, end, -1, bitmaps, len(indexes), len(runs), len(runs), first_ts, None, 0)
    else:
        shared = _insert_sorted(shared, runs[0])
        length = state.storage.snapshots[bucket_id].length
        boundary = runs[0].key(len(runs[0]) - 1)
        bucket = ImmutableBucket(start, end, bucket_id, bitmaps, len(indexes), 1, len(runs), first_ts, boundary, length)
    return _evolve(state, shared=shared), bucket, effects


def _put_bucket(buckets: tuple[ImmutableBucket, ...], bucket: ImmutableBucket) -> tuple[ImmutableBucket, ...]:
    at = bisect.bisect_left([b.start_ledger_id for b in buckets], bucket.start_ledger_id)
    return (*buckets[:at], bucket, *buckets[at:])


def _seal(state: BucketTracker) -> tuple[BucketTracker, list[Effect]]:
    """DD-8/DD-9/DD-10: seal the mutable bucket into an immutable one, then trim and merge."""
    mutable = state.mutable
    # A due re-add (DD-2) forgets a message's bit but leaves its index in the mutable queue, so the
    # queue may hold stale indexes (and, after a later re-add, a second copy).  Only indexes whose
    # bit is still set are sealed, each position once; sealing a stale one would track a message the
    # dispatcher already delivered (DD-8).
    indexes: list[Index] = []
    sealed: set[tuple[int, int]] = set()
    for key in sorted({k for run in mutable.runs for k in run.key_list()}):
        index = unpack(key)
        position = (index[1], index[2])
        if position not in sealed and _bit_set(mutable.bitmaps, *position):
            sealed.add(position)
            indexes.append(index)
    # Only the bits of the sealed indexes move; bits of messages routed straight to the shared
    # queue stay in the mutable bitmap (DD-7).
    bits = mutable.bitmaps
    for _, ledger, entry in indexes:
        bits = _bit_remove(bits, ledger, entry)
    state = _evolve(state, mutable=MutableBucket(bitmaps=bits))
    if not indexes:
        return state, []
    state, bucket, effects = _build_bucket(state, mutable.start_ledger_id, mutable.end_ledger_id, indexes)
    state = _evolve(state, buckets=_put_bucket(state.buckets, bucket))
    if 0 < state.params.max_num_buckets < len(state.buckets):
        state, more = _trim(state)
        effects += more
        if len(state.buckets) > state.params.max_num_buckets:
            state, more = _merge(state)
            effects += more
    return state, effects


# --------------------------------------------------------------------------------------------
# Merge, delete, trim
# --------------------------------------------------------------------------------------------


def select_merge(buckets: Sequence[ImmutableBucket]) -> tuple[int, int] | None:
    """DD-20: the window ``[i, j)`` of adjacent buckets to merge: windows of up to 4, all with
    unloaded segments and a snapshot, fewest messages, then earliest next segment."""
    n = len(buckets)
    if n < 2:
        return None
    for k in range(min(DELAYED_MAX_MERGE_NUM, n), 1, -1):
        best: tuple[int, int, int] | None = None
        for i in range(n - k + 1):
            window = buckets[i : i + k]
            if not all(b.last_segment > b.current_segment and b.bucket_id >= 0 for b in window):
                continue
            total = sum(b.count for b in window)
            next_ts = min(b.first_schedule_timestamps[b.current_segment] for b in window)
            if best is None or (total, next_ts) < (best[0], best[1]):
                best = (total, next_ts, i)
        if best is not None:
            return best[2], best[2] + k
    return None


def _merge(state: BucketTracker) -> tuple[BucketTracker, list[Effect]]:
    """DD-21: merge the selected window into one bucket; the sources' snapshots are deleted only
    after the merged snapshot exists (#26239)."""
    window = select_merge(state.buckets)
    if window is None:
        return state, []
    i, j = window
    sources = state.buckets[i:j]
    streams: list[list[bytes]] = []
    for b in sources:
        keys: list[bytes] = []
        for entry in range(1, b.last_segment + 1):
            state, run = _load_segment(state, b.bucket_id, entry, counted=False)
            if not isinstance(run, Run):
                return _count_op(state, "merge", "failed"), []  # sources untouched
            # Only still-tracked indexes (bit set) enter the merged snapshot (#26251).
            keys.extend(k for k in run.key_list() if _bit_set(b.bitmaps, *unpack(k)[1:]))
        streams.append(keys)
    merged = [unpack(k) for k in heapq.merge(*streams)]
    rest = state.buckets[:i] + state.buckets[j:]
    state = _evolve(state, buckets=rest)
    effects: list[Effect] = []
    if merged:
        state, bucket, effects = _build_bucket(state, sources[0].start_ledger_id, sources[-1].end_ledger_id, merged)
        # Bits of indexes already delivered from the loaded segments are gone from the sources,
        # so the union of the sources' bitmaps is exactly the merged bucket's bitmap.
        state = _evolve(state, buckets=_put_bucket(state.buckets, bucket))
        created = bucket.bucket_id >= 0
        if bucket.pending_create:
            # DD-31: the sources are deleted when (and only if) the merged snapshot is created.
            pending = state.pending_creates[bucket.pending_create]
            sources_ids = tuple((b.bucket_id, b.key) for b in sources)
            state = _evolve(
                state,
                pending_creates=state.pending_creates.set(bucket.pending_create, _evolve(pending, sources=sources_ids)),
            )
            return _count_op(state, "merge", "succeed"), effects
    else:
        created = True
    if created:
        for b in sources:
            state, _, more = _delete_snapshot(state, b.bucket_id, b.key)
            effects += more
        return _count_op(state, "merge", "succeed"), effects
    return _count_op(state, "merge", "failed"), effects


def _trim(state: BucketTracker) -> tuple[BucketTracker, list[Effect]]:
    """DD-22: delete, in order, buckets wholly below the mark-delete ledger; stop at the first
    failed delete (the rest stay, as orphans)."""
    effects: list[Effect] = []
    if state.mark_delete_ledger < 0:
        return state, effects
    for b in state.buckets:
        if b.end_ledger_id >= state.mark_delete_ledger:
            continue
        state, ok, more = _delete_snapshot(state, b.bucket_id, b.key)
        effects += more
        if not ok:
            break
        state = _evolve(
            state,
            buckets=tuple(x for x in state.buckets if x.start_ledger_id != b.start_ledger_id),
            count=state.count - b.count,
        )
    return state, effects


# --------------------------------------------------------------------------------------------
# Add
# --------------------------------------------------------------------------------------------


def _covering(buckets: Sequence[ImmutableBucket], ledger: int) -> int | None:
    at = bisect.bisect_right(buckets, ledger, key=lambda b: b.start_ledger_id) - 1
    if at >= 0 and buckets[at].end_ledger_id >= ledger:
        return at
    return None


def contains_message(state: Tracker, ledger_id: int, entry_id: int) -> bool:
    """DD-11: the bit is set in the mutable bitmap or in the covering bucket's bitmap.  The
    in-memory baseline has no index, so it answers by scanning its queue."""
    if isinstance(state, InMemoryTracker):
        return any(unpack(k)[1:] == (ledger_id, entry_id) for run in state.runs for k in run.key_list())
    if _bit_set(state.mutable.bitmaps, ledger_id, entry_id):
        return True
    at = _covering(state.buckets, ledger_id)
    return at is not None and _bit_set(state.buckets[at].bitmaps, ledger_id, entry_id)


def _drop_bit(state: BucketTracker, ledger: int, entry: int) -> tuple[BucketTracker, bool]:
    """Clear one tracked bit (mutable first, else the covering bucket); False when not tracked."""
    if _bit_set(state.mutable.bitmaps, ledger, entry):
        mutable = _evolve(state.mutable, bitmaps=_bit_remove(state.mutable.bitmaps, ledger, entry))
        return _evolve(state, mutable=mutable, count=state.count - 1), True
    at = _covering(state.buckets, ledger)
    if at is None or not _bit_set(state.buckets[at].bitmaps, ledger, entry):
        return state, False
    b = state.buckets[at]
    b = _evolve(b, bitmaps=_bit_remove(b.bitmaps, ledger, entry), count=b.count - 1)
    # A memory-mode bucket has no boundary to retire it: it leaves when its last bit does (DD-14).
    keep = (b,) if b.bucket_id >= 0 or b.pending_create or b.count > 0 else ()
    return _evolve(state, buckets=(*state.buckets[:at], *keep, *state.buckets[at + 1 :]), count=state.count - 1), True


def _add(state: Tracker, cmd: AddMessage) -> tuple[Tracker, Ok[bool]]:
    """DD-1, DD-2, DD-3, DD-4, DD-5, DD-6, DD-7, DD-8, DD-29: add one delayed message."""
    if cmd.ledger_id < 0 or cmd.entry_id < 0:
        raise ValueError(f"a delayed message has a real position, got {cmd.ledger_id}:{cmd.entry_id}")
    cutoff = state.params.cutoff(cmd.now_ms)
    if isinstance(state, InMemoryTracker):
        if cmd.deliver_at < 0 or cmd.deliver_at <= cutoff:
            return state, Ok(False)
        state = _evolve(state, runs=_lsm_add(state.runs, pack((cmd.deliver_at, cmd.ledger_id, cmd.entry_id))))
        state, timer_effects = _update_timer(state, cmd.now_ms)
        return state, Ok(True, tuple(timer_effects))
    if cmd.deliver_at < 0 or cmd.deliver_at <= cutoff:
        # Fixed order (#26230/#26251): the cutoff check comes first and forgets any bit, so a
        # message the dispatcher now delivers directly does not leak in the count.
        state, dropped = _drop_bit(state, cmd.ledger_id, cmd.entry_id)
        if not dropped:
            return state, Ok(False)
        state, timer_effects = _update_timer(state, cmd.now_ms)
        return state, Ok(False, tuple(timer_effects))
    if contains_message(state, cmd.ledger_id, cmd.entry_id):
        return state, Ok(True)
    effects: list[Effect] = []
    ledger, entry = cmd.ledger_id, cmd.entry_id
    exist = _covering(state.buckets, ledger) is not None
    m = state.mutable
    if (
        not state.fallback
        and not exist
        and ledger > m.end_ledger_id
        and m.size >= state.params.min_index_count_per_bucket
        and m.size > 0
    ):
        state, effects = _seal(state)
        exist = _covering(state.buckets, ledger) is not None
        m = state.mutable
    key = pack((cmd.deliver_at, ledger, entry))
    above_buckets = not state.buckets or ledger > state.buckets[-1].end_ledger_id
    if not exist and ledger >= m.end_ledger_id and (m.start_ledger_id != -1 or above_buckets):
        m = MutableBucket(
            ledger if m.start_ledger_id == -1 else m.start_ledger_id,
            ledger,
            _lsm_add(m.runs, key),
            _bit_add(m.bitmaps, ledger, entry),
        )
        state = _evolve(state, mutable=m)
    else:
        state = _evolve(
            state,
            shared=_insert_sorted(state.shared, Run(key)),
            mutable=_evolve(m, bitmaps=_bit_add(m.bitmaps, ledger, entry)),
        )
    state = _evolve(state, count=state.count + 1)
    state, more = _update_timer(state, cmd.now_ms)
    return state, Ok(True, (*effects, *more))


# --------------------------------------------------------------------------------------------
# Scheduling
# --------------------------------------------------------------------------------------------


def next_delivery_time(state: Tracker) -> int:
    """DD-13: the smallest queued deliver-at; Long.MAX when nothing is queued (#26080)."""
    heads: list[int] = []
    runs = state.runs if isinstance(state, InMemoryTracker) else state.mutable.runs
    i = _lsm_min(runs)
    if i is not None:
        heads.append(runs[i].index(0)[0])
    if isinstance(state, BucketTracker) and state.shared:
        heads.append(state.shared[0].index(0)[0])
    return min(heads) if heads else NO_TIMESTAMP


def _move_due(state: BucketTracker, cutoff: int) -> BucketTracker:
    """DD-12: due mutable indexes move to the shared queue (their bits stay in the mutable bitmap)."""
    due, rest = _split_due(state.mutable.runs, cutoff)
    if not due:
        return state
    mutable = _evolve(state.mutable, runs=rest)
    return _evolve(state, mutable=mutable, shared=_insert_sorted(state.shared, run_of_keys(due)))


def _pop_shared(state: BucketTracker) -> BucketTracker:
    first = state.shared[0].advance()
    return _evolve(state, shared=_insert_sorted(state.shared[1:], first))


def _load_next(state: BucketTracker, at: int) -> tuple[BucketTracker, bool, list[Effect]]:
    """DD-10/DD-19: the boundary of bucket ``at`` reached the head: load its next segment, or
    delete the bucket when there is none.  Returns (state, loaded-or-deleted, effects)."""
    b = state.buckets[at]
    state, run = _load_segment(state, b.bucket_id, b.current_segment + 1)
    if isinstance(run, DomainError) and not isinstance(run, BucketNotExist):
        return state, False, []  # DD-16: roll back, retry on a later call
    if isinstance(run, Run) and len(run) > 0:
        b = _evolve(b, current_segment=b.current_segment + 1, boundary=run.key(len(run) - 1))
        state = _evolve(
            state,
            buckets=(*state.buckets[:at], b, *state.buckets[at + 1 :]),
            shared=_insert_sorted(state.shared, run),
        )
        return state, True, []
    # No further segment (or the snapshot is gone): the bucket is done.  The bits of its indexes
    # still queued move to the mutable bitmap so they stay tracked after the bucket leaves the
    # range map; bits of indexes that only lived in a lost snapshot are dropped with it.
    queued = _queued_bits(state.shared, b.bitmaps)
    lost = b.count - _cardinality(queued)
    mutable = _evolve(state.mutable, bitmaps=_union((state.mutable.bitmaps, queued)))
    state = _evolve(
        state, buckets=state.buckets[:at] + state.buckets[at + 1 :], mutable=mutable, count=state.count - lost
    )
    state, _, effects = _delete_snapshot(state, b.bucket_id, b.key)
    return state, True, effects


def _queued_bits(shared: Sequence[Run], bitmaps: Bitmaps) -> Bitmaps:
    """The set bits of ``bitmaps`` whose index is somewhere in the shared queue."""
    out: dict[int, BitMap] = {}
    for run in shared:
        for _, ledger, entry in run.indexes():
            if _bit_set(bitmaps, ledger, entry):
                out.setdefault(ledger, BitMap()).add(entry)
    return _freeze(out)


def _get_scheduled(state: Tracker, cmd: GetScheduledMessages) -> tuple[Tracker, Ok[tuple[Position, ...]]]:
    """DD-10, DD-12, DD-13, DD-15, DD-16, DD-22: pop due indexes in (deliver_at, ledger, entry) order."""
    cutoff = state.params.cutoff(cmd.now_ms)
    out: set[tuple[int, int]] = set()
    n = cmd.max_messages
    effects: list[Effect] = []
    if isinstance(state, InMemoryTracker):
        runs = state.runs
        while n > 0:
            i = _lsm_min(runs)
            if i is None:
                break
            ts, ledger, entry = runs[i].index(0)
            if ts > cutoff:
                break
            nxt = runs[i].advance()
            runs = (*runs[:i], *((nxt,) if nxt is not None else ()), *runs[i + 1 :])
            out.add((ledger, entry))
            n -= 1
        state = _evolve(state, runs=runs)
    else:
        state = _move_due(state, cutoff)
        while n > 0 and state.shared:
            head = state.shared[0].head()
            ts, ledger, entry = unpack(head)
            below_mark = 0 <= ledger < state.mark_delete_ledger
            if ts > cutoff and not below_mark:
                break
            at = _boundary_owner(state, head)
            if at is not None and state.buckets[at].pending_create:
                break  # DD-31: the next segment exists only once the snapshot is created
            if at is not None:
                state, progressed, more = _load_next(state, at)
                effects += more
                if not progressed:
                    break
                continue  # the boundary index is popped on the next turn, now unregistered
            state = _pop_shared(state)
            state, tracked_here = _drop_bit(state, ledger, entry)
            if below_mark or not tracked_here:
                continue  # DD-22 trim at pop; DD-15 dedup at pop
            out.add((ledger, entry))
            n -= 1
    state, more = _update_timer(state, cmd.now_ms)
    positions = tuple(Position(ledger, entry) for ledger, entry in sorted(out))
    return state, Ok(positions, (*effects, *more))


def _boundary_owner(state: BucketTracker, head: bytes) -> int | None:
    ledger = unpack(head)[1]
    at = _covering(state.buckets, ledger)
    if at is not None and state.buckets[at].boundary == head:
        return at
    return None


# --------------------------------------------------------------------------------------------
# Timer
# --------------------------------------------------------------------------------------------


def _update_timer(state: Any, now_ms: int) -> tuple[Any, list[Effect]]:
    """DD-25: keep one timer armed for the next deliver-at, never sooner than a tick after the
    last timer run."""
    timer: Timer = state.timer
    if state.count == 0:
        if timer.target is None:
            return state, []
        return _evolve(state, timer=_evolve(timer, target=None)), [CancelTimer()]
    ts = next_delivery_time(state)
    if ts == timer.target:
        return state, []
    effects: list[Effect] = [CancelTimer()] if timer.target is not None else []
    delay = ts - now_ms
    if delay < 0:
        return _evolve(state, timer=_evolve(timer, target=None)), effects
    delay = max(delay, timer.last_tick_run + state.params.tick_ms - now_ms)
    effects.append(ScheduleTimer(ts, delay))
    return _evolve(state, timer=_evolve(timer, target=ts)), effects


def _timer_fired(state: Tracker, cmd: TimerFired) -> tuple[Tracker, Ok[bool]]:
    """DD-25: a superseded or cancelled timer does nothing; a live one records the tick, moves due
    mutable indexes and asks the dispatcher to read."""
    if state.timer.target is None or state.timer.target != cmd.target:
        return state, Ok(False)
    state = _evolve(state, timer=Timer(None, cmd.now_ms))
    if isinstance(state, BucketTracker):
        state = _move_due(state, state.params.cutoff(cmd.now_ms))
    return state, Ok(True, (ReadMoreEntries(),))


def _has_message_available(state: Tracker, cmd: HasMessageAvailable) -> tuple[Tracker, Ok[bool]]:
    """DD-13: count > 0 and the next deliver-at is within the cutoff; re-arms the timer when not."""
    available = state.count > 0 and next_delivery_time(state) <= state.params.cutoff(cmd.now_ms)
    if available:
        return state, Ok(True)
    state, effects = _update_timer(state, cmd.now_ms)
    return state, Ok(False, tuple(effects))


# --------------------------------------------------------------------------------------------
# Clear, restart, recovery
# --------------------------------------------------------------------------------------------


def _clear(state: Tracker) -> tuple[Tracker, Ok[None]]:
    """DD-23: delete every bucket snapshot and empty every queue; a failed delete does not stop
    the clear (the snapshot stays on storage as an orphan)."""
    if isinstance(state, InMemoryTracker):
        state, timer_effects = _update_timer(_evolve(state, runs=()), 0)
        return state, Ok(None, tuple(timer_effects))
    effects: list[Effect] = []
    for b in state.buckets:
        state, _, more = _delete_snapshot(state, b.bucket_id, b.key)
        effects += more
    state = _evolve(state, buckets=(), shared=(), mutable=MutableBucket(), count=0)
    state, more = _update_timer(state, 0)
    return state, Ok(None, (*effects, *more))


def _parse_key(key: str) -> tuple[int, int] | None:
    parts = key[len(BUCKET_PROPERTY_PREFIX) + 1 :].split("_")
    if not key.startswith(BUCKET_PROPERTY_PREFIX + "_") or len(parts) != 2:
        return None
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return None


def recover(
    params: Params, storage: Storage, now_ms: int, *, mark_delete_ledger: int = -1
) -> tuple[BucketTracker, Ok[int] | Err]:
    """DD-24, DD-26, DD-27: rebuild a bucket tracker from the cursor's bucket properties.

    Returns the number of recovered messages, or ``RecoverDelayedDeliveryTracker`` with an empty
    tracker in in-memory fallback mode (storage untouched) when a snapshot cannot be read."""
    empty = BucketTracker(params, storage=storage, mark_delete_ledger=mark_delete_ledger)
    state = empty
    ranges: list[tuple[int, int, int, str]] = []
    doomed: list[tuple[int, str]] = []
    for key, value in sorted(storage.properties.items()):
        parsed = _parse_key(key)
        if parsed is None:
            continue
        start, end = parsed
        # DD-26: a range overlapping recovered ones replaces them only if it encloses all of them.
        overlapping = [r for r in ranges if r[0] <= end and start <= r[1]]
        if all(start <= r[0] and r[1] <= end for r in overlapping):
            for r in overlapping:
                ranges.remove(r)
                doomed.append((r[2], r[3]))
            ranges.append((start, end, int(value), key))
    effects: list[Effect] = []
    for bucket_id, key in doomed:
        state, _, more = _delete_snapshot(state, bucket_id, key)
        effects += more
    cutoff = params.cutoff(now_ms)
    for start, end, bucket_id, key in sorted(ranges):
        storage2, ok = _attempt(state.storage, "metadata")
        state = _evolve(state, storage=storage2)
        if not ok:
            return _fallback(_evolve(empty, storage=state.storage), f"metadata of bucket {bucket_id} could not be read")
        snapshot = state.storage.snapshots.get(bucket_id)
        metadata = snapshot.metadata if snapshot is not None else ()
        skipped = 0
        while skipped < len(metadata) and metadata[skipped].max_schedule_timestamp <= cutoff:
            skipped += 1
        live = metadata[skipped:]
        if snapshot is None or not live:
            state, _, more = _delete_snapshot(state, bucket_id, key)  # DD-24 expired or missing
            effects += more
            continue
        state, run = _load_segment(state, bucket_id, skipped + 1)
        if not isinstance(run, Run):
            return _fallback(
                _evolve(empty, storage=state.storage), f"segment {skipped + 1} of bucket {bucket_id} could not be read"
            )
        bitmaps = _union(m.bitmaps for m in live)
        count = _cardinality(bitmaps)
        bucket = ImmutableBucket(
            start,
            end,
            bucket_id,
            bitmaps,
            count,
            skipped + 1,
            len(metadata),
            tuple(m.min_schedule_timestamp for m in metadata),
            run.key(len(run) - 1),
            snapshot.length,
        )
        state = _evolve(
            state,
            buckets=_put_bucket(state.buckets, bucket),
            shared=_insert_sorted(state.shared, run),
            count=state.count + count,
        )
    state, more = _update_timer(state, now_ms)
    return state, Ok(state.count, (*effects, *more))


def _fallback(empty: BucketTracker, why: str) -> tuple[BucketTracker, Err]:
    return _evolve(empty, fallback=True), Err(RecoverDelayedDeliveryTracker(why))


def _complete_create(state: Tracker, cmd: CompleteBucketSnapshot) -> tuple[Tracker, Ok[int] | Err]:
    """DD-31: finish a snapshot creation.  Success stores the snapshot, names it in the cursor
    properties, drops the in-memory segments and deletes the merge sources it replaces; failure
    sends the bucket to memory mode (DD-14) and keeps the sources.  If the bucket left meanwhile
    (trim, clear), a created snapshot is deleted again."""
    if isinstance(state, InMemoryTracker) or cmd.request_id not in state.pending_creates:
        return state, Err(BucketSnapshotPersistence(f"no snapshot creation {cmd.request_id} in flight"))
    pending = state.pending_creates[cmd.request_id]
    state = _evolve(state, pending_creates=state.pending_creates.delete(cmd.request_id))
    at = next((i for i, b in enumerate(state.buckets) if b.pending_create == cmd.request_id), None)
    effects: list[Effect] = []
    if not cmd.succeeded:
        state = _count_op(state, "create", "failed")
        if at is None:
            return state, Ok(-1)
        b = state.buckets[at]
        shared = state.shared
        for run in pending.segments[b.current_segment :]:
            shared = _insert_sorted(shared, run)
        b = _evolve(b, pending_create=0, current_segment=b.last_segment, boundary=None)
        state = _evolve(state, shared=shared, buckets=(*state.buckets[:at], b, *state.buckets[at + 1 :]))
        if b.count == 0:
            state = _evolve(state, buckets=state.buckets[:at] + state.buckets[at + 1 :])
        return state, Ok(-1)
    bucket_id = state.storage.next_bucket_id
    length = metadata_length(pending.metadata) + sum(segment_length(r) for r in pending.segments)
    snapshot = Snapshot(pending.start_ledger_id, pending.end_ledger_id, pending.metadata, pending.segments, length)
    key = bucket_key(pending.start_ledger_id, pending.end_ledger_id)
    storage = _evolve(
        state.storage,
        snapshots=state.storage.snapshots.set(bucket_id, snapshot),
        properties=state.storage.properties.set(key, str(bucket_id)),
        next_bucket_id=bucket_id + 1,
    )
    state = _count_op(_evolve(state, storage=storage), "create", "succeed")
    effects += [CreateBucketSnapshot(bucket_id, snapshot), SetCursorProperty(key, str(bucket_id))]
    if at is None:
        state, _, more = _delete_snapshot(state, bucket_id, key)
        return state, Ok(bucket_id, (*effects, *more))
    b = _evolve(state.buckets[at], bucket_id=bucket_id, pending_create=0, snapshot_length=length)
    state = _evolve(state, buckets=(*state.buckets[:at], b, *state.buckets[at + 1 :]))
    for source_id, source_key in pending.sources:
        state, _, more = _delete_snapshot(state, source_id, source_key)
        effects += more
    return state, Ok(bucket_id, tuple(effects))


def _restart(state: Tracker, cmd: Restart) -> tuple[Tracker, Ok[int] | Err]:
    """DD-24, DD-29: a restart keeps only what is on storage; the in-memory tracker starts empty (its
    messages come back when the dispatcher replays the topic)."""
    if isinstance(state, InMemoryTracker):
        return InMemoryTracker(state.params), Ok(0)
    return recover(state.params, state.storage, cmd.now_ms, mark_delete_ledger=state.mark_delete_ledger)


# --------------------------------------------------------------------------------------------
# step
# --------------------------------------------------------------------------------------------


def step(state: Tracker, command: Command) -> tuple[Tracker, Ok[Any] | Err]:
    """Apply one command (see each handler for its rules)."""
    if isinstance(command, AddMessage):
        return _add(state, command)
    if isinstance(command, GetScheduledMessages):
        if command.max_messages < 0:
            raise ValueError("max_messages must be >= 0")
        return _get_scheduled(state, command)
    if isinstance(command, HasMessageAvailable):
        return _has_message_available(state, command)
    if isinstance(command, TimerFired):
        return _timer_fired(state, command)
    if isinstance(command, Clear):
        return _clear(state)
    if isinstance(command, Restart):
        return _restart(state, command)
    if isinstance(command, MarkDelete):
        if isinstance(state, InMemoryTracker):
            return state, Ok(None)
        return _evolve(state, mark_delete_ledger=max(state.mark_delete_ledger, command.ledger_id)), Ok(None)
    if isinstance(command, InjectStorageFailure):
        if command.operation not in ("create", "load", "delete", "metadata"):
            raise ValueError(f"unknown storage operation {command.operation!r}")
        if isinstance(state, InMemoryTracker):
            return state, Ok(None)
        failures = state.storage.failures
        storage = _evolve(
            state.storage, failures=failures.set(command.operation, failures.get(command.operation, 0) + command.count)
        )
        return _evolve(state, storage=storage), Ok(None)
    if isinstance(command, CompleteBucketSnapshot):
        return _complete_create(state, command)
    if isinstance(command, LoseBucketSnapshot):
        if isinstance(state, InMemoryTracker) or command.bucket_id not in state.storage.snapshots:
            return state, Err(BucketNotExist(f"no bucket snapshot {command.bucket_id}"))
        storage = _evolve(state.storage, snapshots=state.storage.snapshots.delete(command.bucket_id))
        return _evolve(state, storage=storage), Ok(None)
    raise TypeError(f"not a delayed-delivery command: {command!r}")


# --------------------------------------------------------------------------------------------
# Observers (the values tests, vectors and metrics read)
# --------------------------------------------------------------------------------------------


def tracked(state: Tracker) -> frozenset[tuple[int, int]]:
    """Every tracked position: the set bits (bucket) or the queued positions (in-memory)."""
    if isinstance(state, InMemoryTracker):
        return frozenset(unpack(k)[1:] for run in state.runs for k in run.key_list())
    out: set[tuple[int, int]] = set()
    for bitmaps in (state.mutable.bitmaps, *(b.bitmaps for b in state.buckets)):
        for ledger, bm in bitmaps.items():
            out.update((ledger, e) for e in bm)
    return frozenset(out)


def number_of_delayed_messages(state: Tracker) -> int:
    return state.count


def bucket_ranges(state: Tracker) -> tuple[tuple[int, int], ...]:
    if isinstance(state, InMemoryTracker):
        return ()
    return tuple((b.start_ledger_id, b.end_ledger_id) for b in state.buckets)


def metrics(state: Tracker) -> dict[str, int]:
    """DD-28: the gauges and counters of ``BucketDelayedMessageIndexStats`` (counters are
    cumulative here; Pulsar resets them on each scrape)."""
    if isinstance(state, InMemoryTracker):
        return {"delayed": state.count, "loaded": state.count, "bucket_total": 0, "snapshot_size_bytes": 0}
    out = {
        "bucket_total": len(state.buckets) + 1,
        "loaded": sum(len(r) for r in state.shared) + state.mutable.size,
        "snapshot_size_bytes": sum(b.snapshot_length for b in state.buckets),
        "delayed": state.count,
        "delayed_in_last_mutable_queue": state.mutable.size,
    }
    for op in OP_TYPES:
        for label in OP_STATES:
            out[f"op_count_{op}_{label}"] = state.op_counts.get(f"{op}.{label}", 0)
    return out


@dataclass(frozen=True, slots=True)
class Metrics:
    """DD-28: the metrics as one value (the vectors' ``metrics`` observer)."""

    bucket_total: int = 0
    loaded: int = 0
    snapshot_size_bytes: int = 0
    delayed: int = 0
    delayed_in_last_mutable_queue: int = 0
    op_count_create_all: int = 0
    op_count_create_succeed: int = 0
    op_count_create_failed: int = 0
    op_count_load_all: int = 0
    op_count_load_succeed: int = 0
    op_count_load_failed: int = 0
    op_count_delete_all: int = 0
    op_count_delete_succeed: int = 0
    op_count_delete_failed: int = 0
    op_count_merge_all: int = 0
    op_count_merge_succeed: int = 0
    op_count_merge_failed: int = 0


def _metrics(state: Tracker) -> Metrics:
    return Metrics(**metrics(state))


def _has_available(state: Tracker, now_ms: int) -> bool:
    return state.count > 0 and next_delivery_time(state) <= state.params.cutoff(now_ms)


def _contains(state: Tracker, ledger_id: int, entry_id: int) -> bool:
    return contains_message(state, ledger_id, entry_id)


def _timer_target(state: Tracker) -> int | None:
    return state.timer.target


def _cursor_properties(state: Tracker) -> dict[str, str]:
    return {} if isinstance(state, InMemoryTracker) else dict(state.storage.properties)


def _fallback_mode(state: Tracker) -> bool:
    return isinstance(state, BucketTracker) and state.fallback


def _bucket_segments(state: Tracker) -> list[list[int]]:
    """Per bucket: [current_segment, last_segment, count]."""
    if isinstance(state, InMemoryTracker):
        return []
    return [[b.current_segment, b.last_segment, b.count] for b in state.buckets]


def _decode_init(init: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(init) - {"tracker", "async_create"}
    if unknown:
        raise KeyError(f"unknown init key(s) {sorted(unknown)}; delayed takes 'tracker', 'async_create'")
    from spec.jsonvalues import from_json

    kinds: dict[str, type] = {"tracker": str, "async_create": bool}  # initial()'s parameters
    return {name: from_json(value, kinds[name], f"$.init.{name}") for name, value in init.items()}


def recover_from_json(config: Config, inputs: Any) -> Tracker:
    """The state a restarted tracker starts from, decoded from the engine's recovery inputs
    (DD-24, DD-27, DD-29): its parameters and, for a bucket tracker, what is durable — the cursor's
    bucket properties, the snapshot ledgers found on storage, the cursor's mark-delete ledger — plus
    the storage reads that failed after their retries (as queued failures).  Stepping
    :class:`Restart` on it is the recovery itself; nothing in memory survives.

    JSON (``spec.jsonvalues`` spellings)::

        {"tracker": "bucket", "async_create": false, "mark_delete_ledger": 3, "next_bucket_id": 5,
         "cursor_properties": [["#pulsar.internal.delayed.bucket_1_2", "4"]],
         "snapshots": [[4, {"start_ledger_id": 1, "end_ledger_id": 2, "length": 97,
                            "metadata": [{"min_schedule_timestamp": 10, "max_schedule_timestamp": 19,
                                          "bitmaps": [[1, [0, 1]], [2, [0]]]}],
                            "segments": [[[10, 1, 0], [12, 2, 0], [19, 1, 1]]]}]],
         "failures": [["metadata", 4]]}
    """
    from spec.jsonvalues import from_json

    unknown = set(inputs) - {
        "tracker",
        "async_create",
        "mark_delete_ledger",
        "next_bucket_id",
        "cursor_properties",
        "snapshots",
        "failures",
    }
    if unknown:
        raise KeyError(f"unknown recovery input(s) {sorted(unknown)}")
    state = initial(
        config,
        tracker=from_json(inputs.get("tracker", "bucket"), str, "$.tracker"),
        async_create=from_json(inputs.get("async_create", False), bool, "$.async_create"),
    )
    if isinstance(state, InMemoryTracker):
        return state
    snapshots: dict[int, Snapshot] = {}
    for i, pair in enumerate(from_json(inputs.get("snapshots", []), tuple[tuple[int, Any], ...], "$.snapshots")):
        bucket_id, raw = pair
        where = f"$.snapshots[{i}][1]"
        metadata = tuple(
            SegmentMeta(
                from_json(m["min_schedule_timestamp"], int, f"{where}.metadata[{k}]"),
                from_json(m["max_schedule_timestamp"], int, f"{where}.metadata[{k}]"),
                from_json(m["bitmaps"], immutables.Map[int, FrozenBitMap], f"{where}.metadata[{k}].bitmaps"),
            )
            for k, m in enumerate(raw["metadata"])
        )
        segments = from_json(raw["segments"], tuple[tuple[tuple[int, int, int], ...], ...], f"{where}.segments")
        snapshots[bucket_id] = Snapshot(
            from_json(raw["start_ledger_id"], int, f"{where}.start_ledger_id"),
            from_json(raw["end_ledger_id"], int, f"{where}.end_ledger_id"),
            metadata,
            tuple(compact_run(sorted(segment)) for segment in segments),
            from_json(raw["length"], int, f"{where}.length"),
        )
    storage = Storage(
        immutables.Map(snapshots),
        from_json(inputs.get("cursor_properties", []), immutables.Map[str, str], "$.cursor_properties"),
        from_json(inputs.get("next_bucket_id", 1), int, "$.next_bucket_id"),
        from_json(inputs.get("failures", []), immutables.Map[str, int], "$.failures"),
    )
    return _evolve(
        state,
        storage=storage,
        mark_delete_ledger=from_json(inputs.get("mark_delete_ledger", -1), int, "$.mark_delete_ledger"),
    )


_OBSERVERS: dict[str, Callable[..., Any]] = {
    "contains_message": _contains,
    "number_of_delayed_messages": number_of_delayed_messages,
    "next_delivery_time": next_delivery_time,
    "has_message_available": _has_available,
    "bucket_ranges": bucket_ranges,
    "bucket_segments": _bucket_segments,
    "metrics": _metrics,
    "timer_target": _timer_target,
    "cursor_properties": _cursor_properties,
    "fallback": _fallback_mode,
}

VECTORS = MachineVectors(
    name="delayed",
    initial=lambda config, init: initial(config, **_decode_init(init)),
    step=step,
    commands={
        "add_message": AddMessage,
        "get_scheduled_messages": GetScheduledMessages,
        "has_message_available": HasMessageAvailable,
        "timer_fired": TimerFired,
        "mark_delete": MarkDelete,
        "clear": Clear,
        "restart": Restart,
        "inject_storage_failure": InjectStorageFailure,
        "lose_bucket_snapshot": LoseBucketSnapshot,
        "complete_bucket_snapshot": CompleteBucketSnapshot,
    },
    observers=_OBSERVERS,
    recover=recover_from_json,
)
