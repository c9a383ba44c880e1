"""What one seeded run is: :class:`RunSpec` (the workload, seed, ledger, variants, fault rates and
broker.conf overrides of one history) and the brokers' configuration it implies.

A spec is plain data: :func:`engine.simulation.workloads.run` carries it out, and its
:meth:`RunSpec.to_json` is the run's part of the history file's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.delayed.service import BUCKET_FACTORY
from engine.simulated.faults import FAULT_RATES
from spec.config import Config

__all__ = [
    "DEFAULT_DEADLINE_MS",
    "REREAD_INDEX_LAG",
    "TRACKERS",
    "WORKLOADS",
    "RunSpec",
    "config_overrides",
]

WORKLOADS = ("ctp", "multi", "delayed")
# Far beyond any clean run (the longest of the main job's are under 200 s of simulated time): the
# deadline only cuts runs that would otherwise never end.
DEFAULT_DEADLINE_MS = 3_600_000
TRACKERS = ("memory", "bucket")
# The bucket tracker with buckets small enough to seal and snapshot within one run (Pulsar's
# defaults, 50 000 indexes per bucket, would keep every bucket in memory).  A bucket seals when the
# ledger rolls over, hence short ledgers.
_BUCKET_CONFIG: dict[str, Any] = {
    "delayedDeliveryTrackerFactoryClassName": BUCKET_FACTORY,
    "delayedDeliveryMinIndexCountPerBucket": 4,
    "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": 3,
    "delayedDeliveryMaxNumBuckets": 3,  # few, so that buckets merge (DD-20, DD-21)
    "managedLedgerMaxEntriesPerLedger": 16,
}
# The ``reread`` variant's pending-ack log: an index entry every few records, so the log is trimmed
# within a run (Pulsar's default, 500 records, never trims one of the main job's logs, and then every
# recovery replays the whole log and hides a cursor that missed a committed transaction's acks).
REREAD_INDEX_LAG = 2
_REREAD_CONFIG: dict[str, Any] = {"transactionPendingAckLogIndexMinLag": REREAD_INDEX_LAG}
# The ``limits`` variant: every size and count limit the machines enforce, small enough to be met
# within one run.  The buffer's snapshot goes segmented in the smallest segments and is taken after
# every other move of maxReadPosition (TB-21 .. TB-23); the PIP-160 writers flush at a few records or
# bytes, and a record at or above that size is written on its own (BW-12 .. BW-16).  The two logs
# take different thresholds on purpose: the coordinator's records run 8 to 63 bytes, so at four records
# and 48 bytes its writer flushes by size (three short records), and its longest records (a transaction
# with its partitions and subscriptions) are written alone, into an empty or a waiting buffer; the
# pending ack's records run 8 to 24 bytes, so its writer flushes by count at two.  Both wait 10 ms
# for a batch (Pulsar's default is 1 ms, after which nearly every batch of a main-job run leaves by
# its timer with one record, and no limit is ever met);
# the coordinator refuses a new transaction past a handful open at once (TC-2).
_LIMITS_CONFIG: dict[str, Any] = {
    "transactionBufferSegmentedSnapshotEnabled": True,
    "transactionBufferSnapshotSegmentSize": 64,
    "transactionBufferSnapshotMaxTransactionCount": 2,
    "transactionLogBatchedWriteMaxRecords": 4,
    "transactionLogBatchedWriteMaxSize": 48,
    "transactionLogBatchedWriteMaxDelayInMillis": 10,
    "transactionPendingAckBatchedWriteMaxRecords": 2,
    "transactionPendingAckBatchedWriteMaxSize": 64,
    "transactionPendingAckBatchedWriteMaxDelayInMillis": 10,
    "maxActiveTransactionsPerCoordinator": 6,
}


def _default_config() -> Config:
    """Small ledgers (roll-over happens) and strict delayed delivery, so a message delivered before its
    deliver-at time is an anomaly rather than DD-1's permitted tick of slack."""
    return Config().with_overrides(
        {
            "managedLedgerMaxEntriesPerLedger": 64,
            "isDelayedDeliveryDeliverAtTimeStrict": True,
            "delayedDeliveryTickTimeMillis": 100,
        }
    )


@dataclass
class RunSpec:
    workload: str = "ctp"
    seed: int = 0
    ledger: str = "memory"
    data_dir: str | None = None
    ops: int = 200  # transactions attempted, over all clients
    duration_ms: int | None = None  # or: stop starting transactions at this simulated time
    clients: int = 4
    faults: bool = False
    batching: bool = False
    partitions: int = 2
    config: Config = field(default_factory=lambda: _default_config())
    deadline_ms: int = DEFAULT_DEADLINE_MS  # simulated time after which the run stops where it is
    # Overrides of FAULT_RATES for this run (``--faults on`` only), e.g. a probe that needs more short
    # transaction timeouts and longer network delays than the default profile.
    fault_rates: dict[str, float | int] = field(default_factory=dict)
    batch_messages: bool = False  # batching producers (client batches, not PIP-160's batched log)
    key_shared: bool = False  # partition keys on every send, Key_Shared readers
    delayed_tracker: str = "memory"  # the delayed workload's tracker: "memory" or "bucket"
    unsubscribe: bool = False  # readers unsubscribe when done instead of closing (the subscription goes)
    cumulative: bool = False  # ctp processors acknowledge their input cumulatively in the txn (PA-9)
    redeliver: bool = False  # ctp processors ask for redelivery and receive again while their txn is open
    # Clients ask what no other operation asks: readers the partition's last message id before they
    # stop (TB-18), ctp processors the admin check of the position they acked in the txn (PA-21).
    queries: bool = False
    # The delayed workload (in-memory tracker) with the broker's shared delayed index (DD-30) and a
    # second subscription reading the topic, so that two subscriptions share the index.
    shared_delayed: bool = False
    # Every verify reader, once drained, looks back with a Reader (a non-durable subscription,
    # PA-24) from the last message it received, then seeks that reader by publish time (PA-23).
    readers: bool = False
    # ctp: once the heal has ended every transaction, the processors' input partitions are unloaded
    # (recovered from their cursors and pending-ack logs, PA-18, PA-19) and each processor reads its
    # subscription again to its end; the pending-ack log is indexed every few records
    # (REREAD_INDEX_LAG), so it is trimmed (PA-16) and a recovery depends on what the cursor deleted.
    reread: bool = False
    # The clients state liveness bounds: every consumer is named in each of its operations (so the
    # history accounts for every consumer of a subscription), the delayed workload's sends outside
    # a transaction state ``deliver_within_ms``, and readers give some messages back by negative
    # ack stating ``redeliver_within_ms`` (the transactional checks' late-delivery and lost-redelivery).
    bounds: bool = False
    # Small size and count limits in broker.conf (``_LIMITS_CONFIG``): segmented buffer snapshots,
    # PIP-160 batches that flush by size, a cap on the coordinator's open transactions.
    limits: bool = False
    # Readers acknowledge in every way an application may (individually, cumulatively, twice, in a
    # transaction that commits or aborts, against another transaction holding the message).
    acks: bool = False
    # ctp: a processor's client does not wait for one operation before the next: it sends from a
    # second session, acknowledges meanwhile and commits while the send is in flight.
    pipelined: bool = False
    # The delayed workload as asynchronous as Pulsar's (``async_creates``): the dispatcher asks the
    # tracker whether a message is due (hasMessageAvailable, DD-13) before it asks for the scheduled
    # messages, and a bucket tracker creates its snapshots asynchronously, going on while the
    # snapshot ledger is written (DD-31).  The bucket tracker with faults on (``bucket_storage_faults``):
    # the snapshot storage fails now and then, a creation, a segment load or a delete (within its
    # retries or past them), or the reads of a recovery (DD-14, DD-16, DD-17, DD-19, DD-26, DD-27).
    delayed_async: bool = False
    bucket_faults: bool = False
    # File ledgers only: the real disk or the simulated one (whose broker crashes are power cuts),
    # and the journal's group commit (None: every change committed as it is made).
    disk: str = "real"
    group_commit_ms: int | None = None
    # On the simulated disk: write the store's final files here at the end (for txnmodel inspect).
    export_dir: str | None = None
    # On the simulated disk: the bytes its files may hold (ENOSPC past it: a full disk, which is
    # outside every fault mix and stops the run, see RunResult.incomplete).  None: no bound.
    disk_capacity: int | None = None

    def broker_config(self) -> Config:
        """The brokers' configuration: ``config``, with the bucket tracker for a delayed run that asks
        for it, the short pending-ack log index lag of a ctp run that rereads, and the small limits
        of a ``limits`` run."""
        if self.delayed_tracker not in TRACKERS:
            raise ValueError(f"unknown delayed tracker {self.delayed_tracker!r}; trackers are {', '.join(TRACKERS)}")
        config = self.config
        if self.workload == "delayed" and self.delayed_tracker == "bucket":
            config = config.with_overrides(_BUCKET_CONFIG)
        elif self.rereads:
            config = config.with_overrides(_REREAD_CONFIG)
        if self.limits:
            config = config.with_overrides(_LIMITS_CONFIG)
        return config

    @property
    def async_creates(self) -> bool:
        """The ``delayed_async`` variant applies: a delayed run (not on the partition's shared index)."""
        return self.delayed_async and self.workload == "delayed" and not self.shared_delayed

    @property
    def bucket_storage_faults(self) -> bool:
        """The ``bucket_faults`` variant applies: a delayed run on the bucket tracker, faults on."""
        return self.bucket_faults and self.faults and self.workload == "delayed" and self.delayed_tracker == "bucket"

    @property
    def rereads(self) -> bool:
        """The ``reread`` variant applies: a ctp run (the other workloads' subscriptions hold no
        transactional acks)."""
        return self.reread and self.workload == "ctp"

    def rates(self) -> dict[str, float | int]:
        """The fault rates this run injects: FAULT_RATES with the overrides, all 0 with faults off."""
        unknown = sorted(set(self.fault_rates) - set(FAULT_RATES))
        if unknown:
            raise ValueError(f"unknown fault rate(s) {unknown}; rates are {sorted(FAULT_RATES)}")
        if not self.faults:
            return dict.fromkeys(FAULT_RATES, 0)
        return {**FAULT_RATES, **self.fault_rates}

    def to_json(self) -> dict[str, Any]:
        """The run's configuration as JSON (``data_dir`` left out: it names a scratch folder)."""
        rates = self.rates()
        return {
            "workload": self.workload,
            "seed": self.seed,
            "ledger": self.ledger,
            "ops": self.ops,
            "duration_ms": self.duration_ms,
            "clients": self.clients,
            "faults": self.faults,
            "batching": self.batching,
            "partitions": self.partitions,
            "deadline_ms": self.deadline_ms,
            "batch_messages": self.batch_messages,
            "key_shared": self.key_shared,
            "delayed_tracker": self.delayed_tracker,
            "unsubscribe": self.unsubscribe,
            "cumulative": self.cumulative,
            "redeliver": self.redeliver,
            "queries": self.queries,
            "shared_delayed": self.shared_delayed,
            "readers": self.readers,
            "reread": self.rereads,
            "bounds": self.bounds,
            "limits": self.limits,
            "acks": self.acks,
            "pipelined": self.pipelined,
            "delayed_async": self.async_creates,
            "bucket_faults": self.bucket_storage_faults,
            "disk": self.disk if self.ledger == "file" else None,
            "group_commit_ms": self.group_commit_ms if self.ledger == "file" else None,
            "disk_capacity": self.disk_capacity,
            "fault_rates": rates,
            "config": config_overrides(self.broker_config()),
        }


def config_overrides(config: Config) -> dict[str, Any]:
    """The broker.conf keys whose value differs from Pulsar's default, as JSON that
    ``Config().with_overrides`` accepts back."""
    defaults = Config.defaults()
    return {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in config.items()
        if value != defaults[key]
    }
