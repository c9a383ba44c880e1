"""Known-bug catalogue: named mutants of the reference machines, each replacing ONE function.

Every mutant is a known Pulsar bug (a fact-sheet reference or an upstream issue/PR) re-created as a
replacement for a single reference function.  It is applied by patching a module (or class)
attribute and restoring it afterwards -- never a flag in product code.

Where the broker looks names up: ``engine/broker/`` imports the machine *modules*
(``from reference import buffer as tb`` ...) and calls ``tb.step``, ``tb.dispatch``, ``pa.step``,
``tc.step``, ``dl.step`` at call time.  Inside each machine, ``step`` is a ``match`` on the
command type that calls the module's handlers (``_commit_txn``, ``_publish_message``, ...) and
they call their helpers (``_update_max_read_position``, ``_add_aborted``, ``_entry_visible``,
``_handle_low_water_mark``, ``_commit_individual``, ``_abort_individual``, ``_end_transaction``,
...), all module globals looked up at call time, so a mutant replaces the one function the bug
lives in.  The delayed-delivery mutant replaces the method ``Params.cutoff`` on the class, which
every tracker calls through its ``params`` value.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from engine.simulation.workloads import RunSpec, run
from reference import buffer as tb
from reference import coordinator as tc
from reference import delayed as dl
from reference import pending_ack as pa
from spec.result import Ok

__all__ = [
    "DETECTABLE",
    "MUTANTS",
    "Mutant",
    "Probe",
    "applied",
    "check",
    "check_both",
    "detection",
    "first_detection",
    "main_job_detection",
]


@dataclass(frozen=True)
class Probe:
    """One simulator configuration a mutant is tried with."""

    workload: str
    faults: bool
    ops: int = 40
    partitions: int = 2
    clients: int = 4
    rates: tuple[tuple[str, float | int], ...] = ()  # fault-rate overrides (RunSpec.fault_rates)
    config: tuple[tuple[str, Any], ...] = ()  # broker.conf overrides on top of the simulator's defaults

    def spec(self, seed: int) -> RunSpec:
        spec = RunSpec(
            workload=self.workload,
            seed=seed,
            ops=self.ops,
            faults=self.faults,
            partitions=self.partitions,
            clients=self.clients,
            fault_rates=dict(self.rates),
        )
        if self.config:
            spec.config = spec.config.with_overrides(dict(self.config))
        return spec

    def __str__(self) -> str:
        extra = "" if self.partitions == 2 else f"/partitions={self.partitions}"
        extra += "" if self.clients == 4 else f"/clients={self.clients}"
        extra += "".join(f"/{k}={v}" for k, v in self.config)
        faults = "on" if self.faults else "off"
        if self.faults and self.rates:
            faults = "only " + ",".join(f"{k}={v}" for k, v in self.rates if v)
        return f"{self.workload}/faults-{faults}/ops={self.ops}{extra}"


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

    def current(self) -> Any:
        """The function the mutant replaces, as the machine would look it up now."""
        return getattr(self.target, self.attribute)


@contextlib.contextmanager
def applied(mutant: Mutant) -> Iterator[None]:
    """Patch the one attribute with the buggy replacement; restore it on exit."""
    original = mutant.current()
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
            if isinstance(e, tc.EndTxnInTransactionBuffer) and len(e.partitions) > 1
            else e
            for e in result.effects
        )
        return state, replace(result, effects=effects)

    return buggy


def _non_strict_cutoff(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(self: dl.Params, now_ms: int) -> int:
        return now_ms + self.tick_ms  # the non-strict cutoff even when strict is configured

    return buggy


def _commit_not_removing_ongoing(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(state: tb.BufferState, cmd: tb.CommitTxn) -> tuple[tb.BufferState, Any]:
        first = state.ongoing.get(cmd.txn_id)
        new, result = original(state, cmd)
        if first is None or not isinstance(result, Ok) or cmd.txn_id in new.ongoing:
            return new, result
        # The commit marker is written but the txn stays ongoing: maxReadPosition stays before its
        # first message until the low watermark passes it and the buffer aborts it (TB-13).
        new = replace(new, ongoing=new.ongoing.set(cmd.txn_id, first))
        return tb._update_max_read_position(new), result

    return buggy


def _publish_moves_mrp(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(state: tb.BufferState, cmd: tb.PublishMessage) -> tuple[tb.BufferState, Any]:
        new, result = original(state, cmd)
        if isinstance(result, Ok) and new.status is tb.BufferStatus.READY and new.ongoing:
            # syncMaxReadPositionForNormalPublish moves to the new LAC although txns are ongoing
            new = tb._move_max_read_position(new, result.value)
        return new, result

    return buggy


def _recovery_keeps_snapshot_mrp(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(
        config: Any, topic: str, ledgers: Any, entries: Any, store: tb.SnapshotStore
    ) -> tuple[tb.BufferState, tuple[Any, ...]]:
        state, effects = original(config, topic, ledgers, entries, store)
        if state.status is not tb.BufferStatus.READY or state.ongoing:
            return state, effects
        if config.transaction_buffer_segmented_snapshot_enabled and store.indexes is not None:
            start = store.indexes.snapshot.max_read_position
        elif store.snapshot is not None:
            start = store.snapshot.max_read_position
        else:
            return state, effects
        # Nothing ongoing after the replay, yet maxReadPosition stays at the snapshot's, not the LAC.
        return replace(state, max_read_position=start), effects

    return buggy


def _recovery_no_redrive(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(state: tc.CoordinatorState) -> tuple[tc.CoordinatorState, Any]:
        new, result = original(state)
        if not isinstance(result, Ok):
            return new, result
        # The re-driven ends run before the store is published, fail with "coordinator not found" and
        # are dropped: COMMITTING/ABORTING txns stay so for good.
        kept = tuple(e for e in result.effects if not isinstance(e, tc.ScheduleResumeEndTxn))
        return new, replace(result, effects=kept)

    return buggy


def _timeouts_never_fire(original: Callable[..., Any]) -> Callable[..., Any]:
    def buggy(state: tc.CoordinatorState, cmd: tc.Tick) -> tuple[tc.CoordinatorState, Any]:
        return state, Ok(())  # the timer is never re-armed: no open txn is ever timed out

    return buggy


def _only(**rates: float) -> tuple[tuple[str, float | int], ...]:
    """A fault profile with only the named faults: no lost requests or responses, no ledger failures and
    no component faults unless named.  A receive whose answer never comes (a lost response, a crash while
    it waits) blinds the loss check for what it may have taken, so probes for bugs that show up as
    loss keep the readers' receives answered."""
    quiet: dict[str, float | int] = {
        "drop_request": 0.0,
        "drop_response": 0.0,
        "duplicate_request": 0.0,
        "ledger_append": 0.0,
        "ledger_read": 0.0,
        "short_txn_timeout": 0.0,
        "broker_crash": 0.0,
        "coordinator_crash": 0.0,
        "topic_unload": 0.0,
    }
    return tuple(sorted({**quiet, **rates}.items()))


# The low-watermark abort (TB-13) needs a buffer holding an ongoing txn its coordinator already finished.
# Within the fault model that is a late append: a txn with a short timeout sends to a partition whose
# buffer has no snapshot yet; the send is delayed past the txn's timeout abort, which a buffer without a
# snapshot acknowledges without writing or remembering anything (Q6), so the late message re-opens the
# txn there.  Many fresh partitions, many short timeouts and long network delays make that likely.
_LATE_APPEND = Probe("multi", True, partitions=8, rates=_only(short_txn_timeout=0.5, max_extra_delay_ms=400))


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "mrp-ignores-ongoing",
        "#12386 / #14192 (txn-semantics §4.3; reference rule TB-7)",
        "maxReadPosition follows the LAC even while a transaction is ongoing, so uncommitted data is readable.",
        tb,
        "_update_max_read_position",
        _mrp_ignores_ongoing,
        Probe("ctp", False),
        (0, 1),
    ),
    Mutant(
        "abort-not-recorded",
        "txn-semantics §4 abort path; reference rule TB-12",
        "an abort marker is written but the txn is not added to the aborted set, so its data is dispatched.",
        tb,
        "_add_aborted",
        _abort_not_recorded,
        Probe("ctp", False),
        (0, 1),
    ),
    Mutant(
        "dispatch-no-skip-aborted",
        "txn-semantics §4 dispatch filter; reference rule TB-16",
        "the dispatcher delivers a message of an aborted transaction instead of acking it away.",
        tb,
        "_entry_visible",
        _dispatch_no_skip_aborted,
        Probe("ctp", False),
        (0, 1),
    ),
    Mutant(
        "end-not-removing-ongoing",
        "txn-semantics §4.3; reference rules TB-11/TB-12",
        "a commit/abort marker does not remove the txn from ongoing, so maxReadPosition never passes it.",
        tb,
        "_remove_and_update",
        _end_not_removing_ongoing,
        Probe("ctp", False),
        (1, 3),
    ),
    Mutant(
        "lwm-aborts-wrong-txn",
        "#12312 (txn-semantics §4.6; reference rule TB-13)",
        "when the first ongoing txn is at or below the low watermark, the abort is written for the txn being ended "
        "instead of that first ongoing txn.",
        tb,
        "_handle_low_water_mark",
        _lwm_aborts_wrong_txn,
        _LATE_APPEND,
        (4, 7),
    ),
    Mutant(
        "pa-commit-not-deleting",
        "txn-semantics §5 commit path; reference rule PA-12",
        "a pending-ack commit forgets the txn without acknowledging its positions on the cursor.",
        pa,
        "_commit_individual",
        _pa_commit_not_deleting,
        Probe("ctp", True),
        (0, 2),
    ),
    Mutant(
        "pa-abort-not-redelivering",
        "txn-semantics §5 abort path; reference rule PA-13",
        "a pending-ack abort releases the positions but never redelivers them.",
        pa,
        "_abort_individual",
        _pa_abort_not_redelivering,
        Probe("ctp", False),
        (0, 1),
    ),
    Mutant(
        "end-txn-skips-participant",
        "txn-semantics §2.4 endTransaction fan-out; reference rule TC-14",
        "the coordinator's END_TXN fan-out omits the last produced partition.",
        tc,
        "_end_transaction",
        _end_txn_skips_participant,
        Probe("multi", False),
        (0, 1),
    ),
    Mutant(
        "non-strict-cutoff",
        "pip160-pip195 timer rules; reference rule DD-1 (strict cutoff)",
        "the tracker uses now+tick as cutoff in strict mode, so messages are delivered before deliver_at.",
        dl.Params,
        "cutoff",
        _non_strict_cutoff,
        Probe("delayed", False),
        (0, 1),
    ),
    Mutant(
        "commit-not-removing-ongoing",
        "txn-semantics §4.3 rule 5 / §4.5; reference rule TB-11",
        "a commit marker does not remove the txn from ongoing (the abort path still does), so maxReadPosition "
        "stays before its messages until the low watermark passes it and the buffer aborts it.",
        tb,
        "_commit_txn",
        _commit_not_removing_ongoing,
        Probe("ctp", False),
        (0, 1),
    ),
    Mutant(
        "publish-moves-mrp-while-ongoing",
        "#12386 (txn-semantics §4.3 rule 3); reference rule TB-9",
        "a normal publish moves maxReadPosition to the new LAC even while transactions are ongoing on the "
        "partition, exposing their messages.",
        tb,
        "_publish_message",
        _publish_moves_mrp,
        Probe("delayed", False),
        (0, 1),
    ),
    Mutant(
        "recovery-keeps-snapshot-mrp",
        "#14192 (txn-semantics §4.3 rule 2); reference rule TB-24",
        "after recovery with nothing ongoing, maxReadPosition stays at the snapshot's position instead of the "
        "LAC, so committed messages written after the snapshot stay invisible until the next transaction.",
        tb,
        "_recover_with_effects",
        _recovery_keeps_snapshot_mrp,
        Probe("ctp", True, rates=_only(topic_unload=1.0)),
        not_detectable="the stale maxReadPosition lasts only until the partition's next write (a txn append "
        "moves it to just before the first ongoing txn, a normal publish with nothing ongoing "
        "to the LAC), and every workload keeps writing to every partition until the heal, so "
        "the bug delays visibility by milliseconds and loses nothing: 0 of 20 ctp histories "
        "with topic unloads only (ops=40), 0 of 8 with ops=300; the checker has no bound on "
        "how soon a committed message becomes visible",
    ),
    Mutant(
        "recovery-no-redrive",
        "#18923 / #19201 (txn-semantics §2.6 rule 5); reference rule TC-24",
        "after a coordinator reload the COMMITTING/ABORTING transactions are not re-driven (the re-drive ran "
        "before the store was published and failed), so their markers never reach the participants.",
        tc,
        "_replay_complete",
        _recovery_no_redrive,
        Probe("ctp", True, rates=_only(coordinator_crash=1.0, participant_timeout=0.2)),
        (0, 1),
    ),
    Mutant(
        "timeouts-never-fire",
        "#10366 (txn-semantics §2.5 rule 1); reference rule TC-18",
        "the timeout tracker's timer is not re-armed, so an open transaction whose client went away is "
        "never aborted and pins maxReadPosition on its partitions (modelled as a tick that aborts nothing).",
        tc,
        "_tick",
        _timeouts_never_fire,
        Probe("ctp", True, rates=_only(short_txn_timeout=0.3)),
        (1, 2),
    ),
)

DETECTABLE: tuple[Mutant, ...] = tuple(m for m in MUTANTS if not m.not_detectable)


# --------------------------------------------------------------------------------------------
# Checking with the bulk job's checker


def check(spec: RunSpec) -> tuple[bool, dict[str, int]]:
    """Run one history and check it exactly as ``txnmodel verify`` does (``invariants.verify``)."""
    from invariants.verify import VerifyOptions, check_histories

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


def check_both(spec: RunSpec) -> tuple[bool, bool, list[str]]:
    """One history checked as ``txnmodel verify`` does, split by checker: (the bulk checker's
    linearizability and transactional rows flagged, the client-visible oracle's ``delivery`` row
    flagged, what each found)."""
    from invariants.verify import VerifyOptions, check_histories

    name = f"{spec.workload}-seed{spec.seed}"
    rows = check_histories({name: run(spec).operations}, "known-bugs", VerifyOptions(counterexamples=False))
    bulk: list[str] = []
    oracle: list[str] = []
    for r in rows:
        if r.verdict == "ok":
            continue
        if r.checker in ("transactional", "delivery") and r.verdict == "illegal":
            names = sorted(json.loads(r.detail)["counts"])
            if r.checker == "delivery":
                oracle += [f"oracle:{n}" for n in names]
            else:
                bulk += names
        else:
            bulk.append(f"{r.checker}:{r.verdict}")
    return bool(bulk), bool(oracle), bulk + oracle


def main_job_detection(mutant: Mutant, seeds: int, ops: int = 60) -> dict[str, Any]:
    """The mutant in the main job's own workloads (every workload at seeds 1..``seeds``, its
    variants and fault mixes): the first history the bulk checker flags and the first the oracle
    flags (each search stops there), and what they found."""
    from engine.simulation.workloads import WORKLOADS, main_job_spec

    started = time.perf_counter()
    first: dict[str, str | None] = {"bulk": None, "oracle": None}
    found: dict[str, list[str]] = {}
    runs = 0
    if mutant.runnable:
        with applied(mutant):
            for seed in range(1, seeds + 1):
                for workload in WORKLOADS:
                    runs += 1
                    bulk, oracle, what = check_both(main_job_spec(workload, seed, ops))
                    name = f"{workload}-seed{seed}"
                    for checker, hit in (("bulk", bulk), ("oracle", oracle)):
                        if hit and first[checker] is None:
                            first[checker] = name
                            found[checker] = [w for w in what if w.startswith("oracle:") == (checker == "oracle")]
                    if first["bulk"] and first["oracle"]:
                        break
                if first["bulk"] and first["oracle"]:
                    break
    return {
        "bug": mutant.name,
        "histories": runs,
        "bulk": first["bulk"],
        "oracle": first["oracle"],
        "found": found,
        "detected": bool(first["bulk"] or first["oracle"]),
        "seconds": round(time.perf_counter() - started, 1),
    }


def report(n: int = 20) -> list[dict[str, Any]]:
    """Per mutant: detected, detection rate over seeds 0..n-1 of its probe, histories to first detection."""
    rows: list[dict[str, Any]] = []
    for m in MUTANTS:
        if not m.runnable:
            rows.append(
                {
                    "bug": m.name,
                    "reference": m.reference,
                    "probe": str(m.probe),
                    "detected": False,
                    "rate": "n/a (run does not terminate)",
                    "first": None,
                    "seeds": [],
                    "anomalies": [],
                    "clean_without": "-",
                    "where": m.where,
                    "seconds": 0.0,
                }
            )
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
        rows.append(
            {
                "bug": m.name,
                "reference": m.reference,
                "probe": str(m.probe),
                "detected": bool(hits),
                "clean_without": f"{clean}/{n}",
                "rate": f"{len(hits)}/{n}",
                "first": first_detection(results),
                "seeds": hits,
                "anomalies": sorted(names),
                "where": m.where,
                "seconds": round(time.perf_counter() - started, 1),
            }
        )
    return rows
