"""The Z3 encoding of the transaction buffer agrees with ``reference.buffer.step``, every obligation
is proved, a broken rule is caught, and the strict form of atomic visibility is refuted (TB-19)."""

from __future__ import annotations

from typing import Any

import pytest
import z3
from hypothesis import assume, event, given
from hypothesis import strategies as st

from invariants.base import violated
from invariants.buffer import INVARIANTS
from proofs import buffer as pb
from proofs.framework import RLIMIT, Verdict, prove_inductive, prove_valid
from reference import buffer as tb
from spec.config import Config
from spec.result import Err
from spec.types import TxnID

TXNS = st.builds(TxnID, st.integers(0, 1), st.integers(0, 3))
SETUP = st.one_of(
    st.builds(tb.AppendBufferToTxn, TXNS),
    st.just(tb.PublishMessage()),
    st.builds(tb.CommitTxn, TXNS, st.integers(-1, 3)),
    st.builds(tb.AbortTxn, TXNS, st.integers(-1, 3)),
    st.just(tb.RollOverLedger()),
    st.just(tb.CompleteFirstSnapshot()),
    st.just(tb.TakeSnapshot()),
    st.just("delete_oldest"),
)
ENCODED = st.one_of(
    st.builds(tb.AppendBufferToTxn, TXNS),
    st.just(tb.PublishMessage()),
    st.builds(tb.CommitTxn, TXNS, st.integers(-1, 3)),
    st.builds(tb.AbortTxn, TXNS, st.integers(-1, 3)),
    st.just(tb.RollOverLedger()),
    st.just(tb.TakeSnapshot()),
    st.just("delete_oldest"),
)
CONFIGS = st.sampled_from([Config(), Config().with_overrides({"transactionBufferSnapshotMaxTransactionCount": 1})])
NAMES = {
    tb.AppendBufferToTxn: "append_buffer_to_txn",
    tb.PublishMessage: "publish_message",
    tb.CommitTxn: "commit_txn",
    tb.AbortTxn: "abort_txn",
    tb.RollOverLedger: "roll_over_ledger",
    tb.TakeSnapshot: "take_snapshot",
    tb.DeleteLedger: "delete_ledger",
}


def _concrete(state: tb.BufferState, cmd: Any) -> Any:
    return tb.DeleteLedger(state.ledgers[0].ledger_id) if cmd == "delete_oldest" else cmd


def _txns(*states: tb.BufferState, extra: TxnID | None = None) -> set[TxnID]:
    out: set[TxnID] = set()
    for s in states:
        out |= {e.txn_id for e in s.entries if e.txn_id is not None}
        out |= set(s.ongoing) | set(s.aborted)
    if extra is not None:
        out.add(extra)
    return out


@given(config=CONFIGS, setup=st.lists(SETUP, max_size=14), command=ENCODED)
def test_encoding_agrees_with_reference_step(config: Config, setup: list[Any], command: Any) -> None:
    state = tb.initial(config)
    base = 0
    for raw in setup:
        cmd = _concrete(state, raw)
        before = len(state.entries)
        state, result = tb.step(state, cmd)
        if isinstance(cmd, tb.DeleteLedger) and not isinstance(result, Err):
            base += before - len(state.entries)
    assume(state.status in (tb.BufferStatus.READY, tb.BufferStatus.NO_SNAPSHOT))
    cmd = _concrete(state, command)
    if isinstance(cmd, tb.AppendBufferToTxn):
        assume(state.status is tb.BufferStatus.READY)  # NoSnapshot parks the append: not encoded
    after, result = tb.step(state, cmd)
    event(f"{type(cmd).__name__} in {state.status.value}")
    if isinstance(cmd, tb.DeleteLedger) and isinstance(result, Err):
        return  # a refused deletion changes nothing (checked by the stateful tests)
    removed = len(state.entries) - len(after.entries) if isinstance(cmd, tb.DeleteLedger) else 0
    pre_a = pb.abstract(state, base)
    post_a = pb.abstract(after, base + removed)
    txn = getattr(cmd, "txn_id", None)
    consts, facts = pb.txn_domain(_txns(state, after, extra=txn) or {TxnID(9, 9)}, closed=False)
    a, b = pb.fresh(""), pb.fresh("'")
    c = pb.Cmd(
        consts[txn] if txn is not None else next(iter(consts.values())),
        z3.IntVal(getattr(cmd, "low_water_mark", -1)),
        z3.IntVal(base + removed),
    )
    span = range(min(pre_a.lo, post_a.lo) - 2, max(pre_a.lac, post_a.lac) + len(consts) + 3)
    with pb.finite_domain(consts.values(), span):
        trans = pb.encode_step(NAMES[type(cmd)], a, b, c)
    pre = pb.abstract_state_constraints(a, pre_a, consts)
    post = pb.abstract_state_constraints(b, post_a, consts)

    # (1) the reference's post-state is one the encoding allows
    solver = z3.Solver()
    solver.set("rlimit", RLIMIT)
    solver.add(*facts, *pre, trans, *post)
    assert solver.check() == z3.sat, f"encoding rejects reference step {cmd} from {pre_a} to {post_a}"

    # (2) the encoding forces the same max_read_position, LAC, ongoing and aborted sets
    determined = [b.mrp == post_a.mrp, b.lac == post_a.lac, b.lo == post_a.lo]
    ongoing = dict(post_a.ongoing)
    aborted = dict(post_a.aborted)
    for t, k in consts.items():
        determined.append(b.ongoing[k] == (t in ongoing))
        determined.append(b.aborted[k] == (t in aborted))
        if t in ongoing:
            determined.append(b.first[k] == ongoing[t])
    solver = z3.Solver()
    solver.set("rlimit", RLIMIT)
    solver.add(*facts, *pre, trans, z3.Not(z3.And(*determined)))
    assert solver.check() == z3.unsat, f"encoding allows another outcome of {cmd} from {pre_a}"


def test_every_obligation_is_proved() -> None:
    rows = [(ob.name, ob.check(RLIMIT)) for ob in pb.OBLIGATIONS]
    failed = [(name, out) for name, out in rows if out.verdict is not Verdict.PROVED]
    assert failed == []
    assert len(rows) >= 70


def _mutant_append(a: pb.Vars, b: pb.Vars, c: pb.Cmd) -> z3.BoolRef:
    """TB-7 broken: max_read_position moves onto the new first message instead of before it."""
    t = c.txn
    p = a.lac + 1
    opens = z3.And(z3.Not(a.ongoing[t]), z3.Not(a.aborted[t]))
    return z3.And(
        a.st == pb.READY,
        b.lac == p,
        b.kind == z3.Store(a.kind, p, pb.DATA),
        b.owner == z3.Store(a.owner, p, t),
        b.ongoing == z3.If(opens, z3.Store(a.ongoing, t, True), a.ongoing),
        b.first == z3.If(opens, z3.Store(a.first, t, p), a.first),
        b.mrp == z3.If(opens, p, a.mrp),
        b.st == a.st,
        b.lo == a.lo,
        b.aborted == a.aborted,
        b.marker == a.marker,
        b.lwm == a.lwm,
        b.has_lwm == a.has_lwm,
        b.has_snap == a.has_snap,
        b.smrp == a.smrp,
    )


def test_mutant_rule_yields_counterexample() -> None:
    """Breaking TB-7 in the encoding is caught, and the counterexample replays in the reference, which
    (implementing TB-7) keeps the invariant where the mutant broke it."""
    a, b, c = pb.fresh(""), pb.fresh("'"), pb.Cmd(z3.Const("mt", pb.Txn), z3.Int("ml"), z3.Int("mn"))
    outcome = prove_inductive(
        init=pb.init(a),
        inv=z3.And(pb.invariant(a), pb.domain(a)),
        trans=_mutant_append(a, b, c),
        inv_next=pb.inv_mrp_before_every_ongoing(b),
        rlimit=RLIMIT,
        describe=pb._describe(a, b, c, "mutant", "append_buffer_to_txn"),
    )
    assert outcome.verdict is Verdict.COUNTEREXAMPLE
    assert outcome.counterexample is not None and "command=AppendBufferToTxn" in outcome.counterexample

    solver = z3.Solver()
    solver.add(pb.invariant(a), pb.domain(a), _mutant_append(a, b, c), z3.Not(pb.inv_mrp_before_every_ongoing(b)))
    solver.add(a.lac - a.lo <= 6)  # a small counterexample, so concretize keeps every entry
    assert solver.check() == z3.sat
    state, command = pb.concretize(solver.model(), a, c, "append_buffer_to_txn")
    assert violated(INVARIANTS, state) == []
    after, result = tb.step(state, command)
    assert result.ok
    assert violated(INVARIANTS, after) == []


def test_strict_atomic_visibility_is_refuted() -> None:
    """TB-19: all-or-nothing visibility of a committed txn does not hold while another txn is open
    (vector edge-partial-visibility-behind-open-txn replays the counterexample's shape)."""
    s = pb.fresh("")
    outcome = prove_valid(
        pb.claim_strict_atomic_visibility(s), rlimit=RLIMIT, assumptions=[pb.invariant(s), pb.domain(s)]
    )
    assert outcome.verdict is Verdict.COUNTEREXAMPLE


def test_partial_visibility_in_the_reference() -> None:
    """The same fact on the reference: T2's first message is visible, its second is not (TB-19)."""
    t1, t2 = TxnID(0, 1), TxnID(0, 2)
    s = tb.initial(Config())
    for cmd in (
        tb.AppendBufferToTxn(t2),
        tb.CompleteFirstSnapshot(),
        tb.AppendBufferToTxn(t1),
        tb.AppendBufferToTxn(t2),
        tb.CommitTxn(t2),
    ):
        s, r = tb.step(s, cmd)
        assert r.ok
    visible = tb.dispatchable(s)
    t2_msgs = [e.position for e in s.entries if e.txn_id == t2 and e.kind is tb.EntryKind.TXN_DATA]
    assert [p in visible for p in t2_msgs] == [True, False]


@pytest.mark.parametrize("n", [3, 8])
def test_trim_loop_bounded(n: int) -> None:
    assert pb._trim_loop_bounded(n).check(RLIMIT).verdict is Verdict.PROVED
