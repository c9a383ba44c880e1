"""The in-memory delayed-delivery tracker: Pulsar's ``InMemoryDelayedDeliveryTracker`` (DD-29).

The baseline the bucket tracker replaces: one priority queue of every accepted index
``(deliver_at, ledger, entry)`` (Pulsar's ``TripleLongPriorityQueue``), no dedup, nothing
persisted; a restart starts empty and the dispatcher's replay of the topic brings the messages
back.  It answers the bucket tracker's command set (:mod:`reference.delayed_common`); the storage
commands have nothing to act on.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from reference.delayed_common import (
    NO_TIMESTAMP,
    AddMessage,
    Clear,
    Command,
    CompleteBucketSnapshot,
    GetScheduledMessages,
    HasMessageAvailable,
    InjectStorageFailure,
    LoseBucketSnapshot,
    MarkDelete,
    Params,
    Restart,
    Result,
    Timer,
    TimerFired,
    check_max_messages,
    check_position,
    check_storage_operation,
    has_message_available,
    timer_fired,
    update_timer,
)
from reference.delayed_runs import (
    LsmQueue,
    Run,
    due_limit,
    evolve,
    lsm_add,
    pack,
    queue_head,
    queue_size,
    queued,
    same_queue,
    unpack,
)
from spec.errors import BucketNotExist, BucketSnapshotPersistence
from spec.result import Effect, Err, Ok
from spec.types import Position

__all__ = ["InMemoryTracker", "Step", "contains_message", "metrics", "next_delivery_time", "step", "tracked"]


@dataclass(frozen=True, slots=True)
class InMemoryTracker(LsmQueue):
    """DD-29: the baseline, one priority queue of every accepted index (no dedup, nothing persisted)."""

    params: Params
    runs: tuple[Run, ...] = ()
    timer: Timer = Timer()

    @property
    def count(self) -> int:
        return queue_size(self)


Step = tuple[InMemoryTracker, Result]


def next_delivery_time(state: InMemoryTracker) -> int:
    """DD-13: the smallest queued deliver-at; Long.MAX when nothing is queued (#26080)."""
    head = queue_head(state)
    return unpack(head)[0] if head is not None else NO_TIMESTAMP


def _update_timer(state: InMemoryTracker, now_ms: int) -> tuple[InMemoryTracker, list[Effect]]:
    after, effects = update_timer(state, now_ms, next_delivery_time)
    # a new timer leaves the queue as it was: hand its size and head on
    return (same_queue(after, state) if after.runs is state.runs else after), effects


def contains_message(state: InMemoryTracker, ledger_id: int, entry_id: int) -> bool:
    """DD-11 asked of the baseline: it has no index, so it answers by scanning its queue."""
    return any(unpack(k)[1:] == (ledger_id, entry_id) for run in state.runs for k in run.key_list())


def _add(state: InMemoryTracker, cmd: AddMessage) -> tuple[InMemoryTracker, Ok[bool]]:
    """DD-1, DD-29: a message due within the cutoff is not tracked; any other is queued, even if it
    is queued already."""
    check_position(cmd)
    cutoff = state.params.cutoff(cmd.now_ms)
    if cmd.deliver_at < 0 or cmd.deliver_at <= cutoff:
        return state, Ok(False)
    key = pack((cmd.deliver_at, cmd.ledger_id, cmd.entry_id))
    state = queued(evolve(state, runs=lsm_add(state.runs, key)), state, key)
    state, timer_effects = _update_timer(state, cmd.now_ms)
    return state, Ok(True, tuple(timer_effects))


def _get_scheduled(
    state: InMemoryTracker, cmd: GetScheduledMessages
) -> tuple[InMemoryTracker, Ok[tuple[Position, ...]]]:
    """DD-12, DD-13: pop due indexes in (deliver_at, ledger, entry) order."""
    due = due_limit(state.params.cutoff(cmd.now_ms))
    out: set[tuple[int, int]] = set()
    n = cmd.max_messages
    runs = state.runs
    # A merge of the runs' heads: pop the smallest key while it is due, up to n (on equal keys the
    # older run's first); ``taken[i]`` counts what run i gave.
    heads = [(run.head(), i) for i, run in enumerate(runs)]
    heapq.heapify(heads)
    taken = [0] * len(runs)
    while n > 0 and heads and heads[0][0] <= due:
        key, i = heads[0]
        _, ledger, entry = unpack(key)
        taken[i] += 1
        if taken[i] < len(runs[i]):
            heapq.heapreplace(heads, (runs[i].key(taken[i]), i))
        else:
            heapq.heappop(heads)
        out.add((ledger, entry))
        n -= 1
    if any(taken):
        runs = tuple(left for run, t in zip(runs, taken, strict=True) if (left := run.advance(t) if t else run))
    state, more = _update_timer(evolve(state, runs=runs), cmd.now_ms)
    positions = tuple(Position(ledger, entry) for ledger, entry in sorted(out))
    return state, Ok(positions, tuple(more))


def _clear(state: InMemoryTracker) -> tuple[InMemoryTracker, Ok[None]]:
    """DD-23: empty the queue (nothing is persisted)."""
    state, timer_effects = _update_timer(evolve(state, runs=()), 0)
    return state, Ok(None, tuple(timer_effects))


def step(state: InMemoryTracker, command: Command) -> Step:
    """One command on the in-memory tracker (see each handler for its rules)."""
    match command:
        case AddMessage():
            return _add(state, command)
        case GetScheduledMessages():
            check_max_messages(command)
            return _get_scheduled(state, command)
        case HasMessageAvailable():
            return has_message_available(state, command, next_delivery_time)
        case TimerFired():
            return timer_fired(state, command, lambda fired: fired)
        case Clear():
            return _clear(state)
        case Restart():
            # DD-24, DD-29: a restart keeps only what is on storage, which is nothing here (the
            # messages come back when the dispatcher replays the topic).
            return InMemoryTracker(state.params), Ok(0)
        case MarkDelete():
            return state, Ok(None)
        case InjectStorageFailure():
            check_storage_operation(command)
            return state, Ok(None)
        case CompleteBucketSnapshot():
            return state, Err(BucketSnapshotPersistence(f"no snapshot creation {command.request_id} in flight"))
        case LoseBucketSnapshot():
            return state, Err(BucketNotExist(f"no bucket snapshot {command.bucket_id}"))
    raise TypeError(f"not a delayed-delivery command: {command!r}")


def tracked(state: InMemoryTracker) -> frozenset[tuple[int, int]]:
    """Every tracked position: the queued positions."""
    return frozenset(unpack(k)[1:] for run in state.runs for k in run.key_list())


def metrics(state: InMemoryTracker) -> dict[str, int]:
    """DD-28 asked of the baseline: everything it holds is loaded, in no bucket."""
    return {"delayed": state.count, "loaded": state.count, "bucket_total": 0, "snapshot_size_bytes": 0}
