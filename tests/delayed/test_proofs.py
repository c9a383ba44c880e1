"""The Z3 encodings agree with reference.delayed, every obligation is proved, every mutant refuted."""

from __future__ import annotations

import functools
from typing import Any

import hypothesis.strategies as st
import pytest
import z3
from hypothesis import given

from proofs import delayed as proof
from proofs.framework import Verdict, prove_machine
from reference import delayed as d
from spec.result import Ok

from .helpers import bucket


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
        tuple(live), tuple(start), tuple(end), z3.IntVal(m.start_ledger_id), z3.IntVal(m.end_ledger_id),
        z3.IntVal(m.size),
    )


def _ranges_of(s: proof.RangeState) -> tuple[set[tuple[int, int]], tuple[int, int, int]]:
    ranges = {
        (_value(s.start[i]), _value(s.end[i])) for i in range(proof.SLOTS) if _value(s.live[i])
    }
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
    return tuple(prove_machine("delayed", timeout_ms=30_000))


@pytest.mark.parametrize("name", [ob.name for ob in proof.OBLIGATIONS])
def test_every_obligation_is_proved(name: str) -> None:
    (row,) = [r for r in _rows() if r.name == name]
    assert row.verdict is Verdict.PROVED, row


@pytest.mark.parametrize("name", sorted(proof.MUTANTS))
def test_mutants_are_refuted(name: str) -> None:
    outcome = proof.MUTANTS[name](30_000)
    assert outcome.verdict is Verdict.COUNTEREXAMPLE and outcome.counterexample
