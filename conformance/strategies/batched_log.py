"""The batched log writer's strategies (``tests/batched_log/test_stateful.py`` draws from these) and its driver.

The driver plays the managed ledger and its cursor (:class:`LedgerModel`): it confirms or fails the
oldest write in flight, carries out the cursor's deletes, rolls the ledger when a write reports it
closed (BW-26) and after a crash (a reopened managed ledger writes to a new ledger).  It adds good
records of several sizes and records that cannot be serialized, fires the timer when it is due,
closes the writer, flips the run-time switch, deletes records the ledger holds, and crashes: the
writer reopens over what the ledger confirmed (BW-25).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from conformance.strategies.base import Crash, Driver, Observation, Rule, Setup
from reference import batched_log as bl
from spec.envelope import LogKind
from spec.result import Err, Ok
from spec.types import BatchedPosition, Position, words_to_bits

__all__ = [
    "ADVANCES",
    "ENABLED",
    "JUNK",
    "KINDS",
    "LATENESS",
    "LEDGER_ERRORS",
    "MAX_DELAY",
    "MAX_RECORDS",
    "MAX_SIZE",
    "RECORD_SIZES",
    "BatchedLogDriver",
    "LedgerModel",
    "config_overrides",
]

RECORD_SIZES = st.sampled_from([4, 6, 7, 10, 16, 25, 40])
KINDS = st.sampled_from(list(LogKind))
ENABLED = st.booleans()
MAX_RECORDS = st.integers(1, 5)
MAX_SIZE = st.integers(8, 48)
MAX_DELAY = st.integers(1, 4)
ADVANCES = st.integers(0, 2)
LATENESS = st.integers(0, 2)
JUNK = st.sampled_from([b"", b"\x0e\x01\x00\x01", b"\xff\xff", b"\x10\x01"])
LEDGER_ERRORS = st.sampled_from(["PersistenceError", "ManagedLedgerAlreadyClosed", "ManagedLedgerFenced"])


def config_overrides(kind: LogKind, enabled: bool, max_records: int, max_size: int, max_delay: int) -> dict[str, Any]:
    """The writer's four broker.conf keys for ``kind`` (BW-1)."""
    prefix = "transactionLog" if kind is LogKind.TRANSACTION_LOG else "transactionPendingAck"
    return {
        f"{prefix}BatchedWriteEnabled": enabled,
        f"{prefix}BatchedWriteMaxRecords": max_records,
        f"{prefix}BatchedWriteMaxSize": max_size,
        f"{prefix}BatchedWriteMaxDelayInMillis": max_delay,
    }


@dataclass
class LedgerModel:
    """The managed ledger and one cursor, as plainly as possible."""

    ledger_id: int = 1
    entries: list[tuple[Position, bytes]] = field(default_factory=list)
    next_entry: int = 0
    ack_bits: dict[Position, int] = field(default_factory=dict)
    deleted: set[Position] = field(default_factory=set)

    def append(self, data: bytes) -> Position:
        position = Position(self.ledger_id, self.next_entry)
        self.next_entry += 1
        self.entries.append((position, data))
        return position

    def roll(self) -> None:
        self.ledger_id += 1
        self.next_entry = 0

    def apply(self, delete: bl.CursorDelete) -> None:
        for item in delete.entries:
            if item.ack_set is None:
                self.deleted.add(item.position)
                continue
            bits = self.ack_bits.get(item.position, words_to_bits(item.ack_set)) & words_to_bits(item.ack_set)
            if bits == 0:
                self.deleted.add(item.position)
            self.ack_bits[item.position] = bits

    def logged(self) -> list[bl.LoggedEntry]:
        out = []
        for position, data in self.entries:
            bits = self.ack_bits.get(position)
            words = None
            if bits is not None:
                count = max(1, (bits.bit_length() + 63) // 64)
                words = tuple((bits >> (64 * i)) & 0xFFFF_FFFF_FFFF_FFFF for i in range(count))
            out.append(bl.LoggedEntry(position, data, words, position in self.deleted))
        return out


class BatchedLogDriver(Driver):
    machine = "batched_log"

    def __init__(self, commands: frozenset[str] | None = None, crashes: bool = True) -> None:
        super().__init__(commands, crashes)
        self.now = 0
        self.seq = 0
        self.kind = LogKind.TRANSACTION_LOG
        self.ledger = LedgerModel()
        self.writes: dict[int, bytes] = {}  # write id -> data, of the writes in flight

    def setup(self, data: st.DataObject) -> Setup:
        self.kind = data.draw(KINDS, label="kind")
        config = config_overrides(
            self.kind,
            data.draw(ENABLED, label="enabled"),
            data.draw(MAX_RECORDS, label="max_records"),
            data.draw(MAX_SIZE, label="max_size"),
            data.draw(MAX_DELAY, label="max_delay"),
        )
        return Setup(config, {"kind": self.kind.name})

    def rules(self) -> list[Rule]:
        return [
            Rule("async_add_data", self._add),
            Rule("async_add_data", lambda data, state: bl.AsyncAddData(data.draw(JUNK, label="junk"), self.now)),
            Rule("timer_fired", self._tick, lambda s: s.timer_due_ms is not None),
            Rule("add_entry_complete", self._complete, lambda s: bool(s.in_flight)),
            Rule("add_entry_failed", self._fail, lambda s: bool(s.in_flight)),
            Rule("close", lambda data, state: bl.Close()),
            Rule("finish_close", lambda data, state: bl.FinishClose(), lambda s: s.status is bl.WriterStatus.CLOSING),
            Rule("set_batched_write", self._switch),
            Rule("delete_records", self._delete, lambda s: bool(self._live())),
            Rule("crash", lambda data, state: Crash({"now_ms": self.now})),
        ]

    def _add(self, data: st.DataObject, state: bl.WriterState) -> bl.AsyncAddData:
        size = data.draw(RECORD_SIZES, label="size")
        self.now += data.draw(ADVANCES, label="advance")
        record = bl.sample_record(size, self.seq % 128, self.kind)
        self.seq += 1
        return bl.AsyncAddData(record, self.now)

    def _tick(self, data: st.DataObject, state: bl.WriterState) -> bl.TimerFired:
        due = state.timer_due_ms
        assert due is not None
        self.now = max(self.now, due) + data.draw(LATENESS, label="late")
        return bl.TimerFired(self.now)

    def _complete(self, data: st.DataObject, state: bl.WriterState) -> bl.AddEntryComplete:
        write = state.in_flight[0]
        return bl.AddEntryComplete(write.write_id, self.ledger.append(self.writes.pop(write.write_id)))

    def _fail(self, data: st.DataObject, state: bl.WriterState) -> bl.AddEntryFailed:
        write = state.in_flight[0]
        self.writes.pop(write.write_id, None)
        error = data.draw(LEDGER_ERRORS, label="error")
        if error == "ManagedLedgerAlreadyClosed":
            self.ledger.roll()  # BW-26: the user rolls the ledger
        return bl.AddEntryFailed(write.write_id, error)

    def _switch(self, data: st.DataObject, state: bl.WriterState) -> bl.SetBatchedWrite:
        return bl.SetBatchedWrite(data.draw(ENABLED, label="enabled"), self.now)

    def _live(self) -> list[BatchedPosition | Position]:
        return [record.position for record in bl.replay(self.kind, self.ledger.logged())]

    def _delete(self, data: st.DataObject, state: bl.WriterState) -> bl.DeleteRecords:
        chosen = data.draw(st.lists(st.sampled_from(self._live()), min_size=1, max_size=3), label="positions")
        return bl.DeleteRecords(tuple(chosen))

    def after(self, step: object, result: Ok[Any] | Err, state: bl.WriterState) -> None:
        if isinstance(step, Crash):
            self.writes.clear()  # in flight with the dead writer: never answered
            self.ledger.roll()  # a reopened managed ledger writes to a new ledger
        for effect in result.effects:
            if isinstance(effect, bl.AsyncAddEntry):
                self.writes[effect.write_id] = effect.data
            elif isinstance(effect, bl.CursorDelete):
                self.ledger.apply(effect)

    def observations(self, state: bl.WriterState) -> list[Observation]:
        plain: list[Observation] = [
            (name, {})
            for name in (
                "status",
                "effective_batching",
                "buffered_requests",
                "buffered_bytes",
                "timer_due_ms",
                "in_flight",
                "succeeded",
                "failed",
                "accepted",
                "stats",
                "live_entries",
            )
        ]
        entries: list[Observation] = [
            ("entry", {"position": [p.ledger_id, p.entry_id]}) for p, _ in self.ledger.entries
        ]
        return plain + entries
