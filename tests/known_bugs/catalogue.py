"""Known-bug catalogue: named mutants of the reference machines, each replacing ONE function.

Every mutant is a known Pulsar bug (a fact-sheet reference or an upstream issue/PR) re-created as a
replacement for a single reference function.  It is applied by patching a module (or class)
attribute and restoring it afterwards -- never a flag in product code.

Where the broker looks names up: ``reference/engine/broker.py`` imports the machine *modules*
(``from reference import buffer as tb`` ...) and calls ``tb.step``, ``tb.dispatch``, ``pa.step``,
``tc.step``, ``dl.step`` at call time.  Inside each machine, ``step`` dispatches through a
``_HANDLERS`` table that holds the top-level handlers *by value*, so patching e.g.
``reference.buffer._commit_txn`` would have no effect.  The helpers those handlers call
(``_update_max_read_position``, ``_add_aborted``, ``_entry_visible``, ``_handle_low_water_mark``,
``_commit_individual``, ``_abort_individual``, ``_end_transaction``, ...) are module globals looked
up at call time, so the mutants replace those.  The delayed-delivery mutant replaces the method
``Params.cutoff`` on the class, which every tracker calls through its ``params`` value.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from reference import buffer as tb
from reference import coordinator as tc
from reference import delayed as dl
from reference import pending_ack as pa
from reference.engine.simulate import RunSpec, run

__all__ = ["DETECTABLE", "MUTANTS", "Mutant", "Probe", "applied", "check", "detection", "first_detection"]


@dataclass(frozen=True)
class Probe:
    """One simulator configuration a mutant is tried with."""

    workload: str
    faults: bool
    ops: int = 40

    def spec(self, seed: int) -> RunSpec:
        return RunSpec(workload=self.workload, seed=seed, ops=self.ops, faults=self.faults)

    def __str__(self) -> str:
        return f"{self.workload}/faults-{'on' if self.faults else 'off'}/ops={self.ops}"


@dataclass(frozen=True)
class Mutant:
    name: str
    reference: str
    summary: str
    target: Any  # module or class holding the attribute
    attribute: str
    make: Callable[[Callable[..., Any]], Callable[..., Any]]  # original -> buggy replacement
    probe: Probe
    seeds: tuple[int, ...] = ()  # the seeds the test asserts detection at (smallest set found, plus one)
    not_detectable: str = ""  # why the workloads cannot flag it (then it is documented, not tested)
    runnable: bool = True  # False: a run with the mutant does not terminate, so the report skips it

    @property
    def where(self) -> str:
        if isinstance(self.target, type):
            return f"{self.target.__module__}.{self.target.__name__}.{self.attribute}"
        return f"{self.target.__name__}.{self.attribute}"


@contextlib.contextmanager
def applied(mutant: Mutant) -> Iterator[None]:
    """Patch the one attribute with the buggy replacement; restore it on exit."""
    original = getattr(mutant.target, mutant.attribute)
    setattr(mutant.target, mutant.attribute, mutant.make(original))
    try:
        yield
    finally:
        setattr(mutant.target, mutant.attribute, original)


# --------------------------------------------------------------------------------------------
# The buggy replacements


def _mrp_ignores_ongoing(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(state: tb.BufferState) -> tb.BufferState:
        # maxReadPosition follows the LAC even while a txn is ongoing.
        return tb._move_max_read_position(state, tb.last_confirmed_entry(state))
    return buggy


def _abort_not_recorded(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(state: tb.BufferState, txn_id: Any, marker: Any) -> tuple[tb.BufferState, tuple[Any, ...]]:
        return state, ()  # the aborted txn is never remembered
    return buggy


def _dispatch_no_skip_aborted(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(state: tb.BufferState, entry: tb.LogEntry) -> bool:
        return entry.kind in (tb.EntryKind.NORMAL, tb.EntryKind.TXN_DATA)  # aborted data not filtered
    return buggy


def _end_not_removing_ongoing(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(state: tb.BufferState, txn_id: Any) -> tb.BufferState:
        return tb._update_max_read_position(state)  # txn stays in ongoing: maxReadPosition stuck
    return buggy


def _lwm_aborts_wrong_txn(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(state: tb.BufferState, txn_id: Any, lwm: int) -> tuple[tb.BufferState, tuple[Any, ...]]:
        tc_id = txn_id.most_sig_bits
        old = state.low_water_marks.get(tc_id)
        if old is None or lwm > old:
            state = replace(state, low_water_marks=state.low_water_marks.set(tc_id, lwm))
        if state.status is not tb.BufferStatus.READY:
            return state, ()
        first = tb._first_ongoing(state)
        if first is None:
            return state, ()
        mark = state.low_water_marks.get(first[0].most_sig_bits)
        if mark is None or first[0].least_sig_bits > mark:
            return state, ()
        # Pre-#12312: the first ongoing txn F is below the mark, but the abort is written for the txn
        # being ended, not for F (F stays ongoing; the ended txn's data becomes "aborted").
        state, _, eff = tb._abort_core(state, txn_id)
        return state, tuple(eff)
    return buggy


def _pa_commit_not_deleting(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(state: pa.PendingAckState, txn: Any) -> tuple[pa.PendingAckState, list[Any]]:
        held = state.individual_ack_of_transaction.get(txn)
        if held is None:
            return state, []
        combined = state.individual_ack_positions
        for position, bits in held.items():
            combined = pa._release(combined, position, bits.acked)
        # forgotten, but never acknowledged on the cursor
        return pa._forget(replace(state, individual_ack_positions=combined), txn), []
    return buggy


def _pa_abort_not_redelivering(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(state: pa.PendingAckState, txn: Any) -> tuple[pa.PendingAckState, list[Any]]:
        new, _effects = original(state, txn)
        return new, []  # released, but RedeliverUnacknowledgedMessages is dropped
    return buggy


def _end_txn_skips_participant(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(*args: Any, **kwargs: Any) -> Any:
        state, result = original(*args, **kwargs)
        if not hasattr(result, "effects"):
            return state, result
        effects = tuple(
            replace(e, partitions=e.partitions[:-1])
            if isinstance(e, tc.EndTxnInTransactionBuffer) and len(e.partitions) > 1 else e
            for e in result.effects
        )
        return state, replace(result, effects=effects)
    return buggy


def _non_strict_cutoff(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(self: dl.Params, now_ms: int) -> int:
        return now_ms + self.tick_ms  # the non-strict cutoff even when strict is configured
    return buggy


MUTANTS: tuple[Mutant, ...] = (
    Mutant("mrp-ignores-ongoing", "#12386 / #14192 (txn-semantics §4.3; reference rule TB-7)",
           "maxReadPosition follows the LAC even while a transaction is ongoing, so uncommitted data is readable.",
           tb, "_update_max_read_position", _mrp_ignores_ongoing, Probe("ctp", False), (0, 1)),
    Mutant("abort-not-recorded", "txn-semantics §4 abort path; reference rule TB-12",
           "an abort marker is written but the txn is not added to the aborted set, so its data is dispatched.",
           tb, "_add_aborted", _abort_not_recorded, Probe("ctp", False), (0, 1)),
    Mutant("dispatch-no-skip-aborted", "txn-semantics §4 dispatch filter; reference rule TB-16",
           "the dispatcher delivers a message of an aborted transaction instead of acking it away.",
           tb, "_entry_visible", _dispatch_no_skip_aborted, Probe("ctp", False), (0, 1)),
    Mutant("end-not-removing-ongoing", "txn-semantics §4.3; reference rules TB-11/TB-12",
           "a commit/abort marker does not remove the txn from ongoing, so maxReadPosition never passes it.",
           tb, "_remove_and_update", _end_not_removing_ongoing, Probe("ctp", False),
           not_detectable="a run with this mutant never terminates: the readers and the final drain wait for "
                          "committed data that maxReadPosition never exposes, so no finite history exists to "
                          "check; it is a liveness failure the simulator would need a drain deadline to record",
           runnable=False),
    Mutant("lwm-aborts-wrong-txn", "#12312 (txn-semantics §4.6; reference rule TB-13)",
           "when the first ongoing txn is at or below the low watermark, the abort is written for the txn being ended "
           "instead of that first ongoing txn.",
           tb, "_handle_low_water_mark", _lwm_aborts_wrong_txn, Probe("ctp", True),
           not_detectable="the low-watermark abort path is never reached: instrumenting the correct "
                          "_handle_low_water_mark over 20 fault-on ctp/multi histories (ops=60) gave 1386 calls "
                          "and 0 aborts, because no buffer ever holds an ongoing txn at or below its "
                          "coordinator's mark (the mark trails the oldest open txn and markers arrive first)"),
    Mutant("pa-commit-not-deleting", "txn-semantics §5 commit path; reference rule PA-12",
           "a pending-ack commit forgets the txn without acknowledging its positions on the cursor.",
           pa, "_commit_individual", _pa_commit_not_deleting, Probe("ctp", True), (0, 1)),
    Mutant("pa-abort-not-redelivering", "txn-semantics §5 abort path; reference rule PA-13",
           "a pending-ack abort releases the positions but never redelivers them.",
           pa, "_abort_individual", _pa_abort_not_redelivering, Probe("ctp", True),
           not_detectable="nothing is lost, only delayed: the released input stays unacknowledged on the "
                          "cursor, and the ctp worker never asks for redelivery, so it is dispatched again when "
                          "the consumer closes and the final drain subscribes; the checker has no bound on "
                          "redelivery latency, so the history is clean"),
    Mutant("end-txn-skips-participant", "txn-semantics §2.4 endTransaction fan-out; reference rule TC-14",
           "the coordinator's END_TXN fan-out omits the last produced partition.",
           tc, "_end_transaction", _end_txn_skips_participant, Probe("multi", False), (0, 1)),
    Mutant("non-strict-cutoff", "pip160-pip195 timer rules; reference rule DD-1 (strict cutoff)",
           "the tracker uses now+tick as cutoff in strict mode, so messages are delivered before deliver_at.",
           dl.Params, "cutoff", _non_strict_cutoff, Probe("delayed", False), (0, 1)),
)

DETECTABLE: tuple[Mutant, ...] = tuple(m for m in MUTANTS if not m.not_detectable)


# --------------------------------------------------------------------------------------------
# Checking with the bulk job's checker


def check(spec: RunSpec) -> tuple[bool, dict[str, int]]:
    """Run one history and check it exactly as ``txnmodel verify`` does (``invariants.bulk``)."""
    from invariants.bulk import VerifyOptions, check_histories

    result = run(spec)
    name = f"{spec.workload}-seed{spec.seed}"
    rows = check_histories({name: result.operations}, "known-bugs", VerifyOptions(counterexamples=False))
    flagged = any(r.verdict != "ok" for r in rows)
    counts: dict[str, int] = {}
    for r in rows:
        if r.checker == "transactional" and r.verdict != "ok":
            counts = json.loads(r.detail)["counts"]
        elif r.verdict not in ("ok",):
            counts[f"{r.checker}:{r.verdict}"] = 1
    return flagged, counts


Result = list[tuple[int, bool, dict[str, int]]]


def detection(mutant: Mutant, seeds: range | tuple[int, ...], probe: Probe | None = None) -> Result:
    probe = probe or mutant.probe
    out: Result = []
    with applied(mutant):
        for seed in seeds:
            flagged, counts = check(probe.spec(seed))
            out.append((seed, flagged, counts))
    return out


def first_detection(results: Result) -> int | None:
    for i, (_seed, flagged, _c) in enumerate(results, 1):
        if flagged:
            return i
    return None


def report(n: int = 20) -> list[dict[str, Any]]:
    """Per mutant: detected, detection rate over seeds 0..n-1 of its probe, histories to first detection."""
    rows: list[dict[str, Any]] = []
    for m in MUTANTS:
        if not m.runnable:
            rows.append({"bug": m.name, "reference": m.reference, "probe": str(m.probe), "detected": False,
                         "rate": "n/a (run does not terminate)", "first": None, "seeds": [], "anomalies": [],
                         "clean_without": "-",
                         "where": m.where, "seconds": 0.0})
            continue
        started = time.perf_counter()
        results = detection(m, range(n))
        hits = [s for s, f, _ in results if f]
        names: dict[str, int] = {}
        for _s, f, c in results:
            if f:
                for k, v in c.items():
                    names[k] = names.get(k, 0) + v
        clean = sum(not check(m.probe.spec(seed))[0] for seed in range(n))
        rows.append({"bug": m.name, "reference": m.reference, "probe": str(m.probe), "detected": bool(hits),
                     "clean_without": f"{clean}/{n}",
                     "rate": f"{len(hits)}/{n}", "first": first_detection(results), "seeds": hits,
                     "anomalies": sorted(names), "where": m.where, "seconds": round(time.perf_counter() - started, 1)})
    return rows
