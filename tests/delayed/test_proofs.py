"""The Z3 encodings agree with reference.delayed, every obligation is proved, every mutant refuted."""

from __future__ import annotations

import functools
from typing import Any

import hypothesis.strategies as st
import pytest
import z3
from hypothesis import given

from proofs import delayed as proof
from proofs.framework import RLIMIT, Verdict, prove_machine
from reference import delayed as d
from spec.result import Ok
from tests.delayed.helpers import bucket, config


def _value(expr: Any) -> Any:
    v = z3.simplify(expr)
    if z3.is_bool(v):
        return z3.is_true(v)
    return v.as_long()


def _range_state(state: d.BucketTracker) -> proof.RangeState:
    buckets = list(state.buckets)
    live = [z3.BoolVal(i < len(buckets)) for i in range(proof.SLOTS)]
    start = [z3.IntVal(buckets[i].start_ledger_id if i < len(buckets) else 0) for i in range(proof.SLOTS)]
    end = [z3.IntVal(buckets[i].end_ledger_id if i < len(buckets) else 0) for i in range(proof.SLOTS)]
    m = state.mutable
    return proof.RangeState(
        tuple(live),
        tuple(start),
        tuple(end),
        z3.IntVal(m.start_ledger_id),
        z3.IntVal(m.end_ledger_id),
        z3.IntVal(m.size),
    )


def _ranges_of(s: proof.RangeState) -> tuple[set[tuple[int, int]], tuple[int, int, int]]:
    ranges = {(_value(s.start[i]), _value(s.end[i])) for i in range(proof.SLOTS) if _value(s.live[i])}
    return ranges, (_value(s.ms), _value(s.me), _value(s.size))


@given(
    min_index=st.integers(1, 3),
    ledgers=st.lists(st.integers(0, 12), max_size=12),
    ledger=st.integers(0, 14),
)
def test_range_encoding_agrees_with_add(min_index: int, ledgers: list[int], ledger: int) -> None:
    """DD-5, DD-6, DD-7, DD-8: the add transition (seal + placement) on concrete states."""
    state = bucket(delayedDeliveryMinIndexCountPerBucket=min_index)
    for i, lg in enumerate(ledgers):
        candidate, _ = d.step(state, d.AddMessage(lg, i, 10**9, 0))
        assert isinstance(candidate, d.BucketTracker)
        if len(candidate.buckets) < proof.SLOTS:
            state = candidate
    encoded = proof.range_add(_range_state(state), z3.IntVal(ledger), z3.IntVal(min_index))
    after, result = d.step(state, d.AddMessage(ledger, 10_000, 10**9, 0))
    assert isinstance(after, d.BucketTracker) and result == Ok(True, result.effects)
    m = after.mutable
    assert _ranges_of(encoded) == (set(d.bucket_ranges(after)), (m.start_ledger_id, m.end_ledger_id, m.size))
    assert _value(proof.ranges_inv(encoded))


POSITIONS = [(1, 0), (1, 1), (2, 0), (2, 1)]


@given(
    adds=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40)), max_size=10),
    p=st.integers(0, 3),
    deliver_at=st.integers(0, 40),
    now=st.integers(0, 20),
)
def test_count_encoding_agrees_with_add(adds: list[tuple[int, int]], p: int, deliver_at: int, now: int) -> None:
    """DD-2, DD-3, DD-4: bits and count after an add, due or not, duplicate or not."""
    state = bucket(delayedDeliveryTickTimeMillis=1, delayedDeliveryMinIndexCountPerBucket=2)
    clock = 0
    for q, t in adds:
        state, _ = d.step(state, d.AddMessage(*POSITIONS[q], t, clock))
    assert isinstance(state, d.BucketTracker)
    encoded = proof.CountState(
        tuple(z3.BoolVal(d.contains_message(state, *pos)) for pos in POSITIONS), z3.IntVal(state.count)
    )
    due = deliver_at <= state.params.cutoff(now)
    nxt = proof.count_add(encoded, p, z3.BoolVal(due))
    after, _ = d.step(state, d.AddMessage(*POSITIONS[p], deliver_at, now))
    assert [_value(b) for b in nxt.bits] == [d.contains_message(after, *pos) for pos in POSITIONS]
    assert _value(nxt.count) == after.count


@given(
    adds=st.lists(st.tuples(st.integers(0, 3), st.integers(5, 40)), min_size=1, max_size=10),
    now=st.integers(0, 45),
)
def test_count_encoding_agrees_with_pop(adds: list[tuple[int, int]], now: int) -> None:
    """DD-15: get_scheduled_messages(1) pops the head; the encoding's pop of that position
    returns it iff the reference does, with the same bits and count."""
    state = bucket(delayedDeliveryTickTimeMillis=1, isDelayedDeliveryDeliverAtTimeStrict=True)
    for q, t in adds:
        state, _ = d.step(state, d.AddMessage(*POSITIONS[q], t, 0))
    assert isinstance(state, d.BucketTracker)
    encoded = proof.CountState(
        tuple(z3.BoolVal(d.contains_message(state, *pos)) for pos in POSITIONS), z3.IntVal(state.count)
    )
    after, result = d.step(state, d.GetScheduledMessages(1, now))
    assert isinstance(result, Ok)
    if not result.value:
        return
    (position,) = result.value
    p = POSITIONS.index((position.ledger_id, position.entry_id))
    returned, nxt = proof.count_pop(encoded, p)
    assert _value(returned)
    assert [_value(b) for b in nxt.bits] == [d.contains_message(after, *pos) for pos in POSITIONS]
    assert _value(nxt.count) == after.count


@given(
    gaps=st.lists(st.integers(0, 7), min_size=proof.STREAM, max_size=proof.STREAM),
    step_ms=st.integers(0, 12),
    max_indexes=st.sampled_from([-1, 1, 2, 3, 4]),
)
def test_cut_encoding_agrees_with_cut_segments(gaps: list[int], step_ms: int, max_indexes: int) -> None:
    """DD-9: segment numbers of the encoding equal the segments of ``cut_segments``."""
    ts, t = [], 0
    for g in gaps:
        t += g
        ts.append(t)
    params = d.Params(time_step_ms=step_ms, max_indexes_per_segment=max_indexes)
    cut = d.cut_segments([(x, 1, i) for i, x in enumerate(ts)], params)
    expected = [k for k, seg in enumerate(cut) for _ in seg]
    seg, _ = proof.cut_assign([z3.IntVal(x) for x in ts], z3.IntVal(step_ms), z3.IntVal(max_indexes))
    assert [_value(s) for s in seg] == expected


@functools.cache
def _rows() -> tuple[Any, ...]:
    return tuple(prove_machine("delayed"))


@pytest.mark.parametrize("name", [ob.name for ob in proof.OBLIGATIONS])
def test_every_obligation_is_proved(name: str) -> None:
    (row,) = [r for r in _rows() if r.name == name]
    assert row.verdict is Verdict.PROVED, row


@pytest.mark.parametrize("name", sorted(proof.MUTANTS))
def test_mutants_are_refuted(name: str) -> None:
    outcome = proof.MUTANTS[name](RLIMIT)
    assert outcome.verdict is Verdict.COUNTEREXAMPLE and outcome.counterexample


# ---- places: one_bitmap_per_bit / every_tracked_reachable (DD-5, DD-10, DD-11) ----------------------

PLACE_POSITIONS = [(1, 0), (1, 1), (2, 0), (3, 0)]
assert len(PLACE_POSITIONS) == proof.PLACE_POSITIONS


def _positions_of(runs: Any) -> set[tuple[int, int]]:
    return {(ledger, entry) for run in runs for _, ledger, entry in run.indexes()}


def _place_state(state: d.BucketTracker, slots: list[int]) -> proof.PlaceState:
    """The concrete tracker as a ``PlaceState``; bucket slot k holds the bucket starting at
    ``slots[k]`` (so pre- and post-states of a step line up), a new bucket the first free slot."""
    no, yes = z3.BoolVal(False), z3.BoolVal(True)
    slots = list(slots)
    for bucket_ in state.buckets:
        if bucket_.start_ledger_id not in slots:
            slots.append(bucket_.start_ledger_id)
    assert len(slots) <= proof.PLACE_BUCKETS
    by_start = {b.start_ledger_id: b for b in state.buckets}
    m = state.mutable
    mq, sq = _positions_of(m.runs), _positions_of(state.shared)
    live, stored, lost, cur, last, cov, bbit, seg = [], [], [], [], [], [], [], []
    for k in range(proof.PLACE_BUCKETS):
        b: d.ImmutableBucket | None = by_start.get(slots[k]) if k < len(slots) else None
        segments: tuple[d.Run, ...] = ()
        if b is not None and b.pending_create:
            segments = state.pending_creates[b.pending_create].segments
        elif b is not None and b.bucket_id >= 0 and b.bucket_id in state.storage.snapshots:
            segments = state.storage.snapshots[b.bucket_id].segments
        assert b is None or b.last_segment <= proof.PLACE_SEGMENTS
        live.append(z3.BoolVal(b is not None))
        stored.append(z3.BoolVal(b is not None and (bool(b.pending_create) or bool(segments))))
        lost.append(z3.BoolVal(b is not None and b.bucket_id >= 0 and b.bucket_id not in state.storage.snapshots))
        cur.append(z3.IntVal(b.current_segment if b is not None else 0))
        last.append(z3.IntVal(b.last_segment if b is not None else 0))
        cov.append(
            tuple(z3.BoolVal(b is not None and b.start_ledger_id <= q[0] <= b.end_ledger_id) for q in PLACE_POSITIONS)
        )
        bbit.append(
            tuple(z3.BoolVal(b is not None and q[0] in b.bitmaps and q[1] in b.bitmaps[q[0]]) for q in PLACE_POSITIONS)
        )
        seg.append(
            tuple(
                tuple(z3.BoolVal(i < len(segments) and q in _positions_of((segments[i],))) for q in PLACE_POSITIONS)
                for i in range(proof.PLACE_SEGMENTS)
            )
        )
    return proof.PlaceState(
        mbit=tuple(z3.BoolVal(q[0] in m.bitmaps and q[1] in m.bitmaps[q[0]]) for q in PLACE_POSITIONS),
        mq=tuple(z3.BoolVal(q in mq) for q in PLACE_POSITIONS),
        sq=tuple(z3.BoolVal(q in sq) for q in PLACE_POSITIONS),
        mcov=tuple(
            yes if m.start_ledger_id != -1 and m.start_ledger_id <= q[0] <= m.end_ledger_id else no
            for q in PLACE_POSITIONS
        ),
        live=tuple(live),
        stored=tuple(stored),
        lost=tuple(lost),
        cur=tuple(cur),
        last=tuple(last),
        cov=tuple(cov),
        bbit=tuple(bbit),
        seg=tuple(seg),
    )


def _within_bound(state: Any) -> bool:
    return (
        isinstance(state, d.BucketTracker)
        and len(state.buckets) <= proof.PLACE_BUCKETS
        and all(b.last_segment <= proof.PLACE_SEGMENTS for b in state.buckets)
    )


_PLACE_KINDS = (
    ["add"] * 4
    + ["get"] * 2
    + ["advance"] * 2
    + ["fail", "lose", "complete", "complete", "mark_delete"]
    + ["restart", "clear"]
)

_place_commands = st.sampled_from(_PLACE_KINDS).flatmap(
    lambda kind: st.tuples(
        st.just(kind),
        {
            "add": st.integers(0, 3),
            "get": st.sampled_from([1, 2, 100]),
            "advance": st.integers(0, 30),
            "fail": st.sampled_from(["create", "load", "delete", "metadata"]),
            "lose": st.integers(1, 4),
            "complete": st.booleans(),
            "mark_delete": st.integers(0, 4),
            "restart": st.none(),
            "clear": st.none(),
        }[kind],
    )
)


@st.composite
def reachable_runs(
    draw: Any, *, merges: bool = True, gets: bool = True, faults: bool = True
) -> tuple[d.BucketTracker, list[int], int, set[int]]:
    """A bucket tracker reached by random commands over ``PLACE_POSITIONS`` (each message has one
    deliver-at, the clock only moves forward, a message is re-added only by the dispatcher's
    replay after a restart or clear), kept within the places bound.  ``gets`` false: no delivery
    (so the caller's deliveries load segments); ``faults`` false: no injected storage failure
    and synchronous snapshot creation (so nothing stops a load)."""
    state = d.initial(
        config(
            delayedDeliveryTickTimeMillis=1,
            isDelayedDeliveryDeliverAtTimeStrict=draw(st.booleans()),
            delayedDeliveryMinIndexCountPerBucket=draw(st.sampled_from([1, 2])),
            delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=draw(st.sampled_from([0, 0, 1])),
            delayedDeliveryMaxIndexesPerBucketSnapshotSegment=draw(st.sampled_from([1, 2, -1])),
            delayedDeliveryMaxNumBuckets=draw(st.sampled_from([-1, 1, 2])) if merges else -1,
        ),
        async_create=draw(st.booleans()) if faults else False,
    )
    deliver_at: list[int] = [-1] * len(PLACE_POSITIONS)
    now, added = 0, set()
    # Publish first (in ledger order or not), then anything.
    script: list[tuple[str, Any]] = [("fail", "create")] if faults and draw(st.booleans()) else []
    order = list(range(len(PLACE_POSITIONS))) if draw(st.booleans()) else draw(st.permutations(range(4)))
    for q in order[: draw(st.integers(2, 4))]:
        script += [("advance", draw(st.integers(0, 3))), ("add", q)]
    script += draw(st.lists(_place_commands, max_size=12))
    for kind, arg in script:
        command: Any
        if kind == "add":
            if arg in added:
                continue
            added.add(arg)
            if deliver_at[arg] < 0:  # a message's deliver-at is fixed when it is published
                deliver_at[arg] = now + draw(st.integers(1, 40))
            ledger, entry = PLACE_POSITIONS[arg]
            command = d.AddMessage(ledger, entry, deliver_at[arg], now)
        elif kind == "advance":
            now += arg
            continue
        elif kind == "get":
            if not gets:
                continue
            command = d.GetScheduledMessages(arg, now)
        elif kind == "mark_delete":
            command = d.MarkDelete(arg)
        elif kind == "fail":
            if not faults:
                continue
            command = d.InjectStorageFailure(arg, 4)
        elif kind == "lose":
            command = d.LoseBucketSnapshot(arg)
        elif kind == "complete":
            if not isinstance(state, d.BucketTracker) or not state.pending_creates:
                continue
            command = d.CompleteBucketSnapshot(min(state.pending_creates), arg)
        elif kind == "restart":
            command, added = d.Restart(now), set()
        else:
            command, added = d.Clear(), set()
        after, _ = d.step(state, command)
        if _within_bound(after):
            state = after
    assert isinstance(state, d.BucketTracker)
    return state, deliver_at, now, added


def reachable_trackers(*, merges: bool = True) -> st.SearchStrategy[d.BucketTracker]:
    return reachable_runs(merges=merges).map(lambda run: run[0])


def _perturb(state: d.BucketTracker, how: str) -> d.BucketTracker:
    """Break a reachable state so the predicates can disagree (their agreement is then tested)."""
    ev = d._evolve
    if how == "drop_shared":
        return ev(state, shared=())
    if how == "drop_mutable_queue":
        return ev(state, mutable=ev(state.mutable, runs=()))
    owners = [b for b in state.buckets if b.count]
    if how == "bucket_bits_into_mutable" and owners:
        bits = d._union((state.mutable.bitmaps, owners[0].bitmaps))
        return ev(state, mutable=ev(state.mutable, bitmaps=bits))
    if how == "skip_unloaded" and state.buckets:
        return ev(state, buckets=tuple(ev(b, current_segment=b.last_segment) for b in state.buckets))
    if how == "lose_snapshots":
        return ev(state, storage=ev(state.storage, snapshots=type(state.storage.snapshots)()))
    return state


PERTURBATIONS = (
    "none",
    "drop_shared",
    "drop_mutable_queue",
    "bucket_bits_into_mutable",
    "skip_unloaded",
    "lose_snapshots",
)


@given(state=reachable_trackers())
def test_place_predicates_agree_with_invariants(state: d.BucketTracker) -> None:
    """DD-5, DD-10, DD-11: the Z3 ``one_bitmap_per_bit`` and ``every_tracked_reachable`` equal the
    Python invariants (the source of truth) on reachable states and on broken variants of them,
    and every reachable state has each tracked message in exactly one place."""
    from invariants import delayed as inv

    for how in PERTURBATIONS:
        s = _perturb(state, how)
        encoded = _place_state(s, [b.start_ledger_id for b in s.buckets])
        assert _value(proof.one_bitmap_per_bit(encoded)) == inv._one_bitmap_per_bit(s), how
        assert _value(proof.every_tracked_reachable(encoded)) == inv._every_tracked_reachable(s), how
        if how == "none":
            assert _value(proof.exactly_one_place(encoded))


def _in_relation(pre_post: tuple[Any, proof.PlaceState], after: proof.PlaceState) -> bool:
    """Is the concrete post-state one of the encoding's successors (choices left free)?"""
    guard, post = pre_post
    solver = z3.Solver()
    solver.add(guard, post.equals(after))
    return bool(solver.check() == z3.sat)


@given(
    run=reachable_runs(merges=False),
    order=st.permutations(range(len(PLACE_POSITIONS))),
    gaps=st.lists(st.integers(0, 15), min_size=len(PLACE_POSITIONS), max_size=len(PLACE_POSITIONS)),
)
def test_place_add_agrees_with_step(
    run: tuple[d.BucketTracker, list[int], int, set[int]], order: list[int], gaps: list[int]
) -> None:
    """DD-2, DD-3, DD-6, DD-7, DD-8, DD-9, DD-10, DD-14: each reference add (seal and placement)
    of a message not yet added in this life of the tracker is one of the encoding's successors."""
    state, deliver_at, now, added = run
    for p, gap in zip(order, gaps, strict=True):
        now += gap
        if p in added:
            continue
        added.add(p)
        at = deliver_at[p] if deliver_at[p] >= 0 else now + 1 + 7 * p
        after, _ = d.step(state, d.AddMessage(*PLACE_POSITIONS[p], at, now))
        if not _within_bound(after):
            return
        assert isinstance(after, d.BucketTracker)
        slots = [b.start_ledger_id for b in state.buckets]
        assert _in_relation(proof.places_add(_place_state(state, slots), p), _place_state(after, slots)), p
        assert _value(proof.exactly_one_place(_place_state(after, slots)))
        state = after


def _pop_turns(state: d.BucketTracker, command: d.GetScheduledMessages) -> tuple[list[Any], d.BucketTracker]:
    """``get_scheduled_messages`` turn by turn, through the reference's own helpers."""
    cutoff = state.params.cutoff(command.now_ms)
    after = d.move_due(state, cutoff)
    turns: list[Any] = [("move_due", 0, state, after)]
    state, n = after, command.max_messages
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
            after, progressed, _ = d.load_next(state, at)
            if not progressed:
                break
            kind = "load" if len(after.buckets) == len(state.buckets) else "delete"
            turns.append((kind, state.buckets[at].start_ledger_id, state, after))
            state = after
            continue
        after, tracked_here = d.drop_bit(d.pop_shared(state), ledger, entry)
        turns.append(("pop", PLACE_POSITIONS.index((ledger, entry)), state, after))
        state = after
        if below_mark or not tracked_here:
            continue
        n -= 1
    return turns, state


@given(
    run=reachable_runs(gets=False, faults=False),
    max_messages=st.sampled_from([1, 2, 100]),
    gaps=st.lists(st.integers(0, 30), min_size=1, max_size=4),
)
def test_place_pop_turns_agree_with_step(
    run: tuple[d.BucketTracker, list[int], int, set[int]], max_messages: int, gaps: list[int]
) -> None:
    """DD-10, DD-12, DD-15, DD-19, DD-22: each turn of the reference's get_scheduled_messages (move
    due, load the next segment, delete a finished bucket, pop) is one of the encoding's successors,
    and the turns end where ``step`` ends."""
    state, _, now, _ = run
    for gap in gaps:
        now += gap
        command = d.GetScheduledMessages(max_messages, now)
        stepped, _ = d.step(state, command)
        assert isinstance(stepped, d.BucketTracker)
        turns, final = _pop_turns(state, command)
        assert d._evolve(final, timer=stepped.timer) == stepped
        slots = [b.start_ledger_id for b in state.buckets]
        for kind, arg, before, after in turns:
            index = slots.index(arg) if kind in ("load", "delete") else arg
            encoded = proof.places_pop_turn(_place_state(before, slots), kind, index)
            assert _in_relation(encoded, _place_state(after, slots)), (kind, arg)
        state = stepped
