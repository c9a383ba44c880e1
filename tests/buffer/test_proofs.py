"""The Z3 encoding of the transaction buffer agrees with ``reference.buffer.step`` and its ``visible``
with ``reference.buffer.dispatchable`` (TB-16 by default and under the quirk abort-hides-committed),
every obligation is proved, a broken rule is caught, and the strict form of atomic visibility is
refuted (TB-19)."""

from __future__ import annotations

from typing import Any

import pytest
import z3
from hypothesis import assume, event, example, given
from hypothesis import strategies as st

from invariants.base import violated
from invariants.buffer import INVARIANTS, messages_with_next_end
from proofs import buffer as pb
from proofs.framework import RLIMIT, Verdict, prove_inductive, prove_valid
from reference import buffer as tb
from spec.config import QUIRKS, Config
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


def _reach(config: Config, setup: list[Any]) -> tuple[tb.BufferState, int]:
    """The state ``setup`` leads to from a recovered new topic, and how many entries deletions removed
    (the rank of its first stored entry)."""
    state = tb.initial(config)
    base = 0
    for raw in setup:
        cmd = _concrete(state, raw)
        before = len(state.entries)
        state, result = tb.step(state, cmd)
        if isinstance(cmd, tb.DeleteLedger) and not isinstance(result, Err):
            base += before - len(state.entries)
    return state, base


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
    state, base = _reach(config, setup)
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


T0, T1 = TxnID(0, 0), TxnID(0, 1)
# T0 committed, a late copy of its send re-opens it, T1's commit with a low water mark of 0 aborts it
# (TB-8, TB-13): T0's committed message is decided by its commit marker, the late copy by the abort.
# Ready (a first txn message makes the first snapshot, TB-4) with nothing ongoing.
READY_IDLE = [tb.AppendBufferToTxn(T0), tb.CompleteFirstSnapshot(), tb.CommitTxn(T0)]
REOPENED_THEN_LWM_ABORTED = [
    *READY_IDLE,
    tb.AppendBufferToTxn(T0),
    tb.AppendBufferToTxn(T1),
    tb.CommitTxn(T1, 0),
]
ABORT_HIDES_COMMITTED = Config().with_overrides(QUIRKS["abort-hides-committed"])
# ``visible`` reads the state only, so it is checked on the states every quirk reaches (append-after-abort
# stores a late message of an aborted txn after its marker), under the TB-16 the config names.
VISIBILITY_CONFIGS = st.sampled_from(
    [
        Config(),
        ABORT_HIDES_COMMITTED,
        Config().with_overrides(QUIRKS["append-after-abort"]),
        Config().with_overrides({**QUIRKS["append-after-abort"], **QUIRKS["abort-hides-committed"]}),
        Config().with_overrides({"transactionBufferSnapshotMaxTransactionCount": 1}),
    ]
)


def _z3_dispatch(state: tb.BufferState, base: int, abort_hides_committed: bool) -> tuple[set[Any], set[Any]]:
    """The entries ``pb.visible`` holds at and the messages ``pb.message_aborted`` holds at on ``state``,
    each required to be forced by the state (the negation unsatisfiable), not merely allowed."""
    abstract = pb.abstract(state, base)
    consts, facts = pb.txn_domain(_txns(state) or {TxnID(9, 9)}, closed=False)
    s = pb.fresh("")
    solver = z3.Solver()
    solver.set("rlimit", RLIMIT)
    solver.add(*facts, *pb.abstract_state_constraints(s, abstract, consts))
    visible: set[Any] = set()
    aborted: set[Any] = set()
    with pb.finite_domain(consts.values(), range(abstract.lo - 1, abstract.lac + 2)):
        for i, entry in enumerate(state.entries):
            rank = z3.IntVal(base + i)
            claims = [(pb.visible(s, rank, abort_hides_committed=abort_hides_committed), visible)]
            if entry.kind is tb.EntryKind.TXN_DATA:
                claims.append((pb.message_aborted(s, rank, abort_hides_committed=abort_hides_committed), aborted))
            for holds, out in claims:
                if solver.check(z3.Not(holds)) == z3.unsat:
                    out.add(entry.position)
                else:
                    assert solver.check(holds) == z3.unsat, f"{entry} not determined by {abstract}"
    return visible, aborted


# Besides SETUP's single commands, a commit of a txn, a late send that re-opens it (TB-8) and an end of
# another txn raising its coordinator's low water mark to it (TB-13, aborting it when it is the first
# ongoing txn): where the two readings of TB-16 part, in random setups too.
REOPEN = st.builds(
    lambda t, u, end: [tb.CommitTxn(t), tb.AppendBufferToTxn(t), end(TxnID(t.most_sig_bits, u), t.least_sig_bits)],
    TXNS,
    st.integers(0, 3),
    st.sampled_from([tb.CommitTxn, tb.AbortTxn]),
)
VISIBILITY_SETUP = st.lists(st.one_of(SETUP.map(lambda cmd: [cmd]), REOPEN), max_size=10).map(
    lambda blocks: [*READY_IDLE, *(c for block in blocks for c in block)]
)


@given(config=VISIBILITY_CONFIGS, setup=VISIBILITY_SETUP)
@example(config=Config(), setup=REOPENED_THEN_LWM_ABORTED)
@example(config=ABORT_HIDES_COMMITTED, setup=REOPENED_THEN_LWM_ABORTED)
def test_visible_agrees_with_reference_dispatchable(config: Config, setup: list[Any]) -> None:
    """TB-15, TB-16: on every reachable Ready/NoSnapshot state the encoding's ``visible`` holds exactly
    at ``reference.buffer.dispatchable``'s positions and ``message_aborted`` exactly at the messages
    ``is_message_aborted`` filters, with the quirk abort-hides-committed off (the default) and on."""
    state, base = _reach(config, setup)
    assume(state.status in (tb.BufferStatus.READY, tb.BufferStatus.NO_SNAPSHOT))
    flag = config.txnmodel_quirk_abort_hides_committed
    visible, aborted = _z3_dispatch(state, base, flag)
    assert visible == set(tb.dispatchable(state))
    data = [e for e in state.entries if e.kind is tb.EntryKind.TXN_DATA and e.txn_id is not None]
    assert aborted == {e.position for e in data if tb.is_message_aborted(state, e.txn_id, e.position)}
    parted = any(
        e.txn_id in state.aborted and end is tb.EntryKind.TXN_COMMIT for e, end in messages_with_next_end(state)
    )
    event(f"abort-hides-committed={flag}; a committed message of a txn in the aborted set: {parted}")


def test_visible_states_tb16_and_the_quirk_as_the_reference_does() -> None:
    """The state where the two readings of TB-16 part: T0's committed message at rank 0 is visible by
    default and hidden under the quirk, in the encoding as in the reference."""
    for config, shown in ((Config(), True), (ABORT_HIDES_COMMITTED, False)):
        state, base = _reach(config, REOPENED_THEN_LWM_ABORTED)
        committed, late = state.entries[0].position, state.entries[2].position
        assert state.entries[0].txn_id == state.entries[2].txn_id == T0 and T0 in state.aborted
        visible, aborted = _z3_dispatch(state, base, config.txnmodel_quirk_abort_hides_committed)
        assert (committed in visible) is shown and (committed in tb.dispatchable(state)) is shown
        assert late in aborted and late not in visible


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
