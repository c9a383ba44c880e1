"""A record log (the coordinator's transaction log, a subscription's pending-ack log) on a managed ledger.

The writing policy is PIP-160's batched writer, :mod:`reference.batched_log`, stepped here on the
simulation's logical clock (the threaded :mod:`engine.storage.batched_writer` is for real
time; the simulation needs every timer to be an event).  With batching off the same machine
writes one record per entry.  This module only carries out the machine's effects: ledger writes
(:class:`~reference.batched_log.AsyncAddEntry`, answered one logical millisecond later with
``AddEntryComplete`` or ``AddEntryFailed``), its timer, cursor deletes at batch-index level, and
completing the callers' futures.  Replay reads the ledger with the cursor's view through
:func:`reference.batched_log.replay`.

A crash loses what is buffered or in flight (the futures of those callers never complete); what
the ledger acknowledged survives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from google.protobuf.message import Message

from engine.scheduler import Future, Simulation
from engine.storage.ledger import InitialPosition, LedgerClosed, LedgerError, ManagedCursor, ManagedLedger
from reference import batched_log as bl
from spec.config import Config
from spec.envelope import LogKind
from spec.errors import DomainError
from spec.history import object_id, state_digest
from spec.result import Err, Ok
from spec.types import BatchedPosition, Position

__all__ = ["FlushMetrics", "LogWriteFailed", "RecordLog"]

RecordPosition = BatchedPosition | Position

CURSOR_NAME = "__log"


class LogWriteFailed(Exception):
    """A record was not made durable; ``error`` is the domain error the writer reported."""

    def __init__(self, error: DomainError) -> None:
        super().__init__(f"{error.name}: {error}")
        self.error = error


class FlushMetrics(Protocol):
    """Where a log's batch flushes are counted (BW-19): :class:`~.bufferedwriter_metrics.BufferedWriterMetrics`."""

    def observe(self, flush: bl.FlushObserved) -> None: ...


class RecordLog:
    """One log of records over ``ledger``; ``batching`` turns PIP-160 batching on or off.

    ``metrics``, when given, receives every batch flush; Pulsar shares one set of collectors per
    log kind among all the writers of a broker, so the broker passes the same object to each.
    """

    def __init__(
        self,
        sim: Simulation,
        ledger: ManagedLedger,
        kind: LogKind,
        config: Config,
        *,
        batching: bool,
        metrics: FlushMetrics | None = None,
        owner: object = None,
    ) -> None:
        self.sim = sim
        # The component whose log this is: a writer step that raises is contained as its failure.
        self.owner = owner
        self.metrics = metrics
        self.ledger = ledger
        self.kind = kind
        self.cursor: ManagedCursor = ledger.open_cursor(CURSOR_NAME, InitialPosition.EARLIEST)
        self._pending: dict[int, Future[RecordPosition]] = {}
        self._alive = True
        self._idle_due: int | None = None  # the armed timer, while the buffer is empty
        self.entries_written = 0
        self.ledger_rolls = 0  # closed-ledger rolls (BW-26)
        self.state = bl.recover(config, self._logged(), kind, now_ms=sim.now, enabled=batching)
        self._recorded = self._record_to()
        if self._recorded is not None:
            observer, obj = self._recorded
            inputs = bl.recovery_inputs(self.state, sim.now)
            observer.recovered(obj, "batched_log", {**inputs, "recovered": state_digest(self.state)})
        self._arm(self.state.timer_due_ms)

    def _record_to(self) -> tuple[Any, str] | None:
        """Where this writer's steps go (history format version 5): its owner's broker's machine
        observer, on ``log:<the owner's object>``, while it batches (a writer that does not batch
        writes one record per entry: nothing of its own to judge).  None: not recorded."""
        # the owner is a broker component (engine.broker, a layer above this one): read, not imported
        observer = getattr(getattr(self.owner, "host", None), "observer", None)
        owner_obj = getattr(self.owner, "obj", None)
        if observer is None or not isinstance(owner_obj, str) or not self.state.config.effective:
            return None
        return observer, object_id("log", owner_obj)

    # -- reading ----------------------------------------------------------------------------------

    def _logged(self) -> list[bl.LoggedEntry]:
        infos = self.ledger.ledgers()
        if not infos:
            return []
        entries = self.ledger.read(Position(infos[0].ledger_id, 0), 1 << 62)
        return [
            bl.LoggedEntry(
                e.position, e.data, self.cursor.batch_ack_set(e.position), self.cursor.is_deleted(e.position)
            )
            for e in entries
        ]

    def replay(self) -> list[tuple[RecordPosition, Message]]:
        """Every live record in log order with the position its writer got (BW-23, BW-24)."""
        return self.read_back()[1]

    def read_back(self) -> tuple[tuple[bl.LoggedEntry, ...], list[tuple[RecordPosition, Message]]]:
        """:meth:`replay`, with the durable entries it decoded: the live entries (deleted ones
        skipped) with their bytes and the cursor's batch ack sets, which a history's ``recover`` row
        carries so that a checker decodes them with its own reader (spec/history.md, version 3)."""
        live = tuple(entry for entry in self._logged() if not entry.deleted)
        return live, [(r.position, r.record) for r in bl.replay(self.kind, live)]

    def recovery_inputs(self, durable: Sequence[bl.LoggedEntry]) -> dict[str, object]:
        """What a ``recover`` row states of this log (spec/history.md, version 3): the durable entries
        :meth:`read_back` read, and the PIP-160 switch of its writer, which a run never changes, so
        every entry was written under it (BW-22)."""
        return {"log": bl.durable_entries(durable), "batched_write": self.state.config.enabled}

    # -- writing ----------------------------------------------------------------------------------

    def add(self, data: bytes) -> Future[RecordPosition]:
        """``asyncAddData``: the future completes with the record's position once it is durable."""
        future: Future[RecordPosition] = Future()
        request_id = self.state.next_request_id
        self._pending[request_id] = future
        result = self._step(bl.AsyncAddData(data, self.sim.now))
        if isinstance(result, Err):
            self._pending.pop(request_id, None)
            future.set_exception(LogWriteFailed(result.error))
        elif self._idle_due is not None and self.state.buffer:
            self._wake()
        return future

    def delete(self, positions: Sequence[RecordPosition]) -> None:
        """Delete records (whole entries or batch indexes); unknown positions are a programming error."""
        if positions:
            result = self._step(bl.DeleteRecords(tuple(positions)))
            if isinstance(result, Err):
                raise ValueError(f"{self.ledger.name}: delete {positions}: {result.error}")

    def close(self) -> None:
        """Close the writer for good (BW-3, BW-18): what is buffered fails, what is in flight is not
        waited for (the log is going away)."""
        if not self._alive:
            return
        result = self._step(bl.Close())
        if isinstance(result, Ok) and result.value == bl.CloseResult(bl.WriterStatus.CLOSING):
            self._step(bl.FinishClose())
        self._alive = False
        self._pending.clear()

    def crash(self) -> None:
        """Forget everything not durable: buffered and in-flight records are lost, their callers hang."""
        self._alive = False
        self._pending.clear()

    # -- the machine's effects ------------------------------------------------------------------

    def _step(self, command: Any) -> Ok[Any] | Err:
        self.state, result = bl.step(self.state, command)
        if self._recorded is not None:
            observer, obj = self._recorded
            observer.stepped(obj, "batched_log", command, result, atomic=True)
        for effect in result.effects:
            if isinstance(effect, bl.AsyncAddEntry):
                self._write(effect)
            elif isinstance(effect, bl.AddComplete):
                future = self._pending.pop(effect.request_id, None)
                if future is not None:
                    future.set_result(effect.position)
            elif isinstance(effect, bl.AddFailed):
                future = self._pending.pop(effect.request_id, None)
                if future is not None:
                    future.set_exception(LogWriteFailed(effect.error))
            elif isinstance(effect, bl.CursorDelete):
                whole = [e.position for e in effect.entries if e.ack_set is None]
                partial = {e.position: e.ack_set for e in effect.entries if e.ack_set is not None}
                if whole:
                    self.cursor.delete(whole)
                if partial:
                    self.cursor.delete(list(partial), partial)
            elif isinstance(effect, bl.ArmTimer):
                self._arm(effect.due_ms)
            elif isinstance(effect, bl.FlushObserved) and self.metrics is not None:
                self.metrics.observe(effect)
            # CancelTimer: a stale timer finds timer_due_ms changed and does nothing.
        return result

    def _arm(self, due: int | None) -> None:
        """The writer's periodic delay timer (BW-12).  While the buffer is empty a firing only re-arms
        the timer, so those firings are not simulated one by one: the timer sleeps and wakes at the
        first period boundary after a record is buffered -- the same instant it would have flushed."""
        if due is None:
            return
        if not self.state.buffer:
            self._idle_due = due
            return
        self._idle_due = None
        self._schedule_fire(due, due)

    def _wake(self) -> None:
        due = self._idle_due
        assert due is not None
        self._idle_due = None
        period = max(1, self.state.config.max_delay_ms)
        at = due if self.sim.now <= due else due + -(-(self.sim.now - due) // period) * period
        self._schedule_fire(due, at)

    def _roll(self) -> None:
        """A write refused by a closed ledger: ask for a new ledger before the next write, so later
        batches can succeed; the refused batch still fails (BW-26, BW-16).  A roll that fails
        leaves the next write to fail the same way and roll again."""
        try:
            self.ledger.roll_over()
            self.ledger_rolls += 1
        except LedgerError:
            return

    def _schedule_fire(self, due: int, at: int) -> None:
        def fire() -> None:
            if self._alive and self.state.timer_due_ms == due:
                self._step(bl.TimerFired(self.sim.now))

        self.sim.schedule(max(0, at - self.sim.now), fire)

    def _write(self, effect: bl.AsyncAddEntry) -> None:
        try:
            position = self.ledger.append(effect.data)
            answer: Any = bl.AddEntryComplete(effect.write_id, position)
            self.entries_written += 1
        except LedgerError as exc:
            error = exc.domain_error()
            answer = bl.AddEntryFailed(effect.write_id, error.name, str(exc))
            if isinstance(exc, LedgerClosed):
                self._roll()

        def complete() -> None:
            if self._alive:
                self._step(answer)

        self.sim.schedule(1, complete)
