"""Named workloads under a seeded fault schedule: the runs behind ``txnmodel simulate``.

A run is one :class:`~engine.simulation.client.Cluster` (one seed), many concurrent clients as
generator processes, an optional fault process, a heal phase and a final drain, after which the
history is complete.  Workloads:

* ``ctp`` -- consume-transform-produce across topics (PIP-31's motivation): processors receive
  from ``in``, produce a transformed message to ``out`` and acknowledge the input, all in one
  transaction, then commit (or, sometimes, abort); a verifier reads ``out``.
* ``multi`` -- atomic multi-partition produce: each transaction writes one message to every
  partition of ``multi``; a reader per partition.
* ``delayed`` -- delayed delivery mixed with transactions: sends with ``deliver_at`` in and out of
  transactions to a Shared subscription.

Variants (:class:`RunSpec` fields, each also ``mixed`` on the command line: on for some seeds):
``batch_messages`` -- producers batch messages (PIP-54 batch-index acks), shared by the clients so
that their sends meet in one batch; ``key_shared`` -- sends carry partition keys and the readers
are Key_Shared consumers; ``delayed_tracker`` -- the delayed workload on Pulsar's bucket tracker
(persisted in ledgers) instead of the in-memory default.

Faults (``--faults on``): broker crash and restart, coordinator crash and reload, ledger append
and read failures, lost / delayed / duplicated requests and responses, and short transaction
timeouts.  Everything random comes from the run's ``random.Random(seed)``: same seed, same
history, byte for byte, on either ledger.

Every run carries its metadata (:meth:`RunResult.metadata`): the :class:`RunSpec` (workload, seed,
ledger, batching, fault rates, broker.conf overrides) and the fault schedule actually injected,
which ``txnmodel simulate`` writes into each history file (``history_io.files.read_metadata``).
This module runs and returns histories; the command line (``txnmodel/commands/simulate.py``)
writes them and calls the checkers.  The parts of a run live beside it: :mod:`.runspec` (what a
run is), :mod:`.options` (batches of runs, the fault mixes, the main job), :mod:`.programs` (the
workloads' client programs), :mod:`.fault_schedule` (the faults and their schedule) and
:mod:`.metadata` (what a run leaves); this module re-exports their public names.
A run stops at its deadline (``RunSpec.deadline_ms`` of simulated time): operations still open are
recorded as ``invoke``, so a run that would never end still yields a finite history to check.
A broker component that raises is contained as its crash (``Broker.contain``): the run goes on,
the history records the step that raised, and :attr:`RunResult.failures` lists it (``txnmodel
simulate`` then exits 1 naming it); an exception no component raised still ends the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from engine.broker import BrokerFaults
from engine.ledger_store import storage_lost
from engine.scheduler import SimTimeout, spawn
from engine.simulated.disk import SimDisk
from engine.simulated.faults import FAULT_RATES
from engine.simulation.client import Cluster
from engine.simulation.fault_schedule import FaultSchedule, cluster_faults
from engine.simulation.metadata import FaultEvent, RunResult, file_metadata
from engine.simulation.options import (
    FAULT_MIXES,
    MAIN_JOB,
    MIX_CYCLE,
    SimulateOptions,
    fault_mix,
    file_stem,
    main_job_spec,
    variant,
)
from engine.simulation.programs import KEY_SHARED_READERS, KEYS, LONG_RECEIVE_MS, TAIL_DELAYS_MS, Proc, Programs
from engine.simulation.runspec import DEFAULT_DEADLINE_MS, TRACKERS, WORKLOADS, RunSpec
from engine.simulation.watchdog import EVENT_LIMIT_S, watchdog

__all__ = [
    "DEFAULT_DEADLINE_MS",
    "FAULT_MIXES",
    "FAULT_RATES",
    "KEYS",
    "KEY_SHARED_READERS",
    "LONG_RECEIVE_MS",
    "MAIN_JOB",
    "MIX_CYCLE",
    "TAIL_DELAYS_MS",
    "TRACKERS",
    "WORKLOADS",
    "FaultEvent",
    "RunResult",
    "RunSpec",
    "SimulateOptions",
    "fault_mix",
    "file_metadata",
    "file_stem",
    "main_job_spec",
    "run",
    "variant",
]

# After the workers stop, the heal gives every open transaction time to time out and every end
# time to be re-driven; an unload (the quiesce mix, the reread variant) gives the partitions time
# to reload.
HEAL_MS = 12_000
RELOAD_MS = 2_000


class _Run:
    """One seeded run: the cluster, its client programs and its fault schedule, driven through the
    run's phases (workers, heal, unloads, readers' drain) to its end or its deadline."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        rates = spec.rates()
        network_faults, ledger_faults, disk_faults = cluster_faults(spec, rates)
        topics = {
            "ctp": {"in": spec.clients, "out": spec.partitions},
            "multi": {"multi": spec.partitions},
            "delayed": {"delayed": 1},
        }[spec.workload]
        self.cluster = Cluster.start(
            seed=spec.seed,
            topics=topics,
            config=spec.broker_config(),
            ledger=spec.ledger,
            data_dir=spec.data_dir,
            batching=spec.batching,
            network_faults=network_faults,
            ledger_faults=ledger_faults,
            history=f"{spec.workload}-{spec.ledger}-seed{spec.seed}",
            disk=spec.disk,
            group_commit_ms=spec.group_commit_ms,
            shared_delayed_index=spec.shared_delayed,
            disk_faults=disk_faults,
        )
        self.sim = self.cluster.sim
        self.cluster.broker.delayed_async_create = spec.async_creates  # the delayed_async variant (DD-13, DD-31)
        self.faults = FaultSchedule(spec, self.cluster, rates)
        self.cluster.on_disk_failure = self.faults.disk_failure
        # A component that raises crashes and reloads; the run goes on and lists it (RunResult.failures).
        self.sim.on_error = self.cluster.broker.contain
        if rates["participant_timeout"]:
            # END_TXN_ON_* requests time out in the TB client (retryable: the coordinator re-drives the end).
            self.cluster.broker.faults = BrokerFaults(participant_timeout=float(rates["participant_timeout"]))
        self.stopped: str | None = None  # set when the store is lost for good: the run ends there
        self.cluster.broker.store.on_fatal = self.storage_lost
        if self.cluster.broker.store.fatal is not None:  # lost while the broker started
            self.storage_lost(self.cluster.broker.store.fatal)
        self.cut = False
        self.programs = Programs(spec, self.cluster, self.faults.txn_timeout)
        self.running = 0  # processes started with start() still running
        self.workers = 0
        self.finished = 0  # workers that have ended
        self.errors: list[BaseException] = []
        self.cluster.broker.store.on_fault = self.faults.ledger_fault

    def start(self, proc: Proc) -> None:
        self.running += 1

        def exit_(error: BaseException | None) -> None:
            self.running -= 1
            if error is not None:
                self.errors.append(error)

        spawn(self.sim, proc, exit_)

    def _worker_exit(self, error: BaseException | None) -> None:
        self.finished += 1
        if error is not None:
            self.errors.append(error)

    def storage_lost(self, error: BaseException) -> None:
        """The store is lost for good (:func:`~engine.ledger_store.storage_lost`): the run
        stops at once, keeping what it recorded, instead of taking it for a ledger error."""
        if self.stopped is None:
            self.stopped = storage_lost(error) or str(error)
            self.faults.injected("storage-lost", "broker")

    def past_deadline(self) -> bool:
        """The run's deadline: the next event is due after it (the clock stops there), or the
        store is lost (the run stops where it is)."""
        if self.stopped is not None:
            return True
        due = self.sim.next_due()
        if due is None or due <= self.spec.deadline_ms:
            return False
        if not self.cut:
            self.cut = True
            self.sim.now = max(self.sim.now, self.spec.deadline_ms)
            self.faults.injected("deadline", "run")
        return True

    # -- the run ------------------------------------------------------------------------------------

    def execute(self, progress: Callable[[str], None] | None) -> RunResult:
        spec = self.spec
        writers_done = [False]
        programs = self.programs.workload(lambda: writers_done[0], lambda: self.finished >= self.workers)
        for proc in programs.feeders:
            self.start(proc)
        self.workers = len(programs.workers)
        for proc in programs.workers:
            spawn(self.sim, proc, self._worker_exit)
        # ``unload_at_heal`` (the quiesce mix): the readers start only once every transaction has
        # ended and the partitions were unloaded and reloaded, so everything committed is still
        # unread when the partitions recover with nothing after the recovery (TB-24).
        deferred = self.faults.unloads_at_heal
        if not deferred:
            for proc in programs.readers:
                self.start(proc)
        if spec.faults:
            spawn(self.sim, self.faults.fault_process())
        self._run_workers(progress)
        if not self.cut and self.stopped is None:
            self.faults.heal()
            self._settle(HEAL_MS)  # every open transaction times out, every end is re-driven
            if deferred and not self.cut:
                # Everything has ended: unload the partitions, let them reload, then start reading.
                self.faults.unload_at_heal()
                self._settle(RELOAD_MS)
        if spec.rereads and self.stopped is None and not self.cut:
            self.faults.unload_inputs()
            self._settle(RELOAD_MS)
        for consumer in self.programs.inputs:
            self.start(self.programs.reread_input(consumer))
        if deferred and self.stopped is None:
            for proc in programs.readers:
                self.start(proc)
        writers_done[0] = True
        while self.running > 0 and not self.past_deadline():
            if not self.sim.run_one():
                break
        if spec.queries and self.stopped is None and not self.cut:
            # The end of the run's metrics scrape: counters that no client operation shows, recorded
            # as query rows and judged against the machines' recorded steps.
            self.cluster.broker.scrape_metrics()
        if self.errors and self.stopped is None:  # after a lost store, errors are its consequences
            raise self.errors[0]
        return self.result()

    def _run_workers(self, progress: Callable[[str], None] | None) -> None:
        """Run until every worker has ended (or the deadline), reporting progress every 2 s of wall time."""
        spec = self.spec
        last_report = time.monotonic()
        while self.finished < self.workers and not self.past_deadline():
            if not self.sim.run_one() and self.stopped is None:
                raise SimTimeout("the run stalled with workers still running")
            if progress is not None and time.monotonic() - last_report > 2:
                last_report = time.monotonic()
                progress(
                    f"  {spec.workload} seed {spec.seed}: t={self.sim.now} ms, {len(self.cluster.recorder)} ops, "
                    f"{spec.ops - max(self.programs.budget.left, 0)}/{spec.ops} txns"
                )

    def _settle(self, ms: int) -> None:
        """Run what falls due in the next ``ms`` (up to the deadline); the clock then stands there."""
        until = self.sim.now + ms
        while (due := self.sim.next_due()) is not None and due <= until and not self.past_deadline():
            self.sim.run_one()
        if not self.cut:
            self.sim.now = until

    def result(self) -> RunResult:
        """The run as far as it went: its history, figures and faults."""
        spec = self.spec
        counters = {
            "network_dropped": self.cluster.network.dropped,
            "network_duplicated": self.cluster.network.duplicated,
            **self.faults.ledger_faults,
        }
        if spec.ledger == "file":
            # The store's journal over the run: its syncs, the power cuts, and what recovery replayed.
            store = self.cluster.broker.store
            counters.update({f"journal_{k}": v for k, v in store.journal_stats().items()})
            if isinstance(store.disk, SimDisk):
                counters["disk_faults_injected"] = len(store.disk.injected)
        return RunResult(
            spec,
            self.cluster.recorder.operations(),
            self.sim.now,
            self.sim.events_run,
            self.programs.committed,
            self.programs.aborted,
            self.cluster.broker.crashes,
            list(self.faults.events),
            counters,
            self.cut,
            list(self.cluster.broker.failures),
            self.stopped,
        )


def run(
    spec: RunSpec, progress: Callable[[str], None] | None = None, *, event_limit_s: float | None = EVENT_LIMIT_S
) -> RunResult:
    """One seeded run of a workload; returns its history.  An event that runs ``event_limit_s``
    wall seconds without returning fails as its component (:mod:`engine.simulation.watchdog`)."""
    if spec.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {spec.workload!r}; workloads are {', '.join(WORKLOADS)}")
    runner = _Run(spec)
    try:
        try:
            with watchdog(runner.sim, event_limit_s):
                return runner.execute(progress)
        except Exception:
            if runner.stopped is None:
                raise
            # The lost store's error escaped a callback (a write that could not fail softly): the
            # run stops there all the same, with what it recorded.
            return runner.result()
    finally:
        runner.cluster.close()
        store = runner.cluster.broker.store
        if spec.export_dir is not None and isinstance(store.disk, SimDisk) and store.directory is not None:
            store.disk.export(os.path.abspath(os.fspath(store.directory)), spec.export_dir)
