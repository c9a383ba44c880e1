"""Invariants of the PIP-195 delayed-delivery trackers (``spec/rules/delayed.md``).

State predicates hold after every step of a :class:`reference.delayed.BucketTracker`; they are
vacuous for the in-memory baseline except where stated.  Step properties relate a command's
result to the states around it (nothing early, nothing twice, nothing lost by sealing, merging
or trimming).
"""

from __future__ import annotations

from typing import Any

from invariants.base import Invariant, StepProperty
from reference.delayed import (
    AddMessage,
    BucketTracker,
    GetScheduledMessages,
    InMemoryTracker,
    Run,
    Tracker,
    unpack,
)
from spec.result import Ok

__all__ = ["INVARIANTS", "STEP_PROPERTIES", "deliver_at_of", "locations"]


def _bits(bitmaps: Any) -> set[tuple[int, int]]:
    return {(ledger, e) for ledger, bm in bitmaps.items() for e in bm}


def _runs_positions(runs: tuple[Run, ...]) -> dict[tuple[int, int], int]:
    out: dict[tuple[int, int], int] = {}
    for run in runs:
        for ts, ledger, entry in run.indexes():
            out.setdefault((ledger, entry), ts)
    return out


def locations(state: BucketTracker) -> dict[str, dict[tuple[int, int], int]]:
    """Where each queued index is: ``mutable``, ``shared`` and ``unloaded`` (segments after the
    loaded one, on storage), each a map position -> deliver_at."""
    unloaded: dict[tuple[int, int], int] = {}
    for b in state.buckets:
        if b.pending_create:
            # DD-31: until its snapshot exists, a bucket's later segments are kept in memory.
            pending = state.pending_creates[b.pending_create]
            unloaded.update(_runs_positions(pending.segments[b.current_segment :]))
            continue
        snapshot = state.storage.snapshots.get(b.bucket_id) if b.bucket_id >= 0 else None
        if snapshot is None:
            continue
        unloaded.update(_runs_positions(snapshot.segments[b.current_segment :]))
    return {
        "mutable": _runs_positions(state.mutable.runs),
        "shared": _runs_positions(state.shared),
        "unloaded": unloaded,
    }


def deliver_at_of(state: Tracker) -> dict[tuple[int, int], int]:
    """The deliver-at of every tracked position (the smallest queued copy)."""
    if isinstance(state, InMemoryTracker):
        return _runs_positions(state.runs)
    where = locations(state)
    tracked = _tracked(state)
    out: dict[tuple[int, int], int] = {}
    for place in where.values():
        for pos, ts in place.items():
            if pos in tracked and (pos not in out or ts < out[pos]):
                out[pos] = ts
    return out


def _tracked(state: BucketTracker) -> set[tuple[int, int]]:
    out = _bits(state.mutable.bitmaps)
    for b in state.buckets:
        out |= _bits(b.bitmaps)
    return out


def _bucket(pred: Any) -> Any:
    return lambda s: isinstance(s, InMemoryTracker) or pred(s)


def _ranges_disjoint(s: BucketTracker) -> bool:
    """DD-5."""
    for b in s.buckets:
        if not 0 <= b.start_ledger_id <= b.end_ledger_id:
            return False
    for a, b in zip(s.buckets, s.buckets[1:], strict=False):
        if a.end_ledger_id >= b.start_ledger_id:
            return False
    m = s.mutable
    if m.start_ledger_id == -1:
        return m.end_ledger_id == -1 and m.size == 0
    return m.start_ledger_id <= m.end_ledger_id and (not s.buckets or m.start_ledger_id > s.buckets[-1].end_ledger_id)


def _mutable_queue_in_range(s: BucketTracker) -> bool:
    """DD-6: the mutable queue holds only ledgers of the mutable range, with their bits set."""
    m = s.mutable
    for run in m.runs:
        for _, ledger, _entry in run.indexes():
            if not m.start_ledger_id <= ledger <= m.end_ledger_id:
                return False
    return True


def _one_bitmap_per_bit(s: BucketTracker) -> bool:
    """DD-11: a bucket's bits lie in its range, and no bit is both in the mutable bitmap and in a
    bucket's."""
    mutable = _bits(s.mutable.bitmaps)
    for b in s.buckets:
        if any(not b.start_ledger_id <= ledger <= b.end_ledger_id for ledger in b.bitmaps):
            return False
        if any(len(bm) == 0 for bm in b.bitmaps.values()):
            return False
        if mutable & _bits(b.bitmaps):
            return False
    return all(len(bm) > 0 for bm in s.mutable.bitmaps.values())


def _count_is_tracked(s: BucketTracker) -> bool:
    """DD-4."""
    per_bucket = all(b.count == sum(len(bm) for bm in b.bitmaps.values()) for b in s.buckets)
    total = sum(len(bm) for bm in s.mutable.bitmaps.values()) + sum(b.count for b in s.buckets)
    return per_bucket and s.count == total


def _every_tracked_reachable(s: BucketTracker) -> bool:
    """DD-5, DD-10: every tracked message is queued (mutable or shared) or in an unloaded
    segment of the bucket covering it, unless that bucket's snapshot was lost."""
    where = locations(s)
    queued = set(where["mutable"]) | set(where["shared"])
    lost_ranges = [
        (b.start_ledger_id, b.end_ledger_id)
        for b in s.buckets
        if b.bucket_id >= 0 and b.bucket_id not in s.storage.snapshots
    ]
    for pos in _tracked(s):
        if pos in queued or pos in where["unloaded"]:
            continue
        if any(lo <= pos[0] <= hi for lo, hi in lost_ranges):
            continue
        return False
    return True


def _segments_ordered(s: BucketTracker) -> bool:
    """DD-9, DD-18: every stored snapshot's segments are sorted, each one starts no earlier than
    the previous one ends, respects the max-indexes cut, and its metadata matches it."""
    limit = s.params.max_indexes_per_segment
    for snapshot in s.storage.snapshots.values():
        if len(snapshot.metadata) != len(snapshot.segments):
            return False
        previous_max = -1
        previous_key = b""
        for meta, run in zip(snapshot.metadata, snapshot.segments, strict=True):
            if len(run) == 0 or (limit != -1 and len(run) > limit):
                return False
            keys = [run.key(i) for i in range(len(run))]
            if keys != sorted(keys) or keys[0] <= previous_key:
                return False
            first, last = unpack(keys[0])[0], unpack(keys[-1])[0]
            if first < previous_max or meta.min_schedule_timestamp != first or meta.max_schedule_timestamp != last:
                return False
            if last - first > max(s.params.time_step_ms - 1, 0):
                return False
            if _bits(meta.bitmaps) != {unpack(k)[1:] for k in keys}:
                return False
            previous_max, previous_key = last, keys[-1]
    return True


def _boundary_registered(s: BucketTracker) -> bool:
    """DD-10, DD-14, DD-31: a persisted (or being created) bucket's boundary is the last index of
    its loaded segment; a memory-mode bucket has none."""
    for b in s.buckets:
        if b.pending_create:
            pending = s.pending_creates.get(b.pending_create)
            if pending is None or b.current_segment != 1 or b.last_segment != len(pending.segments):
                return False
            if b.boundary != pending.segments[0].key(len(pending.segments[0]) - 1):
                return False
            continue
        if b.bucket_id < 0:
            if b.boundary is not None:
                return False
            continue
        snapshot = s.storage.snapshots.get(b.bucket_id)
        if snapshot is None:
            continue
        if not 1 <= b.current_segment <= b.last_segment == len(snapshot.segments):
            return False
        run = snapshot.segments[b.current_segment - 1]
        if b.boundary != run.key(len(run) - 1):
            return False
    return True


def _catalogue(s: BucketTracker) -> bool:
    """DD-18: each persisted bucket is named in the cursor properties by its range."""
    return all(b.bucket_id < 0 or s.storage.properties.get(b.key) == str(b.bucket_id) for b in s.buckets)


def _shared_sorted(s: BucketTracker) -> bool:
    heads = [r.head() for r in s.shared]
    return all(len(r) > 0 for r in s.shared) and heads == sorted(heads)


def _timer_idle_when_empty(s: Tracker) -> bool:
    """DD-25: no timer is armed while the tracker is empty."""
    return s.count > 0 or s.timer.target is None


INVARIANTS: tuple[Invariant[Any], ...] = (
    Invariant("bucket_ranges_disjoint", ("DD-5",), _bucket(_ranges_disjoint)),
    Invariant("mutable_queue_in_range", ("DD-6",), _bucket(_mutable_queue_in_range)),
    Invariant("one_bitmap_per_bit", ("DD-11",), _bucket(_one_bitmap_per_bit)),
    Invariant("count_is_tracked", ("DD-4",), _bucket(_count_is_tracked)),
    Invariant("every_tracked_reachable", ("DD-5", "DD-10"), _bucket(_every_tracked_reachable)),
    Invariant("segments_ordered", ("DD-9", "DD-18"), _bucket(_segments_ordered)),
    Invariant("boundary_registered", ("DD-10", "DD-14", "DD-31"), _bucket(_boundary_registered)),
    Invariant("catalogue_names_buckets", ("DD-18",), _bucket(_catalogue)),
    Invariant("shared_queue_sorted", ("DD-13",), _bucket(_shared_sorted)),
    Invariant("timer_idle_when_empty", ("DD-25",), _timer_idle_when_empty),
)


# ---- step properties -------------------------------------------------------------------------


def _never_early(before: Tracker, command: Any, result: Any, after: Tracker) -> bool:
    """DD-1, DD-13: every returned message was due: deliver_at <= cutoff at the call.

    A message's deliver-at is part of the message, so every add of a position carries the same
    one; a history that re-adds a position with a different deliver-at is outside the model (a
    stale queued copy would then be judged against the newer time)."""
    if not isinstance(command, GetScheduledMessages) or not isinstance(result, Ok):
        return True
    due_at = deliver_at_of(before)
    cutoff = before.params.cutoff(command.now_ms)
    return all(due_at.get((p.ledger_id, p.entry_id), cutoff + 1) <= cutoff for p in result.value)


def _returned_once(before: Tracker, command: Any, result: Any, after: Tracker) -> bool:
    """DD-15: a returned message was tracked before and is not tracked after, so it cannot be
    returned again unless it is added again."""
    if not isinstance(command, GetScheduledMessages) or not isinstance(result, Ok):
        return True
    if len(result.value) > command.max_messages:
        return False
    if isinstance(before, InMemoryTracker):
        return True
    assert isinstance(after, BucketTracker)
    returned = {(p.ledger_id, p.entry_id) for p in result.value}
    return returned <= _tracked(before) and not (returned & _tracked(after))


def _add_preserves(before: Tracker, command: Any, result: Any, after: Tracker) -> bool:
    """DD-8, DD-21, DD-22: an add (which may seal, trim and merge) keeps every tracked message
    and its deliver-at, except those a trim drops below the mark-delete ledger."""
    if not isinstance(command, AddMessage) or not isinstance(before, BucketTracker):
        return True
    assert isinstance(after, BucketTracker)
    old = deliver_at_of(before)
    new = deliver_at_of(after)
    expected = dict(old)
    position = (command.ledger_id, command.entry_id)
    if isinstance(result, Ok) and result.value is True and position not in old:
        expected[position] = command.deliver_at
    elif isinstance(result, Ok) and result.value is False:
        expected.pop(position, None)  # DD-2: a due message is forgotten, the dispatcher delivers it

    def above(m: dict[tuple[int, int], int]) -> dict[tuple[int, int], int]:
        return {p: t for p, t in m.items() if not p[0] < after.mark_delete_ledger}

    return above(new) == above(expected)


STEP_PROPERTIES: tuple[StepProperty[Any], ...] = (
    StepProperty("never_early", ("DD-1", "DD-13"), _never_early),
    StepProperty("returned_once", ("DD-15",), _returned_once),
    StepProperty("add_preserves_tracked", ("DD-8", "DD-21", "DD-22"), _add_preserves),
)
