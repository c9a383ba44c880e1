"""Examples and edge cases of each client-transaction rule (TC-29 .. TC-36)."""

from __future__ import annotations

import pytest

from invariants.base import violated
from invariants.client import INVARIANTS
from reference import client as cl
from spec.config import Config
from spec.result import Err, Ok
from spec.types import CLIENT_TXN_TRANSITIONS, ClientTxnState, Subscription, TxnAction, TxnID

S = ClientTxnState
TXN = TxnID(2, 7)
COMMIT, ABORT = TxnAction.COMMIT, TxnAction.ABORT


def fresh() -> cl.ClientTxn:
    return cl.initial(Config(), TXN, 1000)


def ok(txn: cl.ClientTxn, command: object) -> tuple[cl.ClientTxn, Ok[object]]:
    after, result = cl.step(txn, command)  # type: ignore[arg-type]
    assert isinstance(result, Ok), result
    assert violated(INVARIANTS, after) == []
    return after, result


def err(txn: cl.ClientTxn, command: object, name: str) -> None:
    after, result = cl.step(txn, command)  # type: ignore[arg-type]
    assert isinstance(result, Err) and result.error.name == name, result
    assert after == txn


def run(*commands: object) -> cl.ClientTxn:
    txn = fresh()
    for command in commands:
        txn, _ = ok(txn, command)
    return txn


# Rules: TC-29
def test_tc29_new_client_txn_is_open_and_table_has_final_states() -> None:
    assert fresh().state is S.OPEN
    for final in (S.COMMITTED, S.ABORTED, S.ERROR, S.TIME_OUT):
        assert CLIENT_TXN_TRANSITIONS[final] == frozenset()


# Rules: TC-30
def test_tc30_registers_each_topic_and_subscription_once() -> None:
    txn, r = ok(fresh(), cl.Send("t1"))
    assert r.effects == (cl.SendAddPartitionToTxn(TXN, "t1"),)
    txn, r = ok(txn, cl.Send("t1"))
    assert r.effects == ()
    sub = Subscription("t1", "s")
    txn, r = ok(txn, cl.Ack(sub))
    assert r.effects == (cl.SendAddSubscriptionToTxn(TXN, sub),)
    txn, r = ok(txn, cl.Ack(sub))
    assert r.effects == () and txn.pending_ops == 4


# Rules: TC-31
@pytest.mark.parametrize("setup", [(cl.TimeoutFired(),), (cl.Commit(),), (cl.Abort(),)])
def test_tc31_only_open_txns_send_or_ack(setup: tuple[object, ...]) -> None:
    txn = run(*setup)
    err(txn, cl.Send("t"), "InvalidTxnStatus")
    err(txn, cl.Ack(Subscription("t", "s")), "InvalidTxnStatus")


# Rules: TC-32
def test_tc32_commit_waits_for_operations() -> None:
    txn, _ = ok(fresh(), cl.Send("t"))
    txn, r = ok(txn, cl.Commit())
    assert txn.state is S.COMMITTING and r.effects == ()
    txn, r = ok(txn, cl.OpCompleted())
    assert r.effects == (cl.SendEndTxn(TXN, COMMIT),)
    txn, r = ok(txn, cl.EndTxnResponse())
    assert txn.state is S.COMMITTED and r.effects == (cl.CompleteEnd(COMMIT),)


# Rules: TC-32
def test_tc32_commit_with_a_failed_operation_becomes_an_abort() -> None:
    txn = run(cl.Send("t"), cl.Send("u"), cl.OpCompleted(failed=True), cl.Commit())
    assert txn.state is S.COMMITTING
    txn, r = ok(txn, cl.OpCompleted())
    assert txn.state is S.ABORTING and r.effects == (cl.SendEndTxn(TXN, ABORT),)
    txn, r = ok(txn, cl.EndTxnResponse())
    assert txn.state is S.ABORTED
    assert r.effects == (cl.CompleteEnd(COMMIT, "TransactionHasOperationFailed"),)


# Rules: TC-38
def test_tc38_an_open_txn_is_not_refused_and_a_commit_without_a_failure_commits() -> None:
    """What the client refuses, it refuses for a reason: an OPEN txn sends, acks and ends; a commit
    whose operations all succeeded is sent as a commit and completes as one."""
    txn = run(cl.Send("t"), cl.Ack(Subscription("t", "s")))
    txn, _ = ok(txn, cl.OpCompleted())
    txn, _ = ok(txn, cl.OpCompleted())
    txn, r = ok(txn, cl.Commit())
    assert r.effects == (cl.SendEndTxn(TXN, COMMIT),)
    txn, r = ok(txn, cl.EndTxnResponse())
    assert txn.state is S.COMMITTED and r.effects == (cl.CompleteEnd(COMMIT),)
    for end in (cl.Commit(), cl.Abort()):
        ok(fresh(), end)  # the first end of an OPEN txn is accepted


# Rules: TC-32
def test_tc32_completion_without_pending_operation_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        cl.step(fresh(), cl.OpCompleted())


# Rules: TC-33
def test_tc33_abort_waits_then_sends_abort() -> None:
    txn = run(cl.Ack(Subscription("t", "s")), cl.Abort())
    assert txn.state is S.ABORTING and not txn.end_sent
    txn, r = ok(txn, cl.OpCompleted(failed=True))
    assert r.effects == (cl.SendEndTxn(TXN, ABORT),)
    txn, r = ok(txn, cl.EndTxnResponse())
    assert txn.state is S.ABORTED and r.effects == (cl.CompleteEnd(ABORT),)


# Rules: TC-34
@pytest.mark.parametrize("error", ["TransactionNotFound", "InvalidTxnStatus"])
def test_tc34_not_found_or_invalid_status_is_error(error: str) -> None:
    txn = run(cl.Commit())
    txn, r = ok(txn, cl.EndTxnResponse(error))
    assert txn.state is S.ERROR and r.effects == (cl.CompleteEnd(COMMIT, error),)


# Rules: TC-34
def test_tc34_coordinator_not_found_is_resent() -> None:
    txn = run(cl.Abort())
    after, r = ok(txn, cl.EndTxnResponse("CoordinatorNotFound"))
    assert after == txn and r.effects == (cl.SendEndTxn(TXN, ABORT),)


# Rules: TC-34
def test_tc34_other_errors_leave_the_state_and_commit_may_be_retried() -> None:
    txn = run(cl.Commit())
    txn, r = ok(txn, cl.EndTxnResponse("RequestTimeout"))
    assert txn.state is S.COMMITTING and r.effects == (cl.CompleteEnd(COMMIT, "RequestTimeout"),)
    txn, r = ok(txn, cl.Commit())
    assert r.effects == (cl.SendEndTxn(TXN, COMMIT),)
    txn, _ = ok(txn, cl.EndTxnResponse())
    assert txn.state is S.COMMITTED


# Rules: TC-34
def test_tc34_a_response_nobody_waits_for_is_refused() -> None:
    err(fresh(), cl.EndTxnResponse(), "InvalidTxnStatus")


# Rules: TC-35
@pytest.mark.parametrize(
    "setup, command",
    [
        ((cl.Commit(), cl.EndTxnResponse()), cl.Commit()),
        ((cl.Commit(), cl.EndTxnResponse()), cl.Abort()),
        ((cl.Abort(), cl.EndTxnResponse()), cl.Commit()),
        ((cl.Abort(), cl.EndTxnResponse()), cl.Abort()),
        ((cl.Commit(),), cl.Abort()),
        ((cl.Abort(),), cl.Commit()),
        ((cl.TimeoutFired(),), cl.Commit()),
        ((cl.TimeoutFired(),), cl.Abort()),
        ((cl.Commit(), cl.EndTxnResponse("TransactionNotFound")), cl.Commit()),
    ],
)
def test_tc35_ending_a_finished_or_other_txn_fails_locally(setup: tuple[object, ...], command: object) -> None:
    err(run(*setup), command, "InvalidTxnStatus")


# Rules: TC-36
def test_tc36_timeout_only_from_open_and_cancelled_by_commit() -> None:
    txn, r = ok(fresh(), cl.TimeoutFired())
    assert txn.state is S.TIME_OUT and r.value is S.TIME_OUT
    committing = run(cl.Commit())
    after, _ = ok(committing, cl.TimeoutFired())
    assert after == committing


# Rules: TC-34, TC-35
def test_tc35_what_end_after_error_relies_on_holds_in_every_reachable_state() -> None:
    """``end-after-error`` (invariants/client_visible/client_txn.py) judges histories by two
    consequences of TC-34 and TC-35, checked here against the machine itself over every state a
    transaction reaches (up to two operations in flight): once a user's end came back
    ``TransactionNotFound``, every later commit and abort is refused with ``InvalidTxnStatus`` and
    sends nothing; once a commit came back ``InvalidTxnStatus`` (refused here, or answered so), every
    later commit is."""
    from spec.errors import InvalidTxnStatus, TransactionNotFound

    tnf, its = TransactionNotFound.__name__, InvalidTxnStatus.__name__
    commands: list[object] = [
        cl.Send("t"),
        cl.OpCompleted(False),
        cl.OpCompleted(True),
        cl.Commit(),
        cl.Abort(),
        cl.TimeoutFired(),
        *(cl.EndTxnResponse(e) for e in (None, tnf, its, "CoordinatorNotFound", "PersistenceError")),
    ]
    start = (cl.initial(Config()), False, False)  # (state, every end refused, every commit refused)
    seen, frontier = {start}, [start]
    judged = {"after TransactionNotFound": 0, "after a refused commit": 0}
    while frontier:
        txn, all_ends, commits = frontier.pop()
        for cmd in commands:
            if isinstance(cmd, cl.Send) and txn.pending_ops >= 2:
                continue
            try:
                after, result = cl.step(txn, cmd)  # type: ignore[arg-type]
            except ValueError:
                continue  # an operation completed while none was pending: not an input
            if isinstance(cmd, cl.Commit | cl.Abort) and (all_ends or (commits and isinstance(cmd, cl.Commit))):
                judged["after TransactionNotFound" if all_ends else "after a refused commit"] += 1
                assert isinstance(result, Err) and result.error.name == its and not result.effects, (txn, cmd)
            ends = [e for e in result.effects if isinstance(e, cl.CompleteEnd)]
            now_all = all_ends or any(e.error == tnf for e in ends)
            now_commits = commits or any(e.action is TxnAction.COMMIT and e.error in (tnf, its) for e in ends)
            if isinstance(cmd, cl.Commit) and isinstance(result, Err) and result.error.name == its:
                now_commits = True
            nxt = (after, now_all, now_commits)
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert all(judged.values()), judged  # both claims were put to the machine, not vacuously true
