"""When a delayed or given-back message may and must arrive: not before its deliver-at time, and
within the bounds a history states (``deliver_within_ms``, ``redeliver_within_ms``) on a
subscription whose every consumer the history accounts for.  One function per anomaly."""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from typing import Any

from invariants.analysis import (
    Delivery,
    Message,
    MessageId,
    TxnAnalysis,
    consumer_of,
    covers,
    cumulative_reach,
    end_or_never,
    message_id,
    read_field,
    sub_type,
)
from invariants.transactional.anomaly import Collector
from invariants.words import Words, seconds
from spec.history import Operation, OpType, parse_object, split_subscription

__all__ = ["early_deliveries", "late_deliveries", "lost_redeliveries"]


def early_deliveries(a: TxnAnalysis, out: Collector) -> None:
    """``early-delivery``: a delayed message reached a consumer before its ``deliver_at_ms`` on a
    subscription where Pulsar holds delayed messages back (Shared and Key_Shared, or no subscribe
    recorded).  The tracker releases a message only once due (DD-1, DD-2, DD-13; DD-29 for the
    in-memory tracker)."""
    for d, message in a.delivered_delayed():
        if (
            message.deliver_at is not None
            and d.op.completed_at is not None
            and d.op.completed_at < message.deliver_at - message.early_ms
            and a.holds_delays(d.subscription)
        ):
            early = message.deliver_at - d.op.completed_at
            allowed = f", {seconds(message.early_ms)} allowed to a non-strict broker" if message.early_ms else ""
            out.add(
                "early-delivery",
                [message.send, d.op],
                f"send op {message.send.index} asked to deliver {d.payload!r} at {a.words.at(message.deliver_at)}; "
                f"receive op {d.op.index} had it by {a.words.at(d.op.completed_at)}: {seconds(early)} early"
                f"{allowed}",
                where=a.words.name(d.subscription),
                early_ms=early,
                bound_ms=message.early_ms,
            )


def late_deliveries(a: TxnAnalysis, out: Collector) -> None:
    """``late-delivery`` (liveness under a stated bound): a delayed message whose send states
    ``deliver_within_ms`` did not reach the consumers of a subscription that holds delayed messages
    back (Shared, Key_Shared) within that bound after its ``deliver_at_ms``, although every consumer
    of the subscription then found nothing.  The tracker releases a message once due (DD-1, DD-13),
    its timer fires at the latest a tick after that (DD-25), and the dispatcher hands it to a
    consumer with permits.

    The bound is the recorder's statement about a fault-free run (the broker's tick, the client's
    receive loop and a margin; see ``docs/verify-your-broker.md``), counted from when the message
    was both due and readable: the dispatcher reads no further than the first entry of a
    transaction still open on the partition (TB-7), so a transaction whose entry comes before the
    message's holds it back until that transaction certainly ended (:class:`_HeldBack`; a message
    behind one whose end the history never saw cannot be judged).  Judged only where the history
    accounts for every consumer of the subscription (:class:`_Consumers`), each attached before the
    message was sent, and only for a send that returned ok outside a transaction."""
    out.counts_cases("late-delivery")
    by_partition: dict[str, list[str]] = defaultdict(list)
    for sub in sorted(a.subscribes):
        by_partition[split_subscription(parse_object(sub)[1])[0]].append(sub)
    held = _HeldBack(a)
    # when the last subscribe on each subscription completed (never, for one still open)
    attached = {sub: max(end_or_never(op) for op in ops) for sub, ops in a.subscribes.items() if ops}
    consumers: dict[str, _Consumers] = {}
    for message in a.messages.values():
        if (
            message.deliver_at is None
            or message.within_ms is None
            or message.txn is not None
            or message.send.type is not OpType.OK
        ):
            continue
        readable = held.readable_from(message)
        if readable is None:
            out.cannot_judge("late-delivery", "a transaction before it on its partition never certainly ended (TB-7)")
            continue
        due = int(max(message.deliver_at, readable)) + message.within_ms
        for sub in sorted(by_partition.get(message.partition, [])):
            if not a.holds_delays(sub):
                continue  # not delayed there: not this check's case (order judges it)
            if attached.get(sub, float("inf")) > message.send.invoked_at:
                out.cannot_judge("late-delivery", "a consumer of the subscription attached after the message was sent")
                continue
            if sub not in consumers:
                consumers[sub] = _Consumers(a, sub)
            why_not = consumers[sub].why_not(due)
            if why_not is not None:
                out.cannot_judge("late-delivery", why_not)
                continue
            out.judge("late-delivery")
            missed = consumers[sub].missed(message, message.send.invoked_at - 1, due)
            if missed is None:
                continue
            idle, late = missed
            w = a.words
            first = min(late, key=lambda d: d.op.completed_at or 0) if late else None
            held_back = (
                f" (readable only from {w.at(int(readable))}, when a transaction before it ended: TB-7)"
                if readable > message.deliver_at
                else ""
            )
            after = seconds((first.op.completed_at or 0) - message.deliver_at) if first is not None else ""
            came = (
                f"delivered {after} after its time{held_back} (receive op "
                f"{first.op.index} at {w.end(first.op)}), bound {seconds(message.within_ms)}"
                if first is not None
                else f"never delivered, bound {seconds(message.within_ms)}"
            )
            out.add(
                "late-delivery",
                [message.send, *idle.values(), *([first.op] if first is not None else [])],
                f"send op {message.send.index} asked to deliver {message.payload!r} at {w.at(message.deliver_at)}; "
                f"every consumer found nothing after it was due by {w.at(due)}: {_idle_text(w, idle)}; {came}",
                where=w.name(sub),
                late_ms=None if first is None else (first.op.completed_at or 0) - due,
                bound_ms=message.within_ms,
            )


class _HeldBack:
    """When the transactions before a message on its partition had certainly ended (TB-7: the
    dispatcher reads no further than the first entry of an open transaction).  A transaction ended
    certainly when a commit or an abort of it returned ok; one whose end the history never saw
    holds back what follows it for good, as far as the history can tell."""

    def __init__(self, a: TxnAnalysis) -> None:
        ended: dict[tuple[int, int], float] = {}
        for txn in set(a.commits) | set(a.aborts):
            done = [op.completed_at for op in (*a.commits[txn], *a.aborts[txn]) if op.type is OpType.OK]
            ended[txn] = min((float(t) for t in done if t is not None), default=math.inf)
        placed: dict[str, list[tuple[tuple[int, ...], float]]] = defaultdict(list)
        unplaced: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for m in a.messages.values():
            if m.txn is None:
                continue
            end = ended.get(m.txn, math.inf)
            if m.position is not None:
                placed[m.partition].append((tuple(m.position), end))
            elif m.send.type is not OpType.FAIL:
                unplaced[m.partition].append((m.send.invoked_at, end))  # may have landed anywhere
        self._placed = {p: _running_max(sorted(rows)) for p, rows in placed.items()}
        self._unplaced = {p: _running_max(sorted(rows)) for p, rows in unplaced.items()}

    def readable_from(self, message: Message) -> float | None:
        """The latest end of a transaction whose entry may come before ``message`` (-inf: none);
        None when one of them never certainly ended."""
        assert message.position is not None and message.send.completed_at is not None
        latest = -math.inf
        keys, ends = self._placed.get(message.partition, ([], []))
        k = bisect.bisect_left(keys, tuple(message.position))
        if k:
            latest = ends[k - 1]
        keys, ends = self._unplaced.get(message.partition, ([], []))
        k = bisect.bisect_left(keys, message.send.completed_at)
        if k:
            latest = max(latest, ends[k - 1])
        return None if latest == math.inf else latest


def _running_max(rows: list[tuple[Any, float]]) -> tuple[list[Any], list[float]]:
    """The keys of ``rows`` (sorted) and, at each, the greatest end so far."""
    keys, ends, top = [], [], -math.inf
    for key, end in rows:
        top = max(top, end)
        keys.append(key)
        ends.append(top)
    return keys, ends


# A message a consumer gave back: (the message, the delivery it gave back, the negative ack or None
# for the ack timeout, when it was due again, how it was given back in words).
_Handback = tuple[Message, Delivery, "Operation | None", int, str]


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
    (:class:`_Consumers`), with the bound counted from the negative ack's completion, or from the
    receive's completion plus the ack timeout."""
    out.counts_cases("lost-redelivery")
    for sub in sorted(set(a.negative_acks) | set(a.subscribes)):
        handbacks = _negative_acks(a, sub, out) + _ack_timeouts(a, sub)
        if not handbacks:
            continue
        consumers = _Consumers(a, sub)
        w = a.words
        for message, origin, request, due, how in handbacks:
            # Acknowledged since the delivery given back (before the negative ack too: a negative ack
            # names an entry, and a batch index acked before it is not among what it gives back), or
            # since (a cumulative ack past it): owed nothing.
            if request is not None and a.acked_since(sub, message, origin.op.invoked_at):
                out.judge("lost-redelivery")
                continue
            why_not = consumers.why_not(due)
            if why_not is not None:
                out.cannot_judge("lost-redelivery", why_not)
                continue
            out.judge("lost-redelivery")
            missed = consumers.missed(message, origin.op.completed_at or 0, due)
            if missed is None:
                continue
            idle, late = missed
            # counted from the negative ack's completion, or from the receive's (the ack timeout)
            since = (request.completed_at if request is not None else origin.op.completed_at) or 0
            bound = due - since
            first = min(late, key=lambda d: d.op.completed_at or 0) if late else None
            after = "the negative ack" if request is not None else "the receive"
            came = (
                f"redelivered {seconds((first.op.completed_at or 0) - since)} after {after} (receive op "
                f"{first.op.index} at {w.end(first.op)}), bound {seconds(bound)}"
                if first is not None
                else f"never redelivered, bound {seconds(bound)} after {after}"
            )
            out.add(
                "lost-redelivery",
                [message.send, origin.op, *([request] if request is not None else []), *idle.values()]
                + ([first.op] if first is not None else []),
                f"{origin.consumer} received {message.payload!r} (receive op {origin.op.index}) and gave it back by "
                f"{how} at {w.end(request if request is not None else origin.op)}; every consumer found nothing after "
                f"it was due again by {w.at(due)}: {_idle_text(w, idle)}; {came}",
                where=w.name(sub),
                late_ms=None if first is None else (first.op.completed_at or 0) - due,
                bound_ms=bound,
            )


def _negative_acks(a: TxnAnalysis, sub: str, out: Collector) -> list[_Handback]:
    """What the negative acks on ``sub`` that state a bound gave back: each message they name, with
    the last delivery of it to that consumer before the negative ack."""
    partition, _ = split_subscription(parse_object(sub)[1])
    handbacks: list[_Handback] = []
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
                handbacks.append((message, origin, nack, nack.completed_at + within, f"negative ack op {nack.index}"))
            else:
                out.cannot_judge("lost-redelivery", "a negative ack of a message its consumer had not received")
    return handbacks


def _ack_timeouts(a: TxnAnalysis, sub: str) -> list[_Handback]:
    """What the ack timeout gave back on ``sub``: every delivery to a consumer whose subscribe states
    an ack timeout and a bound, that the consumer neither acknowledged nor negatively acknowledged."""
    attached: dict[str | None, Operation] = {}  # each consumer's last ok subscribe
    for op in a.subscribes.get(sub, []):
        if op.type is OpType.OK:
            attached[consumer_of(op)] = op
    stated: dict[str | None, tuple[int, int]] = {}
    for consumer, op in attached.items():
        timeout = read_field(op, op.args, "ack_timeout_ms", "value", (int,), required=False)
        bound = read_field(op, op.args, "redeliver_within_ms", "value", (int,), required=False)
        if timeout is not None and bound is not None:
            stated[consumer] = (timeout, bound)
    if not stated:
        return []
    acks: dict[str | None, _Acks] = {}
    handbacks: list[_Handback] = []
    for got in a.received.get(sub, {}).values():
        for d in got:
            sent = a.messages.get(d.payload)
            if d.consumer not in stated or sent is None or d.op.completed_at is None:
                continue
            timeout, bound = stated[d.consumer]
            if d.consumer not in acks:
                acks[d.consumer] = _Acks(a, sub, d.consumer)
            if acks[d.consumer].acked(sent, d.op.completed_at):
                continue
            handbacks.append((sent, d, None, d.op.completed_at + timeout + bound, f"the ack timeout of {timeout} ms"))
    return handbacks


class _Consumers:
    """The consumers of one subscription by name, when the history accounts for every one of them,
    and each one's receives that found nothing while connected, by invocation.

    Accounted for: every ``subscribe`` on it completed (a lost answer may have attached a consumer
    the history never names) and named its consumer, every receive names one of them, and no
    receive on it has an unknown outcome.  Otherwise (``names`` is None) the subscription cannot be
    judged for liveness."""

    def __init__(self, a: TxnAnalysis, sub: str) -> None:
        self.a = a
        self.sub = sub
        self.names = _consumers(a, sub)
        self.idle: dict[str, tuple[list[int], list[Operation]]] = {}
        if self.names is None:
            return
        # Key_Shared: a change of consumers once messages flow may hold a key's messages back until
        # everything read before it is acknowledged (a recently joined consumer, see
        # TxnAnalysis.membership_changes), which may be never within any bound.
        self.changes: list[int] = []
        if sub_type(a.subscribes.get(sub, [])) == "Key_Shared":
            partition, _ = split_subscription(parse_object(sub)[1])
            first = min((m.send.invoked_at for m in a.messages.values() if m.partition == partition), default=0)
            self.changes = [t for t in a.membership_changes(sub) if t > first]
        for op in sorted(a.drains.get(sub, []), key=lambda o: (o.invoked_at, o.index)):
            name = consumer_of(op)
            if name is not None:
                calls, ops = self.idle.setdefault(name, ([], []))
                calls.append(op.invoked_at)
                ops.append(op)

    def why_not(self, due: int) -> str | None:
        """Why nothing can prove a message due by ``due`` late on this subscription (None: it can be
        judged): the history does not account for every consumer, or some consumer never found
        nothing, while connected, at or after ``due``."""
        if self.names is None:
            return (
                "the history does not account for every consumer of the subscription (a subscribe or receive of "
                "unknown outcome, or a consumer without a name)"
            )
        idle = self.first_idle(due)
        if idle is None:
            return "no consumer found nothing after it was due: every consumer kept receiving, or stopped asking"
        if self.changes and self.changes[0] <= max(op.invoked_at for op in idle.values()):
            return (
                "the consumers of a Key_Shared subscription changed once messages flowed (a joined consumer may wait)"
            )
        return None

    def first_idle(self, after: int) -> dict[str, Operation] | None:
        """Each consumer's first receive that found nothing while connected, invoked at or after
        ``after``; None unless every consumer has one.  A consumer's queue is empty while such a
        receive waits (it would have returned anything queued), so a message dispatched to it by
        ``after`` was received before it."""
        assert self.names is not None
        idle: dict[str, Operation] = {}
        for name in self.names:
            calls, ops = self.idle.get(name, ([], []))
            k = bisect.bisect_left(calls, after)
            if k == len(calls):
                return None
            idle[name] = ops[k]
        return idle

    def missed(self, message: Message, since: int, due: int) -> tuple[dict[str, Operation], list[Delivery]] | None:
        """Whether ``message`` failed to reach the consumers by ``due``: every consumer found nothing
        at or after ``due`` and none of them had received it (by a receive that completed after
        ``since``: a consumer may have been waiting when it came) before that.  Returns the idle
        receives and the late deliveries, or None when it arrived in time or the subscription cannot
        be judged."""
        if self.why_not(due) is not None:
            return None
        idle = self.first_idle(due)
        assert idle is not None
        again = [
            d
            for d in self.a.received.get(self.sub, {}).get(message.payload, [])
            if d.op.completed_at is not None and d.op.completed_at > since
        ]
        if any(
            d.consumer is not None
            and d.op.completed_at is not None
            and d.op.completed_at <= idle[d.consumer].invoked_at
            for d in again
        ):
            return None
        return idle, again


def _consumers(a: TxnAnalysis, sub: str) -> set[str] | None:
    """The consumers of a subscription by name, when the history accounts for every one of them
    (:class:`_Consumers`); None: the subscription cannot be judged for liveness."""
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


def _idle_text(words: Words, idle: dict[str, Operation]) -> str:
    return ", ".join(
        f"{name} (receive op {op.index} at {words.at(op.invoked_at)})"
        for name, op in sorted(idle.items(), key=lambda kv: kv[0])
    )


class _Acks:
    """One consumer's acknowledgements and negative acknowledgements on a subscription (any outcome:
    one of unknown outcome may have taken effect), indexed to say in O(log n) whether one invoked
    after a time covers a message."""

    def __init__(self, a: TxnAnalysis, sub: str, consumer: str | None) -> None:
        self.unplaced = float("-inf")  # the last invocation of one that names no position
        self.individual: dict[tuple[int, int], list[tuple[int, MessageId]]] = defaultdict(list)
        cumulative: list[tuple[int, MessageId]] = []
        for op in [*a.all_acks.get(sub, []), *a.negative_acks.get(sub, [])]:
            if consumer_of(op) != consumer:
                continue
            acked = message_id(op, op.args, "value", required=False)
            if acked is None:
                self.unplaced = max(self.unplaced, op.invoked_at)
            elif op.f == "ack_cumulative":
                cumulative.append((op.invoked_at, acked))
            else:
                self.individual[acked[:2]].append((op.invoked_at, acked))
        cumulative.sort(key=lambda pair: pair[0])
        self.cumulative_calls = [at for at, _ in cumulative]
        # from each cumulative ack on (by invocation), the furthest id covered
        furthest: list[tuple[float, ...]] = [(float("-inf"),)] * (len(cumulative) + 1)
        for k in range(len(cumulative) - 1, -1, -1):
            furthest[k] = max(furthest[k + 1], cumulative_reach(cumulative[k][1]))
        self.furthest = furthest

    def acked(self, message: Message, after: int) -> bool:
        """Whether the consumer acknowledged ``message`` or negatively acknowledged it, by an
        operation invoked at or after ``after``."""
        if message.position is None:
            return True  # not judged: which id an ack would name is unknown
        if self.unplaced >= after:
            return True
        if any(
            at >= after and covers(acked, False, message.position)
            for at, acked in self.individual.get(message.position[:2], ())
        ):
            return True
        k = bisect.bisect_left(self.cumulative_calls, after)
        return self.furthest[k] >= message.position
