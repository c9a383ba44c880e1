"""The client transaction driven by Hypothesis, with the test playing the coordinator.

Every command of ``reference.client`` is driven in any order; after every step all invariants
and step properties hold (TC-29 .. TC-36), and end to end:

* END_TXN is sent only when nothing is pending, at most once per commit/abort call (TC-32, TC-33);
* the user's commit succeeds only if no operation failed (TC-32);
* the object has no "crash": it lives in the client's memory, so there is nothing to recover
  (the coordinator's recovery is TC-21 .. TC-25, tested in tests/coordinator).
"""

from __future__ import annotations

from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from conformance.strategies import client as cs
from invariants.base import violated, violated_steps
from invariants.client import INVARIANTS, STEP_PROPERTIES
from reference import client as cl
from spec.config import Config
from spec.result import Ok
from spec.types import ClientTxnState, Subscription, TxnAction


class ClientMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.txn = cl.initial(Config(), cs.TXN_ID, cs.TIMEOUT_MS)
        self.any_failed = False
        self.completions: list[cl.CompleteEnd] = []

    def apply(self, command: object) -> None:
        before = self.txn
        after, result = cl.step(before, command)  # type: ignore[arg-type]
        assert violated_steps(STEP_PROPERTIES, before, command, result, after) == []
        ends = [e for e in result.effects if isinstance(e, cl.SendEndTxn)]
        assert len(ends) <= 1
        if ends:
            assert after.pending_ops == 0, "TC-32: END_TXN only once every operation was answered"
        self.completions.extend(e for e in result.effects if isinstance(e, cl.CompleteEnd))
        if isinstance(result, Ok) and isinstance(command, cl.OpCompleted) and command.failed:
            self.any_failed = True
        self.txn = after

    @rule(topic=cs.TOPICS)
    def send(self, topic: str) -> None:
        self.apply(cl.Send(topic))

    @rule(sub=cs.SUBSCRIPTIONS)
    def ack(self, sub: Subscription) -> None:
        self.apply(cl.Ack(sub))

    @precondition(lambda self: self.txn.pending_ops > 0)
    @rule(failed=cs.FAILED)
    def op_completed(self, failed: bool) -> None:
        self.apply(cl.OpCompleted(failed))

    @rule()
    def commit(self) -> None:
        self.apply(cl.Commit())

    @rule()
    def abort(self) -> None:
        self.apply(cl.Abort())

    @rule(error=cs.RESPONSES)
    def end_txn_response(self, error: str | None) -> None:
        self.apply(cl.EndTxnResponse(error))

    @rule()
    def timeout_fired(self) -> None:
        self.apply(cl.TimeoutFired())

    @invariant()
    def invariants_hold(self) -> None:
        assert violated(INVARIANTS, self.txn) == []

    @invariant()
    def commit_succeeds_only_without_failed_operations(self) -> None:
        for done in self.completions:
            if done.action is TxnAction.COMMIT and done.error is None:
                assert not self.any_failed and self.txn.state is ClientTxnState.COMMITTED


TestClient = ClientMachine.TestCase
