"""Invariants of the PIP-160 batched log writer (``reference/batched_log.py``, rules BW-*).

Each predicate states one rule-level fact over a writer state.  The stateful test checks all of
them after every step, ``proofs/batched_log.py`` proves their abstract counterparts, and the bulk
checker imports them from here.
"""

from __future__ import annotations

import itertools
from typing import Any

from invariants.base import Invariant, StepProperty
from reference.batched_log import (
    AddComplete,
    AddFailed,
    AsyncAddData,
    AsyncAddEntry,
    WriterState,
    WriterStatus,
)
from spec.result import Ok
from spec.types import BatchedPosition

__all__ = ["INVARIANTS", "STEP_PROPERTIES"]


def below_thresholds(s: WriterState) -> bool:
    """Between flushes the buffer holds fewer than maxRecords records and fewer than maxSize
    bytes (BW-9, BW-10, BW-11); a record of maxSize bytes or more never waits (BW-8)."""
    return len(s.buffer) < s.config.max_records and s.bytes_size < s.config.max_size


def bytes_size_is_sum(s: WriterState) -> bool:
    """``bytesSize`` is the sum of the buffered records' sizes (BW-11)."""
    return s.bytes_size == sum(len(b.data) for b in s.buffer)


def buffer_only_when_batching(s: WriterState) -> bool:
    """Nothing waits unless batching is effective and the writer is not CLOSED (BW-2, BW-5, BW-18)."""
    return not s.buffer or (s.config.effective and s.status is not WriterStatus.CLOSED)


def timer_armed_iff_batching_open(s: WriterState) -> bool:
    """The one-shot tick is pending exactly while batching is effective and the writer is OPEN,
    or CLOSING before its close task ran (BW-12, BW-18)."""
    if s.status is WriterStatus.OPEN:
        return (s.timer_due_ms is not None) == s.config.effective
    if s.status is WriterStatus.CLOSED:
        return s.timer_due_ms is None
    return s.config.effective


def requests_ordered(s: WriterState) -> bool:
    """In-flight writes then the buffer hold distinct request ids in increasing order, all newer
    than the last success and older than the next request (BW-6, BW-17)."""
    ids = [rid for w in s.in_flight for rid in w.request_ids] + [b.request_id for b in s.buffer]
    return all(a < b for a, b in itertools.pairwise(ids)) and all(
        s.last_succeeded < rid < s.next_request_id for rid in ids
    )


def every_request_accounted(s: WriterState) -> bool:
    """Each accepted request is exactly one of: succeeded, failed, in flight, buffered (BW-17)."""
    in_flight = sum(len(w.request_ids) for w in s.in_flight)
    return s.next_request_id == s.succeeded + s.failed + in_flight + len(s.buffer)


def writes_ordered(s: WriterState) -> bool:
    """In-flight writes are answered oldest first and have distinct, increasing ids (BW-6, BW-16)."""
    ids = [w.write_id for w in s.in_flight]
    return all(a < b for a, b in itertools.pairwise(ids)) and all(i < s.next_write_id for i in ids)


def plain_writes_hold_one_record(s: WriterState) -> bool:
    """A plain (unbatched) write carries exactly one record (BW-5, BW-8)."""
    return all(w.batched or len(w.request_ids) == 1 for w in s.in_flight)


def live_indexes_in_range(s: WriterState) -> bool:
    """Every live entry keeps a non-empty set of batch indexes within [0, batch size); a plain
    entry is one record (BW-15, BW-20)."""
    for view in s.entries.values():
        if not view.remaining or view.remaining.max() >= view.batch_size or view.remaining.min() < 0:
            return False
        if not view.batched and view.batch_size != 1:
            return False
    return True


def flush_stats_consistent(s: WriterState) -> bool:
    """Every counted batch flush counted exactly one trigger, held at least one record and every
    record at least one byte (BW-19)."""
    st = s.stats
    triggers = st.max_records + st.max_size + st.max_delay + st.large_data
    return st.batches == triggers and st.records_sum >= st.batches and st.bytes_sum >= st.records_sum


INVARIANTS: tuple[Invariant[WriterState], ...] = (
    Invariant("below_thresholds", ("BW-8", "BW-9", "BW-10", "BW-11"), below_thresholds),
    Invariant("bytes_size_is_sum", ("BW-11",), bytes_size_is_sum),
    Invariant("buffer_only_when_batching", ("BW-2", "BW-5", "BW-18"), buffer_only_when_batching),
    Invariant("timer_armed_iff_batching_open", ("BW-12", "BW-18"), timer_armed_iff_batching_open),
    Invariant("requests_ordered", ("BW-6", "BW-17"), requests_ordered),
    Invariant("every_request_accounted", ("BW-17",), every_request_accounted),
    Invariant("writes_ordered", ("BW-6", "BW-16"), writes_ordered),
    Invariant("plain_writes_hold_one_record", ("BW-5", "BW-8"), plain_writes_hold_one_record),
    Invariant("live_indexes_in_range", ("BW-15", "BW-20"), live_indexes_in_range),
    Invariant("flush_stats_consistent", ("BW-19",), flush_stats_consistent),
)


# --------------------------------------------------------------------------------------------
# Step properties: facts about one step's effects.


def _callbacks(result: Any) -> list[AddComplete | AddFailed]:
    return [e for e in result.effects if isinstance(e, AddComplete | AddFailed)]


def batch_positions_distinct(before: WriterState, command: Any, result: Any, after: WriterState) -> bool:
    """The success callbacks of one write have distinct batch indexes in [0, batch size), in
    index order, all with that batch size (BW-15)."""
    positions = [e.position for e in result.effects if isinstance(e, AddComplete)]
    batched = [p for p in positions if isinstance(p, BatchedPosition)]
    if not batched:
        return True
    n = len(batched)
    return [p.batch_index for p in batched] == list(range(n)) and all(p.batch_size == n for p in batched)


def successes_in_request_order(before: WriterState, command: Any, result: Any, after: WriterState) -> bool:
    """Successes of a step come in increasing request order and after every earlier success (BW-17)."""
    ids = [e.request_id for e in result.effects if isinstance(e, AddComplete)]
    return all(a < b for a, b in zip([before.last_succeeded, *ids], ids, strict=False))


def one_callback_per_request(before: WriterState, command: Any, result: Any, after: WriterState) -> bool:
    """A step calls back each request at most once, and only requests that were waiting (BW-17)."""
    ids = [e.request_id for e in _callbacks(result)]
    waiting = {rid for w in before.in_flight for rid in w.request_ids} | {b.request_id for b in before.buffer}
    if isinstance(command, AsyncAddData) and isinstance(result, Ok):
        waiting.add(before.next_request_id)
    return len(ids) == len(set(ids)) and set(ids) <= waiting


def writes_preserve_arrival_order(before: WriterState, command: Any, result: Any, after: WriterState) -> bool:
    """Writes issued by a step carry increasing request ids, older than anything left buffered (BW-6, BW-8)."""
    ids = [rid for e in result.effects if isinstance(e, AsyncAddEntry) for rid in e.request_ids]
    left = [b.request_id for b in after.buffer]
    seq = ids + left
    return all(a < b for a, b in itertools.pairwise(seq))


STEP_PROPERTIES: tuple[StepProperty[WriterState], ...] = (
    StepProperty("batch_positions_distinct", ("BW-15",), batch_positions_distinct),
    StepProperty("successes_in_request_order", ("BW-17",), successes_in_request_order),
    StepProperty("one_callback_per_request", ("BW-17",), one_callback_per_request),
    StepProperty("writes_preserve_arrival_order", ("BW-6", "BW-8"), writes_preserve_arrival_order),
)
