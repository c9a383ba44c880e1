"""When a delayed or given-back message may and must arrive: not before its deliver-at time, and
within the bounds a history states (``deliver_within_ms``, ``redeliver_within_ms``) on a
subscription whose every consumer the history accounts for.  One function per anomaly."""

from __future__ import annotations

from collections import defaultdict

from invariants.analysis import (
    Delivery,
    Message,
    TxnAnalysis,
    consumer_of,
    covers,
    delays,
    message_id,
    read_field,
)
from invariants.transactional.anomaly import Collector
from spec.history import Operation, OpType, parse_object, split_subscription

__all__ = ["early_deliveries", "late_deliveries", "lost_redeliveries"]


def early_deliveries(a: TxnAnalysis, out: Collector) -> None:
    """``early-delivery``: a delayed message reached a consumer before its ``deliver_at_ms`` on a
    subscription where Pulsar holds delayed messages back (Shared and Key_Shared, or no subscribe
    recorded).  The tracker releases a message only once due (DD-1, DD-2, DD-13; DD-29 for the
    in-memory tracker)."""
    for d, message in a.delivered():
        if (
            message.deliver_at is not None
            and d.op.completed_at is not None
            and d.op.completed_at < message.deliver_at - message.early_ms
            and delays(a.subscribes.get(d.subscription, []))
        ):
            allowed = f" (a non-strict broker may deliver {message.early_ms} ms early)" if message.early_ms else ""
            out.add(
                "early-delivery",
                [message.send, d.op],
                f"send op {message.send.index} asked to deliver {d.payload!r} at {message.deliver_at}; receive "
                f"op {d.op.index} had it by {d.op.completed_at}, {message.deliver_at - d.op.completed_at} early"
                f"{allowed}",
            )


def late_deliveries(a: TxnAnalysis, out: Collector) -> None:
    """``late-delivery`` (liveness under a stated bound): a delayed message whose send states
    ``deliver_within_ms`` did not reach the consumers of a subscription that holds delayed messages
    back (Shared, Key_Shared) within that bound after its ``deliver_at_ms``, although every consumer
    of the subscription then found nothing.  The tracker releases a message once due (DD-1, DD-13),
    its timer fires at the latest a tick after that (DD-25), and the dispatcher hands it to a
    consumer with permits.

    The bound is the recorder's statement about a fault-free run (the broker's tick, the client's
    receive loop and a margin; see ``docs/verify-your-broker.md``).  Judged only where the history
    accounts for every consumer of the subscription (:func:`_consumers`), each attached before the
    message was sent, and only for a send that returned ok outside a transaction."""
    by_partition: dict[str, list[str]] = defaultdict(list)
    for sub in a.subscribes:
        by_partition[split_subscription(parse_object(sub)[1])[0]].append(sub)
    for message in a.messages.values():
        if (
            message.deliver_at is None
            or message.within_ms is None
            or message.txn is not None
            or message.send.type is not OpType.OK
        ):
            continue
        due = message.deliver_at + message.within_ms
        for sub in sorted(by_partition.get(message.partition, [])):
            subscribes = a.subscribes[sub]
            if not delays(subscribes) or any(
                op.completed_at is None or op.completed_at > message.send.invoked_at for op in subscribes
            ):
                continue
            missed = _missed(a, sub, message, message.send.invoked_at - 1, due)
            if missed is None:
                continue
            idle, late = missed
            when = (
                f"; it came only later (receive op {late[0].op.index} at {late[0].op.completed_at})"
                if late
                else "; it never came"
            )
            out.add(
                "late-delivery",
                [message.send, *idle.values(), *(d.op for d in late[:1])],
                f"send op {message.send.index} asked to deliver {message.payload!r} at {message.deliver_at}, "
                f"within {message.within_ms} ms (by {due}); every consumer of {sub} found nothing after that: "
                f"{_idle_text(idle)}{when}",
            )


def lost_redeliveries(a: TxnAnalysis, out: Collector) -> None:
    """``lost-redelivery`` (liveness under a stated bound): a message a consumer gave back was not
    delivered again on the subscription within the bound the history states, although every
    consumer of the subscription then found nothing.  Given back: by a ``negative_ack`` (ok) whose
    value states ``redeliver_within_ms`` (the client asks the broker to redeliver it after its
    negative-ack delay), or by the ack timeout that the consumer's ``subscribe`` states
    (``ack_timeout_ms`` and ``redeliver_within_ms``): a message the consumer received and then
    neither acknowledged nor negatively acknowledged is redelivered once the timeout passes (PA-1:
    what nobody acknowledged stays PENDING on the cursor, PA-3: only an acknowledgement deletes it,
    and a redelivery request dispatches it again).

    Judged only where the history accounts for every consumer of the subscription
    (:func:`_consumers`), with the bound counted from the negative ack's completion, or from the
    receive's completion plus the ack timeout."""
    for sub in sorted(set(a.negative_acks) | set(a.subscribes)):
        partition, _ = split_subscription(parse_object(sub)[1])
        handbacks: list[tuple[Message, Delivery, Operation | None, int, str]] = []
        for nack in a.negative_acks.get(sub, []):
            within = read_field(nack, nack.args, "redeliver_within_ms", "value", (int,), required=False)
            if nack.type is not OpType.OK or within is None or nack.completed_at is None:
                continue
            nacked = message_id(nack, nack.args, "value", required=True)
            assert nacked is not None
            consumer = consumer_of(nack)
            for message in a.acked_messages(partition, nacked):
                origins = [
                    d
                    for d in a.received.get(sub, {}).get(message.payload, [])
                    if d.consumer == consumer and (d.op.completed_at or 0) <= nack.invoked_at
                ]
                if origins:
                    origin = max(origins, key=lambda d: d.op.completed_at or 0)
                    handbacks.append(
                        (message, origin, nack, nack.completed_at + within, f"negative ack op {nack.index}")
                    )
        for got in a.received.get(sub, {}).values():
            for d in got:
                attached = _subscribe_of(a, sub, d.consumer)
                sent = a.messages.get(d.payload)
                if attached is None or sent is None or d.op.completed_at is None:
                    continue
                timeout = read_field(attached, attached.args, "ack_timeout_ms", "value", (int,), required=False)
                bound = read_field(attached, attached.args, "redeliver_within_ms", "value", (int,), required=False)
                if timeout is None or bound is None or _acked_by(a, sub, d.consumer, sent, d.op.completed_at):
                    continue
                handbacks.append(
                    (sent, d, None, d.op.completed_at + timeout + bound, f"the ack timeout of {timeout} ms")
                )
        for message, origin, request, due, how in handbacks:
            missed = _missed(a, sub, message, origin.op.completed_at or 0, due)
            if missed is None:
                continue
            idle, late = missed
            when = (
                f"; it came only later (receive op {late[0].op.index} at {late[0].op.completed_at})"
                if late
                else "; it never came again"
            )
            out.add(
                "lost-redelivery",
                [
                    message.send,
                    origin.op,
                    *([request] if request is not None else []),
                    *idle.values(),
                    *(d.op for d in late[:1]),
                ],
                f"{origin.consumer} received {message.payload!r} (receive op {origin.op.index}) and gave it back by "
                f"{how}, so it was due again on {sub} by {due}; every consumer of {sub} found nothing after that: "
                f"{_idle_text(idle)}{when}",
            )


def _consumers(a: TxnAnalysis, sub: str) -> set[str] | None:
    """The consumers of a subscription by name, when the history accounts for every one of them:
    every ``subscribe`` on it completed (a lost answer may have attached a consumer the history
    never names) and named its consumer, every receive names one of them, and no receive on it has
    an unknown outcome.  None: the subscription cannot be judged for liveness."""
    subscribes = a.subscribes.get(sub, [])
    if not subscribes or any(op.type.indeterminate for op in subscribes) or a.unknown_receives.get(sub):
        return None
    names = {consumer_of(op) for op in subscribes if op.type is OpType.OK}
    if not names or None in names:
        return None
    receivers = {d.consumer for got in a.received.get(sub, {}).values() for d in got}
    receivers |= {consumer_of(op) for op in a.drains.get(sub, [])}
    if not receivers <= names:
        return None
    return {name for name in names if name is not None}


def _first_idle(a: TxnAnalysis, sub: str, names: set[str], after: int) -> dict[str, Operation] | None:
    """Each consumer's first receive that found nothing while connected, invoked at or after
    ``after``; None unless every consumer has one.  A consumer's queue is empty while such a
    receive waits (it would have returned anything queued), so a message dispatched to it by
    ``after`` was received before it."""
    idle: dict[str, Operation] = {}
    for op in sorted(a.drains.get(sub, []), key=lambda o: (o.invoked_at, o.index)):
        name = consumer_of(op)
        if name is not None and op.invoked_at >= after and name not in idle:
            idle[name] = op
    return idle if set(idle) == names else None


def _missed(
    a: TxnAnalysis, sub: str, message: Message, since: int, due: int
) -> tuple[dict[str, Operation], list[Delivery]] | None:
    """Whether ``message`` failed to reach the consumers of ``sub`` by ``due``: every consumer found
    nothing at or after ``due`` and none of them had received it (by a receive that completed after
    ``since``: a consumer may have been waiting when it came) before that.  Returns the idle
    receives and the late deliveries, or None when it arrived in time or the subscription cannot be
    judged."""
    names = _consumers(a, sub)
    if names is None:
        return None
    idle = _first_idle(a, sub, names, due)
    if idle is None:
        return None
    again = [
        d
        for d in a.received.get(sub, {}).get(message.payload, [])
        if d.op.completed_at is not None and d.op.completed_at > since
    ]
    if any(
        d.consumer is not None and d.op.completed_at is not None and d.op.completed_at <= idle[d.consumer].invoked_at
        for d in again
    ):
        return None
    return idle, again


def _idle_text(idle: dict[str, Operation]) -> str:
    return ", ".join(
        f"{name} (receive op {op.index} at {op.invoked_at})" for name, op in sorted(idle.items(), key=lambda kv: kv[0])
    )


def _subscribe_of(a: TxnAnalysis, sub: str, consumer: str | None) -> Operation | None:
    found = [op for op in a.subscribes.get(sub, []) if op.type is OpType.OK and consumer_of(op) == consumer]
    return found[-1] if found else None


def _acked_by(a: TxnAnalysis, sub: str, consumer: str | None, message: Message, after: int) -> bool:
    """Whether ``consumer`` acknowledged ``message`` (an ack of any outcome: one of unknown outcome
    may have taken effect) or negatively acknowledged it, by an operation invoked after ``after``."""
    if message.position is None:
        return True  # not judged: which id an ack would name is unknown
    for op in [*a.all_acks.get(sub, []), *a.negative_acks.get(sub, [])]:
        if op.invoked_at < after or consumer_of(op) != consumer:
            continue
        acked = message_id(op, op.args, "value", required=False)
        if acked is None or covers(acked, op.f == "ack_cumulative", message.position):
            return True
    return False
