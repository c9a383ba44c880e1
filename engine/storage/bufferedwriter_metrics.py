"""Prometheus metrics of the batched log writer, as today's Pulsar names them (rule BW-19).

Pulsar's ``TxnLogBufferedWriterMetricsStats`` registers, per writer kind, three histograms and
four counters under a prefix: ``pulsar_txn_tc`` for the coordinator's log and
``pulsar_txn_pending_ack_store`` for pending-ack stores, labelled ``cluster`` and ``broker``.

* ``<prefix>_bufferedwriter_batch_records`` — records per flushed batch;
* ``<prefix>_bufferedwriter_batch_size_bytes`` — the summed record sizes of the batch (not the
  entry size: the envelope prefix and framing are not counted, BW-11);
* ``<prefix>_bufferedwriter_batch_oldest_record_delay_seconds`` — the first record's wait, in
  seconds, against buckets 1, 5, 10 (Pulsar's buckets, applied to seconds: see the rules page);
* ``<prefix>_bufferedwriter_flush_trigger_{max_records,max_size,max_delay,large_data}`` — one
  of them counts each flush (exported with ``_total``).

The pure machine emits one :class:`reference.batched_log.FlushObserved` per batch flush; the
engine hands it to :meth:`BufferedWriterMetrics.observe`.  Nothing is recorded when batching is
not effective, because the machine emits nothing then (BW-19).

Every series exists, at 0, from the moment the object is made: Pulsar's constructor takes each
collector's child for its label values right after registering it (``metric.labels(values)``), so
a scrape of a broker that has flushed nothing already shows the seven series with their labels,
and a dashboard's rate() has a starting point.  prometheus-client, like Pulsar's simpleclient,
exports a labelled collector's series only once its child exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from reference.batched_log import FlushObserved, FlushTrigger
from spec.envelope import LogKind

__all__ = [
    "BATCH_RECORDS_BUCKETS",
    "BATCH_SIZE_BYTES_BUCKETS",
    "DELAY_SECONDS_BUCKETS",
    "LABEL_NAMES",
    "PREFIXES",
    "BufferedWriterMetrics",
]

PREFIXES: Final[Mapping[LogKind, str]] = {
    LogKind.TRANSACTION_LOG: "pulsar_txn_tc",
    LogKind.PENDING_ACK: "pulsar_txn_pending_ack_store",
}
LABEL_NAMES: Final = ("cluster", "broker")
BATCH_RECORDS_BUCKETS: Final = (10, 50, 100, 200, 500, 1000)
BATCH_SIZE_BYTES_BUCKETS: Final = (128, 512, 1024, 2048, 4096, 16384, 102400, 1232896)
DELAY_SECONDS_BUCKETS: Final = (1, 5, 10)


class BufferedWriterMetrics:
    """The seven collectors of one writer kind in one registry (BW-19).

    Registering the same prefix twice in one registry fails (prometheus-client raises
    ``ValueError: Duplicated timeseries``), as Pulsar's does.  :meth:`close` unregisters all
    seven and may be called more than once.
    """

    def __init__(
        self,
        kind: LogKind,
        *,
        cluster: str = "standalone",
        broker: str = "localhost",
        registry: CollectorRegistry | None = None,
        prefix: str | None = None,
    ) -> None:
        self.prefix = prefix or PREFIXES[kind]
        self.registry = registry if registry is not None else CollectorRegistry()
        self._labels = {"cluster": cluster, "broker": broker}
        p = self.prefix
        made: list[Counter | Histogram] = []
        try:
            self._records = Histogram(
                f"{p}_bufferedwriter_batch_records",
                "Records per batch flushed by the buffered writer.",
                LABEL_NAMES,
                registry=self.registry,
                buckets=BATCH_RECORDS_BUCKETS,
            )
            made.append(self._records)
            self._bytes = Histogram(
                f"{p}_bufferedwriter_batch_size_bytes",
                "Summed record bytes per batch flushed by the buffered writer.",
                LABEL_NAMES,
                registry=self.registry,
                buckets=BATCH_SIZE_BYTES_BUCKETS,
            )
            made.append(self._bytes)
            self._delay = Histogram(
                f"{p}_bufferedwriter_batch_oldest_record_delay_seconds",
                "Time the oldest record of a batch waited in the buffer.",
                LABEL_NAMES,
                registry=self.registry,
                buckets=DELAY_SECONDS_BUCKETS,
            )
            made.append(self._delay)
            self._triggers: dict[FlushTrigger, Counter] = {}
            for trigger in FlushTrigger:
                counter = Counter(
                    f"{p}_bufferedwriter_flush_trigger_{trigger.value}",
                    f"Batch flushes triggered by {trigger.value}.",
                    LABEL_NAMES,
                    registry=self.registry,
                )
                made.append(counter)
                self._triggers[trigger] = counter
        except ValueError:
            for collector in made:
                self.registry.unregister(collector)
            raise
        self._collectors: tuple[Counter | Histogram, ...] = tuple(made)
        # the children, made now as Pulsar makes them: the series exist at 0 before any flush
        labels = self._labels
        self._records_child = self._records.labels(**labels)
        self._bytes_child = self._bytes.labels(**labels)
        self._delay_child = self._delay.labels(**labels)
        self._trigger_children = {trigger: counter.labels(**labels) for trigger, counter in self._triggers.items()}
        self._closed = False

    def observe(self, flush: FlushObserved) -> None:
        """One batch flush: one trigger counter, one observation per histogram (BW-19)."""
        if self._closed:
            return
        self._trigger_children[flush.trigger].inc()
        self._records_child.observe(flush.records)
        self._bytes_child.observe(flush.bytes_size)
        self._delay_child.observe(flush.delay_ms / 1000.0)

    def sample(self, name: str) -> float | None:
        """A sample's value by its exported name (``..._total``, ``..._sum``, ``..._count``, ...)."""
        return self.registry.get_sample_value(f"{self.prefix}_bufferedwriter_{name}", self._labels)

    def exposition(self) -> str:
        """The registry in Prometheus text exposition format."""
        return generate_latest(self.registry).decode("utf-8")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for collector in self._collectors:
            self.registry.unregister(collector)
