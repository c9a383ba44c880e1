"""Everything the delivery oracle's checks read, built once from the client operations of one
history (:class:`View`): the transactions' starts, timeouts and ends, each message with the id its
send returned, the deliveries, empty receives, subscribes and acks per subscription, and the
coordinator's own record of what disturbed an end.  Its methods say when a transaction was
certainly open, certainly ended or certainly aborted (the times of :mod:`invariants.client_visible`'s
docstring).  The parsing helpers check a value's shape once, with a typed
:class:`~spec.history.BadHistory` naming the row and column.
"""

from __future__ import annotations

import bisect
import functools
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from invariants.analysis import covers, ignores_cumulative  # covers: PA-2, one definition for both
from invariants.client_visible.bounds import LAG_BOUND_MS, TXN_END_BOUND_MS
from invariants.words import Words, seconds
from spec.history import BadHistory, Operation, OpType, is_machine_operation, parse_object, split_subscription

__all__ = [
    "FINAL_END_ERRORS",
    "INF",
    "WHOLE",
    "Ack",
    "Delivery",
    "Message",
    "MessageId",
    "Txn",
    "View",
    "bad",
    "covers",
    "fmt_id",
    "fmt_txn",
    "message_id",
    "object_of",
    "txn_of",
]

Txn = tuple[int, int]
# (ledger, entry, batch index); index -1 for a message that is not in a batch, or a whole-entry ack
MessageId = tuple[int, int, int]
WHOLE = -1
INF = float("inf")
# END_TXN answers after which the client completes the user's commit or abort (TC-34); it retries
# only CoordinatorNotFound.
FINAL_END_ERRORS = frozenset({"TransactionNotFound", "InvalidTxnStatus"})


@dataclass(slots=True)
class Message:
    send: Operation
    payload: str
    partition: str
    txn: Txn | None
    id: MessageId | None  # None unless the send returned ok
    deliver_at: int | None
    # The client may have written it more than once (``deduplicated: false``: a recorder of a real
    # client says so, whose producer resends what it has no receipt for after a reconnect): each
    # delivery is then judged at the id it came with, a copy the ack never named being another.
    repeatable: bool = False


@dataclass(slots=True)
class Delivery:
    op: Operation
    sub: str
    payload: str
    id: MessageId | None = None  # the id the receive reported

    def of(self, message: Message, ack: Ack) -> bool:
        """Whether this delivery is of the copy ``ack`` acknowledged (any, unless the message may
        have been written twice)."""
        return not message.repeatable or self.id is None or covers(ack.id, ack.cumulative, self.id)


@dataclass(slots=True)
class Ack:
    op: Operation
    sub: str
    id: MessageId
    txn: Txn | None
    cumulative: bool


# What a subscribe states its late-visibility bound needs beyond LAG_BOUND_MS (View.lag_bound).
VISIBLE_SLACK = "visible_slack_ms"


def bad(op: Operation, what: str, column: str = "value") -> BadHistory:
    return BadHistory(f"history {op.history!r} op {op.index} ({op.f}): {what}", row=op.index, column=column)


def _pair(op: Operation, value: Any, what: str, column: str) -> tuple[int, int]:
    if not (isinstance(value, list) and len(value) == 2 and all(type(x) is int for x in value)):
        raise bad(op, f"{what!r} must be [a, b] integers, got {value!r}", column)
    return (value[0], value[1])


def object_of(op: Operation, column: str = "value") -> dict[str, Any]:
    data = op.args if column == "value" else op.returned
    if not isinstance(data, dict):
        raise bad(op, f"expected a JSON object, got {data!r}", column)
    return data


def message_id(op: Operation, data: dict[str, Any], column: str) -> MessageId:
    ledger, entry = _pair(op, data.get("position"), "position", column)
    index = data.get("batch_index")
    if index is not None and (type(index) is not int or index < 0):
        raise bad(op, f"'batch_index' must be an integer >= 0, got {index!r}", column)
    return (ledger, entry, WHOLE if index is None else index)


def txn_of(op: Operation, data: dict[str, Any]) -> Txn | None:
    raw = data.get("txn")
    return None if raw is None else _pair(op, raw, "txn", "value")


def fmt_id(mid: MessageId | None) -> str:
    if mid is None:
        return "?"
    return f"{mid[0]}:{mid[1]}" if mid[2] == WHOLE else f"{mid[0]}:{mid[1]}#{mid[2]}"


def fmt_txn(txn: Txn | None) -> str:
    return "no txn" if txn is None else f"txn ({txn[0]},{txn[1]})"


_K = TypeVar("_K")
_R = TypeVar("_R")


def _once(method: Callable[[View, _K], _R]) -> Callable[[View, _K], _R]:
    """A method of one argument computed once per argument for a view (a view never changes)."""
    name = method.__name__

    @functools.wraps(method)
    def once(view: View, arg: _K) -> _R:
        return view.once(name, arg, lambda: method(view, arg))

    return once


# Machine rows after which a subscription may hand its unacked messages out again, and the client
# operations that ask it to (see View.redispatches).
_REDISPATCH_ROWS = frozenset({"recover", "abort_txn"})
_REDISPATCH_REQUESTS = frozenset({"redeliver_unacknowledged", "negative_ack"})


class View:
    """Everything the checks need, read once from the client operations of one history."""

    def __init__(self, ops: Sequence[Operation]) -> None:
        self._memo: dict[tuple[str, Any], Any] = {}  # what :func:`_once` methods computed
        self.history = ops[0].history if ops else ""
        client = [op for op in ops if not is_machine_operation(op)]
        self.words = Words(client)
        self.client = client
        self.new_txn: dict[Txn, Operation] = {}
        self.timeout: dict[Txn, int] = {}
        self.ends: dict[Txn, list[Operation]] = defaultdict(list)
        self.messages: dict[str, Message] = {}
        self.sends_by_partition: dict[str, list[Message]] = defaultdict(list)
        self.deliveries: dict[str, list[Delivery]] = defaultdict(list)
        self.empty: dict[str, list[Operation]] = defaultdict(list)  # receives that found nothing
        self.unknown_receives: dict[str, list[Operation]] = defaultdict(list)
        self.receivers: dict[str, set[int]] = defaultdict(set)
        self.subscribes: dict[str, list[Operation]] = defaultdict(list)
        self.acks: list[Ack] = []
        # Transactional acks of unknown outcome (they may have taken effect), and the questions
        # that change nothing: ``get_last_message_id`` and the admin ``check_position_in_pending_ack``.
        self.unsure_acks: list[Operation] = []
        self.queries: list[Operation] = []
        # The coordinator's own record of what disturbed an end (machine rows; none in a real
        # broker's trace): its reloads, with the txns still unfinished in the log they replayed,
        # and phase-2 failures, per txn.
        self.recoveries: dict[str, list[tuple[int, frozenset[Txn]]]] = defaultdict(list)
        self.end_failures: dict[Txn, list[int]] = defaultdict(list)
        # The coordinator's END_TXN steps whose answer reached the client (see unanswered-end).
        self.answered_ends: list[tuple[Txn, Operation]] = []
        self._subscriptions: set[str] = set()  # the subscription ids already found well formed
        # When each subscription may have handed its unacked messages out again: its pending-ack
        # recoveries (a reload, PA-18) and transaction aborts (PA-13: the abort redelivers the txn's
        # positions, and a single-active-consumer dispatcher does that by handing out every unacked
        # message again), both machine rows, and the clients' requests for redelivery (a
        # redeliver-unacknowledged or a negative ack; in ``redelivery_requests``, apart: a request
        # is a cause only when invoked before the ack came back, a machine row also at that instant).
        self.redispatches: dict[str, list[int]] = defaultdict(list)
        self.redelivery_requests: dict[str, list[int]] = defaultdict(list)
        for op in ops:
            if op.object.startswith("coordinator:") and is_machine_operation(op):
                self._coordinator_row(op)
            elif not op.object.startswith("subscription:"):
                continue
            elif op.f in _REDISPATCH_ROWS and is_machine_operation(op):
                if op.f == "abort_txn" or op.args.get("machine") == "pending_ack":
                    self.redispatches[op.object].append(op.invoked_at)
            elif op.f in _REDISPATCH_REQUESTS and not is_machine_operation(op):
                self.redelivery_requests[op.object].append(op.invoked_at)
        for times in [*self.redispatches.values(), *self.redelivery_requests.values()]:
            times.sort()
        for op in client:
            if op.f == "new_txn" and op.type is OpType.OK:
                got = object_of(op, "result")
                txn = _pair(op, got.get("txn"), "txn", "result")
                self.new_txn[txn] = op
                timeout = object_of(op).get("timeout_ms")
                if type(timeout) is int:
                    self.timeout[txn] = timeout
            elif op.f in ("commit", "abort"):
                ended = txn_of(op, object_of(op))
                if ended is None:
                    raise bad(op, f"{op.f} needs 'txn'")
                self.ends[ended].append(op)
            elif op.f == "send":
                self._send(op)
            elif op.f in ("receive", "ack", "ack_cumulative", "subscribe"):
                self._subscription_op(op)
                if op.f == "ack" and op.type.indeterminate:
                    self.unsure_acks.append(op)
            elif op.f in ("get_last_message_id", "check_position_in_pending_ack", "seek"):
                self.queries.append(op)
        for sub in self.deliveries:
            self.deliveries[sub].sort(key=lambda d: (d.op.invoked_at, d.op.index))
        # PA-10: a cumulative ack on a Shared or Key_Shared subscription is answered ok and does nothing.
        self.acks = [ack for ack in self.acks if not ack.cumulative or not self.ignores_cumulative(ack.sub)]
        self._index()

    def _index(self) -> None:
        """The lookups the checks make, built once: each message by its entry, each delivery by
        subscription and payload, each subscription's partition; and room for what is computed of a
        transaction or a subscription on first use."""
        self.by_entry: dict[tuple[str, tuple[int, int]], list[Message]] = defaultdict(list)
        for partition, sent in self.sends_by_partition.items():
            for message in sent:
                if message.id is not None:
                    self.by_entry[(partition, message.id[:2])].append(message)
        self.received: dict[str, dict[str, list[Delivery]]] = {}
        for sub, got in self.deliveries.items():
            mine: dict[str, list[Delivery]] = defaultdict(list)
            for d in got:
                mine[d.payload].append(d)
            self.received[sub] = mine
        self.acks_by_sub: dict[str, list[Ack]] = defaultdict(list)
        for ack in self.acks:
            self.acks_by_sub[ack.sub].append(ack)
        self._partitions: dict[str, str] = {}

    def once(self, name: str, key: Any, build: Callable[[], _R]) -> _R:
        """What ``build`` computes, computed once per ``(name, key)`` for this view (a view never
        changes once built)."""
        memo = (name, key)
        if memo not in self._memo:
            self._memo[memo] = build()
        found: _R = self._memo[memo]
        return found

    def partition_of(self, sub: str) -> str:
        """The topic partition of a subscription's object id."""
        found = self._partitions.get(sub)
        if found is None:
            found = self._partitions[sub] = split_subscription(parse_object(sub)[1])[0]
        return found

    def delivered(self, sub: str, payload: str) -> list[Delivery]:
        """The deliveries of ``payload`` on ``sub``, by invocation."""
        return self.received.get(sub, {}).get(payload, [])

    def covered(self, ack: Ack) -> list[Message]:
        """The messages of the ack's partition that an individual ack acknowledges, in send order
        (a cumulative ack covers a prefix of the partition: the checks that judge one index it)."""
        assert not ack.cumulative
        return [
            m
            for m in self.by_entry.get((self.partition_of(ack.sub), ack.id[:2]), ())
            if m.id is not None and covers(ack.id, False, m.id)
        ]

    def _send(self, op: Operation) -> None:
        _, partition = parse_object(op.object)
        args = object_of(op)
        payload = args.get("message")
        if not isinstance(payload, str):
            raise bad(op, f"'message' must be a string, got {payload!r}")
        if payload in self.messages:
            raise bad(op, f"message {payload!r} was already sent by op {self.messages[payload].send.index}")
        mid = (
            message_id(op, object_of(op, "result"), "result")
            if op.type is OpType.OK and op.returned is not None
            else None
        )
        at = args.get("deliver_at_ms")
        message = Message(
            op,
            payload,
            partition,
            txn_of(op, args),
            mid,
            at if type(at) is int else None,
            args.get("deduplicated") is False,
        )
        self.messages[payload] = message
        self.sends_by_partition[partition].append(message)

    def _coordinator_row(self, op: Operation) -> None:
        """Note a coordinator reload (``recover``) with the txns its replayed log leaves unfinished
        (TC-21, TC-22: a txn whose COMMITTED/ABORTED record is replayed is gone), and a phase 3
        that a participant failed (``end_txn_in_transaction_buffer_result`` with errors)."""
        args = op.args
        if op.f == "recover" and op.type is OpType.OK and args.get("machine") == "coordinator":
            records = args.get("records")
            live: set[Txn] = set()
            finished: set[Txn] = set()
            for item in records if isinstance(records, list) else ():
                record = item[1] if isinstance(item, list) and len(item) == 2 else None
                if not isinstance(record, dict):
                    raise bad(op, f"a replayed record is [record id, record], got {item!r}")
                txn = _pair(op, record.get("txn_id"), "txn_id", "value")
                live.add(txn)
                if record.get("new_status") in ("COMMITTED", "ABORTED"):
                    finished.add(txn)
            self.recoveries[op.object].append((op.invoked_at, frozenset(live - finished)))
        elif op.f == "end_txn_in_transaction_buffer_result" and args.get("errors"):
            self.end_failures[_pair(op, args.get("txn_id"), "txn_id", "value")].append(op.invoked_at)
        elif (
            op.f == "end_txn"
            and op.completed_at is not None
            and op.completed_at > op.invoked_at
            and (op.type is OpType.OK or (op.type is OpType.FAIL and op.error in FINAL_END_ERRORS))
        ):
            # A step inside a request's window (an atomic one, invoked when completed, was no answer):
            # ok, the client got success (an accepted step answered with an error is ``info``); fail
            # with a final error, the coordinator answered that error at once (TC-9, TC-11).
            self.answered_ends.append((_pair(op, args.get("txn_id"), "txn_id", "value"), op))

    def _subscription_op(self, op: Operation) -> None:
        sub = op.object
        if sub not in self._subscriptions:  # each id checked once, at its first operation
            kind, name = parse_object(sub)
            if kind != "subscription":
                raise bad(op, f"{op.f} touches a subscription, not {op.object!r}", "object")
            try:
                split_subscription(name)
            except ValueError as exc:
                raise BadHistory(str(exc), row=op.index, column="object") from None
            self._subscriptions.add(sub)
        if op.f == "subscribe":
            stated = op.args.get(VISIBLE_SLACK) if isinstance(op.args, dict) else None
            if stated is not None and not (type(stated) is int and stated >= 0):
                raise bad(op, f"{VISIBLE_SLACK} must be a whole number of milliseconds, 0 or more, got {stated!r}")
            self.subscribes[sub].append(op)
        elif op.f == "receive":
            self.receivers[sub].add(op.process)
            if op.type.indeterminate:
                self.unknown_receives[sub].append(op)
            elif op.type is OpType.OK:
                got = op.returned
                if got is None:
                    self.empty[sub].append(op)
                else:
                    payload = got.get("message") if isinstance(got, dict) else None
                    if not isinstance(payload, str):
                        raise bad(op, f"a receive returns a 'message' string, got {got!r}", "result")
                    reported = message_id(op, got, "result") if got.get("position") is not None else None
                    sent = self.messages.get(payload)
                    if sent is not None:
                        # the send's own string: later lookups by it match their key by identity, and
                        # read no second copy elsewhere in a large heap
                        payload = sent.payload
                    self.deliveries[sub].append(Delivery(op, sub, payload, reported))
        elif op.type is OpType.OK:
            args = object_of(op)
            self.acks.append(Ack(op, sub, message_id(op, args, "value"), txn_of(op, args), op.f == "ack_cumulative"))

    # -- transaction times -----------------------------------------------------------------------

    @_once
    def open_until(self, txn: Txn) -> float:
        """Until when ``txn`` was certainly open (see :mod:`invariants.client_visible`); -inf when unknown."""
        start = self.new_txn.get(txn)
        timeout = self.timeout.get(txn)
        if start is None or timeout is None:
            return -INF
        until: float = start.invoked_at + timeout
        for end in self.ends.get(txn, ()):
            until = min(until, end.invoked_at)
        return until

    @_once
    def ended_at(self, txn: Txn) -> int | None:
        """When ``txn`` certainly ended everywhere: the first ok commit or abort completed."""
        done = [
            op.completed_at for op in self.ends.get(txn, ()) if op.type is OpType.OK and op.completed_at is not None
        ]
        return min(done) if done else None

    @_once
    def committed_at(self, txn: Txn) -> int | None:
        done = [
            op.completed_at
            for op in self.ends.get(txn, ())
            if op.f == "commit" and op.type is OpType.OK and op.completed_at is not None
        ]
        return min(done) if done else None

    @_once
    def deadline(self, txn: Txn) -> int | None:
        """The latest its coordinator may start timing ``txn`` out: it stamps the start when it
        handles NEW_TXN, before the answer reaches the client (TC-5, TC-18)."""
        start = self.new_txn.get(txn)
        timeout = self.timeout.get(txn)
        if start is None or timeout is None or start.completed_at is None:
            return None
        return start.completed_at + timeout

    @_once
    def aborted_by(self, txn: Txn) -> tuple[float, str] | None:
        """When ``txn`` certainly was aborted, with the reason: an abort returned ok, or no end of it
        took effect (none invoked, or all failed: a ``fail`` did nothing) and its coordinator must
        have timed it out (TC-18) by its deadline plus TXN_END_BOUND_MS."""
        ends = [op for op in self.ends.get(txn, []) if op.type is not OpType.FAIL]
        done = [op for op in ends if op.f == "abort" and op.type is OpType.OK and op.completed_at is not None]
        if done and not any(op.f == "commit" for op in ends):
            first = min(done, key=lambda o: o.completed_at or 0)
            return float(first.completed_at or 0), f"abort op {first.index} returned ok at {self.words.end(first)}"
        if ends:
            return None
        deadline = self.deadline(txn)
        if deadline is None:
            return None
        by = deadline + TXN_END_BOUND_MS
        return float(by), (
            f"no end of it took effect, and its coordinator times it out by {self.words.at(deadline)} (new_txn op "
            f"{self.new_txn[txn].index} done plus its timeout) + {seconds(TXN_END_BOUND_MS)} = {self.words.at(by)}"
        )

    @_once
    def ended_by(self, txn: Txn) -> tuple[float, str] | None:
        """When ``txn`` certainly ended, committed or aborted: a commit or abort returned ok; else
        TXN_END_BOUND_MS after the later of its deadline and the last end invoked that may have
        taken effect.  An end that reached the coordinator is re-driven until it completes (TC-16,
        TC-24); one that was lost leaves the txn OPEN until its coordinator times it out (TC-18)."""
        done = self.ended_at(txn)
        if done is not None:
            return float(done), f"ended by {self.words.at(done)}"
        deadline = self.deadline(txn)
        if deadline is None:
            return None
        calls = [op.invoked_at for op in self.ends.get(txn, []) if op.type is not OpType.FAIL]
        by = max([deadline, *calls]) + TXN_END_BOUND_MS
        later, disturbed = self.disturbed(txn, by)
        why = f"its deadline {self.words.at(deadline)} or its last end, plus {seconds(TXN_END_BOUND_MS)}"
        if later > by:
            why += f", = {self.words.at(by)}; then {disturbed}"
        return float(later), f"ends by {self.words.at(later)} ({why})"

    def disturbed(self, txn: Txn, by: int) -> tuple[int, str]:
        """``by`` moved past every disturbance of ``txn``'s end that the history records, and what
        moved it.  TXN_END_BOUND_MS covers one undisturbed run of the end: the timeout tracker's
        tick (TC-18), the log write, phase 2 answered or timed out by the coordinator's
        transaction-buffer client (``transactionBufferClientOperationTimeoutInMills``, 3000 ms) and
        one re-run a second later (TC-16).  A run can be disturbed without limit, and each
        disturbance starts it afresh:

        * a phase 3 failed by a participant (TC-16) is re-run END_TXN_RETRY_INTERVAL_MS later;
        * a coordinator crash loses the end in flight (TC-25) and its reload re-drives a
          COMMITTING/ABORTING txn at once (TC-24), an expired OPEN one on its first tick (TC-18).

        A reload counts when the log it replayed still holds ``txn`` unfinished and the crash before
        it may have come before ``by``: the history records the reload, not the crash, so the crash
        is only known to follow the coordinator's reload before."""
        events: list[tuple[int, float, str]] = []
        since = -INF
        for at, live in sorted(self.recoveries.get(f"coordinator:{txn[0]}", ()), key=lambda r: r[0]):
            if txn in live:
                events.append(
                    (at, since, f"its coordinator reloaded at {self.words.at(at)} with it unfinished (TC-24, TC-25)")
                )
            since = at
        for at in self.end_failures.get(txn, ()):
            events.append((at, at, f"a participant failed its end at {self.words.at(at)} (TC-16)"))
        why: list[str] = []
        for at, since, what in sorted(events):
            if since < by < at + TXN_END_BOUND_MS:
                by = at + TXN_END_BOUND_MS
                why.append(what)
        return by, f"{'; '.join(why)}; plus {seconds(TXN_END_BOUND_MS)}"

    # -- subscriptions ---------------------------------------------------------------------------

    @_once
    def lag_bound(self, sub: str) -> int:
        """How long after a message became readable an empty receive on ``sub`` is a lag
        (``late-visibility``): :data:`~invariants.client_visible.bounds.LAG_BOUND_MS` plus the slack
        its subscribes state (``visible_slack_ms``, the largest; none in a simulated history).  A
        recorder of a real broker states its slack for a busy machine plus the longest the broker
        took to answer a send in that run: a broker that stalled that long answering sends may stall
        as long dispatching."""
        stated = [
            op.args[VISIBLE_SLACK]
            for op in self.subscribes.get(sub, ())
            if isinstance(op.args, dict) and op.args.get(VISIBLE_SLACK) is not None
        ]
        return LAG_BOUND_MS + max(stated, default=0)

    @_once
    def judged(self, sub: str) -> bool:
        """Judged for liveness: Exclusive (one consumer at a time), or one receiving process throughout;
        never where a ``subscribe`` says ``liveness: false`` (a recorder of a real broker states that
        no bound holds, as while faults are injected: a real client reconnects with a backoff of its
        own, and a simulated bound means nothing there)."""
        if any(
            isinstance(op.args, dict) and (op.args.get("liveness") is False or op.args.get("durable") is False)
            for op in self.subscribes.get(sub, ())
        ):
            return False  # no bound stated, or a Reader's subscription: it holds back no ledger deletion
        if self.exclusive(sub):
            return True
        return len(self.receivers.get(sub, ())) == 1 and all(
            op.type is OpType.OK for op in self.subscribes.get(sub, ())
        )

    def blind(self, sub: str, t: float, dispatchable_from: float) -> Operation | None:
        """A receive or subscribe of unknown outcome on ``sub``, invoked before ``t``, that may have
        taken a message dispatchable from ``dispatchable_from``: it had not ended by then.  A message
        it took stays with its consumer, and an empty receive elsewhere proves nothing about it."""
        calls, latest = self._unknown(sub)
        k = bisect.bisect_left(calls, t)
        if k == 0 or latest[k - 1][0] < dispatchable_from:
            return None
        return latest[k - 1][1]

    @_once
    def _unknown(self, sub: str) -> tuple[list[int], list[tuple[float, Operation]]]:
        """The receives and subscribes of unknown outcome on ``sub`` by invocation, with the one that
        ended last (never, for one still open) among each prefix: what :meth:`blind` asks."""
        attached = [op for op in self.subscribes.get(sub, ()) if op.type.indeterminate]
        unknown = sorted([*self.unknown_receives.get(sub, ()), *attached], key=lambda op: op.invoked_at)
        latest: list[tuple[float, Operation]] = []
        for op in unknown:
            end = INF if op.completed_at is None else float(op.completed_at)
            latest.append((end, op) if not latest or end > latest[-1][0] else latest[-1])
        return [op.invoked_at for op in unknown], latest

    def dispatchable_from(self, message: Message) -> float:
        """The earliest a correct broker may dispatch ``message``: sent, and its txn's commit invoked."""
        start: float = message.send.invoked_at
        if message.txn is not None:
            calls = [op.invoked_at for op in self.ends.get(message.txn, ()) if op.f == "commit"]
            start = max(start, min(calls, default=INF))
        return start

    @_once
    def ignores_cumulative(self, sub: str) -> bool:
        """Whether the broker ignores a cumulative ack on ``sub`` (PA-10): some subscribe on it asked
        for Shared or Key_Shared."""
        return ignores_cumulative(self.subscribes.get(sub, ()))

    @_once
    def exclusive(self, sub: str) -> bool:
        """Every subscribe on ``sub`` asked for Exclusive."""
        kinds = {op.args.get("sub_type") for op in self.subscribes.get(sub, ()) if isinstance(op.args, dict)}
        return kinds == {"Exclusive"}

    @_once
    def delays(self, sub: str) -> bool:
        """Whether the broker holds delayed messages back on ``sub``: Shared and Key_Shared only."""
        kinds = {op.args.get("sub_type") for op in self.subscribes.get(sub, ()) if isinstance(op.args, dict)}
        return not kinds or bool(kinds & {"Shared", "Key_Shared"})

    def latest_from(self, sub: str) -> int | None:
        latest = [
            op.completed_at or op.invoked_at
            for op in self.subscribes.get(sub, ())
            if isinstance(op.args, dict) and op.args.get("initial_position") == "Latest"
        ]
        return max(latest) if latest else None
