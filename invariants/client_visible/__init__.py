"""What a client may and must receive: a delivery oracle written from the rules pages alone.

``invariants.transactional`` judges a history against a few fixed isolation anomalies, and the
per-object linearizability check judges the machines against the reference machines themselves, so
a slip in ``reference/`` is also in that model.  This module states, from ``spec/rules/*.md`` and
nothing in ``reference/``, what a correct broker lets a consumer see, given the sends, acks,
commits and aborts that it and the other clients made.  It judges client operations; of the machine
operations it reads only the coordinator's reloads and failed phase-3 steps, as the history's record
of the faults that delayed a transaction's end (see Times), so it applies unchanged to a trace of a
real broker, which has none.

Every check fires only on evidence no correct broker can produce: an operation of unknown outcome
gets the benefit of the doubt, an interval is judged by the end that favours the broker, and a
liveness check judges only after a stated bound.

=========================  ===================================  ===================================
check                      rules                                what was observed
=========================  ===================================  ===================================
held-back-delivery         PA-1, PA-6, PA-8, PA-18               a message a still-open transaction
                                                                held by an individual ack was
                                                                delivered again on that
                                                                subscription
redelivered-after-ack      PA-1, PA-3, PA-11, PA-12, PA-18,     a message acknowledged (plain ack,
                           PA-19                                batch index or cumulative, or an
                                                                individual ack of a committed txn)
                                                                was delivered again, across
                                                                restarts too
early-visibility           TB-7, TB-9, TB-15, TB-17              a message was delivered while a
                                                                transaction with an earlier entry
                                                                on its partition was certainly
                                                                still open (beyond maxReadPosition)
late-visibility            TB-7, TB-11, TB-12, TB-19, TB-24,    a receive found nothing although a
                           TC-15, TC-18, DD-1, DD-13, DD-25     message had been readable (and due)
                                                                for longer than LAG_BOUND_MS
missing-abort-redelivery   PA-13, PA-14, TC-18                  what an aborted or timed-out
                                                                transaction acked individually was
                                                                not delivered again within the bound
refused-send               TB-5, TC-17                          a send of a transaction that was
                                                                certainly open was refused as ended
                                                                (NotAllowed)
undispatchable-last-id     TB-18                                ``get_last_message_id`` answered the
                                                                entry of a transaction whose commit
                                                                was not yet invoked, or that had
                                                                certainly aborted
pending-ack-without-ack    PA-21                                the admin check answered PendingAck
                                                                for a position no transaction had
                                                                acknowledged on that subscription
delivered-before-seek-time PA-23                                after a seek by publish time, the
                                                                first delivery was of a message
                                                                published before that time
unexpected-error           TC-34, TC-37                         an operation failed with an error
                                                                Pulsar does not define (the client
                                                                library's own exception), or a
                                                                commit or abort with the one the
                                                                client retries (CoordinatorNotFound)
unanswered-end             TC-34                                the coordinator's answer to END_TXN
                                                                reached the client and the commit
                                                                or abort waiting for it did not
                                                                complete within ANSWER_BOUND_MS
=========================  ===================================  ===================================

Times.  A transaction is *certainly open* until the first ``commit``/``abort`` of it is invoked or
its timeout could have fired, whichever is first: the coordinator stamps the transaction's start
when it handles NEW_TXN, after the client invoked ``new_txn``, and aborts it only once
``start + timeout_ms`` has passed (TC-18, TC-19; the client's own timeout, TC-36, starts later
still).  While it is certainly open its entries hold maxReadPosition before them (TB-7), a low
watermark cannot pass it (TC-17: the watermark is below every live sequence), and what it acked
individually stays PENDING_ACK (PA-1).  It has *certainly ended* once a commit or an abort of it
returned ok: the coordinator answers only after every participant wrote its marker or applied the
end (TC-15).  An open transaction that nobody ended is aborted by its coordinator within
``timeout_ms + TXN_END_BOUND_MS`` of its ``new_txn`` completing (TC-18), and one whose end was
invoked ends within TXN_END_BOUND_MS of the later of that and its deadline (an end that reached
the coordinator is re-driven until it completes, TC-16, TC-24; a lost one leaves it to TC-18).
TXN_END_BOUND_MS covers one undisturbed run of that end; the faults a history records start it
afresh (``_View.disturbed``): a participant that failed phase 2 (the end is re-run a second later,
TC-16), and a coordinator reload whose replayed log still holds the transaction unfinished (the
crash lost the end in flight, TC-25; the reload re-drives it, TC-24, or times it out on its first
tick, TC-18).  Neither has a bound of its own: a coordinator that keeps crashing, or participants
that keep timing out, delay the end for as long as they go on.

Bounds (simulated milliseconds; logical time is the history's clock):

* ``LAG_BOUND_MS``: after a message became readable at the broker (sent, its transaction committed,
  every transaction before it on the partition ended, and for a subscription that delays messages
  its ``deliver_at_ms`` passed), a receive invoked this much later on a subscription with one
  consumer must not come back empty; nor may a receive whose recorded wait (``timeout_ms``) ends
  this much later, wherever it began (DD-25: a due message reaches a waiting consumer without its
  asking again).
* ``REDELIVERY_BOUND_MS``: after a transaction certainly ended by an abort, what it acked
  individually while it was certainly open must be received again before a receive invoked this
  much later comes back empty.
* ``TXN_END_BOUND_MS``: how long after its deadline an unended transaction may stay open.
* ``ANSWER_BOUND_MS``: how long after the coordinator's answer to END_TXN reached the client a
  commit or abort waiting for it may stay open (an engine history records when each answer reached
  the client as the end of the coordinator's ``end_txn`` step; a real broker's trace has no such
  rows, so ``unanswered-end`` does not judge it).

Subscriptions judged for liveness: every receive on them came from one process (one consumer at
a time, as an Exclusive subscription or a single Shared reader), every ``subscribe`` on them
completed ok, and no receive on them before the judged one has an unknown outcome (it may have
taken a message the history never shows).  Partitions with a transactional send of unknown
outcome before the judged receive are not judged for ``late-visibility``: that send may have
appended an entry, or re-opened an aborted transaction (TB-8), that holds maxReadPosition back.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spec.errors import is_pulsar_error
from spec.history import BadHistory, Operation, OpType, is_machine_operation, parse_object, split_subscription

__all__ = [
    "ANSWER_BOUND_MS",
    "CHECKS",
    "LAG_BOUND_MS",
    "REDELIVERY_BOUND_MS",
    "TXN_END_BOUND_MS",
    "OracleResult",
    "Violation",
    "check_client_visible",
]

LAG_BOUND_MS = 1_000
REDELIVERY_BOUND_MS = 1_000
TXN_END_BOUND_MS = 5_000
ANSWER_BOUND_MS = 5_000

# check name -> the rule ids it states
CHECKS: dict[str, tuple[str, ...]] = {
    "held-back-delivery": ("PA-1", "PA-6", "PA-8", "PA-18"),
    "redelivered-after-ack": ("PA-1", "PA-3", "PA-11", "PA-12", "PA-18", "PA-19"),
    "early-visibility": ("TB-7", "TB-9", "TB-15", "TB-17"),
    "late-visibility": ("TB-7", "TB-11", "TB-12", "TB-19", "TB-24", "TC-15", "TC-18", "DD-1", "DD-13", "DD-25"),
    "missing-abort-redelivery": ("PA-13", "PA-14", "TC-18"),
    "refused-send": ("TB-5", "TC-17"),
    "undispatchable-last-id": ("TB-18",),
    "pending-ack-without-ack": ("PA-21",),
    "delivered-before-seek-time": ("PA-23",),
    "unexpected-error": ("TC-34", "TC-37"),
    "unanswered-end": ("TC-34",),
}

Txn = tuple[int, int]
# (ledger, entry, batch index); index -1 for a message that is not in a batch, or a whole-entry ack
MessageId = tuple[int, int, int]
WHOLE = -1
INF = float("inf")


@dataclass(frozen=True)
class Violation:
    name: str
    rules: tuple[str, ...]
    history: str
    ops: tuple[int, ...]
    explanation: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "rules": list(self.rules), "ops": list(self.ops), "explanation": self.explanation}

    def __str__(self) -> str:
        return f"{self.name} ({', '.join(self.rules)}) ops {list(self.ops)}: {self.explanation}"


@dataclass(frozen=True)
class OracleResult:
    history: str
    violations: tuple[Violation, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)  # per check, including those cut by the cap
    judged: dict[str, int] = field(default_factory=dict)  # per check, how many cases it judged

    @property
    def ok(self) -> bool:
        return not self.counts


@dataclass
class _Message:
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


@dataclass
class _Delivery:
    op: Operation
    sub: str
    payload: str
    id: MessageId | None = None  # the id the receive reported

    def of(self, message: _Message, ack: _Ack) -> bool:
        """Whether this delivery is of the copy ``ack`` acknowledged (any, unless the message may
        have been written twice)."""
        return not message.repeatable or self.id is None or _covers(ack.id, ack.cumulative, self.id)


@dataclass
class _Ack:
    op: Operation
    sub: str
    id: MessageId
    txn: Txn | None
    cumulative: bool


def _bad(op: Operation, what: str, column: str = "value") -> BadHistory:
    return BadHistory(f"history {op.history!r} op {op.index} ({op.f}): {what}", row=op.index, column=column)


def _pair(op: Operation, value: Any, what: str, column: str) -> tuple[int, int]:
    if not (isinstance(value, list) and len(value) == 2 and all(type(x) is int for x in value)):
        raise _bad(op, f"{what!r} must be [a, b] integers, got {value!r}", column)
    return (value[0], value[1])


def _object(op: Operation, column: str = "value") -> dict[str, Any]:
    data = op.args if column == "value" else op.returned
    if not isinstance(data, dict):
        raise _bad(op, f"expected a JSON object, got {data!r}", column)
    return data


def _id(op: Operation, data: dict[str, Any], column: str) -> MessageId:
    ledger, entry = _pair(op, data.get("position"), "position", column)
    index = data.get("batch_index")
    if index is not None and (type(index) is not int or index < 0):
        raise _bad(op, f"'batch_index' must be an integer >= 0, got {index!r}", column)
    return (ledger, entry, WHOLE if index is None else index)


def _txn(op: Operation, data: dict[str, Any]) -> Txn | None:
    raw = data.get("txn")
    return None if raw is None else _pair(op, raw, "txn", "value")


def _covers(acked: MessageId, cumulative: bool, got: MessageId) -> bool:
    """Whether an ack of ``acked`` acknowledges the message ``got`` (PA-2: an ack without a batch
    index is a whole-entry ack; a cumulative ack at (p, i) covers every entry before p and the
    indexes 0..i of p)."""
    if got[:2] == acked[:2]:
        if WHOLE in (acked[2], got[2]):
            return True
        return got[2] <= acked[2] if cumulative else got[2] == acked[2]
    return cumulative and got[:2] < acked[:2]


def _fmt(mid: MessageId | None) -> str:
    if mid is None:
        return "?"
    return f"{mid[0]}:{mid[1]}" if mid[2] == WHOLE else f"{mid[0]}:{mid[1]}#{mid[2]}"


def _fmt_txn(txn: Txn | None) -> str:
    return "no txn" if txn is None else f"txn ({txn[0]},{txn[1]})"


class _View:
    """Everything the checks need, read once from the client operations of one history."""

    def __init__(self, ops: Sequence[Operation]) -> None:
        self.history = ops[0].history if ops else ""
        client = [op for op in ops if not is_machine_operation(op)]
        self.client = client
        self.new_txn: dict[Txn, Operation] = {}
        self.timeout: dict[Txn, int] = {}
        self.ends: dict[Txn, list[Operation]] = defaultdict(list)
        self.messages: dict[str, _Message] = {}
        self.sends_by_partition: dict[str, list[_Message]] = defaultdict(list)
        self.deliveries: dict[str, list[_Delivery]] = defaultdict(list)
        self.empty: dict[str, list[Operation]] = defaultdict(list)  # receives that found nothing
        self.unknown_receives: dict[str, list[Operation]] = defaultdict(list)
        self.receivers: dict[str, set[int]] = defaultdict(set)
        self.subscribes: dict[str, list[Operation]] = defaultdict(list)
        self.acks: list[_Ack] = []
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
        for op in ops:
            if is_machine_operation(op) and op.object.startswith("coordinator:"):
                self._coordinator_row(op)
        for op in client:
            if op.f == "new_txn" and op.type is OpType.OK:
                got = _object(op, "result")
                txn = _pair(op, got.get("txn"), "txn", "result")
                self.new_txn[txn] = op
                timeout = _object(op).get("timeout_ms")
                if type(timeout) is int:
                    self.timeout[txn] = timeout
            elif op.f in ("commit", "abort"):
                ended = _txn(op, _object(op))
                if ended is None:
                    raise _bad(op, f"{op.f} needs 'txn'")
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

    def _send(self, op: Operation) -> None:
        _, partition = parse_object(op.object)
        args = _object(op)
        payload = args.get("message")
        if not isinstance(payload, str):
            raise _bad(op, f"'message' must be a string, got {payload!r}")
        if payload in self.messages:
            raise _bad(op, f"message {payload!r} was already sent by op {self.messages[payload].send.index}")
        mid = _id(op, _object(op, "result"), "result") if op.type is OpType.OK and op.returned is not None else None
        at = args.get("deliver_at_ms")
        message = _Message(
            op,
            payload,
            partition,
            _txn(op, args),
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
                    raise _bad(op, f"a replayed record is [record id, record], got {item!r}")
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
            and (op.type is OpType.OK or (op.type is OpType.FAIL and op.error in _FINAL_END_ERRORS))
        ):
            # A step inside a request's window (an atomic one, invoked when completed, was no answer):
            # ok, the client got success (an accepted step answered with an error is ``info``); fail
            # with a final error, the coordinator answered that error at once (TC-9, TC-11).
            self.answered_ends.append((_pair(op, args.get("txn_id"), "txn_id", "value"), op))

    def _subscription_op(self, op: Operation) -> None:
        kind, name = parse_object(op.object)
        if kind != "subscription":
            raise _bad(op, f"{op.f} touches a subscription, not {op.object!r}", "object")
        try:
            split_subscription(name)
        except ValueError as exc:
            raise BadHistory(str(exc), row=op.index, column="object") from None
        sub = op.object
        if op.f == "subscribe":
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
                        raise _bad(op, f"a receive returns a 'message' string, got {got!r}", "result")
                    reported = _id(op, got, "result") if got.get("position") is not None else None
                    self.deliveries[sub].append(_Delivery(op, sub, payload, reported))
        elif op.type is OpType.OK:
            args = _object(op)
            self.acks.append(_Ack(op, sub, _id(op, args, "value"), _txn(op, args), op.f == "ack_cumulative"))

    # -- transaction times -----------------------------------------------------------------------

    def open_until(self, txn: Txn) -> float:
        """Until when ``txn`` was certainly open (see the module docstring); -inf when unknown."""
        start = self.new_txn.get(txn)
        timeout = self.timeout.get(txn)
        if start is None or timeout is None:
            return -INF
        until: float = start.invoked_at + timeout
        for end in self.ends.get(txn, ()):
            until = min(until, end.invoked_at)
        return until

    def ended_at(self, txn: Txn) -> int | None:
        """When ``txn`` certainly ended everywhere: the first ok commit or abort completed."""
        done = [
            op.completed_at for op in self.ends.get(txn, ()) if op.type is OpType.OK and op.completed_at is not None
        ]
        return min(done) if done else None

    def committed_at(self, txn: Txn) -> int | None:
        done = [
            op.completed_at
            for op in self.ends.get(txn, ())
            if op.f == "commit" and op.type is OpType.OK and op.completed_at is not None
        ]
        return min(done) if done else None

    def deadline(self, txn: Txn) -> int | None:
        """The latest its coordinator may start timing ``txn`` out: it stamps the start when it
        handles NEW_TXN, before the answer reaches the client (TC-5, TC-18)."""
        start = self.new_txn.get(txn)
        timeout = self.timeout.get(txn)
        if start is None or timeout is None or start.completed_at is None:
            return None
        return start.completed_at + timeout

    def aborted_by(self, txn: Txn) -> tuple[float, str] | None:
        """When ``txn`` certainly was aborted, with the reason: an abort returned ok, or no end of it
        took effect (none invoked, or all failed: a ``fail`` did nothing) and its coordinator must
        have timed it out (TC-18) by its deadline plus TXN_END_BOUND_MS."""
        ends = [op for op in self.ends.get(txn, []) if op.type is not OpType.FAIL]
        done = [op for op in ends if op.f == "abort" and op.type is OpType.OK and op.completed_at is not None]
        if done and not any(op.f == "commit" for op in ends):
            first = min(done, key=lambda o: o.completed_at or 0)
            return float(first.completed_at or 0), f"abort op {first.index} returned ok at {first.completed_at}"
        if ends:
            return None
        deadline = self.deadline(txn)
        if deadline is None:
            return None
        by = deadline + TXN_END_BOUND_MS
        return float(by), (
            f"no end of it took effect, and its coordinator times it out by {deadline} (new_txn op "
            f"{self.new_txn[txn].index} done plus its timeout) + {TXN_END_BOUND_MS} ms = {by}"
        )

    def ended_by(self, txn: Txn) -> tuple[float, str] | None:
        """When ``txn`` certainly ended, committed or aborted: a commit or abort returned ok; else
        TXN_END_BOUND_MS after the later of its deadline and the last end invoked that may have
        taken effect.  An end that reached the coordinator is re-driven until it completes (TC-16,
        TC-24); one that was lost leaves the txn OPEN until its coordinator times it out (TC-18)."""
        done = self.ended_at(txn)
        if done is not None:
            return float(done), f"ended by {done}"
        deadline = self.deadline(txn)
        if deadline is None:
            return None
        calls = [op.invoked_at for op in self.ends.get(txn, []) if op.type is not OpType.FAIL]
        by = max([deadline, *calls]) + TXN_END_BOUND_MS
        later, disturbed = self.disturbed(txn, by)
        why = f"its deadline {deadline} or its last end, plus {TXN_END_BOUND_MS} ms"
        if later > by:
            why += f", = {by}; then {disturbed}"
        return float(later), f"ends by {later} ({why})"

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
                events.append((at, since, f"its coordinator reloaded at {at} with it unfinished (TC-24, TC-25)"))
            since = at
        for at in self.end_failures.get(txn, ()):
            events.append((at, at, f"a participant failed its end at {at} (TC-16)"))
        why: list[str] = []
        for at, since, what in sorted(events):
            if since < by < at + TXN_END_BOUND_MS:
                by = at + TXN_END_BOUND_MS
                why.append(what)
        return by, f"{'; '.join(why)}; plus {TXN_END_BOUND_MS} ms"

    # -- subscriptions ---------------------------------------------------------------------------

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
        for op in self.unknown_receives.get(sub, ()):
            if op.invoked_at < t and (op.completed_at is None or op.completed_at >= dispatchable_from):
                return op
        for op in self.subscribes.get(sub, ()):
            if (
                op.type.indeterminate
                and op.invoked_at < t
                and (op.completed_at is None or op.completed_at >= dispatchable_from)
            ):
                return op
        return None

    def dispatchable_from(self, message: _Message) -> float:
        """The earliest a correct broker may dispatch ``message``: sent, and its txn's commit invoked."""
        start: float = message.send.invoked_at
        if message.txn is not None:
            calls = [op.invoked_at for op in self.ends.get(message.txn, ()) if op.f == "commit"]
            start = max(start, min(calls, default=INF))
        return start

    def exclusive(self, sub: str) -> bool:
        """Every subscribe on ``sub`` asked for Exclusive."""
        kinds = {op.args.get("sub_type") for op in self.subscribes.get(sub, ()) if isinstance(op.args, dict)}
        return kinds == {"Exclusive"}

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


class _Out:
    def __init__(self, history: str, cap: int) -> None:
        self.history = history
        self.cap = cap
        self.found: list[Violation] = []
        self.counts: dict[str, int] = defaultdict(int)
        self.judged: dict[str, int] = dict.fromkeys(CHECKS, 0)

    def add(self, name: str, ops: Iterable[Operation], explanation: str) -> None:
        self.counts[name] += 1
        if self.counts[name] <= self.cap:
            index = tuple(sorted({op.index for op in ops}))
            self.found.append(Violation(name, CHECKS[name], self.history, index, explanation))


def check_client_visible(ops: Sequence[Operation], *, cap: int = 20) -> OracleResult:
    """Every check of this module over one history (client operations; machine operations are
    skipped); ``cap`` violations of each check are kept in full, all are counted."""
    view = _View(ops)
    out = _Out(view.history, cap)
    _held_back(view, out)
    _redelivered_after_ack(view, out)
    _early_visibility(view, out)
    _late_visibility(view, out)
    _missing_abort_redelivery(view, out)
    _refused_sends(view, out)
    _undispatchable_last_id(view, out)
    _pending_ack_without_ack(view, out)
    _delivered_before_seek_time(view, out)
    _unexpected_errors(view, out)
    _unanswered_ends(view, out)
    return OracleResult(view.history, tuple(out.found), dict(out.counts), dict(out.judged))


def _covered(view: _View, ack: _Ack) -> list[_Message]:
    """The messages of the ack's partition that the ack acknowledges."""
    partition, _ = split_subscription(parse_object(ack.sub)[1])
    return [
        m
        for m in view.sends_by_partition.get(partition, ())
        if m.id is not None and _covers(ack.id, ack.cumulative, m.id)
    ]


def _held_back(view: _View, out: _Out) -> None:
    """PA-1: a message an individual ack of an open txn holds is PENDING_ACK, and a PENDING_ACK
    message is not dispatched on that subscription (the dispatcher filters it; a restart replays
    the pending-ack log first, PA-18).  Cumulative txn acks are left out: the broker may ignore one
    and still answer ok (PA-10)."""
    for ack in view.acks:
        if ack.txn is None or ack.cumulative or ack.op.completed_at is None:
            continue
        until = view.open_until(ack.txn)
        if until <= ack.op.completed_at:
            continue
        out.judged["held-back-delivery"] += 1
        for message in _covered(view, ack):
            for d in view.deliveries.get(ack.sub, ()):
                if d.payload != message.payload or d.op.completed_at is None or not d.of(message, ack):
                    continue
                # strictly after: intervals are closed, so a receive invoked the instant the ack
                # completed may have come first (millisecond clocks make such ties common)
                if d.op.invoked_at > ack.op.completed_at and d.op.completed_at < until:
                    out.add(
                        "held-back-delivery",
                        [message.send, ack.op, d.op],
                        f"{ack.sub}: {_fmt_txn(ack.txn)} acked {message.payload!r} at {_fmt(message.id)} (op "
                        f"{ack.op.index}, done at {ack.op.completed_at}) and was certainly still open until "
                        f"{until:g}; yet receive op {d.op.index} (invoked at {d.op.invoked_at}, done at "
                        f"{d.op.completed_at}) delivered it again: a PENDING_ACK message is not dispatched",
                    )


def _redelivered_after_ack(view: _View, out: _Out) -> None:
    """PA-1, PA-3: once the cursor deleted a message (a plain ack, PA-11 even over a pending ack;
    a committed txn's individual ack, PA-12) it is DELETED for good, across restarts (the cursor
    and the pending-ack log are durable before the answer, PA-18, PA-19)."""
    for ack in view.acks:
        if ack.txn is None:
            effective = ack.op.completed_at
            how = f"acked it{' cumulatively' if ack.cumulative else ''} (op {ack.op.index}, done at {effective})"
        elif not ack.cumulative:
            effective = view.committed_at(ack.txn)
            how = f"acked it in {_fmt_txn(ack.txn)} (op {ack.op.index}), which committed by {effective}"
        else:
            continue  # a cumulative txn ack may be ignored (PA-10)
        if effective is None:
            continue
        out.judged["redelivered-after-ack"] += 1
        for message in _covered(view, ack):
            for d in view.deliveries.get(ack.sub, ()):
                if d.payload == message.payload and d.op.invoked_at > effective and d.of(message, ack):
                    out.add(
                        "redelivered-after-ack",
                        [message.send, ack.op, d.op],
                        f"{ack.sub} {how}; receive op {d.op.index}, invoked later at {d.op.invoked_at}, "
                        f"delivered {message.payload!r} at {_fmt(message.id)} again",
                    )


def _early_visibility(view: _View, out: _Out) -> None:
    """TB-7, TB-15: nothing at or after the first entry of an ongoing txn is dispatched.  A txn
    certainly open for the whole of a receive held maxReadPosition before its first entry."""
    for partition, sent in view.sends_by_partition.items():
        # each txn's first entry on the partition (of its sends that returned a position)
        first: dict[Txn, _Message] = {}
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
                            f"{sub}: receive op {d.op.index} delivered {d.payload!r} at {_fmt(message.id)} by "
                            f"{d.op.completed_at}, while {_fmt_txn(txn)}, whose entry {entry[0]}:{entry[1]} comes "
                            f"before it (send op {head.send.index}), was certainly still open (until "
                            f"{view.open_until(txn):g}): maxReadPosition stays before an ongoing txn's first entry",
                        )
                        break


def _readable_at(view: _View, message: _Message, before: list[_Message], sub: str) -> tuple[float, str] | None:
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
        why += f", {_fmt_txn(message.txn)} committed by {done}"
    for other in before:
        txn = other.txn
        if txn is None or txn == message.txn:
            continue
        ended = view.ended_by(txn)
        if ended is None:
            return None
        if ended[0] > at:
            at = ended[0]
            why += f", {_fmt_txn(txn)} (entry {_fmt(other.id)} before it) {ended[1]}"
    if message.deliver_at is not None and view.delays(sub) and message.deliver_at > at:
        at = message.deliver_at
        why += f", due at {message.deliver_at}"
    return at, why


def _late_visibility(view: _View, out: _Out) -> None:
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
                f"{sub}: {message.payload!r} at {_fmt(message.id)} was readable by {at:g} ({why}); "
                f"receive op {empty.index}, invoked at {empty.invoked_at}{waited}, {t - at:g} ms later "
                f"(bound {LAG_BOUND_MS}), found nothing, and {sub} had not received it",
            )


def _gave_up_by(receive: Operation) -> int:
    """The latest moment an empty receive certainly found nothing: its invocation, or with a
    recorded wait (``timeout_ms``) that long after it -- the broker had the request from its
    arrival, at or after the invocation, and answered nothing only once the wait was over (DD-25:
    a message falling due meanwhile is dispatched to the waiting consumer).  The completion is no
    bound: the answer may have been delayed on its way back."""
    wait = receive.args.get("timeout_ms") if isinstance(receive.args, dict) else None
    return receive.invoked_at + wait if type(wait) is int and wait > 0 else receive.invoked_at


def _deleted_otherwise(view: _View, ack: _Ack, message: _Message) -> bool:
    """Another ack on the subscription may have deleted ``message`` on the cursor: a plain ack, or
    an ack of a txn that did not certainly abort.  The cursor wins over a pending ack (PA-11, and a
    committed cumulative range, PA-6), and what it deleted is not redelivered by an abort."""
    assert message.id is not None
    for other in view.acks:
        if other is ack or other.sub != ack.sub or not _covers(other.id, other.cumulative, message.id):
            continue
        if other.txn is None or view.aborted_by(other.txn) is None:
            return True
    return False


def _missing_abort_redelivery(view: _View, out: _Out) -> None:
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
    for ack in view.acks:
        if ack.txn is None or ack.cumulative or ack.op.completed_at is None or not view.judged(ack.sub):
            continue
        if ack.op.completed_at > view.open_until(ack.txn):
            continue
        aborted = view.aborted_by(ack.txn)
        if aborted is None:
            continue
        by, how = aborted
        for message in _covered(view, ack):
            if message.deliver_at is not None or _deleted_otherwise(view, ack, message):
                continue
            again = min(
                (
                    d.op.invoked_at
                    for d in view.deliveries.get(ack.sub, ())
                    if d.payload == message.payload and d.op.invoked_at >= ack.op.completed_at
                ),
                default=INF,
            )
            witnesses = [
                (op.invoked_at, op, f"found nothing (invoked at least {REDELIVERY_BOUND_MS} ms later)")
                for op in view.empty.get(ack.sub, ())
                if op.invoked_at >= by + REDELIVERY_BOUND_MS
            ]
            if view.exclusive(ack.sub):
                # An Exclusive consumer gets what an abort redelivers ahead of anything dispatched later.
                witnesses += [
                    (d.op.invoked_at, d.op, f"returned {d.payload!r}, sent after that (op {later.send.index})")
                    for d in view.deliveries.get(ack.sub, ())
                    if (later := view.messages.get(d.payload)) is not None
                    and later.deliver_at is None
                    and later.send.invoked_at > by
                ]
            if not witnesses:
                continue
            at, witness, what = min(witnesses, key=lambda w: (w[0], w[1].index))
            out.judged["missing-abort-redelivery"] += 1
            if again < at or view.blind(ack.sub, at, ack.op.invoked_at) is not None:
                continue
            out.add(
                "missing-abort-redelivery",
                [message.send, ack.op, witness],
                f"{ack.sub}: {_fmt_txn(ack.txn)} acked {message.payload!r} at {_fmt(message.id)} (op "
                f"{ack.op.index}) and was aborted ({how}); receive op {witness.index}, invoked at {at}, "
                f"{what}, and the message had not been delivered again",
            )


def _refused_sends(view: _View, out: _Out) -> None:
    """TB-5: a buffer refuses an append as "ended" only when the txn's sequence is at or below its
    coordinator's low watermark, and TC-17 keeps the watermark below every live txn: a send of a
    txn certainly open until after the send completed is never refused that way."""
    for sent in view.messages.values():
        op = sent.send
        if sent.txn is None or op.type is not OpType.FAIL or op.completed_at is None:
            continue
        out.judged["refused-send"] += 1
        until = view.open_until(sent.txn)
        if op.error == "NotAllowed" and op.completed_at < until:
            out.add(
                "refused-send",
                [op],
                f"send op {op.index} of {sent.payload!r} in {_fmt_txn(sent.txn)} to {sent.partition} was refused "
                f"with NotAllowed (done at {op.completed_at}), while the txn was certainly open until {until:g}: "
                f"only a txn at or below the low watermark is refused as ended, and the watermark stays below "
                f"every live txn",
            )


def _undispatchable_last_id(view: _View, out: _Out) -> None:
    """TB-18: the last message id is the last *dispatchable* position, found by scanning back from
    maxReadPosition, so it is never an entry of a transaction that was still open when the answer
    left (its commit not yet invoked: maxReadPosition stays before its first entry, TB-7) nor of one
    that had certainly aborted before the question (an aborted entry is skipped by the scan)."""
    for op in view.queries:
        if op.f != "get_last_message_id" or op.type is not OpType.OK or op.completed_at is None:
            continue
        partition, _ = split_subscription(parse_object(op.object)[1])
        got = _id(op, _object(op, "result"), "result")
        out.judged["undispatchable-last-id"] += 1
        for message in view.sends_by_partition.get(partition, ()):
            if message.txn is None or message.id is None or message.id[:2] != got[:2]:
                continue
            aborted = view.aborted_by(message.txn)
            if view.dispatchable_from(message) > op.completed_at:
                why = f"no commit of {_fmt_txn(message.txn)} was invoked before the answer at {op.completed_at}"
            elif aborted is not None and aborted[0] <= op.invoked_at:
                why = f"{_fmt_txn(message.txn)} had certainly aborted by {aborted[0]:g} ({aborted[1]})"
            else:
                continue
            out.add(
                "undispatchable-last-id",
                [op, message.send],
                f"get_last_message_id op {op.index} on {op.object} answered {_fmt(got)}, the entry of "
                f"{message.payload!r} (send op {message.send.index}), but {why}: the last message id is "
                f"the last dispatchable position",
            )
            break


def _pending_ack_without_ack(view: _View, out: _Out) -> None:
    """PA-21: the admin check answers PendingAck only for a position a transaction holds by an
    individual ack on that subscription, so some transactional ``ack`` of it (ok, or of unknown
    outcome) was invoked there before the answer came back."""
    candidates: dict[str, list[tuple[Operation, MessageId]]] = defaultdict(list)
    for ack in view.acks:
        if ack.txn is not None and not ack.cumulative:
            candidates[ack.sub].append((ack.op, ack.id))
    for op in view.unsure_acks:
        args = _object(op)
        if _txn(op, args) is not None:
            candidates[op.object].append((op, _id(op, args, "value")))
    for op in view.queries:
        if op.f != "check_position_in_pending_ack" or op.type is not OpType.OK or op.completed_at is None:
            continue
        state = _object(op, "result").get("state")
        if state != "PendingAck":
            continue
        asked = _id(op, _object(op), "value")
        out.judged["pending-ack-without-ack"] += 1
        done = op.completed_at
        if any(
            ack.invoked_at < done and acked[:2] == asked[:2] and (acked[2] == asked[2] or WHOLE in (acked[2], asked[2]))
            for ack, acked in candidates.get(op.object, ())
        ):
            continue
        out.add(
            "pending-ack-without-ack",
            [op],
            f"check_position_in_pending_ack op {op.index} on {op.object} answered PendingAck for {_fmt(asked)}, "
            f"but no transactional ack of it was invoked on that subscription before the answer at {done}",
        )


def _delivered_before_seek_time(view: _View, out: _Out) -> None:
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
        for k, seek in enumerate(mine):
            at = _object(seek).get("publish_time")
            if type(at) is not int:
                raise _bad(seek, f"'publish_time' must be an integer, got {at!r}")
            until = mine[k + 1].invoked_at if k + 1 < len(mine) else INF
            assert seek.completed_at is not None
            first = next(
                (d for d in deliveries if seek.completed_at <= d.op.invoked_at < until),
                None,
            )
            if first is None:
                continue
            out.judged["delivered-before-seek-time"] += 1
            message = view.messages.get(first.payload)
            if message is None or message.send.completed_at is None or message.send.completed_at >= at:
                continue
            out.add(
                "delivered-before-seek-time",
                [seek, first.op, message.send],
                f"seek op {seek.index} on {sub} to publish time {at} returned at {seek.completed_at}; the first "
                f"delivery after it, receive op {first.op.index}, was {message.payload!r}, whose send (op "
                f"{message.send.index}) had completed at {message.send.completed_at}, before that time",
            )


_PULSAR_KINDS = frozenset({"coordinator", "partition", "subscription", "tracker"})
# END_TXN answers after which the client completes the user's commit or abort (TC-34); it retries
# only CoordinatorNotFound.
_FINAL_END_ERRORS = frozenset({"TransactionNotFound", "InvalidTxnStatus"})


def _unexpected_errors(view: _View, out: _Out) -> None:
    """TC-37: an operation on a Pulsar object that failed, failed with an error Pulsar defines (a
    domain error, a ``ServerError`` code, an exception of the official client): any other name is
    an exception of the client library's own reaching the application."""
    for op in view.client:
        if op.type is not OpType.FAIL or op.error is None:
            continue
        kind, _ = parse_object(op.object)
        if kind not in _PULSAR_KINDS:
            continue
        out.judged["unexpected-error"] += 1
        if not is_pulsar_error(op.error):
            out.add(
                "unexpected-error",
                [op],
                f"{op.f} on {op.object} failed with {op.error!r}, which is no error of Pulsar's: "
                "the client library raised an exception of its own",
            )
        elif op.f in ("commit", "abort") and op.error == "CoordinatorNotFound":
            out.add(
                "unexpected-error",
                [op],
                f"{op.f} op {op.index} failed with CoordinatorNotFound, which the client retries until the "
                "coordinator is loaded (TC-34) instead of handing it to the application",
            )


def _unanswered_ends(view: _View, out: _Out) -> None:
    """TC-34: the client completes a commit or abort with the coordinator's answer to its END_TXN
    (retrying only CoordinatorNotFound).  An engine history records when that answer reached the
    client (the end of the coordinator's ``end_txn`` step, answered ok or with a final error), so a
    commit or abort of that txn invoked before the step and still open ANSWER_BOUND_MS after it is
    a client that dropped the answer."""
    for txn, step in view.answered_ends:
        assert step.completed_at is not None
        by = step.completed_at + ANSWER_BOUND_MS
        for end in view.ends.get(txn, ()):
            if end.invoked_at > step.invoked_at:
                continue  # invoked after this END_TXN was sent: not the end it answers
            if end.completed_at is not None and (
                end.completed_at < step.completed_at
                or (end.type.indeterminate and end.completed_at == step.completed_at)
            ):
                continue  # done (or given up) before the answer came
            out.judged["unanswered-end"] += 1
            if end.type.indeterminate or end.completed_at is None or end.completed_at > by:
                shown = (
                    "never completed" if end.completed_at is None else f"ended {end.type.value} at {end.completed_at}"
                )
                out.add(
                    "unanswered-end",
                    [end, step],
                    f"{end.f} op {end.index} of {_fmt_txn(txn)} {shown}, although the coordinator's answer to its "
                    f"END_TXN (op {step.index}, {step.type.value}{'' if step.error is None else ' ' + step.error}) "
                    f"reached the client at {step.completed_at}: it must complete by {by}",
                )
