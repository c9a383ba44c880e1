"""The known-bug catalogue through ``txnmodel check``: per mutant, the smallest model and bounds
(of the ones tried, in order) at which the model checker finds it, and what it finds there.

Each mutant of :mod:`tests.known_bugs.catalogue` lists candidate ``(model, bounds)`` pairs from
the smallest state space up; :func:`check_detection` runs each through the command's own
:func:`txnmodel.commands.check.check_models` with the mutant applied, and again without it (the
same bounds must pass), and stops at the first that finds a violation.  ``keep_going`` explores the
whole graph after the first violation, so a liveness violation is reported beside a safety one
(an end that never leaves the ongoing set is both).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tests.known_bugs.catalogue import MUTANTS, Mutant, applied

__all__ = ["CHECK_PROBES", "NOT_REACHED", "CheckProbe", "check_detection"]


@dataclass(frozen=True)
class CheckProbe:
    model: str
    bounds: tuple[tuple[str, int], ...] = ()
    keep_going: bool = False

    def __str__(self) -> str:
        bounds = " ".join(f"{k}={v}" for k, v in self.bounds)
        return f"--model {self.model}" + (f" --bound {bounds.replace(' ', ' --bound ')}" if bounds else "")


# One partition, one client, one transaction that commits or aborts, a reader; no faults.
_SMALL: tuple[tuple[str, int], ...] = (("partitions", 1), ("spread", 1), ("loss", 0), ("duplicate", 0))
_ONE_SUB: tuple[tuple[str, int], ...] = (("clients", 1),)

CHECK_PROBES: dict[str, tuple[CheckProbe, ...]] = {
    "mrp-ignores-ongoing": (CheckProbe("produce", _SMALL),),
    "abort-not-recorded": (CheckProbe("produce", _SMALL),),
    "dispatch-no-skip-aborted": (CheckProbe("produce", _SMALL),),
    "end-not-removing-ongoing": (CheckProbe("produce", _SMALL, keep_going=True),),
    "pa-commit-not-deleting": (CheckProbe("pending-ack", _ONE_SUB),),
    "pa-abort-not-redelivering": (CheckProbe("pending-ack", _ONE_SUB),),
    "end-txn-skips-participant": (
        CheckProbe("produce", (("partitions", 2), ("spread", 2), ("loss", 0), ("duplicate", 0))),
    ),
    "non-strict-cutoff": (CheckProbe("delayed", (("crash_partition", 0),)),),
    "commit-not-removing-ongoing": (CheckProbe("produce", _SMALL, keep_going=True),),
    "publish-moves-mrp-while-ongoing": (CheckProbe("produce", (*_SMALL, ("publishes", 1))),),
    "recovery-keeps-snapshot-mrp": (CheckProbe("produce", _SMALL),),
    "recovery-no-redrive": (
        CheckProbe("end-path", (("crash_partition", 0),)),
        CheckProbe("batched-log", (("clients", 1),)),
    ),
    "timeouts-never-fire": (
        CheckProbe("pending-ack", _ONE_SUB),
        CheckProbe("pending-ack", ()),
    ),
    # A transaction is ongoing below the low water mark only once a late copy of its send re-opened it
    # after its end on the partition: two transactions, and the network may duplicate one send.
    "lwm-aborts-wrong-txn": (
        CheckProbe("produce", (("partitions", 1), ("spread", 1), ("loss", 0), ("txns", 2), ("duplicate_sends", 1))),
    ),
}

# Why a mutant is out of reach of the models (documented in docs/known_bugs.md).
NOT_REACHED: dict[str, str] = {}


def _run(probe: CheckProbe) -> Any:
    from txnmodel.commands.check import check_models

    (run,) = check_models([probe.model], dict(probe.bounds), keep_going=probe.keep_going)
    return run.result


def check_detection(mutant: Mutant) -> dict[str, Any]:
    """Try the mutant's probes in order; the first that finds a violation, with its figures."""
    tried = []
    for probe in CHECK_PROBES.get(mutant.name, ()):
        started = time.perf_counter()
        with applied(mutant):
            result = _run(probe)
        seconds = time.perf_counter() - started
        clean = _run(probe)
        tried.append(str(probe))
        if result.violations and clean.ok:
            first = min(result.violations, key=lambda v: (v.kind != "safety", v.length, v.name))
            return {
                "mutant": mutant.name,
                "detected": True,
                "probe": str(probe),
                "model": probe.model,
                "bounds": dict(result.bounds),
                "kind": first.kind,
                "property": first.name,
                "trace_length": first.length,
                "violations": [(v.kind, v.name, v.length) for v in result.violations],
                "states": result.states,
                "seconds": round(seconds, 2),
                "clean_states": clean.states,
            }
    return {
        "mutant": mutant.name,
        "detected": False,
        "tried": tried,
        "why": NOT_REACHED.get(mutant.name, "no probe"),
    }


def all_detections() -> list[dict[str, Any]]:
    return [check_detection(m) for m in MUTANTS]
