"""The packed runs under the delayed trackers: a merge keeps exactly the records not yet consumed.

A run consumed from the front (``offset``) and a sealed segment's 12-byte relative records must
merge like any other run, on both merge paths (a Python sort of keys for small merges, a numpy
sort past ``_ARRAY_MERGE`` records)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reference.delayed_common import NO_TIMESTAMP, AddMessage, GetScheduledMessages, Params
from reference.delayed_memory import InMemoryTracker
from reference.delayed_memory import next_delivery_time as memory_next_delivery_time
from reference.delayed_memory import step as memory_step
from reference.delayed_runs import Run, compact_run, lsm_min, merge_runs, pack
from spec.result import Ok

INDEXES = st.tuples(st.integers(0, 2**40), st.integers(0, 2**20), st.integers(0, 2**20))


@st.composite
def runs(draw: st.DrawFn) -> Run:
    indexes = sorted(draw(st.lists(INDEXES, min_size=1, max_size=300)))
    run = compact_run(indexes) if draw(st.booleans()) else Run(b"".join(pack(i) for i in indexes))
    consumed = draw(st.integers(0, len(run)))
    return Run(run.data, run.width, run.base_ts, run.base_ledger, consumed)


@given(st.lists(runs(), min_size=1, max_size=4))
def test_a_merge_holds_the_records_not_consumed_in_order(parts: list[Run]) -> None:
    expected = sorted(key for run in parts for key in run.key_list())
    merged = merge_runs(parts)
    assert merged.width == 24 and merged.offset == 0
    assert merged.key_list() == expected


def test_both_merge_paths_skip_consumed_records() -> None:
    for size in (10, 600):  # below and above the array merge
        first = Run(b"".join(pack((t, 1, 0)) for t in range(size)), offset=3)
        second = compact_run([(t, 2, 0) for t in range(size)])
        second = Run(second.data, second.width, second.base_ts, second.base_ledger, 5)
        merged = merge_runs([first, second])
        assert len(merged) == 2 * size - 8
        assert merged.key_list() == sorted([*first.key_list(), *second.key_list()])


# --- the smallest key over a set of runs ------------------------------------------------------------
#
# Every add asks the queue for its smallest key (the tracker's next deliver-at, DD-13, and so its
# timer, DD-25), and after a pop it is worked out afresh from the runs by ``lsm_min``: it must name a
# run whose head is the smallest pending key of them all.  A slip there (the best run never updated)
# leaves the tracker with no next deliver-at while it still holds messages, so it arms no timer and a
# due message waits for the consumer's next receive.


@given(st.lists(runs(), max_size=6))
def test_lsm_min_names_a_run_holding_the_smallest_pending_key(parts: list[Run]) -> None:
    live = tuple(run for run in parts if len(run) > 0)  # a tracker keeps no exhausted run
    best = lsm_min(live)
    pending = [key for run in live for key in run.key_list()]
    if not pending:
        assert best is None
    else:
        assert best is not None and live[best].head() == min(pending)


@given(st.lists(st.tuples(st.integers(1, 2_000), st.integers(0, 50)), min_size=1, max_size=60), st.data())
def test_in_memory_tracker_next_delivery_time_is_its_smallest_pending_deliver_at(
    adds: list[tuple[int, int]], data: st.DataObject
) -> None:
    """DD-13 after pops: the in-memory tracker (its queue a set of runs) reports as its next
    deliver-at the smallest deliver-at it still holds, and its timer (DD-25) is armed for it unless
    that is already overdue."""
    state = InMemoryTracker(Params(tick_ms=1, strict=True))
    pending: list[int] = []
    now = 0
    for entry, (delay, ledger) in enumerate(adds):
        state, result = memory_step(state, AddMessage(ledger, entry, now + delay, now))
        assert isinstance(result, Ok) and result.value
        pending.append(now + delay)
        if data.draw(st.booleans()):
            now += data.draw(st.integers(0, 1_000))
            state, result = memory_step(state, GetScheduledMessages(data.draw(st.integers(1, 5)), now))
            assert isinstance(result, Ok)
            # the pops take the smallest keys first, deliver-at first
            pending = sorted(pending)[len(result.value) :]
        expected = min(pending) if pending else NO_TIMESTAMP
        assert memory_next_delivery_time(state) == expected
        if not pending:
            assert state.timer.target is None
        elif expected >= now:  # an overdue one the dispatcher is already reading (or its timer stays)
            assert state.timer.target == expected
