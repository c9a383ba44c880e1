"""Jepsen's Kafka-workload anomalies that are not cycles, one function each, over the model of
:mod:`invariants.queue.model` (its docstring has the words: unit, log, version order, index).

Each function states its rule as Jepsen's checker (``jepsen.tests.kafka``) means it, and adds what
it finds to a :class:`~invariants.queue.model.Findings` with the rows that prove it.  Whether a kind
fails the history or is informational is :mod:`invariants.queue.taxonomy`'s to say.  Every function
is linear in the history (or ``n log n``): it walks each unit, each process's timeline or each key's
log once.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from invariants.queue.model import Assign, Findings, Offset, QueueHistory, Read, Unit, Write, fmt_offset
from spec.history import Operation, OpType

__all__ = [
    "duplicates",
    "g1a",
    "g1b",
    "garbage_reads",
    "inconsistent_offsets",
    "int_nonmonotonic_polls",
    "int_nonmonotonic_sends",
    "int_poll_skips",
    "int_send_skips",
    "lost_writes",
    "nonmonotonic_polls",
    "nonmonotonic_sends",
    "poll_skips",
    "precommitted_reads",
    "realtime_lag",
    "unseen",
]

# How many values a finding lists before it says how many more there are.
SHOWN = 8


def _values(values: list[str]) -> str:
    shown = ", ".join(values[:SHOWN])
    return shown + (f" and {len(values) - SHOWN} more" if len(values) > SHOWN else "")


def _at(read: Read | Write) -> str:
    return f"{read.value} (offset {fmt_offset(read.offset)})"


def garbage_reads(q: QueueHistory, out: Findings) -> None:
    """``garbage-read``: a poll returned a value that no operation ever sent to that key.  Values are
    unique per key, so each read names the send it saw (Elle's recoverability); Jepsen's checker
    stops with an error (``:no-writer-of-value``) on such a history, txnmodel reports it."""
    pending: dict[str, set[str]] = {}  # what operations never completed sent: they may have
    for unit in q.units:
        if unit.type is OpType.INVOKE:
            for w in unit.writes:
                pending.setdefault(w.key, set()).add(w.value)
    for unit in q.units:
        for read in unit.reads:
            if q.writer(read.key, read.value) is None and read.value not in pending.get(read.key, ()):
                out.add(
                    "garbage-read",
                    [read.row, unit.end],
                    f"{unit.label} polled {_at(read)} from key {q.name(read.key)}, which no operation sent",
                )


def g1a(q: QueueHistory, out: Findings) -> None:
    """``G1a`` (aborted read): an ``ok`` poll or transaction returned a value that a ``fail``
    operation sent.  A failed operation's transaction aborted, and a consumer at read committed never
    sees an aborted transaction's messages."""
    for unit in q.units:
        if unit.type is not OpType.OK or unit.f == "send":
            continue
        for read in unit.reads:
            writer = q.writer(read.key, read.value)
            if writer is None or writer.type is not OpType.FAIL:
                continue
            sent = next(w for w in writer.writes if w.key == read.key and w.value == read.value)
            out.add(
                "G1a",
                [sent.row, writer.end, read.row, unit.end],
                f"{unit.label} polled {_at(read)} from key {q.name(read.key)}, which {writer.label} sent; that "
                f"operation failed, so its transaction aborted and none of its messages may be read",
            )


def g1b(q: QueueHistory, out: Findings) -> None:
    """``G1b`` (intermediate read), informational: an ``ok`` poll's last value of a key is one that
    another committed operation sent before sending that key more, so the poll ended inside the other
    transaction's writes.  Jepsen's checker does not look for it (its docstring leaves intermediate
    reads open: a poll returns a batch that may end anywhere); txnmodel reports Elle's list-append
    meaning as information only."""
    for unit in q.units:
        if unit.type is not OpType.OK:
            continue
        for key, reads in unit.read_keys().items():
            last = reads[-1]
            writer = q.writer(key, last.value)
            if writer is None or writer is unit or writer.type is not OpType.OK:
                continue
            sent = [w for w in writer.writes if w.key == key]
            if sent[-1].value == last.value:
                continue
            later = [w.value for w in sent[[w.value for w in sent].index(last.value) + 1 :]]
            out.add(
                "G1b",
                [last.row, unit.end, writer.end],
                f"{unit.label} last polled {_at(last)} from key {q.name(key)}; {writer.label} sent it and then "
                f"{_values(later)} to the same key, so the poll saw that transaction's intermediate state",
            )


def precommitted_reads(q: QueueHistory, out: Findings) -> None:
    """``precommitted-read``: an operation polled a value it sent itself.  Legal in most databases,
    not in Kafka's model: a consumer at read committed never sees a message before its transaction
    commits, and a transaction commits after its own polls."""
    for unit in q.units:
        if not unit.writes or not unit.reads:
            continue
        sent = {(w.key, w.value): w for w in unit.writes}
        bad = next((r for r in unit.reads if (r.key, r.value) in sent), None)
        if bad is not None:
            own = sent[(bad.key, bad.value)]
            out.add(
                "precommitted-read",
                [own.row, bad.row, unit.end],
                f"{unit.label} sent {bad.value} to key {q.name(bad.key)} and polled it back ({_at(bad)}) before "
                f"its own transaction committed",
            )


def lost_writes(q: QueueHistory, out: Findings) -> None:
    """``lost-write``: some ``ok`` poll returned the value at index ``i`` of a key's version order, so
    every value before it was in the log to be read; yet a value whose last appearance lies at or
    before ``i``, sent by an operation that must have committed, was never returned by an ``ok``
    poll.  The bound is the highest of the first indexes of the values ``ok`` polls returned
    (Jepsen's construction, robust to a value seen at several offsets)."""
    firsts = {key: order.first_indexes() for key, order in q.orders.items()}
    highest: dict[str, tuple[int, Read]] = {}
    for unit in q.units:
        if unit.type is not OpType.OK:
            continue
        for read in unit.reads:
            first = firsts.get(read.key, {}).get(read.value)
            if first is not None and (read.key not in highest or first > highest[read.key][0]):
                highest[read.key] = (first, read)
    for key, (bound, top) in highest.items():
        order = q.orders[key]
        seen = q.ok_reads.get(key, set())
        lost = sorted((index, value) for value, index in order.index_of.items() if index <= bound and value not in seen)
        for _, value in lost:
            writer = q.writer(key, value)
            if writer is None or not q.must_have_committed(writer):
                continue
            sent = next(w for w in writer.writes if w.key == key and w.value == value)
            out.add(
                "lost-write",
                [sent.row, writer.end, top.row],
                f"an ok poll returned {_at(top)} of key {q.name(key)}, so everything before it was in the log; "
                f"{writer.label} sent {_at(sent)}, before it, and committed, yet no ok poll ever returned it",
            )


@dataclass(frozen=True)
class _Step:
    """Two successive polls of a key by one process: where the earlier left off, where the later began."""

    key: str
    before: Unit
    last: Read
    after: Unit
    first: Read
    delta: int


def _poll_steps(q: QueueHistory) -> list[_Step]:
    """Each process's polls in order: for every key a poll read, where it began against where the
    process's last ``ok`` poll of that key left off, kept when it did not begin just after (the
    steps ``poll-skip`` and ``nonmonotonic-poll`` judge; found once for both).  An ``ok`` or ``info``
    assign or subscribe keeps only the keys it names; a failed or crashed poll is judged but moves
    nothing (its transaction aborted, so the consumer rewinds to where the last committed one left it)."""
    if "steps" not in q.memo:
        q.memo["steps"] = [step for step in _all_poll_steps(q) if step.delta != 1]
    steps: list[_Step] = q.memo["steps"]
    return steps


def _all_poll_steps(q: QueueHistory) -> Iterator[_Step]:
    for timeline in q.timelines.values():
        last: dict[str, tuple[Unit, Read]] = {}
        for entry in timeline:
            if isinstance(entry, Assign):
                if entry.type in (OpType.OK, OpType.INFO):
                    last = {k: v for k, v in last.items() if k in entry.keys}
                continue
            if entry.f == "send":
                continue
            per_key = entry.read_keys()
            for key, reads in per_key.items():
                if key in last:
                    before, read = last[key]
                    yield _Step(key, before, read, entry, reads[0], q.delta(key, read.value, reads[0].value))
            if entry.type is OpType.OK:
                for key, reads in per_key.items():
                    last[key] = (entry, reads[-1])


def poll_skips(q: QueueHistory, out: Findings) -> None:
    """``poll-skip``: a process's poll of a key began more than one place past where its last
    committed poll of that key left off: it skipped values the version order holds between them
    (:func:`_poll_steps` says which polls follow which)."""
    for step in _poll_steps(q):
        if step.delta <= 1:
            continue
        skipped = q.between(step.key, step.last.value, step.first.value)
        proof = q.evidence(step.key, skipped[0])
        out.add(
            "poll-skip",
            [step.last.row, step.before.end, step.first.row, step.after.end, *([proof] if proof else [])],
            f"process {step.after.process} polled {_at(step.last)} of key {q.name(step.key)} ({step.before.label}), "
            f"then began at {_at(step.first)} ({step.after.label}), skipping {_values(skipped)}",
        )


def nonmonotonic_polls(q: QueueHistory, out: Findings) -> None:
    """``nonmonotonic-poll``: a process's poll of a key began at or before where its last committed
    poll of that key left off (the same value again, or an earlier one)."""
    for step in _poll_steps(q):
        if step.delta >= 1:
            continue
        out.add(
            "nonmonotonic-poll",
            [step.last.row, step.before.end, step.first.row, step.after.end],
            f"process {step.after.process} polled {_at(step.last)} of key {q.name(step.key)} ({step.before.label}), "
            f"then began again at {_at(step.first)} ({step.after.label}), {1 - step.delta} place(s) back",
        )


def nonmonotonic_sends(q: QueueHistory, out: Findings) -> None:
    """``nonmonotonic-send``: one process sent to a key in an ``ok`` or ``info`` operation, then in a
    later one, and the later operation's first value lies at or before the earlier one's last in the
    version order.  An ``ok`` or ``info`` assign or subscribe keeps only the keys it names."""
    for timeline in q.timelines.values():
        last: dict[str, tuple[Unit, Write]] = {}
        for entry in timeline:
            if isinstance(entry, Assign):
                if entry.type in (OpType.OK, OpType.INFO):
                    last = {k: v for k, v in last.items() if k in entry.keys}
                continue
            if entry.f == "poll" or entry.type not in (OpType.OK, OpType.INFO):
                continue
            per_key = entry.write_keys()
            for key, writes in per_key.items():
                if key not in last:
                    continue
                before, write = last[key]
                if q.delta(key, write.value, writes[0].value) < 1:
                    out.add(
                        "nonmonotonic-send",
                        [write.row, before.end, writes[0].row, entry.end],
                        f"process {entry.process} sent {_at(write)} to key {q.name(key)} ({before.label}), then "
                        f"{_at(writes[0])} ({entry.label}), which the log orders at or before it",
                    )
            for key, writes in per_key.items():
                last[key] = (entry, writes[-1])


def _inside(
    q: QueueHistory, unit: Unit, pairs: Mapping[str, Sequence[Read | Write]]
) -> Iterator[tuple[str, Read | Write, Read | Write, int]]:
    """Successive values of each key within one operation, with how far apart the version order puts them."""
    for key, items in pairs.items():
        for a, b in itertools.pairwise(items):
            yield key, a, b, q.delta(key, a.value, b.value)


_Pair = tuple[Unit, str, "Read | Write", "Read | Write", int]


def _odd_pairs(q: QueueHistory, sends: bool) -> list[_Pair]:
    """Successive polls (or sends) of a key within one operation that the version order does not put
    one place apart: what the four ``int-`` checks judge, found once for the two of each side."""
    name = "sent pairs" if sends else "polled pairs"
    if name not in q.memo:
        found: list[_Pair] = []
        for unit in q.units:
            if sends and unit.type is OpType.INVOKE:
                continue
            pairs = unit.write_keys() if sends else unit.read_keys()
            found += [(unit, key, a, b, d) for key, a, b, d in _inside(q, unit, pairs) if d != 1]
        q.memo[name] = found
    odd: list[_Pair] = q.memo[name]
    return odd


def int_poll_skips(q: QueueHistory, out: Findings) -> None:
    """``int-poll-skip``: within one operation, two successive values polled from a key lie more than
    one place apart in the version order: the polls skipped a value the log holds.  A key the
    operation's ``:rebalance-log`` names is not judged (a rebalance moves the consumer)."""
    for unit, key, a, b, delta in _odd_pairs(q, sends=False):
        if delta > 1 and key not in unit.rebalanced:
            skipped = q.between(key, a.value, b.value)
            proof = q.evidence(key, skipped[0])
            out.add(
                "int-poll-skip",
                [a.row, b.row, unit.end, *([proof] if proof else [])],
                f"{unit.label} polled {_at(a)} then {_at(b)} from key {q.name(key)}, skipping {_values(skipped)}",
            )


def int_nonmonotonic_polls(q: QueueHistory, out: Findings) -> None:
    """``int-nonmonotonic-poll``: within one operation, a value polled from a key lies at or before
    the value polled just before it in the version order.  A rebalanced key is not judged."""
    for unit, key, a, b, delta in _odd_pairs(q, sends=False):
        if delta < 1 and key not in unit.rebalanced:
            out.add(
                "int-nonmonotonic-poll",
                [a.row, b.row, unit.end],
                f"{unit.label} polled {_at(a)} then {_at(b)} from key {q.name(key)}, "
                f"{1 - delta} place(s) back in the log",
            )


def int_send_skips(q: QueueHistory, out: Findings) -> None:
    """``int-send-skip``: within one completed operation, two successive sends to a key landed more
    than one place apart in the version order: another producer's messages came between them (a
    transaction's writes are not contiguous; normal in Kafka, informational for Jepsen)."""
    for unit, key, a, b, delta in _odd_pairs(q, sends=True):
        if delta > 1:
            between = q.between(key, a.value, b.value)
            out.add(
                "int-send-skip",
                [a.row, b.row, unit.end],
                f"{unit.label} sent {_at(a)} then {_at(b)} to key {q.name(key)}; {_values(between)} lie between",
            )


def int_nonmonotonic_sends(q: QueueHistory, out: Findings) -> None:
    """``int-nonmonotonic-send``: within one completed operation, a value sent to a key lies at or
    before the value sent just before it in the version order: the log reordered one producer's
    sends."""
    for unit, key, a, b, delta in _odd_pairs(q, sends=True):
        if delta < 1:
            out.add(
                "int-nonmonotonic-send",
                [a.row, b.row, unit.end],
                f"{unit.label} sent {_at(a)} then {_at(b)} to key {q.name(key)}, which the log orders "
                f"{1 - delta} place(s) back",
            )


def duplicates(q: QueueHistory, out: Findings) -> None:
    """``duplicate``: one value appears at more than one offset of a key's log (sends that must have
    committed and every poll say where)."""
    for key, order in q.orders.items():
        places: dict[str, list[int]] = {}
        for index, values in enumerate(order.values):
            for value in values:
                places.setdefault(value, []).append(index)
        for value, indexes in places.items():
            if len(indexes) < 2:
                continue
            rows = [order.evidence(i, value) for i in indexes]
            offsets = ", ".join(fmt_offset(order.offsets[i]) for i in indexes)
            out.add(
                "duplicate",
                rows[:SHOWN],
                f"{value} appears at {len(indexes)} offsets of key {q.name(key)}: {offsets}; a message is written once",
            )


def inconsistent_offsets(q: QueueHistory, out: Findings) -> None:
    """``inconsistent-offsets``: one offset of a key holds more than one value: sends and polls
    disagree about what the log holds there."""
    for key, order in q.orders.items():
        for index, values in enumerate(order.values):
            if len(values) < 2:
                continue
            rows = order.rows[index]
            out.add(
                "inconsistent-offsets",
                rows[:SHOWN],
                f"offset {fmt_offset(order.offsets[index])} of key {q.name(key)} holds {_values(values)} by the "
                f"sends and polls that name it; an offset holds one message",
            )


def unseen(q: QueueHistory, out: Findings) -> None:
    """``unseen``: values that ``ok`` operations sent to a key and that no ``ok`` poll ever returned,
    by the end of the history (Jepsen's workload polls until it has caught up before it ends, so
    anything still unseen was lost or is stuck)."""
    missing: dict[str, list[Write]] = {}
    for unit in q.units:
        if unit.type is OpType.OK:
            for write in unit.writes:
                if write.value not in q.ok_reads.get(write.key, ()):
                    missing.setdefault(write.key, []).append(write)
    for key, writes in missing.items():
        out.add(
            "unseen",
            [w.row for w in writes[:SHOWN]],
            f"{len(writes)} message(s) sent to key {q.name(key)} by ok operations were never returned by an ok "
            f"poll: {_values([w.value for w in writes])}",
        )


class _Expiry:
    """Per key, when each offset stopped being the log's last: the earliest completion of an ``ok`` or
    ``info`` operation that showed a later offset (Jepsen's ``expired``), queried in ``log n``."""

    def __init__(self, q: QueueHistory) -> None:
        shown: dict[str, list[tuple[Offset, int, Unit]]] = {}
        for unit in q.units:
            if unit.type not in (OpType.OK, OpType.INFO) or unit.completed_at is None:
                continue
            for key, offset in _max_offsets(unit).items():
                shown.setdefault(key, []).append((offset, unit.completed_at, unit))
        self.offsets: dict[str, list[Offset]] = {}
        self.earliest: dict[str, list[tuple[int, Unit]]] = {}
        for key, entries in shown.items():
            entries.sort(key=lambda e: e[0])
            best: list[tuple[int, Unit]] = []
            for _, time, unit in reversed(entries):
                best.append((time, unit) if not best or time < best[-1][0] else best[-1])
            self.offsets[key] = [e[0] for e in entries]
            self.earliest[key] = best[::-1]

    def after(self, key: str, offset: Offset | None) -> tuple[int, Unit] | None:
        """The earliest time an offset past ``offset`` (past nothing: None) was known, and who showed it."""
        offsets = self.offsets.get(key, [])
        i = 0 if offset is None else bisect.bisect_right(offsets, offset)
        return self.earliest[key][i] if i < len(offsets) else None


def _max_offsets(unit: Unit) -> dict[str, Offset]:
    """The highest offset the unit polled or sent, per key (Jepsen's ``op->max-offsets``)."""
    out: dict[str, Offset] = {}
    items: list[Read | Write] = [*unit.reads, *unit.writes]
    for item in items:
        if item.offset is not None and (item.key not in out or item.offset > out[item.key]):
            out[item.key] = item.offset
    return out


def realtime_lag(q: QueueHistory, out: Findings) -> None:
    """``realtime-lag`` (informational, as in Jepsen): how stale a poll was.  For each ``ok`` poll or
    transaction, and each key its process reads (after an assign: the assigned keys; after a
    subscribe, the keys polled since), the lag is the time from when the log was known to hold an
    offset past the highest the process had seen (this poll's included) to when the poll began, or
    0.  The worst lag of the history is reported, with the poll and the operation that showed the
    later offset.

    While a key's highest offset seen stays the same, its lag only grows from one poll to the next,
    so each stretch is judged at its last poll: when the offset moves, when an assign or subscribe
    changes the keys, and at the end (linear in polls, not in polls times keys)."""
    expiry = _Expiry(q)
    worst: list[tuple[int, Unit, str, Offset | None, Unit]] = []

    def judge(key: str, seen: Offset | None, last: Unit | None) -> None:
        known = None if last is None else expiry.after(key, seen)
        if last is None or known is None:
            return
        lag = last.invoked_at - known[0]
        if lag > 0 and (not worst or lag > worst[0][0]):
            worst[:] = [(lag, last, key, seen, known[1])]

    for timeline in q.timelines.values():
        seen: dict[str, Offset | None] = {}
        last: Unit | None = None  # the process's last ok poll
        for entry in timeline:
            if isinstance(entry, Assign):
                if entry.type is OpType.OK:
                    for key, offset in seen.items():
                        judge(key, offset, last)
                    seen = {k: seen.get(k) for k in entry.keys} if entry.mode == "assign" else {}
                    last = None
                continue
            if entry.type is not OpType.OK or entry.f == "send":
                continue
            for key, offset in _max_offsets(entry).items():
                before = seen.get(key)
                if before is None or offset > before:
                    if key in seen:
                        judge(key, before, last)
                    seen[key] = offset
            last = entry
        for key, offset in seen.items():
            judge(key, offset, last)
    if worst:
        lag, unit, key, reached, proof = worst[0]
        words = "nothing" if reached is None else f"offset {fmt_offset(reached)}"
        rows: list[Operation] = [unit.end, proof.end]
        out.add(
            "realtime-lag",
            rows,
            f"worst realtime lag {lag} (in the history's time: Jepsen's nanoseconds, or its forms counted): "
            f"{unit.label} began at {unit.invoked_at} having seen {words} of key {q.name(key)}, while "
            f"{proof.label} had shown a later offset by {proof.completed_at}",
        )
