"""The composed state of the model checker: its layout, its messages, the state opened for one
transition, the transition record, and the names and codes every part of the transition system
shares (:mod:`proofs.check.model` and its parts)."""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from proofs.check.program import ModelSpec
from reference import buffer as tb
from spec import errors as spec_errors
from spec.result import Err
from spec.types import (
    Position,
    Subscription,
)

TOPIC: Final = "persistent://public/default/t"
BUFFER_TOPIC: Final = tb.DEFAULT_TOPIC  # every buffer's own name: buffers are interchangeable


def partition_name(p: int) -> str:
    return f"{TOPIC}-partition-{p}"


def subscription_of(spec: ModelSpec, s: int) -> Subscription:
    sub = spec.subscriptions[s]
    return Subscription(partition_name(sub.partition), f"{sub.name}-{s}")


def _error_names() -> tuple[str, ...]:
    names: set[str] = set()
    todo = [spec_errors.DomainError]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            names.add(sub.__name__)
            todo.append(sub)
    return ("", *sorted(names))


ERRORS: Final = _error_names()
CODE: Final = {name: i for i, name in enumerate(ERRORS)}


def error_code(result: Any) -> int:
    return CODE[result.error.name] if isinstance(result, Err) else 0


# --- messages -------------------------------------------------------------------------------
# (kind, ...fields), all ints.  Client-bound responses carry the client and the txn sequence.

NEW_REQ, NEW_RESP, ADDP_REQ, ADDP_RESP, ADDS_REQ, ADDS_RESP = 0, 1, 2, 3, 4, 5
SEND_REQ, SEND_RESP, ACK_REQ, ACK_RESP, END_REQ, END_RESP = 6, 7, 8, 9, 10, 11
ENDP, ENDP_RESP, ENDS, ENDS_RESP = 12, 13, 14, 15

_MESSAGE_NAMES: Final = (
    "NEW_TXN",
    "NEW_TXN response",
    "ADD_PARTITION_TO_TXN",
    "ADD_PARTITION_TO_TXN response",
    "ADD_SUBSCRIPTION_TO_TXN",
    "ADD_SUBSCRIPTION_TO_TXN response",
    "SEND",
    "SEND response",
    "ACK",
    "ACK response",
    "END_TXN",
    "END_TXN response",
    "END_TXN_ON_PARTITION",
    "END_TXN_ON_PARTITION response",
    "END_TXN_ON_SUBSCRIPTION",
    "END_TXN_ON_SUBSCRIPTION response",
)
DUPLICABLE: Final = {
    "add_partition": ADDP_REQ,
    "add_subscription": ADDS_REQ,
    "send": SEND_REQ,
    "ack": ACK_REQ,
    "new_txn": NEW_REQ,
    "end_txn": END_REQ,
}
CLIENT_BOUND: Final = frozenset({NEW_RESP, ADDP_RESP, ADDS_RESP, SEND_RESP, ACK_RESP, END_RESP})
FROM_CLIENT: Final = frozenset({NEW_REQ, ADDP_REQ, ADDS_REQ, SEND_REQ, ACK_REQ, END_REQ})
TIMEOUT_CODE: Final = CODE["RequestTimeout"]


def message_name(kind: int) -> str:
    return _MESSAGE_NAMES[kind]


# --- composed state layout ------------------------------------------------------------------
# One flat tuple, so that a transition rewrites single slots:
# (coord, clog, caux, net, used, clock, decided, bad, *parts, *subs, *clients, *acks, *reopened, *ended)
COORD, CLOG, CAUX, NET, USED, CLOCK, DECIDED, BAD = range(8)
_BASE: Final = 8
# What a coordinator step reads and writes: its state, its log, its auxiliary state, the decisions.
COORDINATOR_SLOTS: Final = (COORD, CLOG, CAUX, DECIDED)


class Layout:
    """Where the per-partition, per-subscription and per-client slots of a flat state are."""

    def __init__(self, partitions: int, subscriptions: int, clients: int) -> None:
        self.partitions, self.subscriptions, self.clients_n = partitions, subscriptions, clients
        at = _BASE
        self.parts = slice(at, at + partitions)
        at += partitions
        self.subs = slice(at, at + subscriptions)
        at += subscriptions
        self.clients = slice(at, at + clients)
        at += clients
        self.acks = slice(at, at + subscriptions)
        at += subscriptions
        self.reopened = slice(at, at + partitions)
        at += partitions
        self.ended = slice(at, at + partitions)
        self.size = at + partitions
        # The slots themselves, for the loops of the hot paths (no method call per slot).
        self.part_slots = tuple(range(self.parts.start, self.parts.stop))
        self.sub_slots = tuple(range(self.subs.start, self.subs.stop))
        self.client_slots = tuple(range(self.clients.start, self.clients.stop))

    def part(self, p: int) -> int:
        return self.parts.start + p

    def sub(self, s: int) -> int:
        return self.subs.start + s

    def client(self, c: int) -> int:
        return self.clients.start + c

    def ack(self, s: int) -> int:
        return self.acks.start + s

    def reopen(self, p: int) -> int:
        return self.reopened.start + p

    def end(self, p: int) -> int:
        return self.ended.start + p


# caux = (epoch, runs, waiters, timers)
# part = (buffer digest, parked ((client, seq, op), ...), payload (((l, e), client, seq, op, deliver_at), ...))
# sub  = (pa digest, log digest, log_exists, read_after (l, e), avail ((l, e), ...),
#         handed (((l, e), client), ...), queued (request, ...), tracker digest or 0)
# client = (phase, k, seq, ct digest, pc, regs ((target, status), ...), ops (status, ...), held ((l, e) | (), ...), end)
# history variables: decided (status code per sequence), bad ((name, ...), ...) hand-out checks
# broken; per subscription the committed acks (((l, e), cumulative), ...); per partition the
# transactions re-opened after their end there, and those whose end it processed.
# used = (loss, duplicate, crash_coordinator, crash_partition, rollover, retention)

# client phases and op statuses
IDLE, BEGUN, IN_TXN, DONE = 0, 1, 2, 3
OP_NEW, OP_REG, OP_FLIGHT, OP_OK, OP_FAILED, OP_HELD = 0, 1, 2, 3, 4, 5
END_NONE, END_COMMIT, END_ABORT = 0, 1, 2
REG_ASKED, REG_OK, REG_FAILED = 1, 2, 3
SUB_TARGET: Final = 1000  # registration targets: partition p, or 1000 + subscription s
NO_POS: Final = (-1, -1)
PUBLISHED: Final = -2  # the txn field of a payload entry a plain producer published during the run

# ghost decided codes = TxnStatus values (OPEN 0 .. ABORTED 4)


class StepDiverged(Exception):
    """A machine step did not return within the guard's time: the component never answers."""


class Successor(NamedTuple):
    label: tuple[Any, ...]  # what happened, for traces (kind first)
    state: tuple[Any, ...]
    family: tuple[Any, ...] | None  # the weak-fairness family; None: an environment step (no fairness)
    broken: tuple[str, ...] = ()  # step properties the transition breaks
    changed: tuple[int, ...] | None = None  # the slots it may have changed (None: any)


def pos_of(p: Position) -> tuple[int, int]:
    return (p.ledger_id, p.entry_id)


class WorkingState:
    """A composed state opened for one transition (lists where it changes)."""

    __slots__ = (
        "acks",
        "bad",
        "broken",
        "caux",
        "clients",
        "clock",
        "clog",
        "coord",
        "decided",
        "ended",
        "net",
        "parts",
        "reopened",
        "subs",
        "used",
    )

    def __init__(self, s: tuple[Any, ...], layout: Layout) -> None:
        self.coord: int = s[COORD]
        self.clog: int = s[CLOG]
        self.caux: list[Any] = list(s[CAUX])
        self.net: list[Any] = list(s[NET])
        self.used: list[int] = list(s[USED])
        self.clock: int = s[CLOCK]
        self.decided: tuple[int, ...] = s[DECIDED]
        self.bad: tuple[Any, ...] = s[BAD]
        self.parts: list[Any] = list(s[layout.parts])
        self.subs: list[Any] = list(s[layout.subs])
        self.clients: list[Any] = list(s[layout.clients])
        self.acks: list[Any] = list(s[layout.acks])
        self.reopened: list[Any] = list(s[layout.reopened])
        self.ended: list[Any] = list(s[layout.ended])
        self.broken: list[str] = []

    def freeze(self) -> tuple[Any, ...]:
        return (
            self.coord,
            self.clog,
            tuple(self.caux),
            tuple(sorted(self.net)),
            tuple(self.used),
            self.clock,
            self.decided,
            self.bad,
            *self.parts,
            *self.subs,
            *self.clients,
            *self.acks,
            *self.reopened,
            *self.ended,
        )

    def send(self, message: tuple[int, ...]) -> None:
        self.net.append(message)

    def take(self, message: tuple[int, ...]) -> None:
        self.net.remove(message)

    def flag(self, name: str, *detail: int) -> None:
        self.bad = (*self.bad, (name, *detail))


def client_done() -> tuple[Any, ...]:
    """The slot of a client whose program is over."""
    return (DONE, 0, -1, 0, 0, (), (), (), END_NONE)
