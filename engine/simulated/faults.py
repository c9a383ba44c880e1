"""Deterministic fault injection for any :class:`~engine.storage.ledger.ManagedLedger`.

:class:`FaultyLedger` wraps a ledger and makes chosen operations fail: the next N appends or
reads, every operation a predicate picks, a seeded fraction of them, or all of them once the
handle is closed or fenced.  Nothing inside draws a random number on its own: randomness comes
only from a ``random.Random`` the caller passes, so a simulation seed reproduces every fault.

A fault fires either *before* the operation (it did not happen: a definite failure) or *after*
it (``after=True``: it happened, but the caller sees an error, as when a broker's response is
lost; the outcome is unknown to the caller).  With ``roll_after_append_failure`` the wrapper also
plays Pulsar's rule that a ledger whose write failed takes no more appends until it rolls over
(``ManagedLedgerAlreadyClosedException``).

Every injected fault is recorded in :attr:`FaultyLedger.injected`, in order.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from engine.storage.ledger import (
    Entry,
    InitialPosition,
    LedgerClosed,
    LedgerError,
    LedgerFenced,
    LedgerWriteFailed,
    ManagedCursor,
    ManagedLedger,
)
from spec.types import LedgerInfo, Position

__all__ = [
    "FAULT_RATES",
    "READS",
    "WRITES",
    "FaultRule",
    "FaultyCursor",
    "FaultyLedger",
    "InjectedFault",
    "Op",
    "Operation",
]

# The fault rates of ``--faults on`` (the simulator's; ``txnmodel serve`` adds its own kinds), in one
# place so a history's metadata states what the run used.
FAULT_RATES: dict[str, float | int] = {
    "drop_request": 0.01,
    "drop_response": 0.01,
    "duplicate_request": 0.05,
    "max_extra_delay_ms": 200,
    "ledger_append": 0.003,
    # Per write and per sync of the simulated disk (--disk sim only): an EIO.  A failed journal
    # write or sync takes the broker down; recovery replays the journal.  (Read failures are
    # ledger_read's: a failed read is retried, and EIO on reads would mostly fail recoveries.)
    "disk_eio": 0.0005,
    "ledger_read": 0.05,
    "short_txn_timeout": 0.1,
    "participant_timeout": 0.0,
    # Every 1-4 s a component fault is drawn: these are the chances of each kind (the rest: none).
    "broker_crash": 0.4,
    "coordinator_crash": 0.4,
    "topic_unload": 0.2,
    # Once the heal has ended every transaction: the chance that each partition is unloaded (a
    # recovery with nothing written after it, which a stale maxReadPosition would never leave);
    # with it on, the readers start only after that (see ``_Run.execute``).
    "unload_at_heal": 0.0,
}


class Op(enum.Enum):
    """The operations a fault can target."""

    APPEND = "append"
    READ = "read"
    READ_ENTRY = "read_entry"
    ROLL_OVER = "roll_over"
    DELETE_CONSUMED_LEDGERS = "delete_consumed_ledgers"
    SET_PROPERTY = "set_property"
    REMOVE_PROPERTY = "remove_property"
    OPEN_CURSOR = "open_cursor"
    DELETE_CURSOR = "delete_cursor"
    MARK_DELETE = "mark_delete"
    DELETE = "delete"
    RESET_CURSOR = "reset_cursor"
    CURSOR_SET_PROPERTY = "cursor_set_property"
    CURSOR_REMOVE_PROPERTY = "cursor_remove_property"


READS: frozenset[Op] = frozenset({Op.READ, Op.READ_ENTRY})
WRITES: frozenset[Op] = frozenset(Op) - READS


@dataclass(frozen=True, slots=True)
class Operation:
    """One attempted operation, as a predicate sees it."""

    op: Op
    ledger: str
    position: Position | None = None
    positions: tuple[Position, ...] = ()
    data: bytes | None = None
    cursor: str | None = None
    key: str | None = None


ErrorFactory = Callable[[Operation], LedgerError]
_T = TypeVar("_T")


def _default_error(operation: Operation) -> LedgerError:
    if operation.op is Op.APPEND:
        return LedgerWriteFailed(f"injected: append to {operation.ledger} failed")
    return LedgerWriteFailed(f"injected: {operation.op.value} on {operation.ledger} failed")


@dataclass(slots=True)
class FaultRule:
    """Fail operations of ``ops`` that ``predicate`` accepts, ``remaining`` more times (None:
    forever).  ``probability`` < 1 draws from ``rng`` once per matching operation."""

    ops: frozenset[Op]
    remaining: int | None = None
    predicate: Callable[[Operation], bool] | None = None
    error: ErrorFactory = _default_error
    after: bool = False
    probability: float = 1.0
    rng: random.Random | None = None

    def fires(self, operation: Operation) -> bool:
        if operation.op not in self.ops or self.remaining == 0:
            return False
        if self.predicate is not None and not self.predicate(operation):
            return False
        if self.probability < 1.0:
            assert self.rng is not None  # checked when the rule is made
            if self.rng.random() >= self.probability:
                return False
        if self.remaining is not None:
            self.remaining -= 1
        return True


@dataclass(frozen=True, slots=True)
class InjectedFault:
    operation: Operation
    error: LedgerError
    after: bool


@dataclass
class _Faults:
    rules: list[FaultRule] = field(default_factory=list)
    injected: list[InjectedFault] = field(default_factory=list)
    fenced: bool = False
    closed: bool = False
    roll_after_append_failure: bool = False
    append_blocked: bool = False


class FaultyLedger:
    """A :class:`ManagedLedger` that fails where it is told to, and otherwise delegates."""

    def __init__(
        self,
        inner: ManagedLedger,
        *,
        rng: random.Random | None = None,
        roll_after_append_failure: bool = False,
        on_inject: Callable[[InjectedFault], None] | None = None,
    ) -> None:
        self._inner = inner
        self._rng = rng
        self._faults = _Faults(roll_after_append_failure=roll_after_append_failure)
        # Told of each fault as it is injected, so a run's fault schedule can list it.
        self.on_inject = on_inject

    # -- configuring faults ---------------------------------------------------------------------

    @property
    def inner(self) -> ManagedLedger:
        return self._inner

    @property
    def injected(self) -> tuple[InjectedFault, ...]:
        return tuple(self._faults.injected)

    def add_rule(self, rule: FaultRule) -> FaultRule:
        if rule.probability < 1.0 and rule.rng is None:
            if self._rng is None:
                raise ValueError("a probabilistic fault needs a seeded random.Random (pass rng=)")
            rule.rng = self._rng
        self._faults.rules.append(rule)
        return rule

    def fail_next(
        self, ops: Op | Iterable[Op], n: int = 1, *, error: ErrorFactory | None = None, after: bool = False
    ) -> FaultRule:
        """Fail the next ``n`` operations of the given kinds."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        kinds = frozenset({ops} if isinstance(ops, Op) else ops)
        return self.add_rule(FaultRule(kinds, remaining=n, error=error or _default_error, after=after))

    def fail_appends(self, n: int = 1, *, error: ErrorFactory | None = None, after: bool = False) -> FaultRule:
        return self.fail_next(Op.APPEND, n, error=error, after=after)

    def fail_reads(self, n: int = 1, *, error: ErrorFactory | None = None) -> FaultRule:
        return self.fail_next(READS, n, error=error)

    def fail_when(
        self,
        predicate: Callable[[Operation], bool],
        *,
        ops: Iterable[Op] = tuple(Op),
        times: int | None = None,
        error: ErrorFactory | None = None,
        after: bool = False,
    ) -> FaultRule:
        """Fail every operation ``predicate`` accepts (at most ``times`` times)."""
        return self.add_rule(
            FaultRule(frozenset(ops), remaining=times, predicate=predicate, error=error or _default_error, after=after)
        )

    def fail_randomly(
        self,
        probability: float,
        *,
        ops: Iterable[Op] = tuple(Op),
        rng: random.Random | None = None,
        error: ErrorFactory | None = None,
        after: bool = False,
    ) -> FaultRule:
        """Fail each matching operation with ``probability``, drawn from the seeded ``rng``."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability must be in [0, 1], got {probability}")
        return self.add_rule(
            FaultRule(frozenset(ops), error=error or _default_error, after=after, probability=probability, rng=rng)
        )

    def remove(self, rule: FaultRule) -> None:
        self._faults.rules.remove(rule)

    def clear(self) -> None:
        """Remove every rule (closed and fenced states stay)."""
        self._faults.rules.clear()

    def fence(self) -> None:
        """Another owner took the ledger: every later operation of this handle raises
        :class:`LedgerFenced`.  The inner ledger is untouched (the new owner uses it)."""
        self._faults.fenced = True

    # -- the gate every operation passes --------------------------------------------------------

    def _run(self, operation: Operation, action: Callable[[], _T]) -> _T:
        faults = self._faults
        if faults.fenced:
            raise LedgerFenced(f"managed ledger {operation.ledger} was fenced")
        if faults.closed:
            raise LedgerClosed(f"managed ledger {operation.ledger} is closed")
        if operation.op is Op.APPEND and faults.append_blocked:
            raise LedgerClosed(f"managed ledger {operation.ledger} had a write failure; roll over first")
        rule = next((r for r in faults.rules if r.fires(operation)), None)
        if rule is None:
            return action()
        error = rule.error(operation)
        if rule.after:
            action()
        fault = InjectedFault(operation, error, rule.after)
        faults.injected.append(fault)
        if self.on_inject is not None:
            self.on_inject(fault)
        if operation.op is Op.APPEND and faults.roll_after_append_failure:
            faults.append_blocked = True
        raise error

    # -- ManagedLedger --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._inner.name

    def append(self, data: bytes) -> Position:
        return self._run(Operation(Op.APPEND, self.name, data=bytes(data)), lambda: self._inner.append(data))

    def read(self, start: Position, max_entries: int) -> list[Entry]:
        return self._run(Operation(Op.READ, self.name, position=start), lambda: self._inner.read(start, max_entries))

    def read_entry(self, position: Position) -> bytes:
        operation = Operation(Op.READ_ENTRY, self.name, position=position)
        return self._run(operation, lambda: self._inner.read_entry(position))

    def last_confirmed(self) -> Position:
        return self._inner.last_confirmed()

    def ledgers(self) -> tuple[LedgerInfo, ...]:
        return self._inner.ledgers()

    def roll_owed(self) -> bool:
        return self._inner.roll_owed()

    def roll_over(self) -> None:
        self._run(Operation(Op.ROLL_OVER, self.name), self._inner.roll_over)
        self._faults.append_blocked = False

    def delete_consumed_ledgers(self, up_to: int | None = None) -> tuple[int, ...]:
        return self._run(
            Operation(Op.DELETE_CONSUMED_LEDGERS, self.name), lambda: self._inner.delete_consumed_ledgers(up_to)
        )

    @property
    def properties(self) -> Mapping[str, str]:
        return self._inner.properties

    def set_property(self, key: str, value: str) -> None:
        self._run(Operation(Op.SET_PROPERTY, self.name, key=key), lambda: self._inner.set_property(key, value))

    def remove_property(self, key: str) -> None:
        self._run(Operation(Op.REMOVE_PROPERTY, self.name, key=key), lambda: self._inner.remove_property(key))

    def open_cursor(self, name: str, initial_position: InitialPosition = InitialPosition.LATEST) -> FaultyCursor:
        inner = self._run(
            Operation(Op.OPEN_CURSOR, self.name, cursor=name), lambda: self._inner.open_cursor(name, initial_position)
        )
        return FaultyCursor(self, inner)

    def delete_cursor(self, name: str) -> None:
        self._run(Operation(Op.DELETE_CURSOR, self.name, cursor=name), lambda: self._inner.delete_cursor(name))

    def cursors(self) -> tuple[FaultyCursor, ...]:
        return tuple(FaultyCursor(self, c) for c in self._inner.cursors())

    def close(self) -> None:
        self._faults.closed = True
        self._inner.close()

    def __repr__(self) -> str:
        return f"FaultyLedger({self._inner!r}, rules={len(self._faults.rules)})"


class FaultyCursor:
    """The cursor of a :class:`FaultyLedger`: its mutations pass through the same rules."""

    __slots__ = ("_inner", "_ledger")

    def __init__(self, ledger: FaultyLedger, inner: ManagedCursor) -> None:
        self._ledger = ledger
        self._inner = inner

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def mark_delete_position(self) -> Position:
        return self._inner.mark_delete_position

    def _op(
        self, op: Op, *, position: Position | None = None, positions: tuple[Position, ...] = (), key: str | None = None
    ) -> Operation:
        return Operation(op, self._ledger.name, position=position, positions=positions, cursor=self.name, key=key)

    def mark_delete(self, position: Position) -> None:
        self._ledger._run(self._op(Op.MARK_DELETE, position=position), lambda: self._inner.mark_delete(position))

    def delete(self, positions: Sequence[Position], ack_sets: Mapping[Position, tuple[int, ...]] | None = None) -> None:
        chosen = tuple(positions)
        self._ledger._run(self._op(Op.DELETE, positions=chosen), lambda: self._inner.delete(chosen, ack_sets))

    def reset(self, read_position: Position, ack_set: tuple[int, ...] | None = None) -> None:
        self._ledger._run(
            self._op(Op.RESET_CURSOR, position=read_position), lambda: self._inner.reset(read_position, ack_set)
        )

    def is_deleted(self, position: Position) -> bool:
        return self._inner.is_deleted(position)

    def batch_ack_set(self, position: Position) -> tuple[int, ...] | None:
        return self._inner.batch_ack_set(position)

    def individually_deleted(self) -> tuple[Position, ...]:
        return self._inner.individually_deleted()

    @property
    def properties(self) -> Mapping[str, str]:
        return self._inner.properties

    def set_property(self, key: str, value: str) -> None:
        self._ledger._run(self._op(Op.CURSOR_SET_PROPERTY, key=key), lambda: self._inner.set_property(key, value))

    def remove_property(self, key: str) -> None:
        self._ledger._run(self._op(Op.CURSOR_REMOVE_PROPERTY, key=key), lambda: self._inner.remove_property(key))

    def __repr__(self) -> str:
        return f"FaultyCursor({self.name!r})"
