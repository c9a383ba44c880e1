"""The simulator's record logs roll a ledger that refuses writes as closed (BW-26), as the threaded
writer does (``tests/batched_log/test_rules.py``) and as Pulsar's log users do."""

from __future__ import annotations

from engine.ledger_store import LedgerFaults, LedgerStore
from engine.scheduler import Future, Simulation
from engine.simulated.faults import FaultyLedger
from engine.storage.memory_ledger import MemoryLedger
from engine.storage.record_log import LogWriteFailed, RecordLog
from reference.coordinator import TxnLogRecord, TxnMetadataOp
from spec.config import Config
from spec.envelope import LogKind
from spec.types import Position, TxnID


def _record(i: int) -> bytes:
    record = TxnLogRecord(
        TxnMetadataOp.NEW, TxnID(0, i), timeout_ms=1000, start_time=0, last_modification_time=0, max_local_txn_id=i
    )
    return record.to_pb().SerializeToString()


def _write(sim: Simulation, log: RecordLog, i: int) -> Future[Position]:
    future = log.add(_record(i))
    sim.run_until(lambda: future.done)
    return future


def test_a_write_refused_by_a_closed_ledger_rolls_it_and_the_next_write_succeeds() -> None:
    """BW-26."""
    sim = Simulation(0)
    ledger = FaultyLedger(MemoryLedger("log", Config()), roll_after_append_failure=True)
    log = RecordLog(sim, ledger, LogKind.TRANSACTION_LOG, Config(), batching=False)
    ledger.fail_appends(1)
    errors = []
    for i in range(2):
        failed = _write(sim, log, i)
        assert isinstance(failed.error, LogWriteFailed)
        errors.append(failed.error.error.name)
    # the injected failure, then the closed ledger's refusal, which rolls it
    assert errors == ["PersistenceError", "ManagedLedgerAlreadyClosed"]
    assert log.ledger_rolls == 1
    written = _write(sim, log, 2)
    assert written.error is None
    first = ledger.ledgers()[0].ledger_id
    assert written.result().ledger_id > first
    # the rolled log replays what it holds, from both ledgers
    assert len(log.replay()) == 1


def test_without_a_closed_ledger_nothing_rolls() -> None:
    sim = Simulation(0)
    ledger = FaultyLedger(MemoryLedger("log", Config()))
    log = RecordLog(sim, ledger, LogKind.TRANSACTION_LOG, Config(), batching=False)
    ledger.fail_appends(1)
    assert _write(sim, log, 0).error is not None
    assert _write(sim, log, 1).error is None
    assert log.ledger_rolls == 0


def test_the_store_plays_the_closed_ledger_only_for_the_owners_that_ask() -> None:
    sim = Simulation(0)
    store = LedgerStore("memory", Config(), rng=sim.rng, faults=LedgerFaults(append=1.0))
    for name, closes in (("log", True), ("topic", False)):
        ledger = store.open(name, closes_on_write_failure=closes)
        assert isinstance(ledger, FaultyLedger)
        for _ in range(2):
            try:
                ledger.append(b"x")
            except Exception as exc:
                last = type(exc).__name__
        assert last == ("LedgerClosed" if closes else "LedgerWriteFailed"), name
