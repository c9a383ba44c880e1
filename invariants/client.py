"""What must hold of every client transaction state, and of every step (rules TC-29 .. TC-36)."""

from __future__ import annotations

from typing import Any

from invariants.base import Invariant, StepProperty
from reference.client import ClientTxn
from spec.result import Err
from spec.types import ClientTxnState, TxnAction, client_can_transition

__all__ = ["INVARIANTS", "STEP_PROPERTIES"]

S = ClientTxnState


def _pending_non_negative(t: ClientTxn) -> bool:
    """TC-32: the count of unanswered sends and acks is never negative."""
    return t.pending_ops >= 0


def _end_matches_state(t: ClientTxn) -> bool:
    """TC-32, TC-33: COMMITTING/ABORTING means an END_TXN of that kind was asked for; OPEN and
    TIME_OUT mean none was; END_TXN is on the wire only once the operations drained."""
    if t.state in (S.OPEN, S.TIME_OUT):
        return t.end_action is None and not t.end_sent
    if t.state is S.COMMITTING:
        return t.end_action is TxnAction.COMMIT
    if t.state is S.ABORTING:
        return t.end_action is TxnAction.ABORT
    return t.end_action is not None and t.end_sent


def _sent_only_when_drained(t: ClientTxn) -> bool:
    """TC-32: END_TXN is sent only when every operation was answered (no new ones after OPEN)."""
    return not t.end_sent or t.pending_ops == 0


def _commit_with_failed_op_aborts(t: ClientTxn) -> bool:
    """TC-32: a commit whose operation failed never commits: it is ABORTING, ABORTED or ERROR,
    or still waiting for operations."""
    if t.state is S.COMMITTED:
        return not t.op_failed
    if t.commit_became_abort:
        return t.state in (S.ABORTING, S.ABORTED, S.ERROR) and t.op_failed
    return not (t.state is S.COMMITTING and t.end_sent and t.op_failed)


INVARIANTS: tuple[Invariant[ClientTxn], ...] = (
    Invariant("pending_non_negative", ("TC-32",), _pending_non_negative),
    Invariant("end_matches_state", ("TC-32", "TC-33"), _end_matches_state),
    Invariant("sent_only_when_drained", ("TC-32",), _sent_only_when_drained),
    Invariant("commit_with_failed_op_aborts", ("TC-32",), _commit_with_failed_op_aborts),
)


def _follows_table(before: ClientTxn, command: Any, result: Any, after: ClientTxn) -> bool:
    """TC-29: every state change is in CLIENT_TXN_TRANSITIONS."""
    return after.state is before.state or client_can_transition(before.state, after.state)


def _rejected_changes_nothing(before: ClientTxn, command: Any, result: Any, after: ClientTxn) -> bool:
    """TC-31, TC-35: a refused send, ack, commit or abort changes nothing."""
    return not isinstance(result, Err) or after == before


def _registered_once(before: ClientTxn, command: Any, result: Any, after: ClientTxn) -> bool:
    """TC-30: the registered sets only grow."""
    return before.produced_topics <= after.produced_topics and before.acked_subscriptions <= after.acked_subscriptions


STEP_PROPERTIES: tuple[StepProperty[ClientTxn], ...] = (
    StepProperty("follows_table", ("TC-29",), _follows_table),
    StepProperty("rejected_changes_nothing", ("TC-31", "TC-35"), _rejected_changes_nothing),
    StepProperty("registered_once", ("TC-30",), _registered_once),
)
