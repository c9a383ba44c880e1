"""The recorder's history log: every operation from the client's side, on one monotonic clock.

An operation is opened when the client is about to call the library (its invocation time) and
closed when the call returns or raises (its completion time), both read from one
:class:`MonotonicClock`.  The clock counts Unix milliseconds but never goes backwards: it reads the
wall clock once, at the start of the run, and advances by ``time.monotonic_ns`` after that, so an
NTP step during the run moves no operation, while ``deliver_at_ms`` values (Unix milliseconds, as
Pulsar's clients and brokers count them) compare with operation times directly.

Each client thread is one :class:`Process`: at most one operation open at a time, as Jepsen's
processes.  An operation whose outcome the client could not learn (a timeout, a disconnect) ends
``info``, and the process is *crashed* (the history contract's rule 3): the thread carries on under
a fresh process number, as Jepsen gives a crashed client a new process.

Indexes are given at invocation, so the history's index order is the order operations began.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from spec.history import Operation, OpType, make_operation

__all__ = ["STOPPED", "HistoryLog", "MonotonicClock", "OpenOperation", "Outcome", "Process"]

# The error of an operation still in flight when a stopped run wrote its history.
STOPPED = "RecordingStopped"


class MonotonicClock:
    """Unix milliseconds read once at the start, advanced by the monotonic clock after that."""

    def __init__(self) -> None:
        self._epoch_ns = time.time_ns()
        self._start_ns = time.monotonic_ns()

    def now_ms(self) -> int:
        return (self._epoch_ns + time.monotonic_ns() - self._start_ns) // 1_000_000

    def unix_ms_at_start(self) -> int:
        return self._epoch_ns // 1_000_000


@dataclass(frozen=True)
class Outcome:
    """How an operation ended: its Jepsen type, result (JSON value) and error name."""

    type: OpType
    result: Any = None
    error: str | None = None


@dataclass
class _Row:
    index: int
    process: int
    f: str
    obj: str
    value: Any
    invoked_at: int
    outcome: Outcome | None = None
    completed_at: int | None = None


class HistoryLog:
    """Thread-safe: operations of one history, in invocation order."""

    def __init__(self, history: str, seed: int, clock: MonotonicClock | None = None) -> None:
        self.history = history
        self.seed = seed
        self.clock = clock or MonotonicClock()
        self._lock = threading.Lock()
        self._rows: list[_Row] = []
        self._processes = 0

    def new_process(self) -> int:
        with self._lock:
            self._processes += 1
            return self._processes - 1

    def invoke(self, process: int, f: str, obj: str, value: Any) -> _Row:
        with self._lock:
            row = _Row(len(self._rows), process, f, obj, value, self.clock.now_ms())
            self._rows.append(row)
            return row

    def complete(self, row: _Row, outcome: Outcome) -> None:
        now = self.clock.now_ms()
        with self._lock:
            if row.outcome is not None:
                raise RuntimeError(f"operation {row.index} ({row.f}) completed twice")
            row.outcome = outcome
            row.completed_at = now

    def restate(self, change: Callable[[str, dict[str, Any]], None]) -> None:
        """Let ``change`` amend what the recorder itself stated in each operation's value (a bound
        it can no longer stand behind), given the operation's ``f``; what the client saw is never
        touched."""
        with self._lock:
            for row in self._rows:
                if isinstance(row.value, dict):
                    change(row.f, row.value)

    def longest(self, f: str) -> int:
        """The longest an operation ``f`` that returned ok took, in milliseconds (0: none did)."""
        with self._lock:
            return max(
                (
                    r.completed_at - r.invoked_at
                    for r in self._rows
                    if r.f == f and r.completed_at is not None and r.outcome is not None and r.outcome.type is OpType.OK
                ),
                default=0,
            )

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def count(self, predicate: Callable[[str, OpType | None], bool]) -> int:
        """How many operations have an ``f`` and a type (None: still open) ``predicate`` accepts."""
        with self._lock:
            return sum(predicate(r.f, None if r.outcome is None else r.outcome.type) for r in self._rows)

    def operations(self, *, cut_short: bool = False) -> list[Operation]:
        """The history so far; an operation still open is an ``invoke`` (the history ended first),
        or with ``cut_short`` (the run was stopped) an unknown outcome (``info``, error
        ``RecordingStopped``) completed now: the call was made and nobody learnt how it ended."""
        with self._lock:  # a thread still running may complete an operation meanwhile: one snapshot
            rows = [(row, row.outcome, row.completed_at) for row in self._rows]
        now = self.clock.now_ms()
        ops = []
        for row, ended, completed_at in rows:
            outcome = ended or Outcome(
                OpType.INFO if cut_short else OpType.INVOKE, error=STOPPED if cut_short else None
            )
            if ended is None and cut_short:
                completed_at = max(now, row.invoked_at)
            ops.append(
                make_operation(
                    self.history,
                    row.index,
                    row.process,
                    outcome.type,
                    row.f,
                    row.obj,
                    row.value,
                    outcome.result,
                    invoked_at=row.invoked_at,
                    completed_at=None if outcome.type is OpType.INVOKE else completed_at,
                    error=outcome.error,
                    seed=self.seed,
                )
            )
        return ops


@dataclass
class Process:
    """One client thread: a process number that changes when an operation ends ``info``."""

    log: HistoryLog
    number: int = -1
    crashed: int = 0  # how many times an unknown outcome moved it to a fresh number
    _open: _Row | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.number < 0:
            self.number = self.log.new_process()

    def op(self, f: str, obj: str, value: Any, classify: Callable[[BaseException], Outcome]) -> OpenOperation:
        """Open an operation; use as a context manager and call ``ok``/``fail``/``info`` inside.  An
        exception of the client ends it by ``classify`` and is swallowed (code after the block
        runs); a programming error ends it ``info`` and propagates."""
        if self._open is not None:
            raise RuntimeError(f"process {self.number} invoked {f} while op {self._open.index} is open")
        row = self.log.invoke(self.number, f, obj, value)
        self._open = row
        return OpenOperation(self, row, classify)

    def _closed(self, row: _Row, outcome: Outcome) -> None:
        self.log.complete(row, outcome)
        self._open = None
        if outcome.type.indeterminate:
            self.number = self.log.new_process()
            self.crashed += 1


# Exceptions that are bugs in the recorder, never a broker's or a client library's answer.
_PROGRAMMING_ERRORS = (AssertionError, TypeError, AttributeError, NameError, KeyError, IndexError, RuntimeError)


@dataclass
class OpenOperation:
    """An operation between its invocation and completion."""

    process: Process
    row: _Row
    classify: Callable[[BaseException], Outcome]
    done: bool = False

    def __enter__(self) -> OpenOperation:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        if self.done:
            return False
        if exc is None:
            # The block returned without saying how: nothing the client learnt says it took effect.
            self.end(Outcome(OpType.INFO, error="NoOutcome"))
            return False
        if not isinstance(exc, Exception) or isinstance(exc, _PROGRAMMING_ERRORS):
            # Our own bug, or an interrupt: recorded as unknown (the call may have gone out), raised.
            self.end(Outcome(OpType.INFO, error=type(exc).__name__))
            return False
        self.end(self.classify(exc))
        return True  # a client error is an outcome, recorded: the caller goes on

    def end(self, outcome: Outcome) -> None:
        if self.done:
            raise RuntimeError(f"operation {self.row.index} ended twice")
        self.done = True
        self.process._closed(self.row, outcome)

    def ok(self, result: Any = None) -> None:
        self.end(Outcome(OpType.OK, result))

    def fail(self, error: str | None = None) -> None:
        self.end(Outcome(OpType.FAIL, None, error))

    def info(self, error: str | None = None) -> None:
        self.end(Outcome(OpType.INFO, None, error))
