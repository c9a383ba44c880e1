"""The Z3 encoding agrees with the reference, every obligation is proved, and mutants are refuted."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import immutables
import pytest
import z3
from hypothesis import given
from hypothesis import strategies as st

from invariants.pending_ack import INVARIANTS as PY_INVARIANTS
from proofs import pending_ack as proof
from proofs.framework import RLIMIT, Verdict
from reference.pending_ack import (
    AbortTxn,
    AckBits,
    AckedPosition,
    AppendPendingAckRecord,
    CommitTxn,
    CumulativeAck,
    CumulativeSlot,
    CursorView,
    HandleState,
    IndividualAck,
    NormalAck,
    PendingAckState,
    initial,
    replay_record,
    step,
)
from spec.config import Config
from spec.result import Ok
from spec.types import AckType, Position, TxnID

# Entry sizes inside the proofs' bound: a plain entry, a small batch and a full 64-message word.
SIZES = (1, 4, 64)[: proof.ENTRIES]
FULL = tuple(z3.BitVecVal((1 << n) - 1, 64) for n in SIZES)


def _pos(e: int) -> Position:
    return Position(0, e)


def _txn(t: int) -> TxnID:
    return TxnID(1, t)


@st.composite
def _acked(draw: st.DrawFn, entry: int) -> AckedPosition:
    size = SIZES[entry]
    if size == 1 or draw(st.booleans()):
        return AckedPosition(_pos(entry), None, size)
    indexes = draw(st.sets(st.integers(0, size - 1), min_size=1, max_size=min(size, 6)))
    return AckedPosition.of_indexes(_pos(entry), size, indexes)


@st.composite
def _positions(draw: st.DrawFn, min_size: int = 0) -> tuple[AckedPosition, ...]:
    entries = draw(st.lists(st.integers(0, proof.ENTRIES - 1), unique=True, min_size=min_size, max_size=proof.ENTRIES))
    return tuple(draw(_acked(e)) for e in entries)


_txns = st.integers(0, proof.TXNS - 1).map(_txn)
_whole_entry = st.integers(0, proof.ENTRIES - 1).map(lambda e: (AckedPosition(_pos(e), None, SIZES[e]),))
bounded_commands = st.one_of(
    st.builds(IndividualAck, _txns, _positions()),
    st.builds(CumulativeAck, _txns, _whole_entry),
    st.builds(NormalAck, st.just(AckType.INDIVIDUAL), _positions(min_size=1)),
    st.builds(NormalAck, st.just(AckType.CUMULATIVE), _whole_entry),
    st.builds(CommitTxn, _txns),
    st.builds(AbortTxn, _txns),
)


def _ready() -> PendingAckState:
    return replace(initial(Config()), handle_state=HandleState.READY)


@st.composite
def reachable(draw: st.DrawFn) -> PendingAckState:
    state = _ready()
    for command in draw(st.lists(bounded_commands, max_size=12)):
        state, _ = step(state, command)
    return state


def _true(expr: Any) -> bool:
    return bool(z3.is_true(z3.simplify(expr)))


def _assert_same(actual: proof.ZState, expected: proof.ZState) -> None:
    """Field by field, as concrete Z3 values (the slot's entry only when there is a slot)."""
    for f in fields(proof.ZState):
        if f.name == "ce":
            continue
        a, b = getattr(actual, f.name), getattr(expected, f.name)
        flat_a = _flatten(a)
        flat_b = _flatten(b)
        for x, y in zip(flat_a, flat_b, strict=True):
            assert _true(x == y), f"{f.name}: encoding {z3.simplify(x)} != reference {y}"
    if _true(expected.co >= 0):
        assert _true(actual.ce == expected.ce)


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, tuple):
        return [y for item in x for y in _flatten(item)]
    return [x]


@given(reachable(), bounded_commands)
def test_encoding_agrees_with_step(state: PendingAckState, command: Any) -> None:
    """PA-5 .. PA-13: encode_step computes what reference.pending_ack.step does."""
    after, result = step(state, command)
    ok, post = proof.encode_step(proof.concrete_state(state), proof.concrete_command(command), FULL)
    assert _true(ok) == isinstance(result, Ok)
    _assert_same(post, proof.concrete_state(after))


@given(reachable(), bounded_commands)
def test_replay_encoding_agrees_with_replay_record(state: PendingAckState, command: Any) -> None:
    """PA-18: encode_replay computes what replay_record does with the records the command wrote."""
    _after, result = step(state, command)
    records = [e for e in result.effects if isinstance(e, AppendPendingAckRecord)]
    if not records or isinstance(command, NormalAck):
        return
    replayed = state
    for effect in records:
        replayed = replay_record(replayed, effect.record_id, effect.record)
    encoded = proof.encode_replay(proof.concrete_state(state), proof.concrete_command(command), FULL)
    _assert_same(encoded, proof.concrete_state(replayed))


@st.composite
def arbitrary_states(draw: st.DrawFn) -> PendingAckState:
    """States in the bound that need not be reachable, to compare the invariants' two forms."""
    md = draw(st.integers(-1, proof.ENTRIES - 1))
    idel = frozenset(_pos(e) for e in draw(st.sets(st.integers(0, proof.ENTRIES - 1))))
    batch: immutables.Map[Position, AckBits] = immutables.Map()
    for e in draw(st.sets(st.integers(0, proof.ENTRIES - 1))):
        bits = draw(st.integers(1, (1 << SIZES[e]) - 1))
        batch = batch.set(_pos(e), AckBits(SIZES[e], bits))

    def holding() -> AckBits:
        e_bits = draw(st.one_of(st.none(), st.integers(1, (1 << 64) - 1)))
        return AckBits(64, e_bits)

    txns: immutables.Map[TxnID, immutables.Map[Position, AckBits]] = immutables.Map()
    for t in draw(st.sets(st.integers(0, proof.TXNS - 1))):
        held: immutables.Map[Position, AckBits] = immutables.Map()
        for e in draw(st.sets(st.integers(0, proof.ENTRIES - 1), min_size=1)):
            h = holding()
            held = held.set(
                _pos(e), AckBits(SIZES[e], None if h.acked is None else h.acked & ((1 << SIZES[e]) - 1) or 1)
            )
        txns = txns.set(_txn(t), held)
    comb: immutables.Map[Position, AckBits] = immutables.Map()
    for e in draw(st.sets(st.integers(0, proof.ENTRIES - 1))):
        bits = draw(st.one_of(st.none(), st.integers(1, (1 << SIZES[e]) - 1)))
        comb = comb.set(_pos(e), AckBits(SIZES[e], bits))
    if draw(st.booleans()):
        # Often make the combined map the union, so combined_is_union is not trivially false.
        union: dict[Position, int | None] = {}
        for held in txns.values():
            for p, b in held.items():
                prev = union.get(p, 0)
                union[p] = None if prev is None or b.acked is None else prev | b.acked
        comb = immutables.Map({p: AckBits(SIZES[p.entry_id], v) for p, v in union.items()})
    slot = None
    if draw(st.booleans()):
        slot = CumulativeSlot(_txn(draw(st.integers(0, proof.TXNS - 1))), _pos(draw(st.integers(0, proof.ENTRIES - 1))))
    return replace(
        _ready(),
        cursor=CursorView(Position(0, md), idel, batch),
        individual_ack_of_transaction=txns,
        txn_order=tuple(sorted(txns.keys())),
        individual_ack_positions=comb,
        cumulative_ack=slot,
    )


@given(st.one_of(arbitrary_states(), reachable()))
def test_invariant_encodings_agree_with_the_predicates(state: PendingAckState) -> None:
    """PA-1, PA-2, PA-3, PA-6, PA-7, PA-8, PA-9, PA-11: each Z3 invariant says what its Python twin says."""
    by_name = {inv.name: inv for inv in PY_INVARIANTS}
    encoded = proof.concrete_state(state)
    for name, (rules, encode) in proof.INVARIANTS.items():
        assert rules == by_name[name].rules
        assert _true(encode(encoded, FULL)) == by_name[name].holds(state), name


def test_every_obligation_is_proved() -> None:
    """PA-3, PA-6, PA-9, PA-12, PA-13, PA-18, PA-19 proved in the bound."""
    failed = []
    for ob in proof.OBLIGATIONS:
        outcome = ob.check(RLIMIT)
        if outcome.verdict is not Verdict.PROVED:
            failed.append((ob.name, outcome.verdict, outcome.counterexample or outcome.reason))
    assert failed == []


@pytest.mark.parametrize("mutant", sorted(proof.MUTANTS))
def test_a_broken_rule_is_refuted(mutant: str) -> None:
    """A mutant of PA-6, PA-9 or PA-12 in the encoding yields a counterexample in reference terms."""
    target = proof.MUTANTS[mutant]
    (ob,) = [o for o in proof.obligations(mutant) if o.name == target]
    outcome = ob.check(RLIMIT)
    assert outcome.verdict is Verdict.COUNTEREXAMPLE
    assert outcome.counterexample is not None
    assert "state   = PendingAckState(" in outcome.counterexample
    assert "cursor" in outcome.counterexample
    assert "command = " in outcome.counterexample
