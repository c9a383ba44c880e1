"""What the subscription's cursor lets through: a message a still-open transaction holds by an
individual ack is not delivered again, one the cursor deleted never is, one an aborted transaction
held is given back, the pending-ack check answers only for what a transaction acked, and a seek by
publish time restarts the subscription there.  One function per check, each reading the
:class:`~invariants.client_visible.view.View`."""

from __future__ import annotations

from collections import defaultdict

from invariants.client_visible.bounds import REDELIVERY_BOUND_MS
from invariants.client_visible.view import (
    INF,
    WHOLE,
    Ack,
    Message,
    MessageId,
    View,
    bad,
    covers,
    fmt_id,
    fmt_txn,
    message_id,
    object_of,
    txn_of,
)
from invariants.client_visible.violation import Collector
from spec.history import Operation, OpType, parse_object, split_subscription

__all__ = [
    "delivered_before_seek_time",
    "held_back",
    "missing_abort_redelivery",
    "pending_ack_without_ack",
    "redelivered_after_ack",
]


def held_back(view: View, out: Collector) -> None:
    """PA-1: a message an individual ack of an open txn holds is PENDING_ACK, and a PENDING_ACK
    message is not dispatched on that subscription (the dispatcher filters it; a restart replays
    the pending-ack log first, PA-18).  Cumulative txn acks are left out: the broker may ignore one
    and still answer ok (PA-10)."""
    for ack in view.acks:
        if ack.txn is None or ack.cumulative or ack.op.completed_at is None:
            continue
        until = view.open_until(ack.txn)
        if until <= ack.op.completed_at:
            continue
        out.judged["held-back-delivery"] += 1
        for message in _covered(view, ack):
            for d in view.deliveries.get(ack.sub, ()):
                if d.payload != message.payload or d.op.completed_at is None or not d.of(message, ack):
                    continue
                # strictly after: intervals are closed, so a receive invoked the instant the ack
                # completed may have come first (millisecond clocks make such ties common)
                if d.op.invoked_at > ack.op.completed_at and d.op.completed_at < until:
                    out.add(
                        "held-back-delivery",
                        [message.send, ack.op, d.op],
                        f"{ack.sub}: {fmt_txn(ack.txn)} acked {message.payload!r} at {fmt_id(message.id)} (op "
                        f"{ack.op.index}, done at {ack.op.completed_at}) and was certainly still open until "
                        f"{until:g}; yet receive op {d.op.index} (invoked at {d.op.invoked_at}, done at "
                        f"{d.op.completed_at}) delivered it again: a PENDING_ACK message is not dispatched",
                    )


def redelivered_after_ack(view: View, out: Collector) -> None:
    """PA-1, PA-3: once the cursor deleted a message (a plain ack, PA-11 even over a pending ack;
    a committed txn's individual ack, PA-12) it is DELETED for good, across restarts (the cursor
    and the pending-ack log are durable before the answer, PA-18, PA-19)."""
    for ack in view.acks:
        if ack.txn is None:
            effective = ack.op.completed_at
            how = f"acked it{' cumulatively' if ack.cumulative else ''} (op {ack.op.index}, done at {effective})"
        elif not ack.cumulative:
            effective = view.committed_at(ack.txn)
            how = f"acked it in {fmt_txn(ack.txn)} (op {ack.op.index}), which committed by {effective}"
        else:
            continue  # a cumulative txn ack may be ignored (PA-10)
        if effective is None:
            continue
        out.judged["redelivered-after-ack"] += 1
        for message in _covered(view, ack):
            for d in view.deliveries.get(ack.sub, ()):
                if d.payload == message.payload and d.op.invoked_at > effective and d.of(message, ack):
                    out.add(
                        "redelivered-after-ack",
                        [message.send, ack.op, d.op],
                        f"{ack.sub} {how}; receive op {d.op.index}, invoked later at {d.op.invoked_at}, "
                        f"delivered {message.payload!r} at {fmt_id(message.id)} again",
                    )


def missing_abort_redelivery(view: View, out: Collector) -> None:
    """PA-13: an abort returns a txn's individual acks to PENDING and redelivers them; PA-14 and
    TC-18 make sure a txn nobody ends is aborted too.  On a subscription with one consumer the
    message must be received again before a receive invoked REDELIVERY_BOUND_MS after the abort
    comes back empty.

    Only an ack that took effect before the abort could reach the subscription is owed a
    redelivery: one that completed while its txn was certainly open.  An abort that comes first
    finds nothing of the txn there and does nothing (PA-13); the ack that lands after it is
    accepted (PA-4 checks only conflicts, PA-5, PA-6) and stays PENDING_ACK until a later
    end that had individual acks there raises the watermark past it (PA-14), which may never come
    (the watermark stays below every live txn, TC-17).  A client sends the ack only once the
    coordinator answered ADD_SUBSCRIPTION_TO_TXN (TC-30), so the race is open whenever that answer
    comes near the txn's timeout."""
    for ack in view.acks:
        if ack.txn is None or ack.cumulative or ack.op.completed_at is None or not view.judged(ack.sub):
            continue
        if ack.op.completed_at > view.open_until(ack.txn):
            continue
        aborted = view.aborted_by(ack.txn)
        if aborted is None:
            continue
        by, how = aborted
        for message in _covered(view, ack):
            if message.deliver_at is not None or _deleted_otherwise(view, ack, message):
                continue
            again = min(
                (
                    d.op.invoked_at
                    for d in view.deliveries.get(ack.sub, ())
                    if d.payload == message.payload and d.op.invoked_at >= ack.op.completed_at
                ),
                default=INF,
            )
            witnesses = [
                (op.invoked_at, op, f"found nothing (invoked at least {REDELIVERY_BOUND_MS} ms later)")
                for op in view.empty.get(ack.sub, ())
                if op.invoked_at >= by + REDELIVERY_BOUND_MS
            ]
            if view.exclusive(ack.sub):
                # An Exclusive consumer gets what an abort redelivers ahead of anything dispatched later.
                witnesses += [
                    (d.op.invoked_at, d.op, f"returned {d.payload!r}, sent after that (op {later.send.index})")
                    for d in view.deliveries.get(ack.sub, ())
                    if (later := view.messages.get(d.payload)) is not None
                    and later.deliver_at is None
                    and later.send.invoked_at > by
                ]
            if not witnesses:
                continue
            at, witness, what = min(witnesses, key=lambda w: (w[0], w[1].index))
            out.judged["missing-abort-redelivery"] += 1
            if again < at or view.blind(ack.sub, at, ack.op.invoked_at) is not None:
                continue
            out.add(
                "missing-abort-redelivery",
                [message.send, ack.op, witness],
                f"{ack.sub}: {fmt_txn(ack.txn)} acked {message.payload!r} at {fmt_id(message.id)} (op "
                f"{ack.op.index}) and was aborted ({how}); receive op {witness.index}, invoked at {at}, "
                f"{what}, and the message had not been delivered again",
            )


def _covered(view: View, ack: Ack) -> list[Message]:
    """The messages of the ack's partition that the ack acknowledges."""
    partition, _ = split_subscription(parse_object(ack.sub)[1])
    return [
        m
        for m in view.sends_by_partition.get(partition, ())
        if m.id is not None and covers(ack.id, ack.cumulative, m.id)
    ]


def _deleted_otherwise(view: View, ack: Ack, message: Message) -> bool:
    """Another ack on the subscription may have deleted ``message`` on the cursor: a plain ack, or
    an ack of a txn that did not certainly abort.  The cursor wins over a pending ack (PA-11, and a
    committed cumulative range, PA-6), and what it deleted is not redelivered by an abort."""
    assert message.id is not None
    for other in view.acks:
        if other is ack or other.sub != ack.sub or not covers(other.id, other.cumulative, message.id):
            continue
        if other.txn is None or view.aborted_by(other.txn) is None:
            return True
    return False


def pending_ack_without_ack(view: View, out: Collector) -> None:
    """PA-21: the admin check answers PendingAck only for a position a transaction holds by an
    individual ack on that subscription, so some transactional ``ack`` of it (ok, or of unknown
    outcome) was invoked there before the answer came back."""
    candidates: dict[str, list[tuple[Operation, MessageId]]] = defaultdict(list)
    for ack in view.acks:
        if ack.txn is not None and not ack.cumulative:
            candidates[ack.sub].append((ack.op, ack.id))
    for op in view.unsure_acks:
        args = object_of(op)
        if txn_of(op, args) is not None:
            candidates[op.object].append((op, message_id(op, args, "value")))
    for op in view.queries:
        if op.f != "check_position_in_pending_ack" or op.type is not OpType.OK or op.completed_at is None:
            continue
        state = object_of(op, "result").get("state")
        if state != "PendingAck":
            continue
        asked = message_id(op, object_of(op), "value")
        out.judged["pending-ack-without-ack"] += 1
        done = op.completed_at
        if any(
            ack.invoked_at < done and acked[:2] == asked[:2] and (acked[2] == asked[2] or WHOLE in (acked[2], asked[2]))
            for ack, acked in candidates.get(op.object, ())
        ):
            continue
        out.add(
            "pending-ack-without-ack",
            [op],
            f"check_position_in_pending_ack op {op.index} on {op.object} answered PendingAck for {fmt_id(asked)}, "
            f"but no transactional ack of it was invoked on that subscription before the answer at {done}",
        )


def delivered_before_seek_time(view: View, out: Collector) -> None:
    """PA-23: a seek by publish time restarts the subscription at the first message published at or
    after that time (its consumers reconnect, dropping what was queued for them), so the first
    delivery by a receive invoked after the seek returned is not a message whose send had completed
    before that time: such a message was published before it.  Judged until another seek."""
    seeks: dict[str, list[Operation]] = defaultdict(list)
    for op in view.queries:
        if op.f == "seek" and op.type is OpType.OK and op.completed_at is not None:
            seeks[op.object].append(op)
    for sub, mine in seeks.items():
        mine.sort(key=lambda o: (o.invoked_at, o.index))
        deliveries = view.deliveries.get(sub, [])
        for k, seek in enumerate(mine):
            at = object_of(seek).get("publish_time")
            if type(at) is not int:
                raise bad(seek, f"'publish_time' must be an integer, got {at!r}")
            until = mine[k + 1].invoked_at if k + 1 < len(mine) else INF
            assert seek.completed_at is not None
            first = next(
                (d for d in deliveries if seek.completed_at <= d.op.invoked_at < until),
                None,
            )
            if first is None:
                continue
            out.judged["delivered-before-seek-time"] += 1
            message = view.messages.get(first.payload)
            if message is None or message.send.completed_at is None or message.send.completed_at >= at:
                continue
            out.add(
                "delivered-before-seek-time",
                [seek, first.op, message.send],
                f"seek op {seek.index} on {sub} to publish time {at} returned at {seek.completed_at}; the first "
                f"delivery after it, receive op {first.op.index}, was {message.payload!r}, whose send (op "
                f"{message.send.index}) had completed at {message.send.completed_at}, before that time",
            )
