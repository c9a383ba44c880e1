"""A bucket tracker's get_scheduled_messages gathers its pops (``_Popping``) and makes them to the
state at once; this checks that against popping one index at a time with the tracker's own
one-at-a-time helpers (``pop_shared``, ``drop_bit``), storage faults included: the same state
(hash and all) and the same messages, whatever the faults made of the buckets (memory-mode
buckets that leave when their last bit does, failed loads, lost snapshots)."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

from reference import delayed as d
from spec.result import Ok
from tests.delayed.helpers import config
from tests.delayed.test_proofs import reachable_runs


def _one_at_a_time(
    state: d.BucketTracker, command: d.GetScheduledMessages
) -> tuple[d.BucketTracker, set[tuple[int, int]]]:
    """DD-10, DD-12, DD-15, DD-16, DD-22 as the reference states them, one pop per turn."""
    cutoff = state.params.cutoff(command.now_ms)
    state, n, out = d.move_due(state, cutoff), command.max_messages, set()
    while n > 0 and state.shared:
        head = state.shared[0].head()
        ts, ledger, entry = d.unpack(head)
        below_mark = 0 <= ledger < state.mark_delete_ledger
        if ts > cutoff and not below_mark:
            break
        at = d.boundary_owner(state, head)
        if at is not None and state.buckets[at].pending_create:
            break
        if at is not None:
            state, progressed, _ = d.load_next(state, at)  # a failed load's state is kept (DD-16)
            if not progressed:
                break
            continue
        state, tracked = d.drop_bit(d.pop_shared(state), ledger, entry)
        if below_mark or not tracked:
            continue
        out.add((ledger, entry))
        n -= 1
    return state, out


@given(
    run=reachable_runs(gets=True, faults=True),
    max_messages=st.sampled_from([1, 2, 100]),
    gaps=st.lists(st.integers(0, 30), min_size=1, max_size=4),
)
def test_gathered_pops_make_the_state_one_pop_at_a_time_makes(
    run: tuple[d.BucketTracker, list[int], int, set[int]], max_messages: int, gaps: list[int]
) -> None:
    state, _, now, _ = run
    for gap in gaps:
        now += gap
        command = d.GetScheduledMessages(max_messages, now)
        stepped, result = d.step(state, command)
        assert isinstance(stepped, d.BucketTracker) and isinstance(result, Ok)
        popped, delivered = _one_at_a_time(state, command)
        popped = d._evolve(popped, timer=stepped.timer)
        assert popped == stepped and hash(popped) == hash(stepped)
        assert [(p.ledger_id, p.entry_id) for p in result.value] == sorted(delivered)
        state = stepped


@st.composite
def loaded_trackers(draw: st.DrawFn) -> tuple[d.BucketTracker, int]:
    """A bucket tracker holding tens of messages over a few ledgers, in buckets of a few segments
    of a few indexes (so shared runs hold many indexes and gets pop part of them), through storage
    faults, lost snapshots, trims and deliveries."""
    state = d.initial(
        config(
            delayedDeliveryTickTimeMillis=1,
            delayedDeliveryMinIndexCountPerBucket=draw(st.sampled_from([3, 5, 8])),
            delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=0,
            delayedDeliveryMaxIndexesPerBucketSnapshotSegment=draw(st.sampled_from([2, 3, 5, -1])),
            delayedDeliveryMaxNumBuckets=draw(st.sampled_from([-1, 2, 3])),
        )
    )
    assert isinstance(state, d.BucketTracker)
    now = 0
    for ledger in range(1, draw(st.integers(2, 6)) + 1):
        for entry in range(draw(st.integers(1, 12))):
            command: object = d.AddMessage(ledger, entry, now + draw(st.integers(1, 60)), now)
            state, _ = d.step(state, command)
            now += draw(st.integers(0, 2))
        for command in draw(
            st.lists(
                st.one_of(
                    st.builds(d.InjectStorageFailure, st.sampled_from(["create", "load", "delete"]), st.just(4)),
                    st.builds(d.LoseBucketSnapshot, st.integers(1, 4)),
                    st.builds(d.MarkDelete, st.integers(0, 3)),
                    st.builds(d.GetScheduledMessages, st.integers(1, 5), st.just(now)),
                ),
                max_size=2,
            )
        ):
            state, _ = d.step(state, command)
    assert isinstance(state, d.BucketTracker)
    return state, now


@given(
    loaded=loaded_trackers(), gets=st.lists(st.tuples(st.integers(0, 20), st.integers(1, 7)), min_size=1, max_size=6)
)
def test_gathered_pops_agree_on_long_runs(loaded: tuple[d.BucketTracker, int], gets: list[tuple[int, int]]) -> None:
    state, now = loaded
    for gap, max_messages in gets:
        now += gap
        command = d.GetScheduledMessages(max_messages, now)
        stepped, result = d.step(state, command)
        assert isinstance(stepped, d.BucketTracker) and isinstance(result, Ok)
        popped, delivered = _one_at_a_time(state, command)
        popped = d._evolve(popped, timer=stepped.timer)
        assert popped == stepped and hash(popped) == hash(stepped)
        assert [(p.ledger_id, p.entry_id) for p in result.value] == sorted(delivered)
        state = stepped
