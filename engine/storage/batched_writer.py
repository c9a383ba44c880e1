"""The PIP-160 batched log writer running for real: one writer thread, a real timer, any ledger.

:class:`BatchedLogWriter` carries out what the pure machine ``reference.batched_log`` decides.

Threads, and why not asyncio
----------------------------
The :class:`~engine.storage.ledger.ManagedLedger` interface is blocking: ``append`` returns
when the entry is durable (the file ledger fsyncs).  Under asyncio every append would still have
to go to a thread pool, and the callers (coordinator and pending-ack stores, tests, benchmarks)
are plain threads.  So the writer uses two threads of its own:

* the **writer thread** is Pulsar's single write executor (BW-6): it alone owns the machine's
  state and steps it, one queued task at a time (adds, timer ticks, ledger answers, close, the
  run-time switch, deletes), and it completes callers' futures in the order the machine emits
  the callbacks;
* the **ledger thread** plays the managed ledger's asynchronous ``asyncAddEntry``: it appends the
  entries the machine asks for, strictly in order, and posts each answer back to the writer
  thread.  While an fsync is in progress the writer thread keeps accepting and buffering records,
  which is what lets a batch fill up (Pulsar's executor is never blocked by a bookie write either).

The timer is the writer thread's own timed wait: it sleeps on its queue until the machine's
``timer_due_ms`` (a monotonic clock), then queues the tick behind the tasks already waiting (as
Pulsar's timer submits its task to the executor) and steps ``TimerFired`` when the tick's turn
comes; the machine re-arms the timer after each tick (BW-12).  At most one tick is ever queued,
however slow the thread is (Pulsar PR #16679).

Contract (BW-17): every call of :meth:`BatchedLogWriter.add` gets exactly one outcome on its
future: the record's position (``BatchedPosition`` for a batched entry, ``Position`` otherwise),
or :class:`WriteFailed` carrying the domain error (a ledger failure fails that whole batch, a
closing writer fails what is buffered and everything after).  Successes complete in request
order.  A ledger failure with :class:`~engine.storage.ledger.LedgerClosed` makes the ledger
thread roll the ledger before the next write (BW-26).

The PIP's run-time switch (BW-22; never merged in Pulsar) is :class:`BatchLogAdmin`: its
``set_txn_tc_batch_log`` / ``get_txn_tc_batch_log_stat`` and the pending-ack pair change every
open writer of a kind on its own thread and answer in the PIP's JSON shape.  Switching off never
makes batched entries unreadable: readers accept both formats (BW-23).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from engine.storage.ledger import LedgerClosed, LedgerError, ManagedCursor, ManagedLedger
from reference import batched_log as bl
from spec.config import Config
from spec.envelope import LogKind
from spec.errors import DomainError, ManagedLedgerAlreadyClosed, ManagedLedgerFenced, PersistenceError
from spec.result import Err, Ok
from spec.types import BatchedPosition, Position

__all__ = [
    "BatchLogAdmin",
    "BatchedLogWriter",
    "Callback",
    "FlushObserver",
    "WriteFailed",
    "monotonic_ms",
    "read_log",
]

log = logging.getLogger(__name__)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class FlushObserver(Protocol):
    """Receives one observation per batch flush (BW-19); ``BufferedWriterMetrics`` is one."""

    def observe(self, flush: bl.FlushObserved) -> None: ...


class WriteFailed(Exception):
    """The failure outcome of one add; ``error`` is the domain error Pulsar's callback would get."""

    def __init__(self, error: DomainError) -> None:
        self.error = error
        super().__init__(str(error))


Callback = Callable[[BatchedPosition | Position | None, DomainError | None], None]


@dataclass(frozen=True, slots=True)
class _Add:
    data: bytes
    callback: Callback


@dataclass(frozen=True, slots=True)
class _Tick:
    """The timer's task, queued behind whatever the executor already holds (BW-12)."""


@dataclass(frozen=True, slots=True)
class _Answer:
    write_id: int
    position: Position | None
    error: DomainError | None


@dataclass(frozen=True, slots=True)
class _Call:
    command: Any
    future: Future[Any]


_STOP = object()


class BatchedLogWriter:
    """One log's writer over ``ledger`` with the settings ``config`` (BW-1).

    ``metrics`` receives every batch flush (BW-19); ``cursor``, if given, receives the batch
    index deletes of :meth:`delete` (BW-20).  ``clock`` returns monotonic milliseconds.  With
    ``recover`` the writer starts from what the ledger and the cursor hold (BW-25), so records
    written before a restart can be deleted at batch-index level.
    """

    def __init__(
        self,
        ledger: ManagedLedger,
        config: bl.WriterConfig,
        *,
        metrics: FlushObserver | None = None,
        cursor: ManagedCursor | None = None,
        clock: Callable[[], int] = monotonic_ms,
        name: str = "",
        recover: bool = False,
    ) -> None:
        self.ledger = ledger
        self.name = name or ledger.name
        self._metrics = metrics
        self._cursor = cursor
        self._clock = clock
        self._lock = threading.Lock()  # guards _state between the writer thread and close()/stats
        self._gate = threading.Lock()  # orders "queue a task" against "the writer has stopped"
        now = clock()
        self._state = bl.recover_for(config, read_log(ledger, cursor), now) if recover else bl.initial_for(config, now)
        self._pending: dict[int, Callback] = {}
        self._tick_queued = False
        self._tasks: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._writes: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._closed_future: Future[None] = Future()
        self._stopped = False
        self.entries_written = 0
        self.ledger_rolls = 0
        self._writer = threading.Thread(target=self._run_writer, name=f"batched-writer-{self.name}", daemon=True)
        self._io = threading.Thread(target=self._run_ledger, name=f"batched-writer-io-{self.name}", daemon=True)
        self._writer.start()
        self._io.start()

    # -- the public API (any thread) ------------------------------------------------------------

    @property
    def state(self) -> bl.WriterState:
        """A snapshot of the machine's state (immutable)."""
        with self._lock:
            return self._state

    @property
    def batching_effective(self) -> bool:
        return self.state.config.effective

    def add(self, data: bytes) -> Future[BatchedPosition | Position]:
        """``asyncAddData``: queue one serialized record; the future gets its one outcome."""
        future: Future[BatchedPosition | Position] = Future()

        def complete(position: BatchedPosition | Position | None, error: DomainError | None) -> None:
            if error is None:
                assert position is not None
                future.set_result(position)
            else:
                future.set_exception(WriteFailed(error))

        self.add_with_callback(data, complete)
        return future

    def add_with_callback(self, data: bytes, callback: Callback) -> None:
        """``asyncAddData`` with Pulsar's callback shape: ``callback(position, None)`` on success,
        ``callback(None, error)`` on failure, exactly once (BW-17): on the writer thread, or at once
        on the caller's thread when the writer has stopped.  An exception raised by a callback is
        logged and does not stop the others (fact sheet W12)."""
        with self._gate:
            if not self._stopped:
                self._tasks.put(_Add(data, callback))
                return
        _invoke(callback, None, ManagedLedgerFenced(bl.CLOSED_MESSAGE))

    def delete(self, positions: tuple[BatchedPosition | Position, ...]) -> Future[Any]:
        """Delete records at batch-index level (BW-20, BW-21)."""
        return self._call(bl.DeleteRecords(positions))

    def set_batched_write(self, enabled: bool) -> Future[Any]:
        """The run-time switch for this writer (BW-22)."""
        return self._call(bl.SetBatchedWrite(enabled, self._clock()))

    def close(self, timeout: float | None = 30.0) -> None:
        """Close (BW-18): buffered records fail, in-flight writes are answered by the ledger, then
        both threads stop.  Idempotent."""
        with self._lock:
            self._state, result = bl.step(self._state, bl.Close())
        # The compare-and-set happened here, on the caller's thread, as in Pulsar; the rest is a
        # task on the writer thread.
        if isinstance(result, Ok) and result.value == bl.CloseResult(bl.WriterStatus.CLOSING):
            self._tasks.put(_Call(bl.FinishClose(), Future()))
        self._tasks.put(_STOP)
        self._closed_future.result(timeout)
        self._writer.join(timeout)
        self._io.join(timeout)

    # -- internals --------------------------------------------------------------------------------

    def _call(self, command: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._gate:
            if not self._stopped:
                self._tasks.put(_Call(command, future))
                return future
        future.set_exception(WriteFailed(ManagedLedgerFenced(bl.CLOSED_MESSAGE)))
        return future

    def _step(self, command: Any) -> Ok[Any] | Err:
        with self._lock:
            self._state, result = bl.step(self._state, command)
        self._carry_out(result)
        return result

    def _carry_out(self, result: Ok[Any] | Err) -> None:
        for effect in result.effects:
            if isinstance(effect, bl.AsyncAddEntry):
                self._writes.put(effect)
            elif isinstance(effect, bl.AddComplete):
                _invoke(self._pending.pop(effect.request_id), effect.position, None)
            elif isinstance(effect, bl.AddFailed):
                _invoke(self._pending.pop(effect.request_id), None, effect.error)
            elif isinstance(effect, bl.FlushObserved):
                if self._metrics is not None:
                    self._metrics.observe(effect)
            elif isinstance(effect, bl.CursorDelete) and self._cursor is not None:
                self._apply_cursor_delete(effect)
            # ArmTimer / CancelTimer need no action: the loop reads timer_due_ms from the state.

    def _apply_cursor_delete(self, effect: bl.CursorDelete) -> None:
        assert self._cursor is not None
        whole = [e.position for e in effect.entries if e.ack_set is None]
        partial = {e.position: e.ack_set for e in effect.entries if e.ack_set is not None}
        if whole:
            self._cursor.delete(whole)
        if partial:
            self._cursor.delete(list(partial), partial)

    def _handle(self, task: object) -> None:
        if isinstance(task, _Add):
            # Register the callback before stepping: the step's effects may already name it.
            request_id = self._state.next_request_id
            self._pending[request_id] = task.callback
            result = self._step(bl.AsyncAddData(task.data, self._clock()))
            if isinstance(result, Err):
                del self._pending[request_id]
                _invoke(task.callback, None, result.error)
        elif isinstance(task, _Tick):
            self._tick_queued = False
            # A cancelled timer's task does nothing (the state no longer has a due time).
            due = self._state.timer_due_ms
            now = self._clock()
            if due is not None and now >= due:
                self._step(bl.TimerFired(now))
        elif isinstance(task, _Answer):
            if task.error is None:
                assert task.position is not None
                self._step(bl.AddEntryComplete(task.write_id, task.position))
            else:
                self._step(bl.AddEntryFailed(task.write_id, task.error.name, task.error.message))
        elif isinstance(task, _Call):
            try:
                result = self._step(task.command)
            except Exception as exc:  # a programming error: surface it to the caller
                task.future.set_exception(exc)
                return
            if isinstance(result, Ok):
                task.future.set_result(result.value)
            else:
                task.future.set_exception(WriteFailed(result.error))

    def _queue_tick_if_due(self) -> None:
        # Pulsar's timer submits its task to the executor: it runs after the tasks already
        # queued, and there is never more than one (BW-12, PR #16679).
        due = self._state.timer_due_ms
        if due is not None and not self._tick_queued and self._clock() >= due:
            self._tick_queued = True
            self._tasks.put(_Tick())

    def _run_writer(self) -> None:
        stopping = False
        try:
            while True:
                state = self._state
                if stopping and state.status is bl.WriterStatus.CLOSED and not state.in_flight:
                    break
                due = None if self._tick_queued else state.timer_due_ms
                timeout = None if due is None else max(0.0, (due - self._clock()) / 1000.0)
                try:
                    task = self._tasks.get(timeout=timeout)
                except queue.Empty:
                    task = None
                if task is _STOP:
                    stopping = True
                elif task is not None:
                    self._handle(task)
                self._queue_tick_if_due()
        except BaseException:
            log.exception("batched writer %s crashed", self.name)
            raise
        finally:
            with self._gate:
                # From here on add() fails at once; whatever was queued before is failed below.
                self._stopped = True
            self._writes.put(_STOP)
            self._fail_leftovers()
            self._closed_future.set_result(None)

    def _fail_leftovers(self) -> None:
        # Only reachable after a crash of the writer thread itself; keeps "exactly one callback".
        for callback in self._pending.values():
            _invoke(callback, None, ManagedLedgerAlreadyClosed("batched writer stopped"))
        self._pending.clear()
        while True:
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                return
            if isinstance(task, _Add):
                _invoke(task.callback, None, ManagedLedgerFenced(bl.CLOSED_MESSAGE))
            elif isinstance(task, _Call):
                task.future.set_exception(WriteFailed(ManagedLedgerFenced(bl.CLOSED_MESSAGE)))

    def _run_ledger(self) -> None:
        while True:
            item = self._writes.get()
            if item is _STOP:
                return
            assert isinstance(item, bl.AsyncAddEntry)
            try:
                position = self.ledger.append(item.data)
            except LedgerError as exc:
                self._tasks.put(_Answer(item.write_id, None, exc.domain_error()))
                if isinstance(exc, LedgerClosed):
                    self._roll()  # BW-26
                continue
            except Exception as exc:  # an unexpected failure still answers the write
                log.exception("ledger append failed")
                self._tasks.put(_Answer(item.write_id, None, PersistenceError(str(exc))))
                continue
            self.entries_written += 1
            self._tasks.put(_Answer(item.write_id, position, None))

    def _roll(self) -> None:
        try:
            self.ledger.roll_over()
            self.ledger_rolls += 1
        except LedgerError:
            log.warning("could not roll ledger %s after a closed-ledger failure", self.name)


def read_log(ledger: ManagedLedger, cursor: ManagedCursor | None = None) -> list[bl.LoggedEntry]:
    """Every entry of ``ledger`` with ``cursor``'s view of it, as ``reference.batched_log.replay``
    and ``recover`` take them (BW-23, BW-24, BW-25)."""
    infos = ledger.ledgers()
    if not infos:
        return []
    entries = ledger.read(Position(infos[0].ledger_id, 0), sum(info.entries for info in infos) + 1)
    if cursor is None:
        return [bl.LoggedEntry(e.position, e.data) for e in entries]
    return [
        bl.LoggedEntry(e.position, e.data, cursor.batch_ack_set(e.position), cursor.is_deleted(e.position))
        for e in entries
    ]


def _invoke(callback: Callback, position: BatchedPosition | Position | None, error: DomainError | None) -> None:
    try:
        callback(position, error)
    except Exception:
        log.exception("batched writer callback failed")


class BatchLogAdmin:
    """The PIP-160 admin commands, as an engine object (BW-22; Pulsar never merged them).

    Writers opened through :meth:`open_writer` take the current switch of their kind and are
    switched with it while open.  ``config`` supplies each kind's own keys (BW-1).
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self._enabled = {
            LogKind.TRANSACTION_LOG: config.transaction_log_batched_write_enabled,
            LogKind.PENDING_ACK: config.transaction_pending_ack_batched_write_enabled,
        }
        self._writers: dict[LogKind, dict[str, BatchedLogWriter]] = {kind: {} for kind in LogKind}
        self._lock = threading.Lock()

    def open_writer(self, kind: LogKind, name: str, ledger: ManagedLedger, **kwargs: Any) -> BatchedLogWriter:
        """A writer for coordinator ``name`` (its id) or subscription ``name`` (``<topic>-<sub>``)."""
        with self._lock:
            cfg = bl.writer_config(self.config, kind, enabled=self._enabled[kind])
            writer = BatchedLogWriter(ledger, cfg, name=name, **kwargs)
            self._writers[kind][name] = writer
            return writer

    def forget(self, kind: LogKind, name: str) -> None:
        with self._lock:
            self._writers[kind].pop(name, None)

    def _set(self, kind: LogKind, enable: bool, timeout: float) -> None:
        with self._lock:
            self._enabled[kind] = enable
            writers = list(self._writers[kind].values())
        futures = [w.set_batched_write(enable) for w in writers if w.state.status is bl.WriterStatus.OPEN]
        for future in futures:
            with contextlib.suppress(WriteFailed):  # closed meanwhile: nothing to switch
                future.result(timeout)

    def _stat(self, kind: LogKind) -> list[dict[str, bool]]:
        with self._lock:
            writers = dict(self._writers[kind])
        return [{name: w.batching_effective} for name, w in writers.items()]

    # pulsar-admin transactions --set-txn-tc-batch-log --enable [boolean]
    def set_txn_tc_batch_log(self, enable: bool, timeout: float = 30.0) -> None:
        self._set(LogKind.TRANSACTION_LOG, enable, timeout)

    # pulsar-admin transactions --get-txn-tc-batch-log-stat
    def get_txn_tc_batch_log_stat(self) -> Mapping[str, Any]:
        return {
            "txnTcBatchLogEnabled": self._enabled[LogKind.TRANSACTION_LOG],
            "coodinatorArray": self._stat(LogKind.TRANSACTION_LOG),
        }

    # pulsar-admin transactions --set-txn-pending-ack-batch-log --enable [boolean]
    def set_txn_pending_ack_batch_log(self, enable: bool, timeout: float = 30.0) -> None:
        self._set(LogKind.PENDING_ACK, enable, timeout)

    # pulsar-admin transactions --get-txn-pending-ack-batch-log-stat
    def get_txn_pending_ack_batch_log_stat(self) -> Mapping[str, Any]:
        return {
            "txnPendingAckBatchLogEnabled": self._enabled[LogKind.PENDING_ACK],
            "subscriptionArray": self._stat(LogKind.PENDING_ACK),
        }
