"""When a message may and must be visible: not while a transaction with an earlier entry on its
partition is certainly open (maxReadPosition holds it back), soon once it is readable and due, and
never as the last message id while it cannot be dispatched.  One function per check, each reading
the :class:`~invariants.client_visible.view.View`."""

from __future__ import annotations

import bisect
import itertools
import weakref
from collections import defaultdict

from invariants.client_visible.view import INF, Message, Txn, View, fmt_id, fmt_txn, message_id, object_of
from invariants.client_visible.violation import Collector
from invariants.ordered import MaxTree, PrefixBest
from invariants.words import seconds
from spec.history import Operation, OpType, parse_object, split_subscription

__all__ = ["early_visibility", "late_visibility", "undispatchable_last_id"]


def early_visibility(view: View, out: Collector) -> None:
    """TB-7, TB-15: nothing at or after the first entry of an ongoing txn is dispatched.  A txn
    certainly open for the whole of a receive held maxReadPosition before its first entry.

    Each partition's txns are sorted by their first entry, with how long each was certainly open
    (:class:`~invariants.ordered.MaxTree`): the first txn before a delivery that was still open when
    it completed is one search."""
    by_partition: dict[str, list[str]] = defaultdict(list)
    for sub in view.deliveries:
        by_partition[view.partition_of(sub)].append(sub)
    for partition, sent in view.sends_by_partition.items():
        # each txn's first entry on the partition (of its sends that returned a position)
        first: dict[Txn, Message] = {}
        for m in sent:
            if m.txn is not None and m.id is not None and (m.txn not in first or m.id < first[m.txn].id):  # type: ignore[operator]
                first[m.txn] = m
        holders = sorted(((m.id[:2], txn, m) for txn, m in first.items() if m.id is not None), key=lambda x: x[0])
        if not holders:
            continue
        keys = [h[0] for h in holders]
        place = {txn: k for k, (_, txn, _) in enumerate(holders)}
        until = [view.open_until(txn) for _, txn, _ in holders]
        latest = list(itertools.accumulate(until, max))
        open_for = MaxTree(until)
        for sub in by_partition.get(partition, ()):
            for d in view.deliveries[sub]:
                message = view.messages.get(d.payload)
                if message is None or message.id is None or d.op.completed_at is None:
                    continue
                at = d.id if message.repeatable and d.id is not None else message.id  # the copy delivered
                out.judged["early-visibility"] += 1
                k = bisect.bisect_left(keys, at[:2])
                if k == 0 or latest[k - 1] <= d.op.completed_at:
                    continue  # every txn before it may have ended by then
                found = open_for.leftmost_above(0, k, d.op.completed_at)
                if found is not None and message.txn is not None and found == place.get(message.txn):
                    found = open_for.leftmost_above(found + 1, k, d.op.completed_at)
                if found is None:
                    continue
                entry, txn, head = holders[found]
                w = view.words
                out.add(
                    "early-visibility",
                    [head.send, d.op],
                    f"receive op {d.op.index} delivered {d.payload!r} at {fmt_id(message.id)} by "
                    f"{w.at(d.op.completed_at)}, while {fmt_txn(txn)}, whose entry {entry[0]}:{entry[1]} comes before "
                    f"it (send op {head.send.index}), was certainly still open (until {w.at(view.open_until(txn))}): "
                    f"maxReadPosition stays before an ongoing txn's first entry",
                    where=w.name(sub),
                )


def late_visibility(view: View, out: Collector) -> None:
    """A readable, due message is dispatched to a consumer that asks (TB-19: visible once nothing
    before it is open; TB-24 across a recovery; DD-1, DD-25 once due): an empty receive
    LAG_BOUND_MS after that is a lag.  A receive that recorded its wait counts from the end of the
    wait (:func:`_gave_up_by`): a due message reaches a consumer waiting in a receive without its
    asking again (DD-25's timer makes the dispatcher read), so a wait that ends empty LAG_BOUND_MS
    after the message was due is a lag even though the receive began before it.

    Per message only the first empty receive past the bound needs judging: whatever excuses it (a
    receive or subscribe of unknown outcome before it, a transactional send of unknown outcome
    before it, an earlier delivery) excuses every later one too.  The bound is the subscription's
    (:meth:`View.lag_bound`: what a recorder stated, else LAG_BOUND_MS)."""
    for sub, empties in view.empty.items():
        if not view.judged(sub):
            continue
        bound = view.lag_bound(sub)
        readable = _Readable.of(view, view.partition_of(sub))
        latest = view.latest_from(sub)
        delivered_at: dict[str, int] = {}
        for d in view.deliveries.get(sub, ()):
            delivered_at.setdefault(d.payload, d.op.invoked_at)
        ordered = sorted(empties, key=lambda o: (_gave_up_by(o), o.index))
        starts = [_gave_up_by(o) for o in ordered]
        for k, message in enumerate(readable.sent):
            if latest is not None and message.send.invoked_at < latest:
                continue
            if message.txn is not None and view.committed_at(message.txn) is None:
                continue
            got = readable.at(k, sub)
            if got is None:
                continue
            at, why = got
            i = bisect.bisect_left(starts, at + bound)
            if i == len(ordered):
                continue
            empty = ordered[i]
            t = starts[i]
            if t > readable.first_unknown_txn_send or view.blind(sub, t, view.dispatchable_from(message)) is not None:
                continue
            out.judged["late-visibility"] += 1
            if delivered_at.get(message.payload, INF) < t:
                continue
            w = view.words
            waited = "" if t == empty.invoked_at else f" and waiting until at least {w.at(t)}"
            came = delivered_at.get(message.payload)
            out.add(
                "late-visibility",
                [message.send, empty],
                f"{message.payload!r} at {fmt_id(message.id)} was readable by {w.at(at)} ({why}); receive op "
                f"{empty.index}, invoked at {w.at(empty.invoked_at)}{waited}, {seconds(t - at)} later, found nothing, "
                f"and the subscription had not received it: "
                + (f"first received at {w.at(came)}" if came is not None else "never received")
                + f", bound {seconds(bound)}",
                where=w.name(sub),
                late_ms=None if came is None else max(0, int(came - at) - bound),
                bound_ms=bound,
            )


class _Readable:
    """When each message of a partition was certainly readable at the broker, computed once per
    partition: its send completed, its txn committed, and every other txn with an entry before it
    ended (:meth:`View.ended_by`).  The last of those ends before each message is a prefix maximum
    over the messages in id order (:class:`~invariants.ordered.PrefixBest`), its own txn left out;
    the reason names that txn."""

    def __init__(self, view: View, partition: str) -> None:
        # The view keeps this (View.once): a strong reference back would make the view, millions of
        # objects for a long history, garbage only a cyclic collection frees (invariants.heap).
        self.view: View = weakref.proxy(view)
        sent = view.sends_by_partition.get(partition, ())
        self.sent = sorted((m for m in sent if m.id is not None), key=lambda m: m.id)  # type: ignore[arg-type, return-value]
        self.first_unknown_txn_send = min(
            (m.send.invoked_at for m in sent if m.txn is not None and m.send.type.indeterminate), default=INF
        )
        ends: list[tuple[int, float, Txn | None, tuple[Message, str]]] = []
        unended: list[tuple[int, float, Txn | None, tuple[Message, str]]] = []
        for k, m in enumerate(self.sent):
            if m.txn is None:
                continue
            ended = view.ended_by(m.txn)
            if ended is None:
                unended.append((k, 0.0, m.txn, (m, "")))
            else:
                ends.append((k, ended[0], m.txn, (m, ended[1])))
        self.ends = PrefixBest(ends)
        self.unended = PrefixBest(unended)
        self.cache: dict[int, tuple[float, str] | None] = {}

    @staticmethod
    def of(view: View, partition: str) -> _Readable:
        """The partition's, built on first use."""
        return view.once("readable", partition, lambda: _Readable(view, partition))

    def at(self, k: int, sub: str) -> tuple[float, str] | None:
        """When ``self.sent[k]`` was certainly readable and due on ``sub`` (None: not certainly ever), and why."""
        if k not in self.cache:
            self.cache[k] = self._readable(k)
        got = self.cache[k]
        if got is None:
            return None
        at, why = got
        message = self.sent[k]
        if message.deliver_at is not None and self.view.delays(sub) and message.deliver_at > at:
            at = message.deliver_at
            why += f", due at {self.view.words.at(message.deliver_at)}"
        return at, why

    def _readable(self, k: int) -> tuple[float, str] | None:
        message = self.sent[k]
        if message.send.completed_at is None:
            return None
        at = float(message.send.completed_at)
        why = f"sent by op {message.send.index} (done at {self.view.words.end(message.send)})"
        if message.txn is not None:
            done = self.view.committed_at(message.txn)
            if done is None:
                return None
            at = max(at, done)
            why += f", {fmt_txn(message.txn)} committed by {self.view.words.at(done)}"
        if self.unended.best(k, exclude=message.txn, inclusive=False) is not None:
            return None  # a txn with an entry before it may never have ended
        latest = self.ends.best(k, exclude=message.txn, inclusive=False)
        if latest is not None and latest[0] > at:
            other, ended = latest[1]
            at = latest[0]
            why += f", {fmt_txn(other.txn)} (entry {fmt_id(other.id)} before it) {ended}"
        return at, why


def _gave_up_by(receive: Operation) -> int:
    """The latest moment an empty receive certainly found nothing: its invocation, or with a
    recorded wait (``timeout_ms``) that long after it -- the broker had the request from its
    arrival, at or after the invocation, and answered nothing only once the wait was over (DD-25:
    a message falling due meanwhile is dispatched to the waiting consumer).  The completion is no
    bound: the answer may have been delayed on its way back."""
    wait = receive.args.get("timeout_ms") if isinstance(receive.args, dict) else None
    return receive.invoked_at + wait if type(wait) is int and wait > 0 else receive.invoked_at


def undispatchable_last_id(view: View, out: Collector) -> None:
    """TB-18: the last message id is the last *dispatchable* position, found by scanning back from
    maxReadPosition, so it is never an entry of a transaction that was still open when the answer
    left (its commit not yet invoked: maxReadPosition stays before its first entry, TB-7) nor of one
    that had certainly aborted before the question (an aborted entry is skipped by the scan)."""
    for op in view.queries:
        if op.f != "get_last_message_id" or op.type is not OpType.OK or op.completed_at is None:
            continue
        partition, _ = split_subscription(parse_object(op.object)[1])
        got = message_id(op, object_of(op, "result"), "result")
        out.judged["undispatchable-last-id"] += 1
        for message in view.by_entry.get((partition, got[:2]), ()):
            if message.txn is None:
                continue
            aborted = view.aborted_by(message.txn)
            if view.dispatchable_from(message) > op.completed_at:
                why = f"no commit of {fmt_txn(message.txn)} was invoked before the answer at {view.words.end(op)}"
            elif aborted is not None and aborted[0] <= op.invoked_at:
                why = f"{fmt_txn(message.txn)} had certainly aborted by {view.words.at(aborted[0])} ({aborted[1]})"
            else:
                continue
            out.add(
                "undispatchable-last-id",
                [op, message.send],
                f"get_last_message_id op {op.index} answered {fmt_id(got)}, the entry of {message.payload!r} (send op "
                f"{message.send.index}), but {why}: the last message id is the last dispatchable position",
                where=view.words.name(op.object),
            )
            break
