"""The batched log writer driven by Hypothesis, with the test playing the managed ledger and cursor.

Every command of ``reference.batched_log`` is driven (adds of good and bad records, timer ticks,
ledger answers in order, close and its task, the run-time switch, batch-index deletes) plus a
crash that reopens the writer from what the ledger and cursor hold (BW-25).  After every step:
all invariants and step properties, and end to end:

* every request gets exactly one callback; successes come in request order (BW-17);
* replaying the ledger with the cursor's ack sets yields exactly the records whose success was
  reported and not deleted, in request order, at the positions their callbacks named (BW-15,
  BW-20, BW-23, BW-24);
* recovery rebuilds the live entries of the writer exactly (BW-25).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conformance.strategies import batched_log as bs
from conformance.strategies.batched_log import LedgerModel
from invariants.base import violated, violated_steps
from invariants.batched_log import INVARIANTS, STEP_PROPERTIES
from reference import batched_log as bl
from spec.config import Config
from spec.envelope import LogKind
from spec.result import Ok
from spec.types import BatchedPosition, Position


@dataclass
class Outcome:
    record: bytes
    success: BatchedPosition | Position | None = None
    failure: str | None = None
    callbacks: int = 0


class BatchedLogMachine(RuleBasedStateMachine):
    @initialize(
        kind=bs.KINDS,
        enabled=bs.ENABLED,
        max_records=bs.MAX_RECORDS,
        max_size=bs.MAX_SIZE,
        max_delay=bs.MAX_DELAY,
    )
    def setup(self, kind: LogKind, enabled: bool, max_records: int, max_size: int, max_delay: int) -> None:
        self.config = Config().with_overrides(bs.config_overrides(kind, enabled, max_records, max_size, max_delay))
        self.kind = kind
        self.now = 0
        self.state = bl.initial(self.config, kind, 0)
        self.ledger = LedgerModel()
        self.generation = 0
        self.outcomes: dict[tuple[int, int], Outcome] = {}
        self.write_data: dict[int, bytes] = {}
        self.last_success: tuple[int, int] = (-1, -1)
        self.seq = 0

    # -- driving ------------------------------------------------------------------------------

    def _step(self, command: object) -> Ok[object] | bl.Err:
        before = self.state
        after, result = bl.step(before, command)  # type: ignore[arg-type]
        assert violated_steps(STEP_PROPERTIES, before, command, result, after) == []
        if not result.ok:
            assert after == before, "a rejected command must leave the state unchanged"
        self.state = after
        for effect in result.effects:
            self._carry_out(effect)
        return result

    def _carry_out(self, effect: object) -> None:
        key = self.generation
        if isinstance(effect, bl.AsyncAddEntry):
            self.write_data[effect.write_id] = effect.data
        elif isinstance(effect, bl.AddComplete):
            outcome = self.outcomes[(key, effect.request_id)]
            outcome.callbacks += 1
            outcome.success = effect.position
            assert (key, effect.request_id) > self.last_success
            self.last_success = (key, effect.request_id)
        elif isinstance(effect, bl.AddFailed):
            outcome = self.outcomes[(key, effect.request_id)]
            outcome.callbacks += 1
            outcome.failure = effect.error.name
        elif isinstance(effect, bl.CursorDelete):
            self.ledger.apply(effect)

    @rule(size=bs.RECORD_SIZES, advance=bs.ADVANCES)
    def add(self, size: int, advance: int) -> None:
        self.now += advance
        data = bl.sample_record(size, self.seq % 128, self.kind)
        self.seq += 1
        request_id = self.state.next_request_id
        self.outcomes[(self.generation, request_id)] = Outcome(data)
        result = self._step(bl.AsyncAddData(data, self.now))
        if result.ok:
            assert isinstance(result, Ok) and result.value == bl.AddAccepted(request_id)
        else:
            del self.outcomes[(self.generation, request_id)]
            assert result.error.name == "ManagedLedgerFenced"
            assert self.state.status is not bl.WriterStatus.OPEN

    @rule(junk=bs.JUNK)
    def add_unserializable(self, junk: bytes) -> None:
        result = self._step(bl.AsyncAddData(junk, self.now))
        assert not result.ok
        assert result.error.name in ("ManagedLedgerIntercept", "ManagedLedgerFenced")

    @precondition(lambda self: self.state.timer_due_ms is not None)
    @rule(late=bs.LATENESS)
    def tick(self, late: int) -> None:
        due = self.state.timer_due_ms
        assert due is not None
        self.now = max(self.now, due) + late
        assert self._step(bl.TimerFired(self.now)).ok

    @precondition(lambda self: bool(self.state.in_flight))
    @rule()
    def ledger_completes(self) -> None:
        write = self.state.in_flight[0]
        position = self.ledger.append(self.write_data.pop(write.write_id))
        assert self._step(bl.AddEntryComplete(write.write_id, position)).ok

    @precondition(lambda self: bool(self.state.in_flight))
    @rule(error=bs.LEDGER_ERRORS)
    def ledger_fails(self, error: str) -> None:
        write = self.state.in_flight[0]
        self.write_data.pop(write.write_id)
        assert self._step(bl.AddEntryFailed(write.write_id, error)).ok
        if error == "ManagedLedgerAlreadyClosed":
            self.ledger.roll()  # BW-26: the user rolls the ledger

    @rule()
    def close(self) -> None:
        assert self._step(bl.Close()).ok

    @precondition(lambda self: self.state.status is bl.WriterStatus.CLOSING)
    @rule()
    def finish_close(self) -> None:
        assert self._step(bl.FinishClose()).ok
        assert self.state.status is bl.WriterStatus.CLOSED

    @rule(enabled=bs.ENABLED)
    def switch(self, enabled: bool) -> None:
        result = self._step(bl.SetBatchedWrite(enabled, self.now))
        assert result.ok == (self.state.status is bl.WriterStatus.OPEN)

    @precondition(lambda self: any(o.success is not None for o in self.outcomes.values()))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        live = self._live_positions()
        if not live:
            return
        chosen = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=3))
        result = self._step(bl.DeleteRecords(tuple(chosen)))
        assert result.ok

    @rule()
    def crash_and_recover(self) -> None:
        """BW-25: the writer dies; buffered and in-flight requests never hear back."""
        live_entries = self.state.entries
        effective = self.state.config.enabled
        self.state = bl.recover(self.config, self.ledger.logged(), self.kind, self.now, enabled=effective)
        assert self.state.entries == live_entries
        for (gen, _), outcome in self.outcomes.items():
            if gen == self.generation and outcome.callbacks == 0:
                outcome.failure = "lost in crash"
        self.write_data.clear()
        self.generation += 1
        self.ledger.roll()  # a reopened managed ledger writes to a new ledger

    # -- checks -------------------------------------------------------------------------------

    def _live_positions(self) -> list[BatchedPosition | Position]:
        out = []
        for record in bl.replay(self.kind, self.ledger.logged()):
            out.append(record.position)
        return out

    @invariant()
    def all_invariants_hold(self) -> None:
        assert violated(INVARIANTS, self.state) == []

    @invariant()
    def one_callback_each(self) -> None:
        for outcome in self.outcomes.values():
            assert outcome.callbacks <= 1
        waiting = {rid for w in self.state.in_flight for rid in w.request_ids} | {
            b.request_id for b in self.state.buffer
        }
        for (gen, rid), outcome in self.outcomes.items():
            if gen == self.generation:
                assert (outcome.callbacks == 0) == (rid in waiting)

    @invariant()
    def replay_matches_callbacks(self) -> None:
        replayed = bl.replay(self.kind, self.ledger.logged())
        expected = {}
        for outcome in self.outcomes.values():
            if outcome.success is not None:
                expected.setdefault(
                    outcome.success.position if isinstance(outcome.success, BatchedPosition) else outcome.success, []
                ).append(outcome)
        seen: list[tuple[object, bytes]] = [
            (r.position, r.record.SerializeToString(deterministic=True)) for r in replayed
        ]
        # Every replayed record was reported durable at exactly that position with that content.
        for position, content in seen:
            plain = position.position if isinstance(position, BatchedPosition) else position
            candidates = expected.get(plain, [])
            match = [o for o in candidates if o.record == content and _same_slot(o.success, position)]
            assert match, f"replayed {position} was never reported"
        # Every reported, undeleted record is replayed (live entries of the writer agree).
        live_count = sum(len(v.remaining) for v in self.state.entries.values())
        assert live_count == len(seen)


def _same_slot(reported: BatchedPosition | Position | None, replayed: object) -> bool:
    if isinstance(replayed, BatchedPosition):
        return isinstance(reported, BatchedPosition) and reported.batch_index == replayed.batch_index
    # A batch of one replays with the plain position (BW-24).
    return reported is not None and (not isinstance(reported, BatchedPosition) or reported.batch_size == 1)


TestBatchedLog = BatchedLogMachine.TestCase
