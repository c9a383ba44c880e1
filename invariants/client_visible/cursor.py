"""What the subscription's cursor lets through: a message a still-open transaction holds by an
individual ack is not delivered again, one the cursor deleted never is, one an aborted transaction
held is given back, the pending-ack check answers only for what a transaction acked, and a seek by
publish time restarts the subscription there.  One function per check, each reading the
:class:`~invariants.client_visible.view.View`."""

from __future__ import annotations

import bisect
from collections import defaultdict

from invariants.analysis import cumulative_reach
from invariants.client_visible.bounds import REDELIVERY_BOUND_MS
from invariants.client_visible.view import (
    INF,
    WHOLE,
    Ack,
    Delivery,
    Message,
    MessageId,
    Txn,
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
from invariants.ordered import MaxTree, PrefixBest
from invariants.words import seconds
from spec.history import Operation, OpType

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
    and still answer ok (PA-10).  Not judged is a message whose subscription may have handed it out
    again after the delivery the ack answers and before the ack completed (a reload, a transaction's
    abort: :attr:`View.redispatches`; a client's request for redelivery sent before the ack came
    back: :attr:`View.redelivery_requests`): a copy that reached the
    consumer's receiver queue before the ack took effect is received from there later, while the
    transaction holds the message."""
    for ack in view.acks:
        if ack.txn is None or ack.cumulative or ack.op.completed_at is None:
            continue
        until = view.open_until(ack.txn)
        if until <= ack.op.completed_at:
            continue
        rows = view.redispatches.get(ack.sub, [])
        requests = view.redelivery_requests.get(ack.sub, [])
        judged = False
        for message in view.covered(ack):
            deliveries = view.delivered(ack.sub, message.payload)
            if (rows or requests) and _redispatched_since_delivery(rows, requests, deliveries, ack):
                continue
            judged = True
            for d in deliveries:
                if d.op.completed_at is None or not d.of(message, ack):
                    continue
                # strictly after: intervals are closed, so a receive invoked the instant the ack
                # completed may have come first (millisecond clocks make such ties common)
                if d.op.invoked_at > ack.op.completed_at and d.op.completed_at < until:
                    w = view.words
                    out.add(
                        "held-back-delivery",
                        [message.send, ack.op, d.op],
                        f"{fmt_txn(ack.txn)} acked {message.payload!r} at {fmt_id(message.id)} (op {ack.op.index}, "
                        f"done at {w.at(ack.op.completed_at)}) and was certainly still open until {w.at(until)}; yet "
                        f"receive op {d.op.index} (invoked at {w.at(d.op.invoked_at)}, done at {w.end(d.op)}) "
                        f"delivered it again: a PENDING_ACK message is not dispatched",
                        where=w.name(ack.sub),
                    )
        if judged:
            out.judged["held-back-delivery"] += 1


def _redispatched_since_delivery(rows: list[int], requests: list[int], deliveries: list[Delivery], ack: Ack) -> bool:
    """Whether the subscription may have handed the message out again between the last delivery of
    it that completed before ``ack`` was invoked (the copy the ack answers; the ack's invocation when
    there is none) and the ack's completion: a machine row of :attr:`View.redispatches` up to that
    instant, or a client's request (:attr:`View.redelivery_requests`) invoked before it (a request
    sent once the ack came back finds the message held already)."""
    done = ack.op.completed_at
    assert done is not None
    since = ack.op.invoked_at
    for d in deliveries:  # by invocation
        if d.op.invoked_at > ack.op.invoked_at:
            break
        if d.op.completed_at is not None and d.op.completed_at <= ack.op.invoked_at:
            since = d.op.invoked_at
    return bisect.bisect_right(rows, done) > bisect.bisect_left(rows, since) or bisect.bisect_left(
        requests, done
    ) > bisect.bisect_left(requests, since)


def redelivered_after_ack(view: View, out: Collector) -> None:
    """PA-1, PA-3: once the cursor deleted a message (a plain ack, PA-11 even over a pending ack;
    a committed txn's individual ack, PA-12) it is DELETED for good, across restarts (the cursor
    and the pending-ack log are durable before the answer, PA-18, PA-19).

    A cumulative ack covers a prefix of its partition: each subscription's deliveries are indexed
    once by the furthest id an ack must cover to cover them (:class:`_Prefix`)."""
    prefixes: dict[str, _Prefix] = {}
    for ack in view.acks:
        if ack.txn is None:
            effective = ack.op.completed_at
            how = (
                f"acked it{' cumulatively' if ack.cumulative else ''} (op {ack.op.index}, done at "
                f"{view.words.end(ack.op)})"
            )
        elif not ack.cumulative:
            effective = view.committed_at(ack.txn)
            how = (
                f"acked it in {fmt_txn(ack.txn)} (op {ack.op.index}), which committed by "
                f"{'?' if effective is None else view.words.at(effective)}"
            )
        else:
            continue  # a cumulative txn ack may be ignored (PA-10)
        if effective is None:
            continue
        out.judged["redelivered-after-ack"] += 1
        if ack.cumulative:
            if ack.sub not in prefixes:
                prefixes[ack.sub] = _Prefix(view, ack.sub)
            again = prefixes[ack.sub].after(ack.id, effective)
        else:
            again = [
                (message, d)
                for message in view.covered(ack)
                for d in view.delivered(ack.sub, message.payload)
                if d.op.invoked_at > effective and d.of(message, ack)
            ]
        for message, d in again:
            out.add(
                "redelivered-after-ack",
                [message.send, ack.op, d.op],
                f"the subscription {how}; receive op {d.op.index}, invoked later at {view.words.at(d.op.invoked_at)}, "
                f"delivered {message.payload!r} at {fmt_id(message.id)} again",
                where=view.words.name(ack.sub),
            )


class _Prefix:
    """One subscription's deliveries of its partition's messages, sorted by the furthest id a
    cumulative ack must cover to cover them (the message's id, and for a message the client may have
    written twice the id of the copy delivered too), with a tree of their invocation times: the
    deliveries a cumulative ack covers that came after a time, in O(log n) each."""

    def __init__(self, view: View, sub: str) -> None:
        partition = view.partition_of(sub)
        rank = {m.payload: k for k, m in enumerate(view.sends_by_partition.get(partition, ()))}
        rows: list[tuple[MessageId, tuple[int, int], Message, Delivery]] = []
        for order, d in enumerate(view.deliveries.get(sub, ())):
            message = view.messages.get(d.payload)
            if message is None or message.id is None or message.partition != partition:
                continue
            key = max(message.id, d.id) if message.repeatable and d.id is not None else message.id
            rows.append((key, (rank[message.payload], order), message, d))
        rows.sort(key=lambda row: row[0])
        self.rows = rows
        self.keys = [row[0] for row in rows]
        self.calls = MaxTree([row[3].op.invoked_at for row in rows])

    def after(self, acked: MessageId, after: int) -> list[tuple[Message, Delivery]]:
        """The deliveries a cumulative ack of ``acked`` covers, by receives invoked after ``after``,
        in send order of their messages, then by invocation."""
        furthest = cumulative_reach(acked)
        k = bisect.bisect_right(self.keys, furthest)
        found = sorted((self.rows[i] for i in self.calls.above(0, k, after)), key=lambda row: row[1])
        return [(message, d) for _, _, message, d in found]


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
    indexes: dict[str, _GoneBy] = {}
    for ack in view.acks:
        if ack.txn is None or ack.cumulative or ack.op.completed_at is None or not view.judged(ack.sub):
            continue
        if ack.op.completed_at > view.open_until(ack.txn):
            continue
        aborted = view.aborted_by(ack.txn)
        if aborted is None:
            continue
        by, how = aborted
        if ack.sub not in indexes:
            indexes[ack.sub] = _GoneBy(view, ack.sub)
        index = indexes[ack.sub]
        for message in view.covered(ack):
            if message.deliver_at is not None or index.deleted_otherwise(ack, message):
                continue
            again = min(
                (
                    d.op.invoked_at
                    for d in view.delivered(ack.sub, message.payload)
                    if d.op.invoked_at >= ack.op.completed_at
                ),
                default=INF,
            )
            witness = index.went_past(by)
            if witness is None:
                continue
            at, op, what = witness
            out.judged["missing-abort-redelivery"] += 1
            if again < at or view.blind(ack.sub, at, ack.op.invoked_at) is not None:
                continue
            if index.taken_over(ack, message, by, at):
                continue
            came = (
                "it never came again"
                if again == INF
                else f"it came again only at {view.words.at(again)}, {seconds(again - by)} after the abort"
            )
            out.add(
                "missing-abort-redelivery",
                [message.send, ack.op, op],
                f"{fmt_txn(ack.txn)} acked {message.payload!r} at {fmt_id(message.id)} (op {ack.op.index}) and was "
                f"aborted ({how}); receive op {op.index}, invoked at {view.words.at(at)}, {what}, and the message had "
                f"not been delivered again: {came}, bound {seconds(REDELIVERY_BOUND_MS)}",
                where=view.words.name(ack.sub),
                late_ms=None if again == INF else max(0, int(again - by) - REDELIVERY_BOUND_MS),
                bound_ms=REDELIVERY_BOUND_MS,
            )


class _TakeOvers:
    """A subscription's cumulative transactional acks, each keyed by its
    :func:`~invariants.analysis.cumulative_reach`, for one question: did some ack that landed by
    ``at``, of a reach at least the message id ``key``, of a txn other than ``txn``, have ``w`` (from
    when its txn is taken to have held or taken the message) of at least ``by``.  A segment tree over
    the acks in landing order; each node is a :class:`~invariants.ordered.PrefixBest` over its acks by
    reach, largest first: O(log n) nodes per question, one bisection each."""

    def __init__(self, acks: list[tuple[int, tuple[float, ...], float, Txn]]) -> None:
        rows = sorted(acks)
        self._landed = [row[0] for row in rows]
        size = 1
        while size < len(rows):
            size *= 2
        self._size = size
        members: list[list[tuple[tuple[float, ...], float, Txn]]] = [[] for _ in range(2 * size)]
        for i, (_, key, w, txn) in enumerate(rows):
            members[size + i] = [(key, w, txn)]
        for node in range(size - 1, 0, -1):
            members[node] = members[2 * node] + members[2 * node + 1]
        # a reach negated, so that "a reach at least the key" is a prefix of the node's acks
        self._nodes = [PrefixBest([(_negated(key), w, txn, None) for key, w, txn in group]) for group in members]

    def any(self, at: float, key: tuple[float, ...], by: float, txn: Txn | None) -> bool:
        negated = _negated(key)
        lo, hi = self._size, self._size + bisect.bisect_right(self._landed, at)  # landed by ``at``

        def found(node: int) -> bool:
            best = self._nodes[node].best(negated, exclude=txn)
            return best is not None and best[0] >= by

        while lo < hi:
            if lo & 1:
                if found(lo):
                    return True
                lo += 1
            if hi & 1:
                hi -= 1
                if found(hi):
                    return True
            lo //= 2
            hi //= 2
        return False


def _negated(key: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(-x for x in key)


class _GoneBy:
    """What ``missing-abort-redelivery`` asks of one subscription, each in O(log n): whether another
    ack may have deleted a message on the cursor, and the first receive that shows the consumer went
    past what an abort redelivered."""

    def __init__(self, view: View, sub: str) -> None:
        self.view = view
        # Acks that may have deleted a message on the cursor (plain, or of a txn that did not
        # certainly abort): individual ones by entry, and the furthest any cumulative one covers.
        self.individual: dict[tuple[int, int], list[Ack]] = defaultdict(list)
        self.furthest: tuple[float, ...] = (-INF,)
        # every transactional individual ack, by entry: one may hold a message an abort gave back
        self.held: dict[tuple[int, int], list[Ack]] = defaultdict(list)
        for other in view.acks_by_sub.get(sub, ()):
            if other.txn is not None and not other.cumulative:
                self.held[other.id[:2]].append(other)
            if other.txn is not None and view.aborted_by(other.txn) is not None:
                continue
            if other.cumulative:
                self.furthest = max(self.furthest, cumulative_reach(other.id))
            else:
                self.individual[other.id[:2]].append(other)
        self._takeovers: _TakeOvers | None = None  # built on the first question (only violations ask)
        # PA-10 (a subscribe that names no type is Exclusive); unknown when no subscribe is recorded
        recorded = any(isinstance(op.args, dict) for op in view.subscribes.get(sub, ()))
        self.cumulative_honoured = recorded and not view.ignores_cumulative(sub)
        empty = sorted(view.empty.get(sub, ()), key=lambda op: (op.invoked_at, op.index))
        self.empty_calls = [op.invoked_at for op in empty]
        self.empty = empty
        # An Exclusive consumer gets what an abort redelivers ahead of anything dispatched later:
        # deliveries of messages sent at a known time, by that time, with the first of each suffix.
        self.send_calls: list[int] = []
        self.first_after: list[tuple[int, int, Delivery, Message] | None] = [None]
        if view.exclusive(sub):
            later = sorted(
                (
                    (m.send.invoked_at, d, m)
                    for d in view.deliveries.get(sub, ())
                    if (m := view.messages.get(d.payload)) is not None and m.deliver_at is None
                ),
                key=lambda row: row[0],
            )
            self.send_calls = [row[0] for row in later]
            self.first_after = [None] * (len(later) + 1)
            for k in range(len(later) - 1, -1, -1):
                _, d, m = later[k]
                nxt = self.first_after[k + 1]
                mine = (d.op.invoked_at, d.op.index, d, m)
                self.first_after[k] = mine if nxt is None or mine[:2] < nxt[:2] else nxt

    def deleted_otherwise(self, ack: Ack, message: Message) -> bool:
        """Another ack on the subscription may have deleted ``message`` on the cursor: a plain ack, or
        an ack of a txn that did not certainly abort.  The cursor wins over a pending ack (PA-11, and a
        committed cumulative range, PA-6), and what it deleted is not redelivered by an abort."""
        assert message.id is not None
        if self.furthest >= message.id:
            return True
        return any(
            other is not ack and covers(other.id, False, message.id)
            for other in self.individual.get(message.id[:2], ())
        )

    def taken_over(self, ack: Ack, message: Message, by: float, at: int) -> bool:
        """Another txn's cumulative ack covering ``message`` took it over from the abort: it landed
        before the receive at ``at`` that went past, and its txn held it at the abort (certainly
        open by ``by``) or took it after (invoked from ``by`` on).  A cumulative pending ack does
        not lock what an individual ack holds (PA-6), so from then on the message is pending in
        that txn: the abort's redelivery is filtered, or a copy it queued is covered by the
        client's own cumulative ack, and that txn's abort just clears its slot with no redelivery
        (PA-13: the client must ask).  Not on a Shared or Key_Shared subscription, where the broker
        ignores a cumulative ack (PA-10).  O(log^2 n) per question (:class:`_TakeOvers`)."""
        assert message.id is not None
        if self._held_again(ack, message, by, at):
            return True
        if not self.cumulative_honoured:
            return False
        if self._takeovers is None:
            self._takeovers = _TakeOvers(
                [
                    (
                        other.op.completed_at,
                        cumulative_reach(other.id),
                        max(other.op.invoked_at, self.view.open_until(other.txn)),
                        other.txn,
                    )
                    for other in self.view.acks_by_sub.get(ack.sub, ())
                    if other.cumulative and other.txn is not None and other.op.completed_at is not None
                ]
            )
        return self._takeovers.any(at, message.id, by, ack.txn)

    def _held_again(self, ack: Ack, message: Message, by: float, at: int) -> bool:
        """Another txn's individual ack of ``message`` took it after the abort: invoked from ``by``
        on (before it the message was held by the aborting txn, and an ack of it would conflict,
        PA-5) and landed, or may have, before the receive at ``at``.  The message is then pending in
        that txn and the abort's redelivery skips it; and an ack that reached the subscription after
        its own txn's abort holds it until the low watermark passes that txn there (PA-14), which
        may never come.  O(acks of the message's entry) per question."""
        assert message.id is not None
        for other in self.held.get(message.id[:2], ()):
            if other.txn == ack.txn or other is ack or not covers(other.id, False, message.id):
                continue
            landed = other.op.invoked_at if other.op.type.indeterminate else other.op.completed_at
            if landed is not None and landed <= at and other.op.invoked_at >= by:
                return True
        return False

    def went_past(self, by: float) -> tuple[int, Operation, str] | None:
        """The first receive (by invocation, then index) that shows the consumer went past what an
        abort done by ``by`` redelivered: an empty one invoked REDELIVERY_BOUND_MS later, or on an
        Exclusive subscription one of a message sent after ``by``; with what it did, in words."""
        k = bisect.bisect_left(self.empty_calls, by + REDELIVERY_BOUND_MS)
        empty = self.empty[k] if k < len(self.empty) else None
        later = self.first_after[bisect.bisect_right(self.send_calls, by)]
        if later is not None and (empty is None or later[:2] < (empty.invoked_at, empty.index)):
            _, _, d, m = later
            return d.op.invoked_at, d.op, f"returned {d.payload!r}, sent after that (op {m.send.index})"
        if empty is None:
            return None
        return empty.invoked_at, empty, f"found nothing (invoked {seconds(empty.invoked_at - by)} after the abort)"


def pending_ack_without_ack(view: View, out: Collector) -> None:
    """PA-21: the admin check answers PendingAck only for a position a transaction holds by an
    individual ack on that subscription, so some transactional ``ack`` of it (ok, or of unknown
    outcome) was invoked there before the answer came back."""
    candidates: dict[tuple[str, tuple[int, int]], list[tuple[Operation, MessageId]]] = defaultdict(list)
    for ack in view.acks:
        if ack.txn is not None and not ack.cumulative:
            candidates[(ack.sub, ack.id[:2])].append((ack.op, ack.id))
    for op in view.unsure_acks:
        args = object_of(op)
        if txn_of(op, args) is not None:
            acked = message_id(op, args, "value")
            candidates[(op.object, acked[:2])].append((op, acked))
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
            ack.invoked_at < done and (acked[2] == asked[2] or WHOLE in (acked[2], asked[2]))
            for ack, acked in candidates.get((op.object, asked[:2]), ())
        ):
            continue
        out.add(
            "pending-ack-without-ack",
            [op],
            f"check_position_in_pending_ack op {op.index} answered PendingAck for {fmt_id(asked)}, but no "
            f"transactional ack of it was invoked on that subscription before the answer at {view.words.at(done)}",
            where=view.words.name(op.object),
        )


# The admin check's answers that say no transaction holds the position.  PendingAckNotReady is not
# among them: the handle may be recovering, whatever it holds.
_NOT_HELD = frozenset({"MarkDelete", "NotInPendingAck", "InvalidPosition"})


def missing_pending_ack(view: View, out: Collector) -> None:
    """PA-21, the other way round: the admin check answered MarkDelete, NotInPendingAck or
    InvalidPosition for a position that a transaction certainly still held there.  A transactional
    individual ack of exactly that id (entry and batch index) returned ok before the check was
    invoked (at the same instant, by the same process), and the answer came back while that
    transaction was certainly open (no commit or abort of it invoked, its timeout, counted from the
    ``new_txn`` invocation, not run out): the pending ack holds what an open transaction acknowledged
    individually until the transaction ends (PA-1, PA-12 .. PA-14), the position is above the
    mark-delete position while it is held, and an id a transaction acknowledged is a valid one.  Not
    judged when something else may have moved the cursor past it in the meantime: a plain ack of that
    entry, or a seek, unsubscribe or cumulative ack on the subscription, invoked before the answer
    came back."""
    held: dict[tuple[str, tuple[int, int]], list[tuple[Operation, MessageId, Txn]]] = defaultdict(list)
    for a in view.acks:
        if a.txn is not None and not a.cumulative and a.op.type is OpType.OK and a.op.completed_at is not None:
            held[(a.sub, a.id[:2])].append((a.op, a.id, a.txn))
    if not held:
        return
    # Whatever else may move the cursor, ok or of unknown outcome: plain acks of an entry (their
    # invocations, sorted), and the earliest seek, unsubscribe or cumulative ack of each subscription.
    plain: dict[tuple[str, tuple[int, int]], list[int]] = defaultdict(list)
    moved: dict[str, int] = {}
    for a in view.acks:
        if a.txn is None and not a.cumulative:
            plain[(a.sub, a.id[:2])].append(a.op.invoked_at)
    for op in view.unsure_acks:
        args = object_of(op)
        if txn_of(op, args) is None:
            plain[(op.object, message_id(op, args, "value")[:2])].append(op.invoked_at)
    for calls in plain.values():
        calls.sort()
    for op in view.client:
        if op.f in ("seek", "unsubscribe", "ack_cumulative") and op.type is not OpType.FAIL:
            moved[op.object] = min(moved.get(op.object, op.invoked_at), op.invoked_at)
    for op in view.queries:
        if op.f != "check_position_in_pending_ack" or op.type is not OpType.OK or op.completed_at is None:
            continue
        state = object_of(op, "result").get("state")
        if state not in _NOT_HELD:
            continue
        asked = message_id(op, object_of(op), "value")
        done = op.completed_at
        holders = [
            (ack, txn)
            for ack, acked, txn in held.get((op.object, asked[:2]), ())
            if acked == asked
            and ack.completed_at is not None
            # returned before the check was invoked; at the same instant only in one process's order
            and (ack.completed_at < op.invoked_at or (ack.completed_at == op.invoked_at and ack.process == op.process))
            and done < view.open_until(txn)
        ]
        if not holders:
            continue
        first = min(holder.invoked_at for holder, _ in holders)
        calls = plain.get((op.object, asked[:2]), [])
        k = bisect.bisect_left(calls, first)
        if (k < len(calls) and calls[k] < done) or moved.get(op.object, INF) < done:
            continue
        out.judged["missing-pending-ack"] += 1
        holder, txn = holders[0]
        out.add(
            "missing-pending-ack",
            [holder, op],
            f"check_position_in_pending_ack op {op.index} answered {state} for {fmt_id(asked)} at "
            f"{view.words.at(done)}, but {fmt_txn(txn)} (still open then) had acknowledged it there by "
            f"ack op {holder.index}, which returned ok at {view.words.end(holder)}: the pending ack holds it",
            where=view.words.name(op.object),
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
        calls = [d.op.invoked_at for d in deliveries]  # deliveries are in invocation order
        for k, seek in enumerate(mine):
            at = object_of(seek).get("publish_time")
            if type(at) is not int:
                raise bad(seek, f"'publish_time' must be an integer, got {at!r}")
            until = mine[k + 1].invoked_at if k + 1 < len(mine) else INF
            assert seek.completed_at is not None
            i = bisect.bisect_left(calls, seek.completed_at)
            if i == len(deliveries) or deliveries[i].op.invoked_at >= until:
                continue
            first = deliveries[i]
            out.judged["delivered-before-seek-time"] += 1
            message = view.messages.get(first.payload)
            if message is None or message.send.completed_at is None or message.send.completed_at >= at:
                continue
            w = view.words
            out.add(
                "delivered-before-seek-time",
                [seek, first.op, message.send],
                f"seek op {seek.index} to publish time {w.at(at)} returned at {w.end(seek)}; the first delivery after "
                f"it, receive op {first.op.index}, was {message.payload!r}, whose send (op {message.send.index}) had "
                f"completed at {w.end(message.send)}, {seconds(at - message.send.completed_at)} before that time",
                where=w.name(sub),
            )
