"""The one analysis of a history that every transactional anomaly check reads
(:mod:`invariants.transactional`): the operations' shapes checked once (a typed
:class:`~spec.history.BadHistory` naming the row and column), each transaction's commits, aborts
and fate, each message with the id its send returned, each delivery, empty receive, subscribe and
transactional ack per subscription, and what the subscribes say of a subscription (its type, where
it starts).  It infers and never judges; the checks judge.  The words (message ids, ``WHOLE``,
fates) are those of :mod:`invariants.transactional`'s docstring.
"""

from __future__ import annotations

import bisect
import enum
import functools
import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from invariants.heap import without_cyclic_gc
from invariants.words import Words
from spec.history import BadHistory, Operation, OpType, parse_object, split_subscription

__all__ = [
    "WHOLE",
    "Ack",
    "Delivery",
    "Fracture",
    "Message",
    "MessageId",
    "SubscriptionView",
    "Txn",
    "TxnAnalysis",
    "TxnFate",
    "consumer_of",
    "covers",
    "cumulative_reach",
    "delays",
    "end_or_never",
    "exclusive",
    "latest_start",
    "message_id",
    "read_field",
    "sub_type",
]


class TxnFate(enum.Enum):
    COMMITTED = "committed"  # a commit returned ok
    ABORTED = "aborted"  # an abort returned ok, or every end attempt failed
    UNKNOWN = "unknown"  # a commit is indeterminate: it may have committed
    OPEN = "open"  # nobody tried to end it


# A message id: (ledger, entry, batch index), the index WHOLE for a message that is not in a batch
# or, in an ack, for the whole entry.
MessageId = tuple[int, int, int]
WHOLE = -1


@dataclass(slots=True)
class Message:
    send: Operation
    payload: str
    partition: str
    txn: tuple[int, int] | None
    position: MessageId | None
    deliver_at: int | None
    key: str | None = None
    # How early a correct broker may deliver it (``deliver_early_ms``: a non-strict broker's tick).
    early_ms: int = 0
    # The bound within which it must reach a consumer that keeps receiving (``deliver_within_ms``).
    within_ms: int | None = None
    # The client may have written it more than once (``deduplicated: false``: it resends what it
    # has no receipt for after a reconnect, and nothing says the broker deduplicates).
    repeatable: bool = False


@dataclass(slots=True)
class Delivery:
    op: Operation
    subscription: str  # object id
    partition: str
    payload: str
    position: MessageId | None
    redelivery: int
    consumer: str | None = None  # the receive's ``consumer`` (one consumer may span processes)


def read_field(op: Operation, data: Any, key: str, column: str, kinds: tuple[type, ...], required: bool = True) -> Any:
    if not isinstance(data, dict):
        raise BadHistory(
            f"history {op.history!r} op {op.index} ({op.f}): expected an object, got {data!r}",
            row=op.index,
            column=column,
        )
    value = data.get(key)
    if value is None:
        if required:
            raise BadHistory(
                f"history {op.history!r} op {op.index} ({op.f}): needs {key!r}", row=op.index, column=column
            )
        return None
    if not isinstance(value, kinds) or isinstance(value, bool):
        raise BadHistory(
            f"history {op.history!r} op {op.index} ({op.f}): {key!r} has the wrong type: {value!r}",
            row=op.index,
            column=column,
        )
    return value


def _pair(op: Operation, value: Any, key: str, column: str) -> tuple[int, int]:
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(x, int) for x in value)):
        raise BadHistory(
            f"history {op.history!r} op {op.index} ({op.f}): {key!r} must be [a, b] integers, got {value!r}",
            row=op.index,
            column=column,
        )
    return (value[0], value[1])


def message_id(op: Operation, data: Any, column: str, required: bool) -> MessageId | None:
    """``position`` plus the optional ``batch_index`` of a send result, receive result or ack value."""
    raw = read_field(op, data, "position", column, (list,), required=required)
    if raw is None:
        return None
    ledger, entry = _pair(op, raw, "position", column)
    index = read_field(op, data, "batch_index", column, (int,), required=False)
    if index is not None and index < 0:
        raise BadHistory(
            f"history {op.history!r} op {op.index} ({op.f}): 'batch_index' must be >= 0, got {index}",
            row=op.index,
            column=column,
        )
    return (ledger, entry, WHOLE if index is None else index)


def cumulative_reach(acked: MessageId) -> tuple[float, ...]:
    """The furthest id a cumulative ack of ``acked`` covers: ``covers(acked, True, got)`` exactly when
    ``got <= cumulative_reach(acked)`` in tuple order (PA-2; a whole-entry ack covers the entry's
    indexes, and a plain message's id, index WHOLE, sorts before them).  Indexes of acks keep this
    key, so that "some cumulative ack covers it" is one comparison with the largest."""
    return (acked[0], acked[1], float("inf") if acked[2] == WHOLE else acked[2])


def covers(acked: MessageId, cumulative: bool, got: MessageId) -> bool:
    """Whether an ack of ``acked`` (cumulative or not) acknowledges the message at ``got``.  An index
    on one side only means a whole entry on the other (the broker acks a plain entry whole)."""
    if got[:2] == acked[:2]:
        if WHOLE in (acked[2], got[2]):
            return True
        return got[2] <= acked[2] if cumulative else got[2] == acked[2]
    return cumulative and got[:2] < acked[:2]


def _txn_of(op: Operation, data: Any, column: str = "value") -> tuple[int, int] | None:
    raw = read_field(op, data, "txn", column, (list,), required=False)
    return None if raw is None else _pair(op, raw, "txn", column)


def _flag(op: Operation, data: Any, key: str) -> bool | None:
    """An optional boolean of a value (None when absent)."""
    flag = data.get(key) if isinstance(data, dict) else None
    if flag is not None and not isinstance(flag, bool):
        raise BadHistory(
            f"history {op.history!r} op {op.index} ({op.f}): {key!r} must be true or false, got {flag!r}",
            row=op.index,
            column="value",
        )
    return flag


def consumer_of(op: Operation) -> str | None:
    """The ``consumer`` an operation names in its value (None: not named)."""
    name: str | None = read_field(
        op, op.args if op.args is not None else {}, "consumer", "value", (str,), required=False
    )
    return name


Txn = tuple[int, int]
_Entry = tuple[str, tuple[int, int]]  # (partition, (ledger, entry)): the messages of one entry


@dataclass(frozen=True, slots=True)
class Ack:
    """An ``ack`` or ``ack_cumulative`` that returned ok inside a transaction."""

    op: Operation
    subscription: str  # object id
    txn: Txn
    position: MessageId
    cumulative: bool


@dataclass(frozen=True)
class SubscriptionView:
    """What one subscription received, how far it read, and the receive that proves it drained."""

    subscription: str  # object id
    partition: str
    received: dict[str, list[Delivery]]  # payload -> its deliveries here
    frontier: MessageId | None  # the furthest position delivered here
    drain: Operation | None  # a receive that found nothing after every send and commit (see _final_drain)


@dataclass(frozen=True)
class Fracture:
    """A committed transaction seen here only in part: ``seen`` was received (first by ``first``),
    and the subscription read past ``missing`` without receiving it."""

    txn: Txn
    view: SubscriptionView
    size: int  # the transaction's messages on the partition
    seen: Message
    first: Delivery
    missing: Message


@dataclass
class TxnAnalysis:
    """What the clients of one history observed, built once and read by every anomaly check.

    :meth:`build` checks the shape of every transactional operation (a typed
    :class:`~spec.history.BadHistory` naming the row and column) and infers, without judging:
    each transaction's commits, aborts and fate; each message (unique payload), the id its send
    returned and the messages sharing each entry; each delivery, empty receive, receive of unknown
    outcome, subscribe and transactional ack per subscription.  The anomaly checks (in
    :mod:`invariants.transactional`) only read it (a few derived views are computed once, on
    first use)."""

    history: str
    ops: int
    commits: dict[Txn, list[Operation]]
    aborts: dict[Txn, list[Operation]]
    fates: dict[Txn, TxnFate]
    messages: dict[str, Message]  # payload -> message
    by_entry: dict[_Entry, list[Message]]  # the sends of each entry that do not clash
    position_clashes: list[tuple[Message, Message]]  # (a send, a later send at the same id)
    deliveries: list[Delivery]
    drains: dict[str, list[Operation]]  # subscription -> receives that found nothing
    unknown_receives: dict[str, list[Operation]]  # subscription -> receives whose outcome is unknown
    subscribes: dict[str, list[Operation]]
    acks: list[Ack]
    # Every ack (any outcome, in a transaction or not) and every negative ack, per subscription.
    all_acks: dict[str, list[Operation]] = field(default_factory=lambda: defaultdict(list))
    negative_acks: dict[str, list[Operation]] = field(default_factory=lambda: defaultdict(list))
    seeks: dict[str, list[Operation]] = field(default_factory=lambda: defaultdict(list))  # PA-22, PA-23
    # process -> when each of its operations of unknown outcome was given up (its connection went)
    gave_up: dict[int, list[int]] = field(default_factory=dict)
    # How the explanations write this history's times and names.
    words: Words = field(default_factory=lambda: Words(()))

    @classmethod
    def build(cls, ops: Sequence[Operation]) -> TxnAnalysis:
        with without_cyclic_gc():  # invariants.heap: no cycles among what it builds
            return cls._build(ops)

    @classmethod
    def _build(cls, ops: Sequence[Operation]) -> TxnAnalysis:
        history = ops[0].history if ops else ""
        commits, aborts = _ends(ops, history)
        # each ended transaction's id as one tuple (the ends' own): later lookups by a message's or
        # an ack's transaction then match their key by identity, reading no second copy
        txns = {txn: txn for ended in (commits, aborts) for txn in ended}
        messages, by_entry, clashes = _sends(ops, history, txns)
        analysis = cls(
            history,
            len(ops),
            commits,
            aborts,
            _fates(commits, aborts),
            messages,
            by_entry,
            clashes,
            [],
            defaultdict(list),
            defaultdict(list),
            defaultdict(list),
            [],
        )
        analysis.words = Words(ops)
        analysis._read_subscription_ops(ops, txns)
        analysis.gave_up = _gave_up(ops)
        # PA-10: a cumulative ack on a Shared or Key_Shared subscription is answered ok and does nothing.
        analysis.acks = [
            ack
            for ack in analysis.acks
            if not ack.cumulative or not ignores_cumulative(analysis.subscribes.get(ack.subscription, []))
        ]
        return analysis

    def _read_subscription_ops(self, ops: Sequence[Operation], txns: dict[Txn, Txn]) -> None:
        partitions: dict[str, str] = {}  # subscription -> its partition: each object id parsed once
        for op in ops:
            if op.f not in ("receive", "ack", "ack_cumulative", "subscribe", "negative_ack", "seek"):
                continue
            partition = partitions.get(op.object)
            if partition is None:
                partition = partitions[op.object] = self._partition_of(op)
            if op.f == "subscribe":
                self.subscribes[op.object].append(op)
            elif op.f == "negative_ack":
                self.negative_acks[op.object].append(op)
            elif op.f == "seek":
                if op.type is not OpType.FAIL:
                    self.seeks[op.object].append(op)
            elif op.f == "receive" and op.type is not OpType.OK and op.type is not OpType.FAIL:
                self.unknown_receives[op.object].append(op)
            elif op.f == "receive" and op.type is OpType.OK:
                got = op.returned
                if got is None:
                    # A consumer that knew it was disconnected found nothing because nothing could
                    # reach it: that proves nothing about the subscription (not a drain, not idle).
                    if _flag(op, op.args, "connected") is not False:
                        self.drains[op.object].append(op)
                    continue
                payload: str = read_field(op, got, "message", "result", (str,))
                sent = self.messages.get(payload)
                if sent is not None:
                    # The send's own string: every later lookup by this payload then matches the key
                    # by identity, without reading a second copy elsewhere in a large heap.
                    payload = sent.payload
                self.deliveries.append(
                    Delivery(
                        op,
                        op.object,
                        partition,
                        payload,
                        message_id(op, got, "result", required=False),
                        read_field(op, got, "redelivery_count", "result", (int,), required=False) or 0,
                        consumer_of(op),
                    )
                )
            elif op.f in ("ack", "ack_cumulative"):
                self.all_acks[op.object].append(op)
                if op.type is not OpType.OK:
                    continue
                txn = _txn_of(op, op.args)
                if txn is not None:
                    txn = txns.get(txn, txn)
                    acked = message_id(op, op.args, "value", required=True)
                    assert acked is not None
                    self.acks.append(Ack(op, op.object, txn, acked, op.f == "ack_cumulative"))

    def _partition_of(self, op: Operation) -> str:
        """The partition of the subscription ``op`` touches (a typed BadHistory if it names none)."""
        kind, name = parse_object(op.object)
        if kind != "subscription":
            raise BadHistory(
                f"history {self.history!r} op {op.index}: {op.f} touches a subscription, not {op.object!r}",
                row=op.index,
                column="object",
            )
        try:
            partition, _ = split_subscription(name)
        except ValueError as exc:
            raise BadHistory(str(exc), row=op.index, column="object") from None
        return partition

    def fate(self, txn: Txn) -> TxnFate:
        return self.fates.get(txn, TxnFate.OPEN)

    def first_commit_call(self, txn: Txn) -> int | None:
        calls = [o.invoked_at for o in self.commits.get(txn, ())]
        return min(calls) if calls else None

    def dispatchable_from(self, message: Message) -> int:
        """The earliest time a correct broker may dispatch ``message``: its send was invoked, and for a
        transaction's message the first commit of the transaction was invoked (``premature-read``)."""
        start = self.first_commit_call(message.txn) if message.txn is not None else None
        return message.send.invoked_at if start is None else max(start, message.send.invoked_at)

    def commit_done(self, txn: Txn) -> Operation | None:
        done = [o for o in self.commits.get(txn, ()) if o.type is OpType.OK]
        return min(done, key=lambda o: o.completed_at or 0) if done else None

    def membership_changes(self, sub: str) -> list[int]:
        """When the consumers of ``sub`` may have changed, in order: a ``subscribe`` or ``unsubscribe``
        on it ended, or a process that received on it gave an operation up (its client then
        reconnects: the broker drops the consumer and adds it again).  On a Key_Shared subscription
        each change moves hash ranges, and a consumer that joins is held to the entries read before
        it joined until the ones before them are acknowledged (the classic dispatcher's recently
        joined consumers), so neither a key's order nor a delivery bound holds across one."""
        processes = {d.op.process for d in self.by_subscription.get(sub, ())}
        processes |= {op.process for op in self.drains.get(sub, []) + self.unknown_receives.get(sub, [])}
        processes |= {op.process for op in self.subscribes.get(sub, [])}
        times = [t for p in processes for t in self.gave_up.get(p, ())]
        times += [op.completed_at or op.invoked_at for op in self.subscribes.get(sub, [])]
        return sorted(times)

    def held_unacknowledged(self, sub: str) -> bool:
        """Whether a consumer of ``sub`` kept a message it received without ever acknowledging it or
        giving it back (no ack of any outcome or negative ack covering it, and no later delivery of
        it there).  On a Key_Shared subscription such a message holds the mark-delete position
        back, and with it every consumer that joined after it was read, for good (the classic
        dispatcher's recently joined consumers)."""
        mine = self.by_subscription.get(sub, [])
        later: dict[str, int] = {}
        for d in mine:
            later[d.payload] = max(later.get(d.payload, 0), d.op.invoked_at)
        answers = AckIndex(self, sub, outside_txn=False, negative=True)
        return any(
            d.position is not None
            and later[d.payload] <= d.op.invoked_at
            and not answers.covers_since(d.position, d.op.invoked_at)
            for d in mine
        )

    def acked_since(self, sub: str, message: Message, after: float, *, outside_txn: bool = False) -> bool:
        """Whether an ack on ``sub`` invoked at or after ``after`` covers ``message``: an individual or
        cumulative ack (a cumulative one where the broker honours it, PA-10), with or without a
        transaction (``outside_txn``: without only), that returned ok or whose outcome is unknown
        (it may have taken effect).  Such an ack deleted the message, or a transaction holds it
        (PA-1): it is owed no redelivery.  O(log n) per question once the subscription's acks are
        indexed (:class:`AckIndex`)."""
        if message.position is None:
            return True  # which id an ack would name is unknown: owed nothing the history can judge
        index = self._ack_indexes.get((sub, outside_txn))
        if index is None:
            index = self._ack_indexes[(sub, outside_txn)] = AckIndex(self, sub, outside_txn=outside_txn)
        return index.covers_since(message.position, after)

    @functools.cached_property
    def _ack_indexes(self) -> dict[tuple[str, bool], AckIndex]:
        return {}

    def acked_messages(self, partition: str, acked: MessageId) -> list[Message]:
        """The messages an ack names exactly (a cumulative ack's own message, not those before it)."""
        return [
            m
            for m in self.by_entry.get((partition, acked[:2]), ())
            if m.position is not None and covers(acked, False, m.position)
        ]

    def delivered(self) -> Iterator[tuple[Delivery, Message]]:
        """Each delivery of a message some send of its partition produced, with that message."""
        return iter(self._matched[0])

    @functools.cached_property
    def _matched(
        self,
    ) -> tuple[
        list[tuple[Delivery, Message]], list[tuple[Delivery, Message]], list[tuple[Delivery, Message]], list[Delivery]
    ]:
        """One pass over the deliveries, for the checks that each read a part of them: every delivery
        matched with its message, those of a transaction's message, those of a delayed message, and
        those no send of their partition produced.  Several checks asked every delivery the same
        question each: on a history of 10^6 operations each pass was a fifth of a second of lookups
        in a message table too large for the cache (issue 28's verify_scale)."""
        matched: list[tuple[Delivery, Message]] = []
        garbage: list[Delivery] = []
        messages = self.messages
        for d in self.deliveries:
            message = messages.get(d.payload)
            if message is not None and message.partition == d.partition:
                matched.append((d, message))
            else:
                garbage.append(d)
        in_txn = [pair for pair in matched if pair[1].txn is not None]
        delayed = [pair for pair in matched if pair[1].deliver_at is not None]
        return matched, in_txn, delayed, garbage

    def delivered_in_txn(self) -> Iterator[tuple[Delivery, Message]]:
        """:meth:`delivered`, of the messages sent in a transaction only."""
        return iter(self._matched[1])

    def delivered_delayed(self) -> Iterator[tuple[Delivery, Message]]:
        """:meth:`delivered`, of the delayed messages (a ``deliver_at``) only."""
        return iter(self._matched[2])

    def unmatched_deliveries(self) -> Iterator[Delivery]:
        """The deliveries of a payload that no send of their partition produced."""
        return iter(self._matched[3])

    @functools.cached_property
    def by_subscription(self) -> dict[str, list[Delivery]]:
        """subscription -> its deliveries in history order: a question about one subscription reads
        its own, not every delivery of the history (once per subscription, that was O(subscriptions x
        deliveries) on a recording with a subscription per consumer)."""
        out: dict[str, list[Delivery]] = defaultdict(list)
        for d in self.deliveries:
            out[d.subscription].append(d)
        return out

    @functools.cached_property
    def acks_by_subscription(self) -> dict[str, list[Ack]]:
        """subscription -> its transactional acks that returned ok, in history order (as
        :attr:`by_subscription`)."""
        out: dict[str, list[Ack]] = defaultdict(list)
        for ack in self.acks:
            out[ack.subscription].append(ack)
        return out

    @functools.cached_property
    def received(self) -> dict[str, dict[str, list[Delivery]]]:
        """subscription -> payload -> its deliveries there."""
        out: dict[str, dict[str, list[Delivery]]] = defaultdict(lambda: defaultdict(list))
        for d in self.deliveries:
            out[d.subscription][d.payload].append(d)
        return out

    @functools.cached_property
    def committed_by_partition(self) -> dict[str, list[Message]]:
        """partition -> the messages whose send returned ok and that are plain or of a committed txn."""
        out: dict[str, list[Message]] = defaultdict(list)
        for message in self.messages.values():
            if message.send.type is OpType.OK and (message.txn is None or self.fate(message.txn) is TxnFate.COMMITTED):
                out[message.partition].append(message)
        return out

    @functools.cached_property
    def horizons(self) -> dict[str, int]:
        """partition -> when the last of its ok sends and of the ok commits of their transactions
        completed: a receive invoked later that finds nothing has drained the partition."""
        out: dict[str, int] = {}
        for partition, committed in self.committed_by_partition.items():
            horizon = 0
            for message in committed:
                horizon = max(horizon, message.send.completed_at or 0)
                if message.txn is not None:
                    for commit in self.commits.get(message.txn, ()):
                        if commit.type is OpType.OK:
                            horizon = max(horizon, commit.completed_at or 0)
            out[partition] = horizon
        return out

    @functools.cached_property
    def views(self) -> list[SubscriptionView]:
        """Every subscription that received or found nothing, in name order."""
        views = []
        for sub in sorted(set(self.received) | set(self.drains)):
            partition, _ = split_subscription(parse_object(sub)[1])
            mine = self.received.get(sub, {})
            frontier = max((d.position for got in mine.values() for d in got if d.position is not None), default=None)
            drain = _final_drain(self.drains.get(sub, []), self.horizons.get(partition, 0))
            views.append(SubscriptionView(sub, partition, mine, frontier, drain))
        return views

    def non_durable(self, sub: str) -> bool:
        """A Reader's subscription (a ``subscribe`` says ``durable: false``, PA-24): it holds back no
        ledger deletion, and it starts wherever its start message says, so what it did not receive
        may be gone or before its start: neither loss nor a fracture is judged on it."""
        return any(_flag(op, op.args, "durable") is False for op in self.subscribes.get(sub, ()))

    @functools.cached_property
    def committed_groups(self) -> dict[tuple[str, Txn], list[Message]]:
        """(partition, txn) -> the messages of a committed transaction on that partition, in send order."""
        out: dict[tuple[str, Txn], list[Message]] = defaultdict(list)
        for partition, committed in self.committed_by_partition.items():
            for message in committed:
                if message.txn is not None:
                    out[(partition, message.txn)].append(message)
        return out

    @functools.cached_property
    def fractures(self) -> list[Fracture]:
        """Every committed transaction a subscription saw in part and read past (``fractured-read``).
        Only the transactions a subscription received a message of are looked at."""
        found: list[Fracture] = []
        groups = self.committed_groups
        # The transactions each subscription received a message of, from the deliveries of
        # transactions' messages only (a subscription's other deliveries cannot touch a group).
        received_txns: dict[str, set[Txn]] = defaultdict(set)
        for d, m in self.delivered_in_txn():
            assert m.txn is not None
            received_txns[d.subscription].add(m.txn)
        for view in self.views:
            candidates = received_txns.get(view.subscription)
            if not candidates or self.non_durable(view.subscription):
                continue
            touched = {txn for txn in candidates if (view.partition, txn) in groups}
            for txn in sorted(touched):
                group = groups[(view.partition, txn)]
                seen = [m for m in group if m.payload in view.received]
                if not seen or len(seen) == len(group):
                    continue
                for missing in (m for m in group if m.payload not in view.received):
                    if _read_past(view, missing):
                        first = view.received[seen[0].payload][0]
                        found.append(Fracture(txn, view, len(group), seen[0], first, missing))
        return found

    # --- each subscription's type, and who consumed from it, once per subscription --------------

    @functools.cached_property
    def kinds(self) -> dict[str, str | None]:
        """subscription -> its type as its subscribes asked for it (:func:`sub_type`)."""
        return {sub: sub_type(ops) for sub, ops in self.subscribes.items()}

    def kind(self, sub: str) -> str | None:
        """The subscription's type (:func:`sub_type`; None when no subscribe was recorded)."""
        return self.kinds.get(sub)

    def holds_delays(self, sub: str) -> bool:
        """Whether the broker holds delayed messages back on ``sub`` (:func:`delays`)."""
        return self.kinds.get(sub) in (None, "Shared", "Key_Shared")

    @functools.cached_property
    def exclusive_subscriptions(self) -> frozenset[str]:
        """The subscriptions every subscribe of which asked for Exclusive (:func:`exclusive`)."""
        return frozenset(sub for sub, ops in self.subscribes.items() if exclusive(ops))


# --- what the subscribes say of a subscription, and when an operation stopped mattering ---------


class AckIndex:
    """The acks of one subscription that may have taken effect (ok or unknown outcome; cumulative
    ones only where the broker honours them, PA-10), and with ``negative`` its negative acks,
    indexed for "does an ack invoked at or after t cover this id": individual acks by entry, the
    furthest cumulative ack from each invocation on, and the last ack whose id the history does not
    give."""

    def __init__(self, a: TxnAnalysis, sub: str, *, outside_txn: bool, negative: bool = False) -> None:
        """``negative``: negative acks answer a message too (it was given back, not kept)."""
        ignored = ignores_cumulative(a.subscribes.get(sub, []))
        self.individual: dict[tuple[int, int], list[tuple[int, MessageId]]] = defaultdict(list)
        cumulative: list[tuple[int, tuple[float, ...]]] = []
        self.unnamed_until: int | None = None  # the last invocation of an ack that names no id
        answers = [*a.all_acks.get(sub, []), *(a.negative_acks.get(sub, []) if negative else [])]
        for op in answers:
            if op.type is OpType.FAIL or (outside_txn and _txn_of(op, op.args) is not None):
                continue
            is_cumulative = op.f == "ack_cumulative"
            if is_cumulative and ignored:
                continue
            acked = message_id(op, op.args, "value", required=False)
            if acked is None:
                self.unnamed_until = max(self.unnamed_until or op.invoked_at, op.invoked_at)
            elif is_cumulative:
                cumulative.append((op.invoked_at, (acked[0], acked[1], math.inf if acked[2] == WHOLE else acked[2])))
            else:
                self.individual[acked[:2]].append((op.invoked_at, acked))
        cumulative.sort(key=lambda pair: pair[0])
        self.cumulative_calls = [at for at, _ in cumulative]
        # the furthest id a cumulative ack invoked at or after each one covers
        self.furthest_from: list[tuple[float, ...]] = []
        furthest: tuple[float, ...] = (-math.inf,)
        for _, key in reversed(cumulative):
            furthest = max(furthest, key)
            self.furthest_from.append(furthest)
        self.furthest_from.reverse()

    def covers_since(self, got: MessageId, after: float) -> bool:
        if self.unnamed_until is not None and self.unnamed_until >= after:
            return True
        first = bisect.bisect_left(self.cumulative_calls, after)
        if first < len(self.furthest_from) and self.furthest_from[first] >= got:
            return True
        return any(at >= after and covers(acked, False, got) for at, acked in self.individual.get(got[:2], ()))


def sub_type(subscribes: Sequence[Operation]) -> str | None:
    """The subscription's type as its subscribes asked for it: Exclusive (Failover too: one active
    consumer, no delays), Shared, Key_Shared, "mixed", or None when no subscribe was recorded."""
    kinds = {
        "Exclusive" if kind in ("Exclusive", "Failover") else str(kind)
        for kind in (op.args.get("sub_type") if isinstance(op.args, dict) else None for op in subscribes)
    }
    if not kinds:
        return None
    return kinds.pop() if len(kinds) == 1 else "mixed"


def ignores_cumulative(subscribes: Sequence[Operation]) -> bool:
    """Whether the broker ignores a cumulative ack on the subscription (PA-10: it answers ok and
    does nothing on a Shared or Key_Shared one): some subscribe asked for one of those types."""
    return any(isinstance(op.args, dict) and op.args.get("sub_type") in ("Shared", "Key_Shared") for op in subscribes)


def delays(subscribes: Sequence[Operation]) -> bool:
    """Whether the broker holds delayed messages back on the subscription (Shared and Key_Shared only)."""
    return sub_type(subscribes) in (None, "Shared", "Key_Shared")


def exclusive(subscribes: Sequence[Operation]) -> bool:
    """Every subscribe on the subscription asked for Exclusive (one consumer at a time)."""
    return bool(subscribes) and all(
        isinstance(op.args, dict) and op.args.get("sub_type") == "Exclusive" for op in subscribes
    )


def latest_start(subscribes: Sequence[Operation]) -> int | None:
    """When a ``subscribe`` with ``initial_position`` Latest completed (None: Earliest or unrecorded)."""
    latest = [op for op in subscribes if isinstance(op.args, dict) and op.args.get("initial_position") == "Latest"]
    if not latest:
        return None
    return max(op.completed_at if op.completed_at is not None else op.invoked_at for op in latest)


def end_or_never(op: Operation) -> float:
    """When an operation of unknown outcome stopped being able to take effect: its completion (the
    client gave up), or never for one still open."""
    return float("inf") if op.completed_at is None else op.completed_at


def _ends(ops: Sequence[Operation], history: str) -> tuple[dict[Txn, list[Operation]], dict[Txn, list[Operation]]]:
    """Each transaction's commit and abort operations."""
    commits: dict[Txn, list[Operation]] = defaultdict(list)
    aborts: dict[Txn, list[Operation]] = defaultdict(list)
    canon: dict[Txn, Txn] = {}
    for op in ops:
        if op.f in ("commit", "abort"):
            txn = _txn_of(op, op.args)
            if txn is None:
                raise BadHistory(f"history {history!r} op {op.index}: {op.f} needs 'txn'", row=op.index, column="value")
            txn = canon.setdefault(txn, txn)
            (commits if op.f == "commit" else aborts)[txn].append(op)
    return commits, aborts


_ACKS = frozenset({"ack", "ack_cumulative"})


def _gave_up(ops: Sequence[Operation]) -> dict[int, list[int]]:
    """Per process, when it gave each operation of unknown outcome up (still open: when it began).
    An ack sent without a receipt (``receipt: false``: the official client groups acks and never
    waits) is unknown by the protocol, not given up: the client neither timed out nor reconnected."""
    out: dict[int, list[int]] = defaultdict(list)
    for op in ops:
        if op.type.indeterminate and not (op.f in _ACKS and _flag(op, op.args, "receipt") is False):
            out[op.process].append(op.completed_at if op.completed_at is not None else op.invoked_at)
    return dict(out)


def _fates(commits: dict[Txn, list[Operation]], aborts: dict[Txn, list[Operation]]) -> dict[Txn, TxnFate]:
    """Committed if a commit returned ok; else aborted if an abort returned ok; else unknown if a
    commit is indeterminate; else aborted (every end attempt completed without committing)."""
    fates: dict[Txn, TxnFate] = {}
    for txn in set(commits) | set(aborts):
        if any(o.type is OpType.OK for o in commits[txn]):
            fates[txn] = TxnFate.COMMITTED
        elif any(o.type is OpType.OK for o in aborts[txn]):
            fates[txn] = TxnFate.ABORTED
        elif any(o.type.indeterminate for o in commits[txn]):
            fates[txn] = TxnFate.UNKNOWN
        elif commits[txn] or aborts[txn]:
            fates[txn] = TxnFate.ABORTED
    return fates


def _sends(
    ops: Sequence[Operation], history: str, txns: dict[Txn, Txn]
) -> tuple[dict[str, Message], dict[_Entry, list[Message]], list[tuple[Message, Message]]]:
    """Every send as a message (payloads must be unique), the messages of each entry, and the sends
    that clash with an earlier one at the same id (an entry holds one message, or a batch of them at
    distinct indexes; a clashing send is not added to its entry)."""
    messages: dict[str, Message] = {}
    by_entry: dict[_Entry, list[Message]] = defaultdict(list)
    slots: dict[tuple[_Entry, int], Message] = {}  # (entry, batch index) -> the message there
    clashes: list[tuple[Message, Message]] = []
    partitions: dict[str, str] = {}  # object id -> the partition it names: each parsed once
    for op in ops:
        if op.f != "send":
            continue
        partition = partitions.get(op.object)
        if partition is None:
            partition = partitions[op.object] = parse_object(op.object)[1]
        args = op.args
        payload = read_field(op, args, "message", "value", (str,))
        if payload in messages:
            raise BadHistory(
                f"history {history!r} op {op.index}: message {payload!r} was already sent by op "
                f"{messages[payload].send.index}; payloads must be unique",
                row=op.index,
                column="value",
            )
        position = None
        if op.type is OpType.OK and op.returned is not None:
            position = message_id(op, op.returned, "result", required=True)
        txn = _txn_of(op, args)
        message = Message(
            op,
            payload,
            partition,
            None if txn is None else txns.get(txn, txn),
            position,
            read_field(op, args, "deliver_at_ms", "value", (int,), required=False),
            read_field(op, args, "partition_key", "value", (str,), required=False),
            read_field(op, args, "deliver_early_ms", "value", (int,), required=False) or 0,
            read_field(op, args, "deliver_within_ms", "value", (int,), required=False),
            _flag(op, args, "deduplicated") is False,
        )
        messages[payload] = message
        if position is None:
            continue
        entry = (partition, position[:2])
        sharing = by_entry[entry]
        # An entry holds one whole message or a batch at distinct indexes, so the first message it
        # clashes with is the entry's whole message, or the one at the same index.
        if sharing and (position[2] == WHOLE or sharing[0].position == (*position[:2], WHOLE)):
            clash: Message | None = sharing[0]
        else:
            clash = slots.get((entry, position[2]))
        if clash is not None:
            clashes.append((clash, message))
        else:
            sharing.append(message)
            slots[(entry, position[2])] = message
    return messages, by_entry, clashes


def _read_past(view: SubscriptionView, missing: Message) -> bool:
    """The subscription went past ``missing``: it drained, or was delivered a later position; a
    delayed message counts only once due before the drain."""
    drain = view.drain
    passed = drain is not None or (
        view.frontier is not None and missing.position is not None and view.frontier > missing.position
    )
    return passed and (missing.deliver_at is None or drain is None or missing.deliver_at <= drain.invoked_at)


def _final_drain(drains: Sequence[Operation], horizon: int) -> Operation | None:
    """The first receive that found nothing invoked after ``horizon``: after every ok send and every
    ok commit of the partition completed (:attr:`TxnAnalysis.horizons`)."""
    after = [op for op in drains if op.invoked_at > horizon]
    return min(after, key=lambda o: o.invoked_at) if after else None
