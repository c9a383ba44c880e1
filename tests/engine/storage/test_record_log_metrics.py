"""The engine's record logs export PIP-160's buffered-writer metrics (C.1 #17, BW-19)."""

from __future__ import annotations

from engine.scheduler import Simulation
from engine.storage.bufferedwriter_metrics import BufferedWriterMetrics
from engine.storage.memory_ledger import MemoryLedger
from engine.storage.record_log import RecordLog
from reference.coordinator import TxnLogRecord, TxnMetadataOp
from spec.config import Config
from spec.envelope import LogKind
from spec.types import TxnID


def _record(i: int) -> bytes:
    record = TxnLogRecord(
        TxnMetadataOp.NEW, TxnID(0, i), timeout_ms=1000, start_time=0, last_modification_time=0, max_local_txn_id=i
    )
    return record.to_pb().SerializeToString()


def _log(
    sim: Simulation, name: str, config: Config, metrics: BufferedWriterMetrics, batching: bool = True
) -> RecordLog:
    return RecordLog(
        sim, MemoryLedger(name, config), LogKind.TRANSACTION_LOG, config, batching=batching, metrics=metrics
    )


def test_flushes_of_every_log_of_a_kind_are_counted_once_each() -> None:
    config = Config().with_overrides(
        {"transactionLogBatchedWriteEnabled": "true", "transactionLogBatchedWriteMaxRecords": "4"}
    )
    sim = Simulation(0)
    metrics = BufferedWriterMetrics(LogKind.TRANSACTION_LOG)
    # Two coordinators' logs on one broker share one set of collectors, as in Pulsar.
    logs = [_log(sim, f"__transaction_log_{i}", config, metrics) for i in range(2)]
    futures = [log.add(_record(i)) for log in logs for i in range(10)]
    sim.run_until(lambda: all(f.done for f in futures))
    assert all(f.error is None for f in futures)
    # Per log: 10 records at max 4 = two full batches (max_records) and one flushed by the delay timer.
    assert metrics.sample("flush_trigger_max_records_total") == 4
    assert metrics.sample("flush_trigger_max_delay_total") == 2
    assert metrics.sample("batch_records_count") == 6
    assert metrics.sample("batch_records_sum") == 20
    assert sum(log.entries_written for log in logs) == 6
    assert "pulsar_txn_tc_bufferedwriter_batch_records_bucket" in metrics.exposition()


def test_with_batching_off_nothing_is_observed() -> None:
    """Pulsar's disabled writer writes each record as it comes and records no batch metrics."""
    config = Config()
    sim = Simulation(0)
    metrics = BufferedWriterMetrics(LogKind.TRANSACTION_LOG)
    log = _log(sim, "__transaction_log_0", config, metrics, batching=False)
    futures = [log.add(_record(i)) for i in range(5)]
    sim.run_until(lambda: all(f.done for f in futures))
    assert log.entries_written == 5
    assert not metrics.sample("batch_records_count")


def test_a_batching_broker_exports_both_kinds_of_writer_metrics() -> None:
    """C.1 #17: with PIP-160 on, the coordinator's log and the pending-ack logs count their flushes
    in the broker's registry under Pulsar's two prefixes."""
    from engine.broker import partition_name
    from engine.simulation.client import Cluster, ConsumerType

    cluster = Cluster.start(seed=1, topics={"in": 1, "out": 1}, batching=True)
    client = cluster.client()
    client.create_producer("in").send("m")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    msg = consumer.receive(100)
    assert msg is not None
    txn = client.new_transaction(60_000)
    client.create_producer("out").send("r", txn=txn)
    consumer.acknowledge(msg, txn=txn)
    txn.commit()
    metrics = cluster.broker.writer_metrics
    tc_flushes = metrics[LogKind.TRANSACTION_LOG].sample("batch_records_count")
    pa_flushes = metrics[LogKind.PENDING_ACK].sample("batch_records_count")
    assert tc_flushes is not None and tc_flushes >= 1
    assert pa_flushes is not None and pa_flushes >= 1
    text = metrics[LogKind.TRANSACTION_LOG].exposition()
    assert "pulsar_txn_tc_bufferedwriter_batch_records_count" in text
    assert "pulsar_txn_pending_ack_store_bufferedwriter_batch_records_count" in text
    assert cluster.broker.partition(partition_name("in", 0)).ready


def test_a_broker_without_batching_has_no_writer_metrics() -> None:
    from engine.simulation.client import Cluster

    assert Cluster.start(seed=1, topics={"in": 1}).broker.writer_metrics == {}
