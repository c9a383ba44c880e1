"""Transactional properties of a whole history, inferred Elle-style from what clients observed.

No search happens here.  A topic partition is Elle's *list-append* object: every produced message
carries a unique payload (recoverability) and a position, and a consumer's receives reveal an
ordered prefix of the partition (traceability).  From the sends, receives, acks and the outcomes of
commit and abort we infer each transaction's fate and each message's visibility, then look for
forbidden observations.  Every anomaly names itself, cites the operations that prove it, and says
in words why each piece of evidence implies the next.

Anomalies (the Adya class each one is the Pulsar analogue of, where there is one):

==========================  ======  ==============================================================
name                        Adya    what was observed
==========================  ======  ==============================================================
garbage-read                        a receive returned a message nobody sent
aborted-read                G1a     a message of an aborted transaction was delivered
uncommitted-read            G1a     a message of a transaction that never committed was delivered
premature-read              G1b     a message was delivered before its transaction's commit began
                                    (Pulsar: a dispatch beyond maxReadPosition)
fractured-read                      a subscription read past a committed transaction's messages on
                                    a partition but saw only some of them (atomic visibility)
lost-message                        a committed message never reached a subscription that read the
                                    partition to its end
duplicate-after-commit              a message acked inside a committed transaction was delivered
                                    again to the same subscription after the commit completed
missing-redelivery                  a message acked individually inside a transaction that aborted
                                    was not delivered again on its Exclusive subscription before
                                    the consumer went past it (liveness under a bound, see below)
inconsistent-position       G0      a message was delivered at a position other than the one its
                                    send returned, or two messages share a position
realtime-order                      a send that completed before another began got a later position
out-of-order-delivery               a consumer got first deliveries of a partition out of order
early-delivery                      a delayed message was delivered before its deliver-at time
                                    (less the ``deliver_early_ms`` a non-strict broker may take)
late-delivery                       a delayed message did not reach the consumers within the
                                    bound its send states (``deliver_within_ms``) after its time
lost-redelivery                     a message given back (negative ack, ack timeout) was not
                                    delivered again within the bound the history states
commit-and-abort                    one transaction both committed and aborted
cyclic-information-flow     G1c     committed transactions each consumed (received and acked in
                                    the transaction) a message another one produced, in a cycle
==========================  ======  ==============================================================

Jepsen's Kafka-workload taxonomy (:mod:`invariants.queue`) is registered in the same table; on these
histories its Pulsar-meaningful anomalies run after these checks, and a Kafka-workload history is
judged by it alone.

Soundness comes first: every rule only fires on evidence that cannot be explained by a correct
broker (indeterminate operations are given the benefit of the doubt).

``missing-redelivery`` is the one liveness rule, checked under a bound.  Pulsar's pending ack
redelivers the positions a transaction acked individually when it aborts (PA-13, txn-semantics
5.5; a cumulative ack is not redelivered, #14371), and it does so before the coordinator answers
the client's abort.  On an Exclusive subscription the redelivered message is then queued for the
one consumer ahead of anything dispatched later, so it must be received again before either (a) a
receive invoked at least :data:`REDELIVERY_BOUND_MS` after the abort completed finds nothing, or
(b) a receive returns a message whose send was invoked after the abort completed.  A subscription
with a receive of unknown outcome, or that is not Exclusive throughout, is not judged, and neither
is a delayed message.  Logical time is the
simulated clock: ``deliver_at_ms`` is compared with ``invoked_at`` / ``completed_at``.  The value
and result shapes of each operation are in ``docs/spec/history.md``.

Batch messages (PIP-54).  A message is identified by ``(ledger, entry, batch index)``: a send,
receive or ack that reports a ``batch_index`` names one message of a batch entry, one without it
(index -1 below) a whole entry.  Several sends share an entry when their batch indexes differ, and
order is the order of the triple.  An ``ack`` with a batch index acknowledges that message only;
one without acknowledges every message of the entry.  An ``ack_cumulative`` at ``(p, i)``
acknowledges everything before entry ``p`` and indexes ``0..i`` of ``p`` (PA-12: the mark-delete
position moves to the entry before ``p``, plus the slot's indexes).

Subscription types.  Pulsar holds delayed messages back only on Shared and Key_Shared
subscriptions (an Exclusive or Failover consumer gets them at once, in order), so
``early-delivery`` is judged only there, and delayed messages join the order check elsewhere.  A
Shared subscription hands a message an unresponsive consumer held to another consumer, after
later ones, so its deliveries are not ordered; a Key_Shared one orders each consumer's deliveries
per sticky key, which for a batch entry is the key of its first message (a batch is routed whole).
A subscription without a recorded ``subscribe`` is judged as Exclusive for order and as Shared for
delays.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from invariants.queue import KafkaOptions, Statement, check_kafka, check_pulsar, is_kafka_history
from invariants.queue.taxonomy import QUEUE_ANOMALIES
from invariants.txn_analysis import (
    WHOLE,
    Txn,
    TxnAnalysis,
    TxnFate,
    _Ack,
    _consumer_of,
    _covers,
    _Delivery,
    _field,
    _Message,
    _message_id,
)
from spec.history import Operation, OpType, parse_object, split_subscription

__all__ = [
    "ANOMALIES",
    "CHECKS",
    "REDELIVERY_BOUND_MS",
    "Anomaly",
    "TxnAnalysis",
    "TxnFate",
    "TxnResult",
    "check_transactional",
    "find",
]

ANOMALIES: dict[str, str | None] = {
    "garbage-read": None,
    "aborted-read": "G1a",
    "uncommitted-read": "G1a",
    "premature-read": "G1b",
    "fractured-read": None,
    "lost-message": None,
    "duplicate-after-commit": None,
    "missing-redelivery": None,
    "inconsistent-position": "G0",
    "realtime-order": None,
    "out-of-order-delivery": None,
    "early-delivery": None,
    "late-delivery": None,
    "lost-redelivery": None,
    "commit-and-abort": None,
    "cyclic-information-flow": "G1c",
    **QUEUE_ANOMALIES,  # Jepsen's Kafka-workload taxonomy (invariants.queue)
}


# Simulated milliseconds after an abort completed by which an Exclusive consumer that keeps receiving
# must have been given an aborted transaction's acked messages again (see ``missing-redelivery``).
REDELIVERY_BOUND_MS = 1_000


@dataclass(frozen=True)
class Anomaly:
    name: str
    history: str
    ops: tuple[int, ...]
    explanation: str
    # The dependency cycle, for the anomalies that are one (G1c): (from, to, why) per edge, in order.
    cycle: tuple[tuple[str, str, str], ...] = ()
    informational: bool = False  # reported, but the history does not fail for it (invariants.queue)

    @property
    def adya(self) -> str | None:
        return ANOMALIES.get(self.name)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "adya": self.adya,
            "ops": list(self.ops),
            "explanation": self.explanation,
        }
        if self.cycle:
            out["cycle"] = [list(edge) for edge in self.cycle]
        if self.informational:
            out["informational"] = True
        return out

    def __str__(self) -> str:
        tag = f" ({self.adya})" if self.adya else ""
        note = " [informational]" if self.informational else ""
        return f"{self.name}{tag}{note} ops {list(self.ops)}: {self.explanation}"


@dataclass(frozen=True)
class TxnResult:
    history: str
    anomalies: tuple[Anomaly, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)  # per anomaly name, including ones cut by the cap
    txns: int = 0
    messages: int = 0
    ops: int = 0
    # The informational anomalies (invariants.queue): reported, never failing the history; their counts.
    informational: tuple[Anomaly, ...] = ()
    notes: dict[str, int] = field(default_factory=dict)
    statements: tuple[Statement, ...] = ()  # what each check of invariants.queue had to judge

    @property
    def ok(self) -> bool:
        return not self.counts


def _fmt_txn(txn: tuple[int, int] | None) -> str:
    return "no txn" if txn is None else f"txn ({txn[0]},{txn[1]})"


def _fmt_pos(pos: tuple[int, ...] | None) -> str:
    if pos is None:
        return "?"
    return f"{pos[0]}:{pos[1]}" if len(pos) < 3 or pos[2] == WHOLE else f"{pos[0]}:{pos[1]}#{pos[2]}"


class _Collector:
    def __init__(self, history: str, cap: int) -> None:
        self.history = history
        self.cap = cap
        self.found: list[Anomaly] = []
        self.counts: dict[str, int] = defaultdict(int)

    def add(
        self, name: str, ops: Iterable[Operation], explanation: str, cycle: tuple[tuple[str, str, str], ...] = ()
    ) -> None:
        assert name in ANOMALIES, name
        self.counts[name] += 1
        if self.counts[name] <= self.cap:
            self.found.append(Anomaly(name, self.history, tuple(sorted({o.index for o in ops})), explanation, cycle))


# --- the anomalies, one check each (ANOMALIES lists them; check_transactional runs every one) -------


def commit_and_abort(a: TxnAnalysis, out: _Collector) -> None:
    """``commit-and-abort``: one transaction both committed and aborted (a commit and an abort of it
    returned ok).  A transaction ends exactly once: COMMITTED and ABORTED are absorbing and neither is
    reachable from the other's path (TC-6), and the client learns the terminal status only (TC-15)."""
    for txn in set(a.commits) | set(a.aborts):
        c_ok = [o for o in a.commits[txn] if o.type is OpType.OK]
        a_ok = [o for o in a.aborts[txn] if o.type is OpType.OK]
        if c_ok and a_ok:
            out.add(
                "commit-and-abort",
                [c_ok[0], a_ok[0]],
                f"{_fmt_txn(txn)}: commit op {c_ok[0].index} returned ok and abort op {a_ok[0].index} returned "
                f"ok; a transaction ends exactly once",
            )


def inconsistent_positions(a: TxnAnalysis, out: _Collector) -> None:
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
            f"both returned position {_fmt_pos(clash.position)} and {_fmt_pos(message.position)} on "
            f"{message.partition}; a position holds one message, or one batch at distinct indexes",
        )
    for d, message in a.delivered():
        if message.repeatable:
            continue  # another copy the client wrote (a resend after a reconnect) has its own position
        if d.position is not None and message.position is not None and d.position != message.position:
            out.add(
                "inconsistent-position",
                [message.send, d.op],
                f"send op {message.send.index} put {d.payload!r} at {_fmt_pos(message.position)}, but receive "
                f"op {d.op.index} delivered it at {_fmt_pos(d.position)}",
            )


def garbage_reads(a: TxnAnalysis, out: _Collector) -> None:
    """``garbage-read``: a receive returned a payload that no send of its partition produced
    (payloads are unique, so every delivery names the send it came from: Elle's recoverability).
    The other checks of a delivery are skipped for such a delivery."""
    for d in a.deliveries:
        found = a.messages.get(d.payload)
        if found is None or found.partition != d.partition:
            where = "" if found is None else f" (it was sent to {found.partition}, not {d.partition})"
            out.add(
                "garbage-read",
                [d.op],
                f"receive op {d.op.index} on {d.subscription} returned {d.payload!r}, which no send of "
                f"this partition produced{where}",
            )


def early_deliveries(a: TxnAnalysis, out: _Collector) -> None:
    """``early-delivery``: a delayed message reached a consumer before its ``deliver_at_ms`` on a
    subscription where Pulsar holds delayed messages back (Shared and Key_Shared, or no subscribe
    recorded).  The tracker releases a message only once due (DD-1, DD-2, DD-13; DD-29 for the
    in-memory tracker)."""
    for d, message in a.delivered():
        if (
            message.deliver_at is not None
            and d.op.completed_at is not None
            and d.op.completed_at < message.deliver_at - message.early_ms
            and _delays(a.subscribes.get(d.subscription, []))
        ):
            allowed = f" (a non-strict broker may deliver {message.early_ms} ms early)" if message.early_ms else ""
            out.add(
                "early-delivery",
                [message.send, d.op],
                f"send op {message.send.index} asked to deliver {d.payload!r} at {message.deliver_at}; receive "
                f"op {d.op.index} had it by {d.op.completed_at}, {message.deliver_at - d.op.completed_at} early"
                f"{allowed}",
            )


def aborted_reads(a: TxnAnalysis, out: _Collector) -> None:
    """``aborted-read`` (Adya G1a, Elle ``:G1a``): a message of a transaction that did not commit
    (an abort returned ok, or every end attempt completed without committing) was delivered.  The
    dispatcher skips and acknowledges an aborted transaction's messages (TB-16)."""
    for d, message in a.delivered():
        txn = message.txn
        if txn is None or a.fate(txn) is not TxnFate.ABORTED:
            continue
        ended = a.aborts.get(txn, []) + a.commits.get(txn, [])
        how = "; ".join(f"{o.f} op {o.index} {o.type.value}{' ' + o.error if o.error else ''}" for o in ended)
        out.add(
            "aborted-read",
            [message.send, d.op, *ended],
            f"{d.payload!r} was sent in {_fmt_txn(txn)} (op {message.send.index}), which did not commit "
            f"({how}); yet receive op {d.op.index} on {d.subscription} delivered it",
        )


def uncommitted_reads(a: TxnAnalysis, out: _Collector) -> None:
    """``uncommitted-read`` (Adya G1a, Elle ``:G1a``, for a transaction nobody ended): a message of a
    transaction that no commit or abort ever named was delivered.  An open transaction's messages lie
    beyond ``max_read_position`` and are never dispatched (TB-7, TB-15)."""
    for d, message in a.delivered():
        txn = message.txn
        if txn is None or a.fate(txn) is not TxnFate.OPEN:
            continue
        out.add(
            "uncommitted-read",
            [message.send, d.op],
            f"{d.payload!r} was sent in {_fmt_txn(txn)} (op {message.send.index}), which nobody ever "
            f"committed; yet receive op {d.op.index} on {d.subscription} delivered it",
        )


def premature_reads(a: TxnAnalysis, out: _Collector) -> None:
    """``premature-read`` (Adya G1b in this project's table): a receive completed before the first
    commit of the message's (committed or maybe-committed) transaction was even invoked, so the
    message was dispatched while its transaction was open: a dispatch beyond ``max_read_position``
    (TB-7, TB-15)."""
    for d, message in a.delivered():
        txn = message.txn
        if txn is None or a.fate(txn) in (TxnFate.ABORTED, TxnFate.OPEN):
            continue
        start = a.first_commit_call(txn)
        if start is not None and d.op.completed_at is not None and d.op.completed_at < start:
            out.add(
                "premature-read",
                [message.send, d.op, *a.commits[txn]],
                f"receive op {d.op.index} on {d.subscription} delivered {d.payload!r} of {_fmt_txn(txn)} "
                f"at {d.op.completed_at}, before the first commit of that txn was even invoked (at {start}): "
                f"the message was dispatched while its transaction was open",
            )


def fractured_reads(a: TxnAnalysis, out: _Collector) -> None:
    """``fractured-read`` (atomic visibility; Elle's "fractured read" of read-atomic isolation): a
    subscription received some of a committed transaction's messages on a partition and read past
    (a later position delivered, or a final drain) the others.  Once nothing is open a committed
    transaction is visible whole (TB-19; the prefix it may show while another transaction is open
    is not read past)."""
    for f in a.fractures:
        out.add(
            "fractured-read",
            [f.seen.send, f.first.op, f.missing.send],
            f"{_fmt_txn(f.txn)} committed with {f.size} messages on {f.view.partition}; {f.view.subscription} "
            f"received {f.seen.payload!r} (op {f.first.op.index}) and read past {_fmt_pos(f.missing.position)} "
            f"without receiving {f.missing.payload!r} (sent by op {f.missing.send.index}): the transaction "
            f"became visible only in part",
        )


def lost_messages(a: TxnAnalysis, out: _Collector) -> None:
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
        blind_until = max((_end_or_never(op) for op in a.unknown_receives.get(view.subscription, ())), default=None)
        latest_start = _latest_start(subscribes)
        for message in a.committed_by_partition.get(view.partition, []):
            if (
                message.payload in view.received
                or (blind_until is not None and _dispatchable_from(message, a) <= blind_until)
                or (message.deliver_at is not None and message.deliver_at > drain.invoked_at)
                or (latest_start is not None and message.send.invoked_at < latest_start)
                or (message.txn is not None and message.send.index in fractured)
            ):
                continue
            why = "" if message.txn is None else f" in {_fmt_txn(message.txn)}, committed"
            out.add(
                "lost-message",
                [message.send, drain],
                f"send op {message.send.index} put {message.payload!r} on {view.partition} at "
                f"{_fmt_pos(message.position)}{why}; receive op {drain.index} on {view.subscription} found "
                f"nothing more after every send and commit had completed, and {view.subscription} never "
                f"received it",
            )


def duplicates_after_commit(a: TxnAnalysis, out: _Collector) -> None:
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
                if _covers(ack.position, ack.cumulative, got_id):
                    out.add(
                        "duplicate-after-commit",
                        [ack.op, done, d.op],
                        f"{ack.subscription} acked {_fmt_pos(ack.position)}"
                        f"{' cumulatively' if ack.cumulative else ''} in {_fmt_txn(ack.txn)} (op {ack.op.index}), "
                        f"which committed (op {done.index}, done at {done.completed_at}); receive op {d.op.index}, "
                        f"invoked later at {d.op.invoked_at}, delivered {d.payload!r} at {_fmt_pos(got_id)} again",
                    )


def missing_redeliveries(a: TxnAnalysis, out: _Collector) -> None:
    """``missing-redelivery`` (liveness under a bound, :data:`REDELIVERY_BOUND_MS`): a message acked
    individually inside a transaction whose abort returned ok was not received again on its
    Exclusive subscription before the consumer went past it.  An abort returns the transaction's
    individual acks to pending and redelivers them, a cumulative ack is just cleared (PA-13); see
    the module docstring for the bound and what is not judged."""
    by_sub: dict[str, list[_Delivery]] = defaultdict(list)
    for d in a.deliveries:
        by_sub[d.subscription].append(d)
    for ack in a.acks:
        if ack.cumulative or not _exclusive(a.subscribes.get(ack.subscription, [])):
            continue
        done = [o for o in a.aborts.get(ack.txn, ()) if o.type is OpType.OK and o.completed_at is not None]
        if not done:
            continue
        abort = min(done, key=lambda o: o.completed_at or 0)
        partition, _ = split_subscription(parse_object(ack.subscription)[1])
        for message in a.acked_messages(partition, ack.position):
            if message.deliver_at is None and not _deleted_by_another_txn(a, ack, message):
                _missing_redelivery(a, ack, abort, message, by_sub, out)


def _deleted_by_another_txn(a: TxnAnalysis, ack: _Ack, message: _Message) -> bool:
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
        and _covers(other.position, other.cumulative, message.position)
        for other in a.acks
    )


def _missing_redelivery(
    a: TxnAnalysis,
    ack: _Ack,
    abort: Operation,
    message: _Message,
    by_sub: dict[str, list[_Delivery]],
    out: _Collector,
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
        f"{sub} (Exclusive) acked {message.payload!r} at {_fmt_pos(position)} in {_fmt_txn(ack.txn)} (op "
        f"{ack.op.index}), which aborted (op {abort.index}, done at {aborted_at}); an abort redelivers "
        f"what the transaction acked, ahead of anything dispatched later, yet {why} before "
        f"{message.payload!r} was received again",
    )


def cyclic_information_flow(a: TxnAnalysis, out: _Collector) -> None:
    """``cyclic-information-flow`` (Adya G1c, Elle ``:G1c``): a cycle of write-read edges between
    committed transactions.

    Edge ``Tw -> Tr``: Tr acknowledged (inside Tr) the position of a message Tw produced, so Tr
    consumed Tw's output.  Under read-committed Tr can only have seen it after Tw committed (an open
    or aborted transaction's messages are never dispatched: TB-15, TB-16), so Tw committed before Tr
    did; a cycle of such edges is impossible.  Found with Tarjan's strongly connected components,
    one shortest cycle per component, every edge explained.
    """
    edges: dict[Txn, dict[Txn, tuple[_Message, Operation]]] = defaultdict(dict)
    for ack in a.acks:
        partition, _ = split_subscription(parse_object(ack.subscription)[1])
        for message in a.acked_messages(partition, ack.position):
            if message.txn is None or message.txn == ack.txn:
                continue
            if a.fate(message.txn) is TxnFate.COMMITTED and a.fate(ack.txn) is TxnFate.COMMITTED:
                edges[message.txn].setdefault(ack.txn, (message, ack.op))
    for cycle in _cycles(edges):
        steps = []
        ops: list[Operation] = []
        drawn: list[tuple[str, str, str]] = []  # the cycle edge by edge, for the viewer to draw
        for writer, reader in itertools.pairwise([*cycle, cycle[0]]):
            message, ack_op = edges[writer][reader]
            ops += [message.send, ack_op]
            steps.append(
                f"{_fmt_txn(reader)} consumed {message.payload!r} that {_fmt_txn(writer)} produced (send op "
                f"{message.send.index}, acked in {_fmt_txn(reader)} by op {ack_op.index}), so "
                f"{_fmt_txn(writer)} committed first"
            )
            drawn.append(
                (
                    _fmt_txn(writer),
                    _fmt_txn(reader),
                    f"{message.payload!r}: sent by op {message.send.index}, acked by op {ack_op.index}",
                )
            )
        out.add(
            "cyclic-information-flow",
            ops,
            "; ".join(steps) + "; a transaction cannot commit before itself",
            tuple(drawn),
        )


def realtime_order(a: TxnAnalysis, out: _Collector) -> None:
    """``realtime-order`` (Elle's real-time edges, ``:G0-realtime`` and kin under strict
    serializability): a send that completed before another was invoked got a later position on the
    same partition.  Appends take positions in the order they are written (TB-6, TB-9)."""
    by_partition: dict[str, list[_Message]] = defaultdict(list)
    for message in a.messages.values():
        if message.position is not None and message.send.completed_at is not None:
            by_partition[message.partition].append(message)
    for partition, group in by_partition.items():
        done = sorted(group, key=lambda m: m.send.completed_at or 0)
        ends = [m.send.completed_at or 0 for m in done]
        # running maximum position among sends completed by each point
        best: list[_Message] = []
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
                    f"on {partition}, send op {earlier.send.index} ({earlier.payload!r}) completed at "
                    f"{earlier.send.completed_at} before send op {later.send.index} ({later.payload!r}) was "
                    f"invoked at {later.send.invoked_at}, yet got the later position "
                    f"{_fmt_pos(earlier.position)} > {_fmt_pos(later.position)}",
                )


def out_of_order_deliveries(a: TxnAnalysis, out: _Collector) -> None:
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
    ordered: list[tuple[_Delivery, str | None]] = []
    for d in a.deliveries:
        sent = a.messages.get(d.payload)
        if sent is None:
            continue
        sub_kind = _sub_type(a.subscribes.get(d.subscription, []))
        if sub_kind in ("Shared", "mixed") or (sent.deliver_at is not None and sub_kind != "Exclusive"):
            continue
        sticky = None
        if sub_kind == "Key_Shared":
            sticky = _sticky_key(sent, a.by_entry)
            if sticky is None:
                continue
        # Order by the id the send returned (a delivery elsewhere is an inconsistent-position), unless
        # the client may have written the message twice: then each copy is ordered where it is.
        judged_at = d.position if sent.repeatable and d.position is not None else sent.position or d.position
        ordered.append((dataclasses.replace(d, position=judged_at), sticky))
    last: dict[tuple[str, int | str, str | None, int], _Delivery] = {}
    seen: set[tuple[str, str]] = set()
    blind_from = {sub: min(op.invoked_at for op in ops) for sub, ops in a.unknown_receives.items() if ops}
    for d, sticky in sorted(ordered, key=lambda pair: (pair[0].op.invoked_at, pair[0].op.index)):
        first_time = (d.subscription, d.payload) not in seen
        seen.add((d.subscription, d.payload))
        if d.position is None or d.redelivery or not first_time:
            continue
        if d.subscription in blind_from and d.op.invoked_at > blind_from[d.subscription]:
            continue
        seeks = a.seeks.get(d.subscription, ())
        if any(s.invoked_at <= _end_or_never(d.op) and d.op.invoked_at <= _end_or_never(s) for s in seeks):
            continue
        epoch = sum(1 for s in seeks if _end_or_never(s) < d.op.invoked_at)
        # One consumer: its name when the history gives one (a consumer outlives a process that
        # ended 'info'), else its process; and the seeks before (each restarts the order).
        key = (d.subscription, d.op.process if d.consumer is None else d.consumer, sticky, epoch)
        before = last.get(key)
        if before is not None and before.position is not None and before.position >= d.position:
            out.add(
                "out-of-order-delivery",
                [before.op, d.op],
                f"consumer (process {d.op.process}) of {d.subscription} got {before.payload!r} at "
                f"{_fmt_pos(before.position)} (op {before.op.index}) and then, as a first delivery, "
                f"{d.payload!r} at {_fmt_pos(d.position)} (op {d.op.index}); a partition is dispatched in order"
                f"{'' if sticky is None else f' (per sticky key: both have key {sticky!r})'}",
            )
        last[key] = d


def _consumers(a: TxnAnalysis, sub: str) -> set[str] | None:
    """The consumers of a subscription by name, when the history accounts for every one of them:
    every ``subscribe`` on it completed (a lost answer may have attached a consumer the history
    never names) and named its consumer, every receive names one of them, and no receive on it has
    an unknown outcome.  None: the subscription cannot be judged for liveness."""
    subscribes = a.subscribes.get(sub, [])
    if not subscribes or any(op.type.indeterminate for op in subscribes) or a.unknown_receives.get(sub):
        return None
    names = {_consumer_of(op) for op in subscribes if op.type is OpType.OK}
    if not names or None in names:
        return None
    receivers = {d.consumer for got in a.received.get(sub, {}).values() for d in got}
    receivers |= {_consumer_of(op) for op in a.drains.get(sub, [])}
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
        name = _consumer_of(op)
        if name is not None and op.invoked_at >= after and name not in idle:
            idle[name] = op
    return idle if set(idle) == names else None


def _missed(
    a: TxnAnalysis, sub: str, message: _Message, since: int, due: int
) -> tuple[dict[str, Operation], list[_Delivery]] | None:
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


def late_deliveries(a: TxnAnalysis, out: _Collector) -> None:
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
            if not _delays(subscribes) or any(
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


def _subscribe_of(a: TxnAnalysis, sub: str, consumer: str | None) -> Operation | None:
    found = [op for op in a.subscribes.get(sub, []) if op.type is OpType.OK and _consumer_of(op) == consumer]
    return found[-1] if found else None


def _acked_by(a: TxnAnalysis, sub: str, consumer: str | None, message: _Message, after: int) -> bool:
    """Whether ``consumer`` acknowledged ``message`` (an ack of any outcome: one of unknown outcome
    may have taken effect) or negatively acknowledged it, by an operation invoked after ``after``."""
    if message.position is None:
        return True  # not judged: which id an ack would name is unknown
    for op in [*a.all_acks.get(sub, []), *a.negative_acks.get(sub, [])]:
        if op.invoked_at < after or _consumer_of(op) != consumer:
            continue
        acked = _message_id(op, op.args, "value", required=False)
        if acked is None or _covers(acked, op.f == "ack_cumulative", message.position):
            return True
    return False


def lost_redeliveries(a: TxnAnalysis, out: _Collector) -> None:
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
        handbacks: list[tuple[_Message, _Delivery, Operation | None, int, str]] = []
        for nack in a.negative_acks.get(sub, []):
            within = _field(nack, nack.args, "redeliver_within_ms", "value", (int,), required=False)
            if nack.type is not OpType.OK or within is None or nack.completed_at is None:
                continue
            nacked = _message_id(nack, nack.args, "value", required=True)
            assert nacked is not None
            consumer = _consumer_of(nack)
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
                timeout = _field(attached, attached.args, "ack_timeout_ms", "value", (int,), required=False)
                bound = _field(attached, attached.args, "redeliver_within_ms", "value", (int,), required=False)
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


Check = Callable[[TxnAnalysis, _Collector], None]

# Every anomaly's check, in the order check_transactional runs them (and reports what they find).
CHECKS: dict[str, Check] = {
    "commit-and-abort": commit_and_abort,
    "inconsistent-position": inconsistent_positions,
    "garbage-read": garbage_reads,
    "early-delivery": early_deliveries,
    "aborted-read": aborted_reads,
    "uncommitted-read": uncommitted_reads,
    "premature-read": premature_reads,
    "fractured-read": fractured_reads,
    "lost-message": lost_messages,
    "duplicate-after-commit": duplicates_after_commit,
    "missing-redelivery": missing_redeliveries,
    "cyclic-information-flow": cyclic_information_flow,
    "realtime-order": realtime_order,
    "out-of-order-delivery": out_of_order_deliveries,
    "late-delivery": late_deliveries,
    "lost-redelivery": lost_redeliveries,
}


def check_transactional(ops: Sequence[Operation], *, cap: int = 20, ww_deps: bool = False) -> TxnResult:
    """Every check of the module over one history: the analysis built once, then each anomaly's
    check in :data:`CHECKS` order, then Jepsen's taxonomy where it means something for Pulsar
    (:func:`invariants.queue.check_pulsar`); a Kafka-workload history is judged by Jepsen's taxonomy
    alone (:func:`invariants.queue.check_kafka`, ``ww_deps`` as Jepsen's ``:ww-deps``).  ``cap``
    anomalies of each kind are kept in full (all are counted)."""
    history = ops[0].history if ops else ""
    if is_kafka_history(ops):
        queue = check_kafka(ops, cap=cap, options=KafkaOptions(ww_deps=ww_deps))
        found: list[Anomaly] = []
        counts: dict[str, int] = {}
        txns, messages = queue.transactions, queue.messages
    else:
        analysis = TxnAnalysis.build(ops)
        out = _Collector(analysis.history, cap)
        for check in CHECKS.values():
            check(analysis, out)
        queue = check_pulsar(analysis, ops, cap=cap)
        found, counts = list(out.found), dict(out.counts)
        txns, messages = len(set(analysis.commits) | set(analysis.aborts)), len(analysis.messages)
    queued = [Anomaly(f.name, history, f.ops, f.explanation, f.cycle, f.informational) for f in queue.findings.found]
    found += [a for a in queued if not a.informational]
    counts.update(queue.findings.counts)
    notes = tuple(a for a in queued if a.informational)
    return TxnResult(
        history, tuple(found), counts, txns, messages, len(ops), notes, dict(queue.findings.notes), queue.statements
    )


def find(name: str, ops: Sequence[Operation], *, cap: int = 20) -> list[Anomaly]:
    """The anomalies of one kind alone (for tests and tools): the analysis, then that check only."""
    analysis = TxnAnalysis.build(ops)
    out = _Collector(analysis.history, cap)
    CHECKS[name](analysis, out)
    return out.found


def _sub_type(subscribes: Sequence[Operation]) -> str | None:
    """The subscription's type as its subscribes asked for it: Exclusive (Failover too: one active
    consumer, no delays), Shared, Key_Shared, "mixed", or None when no subscribe was recorded."""
    kinds = {
        "Exclusive" if kind in ("Exclusive", "Failover") else str(kind)
        for kind in (op.args.get("sub_type") if isinstance(op.args, dict) else None for op in subscribes)
    }
    if not kinds:
        return None
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _delays(subscribes: Sequence[Operation]) -> bool:
    """Whether the broker holds delayed messages back on the subscription (Shared and Key_Shared only)."""
    return _sub_type(subscribes) in (None, "Shared", "Key_Shared")


def _sticky_key(message: _Message, by_entry: dict[tuple[str, tuple[int, int]], list[_Message]]) -> str | None:
    """The key Key_Shared routes ``message`` by: its own, or for a batch message the key of the
    batch's first message; None when that message is unknown.  Pulsar's NONE_KEY stands for no key."""
    if message.position is None:
        return None
    head = message
    if message.position[2] not in (WHOLE, 0):
        found = [
            m
            for m in by_entry.get((message.partition, message.position[:2]), ())
            if m.position is not None and m.position[2] == 0
        ]
        if not found:
            return None
        head = found[0]
    return "NONE_KEY" if head.key is None else head.key


def _exclusive(subscribes: Sequence[Operation]) -> bool:
    """Every subscribe on the subscription asked for Exclusive (one consumer at a time)."""
    return bool(subscribes) and all(
        isinstance(op.args, dict) and op.args.get("sub_type") == "Exclusive" for op in subscribes
    )


def _cycles(edges: dict[tuple[int, int], dict[tuple[int, int], Any]]) -> list[list[tuple[int, int]]]:
    """One shortest cycle per strongly connected component (Tarjan, then BFS inside the component)."""
    index: dict[tuple[int, int], int] = {}
    low: dict[tuple[int, int], int] = {}
    stack: list[tuple[int, int]] = []
    on_stack: set[tuple[int, int]] = set()
    components: list[list[tuple[int, int]]] = []
    nodes = sorted(set(edges) | {r for targets in edges.values() for r in targets})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    cycles = []
    for component in components:
        members = set(component)
        start = component[0]
        parent: dict[tuple[int, int], tuple[int, int]] = {}
        queue = [start]
        found = None
        while queue and found is None:
            node = queue.pop(0)
            for child in sorted(edges.get(node, {})):
                if child not in members:
                    continue
                if child == start:
                    found = node
                    break
                if child not in parent:
                    parent[child] = node
                    queue.append(child)
        if found is None:
            continue
        path = [found]
        while path[-1] != start:
            path.append(parent[path[-1]])
        cycles.append(list(reversed(path)))
    return cycles


def _end_or_never(op: Operation) -> float:
    """When an operation of unknown outcome stopped being able to take effect: its completion (the
    client gave up), or never for one still open."""
    return float("inf") if op.completed_at is None else op.completed_at


def _latest_start(subscribes: Sequence[Operation]) -> int | None:
    """When a ``subscribe`` with ``initial_position`` Latest completed (None: Earliest or unrecorded)."""
    latest = [op for op in subscribes if isinstance(op.args, dict) and op.args.get("initial_position") == "Latest"]
    if not latest:
        return None
    return max(op.completed_at if op.completed_at is not None else op.invoked_at for op in latest)


def _dispatchable_from(message: _Message, a: TxnAnalysis) -> int:
    """The earliest time a correct broker may dispatch ``message``: its send was invoked, and for a
    transaction's message the first commit of the transaction was invoked (``premature-read``)."""
    start = a.first_commit_call(message.txn) if message.txn is not None else None
    return message.send.invoked_at if start is None else max(start, message.send.invoked_at)
