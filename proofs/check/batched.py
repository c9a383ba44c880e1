"""The coordinator's transaction log through PIP-160's batched writer (:mod:`reference.batched_log`),
for the ``batched-log`` model.

Here durability is asynchronous, as in ``engine/storage/record_log.py``: a log record is handed
to the writer (``AsyncAddData``); the writer buffers it, or writes a batch (``AsyncAddEntry``: the
entry is in the ledger at once) whose completion (``AddEntryComplete``) comes later and tells each
record its position.  Everything a coordinator step asked for after its records -- the answer, the
END_TXN_ON_* messages of phase 2, deletions, re-runs -- waits until those records are durable (the
engine's ``_carry_out``).  A crash loses the writer's buffer and the completions in flight; the
coordinator reloads from what the ledger holds, read through the cursor's deletions
(:func:`reference.batched_log.replay`), and the writer reopens over it (BW-25).

The composed state's ``clog`` is the ledger: ``(entries, max_local_txn_id property)``; ``caux``
gains ``(writer, in_flight, requests, positions, deferred, doomed)`` after the coordinator's
``(epoch, runs, waiters, timers)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from invariants import batched_log as batched_inv
from invariants import composed
from proofs.check.state import CAUX, CLOG, COORD, Successor, WorkingState
from proofs.check.store import Store
from reference import batched_log as bl
from reference import coordinator as tc
from spec.config import Config
from spec.envelope import LogKind
from spec.result import Err, Ok
from spec.types import BatchedPosition, Position, bits_to_words

__all__ = ["BatchedLog", "CoordinatorPhases"]

KIND = LogKind.TRANSACTION_LOG
# caux slots after (epoch, runs, waiters, timers)
WRITER, IN_FLIGHT, REQUESTS, POSITIONS, DEFERRED, DOOMED = 4, 5, 6, 7, 8, 9


class CoordinatorPhases(Protocol):
    """What waits for a coordinator step's records to be durable: the coordinator's side of it
    (:class:`proofs.check.coordinator.Coordinator`)."""

    def decide(self, w: WorkingState, effects: tuple[Any, ...]) -> None: ...

    def start_run(self, w: WorkingState, effect: tc.EndTxnInTransactionBuffer) -> None: ...

    def arm_resume(self, w: WorkingState, effect: tc.ScheduleResumeEndTxn) -> None: ...

    def settle(self, w: WorkingState, seq: int, action: int, result: Any) -> None: ...


Guard = Callable[[Callable[[], tuple[Any, Any]]], tuple[Any, Any]]


class BatchedLog:
    """The coordinator's log through the batched writer: carrying out a step once its records are
    durable, the writer's own actions, a crash and its recovery, and what the checker asks."""

    def __init__(self, config: Config, store: Store, guard: Guard, phases: CoordinatorPhases) -> None:
        self.store = store
        self.config = config
        self.guard = guard
        self.phases = phases
        self.cfg = bl.writer_config(self.config, KIND)

    def initial_aux(self) -> tuple[Any, ...]:
        writer = self.store.put(bl.initial_for(self.cfg, 0))
        return (0, (), (), (), writer, (), (), (), (), ())

    def initial_log(self) -> int:
        return self.store.put(((), -1))

    # --- carrying out a coordinator step ------------------------------------------------------

    def effects(
        self,
        w: WorkingState,
        result: Any,
        *,
        reply: tuple[int, ...] | None,
        settle: tuple[int, int] | None,
    ) -> None:
        issued: list[int] = []
        for effect in result.effects:
            if isinstance(effect, tc.AppendRecord):
                issued.extend(self._add(w, effect.record_id, effect.record))
            elif isinstance(effect, tc.DeleteRecords):
                self._defer(w, issued, ("delete", effect.record_ids))
            elif isinstance(effect, tc.EndTxnInTransactionBuffer):
                self._defer(w, issued, ("run", self.store.put(effect)))
            elif isinstance(effect, tc.ScheduleResumeEndTxn):
                self._defer(w, issued, ("timer", self.store.put(effect)))
        if isinstance(result, Ok):
            self.phases.decide(w, result.effects)
        if reply is not None and not (isinstance(result, Err) and not result.error.answered):
            self._defer(w, issued, ("reply", reply))
        if settle is not None:
            self._defer(w, issued, ("settle", settle[0], settle[1], self.store.put(result)))
        self._release(w)

    def _add(self, w: WorkingState, record_id: int, record: tc.TxnLogRecord) -> list[int]:
        """``asyncAddData`` of one record; the request id it got (empty if refused)."""
        writer = self.store.get(w.caux[WRITER])
        request_id = writer.next_request_id
        data = self.store.memo(("record-bytes", record), lambda: record.to_pb().SerializeToString())
        result = self._writer_step(w, bl.AsyncAddData(data, 0))
        if isinstance(result, Err):
            return []
        w.caux[REQUESTS] = (*w.caux[REQUESTS], (request_id, record_id))
        self._writer_effects(w, result)
        return [request_id]

    def _writer_step(self, w: WorkingState, command: Any, key: Any = None) -> Any:
        d, result, broken = self.store.step(
            "batched_log", bl.step, w.caux[WRITER], command, batched_inv.STEP_PROPERTIES, self.guard, key
        )
        w.caux[WRITER] = d
        if broken:
            w.broken.extend(f"batched_log/{b}" for b in broken)
        return result

    def _writer_effects(self, w: WorkingState, result: Any) -> None:
        if not result.effects:
            return
        logged, max_local = self.store.get(w.clog)
        entries: list[bl.LoggedEntry] | None = None  # a copy of the ledger once an effect changes it
        for effect in result.effects:
            if isinstance(effect, bl.AsyncAddEntry):
                if entries is None:
                    entries = list(logged)
                position = Position(1, len(entries))
                entries.append(bl.LoggedEntry(position, effect.data))
                w.caux[IN_FLIGHT] = (*w.caux[IN_FLIGHT], (effect.write_id, 1, len(entries) - 1))
                max_local = max(max_local, self._max_local(position, effect.data))
            elif isinstance(effect, bl.AddComplete):
                # Each caller's future completes in batch order, and what waited on it runs at once
                # (the engine's done-callbacks): a deletion of a record id the coordinator then reuses
                # (a refused log-before-check does not advance next_record_id) hits the right entry.
                if entries is not None:
                    w.clog = self.store.put((tuple(entries), max_local))
                    entries = None
                self._completed(w, effect.request_id, effect.position)
                self._release(w)
                logged, max_local = self.store.get(w.clog)
            elif isinstance(effect, bl.CursorDelete):
                if entries is None:
                    entries = list(logged)
                writer = self.store.get(w.caux[WRITER])
                for item in effect.entries:
                    at = item.position.entry_id
                    view = writer.entries.get(item.position)
                    old = entries[at]
                    if view is None:
                        entries[at] = bl.LoggedEntry(old.position, old.data, None, True)
                    else:
                        bits = sum(1 << i for i in view.remaining)
                        entries[at] = bl.LoggedEntry(old.position, old.data, bits_to_words(bits), False)
        if entries is not None:
            w.clog = self.store.put((tuple(entries), max_local))

    def _max_local(self, position: Position, data: bytes) -> int:
        """The greatest ``max_local_txn_id`` the entry's records carry (-1: none); decoded once per entry."""

        def decode() -> int:
            found = -1
            pb: Any
            for pb in (r.record for r in bl.read_entry(KIND, position, data)):
                if pb.HasField("max_local_txn_id"):
                    found = max(found, pb.max_local_txn_id)
            return found

        return int(self.store.memo(("max-local", position, data), decode))

    def _completed(self, w: WorkingState, request_id: int, position: BatchedPosition | Position) -> None:
        requests = dict(w.caux[REQUESTS])
        rid = requests.pop(request_id)
        w.caux[REQUESTS] = tuple(sorted(requests.items()))
        pos = (
            (position.ledger_id, position.entry_id, position.batch_size, position.batch_index)
            if isinstance(position, BatchedPosition)
            else (position.ledger_id, position.entry_id, 1, 0)
        )
        w.caux[POSITIONS] = tuple(sorted((*w.caux[POSITIONS], (rid, pos))))
        if rid in w.caux[DOOMED]:
            w.caux[DOOMED] = tuple(r for r in w.caux[DOOMED] if r != rid)
            self._delete(w, (rid,))

    def _defer(self, w: WorkingState, issued: list[int], item: tuple[Any, ...]) -> None:
        w.caux[DEFERRED] = (*w.caux[DEFERRED], (tuple(issued), item))

    def _release(self, w: WorkingState) -> None:
        """Carry out, in order, every deferred item whose records are all durable."""
        caux = w.caux
        while caux[DEFERRED]:
            deferred = caux[DEFERRED]
            pending = {request_id for request_id, _rid in caux[REQUESTS]}
            ready = next((i for i, (awaited, _item) in enumerate(deferred) if pending.isdisjoint(awaited)), None)
            if ready is None:
                return
            caux[DEFERRED] = deferred[:ready] + deferred[ready + 1 :]
            self._carry(w, deferred[ready][1])

    def _carry(self, w: WorkingState, item: tuple[Any, ...]) -> None:
        phases = self.phases
        kind = item[0]
        if kind == "delete":
            self._delete(w, item[1])
        elif kind == "run":
            phases.start_run(w, self.store.get(item[1]))
        elif kind == "timer":
            phases.arm_resume(w, self.store.get(item[1]))
        elif kind == "reply":
            w.send(item[1])
        elif kind == "settle":
            phases.settle(w, item[1], item[2], self.store.get(item[3]))

    def _delete(self, w: WorkingState, record_ids: tuple[int, ...]) -> None:
        """TC-9: delete records at batch-index level (BW-20); ids not yet positioned wait (the
        engine's ``_doomed``)."""
        positions = dict(w.caux[POSITIONS])
        known = []
        for rid in record_ids:
            pos = positions.pop(rid, None)
            if pos is None:
                w.caux[DOOMED] = tuple(sorted({*w.caux[DOOMED], rid}))
            else:
                known.append(pos)
        w.caux[POSITIONS] = tuple(sorted(positions.items()))
        if known:
            command = bl.DeleteRecords(
                tuple(BatchedPosition(*pos) if pos[2] > 1 else Position(pos[0], pos[1]) for pos in known)
            )
            # A BatchedPosition equals its plain position whatever its index: key the deletion by
            # the positions' content, (ledger, entry, batch size, batch index) each.
            result = self._writer_step(w, command, ("delete", tuple(known)))
            self._writer_effects(w, result)

    # --- actions of the writer ----------------------------------------------------------------

    def actions(self, s: tuple[Any, ...], out: list[Successor], add: Callable[..., None]) -> None:
        caux = s[CAUX]
        writer = self.store.get(caux[WRITER])
        if caux[IN_FLIGHT]:
            add(out, s, ("write-complete",), ("wc",), self._complete_write)
        if writer.buffer and writer.timer_due_ms is not None:
            add(out, s, ("writer-timer",), ("wt",), self._fire_timer)

    def _complete_write(self, w: WorkingState) -> None:
        """The ledger acknowledges the oldest write (BW-15, BW-17)."""
        (write_id, ledger, entry), *rest = w.caux[IN_FLIGHT]
        w.caux[IN_FLIGHT] = tuple(rest)
        result = self._writer_step(w, bl.AddEntryComplete(write_id, Position(ledger, entry)))
        self._writer_effects(w, result)
        self._release(w)

    def _fire_timer(self, w: WorkingState) -> None:
        """The writer's delay timer flushes the buffer (BW-12)."""
        writer = self.store.get(w.caux[WRITER])
        result = self._writer_step(w, bl.TimerFired(writer.timer_due_ms))
        self._writer_effects(w, result)

    # --- crash and recovery -------------------------------------------------------------------

    def crash(self, w: WorkingState) -> None:
        """The broker loses the coordinator: the writer's buffer and in-flight completions are gone;
        the store replays the ledger through the cursor (BW-23..25, TC-21..24)."""
        coord, clog, writer, positions, effects = self.store.memo(("reload", w.clog), lambda: self._reload(w.clog))
        w.coord = coord
        w.clog = clog
        w.caux[:] = [w.caux[0] + 1, (), (), (), writer, (), (), tuple(positions), (), ()]
        for effect in effects:
            if isinstance(effect, tc.DeleteRecords):
                self._delete(w, effect.record_ids)
            elif isinstance(effect, tc.ScheduleResumeEndTxn):
                self.phases.arm_resume(w, effect)

    def _reload(self, clog: int) -> tuple[int, int, int, tuple[Any, ...], tuple[Any, ...]]:
        """What a reload from the ledger ``clog`` yields (a pure function of it, so computed once):
        the coordinator's and the writer's digests, the records' positions, the recovery's effects."""
        entries, max_local = self.store.get(clog)
        replayed, records = self._replayed(clog)
        last = entries[-1] if entries else None
        interceptor = max_local
        if last is not None:
            interceptor = max(interceptor, self._max_local(last.position, last.data))
        state, effects = tc.recover(self.config, 0, records, interceptor, next_record_id=len(records))
        writer = self.store.put(bl.recover_for(self.cfg, entries, 0))
        positions = []
        for i, r in enumerate(replayed):
            p = r.position
            pos = (
                (p.ledger_id, p.entry_id, p.batch_size, p.batch_index)
                if isinstance(p, BatchedPosition)
                else (p.ledger_id, p.entry_id, 1, 0)
            )
            positions.append((i, pos))
        coord = self.store.put(state)
        new_log = self.store.put((entries, max(max_local, state.sequence_id)))
        return coord, new_log, writer, tuple(positions), tuple(effects)

    # --- what the checker asks ----------------------------------------------------------------

    def violations(self, s: tuple[Any, ...]) -> list[str]:
        caux = s[CAUX]
        out = [f"batched_log/{n}" for n in self.store.violated("batched_log", batched_inv.INVARIANTS, caux[WRITER])]
        writer = self.store.get(caux[WRITER])
        idle = not writer.buffer and not caux[IN_FLIGHT] and not caux[DEFERRED] and not caux[REQUESTS]
        if idle:
            ok = self.store.memo(("batched-recovers", s[COORD], s[CLOG]), lambda: self._recovers(s))
            if not ok:
                out.append("coordinator-recovers-live")
        return out

    def _recovers(self, s: tuple[Any, ...]) -> bool:
        """TC-25 with BW-23..25: once nothing is buffered or in flight, replaying the ledger gives the
        live store."""
        _entries, max_local = self.store.get(s[CLOG])
        _replayed, records = self._replayed(s[CLOG])
        return composed.coordinator_recovers_live(self.store.get(s[COORD]), records, max_local)

    def _replayed(self, clog: int) -> tuple[Any, tuple[tuple[int, tc.TxnLogRecord], ...]]:
        """The ledger ``clog`` read through the cursor (BW-23, BW-24) and its records decoded, once per ledger."""

        def decode() -> tuple[Any, tuple[tuple[int, tc.TxnLogRecord], ...]]:
            replayed = bl.replay(KIND, self.store.get(clog)[0])
            return replayed, tuple((i, tc.TxnLogRecord.from_pb(_entry(r.record))) for i, r in enumerate(replayed))

        found: tuple[Any, tuple[tuple[int, tc.TxnLogRecord], ...]] = self.store.memo(("replayed", clog), decode)
        return found


def _entry(message: Any) -> Any:
    """A replayed record: the coordinator's TransactionMetadataEntry (the log holds no other kind)."""
    return message
