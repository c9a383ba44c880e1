"""What the client is answered: a send of a certainly open transaction is not refused as ended,
an operation fails only with an error Pulsar defines (and a commit or abort never with the one the
client retries), and a commit or abort completes once the coordinator's answer reached the client.
One function per check, each reading the :class:`~invariants.client_visible.view.View`."""

from __future__ import annotations

from invariants.client_visible.bounds import ANSWER_BOUND_MS
from invariants.client_visible.view import View, fmt_txn
from invariants.client_visible.violation import Collector
from invariants.words import seconds
from spec.errors import is_pulsar_error
from spec.history import OpType, parse_object

__all__ = ["refused_sends", "unanswered_ends", "unexpected_errors"]


def refused_sends(view: View, out: Collector) -> None:
    """TB-5: a buffer refuses an append as "ended" only when the txn's sequence is at or below its
    coordinator's low watermark, and TC-17 keeps the watermark below every live txn: a send of a
    txn certainly open until after the send completed is never refused that way."""
    for sent in view.messages.values():
        op = sent.send
        if sent.txn is None or op.type is not OpType.FAIL or op.completed_at is None:
            continue
        out.judged["refused-send"] += 1
        until = view.open_until(sent.txn)
        if op.error == "NotAllowed" and op.completed_at < until:
            out.add(
                "refused-send",
                [op],
                f"send op {op.index} of {sent.payload!r} in {fmt_txn(sent.txn)} was refused with NotAllowed (done at "
                f"{view.words.end(op)}), while the txn was certainly open until {view.words.at(until)}: only a txn at "
                f"or below the low watermark is refused as ended, and the watermark stays below every live txn",
                where=view.words.name(sent.partition),
            )


_PULSAR_KINDS = frozenset({"coordinator", "partition", "subscription", "tracker"})


def unexpected_errors(view: View, out: Collector) -> None:
    """TC-37: an operation on a Pulsar object that failed, failed with an error Pulsar defines (a
    domain error, a ``ServerError`` code, an exception of the official client): any other name is
    an exception of the client library's own reaching the application."""
    for op in view.client:
        if op.type is not OpType.FAIL or op.error is None:
            continue
        kind, _ = parse_object(op.object)
        if kind not in _PULSAR_KINDS:
            continue
        out.judged["unexpected-error"] += 1
        if not is_pulsar_error(op.error):
            out.add(
                "unexpected-error",
                [op],
                f"{op.f} op {op.index} failed with {op.error!r}, which is no error of Pulsar's: "
                "the client library raised an exception of its own",
                where=view.words.name(op.object),
            )
        elif op.f in ("commit", "abort") and op.error == "CoordinatorNotFound":
            out.add(
                "unexpected-error",
                [op],
                f"{op.f} op {op.index} failed with CoordinatorNotFound, which the client retries until the "
                "coordinator is loaded (TC-34) instead of handing it to the application",
                where=view.words.name(op.object),
            )


def unanswered_ends(view: View, out: Collector) -> None:
    """TC-34: the client completes a commit or abort with the coordinator's answer to its END_TXN
    (retrying only CoordinatorNotFound).  An engine history records when that answer reached the
    client (the end of the coordinator's ``end_txn`` step, answered ok or with a final error), so a
    commit or abort of that txn invoked before the step and still open ANSWER_BOUND_MS after it is
    a client that dropped the answer."""
    for txn, step in view.answered_ends:
        assert step.completed_at is not None
        by = step.completed_at + ANSWER_BOUND_MS
        for end in view.ends.get(txn, ()):
            if end.invoked_at > step.invoked_at:
                continue  # invoked after this END_TXN was sent: not the end it answers
            if end.completed_at is not None and (
                end.completed_at < step.completed_at
                or (end.type.indeterminate and end.completed_at == step.completed_at)
            ):
                continue  # done (or given up) before the answer came
            out.judged["unanswered-end"] += 1
            if end.type.indeterminate or end.completed_at is None or end.completed_at > by:
                w = view.words
                shown = (
                    "never completed"
                    if end.completed_at is None
                    else f"ended {end.type.value} at {w.at(end.completed_at)}, "
                    f"{seconds(end.completed_at - step.completed_at)} after the answer"
                )
                out.add(
                    "unanswered-end",
                    [end, step],
                    f"{end.f} op {end.index} of {fmt_txn(txn)} {shown}, although the coordinator's answer to its "
                    f"END_TXN (op {step.index}, {step.type.value}{'' if step.error is None else ' ' + step.error}) "
                    f"reached the client at {w.at(step.completed_at)}: it must complete by {w.at(by)}, bound "
                    f"{seconds(ANSWER_BOUND_MS)}",
                    where=fmt_txn(txn),
                    late_ms=None if end.completed_at is None or end.type.indeterminate else end.completed_at - by,
                    bound_ms=ANSWER_BOUND_MS,
                )
