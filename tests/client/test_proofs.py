"""The Z3 encoding of the client transaction agrees with the reference; every obligation is
proved; a mutant (TC-32 broken: a commit whose operation failed still commits) is refuted."""

from __future__ import annotations

from typing import Any

import pytest
import z3
from hypothesis import given
from hypothesis import strategies as st

from proofs import client as pcl
from proofs.framework import RLIMIT, Verdict
from reference import client as cl
from spec.config import Config
from spec.types import Subscription, TxnAction, TxnID

commands = st.one_of(
    st.builds(cl.Send, st.sampled_from(("a", "b"))),
    st.builds(cl.Ack, st.just(Subscription("a", "s"))),
    st.builds(cl.OpCompleted, st.booleans()),
    st.just(cl.Commit()),
    st.just(cl.Abort()),
    st.builds(
        cl.EndTxnResponse,
        st.sampled_from((None, "TransactionNotFound", "InvalidTxnStatus", "CoordinatorNotFound", "RequestTimeout")),
    ),
    st.just(cl.TimeoutFired()),
)


def concrete(t: cl.ClientTxn) -> pcl.C:
    end = -1 if t.end_action is None else int(t.end_action)
    return pcl.C(
        z3.IntVal(pcl.index(t.state)),
        z3.IntVal(t.pending_ops),
        z3.BoolVal(t.op_failed),
        z3.IntVal(end),
        z3.BoolVal(t.end_sent),
        z3.BoolVal(t.commit_became_abort),
    )


def encode(pre: pcl.C, command: Any) -> pcl.C:
    match command:
        case cl.Send() | cl.Ack():
            return pcl.op_started(pre)
        case cl.OpCompleted():
            return pcl.op_completed(pre, z3.BoolVal(command.failed))
        case cl.Commit():
            return pcl.end(pre, pcl.COMMIT)
        case cl.Abort():
            return pcl.end(pre, pcl.ABORT)
        case cl.EndTxnResponse():
            kind = {
                None: pcl.R_OK,
                "TransactionNotFound": pcl.R_FATAL,
                "InvalidTxnStatus": pcl.R_FATAL,
                "CoordinatorNotFound": pcl.R_RESEND,
            }.get(command.error, pcl.R_OTHER)
            return pcl.response(pre, z3.IntVal(kind))
        case cl.TimeoutFired():
            return pcl.timeout(pre)
    raise TypeError(command)


def safe(txn: cl.ClientTxn, command: Any) -> bool:
    return not (isinstance(command, cl.OpCompleted) and txn.pending_ops == 0)


@given(st.lists(commands, max_size=20), commands)
def test_encoding_agrees_with_reference_step(history: list[Any], command: Any) -> None:
    txn = cl.initial(Config(), TxnID(0, 1))
    for past in history:
        if safe(txn, past):
            txn, _ = cl.step(txn, past)
    if not safe(txn, command):
        return
    post = encode(concrete(txn), command)
    after, _ = cl.step(txn, command)
    expected = concrete(after)
    assert z3.is_true(z3.simplify(post.equals(expected))), (txn, command, after)


def test_encoding_states_match_enum_order() -> None:
    assert [pcl.index(s) for s in pcl.STATES] == list(range(len(pcl.STATES)))
    assert int(TxnAction.COMMIT) == pcl.COMMIT and int(TxnAction.ABORT) == pcl.ABORT


@pytest.mark.parametrize("obligation", pcl.OBLIGATIONS, ids=lambda ob: ob.name)
def test_every_obligation_is_proved(obligation: Any) -> None:
    outcome = obligation.check(RLIMIT)
    assert outcome.verdict is Verdict.PROVED, outcome.counterexample or outcome.reason


def test_mutant_committing_despite_a_failed_operation_is_refuted() -> None:
    mutants = [ob for ob in pcl.build_obligations(mutant=True) if ob.name.startswith("commit_with_failed_op_aborts")]
    refuted = [o for o in (ob.check(RLIMIT) for ob in mutants) if o.verdict is Verdict.COUNTEREXAMPLE]
    assert refuted, "the mutant survived"
    assert "state=COMMITTING" in (refuted[0].counterexample or "")
