"""What a run leaves besides its history: :class:`RunResult` (the history, its figures, the fault
schedule injected, the component failures) and the metadata ``txnmodel simulate`` writes into each
history file (``history_io.files.read_metadata``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine.broker import ComponentFailure
from engine.simulation.runspec import RunSpec
from spec.history import Operation

__all__ = ["FaultEvent", "RunResult", "file_metadata"]


@dataclass(frozen=True)
class FaultEvent:
    """One injected fault of the schedule: when, what, and on which component."""

    time_ms: int
    kind: str
    target: str

    def to_json(self) -> dict[str, Any]:
        return {"time_ms": self.time_ms, "kind": self.kind, "target": self.target}


@dataclass
class RunResult:
    spec: RunSpec
    operations: list[Operation]
    sim_time_ms: int
    events: int
    committed: int
    aborted: int
    crashes: int
    faults: list[FaultEvent] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)  # faults drawn per operation, by kind
    cut: bool = False  # the deadline stopped the run
    failures: list[ComponentFailure] = field(default_factory=list)  # components that raised (contained)
    # Why the run stopped before its end, its storage lost for good (corruption, a full disk):
    # the history is what was recorded until then (LedgerStore.fatal).  None: it ran to its end.
    incomplete: str | None = None

    def metadata(self) -> dict[str, Any]:
        """This run's metadata: its configuration, whether the deadline cut it or a storage failure
        stopped it (``incomplete``), the faults injected, and the component failures when there were
        any."""
        meta = {
            **self.spec.to_json(),
            "cut_at_deadline": self.cut,
            "incomplete": self.incomplete,
            "sim_time_ms": self.sim_time_ms,
            "fault_schedule": [f.to_json() for f in self.faults],
            "fault_counts": dict(sorted(self.counters.items())),
        }
        if self.failures:
            meta["component_failures"] = [f.to_json() for f in self.failures]
        return meta


def file_metadata(runs: dict[str, RunResult]) -> dict[str, Any]:
    """The metadata of a history file holding ``runs`` (history id -> run): each run's, and the broker.conf
    overrides they share under ``"config"``.  Runs with different overrides cannot share a file."""
    configs = {json.dumps(r.spec.to_json()["config"], sort_keys=True) for r in runs.values()}
    if len(configs) > 1:
        raise ValueError("the runs of one history file must share their broker.conf overrides")
    shared = json.loads(configs.pop()) if configs else {}
    return {"version": 1, "config": shared, "runs": {name: runs[name].metadata() for name in sorted(runs)}}
