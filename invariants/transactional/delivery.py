"""What reaches a subscription and what an acknowledgement takes away: a committed message that
never arrived on a subscription read to its end, one acked in a committed transaction that arrived
again, and one an aborted transaction acked that was not given back.  One function per anomaly."""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from typing import Any

from invariants.analysis import (
    Ack,
    Delivery,
    Message,
    MessageId,
    Txn,
    TxnAnalysis,
    TxnFate,
    covers,
    cumulative_reach,
    end_or_never,
    latest_start,
    sub_type,
)
from invariants.ordered import MaxTree
from invariants.transactional.anomaly import Collector, fmt_pos, fmt_txn
from invariants.words import seconds
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
    ledger deletion (PA-24).  A Key_Shared subscription one of whose consumers kept a message without
    acknowledging it is not judged: the classic dispatcher holds a consumer that joined after that
    message was read to what was read before it joined until the mark-delete position passes it,
    which the kept message stops for good."""
    out.counts_cases("lost-message")
    fractured = {m.send.index for f in a.fractures for m in (f.seen, f.missing)}
    for view in a.views:
        drain = view.drain
        subscribes = a.subscribes.get(view.subscription, [])
        if drain is None:
            continue
        if any(op.type is OpType.INFO for op in subscribes):
            out.cannot_judge("lost-message", "a subscribe of unknown outcome (a consumer the history never saw)")
            continue
        if a.non_durable(view.subscription):
            out.cannot_judge("lost-message", "a Reader's subscription (durable: false) holds back no deletion")
            continue
        if sub_type(subscribes) == "Key_Shared" and a.held_unacknowledged(view.subscription):
            out.cannot_judge(
                "lost-message", "a Key_Shared consumer kept a message: the others' keys may stall for good"
            )
            continue
        blind_until = max((end_or_never(op) for op in a.unknown_receives.get(view.subscription, ())), default=None)
        latest = latest_start(subscribes)
        for message in a.committed_by_partition.get(view.partition, []):
            if latest is not None and message.send.invoked_at < latest:
                continue  # not owed: sent before a Latest subscription attached
            if message.payload in view.received or (message.txn is not None and message.send.index in fractured):
                out.judge("lost-message")
                continue
            if blind_until is not None and a.dispatchable_from(message) <= blind_until:
                out.cannot_judge("lost-message", "a receive of unknown outcome may have taken it")
                continue
            if message.deliver_at is not None and message.deliver_at > drain.invoked_at:
                out.cannot_judge("lost-message", "a delayed message not yet due when the subscription was drained")
                continue
            out.judge("lost-message")
            why = "" if message.txn is None else f" in {fmt_txn(message.txn)}, committed"
            out.add(
                "lost-message",
                [message.send, drain],
                f"send op {message.send.index} put {message.payload!r} at {fmt_pos(message.position)}{why}; receive "
                f"op {drain.index} found nothing more at {a.words.at(drain.invoked_at)}, after every send and commit "
                f"had completed, and the subscription never received it",
                where=a.words.name(view.subscription),
            )


def duplicates_after_commit(a: TxnAnalysis, out: Collector) -> None:
    """``duplicate-after-commit``: a message acked inside a committed transaction (or covered by its
    cumulative ack) was delivered again to the same subscription by a receive invoked after the
    commit completed.  Committing acknowledges exactly the transaction's pending acks on the cursor
    (PA-12), for a batch index that message only, for a cumulative ack everything up to it (PA-2).

    Each subscription's deliveries are indexed once by the id they are judged at (:class:`_Judged`):
    an individual ack looks up its entry, a cumulative one the deliveries at ids up to its own."""
    judged: dict[str, _Judged] = {}
    for ack in a.acks:
        done = a.commit_done(ack.txn)
        if done is None or done.completed_at is None:
            continue
        index = judged.get(ack.subscription)
        if index is None:
            index = judged[ack.subscription] = _Judged(a, ack.subscription)
        for d, got_id in index.covered_after(ack.position, ack.cumulative, done.completed_at):
            out.add(
                "duplicate-after-commit",
                [ack.op, done, d.op],
                f"acked {fmt_pos(ack.position)}{' cumulatively' if ack.cumulative else ''} in "
                f"{fmt_txn(ack.txn)} (op {ack.op.index}), which committed (op {done.index}, done at "
                f"{a.words.at(done.completed_at)}); receive op {d.op.index}, invoked later at "
                f"{a.words.at(d.op.invoked_at)}, delivered {d.payload!r} at {fmt_pos(got_id)} again",
                where=a.words.name(ack.subscription),
            )


class _Judged:
    """One subscription's deliveries by the id each is judged at: the id its send returned (a
    delivery that reports another is already an inconsistent-position and must not cascade), or,
    for a message the client may have written twice (``deduplicated: false``), the copy delivered.
    Kept in the order the duplicate check reports them (by payload as first received, then in
    delivery order), by entry, and sorted by id with a tree of their invocation times."""

    def __init__(self, a: TxnAnalysis, sub: str) -> None:
        rows: list[tuple[int, Delivery, MessageId]] = []
        for got in a.received.get(sub, {}).values():
            for d in got:
                sent = a.messages.get(d.payload)
                got_id = sent.position if sent is not None and sent.position is not None else d.position
                if sent is not None and sent.repeatable and d.position is not None:
                    got_id = d.position
                if got_id is not None:
                    rows.append((len(rows), d, got_id))
        self.by_entry: dict[tuple[int, int], list[tuple[int, Delivery, MessageId]]] = defaultdict(list)
        for row in rows:
            self.by_entry[row[2][:2]].append(row)
        self.by_id = sorted(rows, key=lambda row: row[2])
        self.ids = [row[2] for row in self.by_id]
        self.calls = MaxTree([row[1].op.invoked_at for row in self.by_id])

    def covered_after(self, acked: MessageId, cumulative: bool, after: int) -> list[tuple[Delivery, MessageId]]:
        """The deliveries an ack of ``acked`` covers whose receive was invoked after ``after``, in
        report order."""
        if cumulative:
            k = bisect.bisect_right(self.ids, cumulative_reach(acked))
            found = [self.by_id[i] for i in self.calls.above(0, k, after)]
        else:
            found = [
                row
                for row in self.by_entry.get(acked[:2], ())
                if row[1].op.invoked_at > after and covers(acked, False, row[2])
            ]
        return [(d, got_id) for _, d, got_id in sorted(found, key=lambda row: row[0])]


def missing_redeliveries(a: TxnAnalysis, out: Collector) -> None:
    """``missing-redelivery`` (liveness under a bound, :data:`REDELIVERY_BOUND_MS`): a message acked
    individually inside a transaction whose abort returned ok was not received again on its
    Exclusive subscription before the consumer went past it.  An abort returns the transaction's
    individual acks to pending and redelivers them, a cumulative ack is just cleared (PA-13); see
    :mod:`invariants.transactional`'s docstring for the bound and what is not judged."""
    out.counts_cases("missing-redelivery")
    indexes: dict[str, _Redelivery] = {}
    for ack in a.acks:
        if ack.cumulative or ack.subscription not in a.exclusive_subscriptions:
            continue
        done = [o for o in a.aborts.get(ack.txn, ()) if o.type is OpType.OK and o.completed_at is not None]
        if not done:
            continue
        abort = min(done, key=lambda o: o.completed_at or 0)
        partition, _ = split_subscription(parse_object(ack.subscription)[1])
        index = indexes.get(ack.subscription)
        if index is None:
            index = indexes[ack.subscription] = _Redelivery(a, ack.subscription)
        for message in a.acked_messages(partition, ack.position):
            if message.deliver_at is not None:
                out.cannot_judge("missing-redelivery", "a delayed message is not redelivered ahead of others")
            elif a.acked_since(ack.subscription, message, -math.inf, outside_txn=True):
                out.judge("missing-redelivery")  # an ack outside the transaction deleted it whenever it came (PA-11)
            elif index.deleted_by_another_txn(ack, message):
                out.cannot_judge("missing-redelivery", "another transaction's ack may have deleted it on the cursor")
            elif index.held_by_cumulative(ack, message, abort):
                out.cannot_judge(
                    "missing-redelivery",
                    "another transaction's cumulative ack covered it when the abort gave it back: the dispatcher holds "
                    "it for that transaction (PA-1), whose own abort gives nothing back (PA-13)",
                )
            elif index.taken_after(ack, message, abort):
                out.cannot_judge(
                    "missing-redelivery",
                    "another transaction acked it after the abort, so it may hold it (one whose ack reached the "
                    "subscription after its own abort holds it until the low watermark passes it there, PA-14)",
                )
            else:
                _missing_redelivery(a, ack, abort, message, index, out)


class _Redelivery:
    """What ``missing-redelivery`` asks of one Exclusive subscription, each in O(log n): whether
    another transaction's ack may have deleted a message, when a message was delivered again, and
    the first receive that shows the consumer went past it."""

    def __init__(self, a: TxnAnalysis, sub: str) -> None:
        # Acks of transactions not certainly aborted: individual ones by entry, and for cumulative
        # ones the two furthest of distinct transactions (the one asking may own the furthest).
        self.individual: dict[tuple[int, int], list[Ack]] = defaultdict(list)
        # every individual ack, aborted or not, by entry: one may hold what an abort gave back
        self.held: dict[tuple[int, int], list[Ack]] = defaultdict(list)
        furthest: list[tuple[tuple[float, ...], Txn]] = []
        # every cumulative ack, whatever its transaction's fate, by invocation: with the two
        # furthest of distinct transactions invoked up to each (see held_by_cumulative)
        cumulative: list[tuple[int, tuple[float, ...], Txn]] = []
        for other in a.acks_by_subscription.get(sub, ()):
            if not other.cumulative:
                self.held[other.position[:2]].append(other)
            else:
                cumulative.append((other.op.invoked_at, cumulative_reach(other.position), other.txn))
            if a.fate(other.txn) is TxnFate.ABORTED:
                continue
            if other.cumulative:
                furthest = _two_furthest(furthest, (cumulative_reach(other.position), other.txn))
            else:
                self.individual[other.position[:2]].append(other)
        self.furthest = furthest
        cumulative.sort(key=lambda row: row[0])
        self.cumulative_calls = [at for at, _, _ in cumulative]
        self.cumulative_upto: list[list[tuple[tuple[float, ...], Txn]]] = []
        best: list[tuple[tuple[float, ...], Txn]] = []
        for _, key, txn in cumulative:
            best = _two_furthest(best, (key, txn))
            self.cumulative_upto.append(best)
        deliveries = a.by_subscription.get(sub, [])
        self.again: dict[MessageId | None, list[int]] = defaultdict(list)
        for d in deliveries:
            self.again[d.position].append(d.op.completed_at or 0)
        for times in self.again.values():
            times.sort()
        # Empty receives by invocation, with the earliest (by when it was over, then index) from each on.
        drains = sorted(a.drains.get(sub, ()), key=lambda o: o.invoked_at)
        self.drain_calls = [o.invoked_at for o in drains]
        self.first_drain = _suffix_min([((o.completed_at or o.invoked_at), o.index, o) for o in drains])
        # Deliveries of messages sent at a known time (not delayed), by that time, likewise.
        overtaking = sorted(
            (
                (later.send.invoked_at, d)
                for d in deliveries
                if (later := a.messages.get(d.payload)) is not None and later.deliver_at is None
            ),
            key=lambda pair: pair[0],
        )
        self.send_calls = [at for at, _ in overtaking]
        self.first_overtaking = _suffix_min(
            [((d.op.completed_at or d.op.invoked_at), d.op.index, d) for _, d in overtaking]
        )
        unknown = sorted(a.unknown_receives.get(sub, ()), key=lambda o: o.invoked_at)
        self.unknown_calls = [o.invoked_at for o in unknown]
        self.unknown_until = list(itertools.accumulate((end_or_never(o) for o in unknown), max))

    def deleted_by_another_txn(self, ack: Ack, message: Message) -> bool:
        """Another transaction's ack on the subscription, of a transaction not certainly aborted, covers
        ``message``: its commit may have deleted the message on the cursor, and the cursor wins over
        this ack (PA-11), so the abort owes no redelivery (seen with a committed cumulative ack
        covering an aborted transaction's batch-index ack)."""
        if message.position is None:
            return False
        if any(
            other is not ack and other.txn != ack.txn and covers(other.position, False, message.position)
            for other in self.individual.get(message.position[:2], ())
        ):
            return True
        return any(txn != ack.txn and key >= message.position for key, txn in self.furthest)

    def held_by_cumulative(self, ack: Ack, message: Message, abort: Operation) -> bool:
        """Another transaction's cumulative ack covering ``message``, invoked before ``abort``
        completed: while it is pending the message lies within the cumulative pending ack, so the
        dispatcher holds the abort's redelivery back (PA-1), and that transaction's own abort gives
        nothing back (PA-13: a cumulative ack is just cleared).  Whether it was still pending when
        the redelivery ran the history cannot say (a timeout's abort shows no client operation)."""
        if message.position is None:
            return False
        k = bisect.bisect_left(self.cumulative_calls, abort.completed_at or abort.invoked_at)
        return k > 0 and any(txn != ack.txn and key >= message.position for key, txn in self.cumulative_upto[k - 1])

    def taken_after(self, ack: Ack, message: Message, abort: Operation) -> bool:
        """Another transaction's individual ack covering ``message`` that returned ok after ``abort``
        was invoked: it may have taken the message once the abort gave it back (before, the two
        would conflict, PA-5), and the abort's redelivery then skips it; that transaction's own
        abort gives it back only if its ack reached the subscription first (PA-13, PA-14)."""
        if message.position is None:
            return False
        return any(
            other.txn != ack.txn
            and (other.op.completed_at or 0) >= abort.invoked_at
            and covers(other.position, False, message.position)
            for other in self.held.get(message.position[:2], ())
        )

    def again_after(self, position: MessageId | None, after: float) -> int | None:
        """When the message at ``position`` was first received again, by a receive that completed after ``after``."""
        times = self.again.get(position, [])
        k = bisect.bisect_right(times, after)
        return times[k] if k < len(times) else None

    def blind(self, by: int, since: float) -> bool:
        """A receive of unknown outcome invoked by ``by`` had not ended before ``since``."""
        k = bisect.bisect_right(self.unknown_calls, by)
        return k > 0 and self.unknown_until[k - 1] >= since


def _two_furthest(
    kept: list[tuple[tuple[float, ...], Txn]], candidate: tuple[tuple[float, ...], Txn]
) -> list[tuple[tuple[float, ...], Txn]]:
    """The two furthest keys of distinct transactions among ``kept`` and ``candidate``."""
    best: dict[Txn, tuple[float, ...]] = {}
    for key, txn in [*kept, candidate]:
        if txn not in best or key > best[txn]:
            best[txn] = key
    return sorted(((key, txn) for txn, key in best.items()), reverse=True)[:2]


def _suffix_min(rows: list[tuple[int, int, Any]]) -> list[tuple[int, int, Any] | None]:
    """For each position, the least row (by its first two fields) from there on; None past the end."""
    out: list[tuple[int, int, Any] | None] = [None] * (len(rows) + 1)
    for k in range(len(rows) - 1, -1, -1):
        after = out[k + 1]
        out[k] = rows[k] if after is None or rows[k][:2] < after[:2] else after
    return out


def _missing_redelivery(
    a: TxnAnalysis,
    ack: Ack,
    abort: Operation,
    message: Message,
    index: _Redelivery,
    out: Collector,
) -> None:
    """One message an aborted transaction acked individually on an Exclusive subscription."""
    sub = ack.subscription
    aborted_at = abort.completed_at or 0
    position = message.position
    ack_done = ack.op.completed_at or ack.op.invoked_at
    back = index.again_after(position, ack_done)
    # The first receive that proves the consumer went past the message: an empty one invoked at
    # least the bound after the abort, or one of a message sent after the abort.
    empty = index.first_drain[bisect.bisect_left(index.drain_calls, aborted_at + REDELIVERY_BOUND_MS)]
    overtaken = index.first_overtaking[bisect.bisect_right(index.send_calls, aborted_at)]
    if empty is None and overtaken is None:
        out.cannot_judge(
            "missing-redelivery",
            "nothing shows the consumer went past it (no empty receive the bound after the abort, no message sent "
            "after it received)",
        )
        return
    w = a.words
    if overtaken is None or (empty is not None and empty[:2] < overtaken[:2]):
        assert empty is not None
        seen_at, witness = empty[0], empty[2]
        why = (
            f"receive op {witness.index}, invoked at {w.at(witness.invoked_at)} ("
            f"{seconds(witness.invoked_at - aborted_at)} after the abort completed), found nothing"
        )
    else:
        seen_at, d = overtaken[0], overtaken[2]
        witness = d.op
        later = a.messages[d.payload]
        why = (
            f"receive op {witness.index} returned {d.payload!r}, whose send (op {later.send.index}) was invoked at "
            f"{w.at(later.send.invoked_at)}, after the abort completed"
        )
    if back is not None and back <= seen_at:
        out.judge("missing-redelivery")  # received again in time
        return
    if index.blind(seen_at, ack_done):
        out.cannot_judge("missing-redelivery", "a receive of unknown outcome may have taken the redelivered message")
        return
    out.judge("missing-redelivery")
    came = (
        f"; it came again at {w.at(back)}, {seconds(back - aborted_at)} after the abort"
        if back is not None
        else "; it never came again"
    )
    out.add(
        "missing-redelivery",
        [message.send, ack.op, abort, witness],
        f"acked {message.payload!r} at {fmt_pos(position)} in {fmt_txn(ack.txn)} (op {ack.op.index}), which "
        f"aborted (op {abort.index}, done at {w.at(aborted_at)}); an abort redelivers what the transaction acked, "
        f"ahead of anything dispatched later, yet {why} before {message.payload!r} was received again{came} "
        f"(bound {seconds(REDELIVERY_BOUND_MS)})",
        where=w.name(sub),
        late_ms=None if back is None else max(0, back - aborted_at - REDELIVERY_BOUND_MS),
        bound_ms=REDELIVERY_BOUND_MS,
    )
