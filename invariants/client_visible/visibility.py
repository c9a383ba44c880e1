"""When a message may and must be visible: not while a transaction with an earlier entry on its
partition is certainly open (maxReadPosition holds it back), soon once it is readable and due, and
never as the last message id while it cannot be dispatched.  One function per check, each reading
the :class:`~invariants.client_visible.view.View`."""

from __future__ import annotations

import bisect

from invariants.client_visible.bounds import LAG_BOUND_MS
from invariants.client_visible.view import INF, Message, Txn, View, fmt_id, fmt_txn, message_id, object_of
from invariants.client_visible.violation import Collector
from spec.history import Operation, OpType, parse_object, split_subscription

__all__ = ["early_visibility", "late_visibility", "undispatchable_last_id"]


def early_visibility(view: View, out: Collector) -> None:
    """TB-7, TB-15: nothing at or after the first entry of an ongoing txn is dispatched.  A txn
    certainly open for the whole of a receive held maxReadPosition before its first entry."""
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
        for sub, got in view.deliveries.items():
            if split_subscription(parse_object(sub)[1])[0] != partition:
                continue
            for d in got:
                message = view.messages.get(d.payload)
                if message is None or message.id is None or d.op.completed_at is None:
                    continue
                at = d.id if message.repeatable and d.id is not None else message.id  # the copy delivered
                out.judged["early-visibility"] += 1
                for entry, txn, head in holders[: bisect.bisect_left(keys, at[:2])]:
                    if txn == message.txn:
                        continue
                    if d.op.completed_at < view.open_until(txn):
                        out.add(
                            "early-visibility",
                            [head.send, d.op],
                            f"{sub}: receive op {d.op.index} delivered {d.payload!r} at {fmt_id(message.id)} by "
                            f"{d.op.completed_at}, while {fmt_txn(txn)}, whose entry {entry[0]}:{entry[1]} comes "
                            f"before it (send op {head.send.index}), was certainly still open (until "
                            f"{view.open_until(txn):g}): maxReadPosition stays before an ongoing txn's first entry",
                        )
                        break


def late_visibility(view: View, out: Collector) -> None:
    """A readable, due message is dispatched to a consumer that asks (TB-19: visible once nothing
    before it is open; TB-24 across a recovery; DD-1, DD-25 once due): an empty receive
    LAG_BOUND_MS after that is a lag.  A receive that recorded its wait counts from the end of the
    wait (:func:`_gave_up_by`): a due message reaches a consumer waiting in a receive without its
    asking again (DD-25's timer makes the dispatcher read), so a wait that ends empty LAG_BOUND_MS
    after the message was due is a lag even though the receive began before it.

    Per message only the first empty receive past the bound needs judging: whatever excuses it (a
    receive or subscribe of unknown outcome before it, a transactional send of unknown outcome
    before it, an earlier delivery) excuses every later one too."""
    for sub, empties in view.empty.items():
        if not view.judged(sub):
            continue
        partition, _ = split_subscription(parse_object(sub)[1])
        sent = sorted((m for m in view.sends_by_partition.get(partition, ()) if m.id is not None), key=lambda m: m.id)  # type: ignore[arg-type, return-value]
        first_unknown_txn_send = min(
            (
                m.send.invoked_at
                for m in view.sends_by_partition.get(partition, ())
                if m.txn is not None and m.send.type.indeterminate
            ),
            default=INF,
        )
        latest = view.latest_from(sub)
        delivered_at: dict[str, int] = {}
        for d in view.deliveries.get(sub, ()):
            delivered_at.setdefault(d.payload, d.op.invoked_at)
        ordered = sorted(empties, key=lambda o: (_gave_up_by(o), o.index))
        starts = [_gave_up_by(o) for o in ordered]
        for k, message in enumerate(sent):
            if latest is not None and message.send.invoked_at < latest:
                continue
            if message.txn is not None and view.committed_at(message.txn) is None:
                continue
            got = _readable_at(view, message, sent[:k], sub)
            if got is None:
                continue
            at, why = got
            i = bisect.bisect_left(starts, at + LAG_BOUND_MS)
            if i == len(ordered):
                continue
            empty = ordered[i]
            t = starts[i]
            if t > first_unknown_txn_send or view.blind(sub, t, view.dispatchable_from(message)) is not None:
                continue
            out.judged["late-visibility"] += 1
            if delivered_at.get(message.payload, INF) < t:
                continue
            waited = "" if t == empty.invoked_at else f" and waiting until at least {t}"
            out.add(
                "late-visibility",
                [message.send, empty],
                f"{sub}: {message.payload!r} at {fmt_id(message.id)} was readable by {at:g} ({why}); "
                f"receive op {empty.index}, invoked at {empty.invoked_at}{waited}, {t - at:g} ms later "
                f"(bound {LAG_BOUND_MS}), found nothing, and {sub} had not received it",
            )


def _readable_at(view: View, message: Message, before: list[Message], sub: str) -> tuple[float, str] | None:
    """When ``message`` was certainly readable and due on ``sub`` (None: not certainly ever), and why."""
    assert message.id is not None
    if message.send.completed_at is None:
        return None
    at = float(message.send.completed_at)
    why = f"sent by op {message.send.index} (done at {message.send.completed_at})"
    if message.txn is not None:
        done = view.committed_at(message.txn)
        if done is None:
            return None
        at = max(at, done)
        why += f", {fmt_txn(message.txn)} committed by {done}"
    for other in before:
        txn = other.txn
        if txn is None or txn == message.txn:
            continue
        ended = view.ended_by(txn)
        if ended is None:
            return None
        if ended[0] > at:
            at = ended[0]
            why += f", {fmt_txn(txn)} (entry {fmt_id(other.id)} before it) {ended[1]}"
    if message.deliver_at is not None and view.delays(sub) and message.deliver_at > at:
        at = message.deliver_at
        why += f", due at {message.deliver_at}"
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
        for message in view.sends_by_partition.get(partition, ()):
            if message.txn is None or message.id is None or message.id[:2] != got[:2]:
                continue
            aborted = view.aborted_by(message.txn)
            if view.dispatchable_from(message) > op.completed_at:
                why = f"no commit of {fmt_txn(message.txn)} was invoked before the answer at {op.completed_at}"
            elif aborted is not None and aborted[0] <= op.invoked_at:
                why = f"{fmt_txn(message.txn)} had certainly aborted by {aborted[0]:g} ({aborted[1]})"
            else:
                continue
            out.add(
                "undispatchable-last-id",
                [op, message.send],
                f"get_last_message_id op {op.index} on {op.object} answered {fmt_id(got)}, the entry of "
                f"{message.payload!r} (send op {message.send.index}), but {why}: the last message id is "
                f"the last dispatchable position",
            )
            break
