"""Invariants of the PIP-160 batched log writer (``reference/batched_log.py``, rules BW-*).

Each predicate states one rule-level fact over a writer state.  The stateful test checks all of
them after every step, ``proofs/batched_log.py`` proves their abstract counterparts, and the bulk
checker imports them from here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from invariants.base import Invariant, StepProperty
from reference.batched_log import (
    AddComplete,
    AddFailed,
    AsyncAddData,
    AsyncAddEntry,
    LoggedEntry,
    WriterConfig,
    WriterState,
    WriterStatus,
)
from spec.envelope import decode_entry
from spec.errors import InputError
from spec.result import Ok
from spec.types import BatchedPosition

__all__ = ["INVARIANTS", "STEP_PROPERTIES", "batch_layout_problem", "entry_layout_problem", "log_layout_problem"]


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
# What the thresholds leave in the log: a reader of the durable entries (a history's ``recover``
# rows) sees every rule of adding records at work without seeing the writer.


def batch_layout_problem(cfg: WriterConfig, sizes: Sequence[int]) -> str | None:
    """What a batched entry of records of ``sizes`` bytes shows against the thresholds of a writer
    with ``cfg``, whatever its switch (BW-22) was when it wrote it, or None: batching is effective
    only with maxRecords above one (BW-2); a batch holds at most maxRecords records (BW-9), none of
    maxSize bytes or more (BW-8), and the records before its last hold fewer than maxSize bytes
    (BW-10, BW-11: the buffer is flushed as soon as they reach it)."""
    if cfg.max_records <= 1:
        return f"a batch of {len(sizes)} records, although maxRecords {cfg.max_records} never batches (BW-2)"
    if len(sizes) > cfg.max_records:
        return f"a batch of {len(sizes)} records, more than maxRecords {cfg.max_records} (BW-9)"
    large = next((size for size in sizes if size >= cfg.max_size), None)
    if large is not None:
        return f"a record of {large} bytes inside a batch; from maxSize {cfg.max_size} on it is written alone (BW-8)"
    before_last = sum(sizes[:-1])
    if before_last >= cfg.max_size:
        return (
            f"a batch of {len(sizes)} records whose first {len(sizes) - 1} already hold {before_last} bytes, "
            f"at least maxSize {cfg.max_size}: the buffer was not flushed when they reached it (BW-10)"
        )
    return None


def entry_layout_problem(cfg: WriterConfig, batched: bool, sizes: Sequence[int]) -> str | None:
    """What one entry written by a writer with ``cfg`` (its switch included) shows against the
    rules of adding records, from its layout alone (a batch or a plain record, its records'
    serialized sizes), or None: without effective batching every entry is plain (BW-5); with it, a
    plain entry is a record of maxSize bytes or more (BW-8: a smaller one waits in a batch), and a
    batch is as :func:`batch_layout_problem` says."""
    if not cfg.effective:
        return f"a batch of {len(sizes)} records, although batching is off (BW-5)" if batched else None
    if not batched:
        if sizes[0] < cfg.max_size:
            return (
                f"a record of {sizes[0]} bytes written alone with batching on; below maxSize {cfg.max_size} "
                "it waits in a batch (BW-8)"
            )
        return None
    return batch_layout_problem(cfg, sizes)


def _layout(data: bytes, cfg: WriterConfig) -> tuple[bool, tuple[int, ...]] | None:
    """An entry's layout (batched, its records' sizes), or None when it does not decode (which its
    reader reports, BW-23)."""
    try:
        decoded = decode_entry(data, cfg.kind)
    except InputError:
        return None
    return decoded.batched, tuple(record.ByteSize() for record in decoded.records)


def log_layout_problem(cfg: WriterConfig, log: Iterable[LoggedEntry], *, switch_known: bool = False) -> str | None:
    """The first entry of a durable log that a writer with ``cfg`` could not have written, named by
    its position; None when every one fits.  With ``switch_known`` (the log was written under one
    setting of BW-22's switch, ``cfg.enabled``) every entry is held to :func:`entry_layout_problem`;
    otherwise only batched entries, to :func:`batch_layout_problem`, since whether batching was on
    when a plain entry was written is not in the log.  Deleted entries and indexes keep the layout
    they were written with."""
    for entry in log:
        layout = _layout(entry.data, cfg)
        if layout is None or not layout[1]:
            continue
        batched, sizes = layout
        if switch_known:
            problem = entry_layout_problem(cfg, batched, sizes)
        else:
            problem = batch_layout_problem(cfg, sizes) if batched else None
        if problem is not None:
            return f"entry {entry.position}: {problem}"
    return None


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


def writes_fit_thresholds(before: WriterState, command: Any, result: Any, after: WriterState) -> bool:
    """Every entry a step writes has the layout its writer's thresholds allow
    (:func:`entry_layout_problem`: BW-5, BW-8, BW-9, BW-10)."""
    for effect in result.effects:
        if isinstance(effect, AsyncAddEntry):
            layout = _layout(effect.data, before.config)
            if layout is None or entry_layout_problem(before.config, *layout) is not None:
                return False
    return True


STEP_PROPERTIES: tuple[StepProperty[WriterState], ...] = (
    StepProperty("batch_positions_distinct", ("BW-15",), batch_positions_distinct),
    StepProperty("successes_in_request_order", ("BW-17",), successes_in_request_order),
    StepProperty("one_callback_per_request", ("BW-17",), one_callback_per_request),
    StepProperty("writes_preserve_arrival_order", ("BW-6", "BW-8"), writes_preserve_arrival_order),
    StepProperty("writes_fit_thresholds", ("BW-5", "BW-8", "BW-9", "BW-10"), writes_fit_thresholds),
)
