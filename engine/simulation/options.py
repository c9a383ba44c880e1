"""Batches of seeded runs as the command line asks for them: :class:`SimulateOptions` (seeds,
workloads, and each variant ``on``, ``off`` or ``mixed`` by seed), the fault mixes, the main job's
options (:data:`MAIN_JOB`) and the history file each run goes to.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from engine.simulation.runspec import DEFAULT_DEADLINE_MS, WORKLOADS, RunSpec
from spec.config import QUIRKS

__all__ = [
    "FAULT_MIXES",
    "MAIN_JOB",
    "MIX_CYCLE",
    "SimulateOptions",
    "fault_mix",
    "file_stem",
    "main_job_spec",
    "variant",
]

# Fault mixes: overrides of FAULT_RATES that reach what the default profile rarely does (see
# docs/known_bugs.md).  ``late-append``: short transaction timeouts and long network delays, so a
# txn's message reaches a partition after its timeout abort and re-opens it there (TB-8, TB-13);
# ``coordinator``: coordinator crashes while participants time out END_TXN, so reloads find
# COMMITTING and ABORTING transactions to re-drive (TC-16, TC-24); ``quiesce``: the default
# faults, every partition unloaded once every transaction has ended, and the readers start after
# that, so what they read was recovered with nothing written after the recovery (TB-24).
FAULT_MIXES: dict[str, dict[str, float | int]] = {
    "default": {},
    "late-append": {
        "drop_request": 0.0,
        "drop_response": 0.0,
        "duplicate_request": 0.0,
        "ledger_append": 0.0,
        "ledger_read": 0.0,
        "broker_crash": 0.0,
        "coordinator_crash": 0.0,
        "topic_unload": 0.0,
        "short_txn_timeout": 0.5,
        "max_extra_delay_ms": 400,
    },
    "coordinator": {
        "drop_request": 0.0,
        "drop_response": 0.0,
        "ledger_append": 0.0,
        "ledger_read": 0.0,
        "broker_crash": 0.0,
        "topic_unload": 0.0,
        "coordinator_crash": 1.0,
        "participant_timeout": 0.2,
    },
    "quiesce": {"unload_at_heal": 1.0},
}
# ``--fault-mix mixed``: the mix of each seed, by seed modulo the length of this cycle.
MIX_CYCLE = ("default", "default", "late-append", "coordinator", "quiesce")


@dataclass(frozen=True)
class SimulateOptions:
    """A batch of seeded runs, as ``txnmodel simulate`` asks for them: ``histories`` seeds from
    ``seed`` for each workload (``"all"``: every one), with the variants ``on``, ``off`` or ``mixed``
    (on for some seeds, :func:`variant`).  :meth:`specs` turns it into the runs, in order."""

    seed: int = 0
    workload: str = "ctp"
    histories: int = 1
    ops: int = 200
    ledger: str = "memory"
    data: str | None = None  # where file ledgers go (default: the caller's scratch directory)
    duration: int | None = None
    deadline: int = DEFAULT_DEADLINE_MS
    clients: int = 4
    partitions: int = 2
    faults: bool = True
    batching: str = "off"  # on, off or mixed (seeds = 1 mod 4)
    batch_messages: str = "mixed"
    key_shared: str = "mixed"
    delayed_tracker: str = "mixed"
    fault_mix: str = "default"  # a FAULT_MIXES name, or mixed (by seed, MIX_CYCLE)
    unsubscribe: str = "off"  # mixed: seeds = 1 mod 5
    cumulative: str = "off"  # mixed: seeds = 1 mod 7
    redeliver: str = "off"  # mixed: seeds = 3 mod 6
    queries: str = "off"  # mixed: seeds = 4 mod 5
    shared_delayed: str = "off"  # the delayed workload on the in-memory tracker; mixed: seeds = 1 mod 4
    readers: str = "off"  # mixed: seeds = 3 mod 5
    reread: str = "off"  # the ctp workload; mixed: seeds = 2 mod 3
    bounds: str = "off"  # mixed: seeds = 2 mod 4
    acks: str = "off"  # mixed: seeds = 0 mod 3
    pipelined: str = "off"  # the ctp workload; mixed: seeds = 0 mod 4
    limits: str = "off"  # mixed: seeds = 1 mod 6 (half of them batching runs)
    # The delayed workload as asynchronous as Pulsar's (hasMessageAvailable first, DD-31's snapshot
    # creation), mixed: seeds = 4..7 mod 8 (4, 5 mod 8 on the in-memory tracker, 6, 7 mod 8 on the
    # bucket tracker, whose seeds are 2, 3 mod 4 when the tracker is mixed); snapshot storage
    # failures (bucket tracker), mixed: odd seeds.  Each combination has a quarter of the bucket runs.
    delayed_async: str = "off"
    bucket_faults: str = "off"
    disk: str = "real"  # file ledgers: "real", or "sim" (broker crashes are power cuts)
    group_commit_ms: int | None = None  # file ledgers: the journal's group commit (None: every change)
    disk_capacity: int | None = None  # the simulated disk's bytes (ENOSPC past them; None: no bound)
    quirks: tuple[str, ...] = ()  # named quirks (spec.config.QUIRKS) switched on in every run

    @property
    def workloads(self) -> tuple[str, ...]:
        return WORKLOADS if self.workload == "all" else (self.workload,)

    def specs(self, workload: str, scratch: str) -> list[RunSpec]:
        """The runs of ``workload``, one per seed; file ledgers under ``data`` (else ``scratch``)."""
        specs = []
        for k in range(self.histories):
            seed = self.seed + k
            data = export = None
            if self.ledger == "file" and self.disk == "sim":
                # The store lives on the simulated disk; with --data its final files are written there.
                export = str(Path(self.data) / f"{workload}-seed{seed}") if self.data else None
            elif self.ledger == "file":
                data = str(Path(self.data or scratch) / f"{workload}-seed{seed}")
            tracker = {"bucket": "on", "memory": "off"}.get(self.delayed_tracker, self.delayed_tracker)
            specs.append(
                RunSpec(
                    workload=workload,
                    seed=seed,
                    ledger=self.ledger,
                    data_dir=data,
                    ops=self.ops,
                    clients=self.clients,
                    faults=self.faults,
                    batching=variant(self.batching, seed, 4),
                    partitions=self.partitions,
                    duration_ms=self.duration,
                    deadline_ms=self.deadline,
                    batch_messages=variant(self.batch_messages, seed, 2),
                    key_shared=variant(self.key_shared, seed, 3),
                    delayed_tracker="bucket"
                    if workload == "delayed" and variant(tracker, seed, 2, step=2)
                    else "memory",
                    fault_rates=dict(FAULT_MIXES[fault_mix(self.fault_mix, seed)]),
                    unsubscribe=variant(self.unsubscribe, seed, 5),
                    cumulative=variant(self.cumulative, seed, 7),
                    redeliver=variant(self.redeliver, seed + 4, 6),
                    queries=variant(self.queries, seed + 2, 5),
                    readers=variant(self.readers, seed + 3, 5),
                    reread=variant(self.reread, seed + 2, 3),
                    bounds=variant(self.bounds, seed + 3, 4),
                    acks=variant(self.acks, seed + 1, 3),
                    pipelined=variant(self.pipelined, seed + 1, 4),
                    limits=variant(self.limits, seed, 6),
                    delayed_async=variant(self.delayed_async, seed, 2, step=4),
                    bucket_faults=variant(self.bucket_faults, seed, 2),
                    shared_delayed=workload == "delayed"
                    and not variant(tracker, seed, 2, step=2)
                    and variant(self.shared_delayed, seed, 4),
                    disk=self.disk,
                    group_commit_ms=self.group_commit_ms,
                    disk_capacity=self.disk_capacity if self.ledger == "file" and self.disk == "sim" else None,
                    export_dir=export,
                )
            )
            for quirk in self.quirks:
                specs[-1].config = specs[-1].config.with_overrides(QUIRKS[quirk])
        return specs


# The runs of the main job (``txnmodel run``) other than seeds, histories and ledger: faults on, and
# every variant and fault mix mixed by seed.
MAIN_JOB = SimulateOptions(
    workload="all",
    ops=60,
    faults=True,
    batching="mixed",
    batch_messages="mixed",
    key_shared="mixed",
    delayed_tracker="mixed",
    fault_mix="mixed",
    unsubscribe="mixed",
    cumulative="mixed",
    redeliver="mixed",
    queries="mixed",
    shared_delayed="mixed",
    readers="mixed",
    reread="mixed",
    bounds="mixed",
    acks="mixed",
    pipelined="mixed",
    limits="mixed",
    delayed_async="mixed",
    bucket_faults="mixed",
)


def variant(choice: str, seed: int, modulus: int, step: int = 1) -> bool:
    """An on/off/mixed command-line choice for one seed: mixed is on when ``(seed // step) % modulus
    == 1``, so seed 0 (the default single run) is always the plain workload."""
    return choice == "on" or (choice == "mixed" and (seed // step) % modulus == 1)


def fault_mix(choice: str, seed: int) -> str:
    """The fault mix of one seed: ``choice``, or for ``mixed`` the seed's place in :data:`MIX_CYCLE`."""
    return MIX_CYCLE[seed % len(MIX_CYCLE)] if choice == "mixed" else choice


def main_job_spec(workload: str, seed: int, ops: int = 60) -> RunSpec:
    """One history of the main job (``txnmodel run``: faults on, every variant and fault mix
    ``mixed``, :data:`MAIN_JOB`), on the memory ledger, which gives the same history as the file ledger."""
    options = dataclasses.replace(MAIN_JOB, seed=seed, workload=workload, histories=1, ops=ops, ledger="memory")
    (spec,) = options.specs(workload, "")
    return spec


def file_stem(spec: RunSpec) -> str:
    """The history file a run goes to: one per workload, and apart from them the delayed workload's
    bucket-tracker runs, the ctp workload's ``reread`` runs and the ``limits`` runs, each combination
    in a file of its own (a file's runs share their broker.conf overrides)."""
    parts = [spec.workload]
    if spec.workload == "delayed" and spec.delayed_tracker == "bucket":
        parts.append("bucket")
    if spec.rereads:
        parts.append("reread")
    if spec.limits:
        parts.append("limits")
    return "-".join(parts)
