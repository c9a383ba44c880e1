"""The transaction coordinator of the composed model (:mod:`reference.coordinator`) over its
transaction log: the clients' requests, the two phases of an end, the timers, a crash and reload.

The coordinator's slots are its state's digest, its log ``(records, max_local_txn_id)`` and
``caux = (epoch, runs, waiters, timers)``: the crash epoch, the phase-2 runs waiting for their
participants, the END_TXN requests waiting for their end to settle, and the scheduled re-runs.
With the ``batched-log`` model the log goes through PIP-160's batched writer
(:class:`proofs.check.batched.BatchedLog`), which carries out a step's effects once its records
are durable, and ``caux`` grows the writer's slots.
"""

from __future__ import annotations

from typing import Any

from proofs.check.batched import BatchedLog
from proofs.check.machines import Machines
from proofs.check.program import ModelSpec
from proofs.check.state import (
    ADDP_REQ,
    ADDP_RESP,
    ADDS_REQ,
    ADDS_RESP,
    CAUX,
    COORD,
    COORDINATOR_SLOTS,
    END_RESP,
    ENDP,
    ENDP_RESP,
    ENDS,
    ERRORS,
    NEW_REQ,
    NEW_RESP,
    Successor,
    WorkingState,
    error_code,
    partition_name,
)
from proofs.check.store import Store
from proofs.check.transitions import AddSuccessor
from reference import coordinator as tc
from spec.result import Err, Ok
from spec.types import Subscription, TxnAction, TxnID, TxnStatus

__all__ = ["Coordinator"]


class Coordinator:
    """The coordinator's transitions; what the batched log calls back once records are durable
    (:meth:`decide`, :meth:`start_run`, :meth:`arm_resume`, :meth:`settle`) is public."""

    def __init__(
        self,
        spec: ModelSpec,
        store: Store,
        machines: Machines,
        add: AddSuccessor,
        sub_names: tuple[Subscription, ...],
    ) -> None:
        self.spec = spec
        self.store = store
        self.value = store.get
        self.machines = machines
        self.add = add
        self.sub_names = sub_names
        self.sub_index = {name: s for s, name in enumerate(sub_names)}
        self.part_index = {partition_name(p): p for p in range(spec.partitions)}
        self.batched = BatchedLog(spec.config, store, machines.guard, self) if spec.batched_log else None

    def initial(self) -> tuple[int, int, tuple[Any, ...]]:
        """The coordinator's digest, its empty log and its auxiliary state."""
        put = self.store.put
        coord = put(tc.initial(self.spec.config, 0))
        clog = put(((), -1))
        caux: tuple[Any, ...] = (0, (), (), ())
        if self.batched is not None:
            caux = self.batched.initial_aux()
            clog = self.batched.initial_log()
        return coord, clog, caux

    # --- the clients' requests -------------------------------------------------------------------

    def request(self, w: WorkingState, m: tuple[int, ...]) -> None:
        """NEW_TXN, ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN or END_TXN from a client."""
        kind, c = m[0], m[1]
        machines = self.machines
        if kind == NEW_REQ:
            before = self.value(w.coord)
            result = machines.coordinator(w, tc.NewTxn(self.spec.txn_timeout_ms, before.sequence_id + 1))
            self.effects(w, result, reply=(NEW_RESP, c, m[2], _txn_seq(result), error_code(result)))
            return
        if kind == ADDP_REQ:
            result = machines.coordinator(w, tc.AddPartitionToTxn(TxnID(0, m[2]), (partition_name(m[3]),), 0))
            self.effects(w, result, reply=(ADDP_RESP, c, m[2], m[3], error_code(result)))
            return
        if kind == ADDS_REQ:
            result = machines.coordinator(w, tc.AddSubscriptionToTxn(TxnID(0, m[2]), (self.sub_names[m[3]],), 0))
            self.effects(w, result, reply=(ADDS_RESP, c, m[2], m[3], error_code(result)))
            return
        # END_TXN: answered once phase 3 decided (TC-13 .. TC-16), as the engine's end_txn
        seq, action = m[2], m[3]
        result = machines.coordinator(w, tc.EndTxn(TxnID(0, seq), TxnAction(action), 0))
        if isinstance(result, Err) and not _retries(result):
            self.effects(w, result, reply=(END_RESP, c, seq, error_code(result)))
            return
        caux = w.caux
        caux[2] = tuple(sorted((*caux[2], (seq, action, c))))
        self.effects(w, result, settle=(seq, action))

    def effects(
        self,
        w: WorkingState,
        result: Any,
        *,
        reply: tuple[int, ...] | None = None,
        settle: tuple[int, int] | None = None,
    ) -> None:
        """Carry out a coordinator step's effects in order, then answer (TC-28: the log first)."""
        if self.batched is not None:
            self.batched.effects(w, result, reply=reply, settle=settle)
            return
        records, max_local = self.value(w.clog)
        log = list(records)
        runs: list[Any] = []
        for effect in result.effects:
            if isinstance(effect, tc.AppendRecord):
                log.append((effect.record_id, effect.record))
                if effect.record.max_local_txn_id is not None:
                    max_local = max(max_local, effect.record.max_local_txn_id)
            elif isinstance(effect, tc.DeleteRecords):
                doomed = set(effect.record_ids)
                log = [r for r in log if r[0] not in doomed]
            elif isinstance(effect, tc.EndTxnInTransactionBuffer):
                runs.append(effect)
            elif isinstance(effect, tc.ScheduleResumeEndTxn):
                self.arm_resume(w, effect)
        if isinstance(result, Ok):
            self.decide(w, result.effects)
        w.clog = self.store.put((tuple(log), max_local))
        # What waits for a step's writes: phase 2, the answer, the settlement of END_TXN waiters.
        for run in runs:
            self.start_run(w, run)
        if reply is not None and not (isinstance(result, Err) and not result.error.answered):
            w.send(reply)
        if settle is not None:
            self.settle(w, settle[0], settle[1], result)

    def arm_resume(self, w: WorkingState, effect: tc.ScheduleResumeEndTxn) -> None:
        """Schedule a re-run of an end (TC-16 retry, TC-24 re-drive)."""
        timer = (effect.txn_id.least_sig_bits, int(effect.action), int(effect.is_timeout))
        w.caux[3] = tuple(sorted({*w.caux[3], timer}))

    def decide(self, w: WorkingState, effects: tuple[Any, ...]) -> None:
        """The history variable ``decided``: the status each logged record gave its transaction."""
        decided = list(w.decided)
        for effect in effects:
            if not isinstance(effect, tc.AppendRecord):
                continue
            record = effect.record
            seq = record.txn_id.least_sig_bits
            while len(decided) <= seq:
                decided.append(-1)
            if record.metadata_op is tc.TxnMetadataOp.NEW:
                decided[seq] = int(TxnStatus.OPEN)
            elif record.metadata_op is tc.TxnMetadataOp.UPDATE and record.new_status is not None:
                decided[seq] = int(record.new_status)
        w.decided = tuple(decided)

    # --- the two phases of an end --------------------------------------------------------------

    def start_run(self, w: WorkingState, effect: tc.EndTxnInTransactionBuffer) -> None:
        """Phase 2 (TC-14): END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION to every participant."""
        epoch = w.caux[0]
        seq, action, to, lwm = (
            effect.txn_id.least_sig_bits,
            int(effect.action),
            int(effect.is_timeout),
            effect.low_water_mark,
        )
        parts = tuple(sorted(self.part_index[name] for name in effect.partitions))
        subs = tuple(sorted(self.sub_index[sub] for sub in effect.subscriptions))
        run = (seq, action, to, lwm, parts, subs, ())
        if not parts and not subs:
            self._finish_run(w, run)
            return
        w.caux[1] = tuple(sorted((*w.caux[1], run)))
        for p in parts:
            w.send((ENDP, epoch, seq, action, to, lwm, p))
        for s in subs:
            w.send((ENDS, epoch, seq, action, to, lwm, s))

    def participant_answer(self, w: WorkingState, m: tuple[int, ...]) -> None:
        """A partition's or a subscription's answer to phase 2."""
        epoch, seq, action, to, lwm, who, error = m[1:]
        if epoch != w.caux[0]:
            return  # an answer to a coordinator that has since crashed
        slot = 4 if m[0] == ENDP_RESP else 5
        runs = list(w.caux[1])
        for i, run in enumerate(runs):
            if run[:4] == (seq, action, to, lwm) and who in run[slot]:
                pending = tuple(x for x in run[slot] if x != who)
                errors = (*run[6], error) if error else run[6]
                run = (*run[:slot], pending, *run[slot + 1 : 6], tuple(sorted(errors)))
                if run[4] or run[5]:
                    runs[i] = run
                    w.caux[1] = tuple(sorted(runs))
                else:
                    del runs[i]
                    w.caux[1] = tuple(sorted(runs))
                    self._finish_run(w, run)
                return

    def _finish_run(self, w: WorkingState, run: tuple[Any, ...]) -> None:
        """Phase 3 (TC-15, TC-16) once every participant answered."""
        seq, action, to = run[0], run[1], run[2]
        errors = tuple(ERRORS[e] for e in run[6])
        result = self.machines.coordinator(
            w, tc.EndTxnInTransactionBufferResult(TxnID(0, seq), TxnAction(action), 0, bool(to), errors)
        )
        self.effects(w, result, settle=(seq, action))

    def settle(self, w: WorkingState, seq: int, action: int, result: Any) -> None:
        """Answer the END_TXN requests waiting on (txn, action) unless the end goes on (the engine's
        ``_settle``)."""
        if isinstance(result, Err) and _retries(result):
            return
        if isinstance(result, Ok) and any(isinstance(e, tc.EndTxnInTransactionBuffer) for e in result.effects):
            return
        waiting = [x for x in w.caux[2] if x[0] == seq and x[1] == action]
        if not waiting:
            return
        w.caux[2] = tuple(x for x in w.caux[2] if not (x[0] == seq and x[1] == action))
        for _seq, _action, c in waiting:
            w.send((END_RESP, c, seq, error_code(result)))

    # --- timers ----------------------------------------------------------------------------------

    def tick(self, w: WorkingState, seq: int) -> None:
        """The timeout tracker fires at the deadline of transaction ``seq`` (TC-18)."""
        coord = self.value(w.coord)
        start = coord.txns[seq].start_time
        result = self.machines.coordinator(w, tc.Tick(start + self.spec.txn_timeout_ms + 1))
        self.effects(w, result)

    def resume(self, w: WorkingState, timer: tuple[int, int, int]) -> None:
        """A scheduled re-run of an end (TC-16 retry, TC-24 re-drive)."""
        seq, action, to = timer
        w.caux[3] = tuple(t for t in w.caux[3] if t != timer)
        result = self.machines.coordinator(w, tc.ResumeEndTxn(TxnID(0, seq), TxnAction(action), 0, bool(to)))
        self.effects(w, result, settle=(seq, action))

    def actions(self, s: tuple[Any, ...], out: list[Successor]) -> None:
        """The timeout tracker (where timeouts may fire), the scheduled re-runs, the batched writer."""
        add = self.add
        if self.spec.faults.timeouts:
            self.ticks(s, out)
        for timer in s[CAUX][3]:
            add(out, s, ("resume", *timer), ("r", timer), lambda w, t=timer: self.resume(w, t), COORDINATOR_SLOTS)
        if self.batched is not None:
            self.batched.actions(
                s, out, lambda out, s, label, family, act: add(out, s, label, family, act, COORDINATOR_SLOTS)
            )

    def ticks(self, s: tuple[Any, ...], out: list[Successor]) -> None:
        """The timeout tracker firing at each open transaction's deadline."""
        coord = self.value(s[COORD])
        for seq, meta in sorted(coord.txns.items()):
            if meta.status is TxnStatus.OPEN:
                self.add(out, s, ("tick", seq), ("tick", seq), lambda w, seq=seq: self.tick(w, seq), COORDINATOR_SLOTS)

    # --- crash and reload ----------------------------------------------------------------------

    def crash(self, w: WorkingState) -> None:
        """Memory lost; the store reloads from its log (TC-21 .. TC-25), as the engine's load."""
        self.machines.reloaded("coordinator", 0)
        if self.batched is not None:
            self.batched.crash(w)
            return
        records, max_local = self.value(w.clog)
        renumbered = tuple((i, record) for i, (_rid, record) in enumerate(records))
        state, effects = self.store.memo(
            ("tc-recover", w.clog),
            lambda: tc.recover(self.spec.config, 0, renumbered, max_local, next_record_id=len(renumbered)),
        )
        log = list(renumbered)
        timers = []
        for effect in effects:
            if isinstance(effect, tc.DeleteRecords):
                doomed = set(effect.record_ids)
                log = [r for r in log if r[0] not in doomed]
            elif isinstance(effect, tc.ScheduleResumeEndTxn):
                timers.append((effect.txn_id.least_sig_bits, int(effect.action), int(effect.is_timeout)))
        w.coord = self.store.put(state)
        w.clog = self.store.put((tuple(log), max(max_local, state.sequence_id)))
        w.caux[:] = [w.caux[0] + 1, (), (), tuple(sorted(set(timers)))]


def _txn_seq(result: Any) -> int:
    return result.value.least_sig_bits if isinstance(result, Ok) else -1


def _retries(result: Any) -> bool:
    return any(isinstance(e, tc.ScheduleResumeEndTxn) for e in result.effects)
