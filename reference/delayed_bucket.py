"""The bucket delayed-delivery tracker: PIP-195's ``BucketDelayedDeliveryTracker``.

The 3.x line with the later fixes (rules in ``spec/rules/delayed.md``): a last mutable bucket,
sealed immutable buckets whose snapshots live in storage (entry 0 metadata, entries 1..N
segments), one loaded segment per bucket in the shared queue, per-ledger roaring bitmaps for
membership, merge, delete, trim, clear and recovery.

The snapshot store (BookKeeper in Pulsar) is modelled inside the state as :class:`Storage` so
that the machine stays pure and the invariants can see where every message lies; each change to
it is also returned as an effect (``CreateBucketSnapshot``, ``DeleteBucketSnapshot``,
``SetCursorProperty`` ...) so the engine (``engine.delayed.bucket_storage``) can write real
ledgers.  Storage failures are injected with :class:`~reference.delayed_common.InjectStorageFailure`;
each attempt consumes one queued failure and an operation fails for good after
``1 + DELAYED_STORAGE_MAX_RETRIES``.
"""

from __future__ import annotations

import bisect
import heapq
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import immutables
from pyroaring import BitMap

from reference.delayed_common import (
    ATTEMPTS,
    BUCKET_PROPERTY_PREFIX,
    NO_TIMESTAMP,
    AddMessage,
    Clear,
    Command,
    CompleteBucketSnapshot,
    CreateBucketSnapshot,
    DeleteBucketSnapshot,
    GetScheduledMessages,
    HasMessageAvailable,
    InjectStorageFailure,
    LoseBucketSnapshot,
    MarkDelete,
    Params,
    RemoveCursorProperty,
    RequestCreateBucketSnapshot,
    Restart,
    Result,
    SegmentMeta,
    SetCursorProperty,
    Snapshot,
    Timer,
    TimerFired,
    bucket_key,
    check_max_messages,
    check_position,
    check_storage_operation,
    has_message_available,
    timer_fired,
    update_timer,
)
from reference.delayed_runs import (
    EMPTY_BITMAPS,
    Bitmaps,
    Index,
    LsmQueue,
    Run,
    bit_add,
    bit_set,
    cardinality,
    compact_run,
    difference,
    evolve,
    freeze,
    insert_sorted,
    lsm_add,
    pack,
    queue_head,
    queue_size,
    queued,
    run_of_keys,
    same_queue,
    split_due,
    union,
    unpack,
)
from reference.persistent import evolver
from spec.config import DELAYED_MAX_MERGE_NUM
from spec.errors import BucketNotExist, BucketSnapshotPersistence, DomainError, RecoverDelayedDeliveryTracker
from spec.result import Effect, Err, Ok
from spec.types import Position

__all__ = [
    "OP_STATES",
    "OP_TYPES",
    "BucketTracker",
    "ImmutableBucket",
    "MutableBucket",
    "PendingCreate",
    "Step",
    "Storage",
    "boundary_owner",
    "bucket_ranges",
    "contains_message",
    "cut_segments",
    "drop_bit",
    "encode_metadata",
    "load_next",
    "metadata_length",
    "metrics",
    "move_due",
    "next_delivery_time",
    "pop_shared",
    "recover",
    "segment_length",
    "select_merge",
    "step",
    "tracked",
]

# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


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
class MutableBucket(LsmQueue):
    start_ledger_id: int = -1
    end_ledger_id: int = -1
    runs: tuple[Run, ...] = ()
    bitmaps: Bitmaps = EMPTY_BITMAPS

    @property
    def size(self) -> int:
        return queue_size(self)


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


Step = tuple[BucketTracker, Result]

# The updates an add makes, called directly (persistent.evolver): every message goes through them.
_ADDED: Final = evolver(BucketTracker, "mutable", "count")
_ADDED_SHARED: Final = evolver(BucketTracker, "shared", "mutable", "count")
_NEW_MUTABLE: Final = evolver(MutableBucket, "start_ledger_id", "end_ledger_id", "runs", "bitmaps")
_EMPTY_MUTABLE: Final = MutableBucket()


# --------------------------------------------------------------------------------------------
# Storage (pure, with failure injection)
# --------------------------------------------------------------------------------------------


def _count_op(state: BucketTracker, op: str, outcome: str) -> BucketTracker:
    counts = state.op_counts
    for label in ("all", outcome):
        name = f"{op}.{label}"
        counts = counts.set(name, counts.get(name, 0) + 1)
    return evolve(state, op_counts=counts)


def _attempt(storage: Storage, op: str) -> tuple[Storage, bool]:
    """One storage operation with its retries (DD-17): consume queued failures; it succeeds
    unless every attempt failed."""
    queued = storage.failures.get(op, 0)
    used = min(queued, ATTEMPTS)
    failures = storage.failures.set(op, queued - used) if used else storage.failures
    return evolve(storage, failures=failures), used < ATTEMPTS


def segment_length(run: Run) -> int:
    """Serialized size of a ``SnapshotSegment`` holding ``run`` (protobuf varint arithmetic)."""
    total = 0
    for ts, ledger, entry in run.indexes():
        # three tagged varints in a message, the message tagged and length-prefixed
        body = 3 + ((ts.bit_length() + 6) // 7 or 1) + ((ledger.bit_length() + 6) // 7 or 1)
        body += (entry.bit_length() + 6) // 7 or 1
        total += 1 + ((body.bit_length() + 6) // 7 or 1) + body
    return total


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
    state = evolve(state, storage=storage)
    if not ok:
        return _count_op(state, "create", "failed"), -1, []
    bucket_id = storage.next_bucket_id
    length = metadata_length(metadata) + sum(segment_length(s) for s in segments)
    snapshot = Snapshot(start, end, metadata, segments, length)
    key = bucket_key(start, end)
    storage = evolve(
        storage,
        snapshots=storage.snapshots.set(bucket_id, snapshot),
        properties=storage.properties.set(key, str(bucket_id)),
        next_bucket_id=bucket_id + 1,
    )
    effects: list[Effect] = [CreateBucketSnapshot(bucket_id, snapshot), SetCursorProperty(key, str(bucket_id))]
    return _count_op(evolve(state, storage=storage), "create", "succeed"), bucket_id, effects


def _delete_snapshot(state: BucketTracker, bucket_id: int, key: str) -> tuple[BucketTracker, bool, list[Effect]]:
    """DD-19: delete the ledger first, then the property; a failed delete leaves both (an orphan
    that recovery finds again).  Deleting a missing ledger succeeds (ST4)."""
    if bucket_id < 0:
        return state, True, []
    storage, ok = _attempt(state.storage, "delete")
    state = evolve(state, storage=storage)
    if not ok:
        return _count_op(state, "delete", "failed"), False, []
    storage = (
        evolve(storage, snapshots=storage.snapshots.delete(bucket_id)) if bucket_id in storage.snapshots else storage
    )
    effects: list[Effect] = [DeleteBucketSnapshot(bucket_id)]
    if storage.properties.get(key) == str(bucket_id):
        storage = evolve(storage, properties=storage.properties.delete(key))
        effects.append(RemoveCursorProperty(key))
    return _count_op(evolve(state, storage=storage), "delete", "succeed"), True, effects


def _load_segment(
    state: BucketTracker, bucket_id: int, entry: int, *, counted: bool = True
) -> tuple[BucketTracker, Run | DomainError | None]:
    """Read segment ``entry`` (1-based); ``None`` when the snapshot has no such entry.  A merge's
    reads are not ``load`` operations in Pulsar's stats (DD-28), hence ``counted``."""

    def count(state: BucketTracker, outcome: str) -> BucketTracker:
        return _count_op(state, "load", outcome) if counted else state

    storage, ok = _attempt(state.storage, "load")
    state = evolve(state, storage=storage)
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
        metadata.append(SegmentMeta(seg[0][0], seg[-1][0], freeze(builders)))
        runs.append(compact_run(seg))
    bitmaps = freeze(all_bits)
    first_ts = tuple(m.min_schedule_timestamp for m in metadata)
    if state.params.async_create:
        request = state.next_request_id
        pending = PendingCreate(start, end, tuple(metadata), tuple(runs))
        boundary = runs[0].key(len(runs[0]) - 1)
        bucket = ImmutableBucket(
            start, end, -1, bitmaps, len(indexes), 1, len(runs), first_ts, boundary, 0, pending_create=request
        )
        state = evolve(
            state,
            shared=insert_sorted(state.shared, runs[0]),
            pending_creates=state.pending_creates.set(request, pending),
            next_request_id=request + 1,
        )
        effect = RequestCreateBucketSnapshot(request, start, end, tuple(metadata), tuple(runs))
        return state, bucket, [effect]
    state, bucket_id, effects = _create_snapshot(state, start, end, tuple(metadata), tuple(runs))
    shared = state.shared
    if bucket_id == -1:
        for run in runs:
            shared = insert_sorted(shared, run)
        bucket = ImmutableBucket(start, end, -1, bitmaps, len(indexes), len(runs), len(runs), first_ts, None, 0)
    else:
        shared = insert_sorted(shared, runs[0])
        length = state.storage.snapshots[bucket_id].length
        boundary = runs[0].key(len(runs[0]) - 1)
        bucket = ImmutableBucket(start, end, bucket_id, bitmaps, len(indexes), 1, len(runs), first_ts, boundary, length)
    return evolve(state, shared=shared), bucket, effects


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
        if position not in sealed and bit_set(mutable.bitmaps, *position):
            sealed.add(position)
            indexes.append(index)
    # Only the bits of the sealed indexes move; bits of messages routed straight to the shared
    # queue stay in the mutable bitmap (DD-7).
    moved: dict[int, BitMap] = {}
    for _, ledger, entry in indexes:
        moved.setdefault(ledger, BitMap()).add(entry)
    state = evolve(state, mutable=MutableBucket(bitmaps=difference(mutable.bitmaps, moved)))
    if not indexes:
        return state, []
    state, bucket, effects = _build_bucket(state, mutable.start_ledger_id, mutable.end_ledger_id, indexes)
    state = evolve(state, buckets=_put_bucket(state.buckets, bucket))
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
            keys.extend(k for k in run.key_list() if bit_set(b.bitmaps, *unpack(k)[1:]))
        streams.append(keys)
    merged = [unpack(k) for k in heapq.merge(*streams)]
    rest = state.buckets[:i] + state.buckets[j:]
    state = evolve(state, buckets=rest)
    effects: list[Effect] = []
    if merged:
        state, bucket, effects = _build_bucket(state, sources[0].start_ledger_id, sources[-1].end_ledger_id, merged)
        # Bits of indexes already delivered from the loaded segments are gone from the sources,
        # so the union of the sources' bitmaps is exactly the merged bucket's bitmap.
        state = evolve(state, buckets=_put_bucket(state.buckets, bucket))
        created = bucket.bucket_id >= 0
        if bucket.pending_create:
            # DD-31: the sources are deleted when (and only if) the merged snapshot is created.
            pending = state.pending_creates[bucket.pending_create]
            sources_ids = tuple((b.bucket_id, b.key) for b in sources)
            state = evolve(
                state,
                pending_creates=state.pending_creates.set(bucket.pending_create, evolve(pending, sources=sources_ids)),
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
        state = evolve(
            state,
            buckets=tuple(x for x in state.buckets if x.start_ledger_id != b.start_ledger_id),
            count=state.count - b.count,
        )
    return state, effects


# --------------------------------------------------------------------------------------------
# Add
# --------------------------------------------------------------------------------------------


_START_LEDGER: Final = operator.attrgetter("start_ledger_id")


def _covering(buckets: Sequence[ImmutableBucket], ledger: int) -> int | None:
    if not buckets or ledger > buckets[-1].end_ledger_id:
        return None  # above every bucket, where messages of a topic being written go
    at = bisect.bisect_right(buckets, ledger, key=_START_LEDGER) - 1
    if at >= 0 and buckets[at].end_ledger_id >= ledger:
        return at
    return None


def contains_message(state: BucketTracker, ledger_id: int, entry_id: int) -> bool:
    """DD-11: the bit is set in the mutable bitmap or in the covering bucket's bitmap."""
    if bit_set(state.mutable.bitmaps, ledger_id, entry_id):
        return True
    at = _covering(state.buckets, ledger_id)
    return at is not None and bit_set(state.buckets[at].bitmaps, ledger_id, entry_id)


def drop_bit(state: BucketTracker, ledger: int, entry: int) -> tuple[BucketTracker, bool]:
    """Clear one tracked bit (mutable first, else the covering bucket); False when not tracked."""
    pops = _Popping(state)
    tracked = pops.drop(ledger, entry)
    return pops.finish(), tracked


def _keeps(bucket: ImmutableBucket) -> bool:
    """Whether a sealed bucket stays in the range map once bits were dropped from it."""
    # A memory-mode bucket has no boundary to retire it: it leaves when its last bit does (DD-14).
    return bucket.bucket_id >= 0 or bool(bucket.pending_create) or bucket.count > 0


class _Popping:
    """The pops and bit drops of one step, gathered before they reach the state, which they then
    reach in one update (instead of four per message).

    The shared queue is held as parallel lists of head keys, runs and how many records of each
    have been consumed, kept in the order :func:`insert_sorted` keeps; the dropped bits per place
    (-1 the mutable bucket, else a sealed bucket's index) and ledger.  :meth:`finish` makes the
    state that popping and dropping one at a time would have made.  Nothing here is a rule:
    :func:`_get_scheduled` says which pops happen and :meth:`drop` is ``drop_bit``'s rule.
    A memory-mode bucket that lost its last bit sets ``reshaped``: it leaves the range map, so
    the caller finishes and goes on from the new state.
    """

    __slots__ = ("count", "dropped", "heads", "reshaped", "runs", "state", "used")

    def __init__(self, state: BucketTracker) -> None:
        self.state = state
        self.heads: list[bytes] | None = None  # the queue, made on the first pop
        self.runs: list[Run] = []
        self.used: list[int] = []
        self.dropped: dict[int, dict[int, BitMap]] = {}
        self.count = 0
        self.reshaped = False

    def head(self) -> bytes | None:
        if self.heads is None:
            self.runs = list(self.state.shared)
            self.heads = [run.head() for run in self.runs]
            self.used = [0] * len(self.runs)
        return self.heads[0] if self.heads else None

    def pop_head(self) -> None:
        """Consume the queue's smallest index (``pop_shared``)."""
        heads = self.heads
        assert heads is not None
        run = self.runs[0]
        used = self.used[0] + 1
        if used < len(run):
            head = run.key(used)
            if len(heads) == 1 or head < heads[1]:
                # still the smallest: where insert_sorted's bisect would put it back
                heads[0] = head
                self.used[0] = used
                return
            del heads[0], self.runs[0], self.used[0]
            at = bisect.bisect_right(heads, head)
            heads.insert(at, head)
            self.runs.insert(at, run)
            self.used.insert(at, used)
        else:
            del heads[0], self.runs[0], self.used[0]

    def _set(self, place: int, bitmaps: Bitmaps, ledger: int, entry: int) -> bool:
        if not bit_set(bitmaps, ledger, entry):
            return False
        gone = self.dropped.get(place)
        return gone is None or ledger not in gone or entry not in gone[ledger]

    def _drop(self, place: int, ledger: int, entry: int) -> None:
        # not setdefault(ledger, BitMap()): that would make a bitmap on every drop
        per_ledger = self.dropped.get(place)
        if per_ledger is None:
            per_ledger = self.dropped[place] = {}
        bits = per_ledger.get(ledger)
        if bits is None:
            bits = per_ledger[ledger] = BitMap()
        bits.add(entry)
        self.count += 1

    def drop(self, ledger: int, entry: int) -> bool:
        """Clear one tracked bit (mutable first, else the covering bucket); False when not tracked."""
        state = self.state
        if self._set(-1, state.mutable.bitmaps, ledger, entry):
            self._drop(-1, ledger, entry)
            return True
        if not state.buckets:
            return False
        at = _covering(state.buckets, ledger)
        if at is None or not self._set(at, state.buckets[at].bitmaps, ledger, entry):
            return False
        self._drop(at, ledger, entry)
        b = state.buckets[at]
        if b.bucket_id < 0 and not b.pending_create:
            self.reshaped = self.reshaped or b.count == sum(len(bits) for bits in self.dropped[at].values())
        return True

    def finish(self) -> BucketTracker:
        state = self.state
        changes: dict[str, Any] = {}
        if self.heads is not None and (len(self.runs) != len(state.shared) or any(self.used)):
            changes["shared"] = tuple(
                evolve(run, offset=run.offset + used) if used else run
                for run, used in zip(self.runs, self.used, strict=True)
            )
        if self.dropped:
            m = state.mutable
            buckets = list(state.buckets)
            for place, bits in self.dropped.items():
                if place < 0:
                    changes["mutable"] = same_queue(evolve(m, bitmaps=difference(m.bitmaps, bits)), m)
                else:
                    b = buckets[place]
                    n = sum(len(entries) for entries in bits.values())
                    buckets[place] = evolve(b, bitmaps=difference(b.bitmaps, bits), count=b.count - n)
            if len(self.dropped) > (-1 in self.dropped):
                changes["buckets"] = tuple(b for b in buckets if _keeps(b))
            changes["count"] = state.count - self.count
        return evolve(state, **changes) if changes else state


def _add(state: BucketTracker, cmd: AddMessage) -> tuple[BucketTracker, Ok[bool]]:
    """DD-1, DD-2, DD-3, DD-4, DD-5, DD-6, DD-7, DD-8: add one delayed message; a position already
    tracked is not added twice (DD-11, asked inline)."""
    check_position(cmd)
    cutoff = state.params.cutoff(cmd.now_ms)
    if cmd.deliver_at < 0 or cmd.deliver_at <= cutoff:
        # Fixed order (#26230/#26251): the cutoff check comes first and forgets any bit, so a
        # message the dispatcher now delivers directly does not leak in the count.
        state, dropped = drop_bit(state, cmd.ledger_id, cmd.entry_id)
        if not dropped:
            return state, Ok(False)
        state, timer_effects = _update_timer(state, cmd.now_ms)
        return state, Ok(False, tuple(timer_effects))
    ledger, entry = cmd.ledger_id, cmd.entry_id
    covering = _covering(state.buckets, ledger)
    # DD-11, as contains_message asks it (the covering bucket is needed again below)
    if bit_set(state.mutable.bitmaps, ledger, entry) or (
        covering is not None and bit_set(state.buckets[covering].bitmaps, ledger, entry)
    ):
        return state, Ok(True)
    effects: list[Effect] = []
    exist = covering is not None
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
        start = ledger if m.start_ledger_id == -1 else m.start_ledger_id
        added = _NEW_MUTABLE(_EMPTY_MUTABLE, start, ledger, lsm_add(m.runs, key), bit_add(m.bitmaps, ledger, entry))
        state = _ADDED(state, queued(added, m, key), state.count + 1)
    else:
        state = _ADDED_SHARED(
            state,
            insert_sorted(state.shared, Run(key)),
            same_queue(evolve(m, bitmaps=bit_add(m.bitmaps, ledger, entry)), m),
            state.count + 1,
        )
    state, more = _update_timer(state, cmd.now_ms)
    return state, Ok(True, (*effects, *more))


# --------------------------------------------------------------------------------------------
# Scheduling
# --------------------------------------------------------------------------------------------


def next_delivery_time(state: BucketTracker) -> int:
    """DD-13: the smallest queued deliver-at (mutable queue or shared queue); Long.MAX when nothing
    is queued (#26080)."""
    head = queue_head(state.mutable)
    # keys order deliver-at first, so the smaller head's deliver-at is the smaller deliver-at
    ts = unpack(head)[0] if head is not None else NO_TIMESTAMP
    return min(ts, state.shared[0].head_ts()) if state.shared else ts


def move_due(state: BucketTracker, cutoff: int) -> BucketTracker:
    """DD-12: due mutable indexes move to the shared queue (their bits stay in the mutable bitmap)."""
    due, rest = split_due(state.mutable.runs, cutoff)
    if not due:
        return state
    mutable = evolve(state.mutable, runs=rest)
    return evolve(state, mutable=mutable, shared=insert_sorted(state.shared, run_of_keys(due)))


def pop_shared(state: BucketTracker) -> BucketTracker:
    first = state.shared[0].advance()
    return evolve(state, shared=insert_sorted(state.shared[1:], first))


def load_next(state: BucketTracker, at: int) -> tuple[BucketTracker, bool, list[Effect]]:
    """DD-10/DD-19: the boundary of bucket ``at`` reached the head: load its next segment, or
    delete the bucket when there is none.  Returns (state, loaded-or-deleted, effects)."""
    b = state.buckets[at]
    state, run = _load_segment(state, b.bucket_id, b.current_segment + 1)
    if isinstance(run, DomainError) and not isinstance(run, BucketNotExist):
        return state, False, []  # DD-16: roll back, retry on a later call
    if isinstance(run, Run) and len(run) > 0:
        b = evolve(b, current_segment=b.current_segment + 1, boundary=run.key(len(run) - 1))
        state = evolve(
            state,
            buckets=(*state.buckets[:at], b, *state.buckets[at + 1 :]),
            shared=insert_sorted(state.shared, run),
        )
        return state, True, []
    # No further segment (or the snapshot is gone): the bucket is done.  The bits of its indexes
    # still queued move to the mutable bitmap so they stay tracked after the bucket leaves the
    # range map; bits of indexes that only lived in a lost snapshot are dropped with it.
    queued = _queued_bits(state.shared, b.bitmaps)
    lost = b.count - cardinality(queued)
    mutable = evolve(state.mutable, bitmaps=union((state.mutable.bitmaps, queued)))
    state = evolve(
        state, buckets=state.buckets[:at] + state.buckets[at + 1 :], mutable=mutable, count=state.count - lost
    )
    state, _, effects = _delete_snapshot(state, b.bucket_id, b.key)
    return state, True, effects


def _queued_bits(shared: Sequence[Run], bitmaps: Bitmaps) -> Bitmaps:
    """The set bits of ``bitmaps`` whose index is somewhere in the shared queue."""
    out: dict[int, BitMap] = {}
    for run in shared:
        for _, ledger, entry in run.indexes():
            if bit_set(bitmaps, ledger, entry):
                out.setdefault(ledger, BitMap()).add(entry)
    return freeze(out)


def _get_scheduled(state: BucketTracker, cmd: GetScheduledMessages) -> tuple[BucketTracker, Ok[tuple[Position, ...]]]:
    """DD-10, DD-12, DD-13, DD-15, DD-16, DD-22: pop due indexes in (deliver_at, ledger, entry) order.

    The pops are gathered (:class:`_Popping`) and reach the state before a segment is loaded, when
    a bucket leaves the range map, and at the end."""
    cutoff = state.params.cutoff(cmd.now_ms)
    out: set[tuple[int, int]] = set()
    n = cmd.max_messages
    effects: list[Effect] = []
    pops = _Popping(move_due(state, cutoff))
    while n > 0 and (head := pops.head()) is not None:
        state = pops.state  # what the gathered pops leave alone: buckets' ranges and boundaries
        ts, ledger, entry = unpack(head)
        below_mark = 0 <= ledger < state.mark_delete_ledger
        if ts > cutoff and not below_mark:
            break
        at = boundary_owner(state, head, ledger) if state.buckets else None
        if at is not None and state.buckets[at].pending_create:
            break  # DD-31: the next segment exists only once the snapshot is created
        if at is not None:
            state, progressed, more = load_next(pops.finish(), at)
            effects += more
            pops = _Popping(state)
            if not progressed:
                break
            continue  # the boundary index is popped on the next turn, now unregistered
        pops.pop_head()
        tracked_here = pops.drop(ledger, entry)
        if pops.reshaped:
            pops = _Popping(pops.finish())
        if below_mark or not tracked_here:
            continue  # DD-22 trim at pop; DD-15 dedup at pop
        out.add((ledger, entry))
        n -= 1
    state, more = _update_timer(pops.finish(), cmd.now_ms)
    positions = tuple(Position(ledger, entry) for ledger, entry in sorted(out))
    return state, Ok(positions, (*effects, *more))


def boundary_owner(state: BucketTracker, head: bytes, ledger: int | None = None) -> int | None:
    """The sealed bucket whose loaded segment ends at ``head`` (of ``ledger``, when the caller has
    unpacked it already), if any."""
    if ledger is None:
        ledger = unpack(head)[1]
    at = _covering(state.buckets, ledger)
    if at is not None and state.buckets[at].boundary == head:
        return at
    return None


# --------------------------------------------------------------------------------------------
# Timer
# --------------------------------------------------------------------------------------------


def _update_timer(state: BucketTracker, now_ms: int) -> tuple[BucketTracker, list[Effect]]:
    return update_timer(state, now_ms, next_delivery_time)


def _timer_fired(state: BucketTracker, cmd: TimerFired) -> tuple[BucketTracker, Ok[bool]]:
    """DD-25: a live timer also moves the due mutable indexes to the shared queue (DD-12)."""
    return timer_fired(state, cmd, lambda fired: move_due(fired, fired.params.cutoff(cmd.now_ms)))


# --------------------------------------------------------------------------------------------
# Clear, restart, recovery
# --------------------------------------------------------------------------------------------


def _clear(state: BucketTracker) -> tuple[BucketTracker, Ok[None]]:
    """DD-23: delete every bucket snapshot and empty every queue; a failed delete does not stop
    the clear (the snapshot stays on storage as an orphan)."""
    effects: list[Effect] = []
    for b in state.buckets:
        state, _, more = _delete_snapshot(state, b.bucket_id, b.key)
        effects += more
    state = evolve(state, buckets=(), shared=(), mutable=MutableBucket(), count=0)
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
        state = evolve(state, storage=storage2)
        if not ok:
            return _fallback(evolve(empty, storage=state.storage), f"metadata of bucket {bucket_id} could not be read")
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
                evolve(empty, storage=state.storage), f"segment {skipped + 1} of bucket {bucket_id} could not be read"
            )
        bitmaps = union(m.bitmaps for m in live)
        count = cardinality(bitmaps)
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
        state = evolve(
            state,
            buckets=_put_bucket(state.buckets, bucket),
            shared=insert_sorted(state.shared, run),
            count=state.count + count,
        )
    state, more = _update_timer(state, now_ms)
    return state, Ok(state.count, (*effects, *more))


def _fallback(empty: BucketTracker, why: str) -> tuple[BucketTracker, Err]:
    return evolve(empty, fallback=True), Err(RecoverDelayedDeliveryTracker(why))


def _complete_create(state: BucketTracker, cmd: CompleteBucketSnapshot) -> tuple[BucketTracker, Ok[int] | Err]:
    """DD-31: finish a snapshot creation.  Success stores the snapshot, names it in the cursor
    properties, drops the in-memory segments and deletes the merge sources it replaces; failure
    sends the bucket to memory mode (DD-14) and keeps the sources.  If the bucket left meanwhile
    (trim, clear), a created snapshot is deleted again."""
    if cmd.request_id not in state.pending_creates:
        return state, Err(BucketSnapshotPersistence(f"no snapshot creation {cmd.request_id} in flight"))
    pending = state.pending_creates[cmd.request_id]
    state = evolve(state, pending_creates=state.pending_creates.delete(cmd.request_id))
    at = next((i for i, b in enumerate(state.buckets) if b.pending_create == cmd.request_id), None)
    effects: list[Effect] = []
    if not cmd.succeeded:
        state = _count_op(state, "create", "failed")
        if at is None:
            return state, Ok(-1)
        b = state.buckets[at]
        shared = state.shared
        for run in pending.segments[b.current_segment :]:
            shared = insert_sorted(shared, run)
        b = evolve(b, pending_create=0, current_segment=b.last_segment, boundary=None)
        state = evolve(state, shared=shared, buckets=(*state.buckets[:at], b, *state.buckets[at + 1 :]))
        if b.count == 0:
            state = evolve(state, buckets=state.buckets[:at] + state.buckets[at + 1 :])
        return state, Ok(-1)
    bucket_id = state.storage.next_bucket_id
    length = metadata_length(pending.metadata) + sum(segment_length(r) for r in pending.segments)
    snapshot = Snapshot(pending.start_ledger_id, pending.end_ledger_id, pending.metadata, pending.segments, length)
    key = bucket_key(pending.start_ledger_id, pending.end_ledger_id)
    storage = evolve(
        state.storage,
        snapshots=state.storage.snapshots.set(bucket_id, snapshot),
        properties=state.storage.properties.set(key, str(bucket_id)),
        next_bucket_id=bucket_id + 1,
    )
    state = _count_op(evolve(state, storage=storage), "create", "succeed")
    effects += [CreateBucketSnapshot(bucket_id, snapshot), SetCursorProperty(key, str(bucket_id))]
    if at is None:
        state, _, more = _delete_snapshot(state, bucket_id, key)
        return state, Ok(bucket_id, (*effects, *more))
    b = evolve(state.buckets[at], bucket_id=bucket_id, pending_create=0, snapshot_length=length)
    state = evolve(state, buckets=(*state.buckets[:at], b, *state.buckets[at + 1 :]))
    for source_id, source_key in pending.sources:
        state, _, more = _delete_snapshot(state, source_id, source_key)
        effects += more
    return state, Ok(bucket_id, tuple(effects))


def _restart(state: BucketTracker, cmd: Restart) -> tuple[BucketTracker, Ok[int] | Err]:
    """DD-24: a restart keeps only what is on storage."""
    return recover(state.params, state.storage, cmd.now_ms, mark_delete_ledger=state.mark_delete_ledger)


# --------------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------------


def step(state: BucketTracker, command: Command) -> Step:
    """One command on the bucket tracker (see each handler for its rules)."""
    match command:
        case AddMessage():
            return _add(state, command)
        case GetScheduledMessages():
            check_max_messages(command)
            return _get_scheduled(state, command)
        case HasMessageAvailable():
            return has_message_available(state, command, next_delivery_time)
        case TimerFired():
            return _timer_fired(state, command)
        case Clear():
            return _clear(state)
        case Restart():
            return _restart(state, command)
        case MarkDelete():
            return evolve(state, mark_delete_ledger=max(state.mark_delete_ledger, command.ledger_id)), Ok(None)
        case InjectStorageFailure():
            check_storage_operation(command)
            failures = state.storage.failures
            storage = evolve(
                state.storage,
                failures=failures.set(command.operation, failures.get(command.operation, 0) + command.count),
            )
            return evolve(state, storage=storage), Ok(None)
        case CompleteBucketSnapshot():
            return _complete_create(state, command)
        case LoseBucketSnapshot():
            if command.bucket_id not in state.storage.snapshots:
                return state, Err(BucketNotExist(f"no bucket snapshot {command.bucket_id}"))
            storage = evolve(state.storage, snapshots=state.storage.snapshots.delete(command.bucket_id))
            return evolve(state, storage=storage), Ok(None)
    raise TypeError(f"not a delayed-delivery command: {command!r}")


# --------------------------------------------------------------------------------------------
# Observers
# --------------------------------------------------------------------------------------------


def tracked(state: BucketTracker) -> frozenset[tuple[int, int]]:
    """Every tracked position: the set bits."""
    out: set[tuple[int, int]] = set()
    for bitmaps in (state.mutable.bitmaps, *(b.bitmaps for b in state.buckets)):
        for ledger, bm in bitmaps.items():
            out.update((ledger, e) for e in bm)
    return frozenset(out)


def bucket_ranges(state: BucketTracker) -> tuple[tuple[int, int], ...]:
    return tuple((b.start_ledger_id, b.end_ledger_id) for b in state.buckets)


def metrics(state: BucketTracker) -> dict[str, int]:
    """DD-28: the gauges and counters of ``BucketDelayedMessageIndexStats`` (counters are
    cumulative here; Pulsar resets them on each scrape)."""
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
