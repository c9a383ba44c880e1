"""The client's transaction object (``TransactionImpl``, ``Transaction.State``) as a pure machine.

Users reason about the client states as much as about the coordinator's, and the two disagree
on purpose: the client has ERROR and TIME_OUT, which the coordinator never stores.  One state is
one transaction object after NEW_TXN succeeded.  Requests to the coordinator are effects
(:class:`SendAddPartitionToTxn`, :class:`SendAddSubscriptionToTxn`, :class:`SendEndTxn`); the
coordinator's answer to END_TXN comes back as :class:`EndTxnResponse`; the user's commit/abort
future completing is the :class:`CompleteEnd` effect.

Rules: ``spec/rules/coordinator.md``, TC-29 .. TC-36, TC-38 here (the coordinator's TC-1 .. TC-28 are
:mod:`reference.coordinator`).
"""

from __future__ import annotations

from dataclasses import dataclass

from reference.conformance import MachineVectors
from reference.persistent import HashOnce, evolve
from spec.config import CLIENT_DEFAULT_TXN_TIMEOUT_MS, Config
from spec.errors import CoordinatorNotFound, InvalidTxnStatus, TransactionNotFound
from spec.result import Effect, Err, Ok
from spec.types import ClientTxnState, Subscription, TxnAction, TxnID, client_can_transition

__all__ = [
    "VECTORS",
    "Abort",
    "Ack",
    "ClientTxn",
    "Commit",
    "CompleteEnd",
    "EndTxnResponse",
    "OpCompleted",
    "Send",
    "SendAddPartitionToTxn",
    "SendAddSubscriptionToTxn",
    "SendEndTxn",
    "TimeoutFired",
    "initial",
    "step",
]

S = ClientTxnState
_FIRST_TXN = TxnID(0, 0)


@dataclass(frozen=True, slots=True)
class ClientTxn(HashOnce):
    """One client transaction object.

    ``pending_ops`` counts sends and acks of this txn not yet answered; ``op_failed`` remembers
    that one failed.  ``end_action`` is the END_TXN the user asked for (``None`` before commit or
    abort); ``end_sent`` whether it is on the wire.  ``commit_became_abort`` marks a commit turned
    into an abort because an operation failed (TC-32).
    """

    __hash__ = HashOnce.__hash__

    txn_id: TxnID
    state: ClientTxnState
    timeout_ms: int
    produced_topics: frozenset[str] = frozenset()
    acked_subscriptions: frozenset[Subscription] = frozenset()
    pending_ops: int = 0
    op_failed: bool = False
    end_action: TxnAction | None = None
    end_sent: bool = False
    commit_became_abort: bool = False


# --------------------------------------------------------------------------------------------
# Effects
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendAddPartitionToTxn(Effect):
    """ADD_PARTITION_TO_TXN for the first send to ``topic`` in this txn (TC-30)."""

    txn_id: TxnID
    topic: str


@dataclass(frozen=True, slots=True)
class SendAddSubscriptionToTxn(Effect):
    """ADD_SUBSCRIPTION_TO_TXN for the first ack on ``subscription`` in this txn (TC-30)."""

    txn_id: TxnID
    subscription: Subscription


@dataclass(frozen=True, slots=True)
class SendEndTxn(Effect):
    """END_TXN to the coordinator (TC-32, TC-33)."""

    txn_id: TxnID
    action: TxnAction


@dataclass(frozen=True, slots=True)
class CompleteEnd(Effect):
    """The user's commit or abort future completes, with ``error`` (an error name) or successfully."""

    action: TxnAction
    error: str | None = None


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """A producer sends a message with this txn to ``topic`` (TC-30, TC-31)."""

    topic: str


@dataclass(frozen=True, slots=True)
class Ack:
    """A consumer acknowledges with this txn on ``subscription`` (TC-30, TC-31)."""

    subscription: Subscription


@dataclass(frozen=True, slots=True)
class OpCompleted:
    """A send or ack of this txn was answered; ``failed`` if it failed (TC-32)."""

    failed: bool = False


@dataclass(frozen=True, slots=True)
class Commit:
    """``Transaction.commit()`` (TC-32, TC-35)."""


@dataclass(frozen=True, slots=True)
class Abort:
    """``Transaction.abort()`` (TC-33, TC-35)."""


@dataclass(frozen=True, slots=True)
class EndTxnResponse:
    """The coordinator answered END_TXN; ``error`` is an error name of ``spec.errors`` (TC-34)."""

    error: str | None = None


@dataclass(frozen=True, slots=True)
class TimeoutFired:
    """The client's own transaction timer fired (TC-36)."""


Command = Send | Ack | OpCompleted | Commit | Abort | EndTxnResponse | TimeoutFired
Result = Ok[object] | Err
Step = tuple[ClientTxn, Result]


def initial(config: Config, txn_id: TxnID = _FIRST_TXN, timeout_ms: int = CLIENT_DEFAULT_TXN_TIMEOUT_MS) -> ClientTxn:
    """A transaction the coordinator just issued: OPEN, its timer armed (TC-29)."""
    del config  # the client machine has no broker.conf keys; kept for the common signature
    if timeout_ms < 0:
        raise ValueError(f"timeout_ms={timeout_ms} must be >= 0")
    return ClientTxn(txn_id=txn_id, state=S.OPEN, timeout_ms=timeout_ms)


def _wrong_state(txn: ClientTxn, allowed: tuple[ClientTxnState, ...]) -> Err:
    names = " or ".join(s.value for s in allowed)
    return Err(InvalidTxnStatus(f"[{txn.txn_id}] Expect transaction state {names} but {txn.state.value}"))


def _register(txn: ClientTxn, cmd: Send | Ack) -> Step:
    """TC-30, TC-31, TC-38: only an OPEN txn may send or ack; the first use of a topic/subscription
    registers it with the coordinator, later ones do not."""
    if txn.state is not S.OPEN:
        return txn, _wrong_state(txn, (S.OPEN,))
    effects: tuple[Effect, ...] = ()
    if isinstance(cmd, Send):
        if cmd.topic not in txn.produced_topics:
            effects = (SendAddPartitionToTxn(txn.txn_id, cmd.topic),)
            txn = evolve(txn, produced_topics=txn.produced_topics | {cmd.topic})
    elif cmd.subscription not in txn.acked_subscriptions:
        effects = (SendAddSubscriptionToTxn(txn.txn_id, cmd.subscription),)
        txn = evolve(txn, acked_subscriptions=txn.acked_subscriptions | {cmd.subscription})
    return evolve(txn, pending_ops=txn.pending_ops + 1), Ok(None, effects)


def _maybe_send_end(txn: ClientTxn) -> Step:
    """TC-32, TC-33, TC-38: once every operation is answered, send END_TXN; a commit with a failed
    operation becomes an abort, and only such a commit."""
    if txn.end_action is None or txn.end_sent or txn.pending_ops > 0:
        return txn, Ok(txn.state)
    action = txn.end_action
    if action is TxnAction.COMMIT and txn.op_failed:
        txn = evolve(txn, state=S.ABORTING, end_action=TxnAction.ABORT, commit_became_abort=True)
        action = TxnAction.ABORT
    return evolve(txn, end_sent=True), Ok(txn.state, (SendEndTxn(txn.txn_id, action),))


def _op_completed(txn: ClientTxn, cmd: OpCompleted) -> Step:
    """TC-32: an answered operation; the last one may release a waiting commit or abort."""
    if txn.pending_ops == 0:
        raise ValueError(f"{txn.txn_id}: an operation completed but none was pending")
    txn = evolve(txn, pending_ops=txn.pending_ops - 1, op_failed=txn.op_failed or cmd.failed)
    return _maybe_send_end(txn)


def _end(txn: ClientTxn, action: TxnAction) -> Step:
    """TC-32, TC-33, TC-35: commit from OPEN or COMMITTING, abort from OPEN or ABORTING."""
    ending = S.COMMITTING if action is TxnAction.COMMIT else S.ABORTING
    if txn.state not in (S.OPEN, ending):
        return txn, _wrong_state(txn, (S.OPEN, ending))
    if txn.state is ending and txn.end_sent:
        # A retried commit/abort after a retryable failure: send END_TXN again.
        return txn, Ok(txn.state, (SendEndTxn(txn.txn_id, action),))
    return _maybe_send_end(evolve(txn, state=ending, end_action=action))


def _end_response(txn: ClientTxn, cmd: EndTxnResponse) -> Step:
    """TC-34: the coordinator's answer to END_TXN."""
    if txn.state not in (S.COMMITTING, S.ABORTING) or not txn.end_sent or txn.end_action is None:
        return txn, _wrong_state(txn, (S.COMMITTING, S.ABORTING))
    action = txn.end_action
    if cmd.error is None:
        done = S.COMMITTED if action is TxnAction.COMMIT else S.ABORTED
        # TC-32: the user asked to commit; the abort went through, so their commit fails.
        error = "TransactionHasOperationFailed" if txn.commit_became_abort else None
        user_action = TxnAction.COMMIT if txn.commit_became_abort else action
        return evolve(txn, state=done), Ok(done, (CompleteEnd(user_action, error),))
    if cmd.error == CoordinatorNotFound.__name__:
        # The TC client retries until the coordinator is loaded.
        return txn, Ok(txn.state, (SendEndTxn(txn.txn_id, action),))
    user_action = TxnAction.COMMIT if txn.commit_became_abort else action
    if cmd.error in (TransactionNotFound.__name__, InvalidTxnStatus.__name__):
        return evolve(txn, state=S.ERROR), Ok(S.ERROR, (CompleteEnd(user_action, cmd.error),))
    # Any other failure leaves the state as it is, so the user may retry (TC-32, TC-33).
    return evolve(txn, end_sent=True), Ok(txn.state, (CompleteEnd(user_action, cmd.error),))


def _timeout(txn: ClientTxn) -> Step:
    """TC-36: OPEN -> TIME_OUT.  commit/abort cancel the timer, so later firings change nothing."""
    if txn.state is not S.OPEN:
        return txn, Ok(txn.state)
    return evolve(txn, state=S.TIME_OUT), Ok(S.TIME_OUT)


def step(txn: ClientTxn, command: Command) -> Step:
    """One step of the client transaction (TC-29 .. TC-36)."""
    match command:
        case Send() | Ack():
            after, result = _register(txn, command)
        case OpCompleted():
            after, result = _op_completed(txn, command)
        case Commit():
            after, result = _end(txn, TxnAction.COMMIT)
        case Abort():
            after, result = _end(txn, TxnAction.ABORT)
        case EndTxnResponse():
            after, result = _end_response(txn, command)
        case TimeoutFired():
            after, result = _timeout(txn)
        case _:
            raise TypeError(f"not a client transaction command: {command!r}")
    if after.state is not txn.state and not client_can_transition(txn.state, after.state):
        raise AssertionError(f"TC-29: {txn.state.value} -> {after.state.value} is not in the table")
    return after, result


def _decode_init(config: Config, init: object) -> ClientTxn:
    params = dict(init) if isinstance(init, dict) else {}
    unknown = set(params) - {"txn_id", "timeout_ms"}
    if unknown:
        raise KeyError(f"unknown init parameter(s) {sorted(unknown)}; known: txn_id, timeout_ms")
    raw = params.get("txn_id", [0, 0])
    if not (
        isinstance(raw, list) and len(raw) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in raw)
    ):
        raise TypeError("txn_id must be [most, least]")
    timeout = params.get("timeout_ms", CLIENT_DEFAULT_TXN_TIMEOUT_MS)
    if not isinstance(timeout, int) or isinstance(timeout, bool):
        raise TypeError("timeout_ms must be an integer")
    return initial(config, TxnID(raw[0], raw[1]), timeout)


VECTORS = MachineVectors(
    name="client",
    initial=_decode_init,
    step=step,
    commands={
        "send": Send,
        "ack": Ack,
        "op_completed": OpCompleted,
        "commit": Commit,
        "abort": Abort,
        "end_txn_response": EndTxnResponse,
        "timeout_fired": TimeoutFired,
    },
    observers={
        "state": lambda t: t.state,
        "pending_ops": lambda t: t.pending_ops,
        "produced_topics": lambda t: t.produced_topics,
        "acked_subscriptions": lambda t: t.acked_subscriptions,
    },
)
