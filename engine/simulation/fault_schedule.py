"""The faults a seeded run injects, and the schedule of those it injected.

The cluster starts with the run's network, ledger and disk faults (:func:`cluster_faults`); while
the workloads run, :meth:`FaultSchedule.fault_process` crashes and restarts the broker, the
coordinator and topics, and transactions now and then get a short timeout; the heal
(:meth:`FaultSchedule.heal`) stops all of it so that pending work settles.  Everything random is
drawn from the simulation's ``random.Random(seed)``, and every fault goes into the schedule
(:class:`~engine.simulation.metadata.FaultEvent`) that the run's metadata carries.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from engine.broker import BrokerFaults
from engine.broker.subscription import SubscriptionService
from engine.ledger_store import LedgerFaults, LedgerStore
from engine.scheduler import Future, NetworkFaults, spawn
from engine.simulated.disk import DiskFaults, SimDisk
from engine.simulated.faults import InjectedFault
from engine.simulation.client import Cluster
from engine.simulation.metadata import FaultEvent
from engine.simulation.runspec import RunSpec
from reference import delayed as dd

__all__ = ["POWER_CUT_WAIT_MS", "FaultSchedule", "cluster_faults"]

Proc = Generator[Future[Any], Any, None]

# The ``bucket_faults`` variant: every 100 to 500 ms of simulated time until the heal (a delayed run's
# faults last a few seconds, the seals and loads happen as it writes), the chance that the snapshot
# storage of a bucket tracker fails (FaultSchedule.bucket_storage_fault).
BUCKET_STORAGE_FAULT = 0.3
# What fails: a creation, a segment load or a delete (each within its retries or for good), or the
# reads of the recovery that a topic unload starts.
# A tracker creates, loads and deletes snapshots a few times in a run, mostly while the workload
# writes: each is failed twice as often as a recovery, which unloads the topic and so drops the
# failures still queued.
BUCKET_STORAGE_KINDS = ("create", "create", "load", "load", "delete", "delete", "recovery")
ASYNC_CREATE_KINDS = ("create", "create", "create")

# How long a broker crash on a store with group commit may wait for the journal to have changes
# waiting for their commit (half of those crashes do: see FaultSchedule.fault_process).
POWER_CUT_WAIT_MS = 2_000


def cluster_faults(
    spec: RunSpec, rates: dict[str, float | int]
) -> tuple[NetworkFaults | None, LedgerFaults | None, DiskFaults | None]:
    """The faults a run's cluster starts with: the network's, the ledgers' and (on the simulated
    disk) the disk's, at ``rates``; none with faults off (a simulated disk still has its capacity)."""
    net = (
        NetworkFaults(
            drop_request=float(rates["drop_request"]),
            drop_response=float(rates["drop_response"]),
            duplicate_request=float(rates["duplicate_request"]),
            max_extra_delay_ms=int(rates["max_extra_delay_ms"]),
        )
        if spec.faults
        else None
    )
    ledger_faults = (
        LedgerFaults(append=float(rates["ledger_append"]), read=float(rates["ledger_read"])) if spec.faults else None
    )
    disk_faults = (
        DiskFaults(
            write_eio=float(rates["disk_eio"]) if spec.faults else 0.0,
            sync_eio=float(rates["disk_eio"]) if spec.faults else 0.0,
            capacity=spec.disk_capacity,
        )
        if spec.ledger == "file" and spec.disk == "sim"
        else None
    )
    return net, ledger_faults, disk_faults


class FaultSchedule:
    """The faults of one run: what it injects while the workloads run, and what it injected."""

    def __init__(self, spec: RunSpec, cluster: Cluster, rates: dict[str, float | int]) -> None:
        self.spec = spec
        self.cluster = cluster
        self.sim = cluster.sim
        self.rng = self.sim.rng
        self.rates = rates
        self.injecting = spec.faults  # until the heal
        self.events: list[FaultEvent] = []
        self.ledger_faults: dict[str, int] = {}  # injected ledger failures, by operation

    @property
    def unloads_at_heal(self) -> bool:
        """The quiesce mix: partitions are unloaded once the heal has ended every transaction."""
        return self.spec.faults and float(self.rates["unload_at_heal"]) > 0

    def ledger_fault(self, fault: InjectedFault) -> None:
        """An injected ledger failure, as it fires: into the schedule, and counted per operation."""
        op = fault.operation.op.value
        self.injected(f"ledger-{op.replace('_', '-')}-failed", fault.operation.ledger)
        self.ledger_faults[f"ledger_{op}_failed"] = self.ledger_faults.get(f"ledger_{op}_failed", 0) + 1

    def disk_failure(self, error: BaseException) -> None:
        """The store's journal failed for good (a disk fault): the broker goes down and comes back."""
        self.injected("disk-failure", "broker")

    def injected(self, kind: str, target: str) -> None:
        """Note a fault (or a heal, a restart, the deadline) in the schedule, at the current time."""
        self.events.append(FaultEvent(self.sim.now, kind, target))

    def txn_timeout(self, process: int) -> int:
        """The timeout of a transaction ``process`` opens: now and then a short one (TC-18, TC-19, TC-36)."""
        if self.injecting and self.rng.random() < float(self.rates["short_txn_timeout"]):
            timeout = self.rng.randint(50, 400)  # some transactions time out (TC-18, TC-19, TC-36)
            self.injected(f"short-txn-timeout-{timeout}ms", f"process-{process}")
            return timeout
        return 10_000

    def fault_process(self) -> Proc:
        """Every few seconds of simulated time, maybe a broker crash (and restart), a coordinator
        crash (and reload), or a topic unload, by the run's rates; until the heal."""
        broker = self.cluster.broker
        if self.spec.bucket_storage_faults:
            spawn(self.sim, self.bucket_fault_process())
        while self.injecting:
            yield self.sim.sleep(self.rng.randint(1000, 4000))
            if not self.injecting:
                break
            roll = self.rng.random()
            crash, reload = float(self.rates["broker_crash"]), float(self.rates["coordinator_crash"])
            unload = float(self.rates["topic_unload"])
            if roll < crash:
                store = broker.store
                if store.deferred and self.rng.random() < 0.5:
                    # A busy moment: the power goes as the journal has changes waiting for their
                    # group commit (a broker is mostly idle in simulated time, so a cut at a
                    # random instant rarely finds any).
                    yield self.store_busy(store, POWER_CUT_WAIT_MS)
                broker.crash()
                self.injected("broker-crash", "broker")
                yield self.sim.sleep(self.rng.randint(20, 300))
                broker.restart()
                self.injected("broker-restart", "broker")
            elif roll < crash + reload:
                broker.coordinator.crash()
                self.injected("coordinator-crash", "coordinator")
                yield self.sim.sleep(self.rng.randint(20, 300))
                if broker.up and not broker.coordinator.ready:
                    loaded = broker.coordinator.load()
                    self.injected("coordinator-reload" if loaded else "coordinator-reload-failed", "coordinator")
                    if not loaded:
                        broker.restart_later(broker.coordinator)
            elif roll < crash + reload + unload:
                partition = self.rng.choice(sorted(broker.partitions))
                broker.partitions[partition].crash()
                self.injected("topic-unload", partition)
                broker.restart_later(broker.partitions[partition])

    def bucket_fault_process(self) -> Proc:
        """``bucket_faults``: now and then a snapshot-storage failure, until the heal."""
        while self.injecting:
            yield self.sim.sleep(self.rng.randint(100, 500))
            if self.injecting and self.rng.random() < BUCKET_STORAGE_FAULT:
                self.bucket_storage_fault()

    def bucket_storage_fault(self) -> None:
        """``bucket_faults``: the snapshot storage (BookKeeper in Pulsar) of one live bucket tracker
        fails.  A creation, a segment load or a delete fails once (the retries hide it) or on every
        attempt (DD-17): a synchronous creation's failure sends the bucket to memory mode (DD-14), an
        asynchronous one's is the failed ``CompleteBucketSnapshot`` (DD-31), a failed load leaves the
        bucket on its segment (DD-16), a failed delete leaves an orphan that recovery meets again
        (DD-19, DD-26).  Or the topic is unloaded and its recovery's snapshot reads fail (DD-27).
        The failures the tracker meets as it steps are its own ``InjectStorageFailure`` (so the
        history holds them); the ones the service meets writing or recovering are the ledgers'."""
        broker = self.cluster.broker
        if not broker.up:
            return
        subs = [
            (name, sub)
            for name in sorted(broker.partitions)
            for sub in _subscriptions(broker.partitions[name].subscriptions)
            if sub.delayed is not None and sub.delayed.alive and isinstance(sub.delayed.state, dd.BucketTracker)
        ]
        if not subs:
            return
        partition, sub = self.rng.choice(subs)
        service = sub.delayed
        assert service is not None
        # An asynchronous tracker's creations are its only writes the ledgers fail (the model
        # decides the rest); they are few, so they fail more often, and every attempt.
        kind = self.rng.choice(
            BUCKET_STORAGE_KINDS + ASYNC_CREATE_KINDS if service.async_create else BUCKET_STORAGE_KINDS
        )
        count = (
            dd.ATTEMPTS if kind == "create" and service.async_create else self.rng.choice((1, dd.ATTEMPTS, dd.ATTEMPTS))
        )
        if kind == "recovery":
            if not any(key.startswith(dd.BUCKET_PROPERTY_PREFIX) for key in service.cursor.properties):
                return  # nothing on storage for a recovery to read
            sub.delays.fail_next_recovery(self.rng.choice(("metadata", "load", "load")), dd.ATTEMPTS)
            broker.partitions[partition].crash()
            self.injected("bucket-recovery-reads-fail", service.obj)
            broker.restart_later(broker.partitions[partition])
            return
        try:
            # done to the subscription: a tracker that raises on it fails as its component does, and
            # the faults go on
            if kind == "create" and service.async_create:
                sub.within(lambda: service.fail_storage("create", count))
            else:
                sub.within(lambda: service.inject_failure(kind, count))
        except Exception as exc:
            if not broker.contain(exc):
                raise
            return
        self.injected(f"bucket-{kind}-fails-{count}", service.obj)

    def unload_at_heal(self) -> None:
        """``unload_at_heal``: unload partitions once every transaction has ended (they reload on their own)."""
        rate = float(self.rates["unload_at_heal"])
        broker = self.cluster.broker
        if not self.spec.faults or rate <= 0 or not broker.up:
            return
        for name in sorted(broker.partitions):
            if self.rng.random() < rate:
                broker.partitions[name].crash()
                self.injected("topic-unload-at-heal", name)
                broker.restart_later(broker.partitions[name])

    def unload_inputs(self) -> None:
        """``reread``: unload every input partition (``in``) once the heal has ended every transaction;
        each reloads on its own, its subscription recovered from the cursor and the pending-ack log."""
        broker = self.cluster.broker
        if not broker.up:
            return
        for name in sorted(broker.partitions):
            if "/in-partition-" in name:
                broker.partitions[name].crash()
                self.injected("topic-unload-for-reread", name)
                broker.restart_later(broker.partitions[name])

    def store_busy(self, store: LedgerStore, wait_ms: int) -> Future[None]:
        """A future done as soon as ``store`` queues a change for its journal's next commit (or
        after ``wait_ms``, if it stays idle)."""
        busy: Future[None] = Future()
        store.on_queue = lambda: busy.set_result(None)

        def done(_: Future[None]) -> None:
            store.on_queue = None

        busy.add_done_callback(done)
        self.sim.schedule(wait_ms, lambda: busy.set_result(None))
        return busy

    def heal(self) -> None:
        """Stop injecting faults and give pending work time to settle (timeouts, retries)."""
        self.injecting = False
        self.cluster.network.faults = NetworkFaults()
        self.cluster.broker.store.set_faults(False)
        disk = self.cluster.broker.store.disk
        if isinstance(disk, SimDisk):
            disk.clear_faults()
        self.cluster.broker.faults = BrokerFaults()
        if self.spec.faults:
            self.injected("heal", "cluster")
        if not self.cluster.broker.up:
            self.cluster.broker.restart()
            self.injected("broker-restart", "broker")


def _subscriptions(subs: Mapping[str, SubscriptionService]) -> list[SubscriptionService]:
    return [subs[name] for name in sorted(subs)]
