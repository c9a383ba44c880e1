"""Plan and check one history: every checker that applies, as typed verdict rows.

This is the pure heart of ``txnmodel verify``: no files, no Spark, no clock other than the
per-history wall-clock budget of the linearizability search.  The runners in ``txnmodel/`` (one
process, or Spark tasks) read history files, call :func:`check_histories` on what they read and
write the :class:`VerdictRow` values it returns.

For each history:

1. **plan** (:func:`plan_models`): which linearizability models apply.  ``--model auto`` picks
   ``cas-register`` for register objects, ``kv`` for key objects and, for an engine history, every
   reference machine whose object kind the history holds (:data:`MACHINE_KINDS`); a named model is
   used as is;
2. **linearizability** of each planned model's objects (:func:`check_linearizability`), the worst
   verdict over them, the first illegal object explained and shrunk to a counterexample;
3. the Elle-style anomalies (:mod:`invariants.transactional`) when the history speaks the
   transactional vocabulary, on the client operations only: the ``transactional`` row reports
   those of the taxonomy's ``transactional`` group (isolation), the ``delivery`` row those of its
   ``delivery`` group (loss, garbage, positions, order, timing), each with which of its checks had
   something to judge (:mod:`invariants.applicability`);
4. with them, in the ``delivery`` row, the delivery oracle (:mod:`invariants.client_visible`):
   what a consumer may and must receive, stated from the rules pages without the reference
   machines, so a slip the reference and its per-object models share is still seen.

A row's verdict is ``illegal`` for a safety anomaly, ``late`` for a liveness miss only, ``ok``, or
``skipped`` when none of its checks had anything to judge.

A history that no checker applies to is bad input; a model or machine that raises is an ``error``
verdict with its traceback, never a pass.  Verdicts are ranked once, in :class:`Outcome`.
"""

from __future__ import annotations

import enum
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from invariants.heap import without_cyclic_gc
from spec.history import Operation

if TYPE_CHECKING:
    from invariants.client_visible import OracleResult
    from invariants.explain import Counterexample
    from invariants.transactional import TxnResult

__all__ = [
    "GENERIC_KINDS",
    "MACHINE_KINDS",
    "TXN_VOCABULARY",
    "DeliveryExplanation",
    "LinearizabilityCheck",
    "ModelPlan",
    "Outcome",
    "TxnExplanation",
    "UnknownModel",
    "VerdictRow",
    "VerifyOptions",
    "check_grouped",
    "check_histories",
    "check_history",
    "check_linearizability",
    "duplicate_histories",
    "failing_part",
    "plan_models",
    "worst",
]

# Which object kind a reference machine's model checks (the engine's per-object histories).
MACHINE_KINDS: Mapping[str, str] = {
    "coordinator": "coordinator",
    "buffer": "partition",
    "pending_ack": "subscription",
    "delayed": "tracker",
    "batched_log": "log",
}
GENERIC_KINDS: Mapping[str, str] = {"register": "register", "cas-register": "register", "kv": "key"}
TXN_VOCABULARY = frozenset({"send", "receive", "commit", "abort", "ack", "ack_cumulative"})


class Outcome(enum.StrEnum):
    """A verdict, from best to worst: the one ranking every summary uses (:func:`worst`).

    ``skipped`` is an object the search did not reach because another object of its history was
    already illegal, or a checker none of whose checks had anything to judge in the history (no
    transaction, say): not a pass; ``late`` a liveness miss (something the history shows came later
    than a bound allows, the bound and the lateness stated), apart from ``illegal``, a safety
    violation; ``error`` is a model or machine that raised (a programming error); ``bad-input`` a
    file or row that breaks the history contract, which makes every other verdict of it
    meaningless."""

    OK = "ok"
    SKIPPED = "skipped"
    UNKNOWN = "unknown"
    LATE = "late"
    ILLEGAL = "illegal"
    ERROR = "error"
    BAD_INPUT = "bad-input"

    @property
    def rank(self) -> int:
        return _ORDER.index(self)


_ORDER = tuple(Outcome)


def worst(verdicts: Iterable[str]) -> Outcome:
    """The worst of some verdicts (``ok`` for none); unknown spellings are an error."""
    return max((Outcome(v) for v in verdicts), key=lambda o: o.rank, default=Outcome.OK)


@dataclass(frozen=True)
class VerifyOptions:
    """How to check: ``model`` (``auto`` or a ``--model`` name), the search's step budget per object,
    wall-clock and memory budgets per history, and whether to shrink and render counterexamples."""

    model: str = "auto"
    step_budget: int = 2_000_000
    seconds: float | None = 60.0
    counterexamples: bool = True
    memory_mb: int | None = 1024
    ww_deps: bool = False  # a Kafka-workload history: infer write-write dependencies (Jepsen's :ww-deps)


@dataclass(frozen=True)
class TxnExplanation:
    """Why a history's transactional check failed: its result, the client operations it judged, and
    whether a page is wanted (``--no-counterexamples`` keeps the text only)."""

    result: TxnResult
    ops: tuple[Operation, ...]
    seed: int | None
    reproduce: str | None
    page: bool


@dataclass(frozen=True)
class DeliveryExplanation:
    """Why a history's delivery check failed: the oracle's result, and the Elle-style anomalies of the
    ``delivery`` group (:func:`invariants.transactional.of_group`) with the client operations they
    name, for the page (``page``: one is wanted)."""

    history: str
    result: OracleResult
    seed: int | None
    reproduce: str | None
    anomalies: TxnResult | None = None
    ops: tuple[Operation, ...] = ()
    page: bool = False


@dataclass(frozen=True)
class VerdictRow:
    """One verdict: a history and a checker (``linearizability``, ``transactional``, ``delivery``;
    ``input`` and ``crash``).

    A failed check carries its ``explanation`` as data; :func:`views.report.rendered` turns it into
    the ``counterexample`` text and the ``html`` page, the row that is written and shown."""

    history: str
    checker: str
    verdict: str  # an Outcome's value
    file: str
    model: str = ""
    objects: int = 0
    ops: int = 0
    steps: int = 0
    seconds: float = 0.0
    failing_object: str | None = None
    detail: str = ""  # the anomalies (JSON) or the reason
    counterexample: str | None = None
    html: str | None = None
    seed: int | None = None
    reproduce: str | None = None  # the command that reruns the history, when its file recorded the run
    explanation: Counterexample | TxnExplanation | DeliveryExplanation | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("html", "explanation")}


class UnknownModel(Exception):
    """``--model`` names neither a generic model nor a reference machine with ``VECTORS``."""


@dataclass(frozen=True)
class ModelPlan:
    """One linearizability model to check a history against, and the object kind it checks (None:
    every object)."""

    model: str
    kind: str | None

    @property
    def machine(self) -> bool:
        """A reference machine's model: it sees only the machine-level operations."""
        return self.model in MACHINE_KINDS


@dataclass(frozen=True)
class LinearizabilityCheck:
    """The linearizability of one history over every planned model: the worst verdict, the totals,
    the first illegal object and its counterexample (when asked for)."""

    verdict: Outcome
    objects: int
    ops: int
    steps: int
    failing_object: str | None
    detail: str
    counterexample: Counterexample | None = None


def plan_models(name: str, ops: Sequence[Operation]) -> list[ModelPlan]:
    """The models to check a history against; ``auto`` picks by the objects present.

    An engine history (machine-level operations present, :func:`spec.history.is_machine_operation`)
    gets every machine whose object kind it holds, in :data:`MACHINE_KINDS` order; a transactional
    history without machine-level rows gets no per-object model unless one is named."""
    from spec.history import is_machine_operation, parse_object

    if name != "auto":
        if name in GENERIC_KINDS:
            return [ModelPlan(name, GENERIC_KINDS[name])]
        return [ModelPlan(name, MACHINE_KINDS.get(name))]
    # each object id parsed once, in the order of first appearance (the same one is refused first)
    kinds = {parse_object(o)[0] for o in dict.fromkeys(op.object for op in ops)}
    if kinds <= {"register"}:
        return [ModelPlan("cas-register", "register")]
    if kinds <= {"key"}:
        return [ModelPlan("kv", "key")]
    machine_kinds = {parse_object(o)[0] for o in dict.fromkeys(op.object for op in ops if is_machine_operation(op))}
    return [ModelPlan(machine, kind) for machine, kind in MACHINE_KINDS.items() if kind in machine_kinds]


def _model_ops(ops: Sequence[Operation], plan: ModelPlan) -> list[Operation]:
    """The operations a model checks: its kind's, and for a machine model of an engine history only
    the machine-level ones (the clients' ``new_txn``, ``send``, ... are not the machine's commands)."""
    from spec.history import is_machine_operation, parse_object

    mine = [op for op in ops if plan.kind is None or parse_object(op.object)[0] == plan.kind]
    if plan.machine and any(is_machine_operation(op) for op in mine):
        mine = [op for op in mine if is_machine_operation(op)]
    return mine


def failing_part(model: Any, ops: Sequence[Operation], result: Any) -> list[Operation]:
    """The part of ``ops`` (as ``model.partition`` splits them: an object, or one crash epoch of a
    machine's object) that ``result``, an ``illegal`` object result, is about."""
    parts: list[list[Operation]] = [part for part in model.partition(ops) if part and part[0].object == result.object]
    for part in parts:
        if result.blocked in {op.index for op in part}:
            return part
    return [op for part in parts for op in part]


def check_linearizability(
    plan: Sequence[ModelPlan], ops: Sequence[Operation], options: VerifyOptions, reproduce: str | None = None
) -> LinearizabilityCheck:
    """Linearizability of each planned model's objects, the worst verdict over all of them.

    The detail is the reasons of the objects not ``ok``; for the machines of an engine history it is
    JSON: ``{"models": {model: {"objects", "epochs", "ops", "steps", "verdict", "object_verdicts",
    "seconds"}}, "reasons": [...]}``, the per-object verdicts by machine."""
    from invariants.explain import explain
    from invariants.linearizability import Verdict, check_history
    from invariants.models import model_by_name

    deadline = None if options.seconds is None else time.monotonic() + options.seconds
    verdict, objects, checked, steps = Outcome.OK, 0, 0, 0
    failing: str | None = None
    reasons: list[str] = []
    per_model: dict[str, dict[str, Any]] = {}
    counterexample = None
    for step in plan:
        try:
            model = model_by_name(step.model)
        except KeyError as exc:
            raise UnknownModel(exc.args[0]) from None
        mine = _model_ops(ops, step)
        seconds = None if deadline is None else max(0.0, deadline - time.monotonic())
        started = time.perf_counter()
        memory = None if options.memory_mb is None else options.memory_mb * 1024 * 1024
        result = check_history(model, mine, step_budget=options.step_budget, seconds=seconds, memory_bytes=memory)
        # A machine's parts are its objects' crash epochs; an object's verdict is its worst epoch's.
        by_object: dict[str, list[str]] = {}
        for part in result.objects:
            by_object.setdefault(part.object, []).append(part.verdict.value)
        object_verdicts = {name: worst(verdicts).value for name, verdicts in by_object.items()}
        per_model[step.model] = {
            "objects": len(by_object),
            "epochs": len(result.objects),
            "ops": len(mine),
            "steps": result.steps,
            "verdict": result.verdict.value,
            "object_verdicts": dict(Counter(object_verdicts.values())),
            "seconds": round(time.perf_counter() - started, 3),
        }
        objects += len(by_object)
        checked += len(mine)
        steps += result.steps
        verdict = worst((verdict, result.verdict.value))
        reasons += [f"{o.object}: {o.reason}" for o in result.objects if o.reason and o.verdict is not Verdict.SKIPPED]
        bad = result.failing()
        if bad is not None and failing is None:
            failing = bad.object
            if options.counterexamples:
                counterexample = replace(explain(model, failing_part(model, mine, bad), bad), reproduce=reproduce)
    detail = "; ".join(reasons)[:2000]
    if all(step.machine for step in plan):
        detail = json.dumps({"models": per_model, "reasons": [r[:500] for r in reasons[:4]]})
    return LinearizabilityCheck(verdict, objects, checked, steps, failing, detail, counterexample)


def _linearizability_row(
    name: str,
    ops: Sequence[Operation],
    plan: Sequence[ModelPlan],
    file: str,
    options: VerifyOptions,
    seed: int | None,
    reproduce: str | None,
) -> VerdictRow:
    started = time.perf_counter()
    found = check_linearizability(plan, ops, options, reproduce)
    return VerdictRow(
        name,
        "linearizability",
        found.verdict.value,
        file,
        "+".join(step.model for step in plan),
        found.objects,
        found.ops,
        found.steps,
        time.perf_counter() - started,
        found.failing_object,
        found.detail,
        seed=seed,
        reproduce=reproduce,
        explanation=found.counterexample,
    )


def _client_rows(
    name: str,
    ops: Sequence[Operation],
    client_ops: Sequence[Operation],
    file: str,
    options: VerifyOptions,
    seed: int | None,
    reproduce: str | None,
    progress: Progress | None = None,
) -> list[VerdictRow]:
    """The ``transactional`` and ``delivery`` rows of a history with client operations.

    One analysis feeds the Elle-style anomalies (:mod:`invariants.transactional`) and which of them
    had something to judge (:mod:`invariants.applicability`); each anomaly goes to the row of its
    group in the taxonomy: ``transactional`` (isolation: needs transactions) or ``delivery`` (what any
    Pulsar-protocol broker owes a consumer), where the delivery oracle's violations
    (:mod:`invariants.client_visible`) and Jepsen's anomalies that mean something for Pulsar
    (:mod:`invariants.queue`) join it.  The delivery checks read the coordinator's machine rows too,
    as the record of the faults that disturbed a transaction's end (TC-16, TC-24, TC-25).  A
    Kafka-workload history is judged by Jepsen's taxonomy alone, in one ``transactional`` row."""
    from invariants.applicability import applicability_of
    from invariants.client_visible import TABLE as ORACLE_TABLE
    from invariants.queue import is_kafka_history
    from invariants.transactional import LIVENESS, TAXONOMY, TxnAnalysis, check_transactional, of_group

    told = progress if progress is not None else _silent
    if is_kafka_history(client_ops):
        return [_kafka_row(name, client_ops, file, options, seed, reproduce, told)]
    # the analysis, each check, Jepsen's taxonomy, the oracle's view
    steps = 3 + len(TAXONOMY) + len(ORACLE_TABLE)
    done = [0]

    def checked(what: str) -> None:
        done[0] += 1
        told(done[0] / steps, what)

    started = time.perf_counter()
    told(0.0, "reading what the clients saw")
    analysis = TxnAnalysis.build(client_ops)
    checked("transactional checks")
    found = check_transactional(client_ops, analysis=analysis, on_check=checked, ww_deps=options.ww_deps)
    applies = applicability_of(analysis, found)
    elle_seconds = time.perf_counter() - started
    txn, delivery = of_group(found, "transactional"), of_group(found, "delivery")
    statements = {group: {a.check: a.to_json() for a in applies if a.group == group} for group in GROUPS_ORDER}
    # what each of Jepsen's checks had to judge, beside the row that reports its anomalies
    statements["delivery"].update((jepsen.check, jepsen.to_json()) for jepsen in delivery.statements)
    txn_row = VerdictRow(
        name,
        "transactional",
        _outcome(txn.counts, LIVENESS, any(s["applies"] for s in statements["transactional"].values())).value,
        file,
        "elle",
        txn.txns,
        len(client_ops),
        0,
        elle_seconds,
        None,
        json.dumps(
            {
                "counts": txn.counts,
                "anomalies": [a.to_json() for a in txn.anomalies],
                "applicability": statements["transactional"],
            }
        ),
        seed=seed,
        reproduce=reproduce,
        explanation=None
        if txn.ok
        else TxnExplanation(txn, tuple(client_ops), seed, reproduce, page=options.counterexamples),
    )
    told(done[0] / steps, "delivery checks")
    delivery_row = _delivery_row(name, ops, client_ops, file, options, seed, reproduce, delivery, statements, checked)
    return [txn_row, delivery_row]


def _delivery_row(
    name: str,
    ops: Sequence[Operation],
    client_ops: Sequence[Operation],
    file: str,
    options: VerifyOptions,
    seed: int | None,
    reproduce: str | None,
    delivery: TxnResult,
    statements: Mapping[str, Mapping[str, Any]],
    checked: Callable[[str], None],
) -> VerdictRow:
    """The ``delivery`` row: the delivery group's anomalies (``delivery``, with Jepsen's on a Pulsar
    history) and the delivery oracle's violations, judged here, with their ``statements``."""
    from invariants.client_visible import LIVENESS as ORACLE_LIVENESS
    from invariants.client_visible import check_client_visible
    from invariants.transactional import LIVENESS

    started = time.perf_counter()
    oracle = check_client_visible(ops, on_check=checked)
    counts = {**delivery.counts, **oracle.counts}
    judged = any(oracle.judged.values()) or any(s["applies"] for s in statements["delivery"].values())
    return VerdictRow(
        name,
        "delivery",
        _outcome(counts, LIVENESS | ORACLE_LIVENESS, judged).value,
        file,
        "client-visible",
        sum(oracle.judged.values()),
        len(client_ops),
        0,
        time.perf_counter() - started,
        None,
        json.dumps(
            {
                "counts": counts,
                "judged": oracle.judged,
                "violations": [v.to_json() for v in oracle.violations],
                "anomalies": [a.to_json() for a in delivery.anomalies],
                # reported, never failing the history (invariants.queue)
                "informational": {
                    "counts": delivery.notes,
                    "anomalies": [a.to_json() for a in delivery.informational],
                },
                "applicability": statements["delivery"],
            }
        ),
        seed=seed,
        reproduce=reproduce,
        explanation=None
        if not counts
        else DeliveryExplanation(name, oracle, seed, reproduce, delivery, tuple(client_ops), options.counterexamples),
    )


GROUPS_ORDER = ("delivery", "transactional")


def _kafka_row(
    name: str,
    client_ops: Sequence[Operation],
    file: str,
    options: VerifyOptions,
    seed: int | None,
    reproduce: str | None,
    told: Progress,
) -> VerdictRow:
    """The one row of a Kafka-workload history: Jepsen's taxonomy with Jepsen's meaning
    (:mod:`invariants.queue`), what each of its checks had to judge, and the informational
    anomalies apart (they never fail the history)."""
    from invariants.transactional import LIVENESS, check_transactional

    started = time.perf_counter()
    told(0.0, "Jepsen's Kafka-workload checks")
    txn = check_transactional(client_ops, ww_deps=options.ww_deps)
    told(1.0, "Jepsen's Kafka-workload checks done")
    applies = {found.check: found.to_json() for found in txn.statements}
    return VerdictRow(
        name,
        "transactional",
        _outcome(txn.counts, LIVENESS, any(s["applies"] for s in applies.values())).value,
        file,
        "elle",
        txn.txns,
        len(client_ops),
        0,
        time.perf_counter() - started,
        None,
        json.dumps(
            {
                "counts": txn.counts,
                "anomalies": [a.to_json() for a in txn.anomalies],
                # reported, never failing the history (invariants.queue)
                "informational": {"counts": txn.notes, "anomalies": [a.to_json() for a in txn.informational]},
                "applicability": applies,
            }
        ),
        seed=seed,
        reproduce=reproduce,
        explanation=None
        if txn.ok
        else TxnExplanation(txn, tuple(client_ops), seed, reproduce, page=options.counterexamples),
    )


def _outcome(counts: Mapping[str, int], liveness: frozenset[str], judged: bool) -> Outcome:
    """A client row's verdict from its counts per check: ``illegal`` for any safety anomaly, else
    ``late`` for a liveness miss (a bound the history states or the checker states, missed), else
    ``ok``; ``skipped`` when none of its checks had anything to judge (not a pass)."""
    if any(name not in liveness for name in counts):
        return Outcome.ILLEGAL
    if counts:
        return Outcome.LATE
    return Outcome.OK if judged else Outcome.SKIPPED


def check_history(
    name: str,
    ops: Sequence[Operation],
    file: str,
    options: VerifyOptions,
    reproduce: str | None = None,
    progress: Progress | None = None,
) -> list[VerdictRow]:
    """Every checker that applies to one history: a ``linearizability`` row when a model applies, a
    ``transactional`` and a ``delivery`` row when clients sent, received, acked or ended
    transactions; an ``input`` row
    (``bad-input``) when nothing applies or the history breaks the contract, a ``crash`` row
    (``error``) when a model or machine raised.  ``reproduce`` (the command that reruns the history,
    when its file recorded the run) goes into the rows and their counterexamples.  ``progress`` is
    told, as the checks go, the share of this history's checking done so far (0 to 1) and what runs:
    a long history is never silent until its end."""
    from spec.errors import InputError
    from spec.history import is_machine_operation

    seed = next((op.seed for op in ops if op.seed is not None), None)
    rows: list[VerdictRow] = []
    told = progress if progress is not None else _silent
    try:
        from invariants.queue import is_kafka_history

        # A Kafka-workload history holds client operations only, and no object a model checks
        kafka = is_kafka_history(ops)
        plan = [] if kafka and options.model == "auto" else plan_models(options.model, ops)
        # The transactional checks read what clients saw, not the machines' steps.
        client_ops = ops if kafka else [op for op in ops if not is_machine_operation(op)]
        transactional = any(op.f in TXN_VOCABULARY for op in client_ops)
        # each checker's share of the work, by the operations it reads
        share = len(ops) - len(client_ops) if plan and transactional else len(ops) if plan else 0
        lin = share / max(1, share + (len(client_ops) if transactional else 0))
        if plan:
            told(0.0, "linearizability")
            rows.append(_linearizability_row(name, ops, plan, file, options, seed, reproduce))
            told(lin, "linearizability done")
        if transactional:
            # One window without cyclic collection for both rows (invariants.heap): the first
            # collection after a window walks every object made in it that is still alive, so a
            # window per check walked the analysis once more after building it; here it is gone by
            # the window's end.
            with without_cyclic_gc():
                rows.extend(
                    _client_rows(
                        name,
                        ops,
                        client_ops,
                        file,
                        options,
                        seed,
                        reproduce,
                        lambda f, what: told(lin + (1 - lin) * f, what),
                    )
                )
        if not plan and not transactional:
            detail = "no checker applies: no --model for these objects and no transactional operations"
            rows.append(_bad_input(name, file, options.model, detail))
    except InputError as exc:
        rows.append(_bad_input(name, file, options.model, f"{file}: {exc}", seed))
    except UnknownModel as exc:
        rows.append(_bad_input(name, file, options.model, str(exc), seed))
    except Exception as exc:  # a model or machine raised: a programming error, reported, never hidden
        import traceback

        detail = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"
        rows.append(VerdictRow(name, "crash", Outcome.ERROR.value, file, options.model, seed=seed, detail=detail))
    told(1.0, "done")
    return rows


# How far the checking of one history is (0 to 1) and what runs now: see check_history.
Progress = Callable[[float, str], None]


def _silent(done: float, what: str) -> None:
    """No one is told."""


def _bad_input(name: str, file: str, model: str, detail: str, seed: int | None = None) -> VerdictRow:
    return VerdictRow(name, "input", Outcome.BAD_INPUT.value, file, model, detail=detail, seed=seed)


def check_histories(
    histories: Mapping[str, Sequence[Operation]], file: str, options: VerifyOptions
) -> list[VerdictRow]:
    """Every checker on each history of one file."""
    return [row for name, ops in histories.items() for row in check_history(name, ops, file, options)]


def check_grouped(
    history: str, parts: Sequence[tuple[str, Sequence[Operation]]], options: VerifyOptions
) -> list[VerdictRow]:
    """A history whose rows came from several files (``(file, rows)`` parts): put back in index
    order, validated as a whole (the cross-row rules need every row), then checked."""
    from spec.history import BadHistory, validate_history

    files = ", ".join(sorted({path for path, _ in parts}))
    ops = sorted((op for _, chunk in parts for op in chunk), key=lambda op: op.index)
    try:
        validate_history(ops, where=files)
    except BadHistory as exc:
        return [_bad_input(history, files, options.model, str(exc))]
    return check_histories({history: ops}, files, options)


def duplicate_histories(rows: Iterable[VerdictRow]) -> list[VerdictRow]:
    """A ``bad-input`` row for each history id found in two files (a history lives in one file)."""
    files: dict[str, set[str]] = {}
    for row in rows:
        if row.checker != "input":
            files.setdefault(row.history, set()).add(row.file)
    return [
        VerdictRow(
            history,
            "input",
            Outcome.BAD_INPUT.value,
            ", ".join(sorted(where)),
            detail=f"history {history!r} appears in several files: {', '.join(sorted(where))}",
        )
        for history, where in sorted(files.items())
        if len(where) > 1
    ]
