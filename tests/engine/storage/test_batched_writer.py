"""The engine writer (``engine/storage/batched_writer.py``) over real ledgers, with a real timer.

Catalogue C.1 of the PIP-160 fact sheet, re-expressed: every add gets exactly one outcome,
successes in request order, batch positions consistent, entries read back equal what was
written, failures (ledger errors, close mid-stream) included.  Plus the run-time switch (BW-22)
and the Prometheus metrics (BW-19).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from engine.simulated.faults import FaultyLedger, Op
from engine.storage.batched_writer import BatchedLogWriter, BatchLogAdmin, WriteFailed, read_log
from engine.storage.bufferedwriter_metrics import (
    BATCH_RECORDS_BUCKETS,
    BATCH_SIZE_BYTES_BUCKETS,
    DELAY_SECONDS_BUCKETS,
    BufferedWriterMetrics,
)
from engine.storage.file_ledger import FileLedger
from engine.storage.ledger import LedgerWriteFailed, ManagedLedger
from engine.storage.memory_ledger import MemoryLedger
from reference import batched_log as bl
from spec.config import Config
from spec.envelope import LogKind, decode_entry
from spec.types import BatchedPosition, Position

TC = LogKind.TRANSACTION_LOG
PA = LogKind.PENDING_ACK


def cfg(
    enabled: bool = True, max_records: int = 512, max_size: int = 1024 * 1024, delay: int = 1, kind: LogKind = TC
) -> bl.WriterConfig:
    return bl.WriterConfig(kind, enabled, max_records, max_size, delay)


def outcomes(futures: list[Future[Any]], timeout: float = 30) -> list[Any]:
    out: list[Any] = []
    for future in futures:
        try:
            out.append(future.result(timeout))
        except WriteFailed as exc:
            out.append(exc)
    return out


def check_contract(ledger: ManagedLedger, results: list[Any], records: list[bytes], kind: LogKind = TC) -> None:
    """Common checks of testMainProcess: one outcome each, successes ordered, positions and
    entries consistent with what was written (BW-15, BW-17)."""
    successes = [(i, r) for i, r in enumerate(results) if not isinstance(r, WriteFailed)]
    keys = [(r.ledger_id, r.entry_id, r.batch_index if isinstance(r, BatchedPosition) else 0) for _, r in successes]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    by_entry: dict[Position, list[tuple[int, Any]]] = {}
    for i, r in successes:
        by_entry.setdefault(Position(r.ledger_id, r.entry_id), []).append((i, r))
    for position, members in by_entry.items():
        decoded = decode_entry(ledger.read_entry(position), kind)
        assert decoded.batch_size == len(members)
        for index, (i, r) in enumerate(members):
            if decoded.batched:
                assert r == BatchedPosition(position.ledger_id, position.entry_id, len(members), index)
                assert isinstance(r, BatchedPosition) and r.batch_index == index and r.batch_size == len(members)
            else:
                assert not isinstance(r, BatchedPosition)
            assert decoded.records[index].SerializeToString(deterministic=True) == records[i]


def write_all(writer: BatchedLogWriter, n: int, size: int = 4, kind: LogKind = TC) -> tuple[list[Any], list[bytes]]:
    records = [bl.sample_record(size, i % 128, kind) for i in range(n)]
    futures = [writer.add(r) for r in records]
    return outcomes(futures), records


@pytest.fixture
def memory() -> Iterator[MemoryLedger]:
    ledger = MemoryLedger("txlog", Config().with_overrides({"managedLedgerMaxEntriesPerLedger": 50}))
    yield ledger
    ledger.close()


@pytest.mark.parametrize(
    ("name", "config", "writes", "size"),
    [
        ("1.1-normal", cfg(), 2000, 4),
        ("1.2-few", cfg(), 100, 4),
        ("1.3-many", cfg(delay=100), 5000, 4),
        ("1.4-all-large", cfg(max_size=1024, delay=100), 300, 1024),
        ("1.5-max-records-1", cfg(max_records=1), 512, 4),
        ("1.6-max-records-2", cfg(max_records=2), 1999, 4),
        ("1.7-disabled", cfg(enabled=False, max_records=128), 500, 4),
    ],
)
def test_main_process(memory: MemoryLedger, name: str, config: bl.WriterConfig, writes: int, size: int) -> None:
    """Catalogue C.1 1.1-1.7 (write counts of 1.3 scaled down)."""
    writer = BatchedLogWriter(memory, config)
    try:
        results, records = write_all(writer, writes, size)
    finally:
        writer.close()
    assert not any(isinstance(r, WriteFailed) for r in results)
    check_contract(memory, results, records)
    batched = [r for r in results if isinstance(r, BatchedPosition)]
    if not config.effective or size >= config.max_size:
        assert not batched  # 1.4, 1.5, 1.7: plain entries and positions
        assert writer.entries_written == writes
    else:
        assert writer.entries_written < writes or writes == 1
    if name == "1.6-max-records-2":
        assert all(p.batch_size <= 2 for p in batched)


@pytest.mark.parametrize("enabled", [True, False])
def test_ledger_always_fails(enabled: bool) -> None:
    """C.1 1.8/1.9: every callback fails, with the ledger's error."""
    ledger = FaultyLedger(MemoryLedger("failing"))
    ledger.fail_when(lambda op: True, error=lambda op: LedgerWriteFailed("bookie down"))
    writer = BatchedLogWriter(ledger, cfg(enabled=enabled, max_records=16))
    try:
        results, _ = write_all(writer, 200)
    finally:
        writer.close()
    assert all(isinstance(r, WriteFailed) and r.error.name == "PersistenceError" for r in results)


@pytest.mark.parametrize("enabled", [True, False])
def test_ledger_fails_after_first_write(enabled: bool) -> None:
    """C.1 1.10/1.11: failures + successes = total, successes ordered."""
    inner = MemoryLedger("flaky")
    ledger = FaultyLedger(inner)
    seen = {"n": 0}

    def after_first(op: Any) -> bool:
        seen["n"] += 1
        return seen["n"] > 1

    ledger.fail_when(after_first, error=lambda op: LedgerWriteFailed("bookie lost"))
    writer = BatchedLogWriter(ledger, cfg(enabled=enabled, max_records=8))
    try:
        results, records = write_all(writer, 300)
    finally:
        writer.close()
    failures = [r for r in results if isinstance(r, WriteFailed)]
    assert failures and len(failures) < len(results)
    check_contract(inner, results, records)


@pytest.mark.parametrize("enabled", [True, False])
def test_close_mid_stream(enabled: bool) -> None:
    """C.1 1.12/1.13: every request still gets one outcome; those after close fail (BW-18)."""
    ledger = MemoryLedger("closing")
    writer = BatchedLogWriter(ledger, cfg(enabled=enabled, max_records=64, delay=50))
    records = [bl.sample_record(4, i % 128) for i in range(3000)]
    futures: list[Future[Any]] = []
    closer = threading.Thread(target=writer.close)
    for i, record in enumerate(records):
        if i == 1500:
            closer.start()
        futures.append(writer.add(record))
    closer.join(30)
    results = outcomes(futures)
    assert len(results) == 3000
    assert isinstance(results[-1], WriteFailed) and results[-1].error.name == "ManagedLedgerFenced"
    check_contract(ledger, results, records)
    assert writer.state.status is bl.WriterStatus.CLOSED and not writer.state.in_flight


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_ledger_faults_keep_the_contract(seed: int) -> None:
    """Seeded random append failures (some ``after`` the write landed, outcome unknown to the
    writer) with the closed-ledger rule: one outcome each, successes ordered, every success
    readable where it was reported (BW-16, BW-17, BW-26)."""
    inner = MemoryLedger(f"random-{seed}")
    ledger = FaultyLedger(inner, rng=random.Random(seed), roll_after_append_failure=True)
    ledger.fail_randomly(0.04, ops=[Op.APPEND])
    ledger.fail_randomly(0.02, ops=[Op.APPEND], after=True)
    writer = BatchedLogWriter(ledger, cfg(max_records=8, max_size=200, delay=1))
    try:
        sizes = [4, 10, 60, 250]
        records = [bl.sample_record(sizes[i % 4], i % 128) for i in range(1500)]
        results = outcomes([writer.add(r) for r in records])
    finally:
        writer.close()
    assert len(results) == 1500
    assert any(isinstance(r, WriteFailed) for r in results)
    assert sum(not isinstance(r, WriteFailed) for r in results) > 1000
    check_contract(inner, results, records)


def test_a_failing_callback_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    """Fact sheet W12: an exception thrown by one callback is logged; the rest still run (BW-17)."""
    writer = BatchedLogWriter(MemoryLedger("callbacks"), cfg(max_records=3, delay=60_000))
    seen: list[int] = []

    def callback(index: int) -> Any:
        def on_done(position: Any, error: Any) -> None:
            seen.append(index)
            if index == 1:
                raise RuntimeError("caller bug")

        return on_done

    try:
        for i in range(3):
            writer.add_with_callback(bl.sample_record(4, i), callback(i))
        last = writer.add(bl.sample_record(4, 3))
    finally:
        writer.close()
    assert seen == [0, 1, 2]
    assert isinstance(outcomes([last])[0], WriteFailed)  # buffered at close
    assert "callback failed" in caplog.text


def test_flush_thresholds_timer_count_size() -> None:
    """C.1 2: (a) delay 100 ms; (b) 32 records; (c) 256 bytes of 4-byte records."""
    ledger = MemoryLedger("thresholds")
    timer = BatchedLogWriter(ledger, cfg(delay=100))
    try:
        assert isinstance(timer.add(bl.sample_record(4, 1)).result(5), BatchedPosition)
        assert timer.state.stats.max_delay == 1
    finally:
        timer.close()
    count = BatchedLogWriter(ledger, cfg(max_records=32, delay=60_000))
    try:
        results = outcomes([count.add(bl.sample_record(4, i)) for i in range(32)])
        assert {(r.batch_size) for r in results} == {32} and count.state.stats.max_records == 1
    finally:
        count.close()
    size = BatchedLogWriter(ledger, cfg(max_size=256, delay=60_000))
    try:
        results = outcomes([size.add(bl.sample_record(4, i)) for i in range(64)])
        assert {(r.batch_size) for r in results} == {64} and size.state.stats.max_size == 1
    finally:
        size.close()


def test_one_pending_tick_with_a_slow_writer() -> None:
    """C.1 3: the tick is a step of the writer thread, so ticks cannot pile up (BW-12)."""
    ledger = MemoryLedger("slow")
    writer = BatchedLogWriter(ledger, cfg(max_records=2, delay=1))
    try:
        outcomes([writer.add(bl.sample_record(4, i % 128)) for i in range(500)])
        state = writer.state
        assert state.timer_due_ms is not None  # exactly one armed timer, never a queue of them
    finally:
        writer.close()


def test_both_users_read_their_own_keys() -> None:
    config = Config().with_overrides(
        {
            "transactionLogBatchedWriteEnabled": True,
            "transactionLogBatchedWriteMaxRecords": 3,
            "transactionLogBatchedWriteMaxDelayInMillis": 60_000,
            "transactionPendingAckBatchedWriteEnabled": False,
        }
    )
    admin = BatchLogAdmin(config)
    tc = admin.open_writer(TC, "1", MemoryLedger("tc"))
    pa = admin.open_writer(PA, "my-topic-my-subscription", MemoryLedger("pa"))
    try:
        tc_results = outcomes([tc.add(bl.sample_record(4, i)) for i in range(3)])
        pa_results = outcomes([pa.add(bl.sample_record(6, i, PA)) for i in range(3)])
        assert all(isinstance(r, BatchedPosition) and r.batch_size == 3 for r in tc_results)
        assert not any(isinstance(r, BatchedPosition) for r in pa_results)
    finally:
        tc.close()
        pa.close()


def test_admin_switch_and_stats_keep_entries_readable() -> None:
    """BW-22: the PIP's admin commands; disabling never makes batched entries unreadable."""
    admin = BatchLogAdmin(Config())
    assert admin.get_txn_tc_batch_log_stat() == {"txnTcBatchLogEnabled": False, "coodinatorArray": []}
    ledger = MemoryLedger("tc-switch")
    writer = admin.open_writer(TC, "1", ledger)
    pa = admin.open_writer(PA, "t-s", MemoryLedger("pa-switch"))
    try:
        first = outcomes([writer.add(bl.sample_record(4, i)) for i in range(5)])
        admin.set_txn_tc_batch_log(True)
        assert admin.get_txn_tc_batch_log_stat() == {"txnTcBatchLogEnabled": True, "coodinatorArray": [{"1": True}]}
        assert admin.get_txn_pending_ack_batch_log_stat() == {
            "txnPendingAckBatchLogEnabled": False,
            "subscriptionArray": [{"t-s": False}],
        }
        second = outcomes([writer.add(bl.sample_record(4, 5 + i)) for i in range(5)])
        admin.set_txn_tc_batch_log(False)
        third = outcomes([writer.add(bl.sample_record(4, 10 + i)) for i in range(5)])
        admin.set_txn_pending_ack_batch_log(True)
        assert admin.get_txn_pending_ack_batch_log_stat()["subscriptionArray"] == [{"t-s": True}]
    finally:
        writer.close()
        pa.close()
    assert not any(isinstance(r, BatchedPosition) for r in first + third)
    assert any(isinstance(r, BatchedPosition) for r in second)
    entries = ledger.read(Position(ledger.ledgers()[0].ledger_id, 0), 1000)
    log = [bl.LoggedEntry(e.position, e.data) for e in entries]
    assert [r.record.txnid_least_bits for r in bl.replay(TC, log)] == list(range(15))


def test_deletes_reach_the_cursor_and_replay_skips_them() -> None:
    """BW-20, BW-24 through a real cursor."""
    ledger = MemoryLedger("deletes")
    cursor = ledger.open_cursor("tc")
    writer = BatchedLogWriter(ledger, cfg(max_records=4, delay=60_000), cursor=cursor)
    try:
        results = outcomes([writer.add(bl.sample_record(4, i)) for i in range(4)])
        writer.delete((results[1], results[2])).result(10)
        entry = Position(results[0].ledger_id, results[0].entry_id)
        assert cursor.batch_ack_set(entry) is not None
        log = [bl.LoggedEntry(entry, ledger.read_entry(entry), cursor.batch_ack_set(entry), cursor.is_deleted(entry))]
        assert [r.position for r in bl.replay(TC, log)] == [results[0], results[3]]
        writer.delete((results[0], results[3])).result(10)
        assert cursor.is_deleted(entry)
    finally:
        writer.close()


def test_restart_recovers_entries_and_keeps_deleting() -> None:
    """BW-25: a writer reopened with ``recover`` over the ledger and cursor knows every live
    index, exactly as the writer before the restart did, and deletes old records at index level."""
    ledger = MemoryLedger("restart")
    cursor = ledger.open_cursor("tc")
    writer = BatchedLogWriter(ledger, cfg(max_records=3, delay=60_000), cursor=cursor)
    try:
        futures = [writer.add(bl.sample_record(4, i)) for i in range(7)]  # 2 batches + 1 buffered
        results = outcomes(futures[:6])
        writer.delete((results[0],)).result(10)
        before = writer.state.entries
    finally:
        writer.close()
    assert isinstance(outcomes(futures[6:])[0], WriteFailed)  # buffered at close (BW-18)
    reopened = ledger.reopen()
    cursor2 = next(c for c in reopened.cursors() if c.name == "tc")
    again = BatchedLogWriter(reopened, cfg(max_records=3, delay=60_000), cursor=cursor2, recover=True)
    try:
        assert again.state.entries == before
        again.delete((results[1], results[2])).result(10)
        entry = Position(results[0].ledger_id, results[0].entry_id)
        assert cursor2.is_deleted(entry) and entry not in again.state.entries
        log = read_log(reopened, cursor2)
        assert [r.position for r in bl.replay(TC, log)] == results[3:6]
    finally:
        again.close()


# --- metrics (BW-19) ----------------------------------------------------------------------------------


def _metrics_run(config: bl.WriterConfig, sizes: list[int]) -> BufferedWriterMetrics:
    registry = CollectorRegistry()
    metrics = BufferedWriterMetrics(TC, cluster="c1", broker="b1", registry=registry)
    writer = BatchedLogWriter(MemoryLedger("m"), config, metrics=metrics)
    try:
        outcomes([writer.add(bl.sample_record(s, i % 128)) for i, s in enumerate(sizes)])
    finally:
        writer.close()
    return metrics


def test_metrics_triggered_by_max_records() -> None:
    m = _metrics_run(cfg(max_records=2, delay=60_000), [4] * 100)
    assert m.sample("flush_trigger_max_records_total") == 50
    assert m.sample("batch_records_count") == 50 and m.sample("batch_records_sum") == 100
    assert m.sample("batch_size_bytes_sum") == 400


def test_metrics_triggered_by_max_size() -> None:
    """C.1 6: maxSize 16, 4-byte records, 100 writes: counters (0, 25, 0, 0), bytes sum 400."""
    m = _metrics_run(cfg(max_size=16, delay=60_000), [4] * 100)
    counts = [m.sample(f"flush_trigger_{t.value}_total") for t in bl.FlushTrigger]
    assert counts == [0, 25, 0, 0] or counts == [None, 25, None, None]
    assert m.sample("batch_size_bytes_sum") == 400


def test_metrics_triggered_by_max_delay() -> None:
    """C.1 7: maxDelay 1000 ms, one write: (0, 0, 1, 0), histograms count 1, records 1, bytes 4."""
    m = _metrics_run(cfg(delay=1000), [4])
    assert m.sample("flush_trigger_max_delay_total") == 1
    assert (m.sample("batch_records_count"), m.sample("batch_records_sum"), m.sample("batch_size_bytes_sum")) == (
        1,
        1,
        4,
    )


def test_metrics_large_data_alternating() -> None:
    """A.7 M5: 4 B / 1024 B alternating, maxSize 1024: large_data 50, count 50, records 50, bytes 200."""
    m = _metrics_run(cfg(max_size=1024, delay=60_000), [4 if i % 2 == 0 else 1024 for i in range(100)])
    assert m.sample("flush_trigger_large_data_total") == 50
    assert (m.sample("batch_records_count"), m.sample("batch_records_sum"), m.sample("batch_size_bytes_sum")) == (
        50,
        50,
        200,
    )


def test_metrics_disabled_batching_records_nothing() -> None:
    """C.1 4."""
    m = _metrics_run(cfg(enabled=False), [4] * 1000)
    assert m.sample("batch_records_count") == 0 and m.sample("flush_trigger_max_records_total") == 0


def test_metrics_series_exist_at_zero_from_creation() -> None:
    """Pulsar takes every collector's child in its constructor: a fresh object exports all seven
    series, labelled, at 0, before the first flush."""
    m = BufferedWriterMetrics(TC, cluster="c1", broker="b1")
    for trigger in bl.FlushTrigger:
        assert m.sample(f"flush_trigger_{trigger.value}_total") == 0
    for name in ("batch_records", "batch_size_bytes", "batch_oldest_record_delay_seconds"):
        assert (m.sample(f"{name}_count"), m.sample(f"{name}_sum")) == (0, 0)
    families = {f.name: f for f in text_string_to_metric_families(m.exposition())}
    ours = [f for name, f in families.items() if name.startswith("pulsar_txn_tc_bufferedwriter_")]
    assert sorted(f.type for f in ours if f.type != "gauge") == ["counter"] * 4 + ["histogram"] * 3  # gauges: _created
    assert all(s.labels.get("cluster") == "c1" for f in families.values() for s in f.samples)
    m.close()


def test_metrics_exposition_names_types_labels_buckets() -> None:
    m = _metrics_run(cfg(max_records=10, delay=60_000), [4] * 100)
    families = {f.name: f for f in text_string_to_metric_families(m.exposition())}
    p = "pulsar_txn_tc_bufferedwriter_"
    assert families[p + "batch_records"].type == "histogram"
    assert families[p + "batch_size_bytes"].type == "histogram"
    assert families[p + "batch_oldest_record_delay_seconds"].type == "histogram"
    for trigger in ("max_records", "max_size", "max_delay", "large_data"):
        assert families[p + "flush_trigger_" + trigger].type == "counter"
    for name, buckets in (
        ("batch_records", BATCH_RECORDS_BUCKETS),
        ("batch_size_bytes", BATCH_SIZE_BYTES_BUCKETS),
        ("batch_oldest_record_delay_seconds", DELAY_SECONDS_BUCKETS),
    ):
        les = [s.labels["le"] for s in families[p + name].samples if s.name.endswith("_bucket")]
        assert [float(le) for le in les] == [float(b) for b in buckets] + [float("inf")]
    sample = families[p + "batch_records"].samples[0]
    assert sample.labels["cluster"] == "c1" and sample.labels["broker"] == "b1"
    text = m.exposition()
    assert 'pulsar_txn_tc_bufferedwriter_flush_trigger_max_records_total{broker="b1",cluster="c1"} 10.0' in text


def test_metrics_pending_ack_prefix_duplicate_registration_and_close() -> None:
    registry = CollectorRegistry()
    pa = BufferedWriterMetrics(PA, registry=registry)
    assert pa.prefix == "pulsar_txn_pending_ack_store"
    with pytest.raises(ValueError, match="Duplicated"):
        BufferedWriterMetrics(PA, registry=registry)
    tc = BufferedWriterMetrics(TC, registry=registry)  # another prefix registers fine
    pa.close()
    pa.close()
    assert "pulsar_txn_pending_ack_store" not in pa.exposition()
    BufferedWriterMetrics(PA, registry=registry).close()  # the name is free again
    tc.close()


# --- the file ledger -------------------------------------------------------------------------------------


def test_file_ledger_batched_then_replayed(tmp_path: Path) -> None:
    """Durable batches on the file ledger read back, after reopening, with their positions (BW-23, BW-25)."""
    ledger = FileLedger(tmp_path / "txlog")
    writer = BatchedLogWriter(ledger, cfg(max_records=16, delay=5))
    try:
        results, records = write_all(writer, 200, size=30)
    finally:
        writer.close()
    check_contract(ledger, results, records)
    ledger.close()
    reopened = FileLedger(tmp_path / "txlog")
    try:
        first = reopened.ledgers()[0].ledger_id
        entries = reopened.read(Position(first, 0), 10_000)
        replayed = bl.replay(TC, [bl.LoggedEntry(e.position, e.data) for e in entries])
        assert [r.record.SerializeToString(deterministic=True) for r in replayed] == records
        expected = [
            r if not (isinstance(r, BatchedPosition) and r.batch_size == 1) else Position(r.ledger_id, r.entry_id)
            for r in results
        ]
        assert [r.position for r in replayed] == expected
        recovered = bl.recover(Config(), [bl.LoggedEntry(e.position, e.data) for e in entries])
        assert sum(len(v.remaining) for v in recovered.entries.values()) == 200
    finally:
        reopened.close()
