"""What reaches a subscription and what an acknowledgement takes away: a committed message that
never arrived on a subscription read to its end, one acked in a committed transaction that arrived
again, and one an aborted transaction acked that was not given back.  One function per anomaly."""

from __future__ import annotations

from collections import defaultdict

from invariants.analysis import (
    Ack,
    Delivery,
    Message,
    TxnAnalysis,
    TxnFate,
    covers,
    end_or_never,
    exclusive,
    latest_start,
)
from invariants.transactional.anomaly import Collector, fmt_pos, fmt_txn
from spec.history import Operation, OpType, parse_object, split_subscription

__all__ = ["REDELIVERY_BOUND_MS", "duplicates_after_commit", "lost_messages", "missing_redeliveries"]

# Simulated milliseconds after an abort completed by which an Exclusive consumer that keeps receiving
# must have been given an aborted transaction's acked messages again (see ``missing-redelivery``).
REDELIVERY_BOUND_MS = 1_000


def lost_messages(a: TxnAnalysis, out: Collector) -> None:
    """``lost-message``: after a final drain of a subscription (a receive that found nothing, invoked
    after every ok send and every ok commit of the partition completed), a committed message was never
    received there.  A commit writes its marker on every partition (TB-11, TC-14) and makes the
    transaction's messages dispatchable (TB-19), in log order without back-fill (TB-17).

    Not judged when a subscribe on the subscription has an unknown outcome: the broker may hold a
    consumer the history never saw attach (its subscribe response was lost), and messages dispatched
    to it stay with it until it disconnects, so an empty receive elsewhere does not prove the
    subscription drained.  A receive of unknown outcome may have taken one message, which then stays
    with its consumer: any message that could have been dispatched before that receive ended (sent,
    or for a transaction's message its first commit invoked, before then) is not judged.  One that
    became dispatchable only after every such receive ended cannot have been taken by it (a receive
    waits at the broker for less than the client's operation timeout, after which the client records
    it as ended).  A Latest subscription need not see what was sent before it existed, a delayed
    message not yet due at the drain is not judged, and a message of a fractured read is reported
    as that, not again as lost.  A Reader's non-durable subscription is not judged: it holds back no
    ledger deletion (PA-24)."""
    fractured = {m.send.index for f in a.fractures for m in (f.seen, f.missing)}
    for view in a.views:
        drain = view.drain
        subscribes = a.subscribes.get(view.subscription, [])
        if drain is None or any(op.type is OpType.INFO for op in subscribes) or a.non_durable(view.subscription):
            continue
        blind_until = max((end_or_never(op) for op in a.unknown_receives.get(view.subscription, ())), default=None)
        latest = latest_start(subscribes)
        for message in a.committed_by_partition.get(view.partition, []):
            if (
                message.payload in view.received
                or (blind_until is not None and a.dispatchable_from(message) <= blind_until)
                or (message.deliver_at is not None and message.deliver_at > drain.invoked_at)
                or (latest is not None and message.send.invoked_at < latest)
                or (message.txn is not None and message.send.index in fractured)
            ):
                continue
            why = "" if message.txn is None else f" in {fmt_txn(message.txn)}, committed"
            out.add(
                "lost-message",
                [message.send, drain],
                f"send op {message.send.index} put {message.payload!r} on {view.partition} at "
                f"{fmt_pos(message.position)}{why}; receive op {drain.index} on {view.subscription} found "
                f"nothing more after every send and commit had completed, and {view.subscription} never "
                f"received it",
            )


def duplicates_after_commit(a: TxnAnalysis, out: Collector) -> None:
    """``duplicate-after-commit``: a message acked inside a committed transaction (or covered by its
    cumulative ack) was delivered again to the same subscription by a receive invoked after the
    commit completed.  Committing acknowledges exactly the transaction's pending acks on the cursor
    (PA-12), for a batch index that message only, for a cumulative ack everything up to it (PA-2)."""
    for ack in a.acks:
        done = a.commit_done(ack.txn)
        if done is None or done.completed_at is None:
            continue
        for got in a.received.get(ack.subscription, {}).values():
            for d in got:
                # Judged by the id its send returned: a delivery that reports another one is already an
                # inconsistent-position and must not cascade.  A message the client may have written
                # twice (deduplicated: false) has a copy at each id: judged by the copy delivered.
                sent = a.messages.get(d.payload)
                got_id = sent.position if sent is not None and sent.position is not None else d.position
                if sent is not None and sent.repeatable and d.position is not None:
                    got_id = d.position
                if got_id is None or d.op.invoked_at <= done.completed_at:
                    continue
                if covers(ack.position, ack.cumulative, got_id):
                    out.add(
                        "duplicate-after-commit",
                        [ack.op, done, d.op],
                        f"{ack.subscription} acked {fmt_pos(ack.position)}"
                        f"{' cumulatively' if ack.cumulative else ''} in {fmt_txn(ack.txn)} (op {ack.op.index}), "
                        f"which committed (op {done.index}, done at {done.completed_at}); receive op {d.op.index}, "
                        f"invoked later at {d.op.invoked_at}, delivered {d.payload!r} at {fmt_pos(got_id)} again",
                    )


def missing_redeliveries(a: TxnAnalysis, out: Collector) -> None:
    """``missing-redelivery`` (liveness under a bound, :data:`REDELIVERY_BOUND_MS`): a message acked
    individually inside a transaction whose abort returned ok was not received again on its
    Exclusive subscription before the consumer went past it.  An abort returns the transaction's
    individual acks to pending and redelivers them, a cumulative ack is just cleared (PA-13); see
    :mod:`invariants.transactional`'s docstring for the bound and what is not judged."""
    by_sub: dict[str, list[Delivery]] = defaultdict(list)
    for d in a.deliveries:
        by_sub[d.subscription].append(d)
    for ack in a.acks:
        if ack.cumulative or not exclusive(a.subscribes.get(ack.subscription, [])):
            continue
        done = [o for o in a.aborts.get(ack.txn, ()) if o.type is OpType.OK and o.completed_at is not None]
        if not done:
            continue
        abort = min(done, key=lambda o: o.completed_at or 0)
        partition, _ = split_subscription(parse_object(ack.subscription)[1])
        for message in a.acked_messages(partition, ack.position):
            if message.deliver_at is None and not _deleted_by_another_txn(a, ack, message):
                _missing_redelivery(a, ack, abort, message, by_sub, out)


def _deleted_by_another_txn(a: TxnAnalysis, ack: Ack, message: Message) -> bool:
    """Another transaction's ack on the subscription, of a transaction not certainly aborted, covers
    ``message``: its commit may have deleted the message on the cursor, and the cursor wins over
    this ack (PA-11), so the abort owes no redelivery (seen with a committed cumulative ack covering
    an aborted transaction's batch-index ack)."""
    if message.position is None:
        return False
    return any(
        other is not ack
        and other.subscription == ack.subscription
        and other.txn != ack.txn
        and a.fate(other.txn) is not TxnFate.ABORTED
        and covers(other.position, other.cumulative, message.position)
        for other in a.acks
    )


def _missing_redelivery(
    a: TxnAnalysis,
    ack: Ack,
    abort: Operation,
    message: Message,
    by_sub: dict[str, list[Delivery]],
    out: Collector,
) -> None:
    """One message an aborted transaction acked individually on an Exclusive subscription."""
    sub = ack.subscription
    aborted_at = abort.completed_at or 0
    position = message.position
    ack_done = ack.op.completed_at or ack.op.invoked_at
    back = min(
        (
            d.op.completed_at or 0
            for d in by_sub.get(sub, ())
            if d.position == position and (d.op.completed_at or 0) > ack_done
        ),
        default=None,
    )
    # The first receive that proves the consumer went past the message.
    witnesses: list[tuple[int, Operation, str]] = []
    for empty in a.drains.get(sub, ()):
        if empty.invoked_at >= aborted_at + REDELIVERY_BOUND_MS:
            witnesses.append(
                (
                    empty.completed_at or empty.invoked_at,
                    empty,
                    f"receive op {empty.index}, invoked at {empty.invoked_at} (at least "
                    f"{REDELIVERY_BOUND_MS} ms after the abort completed), found nothing",
                )
            )
    for d in by_sub.get(sub, ()):
        later = a.messages.get(d.payload)
        if later is not None and later.send.invoked_at > aborted_at and later.deliver_at is None:
            witnesses.append(
                (
                    d.op.completed_at or d.op.invoked_at,
                    d.op,
                    f"receive op {d.op.index} returned {d.payload!r}, whose send (op "
                    f"{later.send.index}) was invoked at {later.send.invoked_at}, after the abort "
                    f"completed",
                )
            )
    if not witnesses:
        return
    seen_at, witness, why = min(witnesses, key=lambda w: (w[0], w[1].index))
    if back is not None and back <= seen_at:
        return
    blind = [
        o
        for o in a.unknown_receives.get(sub, ())
        if o.invoked_at <= seen_at and (o.completed_at is None or o.completed_at >= ack_done)
    ]
    if blind:
        return  # a receive of unknown outcome may have taken the redelivered message
    out.add(
        "missing-redelivery",
        [message.send, ack.op, abort, witness],
        f"{sub} (Exclusive) acked {message.payload!r} at {fmt_pos(position)} in {fmt_txn(ack.txn)} (op "
        f"{ack.op.index}), which aborted (op {abort.index}, done at {aborted_at}); an abort redelivers "
        f"what the transaction acked, ahead of anything dispatched later, yet {why} before "
        f"{message.payload!r} was received again",
    )
