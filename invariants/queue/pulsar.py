"""Jepsen's Kafka-workload anomalies on txnmodel's own histories, where they mean something for
Pulsar: read from the analysis every transactional check reads
(:class:`invariants.analysis.TxnAnalysis`), judged only where Pulsar's guarantees make the
evidence conclusive.

Pulsar differs from Kafka where it matters here (``docs/checkers.md`` says it anomaly by anomaly):
a consumer acknowledges messages one by one and the broker redelivers what was given back (negative
ack, ack timeout, an aborted transaction's acks, a reconnect), so a consumer's deliveries legitimately
go back; only an Exclusive subscription hands one consumer everything in log order, and only its
*first* deliveries are in order (TB-17).  So:

* ``poll-skip`` — on an Exclusive subscription, two successive first deliveries to one consumer with
  a message between them in the partition that the subscription was owed and had not received;
* ``lost-write`` — on an Exclusive subscription, a message before the furthest position it delivered
  that it was owed and never received;
* ``duplicate`` — one message delivered at two positions, when its send returned none (when it
  returned one, a delivery elsewhere is already an ``inconsistent-position``);
* ``unseen`` and ``realtime-lag`` — information, as in Jepsen (a recording need not read everything
  to the end; the drain-proved loss is ``lost-message``).

A message is *owed* to a subscription when it exists and a correct broker must dispatch it there:
its send returned a position (or some subscription received it), it is plain or its transaction
committed, it is neither delayed nor possibly written twice (``deduplicated: false``), and for a
subscription that started at Latest it was sent after that start.  Whatever could explain a gap is
given the benefit of the doubt: an ack that covers the message, a seek or an unsubscribe (each
restarts the order), a receive or subscribe of unknown outcome (it may have taken or hidden a
message), a non-durable (Reader) subscription.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from invariants.analysis import MessageId, TxnAnalysis, TxnFate, covers, cumulative_reach
from invariants.queue.model import Findings
from spec.history import Operation, OpType, parse_object, split_subscription

__all__ = ["PulsarView", "duplicates", "lost_writes", "poll_skips", "realtime_lag", "unseen"]

# A message id as the analysis keeps it: (ledger, entry, batch index; -1 for a whole entry).
Position = tuple[int, ...]


def _fmt(position: Position | None) -> str:
    """A position as ledger:entry, with #index for one message of a batch."""
    if position is None:
        return "?"
    text = f"{position[0]}:{position[1]}"
    return text if len(position) < 3 or position[2] < 0 else f"{text}#{position[2]}"


def _consumer(d: Any) -> object:
    """One consumer: its name when the history gives one, else its process."""
    return d.op.process if d.consumer is None else d.consumer


@dataclass(frozen=True)
class _Owed:
    """A message some subscription of its partition is owed, at the position it holds."""

    payload: str
    position: Position
    message: Any  # the analysis's message


class PulsarView:
    """What the Jepsen-named checks read of a Pulsar history, derived once from the analysis and the
    rows (unsubscribes, which the analysis does not keep)."""

    def __init__(self, a: TxnAnalysis, ops: Sequence[Operation]) -> None:
        self.a = a
        self.delivered: dict[str, list[Any]] = defaultdict(list)  # payload -> deliveries anywhere
        # sub -> its deliveries in history order: each check of an Exclusive subscription reads its
        # own, not every delivery of the history again
        self.by_sub: dict[str, list[Any]] = defaultdict(list)
        for d in a.deliveries:
            self.delivered[d.payload].append(d)
            self.by_sub[d.subscription].append(d)
        self.restarts: dict[str, list[Operation]] = defaultdict(list)  # sub -> seeks and unsubscribes
        for sub, seeks in a.seeks.items():
            self.restarts[sub] += seeks
        for op in ops:
            if op.f == "unsubscribe" and op.type is not OpType.FAIL:
                self.restarts[op.object].append(op)
        self._acks: dict[str, _AckIndex] = {}
        self.owed = self._owed()
        # each partition's owed positions, for between's bisection (built once, not per call)
        self.owed_positions = {partition: [o.position for o in owed] for partition, owed in self.owed.items()}

    def _owed(self) -> dict[str, list[_Owed]]:
        """partition -> the messages owed to its subscriptions, by position (see the module docstring)."""
        out: dict[str, list[_Owed]] = defaultdict(list)
        for payload, m in self.a.messages.items():
            if m.repeatable or m.deliver_at is not None:
                continue
            got = {
                tuple(d.position) for d in self.delivered.get(payload, ()) if d.partition == m.partition and d.position
            }
            position = m.position if m.position is not None else (next(iter(got)) if len(got) == 1 else None)
            exists = m.send.type is OpType.OK or bool(got)
            if position is None or not exists:
                continue
            if m.txn is not None:
                fate = self.a.fate(m.txn)
                if not (fate is TxnFate.COMMITTED or (fate is TxnFate.UNKNOWN and got)):
                    continue
            out[m.partition].append(_Owed(payload, tuple(position), m))
        for owed in out.values():
            owed.sort(key=lambda o: o.position)
        return out

    def exclusive(self, sub: str) -> bool:
        """Every subscribe on the subscription asked for Exclusive and completed ok, and it is durable."""
        subscribes = self.a.subscribes.get(sub, [])
        return (
            bool(subscribes)
            and all(isinstance(op.args, dict) and op.args.get("sub_type") == "Exclusive" for op in subscribes)
            and all(op.type is OpType.OK for op in subscribes)
            and not self.a.non_durable(sub)
        )

    def latest_start(self, sub: str) -> int | None:
        starts = [
            op.completed_at or op.invoked_at
            for op in self.a.subscribes.get(sub, ())
            if isinstance(op.args, dict) and op.args.get("initial_position") == "Latest"
        ]
        return max(starts) if starts else None

    def acked_before(self, sub: str, position: Position, when: float) -> bool:
        """Some ack on the subscription, invoked before ``when``, acknowledges the position
        (:func:`~invariants.analysis.covers`), in O(log a) per question (it is asked once per owed message)."""
        index = self._acks.get(sub)
        if index is None:
            index = self._acks[sub] = _AckIndex(self.a.all_acks.get(sub, ()))
        return index.acked_before(position, when)

    def between(self, partition: str, low: Position, high: Position) -> list[_Owed]:
        owed = self.owed.get(partition, [])
        keys = self.owed_positions.get(partition, [])
        return owed[bisect.bisect_right(keys, low) : bisect.bisect_left(keys, high)]


class _AckIndex:
    """A subscription's acks, for "did an ack invoked before ``when`` acknowledge this position"
    (:func:`~invariants.analysis.covers`, the one definition of PA-2).

    An individual ack covers only its own entry: the acks of the position's entry, each at its
    earliest invocation, are asked.  A cumulative one covers everything up to its
    :func:`~invariants.analysis.cumulative_reach`: the largest reach among the acks invoked before
    ``when`` (a prefix maximum over the acks in invocation order) answers it."""

    def __init__(self, ops: Sequence[Operation]) -> None:
        never = float("inf")
        self._single: dict[tuple[int, int], dict[Position, float]] = defaultdict(dict)
        cumulative: list[tuple[float, tuple[float, ...]]] = []
        for op in ops:
            args = op.args
            if not isinstance(args, dict) or not isinstance(args.get("position"), list):
                continue
            index = args.get("batch_index")
            acked = (*args["position"][:2], -1 if not isinstance(index, int) else index)
            if op.f == "ack_cumulative":
                cumulative.append((op.invoked_at, cumulative_reach(acked)))
            else:
                first = self._single[(acked[0], acked[1])]
                first[acked] = min(first.get(acked, never), op.invoked_at)
        cumulative.sort(key=lambda c: c[0])
        self._invoked = [t for t, _ in cumulative]
        self._furthest = list(itertools.accumulate((key for _, key in cumulative), max))

    def acked_before(self, position: Position, when: float) -> bool:
        entry = self._single.get((position[0], position[1]), {})
        got = _message_id(position)
        if any(t < when and covers(_message_id(acked), False, got) for acked, t in entry.items()):
            return True
        k = bisect.bisect_left(self._invoked, when)
        return bool(k) and self._furthest[k - 1] >= position


def _message_id(position: Position) -> MessageId:
    """A position as :func:`~invariants.analysis.covers` takes it: no batch index is the whole entry."""
    return (position[0], position[1], position[2] if len(position) > 2 else -1)


class _Restarts:
    """A subscription's seeks and unsubscribes as two sorted columns, so that each delivery asks them
    in O(log r), not O(r) (a long history of many seeks made that quadratic)."""

    def __init__(self, ops: Sequence[Operation]) -> None:
        never = float("inf")  # an unknown completion: it may still be under way
        ordered = sorted(ops, key=lambda r: r.invoked_at)
        self._invoked = [r.invoked_at for r in ordered]
        # the latest completion among the restarts invoked up to each one
        self._latest_end = list(itertools.accumulate((r.completed_at or never for r in ordered), max))
        self._ended = sorted(r.completed_at or never for r in ordered)

    def overlap(self, start: float, end: float) -> bool:
        """Whether a restart overlaps ``[start, end]``: one invoked by ``end`` and not completed before
        ``start``."""
        began = bisect.bisect_right(self._invoked, end)
        return bool(began) and self._latest_end[began - 1] >= start

    def ended_before(self, at: float) -> int:
        """How many restarts completed before ``at`` (a consumer's epoch)."""
        return bisect.bisect_left(self._ended, at)


def _first_deliveries(v: PulsarView, sub: str) -> Iterator[tuple[Any, Any]]:
    """Successive first deliveries to one consumer of an Exclusive subscription, as (before, after)
    pairs, ordered by position; a seek or unsubscribe restarts every consumer, and nothing is judged
    after a receive of unknown outcome (it may have taken a message the history never shows)."""
    a = v.a
    blind = min((op.invoked_at for op in a.unknown_receives.get(sub, ())), default=None)
    never = float("inf")
    restarts = _Restarts(v.restarts.get(sub, []))
    seen: set[str] = set()
    last: dict[object, Any] = {}
    mine = sorted(v.by_sub.get(sub, ()), key=lambda d: (d.op.invoked_at, d.op.index))
    for d in mine:
        first = d.payload not in seen
        seen.add(d.payload)
        if blind is not None and d.op.invoked_at >= blind:
            return
        if restarts.overlap(d.op.invoked_at, never if d.op.completed_at is None else d.op.completed_at):
            last.clear()
            continue
        epoch = restarts.ended_before(d.op.invoked_at)
        sent = a.messages.get(d.payload)
        if not first or d.redelivery or d.position is None or sent is None or sent.repeatable:
            continue
        key = (_consumer(d), epoch)
        if key in last and tuple(last[key].position) < tuple(d.position):
            yield last[key], d
        last[key] = d


def poll_skips(v: PulsarView, out: Findings) -> None:
    """``poll-skip`` on a Pulsar history: an Exclusive subscription's consumer received a message for
    the first time, then another, and a message the subscription was owed lies between the two in
    the partition, never received there before the second and covered by no ack.  An Exclusive
    consumer is dispatched the partition in log order (TB-17), a transaction's messages once it
    commits (TB-19), an aborted one's never (TB-16): the broker skipped a committed message."""
    a = v.a
    for sub in sorted(a.subscribes):
        if not v.exclusive(sub):
            continue
        earliest: dict[str, float] = {}
        for d in v.by_sub.get(sub, ()):
            earliest[d.payload] = min(earliest.get(d.payload, float("inf")), d.op.invoked_at)
        partition = split_subscription(parse_object(sub)[1])[0]
        for before, after in _first_deliveries(v, sub):
            until = float("inf") if after.op.completed_at is None else after.op.completed_at
            for owed in v.between(partition, tuple(before.position), tuple(after.position)):
                if (
                    earliest.get(owed.payload, float("inf")) < until
                    or owed.message.send.invoked_at > until
                    or v.acked_before(sub, owed.position, until)
                ):
                    continue
                out.add(
                    "poll-skip",
                    [before.op, after.op, owed.message.send],
                    f"{_consumer(after)} of {sub} (Exclusive) received {before.payload!r} at {_fmt(before.position)} "
                    f"(receive op {before.op.index}) and next, for the first time, {after.payload!r} at "
                    f"{_fmt(after.position)} (receive op {after.op.index}), skipping {owed.payload!r} at "
                    f"{_fmt(owed.position)} (send op {owed.message.send.index}), which it was owed and never had",
                )


def lost_writes(v: PulsarView, out: Findings) -> None:
    """``lost-write`` on a Pulsar history: an Exclusive subscription delivered a message at some
    position, yet a message it was owed at an earlier position never reached it (no receive of the
    subscription ever returned it, no ack covered it).  Dispatch follows log order and skips only
    aborted transactions' messages (TB-16, TB-17, TB-19).  Not judged on a subscription with a seek
    or unsubscribe, a receive of unknown outcome, or, for what was sent before it, a Latest start."""
    a = v.a
    for sub in sorted(a.subscribes):
        if not v.exclusive(sub) or v.restarts.get(sub) or a.unknown_receives.get(sub):
            continue
        mine = [d for d in v.by_sub.get(sub, ()) if d.position is not None]
        received = {d.payload for d in v.by_sub.get(sub, ())}
        if not mine:
            continue
        top = max(mine, key=lambda d: tuple(d.position or ()))
        start = v.latest_start(sub)
        partition = split_subscription(parse_object(sub)[1])[0]
        for owed in v.between(partition, (-1, -1, -1), tuple(top.position or ())):
            if (
                owed.payload in received
                or (start is not None and owed.message.send.invoked_at < start)
                or v.acked_before(sub, owed.position, float("inf"))
            ):
                continue
            out.add(
                "lost-write",
                [owed.message.send, top.op],
                f"{sub} (Exclusive) received {top.payload!r} at {_fmt(top.position)} (receive op {top.op.index}), "
                f"so everything before it was dispatched there; {owed.payload!r} at {_fmt(owed.position)} (send op "
                f"{owed.message.send.index}) was owed and never received",
            )


def duplicates(v: PulsarView, out: Findings) -> None:
    """``duplicate`` on a Pulsar history: one message was delivered at two different positions,
    though the client wrote it once (its send deduplicated) and its send returned no position (one
    that did makes a delivery elsewhere an ``inconsistent-position``).  A message is written once, at
    one position (TB-6)."""
    for payload, got in v.delivered.items():
        message = v.a.messages.get(payload)
        if message is None or message.repeatable or message.position is not None:
            continue
        positions = sorted({tuple(d.position) for d in got if d.position is not None})
        if len(positions) < 2:
            continue
        rows = [message.send, *[next(d.op for d in got if d.position and tuple(d.position) == p) for p in positions]]
        out.add(
            "duplicate",
            rows,
            f"{payload!r} (send op {message.send.index}, position unknown) was delivered at {len(positions)} "
            f"positions: {', '.join(_fmt(p) for p in positions)}; a message is written once",
        )


def unseen(v: PulsarView, out: Findings) -> None:
    """``unseen`` on a Pulsar history (informational): messages owed to the subscriptions of a
    partition that some subscription read, which no subscription ever received.  A recording need not
    read everything to the end, so this is information; ``lost-message`` judges loss against a final
    drain."""
    read = {d.partition for d in v.a.deliveries} | {
        split_subscription(parse_object(sub)[1])[0] for sub, drains in v.a.drains.items() if drains
    }
    for partition in sorted(read):
        missing = [o for o in v.owed.get(partition, []) if o.payload not in v.delivered]
        if missing:
            shown = ", ".join(repr(o.payload) for o in missing[:8])
            out.add(
                "unseen",
                [o.message.send for o in missing[:8]],
                f"{len(missing)} message(s) on {partition} were never received by any subscription: {shown}"
                + (" ..." if len(missing) > 8 else ""),
            )


@dataclass
class _LagState:
    """One subscription as :func:`realtime_lag` walks its receives."""

    offsets: list[Position]  # its partition's positions shown, in order
    best: list[tuple[int, Operation]]  # the earliest time each position or a later one was shown
    restarts: list[int]  # its seeks' and unsubscribes' completion times, in order
    held: tuple[Position, int] | None = None  # the furthest it delivered, and since when


def realtime_lag(v: PulsarView, out: Findings) -> None:
    """``realtime-lag`` on a Pulsar history (informational): for each receive, how long the
    partition had held a position past the furthest its subscription had delivered; the worst is
    reported, with the receive and the operation that showed the later position.  A seek or
    unsubscribe restarts the subscription's count."""
    a = v.a
    shown: dict[str, list[tuple[Position, int, Operation]]] = defaultdict(list)
    for m in a.messages.values():
        if m.position is not None and m.send.completed_at is not None:
            shown[m.partition].append((tuple(m.position), m.send.completed_at, m.send))
    for d in a.deliveries:
        if d.position is not None and d.op.completed_at is not None:
            shown[d.partition].append((tuple(d.position), d.op.completed_at, d.op))
    earliest: dict[str, tuple[list[Position], list[tuple[int, Operation]]]] = {}
    for partition, entries in shown.items():
        entries.sort(key=lambda e: e[0])
        best: list[tuple[int, Operation]] = []
        for _, time, op in reversed(entries):
            best.append((time, op) if not best or time < best[-1][0] else best[-1])
        earliest[partition] = ([e[0] for e in entries], best[::-1])
    worst: tuple[int, Operation, str, Position | None, Operation] | None = None
    # every receive with the position it delivered (None: a drain, or no position), in time order
    receives = sorted(
        [
            *(
                (d.op.invoked_at, d.op.index, d.op, None if d.position is None else tuple(d.position))
                for d in a.deliveries
            ),
            *((o.invoked_at, o.index, o, None) for ops in a.drains.values() for o in ops),
        ],
        key=lambda r: (r[0], r[1]),
    )
    restarted = {
        sub: sorted(r.completed_at for r in ops if r.completed_at is not None) for sub, ops in v.restarts.items()
    }
    # sub -> what each receive of it reads: its partition's positions and earliest showings, its
    # restarts, and the furthest it delivered with since when (one lookup per receive, not four)
    state: dict[str, _LagState] = {}
    for _, _, op, got in receives:
        st = state.get(op.object)
        if st is None:
            read = split_subscription(parse_object(op.object)[1])[0]
            offsets, best = earliest.get(read, ([], []))
            st = state[op.object] = _LagState(offsets, best, restarted.get(op.object, []))
        held = st.held
        if (
            held is not None
            and st.restarts
            and (bisect.bisect_left(st.restarts, op.invoked_at) > bisect.bisect_right(st.restarts, held[1]))
        ):
            held = None  # a seek or unsubscribe since: the subscription starts over
        seen = None if held is None else held[0]
        offsets, best = st.offsets, st.best
        i = 0 if seen is None else bisect.bisect_right(offsets, seen)
        if i < len(offsets):
            lag = op.invoked_at - best[i][0]
            if lag > 0 and (worst is None or lag > worst[0]):
                worst = (lag, op, op.object, seen, best[i][1])
        if got is not None and (seen is None or got > seen):
            st.held = (got, op.completed_at or op.invoked_at)
        elif held is None:
            st.held = None
    if worst is not None:
        lag, op, sub, seen, proof = worst
        upto = "nothing" if seen is None else _fmt(seen)
        out.add(
            "realtime-lag",
            [op, proof],
            f"worst realtime lag {lag} ms: receive op {op.index} on {sub} began at {op.invoked_at} with the "
            f"subscription delivered up to {upto}, while op {proof.index} had shown a later position by "
            f"{proof.completed_at}",
        )
