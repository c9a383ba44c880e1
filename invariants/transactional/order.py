"""The partition as a log (Elle's list-append object): every delivery names the send it came from
(recoverability), a position holds one message (the version order), sends take positions in real-time
order, and a consumer gets a partition's first deliveries in log order.  One function per anomaly."""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Sequence

from invariants.analysis import WHOLE, Delivery, Message, MessageId, TxnAnalysis, end_or_never
from invariants.transactional.anomaly import Collector, fmt_pos
from spec.history import Operation

__all__ = ["garbage_reads", "inconsistent_positions", "out_of_order_deliveries", "realtime_order"]


def garbage_reads(a: TxnAnalysis, out: Collector) -> None:
    """``garbage-read``: a receive returned a payload that no send of its partition produced
    (payloads are unique, so every delivery names the send it came from: Elle's recoverability).
    The other checks of a delivery are skipped for such a delivery."""
    for d in a.unmatched_deliveries():
        found = a.messages.get(d.payload)
        if found is None or found.partition != d.partition:
            where = (
                ""
                if found is None
                else f" (it was sent to {a.words.name(found.partition)}, not {a.words.name(d.partition)})"
            )
            out.add(
                "garbage-read",
                [d.op],
                f"receive op {d.op.index} returned {d.payload!r} at {a.words.end(d.op)}, "
                f"which no send of this partition produced{where}",
                where=a.words.name(d.subscription),
            )


def inconsistent_positions(a: TxnAnalysis, out: Collector) -> None:
    """``inconsistent-position`` (Adya G0 in this project's table; Elle checks the same thing as an
    inconsistent version order, ``:incompatible-order``): two sends returned one message id (an entry
    holds one message, or one batch at distinct indexes), or a receive delivered a message at an id
    other than the one its send returned.  The id is ``(ledger, entry, batch index)``; positions are
    the version order every order check relies on (TB-17)."""
    for clash, message in a.position_clashes:
        out.add(
            "inconsistent-position",
            [clash.send, message.send],
            f"sends op {clash.send.index} ({clash.payload!r}) and op {message.send.index} ({message.payload!r}) "
            f"both returned position {fmt_pos(clash.position)} and {fmt_pos(message.position)}; a position holds "
            f"one message, or one batch at distinct indexes",
            where=a.words.name(message.partition),
        )
    for d, message in a.delivered():
        if message.repeatable:
            continue  # another copy the client wrote (a resend after a reconnect) has its own position
        if d.position is not None and message.position is not None and d.position != message.position:
            out.add(
                "inconsistent-position",
                [message.send, d.op],
                f"send op {message.send.index} put {d.payload!r} at {fmt_pos(message.position)}, but receive "
                f"op {d.op.index} delivered it at {fmt_pos(d.position)}",
                where=a.words.name(d.subscription),
            )


def realtime_order(a: TxnAnalysis, out: Collector) -> None:
    """``realtime-order`` (Elle's real-time edges, ``:G0-realtime`` and kin under strict
    serializability): a send that completed before another was invoked got a later position on the
    same partition.  Appends take positions in the order they are written (TB-6, TB-9)."""
    by_partition: dict[str, list[Message]] = defaultdict(list)
    for message in a.messages.values():
        if message.position is not None and message.send.completed_at is not None:
            by_partition[message.partition].append(message)
    for partition, group in by_partition.items():
        done = sorted(group, key=lambda m: m.send.completed_at or 0)
        ends = [m.send.completed_at or 0 for m in done]
        # running maximum position among sends completed by each point
        best: list[Message] = []
        for m in done:
            best.append(m if not best or m.position > best[-1].position else best[-1])  # type: ignore[operator]
        for later in group:
            k = bisect.bisect_left(ends, later.send.invoked_at)  # sends that completed strictly before
            if k == 0:
                continue
            earlier = best[k - 1]
            assert earlier.position is not None and later.position is not None
            if earlier.position > later.position:
                out.add(
                    "realtime-order",
                    [earlier.send, later.send],
                    f"send op {earlier.send.index} ({earlier.payload!r}) completed at "
                    f"{a.words.at(earlier.send.completed_at or 0)} before send op {later.send.index} "
                    f"({later.payload!r}) was invoked at {a.words.at(later.send.invoked_at)}, yet got the later "
                    f"position {fmt_pos(earlier.position)} > {fmt_pos(later.position)}",
                    where=a.words.name(partition),
                )


def out_of_order_deliveries(a: TxnAnalysis, out: Collector) -> None:
    """``out-of-order-delivery``: one consumer's first deliveries of a partition went backwards in
    ``(ledger, entry, batch index)`` order.  Dispatch is in log order (TB-17); on Key_Shared per
    sticky key (a batch is routed by its first message's key), on Shared not at all (a message an
    unresponsive consumer held goes to another consumer, after later ones), and delayed messages
    are left out where the broker holds them back (Shared, Key_Shared, or no subscribe recorded).

    Order is judged by the positions the sends returned (the version order); a delivery that
    reports another position is already an inconsistent-position and must not cascade.  "First" is
    judged from the history, not from the broker's redelivery count, which lives in the broker's
    memory and restarts at 0 after a crash: a delivery is first only if no earlier receive on the
    subscription returned the same message, and only while no receive on it has an unknown outcome
    (an ``info`` receive may have taken a message the history never shows, whose later redelivery
    would look like a first delivery out of order).  A seek restarts the order (PA-22, PA-23): the
    deliveries after it are judged apart from those before it, and a delivery whose receive ran
    while a seek was on its way is not judged.
    """
    # (delivery, the position its order is judged at, its sticky key), in history order
    ordered: list[tuple[Delivery, MessageId | None, str | None]] = []
    heads: dict[tuple[str, tuple[int, int]], Message | None] = {}  # each batch entry's first message
    for d in a.deliveries:
        sent = a.messages.get(d.payload)
        if sent is None:
            continue
        sub_kind = a.kind(d.subscription)
        if sub_kind in ("Shared", "mixed") or (sent.deliver_at is not None and sub_kind != "Exclusive"):
            continue
        sticky = None
        if sub_kind == "Key_Shared":
            sticky = _sticky_key(sent, a.by_entry, heads)
            if sticky is None:
                continue
        # Order by the id the send returned (a delivery elsewhere is an inconsistent-position), unless
        # the client may have written the message twice: then each copy is ordered where it is.
        judged_at = d.position if sent.repeatable and d.position is not None else sent.position or d.position
        ordered.append((d, judged_at, sticky))  # at None: judged nowhere, but it was received
    last: dict[tuple[str, int | str, str | None, int], tuple[Delivery, MessageId]] = {}
    membership: dict[str, list[int]] = {}
    seen: dict[str, set[str]] = {}  # subscription -> the payloads received there so far
    blind_from = {sub: min(op.invoked_at for op in ops) for sub, ops in a.unknown_receives.items() if ops}
    seeks = {sub: _Seeks(ops) for sub, ops in a.seeks.items() if ops}
    ordered.sort(key=lambda entry: (entry[0].op.invoked_at, entry[0].op.index))
    for d, position, sticky in ordered:
        got = seen.get(d.subscription)
        if got is None:
            got = seen[d.subscription] = set()
        first_time = d.payload not in got
        got.add(d.payload)
        if position is None or d.redelivery or not first_time:
            continue
        if d.subscription in blind_from and d.op.invoked_at > blind_from[d.subscription]:
            continue
        epoch = 0
        restarts = seeks.get(d.subscription)
        if restarts is not None:
            if restarts.overlaps(d.op.invoked_at, end_or_never(d.op)):
                continue
            epoch = restarts.before(d.op.invoked_at)
        if sticky is not None:
            # Key_Shared: a change of consumers while the message waited for its consumer may have
            # handed it over behind later messages of its key already queued there (the classic
            # dispatcher redelivers a leaving consumer's messages to the key's new owner, whatever
            # that one holds): its order is judged only if it waited through no change.
            changes = membership.get(d.subscription)
            if changes is None:  # once per subscription: it reads every delivery
                changes = membership[d.subscription] = a.membership_changes(d.subscription)
            since = a.dispatchable_from(a.messages[d.payload])
            if bisect.bisect_right(changes, d.op.invoked_at) > bisect.bisect_right(changes, since):
                continue
        # One consumer: its name when the history gives one (a consumer outlives a process that
        # ended 'info'), else its process; and the seeks before (each restarts the order).
        key = (d.subscription, d.op.process if d.consumer is None else d.consumer, sticky, epoch)
        previous = last.get(key)
        if previous is not None and previous[1] >= position:
            before, before_at = previous
            out.add(
                "out-of-order-delivery",
                [before.op, d.op],
                f"consumer {d.consumer or f'(process {d.op.process})'} got {before.payload!r} at "
                f"{fmt_pos(before_at)} (op {before.op.index}) and then, as a first delivery, "
                f"{d.payload!r} at {fmt_pos(position)} (op {d.op.index}); a partition is dispatched in order"
                f"{'' if sticky is None else f' (per sticky key: both have key {sticky!r})'}",
                where=a.words.name(d.subscription),
            )
        last[key] = (d, position)


class _Seeks:
    """The seeks of one subscription, for the two questions order asks of them in O(log n): did one
    run while a receive did, and how many had ended before it began."""

    def __init__(self, seeks: Sequence[Operation]) -> None:
        by_start = sorted(seeks, key=lambda s: s.invoked_at)
        self.starts = [s.invoked_at for s in by_start]
        self.latest_end: list[float] = list(itertools.accumulate((end_or_never(s) for s in by_start), max))
        self.ends = sorted(end_or_never(s) for s in seeks)

    def overlaps(self, start: int, end: float) -> bool:
        """Some seek was invoked by ``end`` and had not ended before ``start``."""
        k = bisect.bisect_right(self.starts, end)
        return k > 0 and self.latest_end[k - 1] >= start

    def before(self, start: int) -> int:
        """How many seeks had ended before ``start``."""
        return bisect.bisect_left(self.ends, start)


def _sticky_key(
    message: Message,
    by_entry: dict[tuple[str, tuple[int, int]], list[Message]],
    heads: dict[tuple[str, tuple[int, int]], Message | None],
) -> str | None:
    """The key Key_Shared routes ``message`` by: its own, or for a batch message the key of the
    batch's first message; None when that message is unknown.  Pulsar's NONE_KEY stands for no key.
    ``heads`` remembers each entry's first message once found."""
    if message.position is None:
        return None
    head = message
    if message.position[2] not in (WHOLE, 0):
        entry = (message.partition, message.position[:2])
        if entry not in heads:
            heads[entry] = next(
                (m for m in by_entry.get(entry, ()) if m.position is not None and m.position[2] == 0), None
            )
        first = heads[entry]
        if first is None:
            return None
        head = first
    return "NONE_KEY" if head.key is None else head.key
