"""PIP-195: the bucket delayed-delivery tracker of today's Pulsar, and the in-memory tracker it replaces.

Two pure machines share one command set (rules in ``spec/rules/delayed.md``); this module is the
machine everything else imports (``from reference import delayed``): the state is either tracker,
:func:`step` hands each command to the tracker's own ``step``, and the observers, the recovery
from a history's JSON and the vectors adapter cover both.

* :class:`InMemoryTracker` (:mod:`reference.delayed_memory`) — the baseline: one priority queue of
  ``(deliver_at, ledger, entry)`` (Pulsar's ``InMemoryDelayedDeliveryTracker`` over
  ``TripleLongPriorityQueue``).
* :class:`BucketTracker` (:mod:`reference.delayed_bucket`) — ``BucketDelayedDeliveryTracker`` of
  the 3.x line with the later fixes: a last mutable bucket, sealed immutable buckets whose
  snapshots live in storage (entry 0 metadata, entries 1..N segments), one loaded segment per
  bucket in the shared queue, per-ledger roaring bitmaps for membership, merge, delete, trim,
  clear and recovery.  Its snapshot store is modelled inside the state (:class:`Storage`), and
  every change to it is also an effect the engine carries out (``engine.delayed.bucket_storage``).

What both share -- the parameters, the commands, the effects, the timer rule -- is
:mod:`reference.delayed_common`; the packed runs and bitmaps they are written over are
:mod:`reference.delayed_runs`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import immutables
from pyroaring import FrozenBitMap

from reference import delayed_bucket, delayed_memory
from reference.conformance import MachineVectors
from reference.delayed_bucket import (
    OP_STATES,
    OP_TYPES,
    BucketTracker,
    ImmutableBucket,
    MutableBucket,
    PendingCreate,
    Storage,
    cut_segments,
    encode_metadata,
    metadata_length,
    recover,
    segment_length,
    select_merge,
)
from reference.delayed_bucket import boundary_owner as boundary_owner
from reference.delayed_bucket import drop_bit as drop_bit
from reference.delayed_bucket import load_next as load_next
from reference.delayed_bucket import move_due as move_due
from reference.delayed_bucket import pop_shared as pop_shared
from reference.delayed_common import (
    ATTEMPTS,
    BUCKET_PROPERTY_PREFIX,
    NO_TIMESTAMP,
    AddMessage,
    CancelTimer,
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
    ReadMoreEntries,
    RemoveCursorProperty,
    RequestCreateBucketSnapshot,
    Restart,
    Result,
    ScheduleTimer,
    SegmentMeta,
    SetCursorProperty,
    Snapshot,
    Timer,
    TimerFired,
    bucket_key,
)
from reference.delayed_memory import InMemoryTracker
from reference.delayed_runs import (
    EMPTY_BITMAPS,
    Bitmaps,
    Index,
    Run,
    compact_run,
    evolve,
    freeze,
    pack,
    union,
    unpack,
)
from spec.config import Config

# Internals some tests drive one at a time, under the names they had when this module held both
# trackers (the proofs' cross-checks step the bucket tracker's scheduling piece by piece; the
# ``boundary_owner`` .. ``pop_shared`` imports above are those, too).
_evolve, _union, _freeze, _EMPTY_BITMAPS = evolve, union, freeze, EMPTY_BITMAPS

__all__ = [
    "ATTEMPTS",
    "BUCKET_PROPERTY_PREFIX",
    "NO_TIMESTAMP",
    "OP_STATES",
    "OP_TYPES",
    "VECTORS",
    "AddMessage",
    "Bitmaps",
    "BucketTracker",
    "CancelTimer",
    "Clear",
    "Command",
    "CompleteBucketSnapshot",
    "CreateBucketSnapshot",
    "DeleteBucketSnapshot",
    "GetScheduledMessages",
    "HasMessageAvailable",
    "ImmutableBucket",
    "InMemoryTracker",
    "Index",
    "InjectStorageFailure",
    "LoseBucketSnapshot",
    "MarkDelete",
    "Metrics",
    "MutableBucket",
    "Params",
    "PendingCreate",
    "ReadMoreEntries",
    "RemoveCursorProperty",
    "RequestCreateBucketSnapshot",
    "Restart",
    "Result",
    "Run",
    "ScheduleTimer",
    "SegmentMeta",
    "SetCursorProperty",
    "Snapshot",
    "Step",
    "Storage",
    "Timer",
    "TimerFired",
    "Tracker",
    "bucket_key",
    "bucket_ranges",
    "compact_run",
    "contains_message",
    "cut_segments",
    "encode_metadata",
    "initial",
    "metadata_length",
    "metrics",
    "next_delivery_time",
    "number_of_delayed_messages",
    "pack",
    "recover",
    "recover_from_json",
    "segment_length",
    "select_merge",
    "step",
    "tracked",
    "unpack",
]

Tracker = BucketTracker | InMemoryTracker
Step = tuple[Tracker, Result]


# --------------------------------------------------------------------------------------------
# Construction
# --------------------------------------------------------------------------------------------


def initial(config: Config, *, tracker: str = "bucket", async_create: bool = False) -> Tracker:
    """An empty tracker; ``tracker`` is ``"bucket"`` or ``"in_memory"``; ``async_create`` makes
    snapshot creation complete through a later command (DD-31)."""
    params = evolve(Params.of(config), async_create=async_create)
    if tracker == "bucket":
        return BucketTracker(params)
    if tracker == "in_memory":
        return InMemoryTracker(params)
    raise ValueError(f"unknown tracker {tracker!r} (bucket, in_memory)")


# --------------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------------


def step(state: Tracker, command: Command) -> Step:
    """Apply one command: each tracker matches it to its own handler (see each handler for its rules)."""
    match state:
        case BucketTracker():
            return delayed_bucket.step(state, command)
        case InMemoryTracker():
            return delayed_memory.step(state, command)
    raise TypeError(f"not a delayed-delivery tracker: {state!r}")


# --------------------------------------------------------------------------------------------
# Observers (the values tests, vectors and metrics read)
# --------------------------------------------------------------------------------------------


def contains_message(state: Tracker, ledger_id: int, entry_id: int) -> bool:
    """DD-11: whether the tracker holds the message (the bucket tracker's bitmaps; the in-memory
    baseline, which has no index, scans its queue)."""
    if isinstance(state, InMemoryTracker):
        return delayed_memory.contains_message(state, ledger_id, entry_id)
    return delayed_bucket.contains_message(state, ledger_id, entry_id)


def next_delivery_time(state: Tracker) -> int:
    """DD-13: the smallest queued deliver-at; Long.MAX when nothing is queued (#26080)."""
    if isinstance(state, InMemoryTracker):
        return delayed_memory.next_delivery_time(state)
    return delayed_bucket.next_delivery_time(state)


def tracked(state: Tracker) -> frozenset[tuple[int, int]]:
    """Every tracked position: the set bits (bucket) or the queued positions (in-memory)."""
    if isinstance(state, InMemoryTracker):
        return delayed_memory.tracked(state)
    return delayed_bucket.tracked(state)


def number_of_delayed_messages(state: Tracker) -> int:
    return state.count


def bucket_ranges(state: Tracker) -> tuple[tuple[int, int], ...]:
    if isinstance(state, InMemoryTracker):
        return ()
    return delayed_bucket.bucket_ranges(state)


def metrics(state: Tracker) -> dict[str, int]:
    """DD-28: the gauges and counters of ``BucketDelayedMessageIndexStats`` (counters are
    cumulative here; Pulsar resets them on each scrape)."""
    if isinstance(state, InMemoryTracker):
        return delayed_memory.metrics(state)
    return delayed_bucket.metrics(state)


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
    return evolve(
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
