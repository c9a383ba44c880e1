"""What the two delayed-delivery trackers share (rules in ``spec/rules/delayed.md``).

The broker.conf parameters (:class:`Params`, whose ``cutoff`` is DD-1), the one command set both
trackers answer, their effects, the snapshot values the bucket tracker's effects carry, and the
timer rule (DD-25) written once for both: :func:`update_timer`, :func:`timer_fired`,
:func:`has_message_available`.  The trackers themselves are :mod:`reference.delayed_memory` and
:mod:`reference.delayed_bucket`; :mod:`reference.delayed` is the machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from reference.delayed_runs import Bitmaps, Run, evolve
from spec.config import DELAYED_STORAGE_MAX_RETRIES, Config
from spec.result import Effect, Err, Ok

__all__ = [
    "ATTEMPTS",
    "BUCKET_PROPERTY_PREFIX",
    "NO_TIMESTAMP",
    "AddMessage",
    "CancelTimer",
    "Clear",
    "Command",
    "CompleteBucketSnapshot",
    "CreateBucketSnapshot",
    "DeleteBucketSnapshot",
    "GetScheduledMessages",
    "HasMessageAvailable",
    "InjectStorageFailure",
    "LoseBucketSnapshot",
    "MarkDelete",
    "Params",
    "ReadMoreEntries",
    "RemoveCursorProperty",
    "RequestCreateBucketSnapshot",
    "Restart",
    "Result",
    "ScheduleTimer",
    "SegmentMeta",
    "SetCursorProperty",
    "Snapshot",
    "Timer",
    "TimerFired",
    "TrackerState",
    "bucket_key",
    "check_max_messages",
    "check_position",
    "check_storage_operation",
    "has_message_available",
    "timer_fired",
    "update_timer",
]

BUCKET_PROPERTY_PREFIX: Final = "#pulsar.internal.delayed.bucket"
NO_TIMESTAMP: Final = (1 << 63) - 1  # Long.MAX_VALUE: nextDeliveryTime of an empty tracker (#26080)
ATTEMPTS: Final = 1 + DELAYED_STORAGE_MAX_RETRIES


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
class Timer:
    target: int | None = None  # the deliver-at the armed timer is for (TM2)
    last_tick_run: int = 0


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
Result = Ok[Any] | Err


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
# The timer (DD-25) and the checks every command makes, for both trackers
# --------------------------------------------------------------------------------------------


class TrackerState(Protocol):
    """What the shared rules read of a tracker."""

    @property
    def params(self) -> Params: ...

    @property
    def timer(self) -> Timer: ...

    @property
    def count(self) -> int: ...


S = TypeVar("S", bound=TrackerState)


def update_timer(state: S, now_ms: int, next_delivery_time: Callable[[S], int]) -> tuple[S, list[Effect]]:
    """DD-25: keep one timer armed for the next deliver-at, never sooner than a tick after the
    last timer run."""
    timer: Timer = state.timer
    if state.count == 0:
        if timer.target is None:
            return state, []
        return evolve(state, timer=evolve(timer, target=None)), [CancelTimer()]
    ts = next_delivery_time(state)
    if ts == timer.target:
        return state, []
    effects: list[Effect] = [CancelTimer()] if timer.target is not None else []
    delay = ts - now_ms
    if delay < 0:
        return evolve(state, timer=evolve(timer, target=None)), effects
    delay = max(delay, timer.last_tick_run + state.params.tick_ms - now_ms)
    effects.append(ScheduleTimer(ts, delay))
    return evolve(state, timer=evolve(timer, target=ts)), effects


def timer_fired(state: S, cmd: TimerFired, on_tick: Callable[[S], S]) -> tuple[S, Ok[bool]]:
    """DD-25: a superseded or cancelled timer does nothing; a live one records the tick, lets the
    tracker move what is due (``on_tick``) and asks the dispatcher to read."""
    if state.timer.target is None or state.timer.target != cmd.target:
        return state, Ok(False)
    state = on_tick(evolve(state, timer=Timer(None, cmd.now_ms)))
    return state, Ok(True, (ReadMoreEntries(),))


def has_message_available(
    state: S, cmd: HasMessageAvailable, next_delivery_time: Callable[[S], int]
) -> tuple[S, Ok[bool]]:
    """DD-13: count > 0 and the next deliver-at is within the cutoff; re-arms the timer when not."""
    available = state.count > 0 and next_delivery_time(state) <= state.params.cutoff(cmd.now_ms)
    if available:
        return state, Ok(True)
    state, effects = update_timer(state, cmd.now_ms, next_delivery_time)
    return state, Ok(False, tuple(effects))


def check_position(cmd: AddMessage) -> None:
    """A delayed message has a real position; anything else is a caller's bug, not a domain error."""
    if cmd.ledger_id < 0 or cmd.entry_id < 0:
        raise ValueError(f"a delayed message has a real position, got {cmd.ledger_id}:{cmd.entry_id}")


def check_max_messages(cmd: GetScheduledMessages) -> None:
    if cmd.max_messages < 0:
        raise ValueError("max_messages must be >= 0")


def check_storage_operation(cmd: InjectStorageFailure) -> None:
    if cmd.operation not in ("create", "load", "delete", "metadata"):
        raise ValueError(f"unknown storage operation {cmd.operation!r}")
