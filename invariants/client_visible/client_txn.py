"""What the client's own transaction refuses (TC-38): nothing while the transaction is certainly
open, and a commit only after one of its operations failed; and what it must refuse (TC-34, TC-35):
every end of a transaction the coordinator did not find.  One function per check, each reading the
:class:`~invariants.client_visible.view.View`."""

from __future__ import annotations

from collections import defaultdict

from invariants.client_visible.view import INF, Txn, View, fmt_txn, object_of, txn_of
from invariants.client_visible.violation import Collector
from spec.errors import InvalidTxnStatus, TransactionNotFound
from spec.history import Operation, OpType

__all__ = ["aborted_commits", "ends_after_error", "refused_while_open"]

_USES = ("send", "ack", "ack_cumulative")
_INVALID = InvalidTxnStatus.__name__
_NOT_FOUND = TransactionNotFound.__name__


def _uses(view: View) -> dict[Txn, list[Operation]]:
    """Each transaction's sends and acks (any process, any outcome)."""
    out: dict[Txn, list[Operation]] = defaultdict(list)
    for op in view.client:
        if op.f in _USES:
            txn = txn_of(op, object_of(op))
            if txn is not None:
                out[txn].append(op)
    return out


def _answered(op: Operation) -> float:
    """When the refusal reached the client (a failed operation always has its completion)."""
    return op.completed_at if op.completed_at is not None else INF


def refused_while_open(view: View, out: Collector) -> None:
    """TC-38 (TC-31, TC-35): while a transaction is certainly open on the client -- no commit or
    abort of it invoked, its timeout not run out (counted from the ``new_txn`` invocation, before
    the client could arm its timer, TC-36) -- the client refuses neither a send or ack with it nor
    its first commit or abort with ``InvalidTxnStatus``.  Judged on operations whose answer came
    back while the transaction was still certainly open: the coordinator answers ADD_PARTITION,
    ADD_SUBSCRIPTION and END_TXN when it gets to them, and one it reaches after the transaction's
    timeout (a slow log append, a recovery) is refused for a reason the history shows."""
    for txn, ops in _uses(view).items():
        until = view.open_until(txn)
        for op in ops:
            if op.type is OpType.FAIL and _answered(op) < until:
                out.judged["refused-while-open"] += 1
                if op.error == _INVALID:
                    out.add(
                        "refused-while-open",
                        [view.new_txn[txn], op],
                        f"{op.f} op {op.index} with {fmt_txn(txn)} was refused with InvalidTxnStatus at "
                        f"{op.completed_at} (invoked at {op.invoked_at}), while the txn was certainly open until "
                        f"{until:g} (no end invoked, its timeout not run out): the client refuses only a txn "
                        f"that is not OPEN",
                    )
    for txn, ends in view.ends.items():
        start = view.new_txn.get(txn)
        timeout = view.timeout.get(txn)
        if start is None or timeout is None or not ends:
            continue
        first = min(ends, key=lambda o: (o.invoked_at, o.index))
        if first.type is OpType.FAIL and _answered(first) < start.invoked_at + timeout:
            out.judged["refused-while-open"] += 1
            if first.error == _INVALID:
                out.add(
                    "refused-while-open",
                    [start, first],
                    f"{first.f} op {first.index}, the first end of {fmt_txn(txn)}, was refused with "
                    f"InvalidTxnStatus at {first.completed_at}, before the txn's timeout could have run out "
                    f"({start.invoked_at + timeout}): an OPEN txn may be committed or aborted",
                )


def aborted_commits(view: View, out: Collector) -> None:
    """TC-38 (TC-32): a commit fails with ``TransactionHasOperationFailed`` only when a send or ack
    of its transaction, invoked before the commit, failed: the client turns a commit into an abort
    for that reason alone.  Judged where the history shows such operations, every one with a
    known outcome."""
    uses = _uses(view)
    for txn, ends in view.ends.items():
        for end in ends:
            if end.f != "commit" or end.type is not OpType.FAIL or end.error != "TransactionHasOperationFailed":
                continue
            before = [op for op in uses.get(txn, ()) if op.invoked_at < end.invoked_at]
            if not before or any(op.type.indeterminate for op in before):
                continue  # nothing the history shows of the txn, or an operation that may have failed
            out.judged["aborted-commit"] += 1
            if all(op.type is OpType.OK for op in before):
                out.add(
                    "aborted-commit",
                    [*before, end],
                    f"commit op {end.index} of {fmt_txn(txn)} failed with TransactionHasOperationFailed, yet "
                    f"every send and ack of the txn before it returned ok ({len(before)} of them): the client "
                    f"turns a commit into an abort only after one of them failed",
                )


def ends_after_error(view: View, out: Collector) -> None:
    """TC-34, TC-35: what a client's transaction refuses for good once an end came back refused.

    * After a commit or abort came back ``TransactionNotFound`` (an answer only the coordinator
      gives) the transaction is in ERROR, so every later commit or abort of it fails on the client
      with ``InvalidTxnStatus`` and sends nothing.
    * After a commit came back ``InvalidTxnStatus`` every later commit of it fails so too: either
      the coordinator refused it (ERROR), or the client did, from a state that refuses a commit
      (ABORTING, COMMITTED, ABORTED, ERROR, TIME_OUT), and none of those ever leads back to one that
      accepts it.  (Not so for an abort: the client refuses one while a commit is in flight, and the
      commit may still turn into an abort, TC-32.)

    Judged for each end the same process invoked after that answer: a process has at most one open
    invocation (docs/spec/history.md), so its later rows were invoked after the answer came back.
    Both consequences are checked against ``reference.client`` over every state it reaches
    (tests/client/test_rules.py)."""
    for txn, ends in view.ends.items():
        if len(ends) < 2:
            continue
        refused: dict[tuple[int, bool], Operation] = {}  # (process, commits only) -> the answer that decided it
        for end in sorted(ends, key=lambda o: o.index):
            first = refused.get((end.process, False)) or (
                refused.get((end.process, True)) if end.f == "commit" else None
            )
            if first is not None:
                out.judged["end-after-error"] += 1
                if end.type is OpType.OK or (end.type is OpType.FAIL and end.error != _INVALID):
                    answer = "returned ok" if end.type is OpType.OK else f"failed with {end.error}"
                    out.add(
                        "end-after-error",
                        [first, end],
                        f"{end.f} op {end.index} of {fmt_txn(txn)} {answer} (invoked at {end.invoked_at}), after "
                        f"{first.f} op {first.index} of it by the same client came back {first.error} at "
                        f"{first.completed_at}: the client then refuses every "
                        f"{'end' if first.error == _NOT_FOUND else 'commit'} of the txn with "
                        f"InvalidTxnStatus",
                    )
                continue
            if end.type is OpType.FAIL and end.error == _NOT_FOUND:
                refused[(end.process, False)] = end
            elif end.type is OpType.FAIL and end.f == "commit" and end.error == _INVALID:
                refused.setdefault((end.process, True), end)
