"""The Z3 encoding of the coordinator agrees with the reference; every obligation is proved; a
mutant (TC-9 broken: a finished txn is not removed) is refuted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import z3
from hypothesis import given
from hypothesis import strategies as st

from proofs import coordinator as pc
from proofs.framework import RLIMIT, Verdict
from reference import coordinator as tc
from spec.config import Config
from spec.types import Subscription, TxnAction, TxnID, TxnStatus

CID = 0


@dataclass
class Run:
    """A reference run plus the two ghosts the encoding carries."""

    state: tc.CoordinatorState
    last: int = -1
    issued: set[int] = field(default_factory=set)

    def apply(self, command: Any) -> tc.CoordinatorState:
        after, result = tc.step(self.state, command)
        for effect in result.effects:
            if isinstance(effect, tc.AppendRecord):
                assert effect.record.max_local_txn_id is not None
                self.last = effect.record.max_local_txn_id
        if isinstance(command, tc.NewTxn) and after.sequence_id > self.state.sequence_id:
            self.issued.add(after.sequence_id)
        self.state = after
        return after


txn_ids = st.builds(TxnID, st.sampled_from((CID, CID, CID, 1)), st.integers(0, 5))
statuses = st.sampled_from(TxnStatus)
actions = st.sampled_from((TxnAction.COMMIT, TxnAction.ABORT, 2))
callers = st.sampled_from((None, "alice", "admin"))
commands = st.one_of(
    st.builds(
        tc.NewTxn,
        st.sampled_from((0, 99, 100, 1000, 60_000)),
        st.integers(0, 5000),
        st.sampled_from((None, "alice", "", "bob")),
    ),
    st.builds(tc.AddPartitionToTxn, txn_ids, st.just(("p",)), st.integers(0, 5000), callers),
    st.builds(tc.AddSubscriptionToTxn, txn_ids, st.just((Subscription("t", "s"),)), st.integers(0, 5000), callers),
    st.builds(tc.UpdateTxnStatus, txn_ids, statuses, statuses, st.integers(0, 5000)),
    st.builds(tc.EndTxn, txn_ids, actions, st.integers(0, 5000), callers),
    st.builds(tc.ResumeEndTxn, txn_ids, st.sampled_from(TxnAction), st.integers(0, 5000), st.booleans()),
    st.builds(
        tc.EndTxnInTransactionBufferResult,
        txn_ids,
        st.sampled_from(TxnAction),
        st.integers(0, 5000),
        st.booleans(),
        st.sampled_from(((), ("ServiceUnitNotReady",), ("NotAllowed",))),
    ),
    st.builds(tc.Tick, st.integers(0, 70_000)),
    st.builds(tc.GetTxnStatus, txn_ids),
    st.just(tc.CloseStore()),
    st.just(tc.TransactionLogClosed()),
)
configs = st.builds(
    Config,
    max_active_transactions_per_coordinator=st.sampled_from((0, 2)),
    authentication_enabled=st.booleans(),
    authorization_enabled=st.booleans(),
    super_user_roles=st.just(("admin",)),
)


def concrete(state: tc.CoordinatorState, last: int, issued: set[int]) -> pc.Z:
    live = z3.K(z3.IntSort(), z3.BoolVal(False))
    status = z3.K(z3.IntSort(), z3.IntVal(0))
    for seq, meta in state.txns.items():
        live = z3.Store(live, seq, True)
        status = z3.Store(status, seq, int(meta.status))
    issued_arr = z3.K(z3.IntSort(), z3.BoolVal(False))
    for seq in issued:
        issued_arr = z3.Store(issued_arr, seq, True)
    return pc.Z(
        live=live,
        status=status,
        seq=z3.IntVal(state.sequence_id),
        ready=z3.BoolVal(state.store_state is tc.StoreState.READY),
        last=z3.IntVal(last),
        issued=issued_arr,
    )


def _k(state: tc.CoordinatorState, txn: TxnID) -> int:
    return txn.least_sig_bits if txn.most_sig_bits == state.coordinator_id else -1  # -1 is never live


def encode(state: tc.CoordinatorState, pre: pc.Z, command: Any) -> pc.Z:
    """The encoding's post-state for a concrete command, its inputs computed from the command."""
    config = state.config
    match command:
        case tc.NewTxn():
            limit = config.max_active_transactions_per_coordinator
            full = limit > 0 and len(state.txns) >= limit
            owner_ok = command.owner is None or bool(command.owner.strip())
            return pc.new_txn(pre, z3.BoolVal(full), z3.BoolVal(owner_ok), z3.BoolVal(command.timeout_ms < 100))
        case tc.UpdateTxnStatus():
            return pc.update(
                pre,
                z3.IntVal(_k(state, command.txn_id)),
                z3.IntVal(int(command.new_status)),
                z3.IntVal(int(command.expected_status)),
            )
        case tc.EndTxn() | tc.ResumeEndTxn():
            meta = tc._meta_of(state, command.txn_id)
            caller = command.caller if isinstance(command, tc.EndTxn) else None
            allowed = not isinstance(command, tc.EndTxn) or meta is None or tc._may_access(state, meta, caller)
            return pc.end_txn(
                pre, z3.IntVal(_k(state, command.txn_id)), z3.IntVal(int(command.action)), z3.BoolVal(allowed)
            )
        case tc.EndTxnInTransactionBufferResult():
            return pc.end_result(
                pre,
                z3.IntVal(_k(state, command.txn_id)),
                z3.IntVal(int(command.action)),
                z3.BoolVal(bool(command.errors)),
            )
        case tc.Tick():
            due = z3.K(z3.IntSort(), z3.BoolVal(False))
            for seq, meta in state.txns.items():
                if meta.timeout_at < command.now_ms:
                    due = z3.Store(due, seq, True)
            return pc.tick(pre, due)
        case tc.CloseStore():
            return pc.close_store(pre)
    return pre  # adds, queries and TransactionLogClosed leave the encoded state alone


def _agree(post: pc.Z, run: Run, indices: set[int]) -> None:
    state = run.state

    def ev(x: Any) -> Any:
        return z3.simplify(x)

    assert ev(post.seq).as_long() == state.sequence_id
    assert z3.is_true(ev(post.ready)) == (state.store_state is tc.StoreState.READY)
    assert ev(post.last).as_long() == run.last
    for k in indices:
        assert z3.is_true(ev(post.live[k])) == (k in state.txns), k
        assert z3.is_true(ev(post.issued[k])) == (k in run.issued), k
        if k in state.txns:
            assert ev(post.status[k]).as_long() == int(state.txns[k].status), k


@given(configs, st.lists(commands, max_size=25), commands)
def test_encoding_agrees_with_reference_step(config: Config, history: list[Any], command: Any) -> None:
    run = Run(tc.initial(config, CID))
    for past in history:
        run.apply(past)
    before = run.state
    pre = concrete(before, run.last, set(run.issued))
    post = encode(before, pre, command)
    run.apply(command)
    indices = {-1, *before.txns.keys(), *run.state.txns.keys(), before.sequence_id + 1, before.sequence_id + 2}
    _agree(post, run, indices)


@pytest.mark.parametrize("obligation", pc.OBLIGATIONS, ids=lambda ob: ob.name)
def test_every_obligation_is_proved(obligation: Any) -> None:
    outcome = obligation.check(RLIMIT)
    assert outcome.verdict is Verdict.PROVED, outcome.counterexample or outcome.reason


def test_mutant_keeping_finished_txns_is_refuted() -> None:
    """TC-9 broken in the encoding: Z3 must find a live COMMITTED/ABORTED txn."""
    mutants = [ob for ob in pc.build_obligations(mutant=True) if ob.name.startswith("no_finished_txn_live")]
    outcomes = [ob.check(RLIMIT) for ob in mutants]
    refuted = [o for o in outcomes if o.verdict is Verdict.COUNTEREXAMPLE]
    assert refuted, "the mutant survived: the TC-9 obligation is vacuous"
    assert "COMMITTED" in (refuted[0].counterexample or "") or "ABORTED" in (refuted[0].counterexample or "")
