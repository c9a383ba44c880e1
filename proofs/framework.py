"""The shape every Z3 proof takes, and the table ``txnmodel prove`` prints.

Each ``proofs/<machine>.py`` exports ``OBLIGATIONS``: a tuple of :class:`Obligation`.  An
obligation is one claim (an invariant holds initially, an invariant is preserved by one command,
a safety property follows from the invariants), with the rule ids it covers and the bound under
which it is checked ("unbounded" when the encoding quantifies over all states).

The helpers here turn a Z3 formula into a verdict:

* :func:`prove_valid` checks ``claim`` is valid by asking Z3 for a model of ``Not(claim)``:
  ``unsat`` is *proved*, ``sat`` is a *counterexample* (rendered by the obligation's
  ``describe`` into a concrete state and command that replays in the reference), anything else
  is *unknown* (timeout, incompleteness).
* :func:`prove_inductive` is the usual pair: ``init => inv`` and ``inv /\\ trans => inv'``.

Budgets are counted in Z3's resource units (``rlimit``), never in seconds: a query given ``n`` units
stops after the same amount of work on a busy and on an idle machine, so its verdict does not
depend on the load (a wall-clock timeout turned proofs into ``unknown`` at load average 5).  Each
query is solved in a fresh Z3 context into which it is translated, so terms and solver state of
earlier proofs in the same process do not enter its search: in the same order of proofs, the same
formula, seed and budget give the same answer and the same count of resources every time.  Across
orders the count still moves a little (Z3's own tables are not independent of what the process did
before): proving each machine after each other one, no query of the current obligations used more
than 1.9 times its least.  A conjunction of several quantified claims proved in one query moved
180-fold (the batched log's five sequence lemmas: half a million units after the buffer's proofs,
90 million after the coordinator's; 13 thousand as five queries), so such claims are
proved one query each (:func:`prove_each`).  ``txnmodel prove`` prints what each obligation used
beside its budget.

A proof that is never refuted can be vacuous, so every machine also keeps a *mutant*: a broken
transition that must produce a counterexample (``tests/<machine>/test_proofs.py``).
"""

from __future__ import annotations

import contextvars
import enum
import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from spec.machines import MACHINES, machine_info

__all__ = [
    "RLIMIT",
    "Obligation",
    "Outcome",
    "Row",
    "Verdict",
    "format_table",
    "obligations_of",
    "prove_each",
    "prove_inductive",
    "prove_machine",
    "prove_valid",
]


class Verdict(enum.Enum):
    PROVED = "proved"
    COUNTEREXAMPLE = "counterexample"
    UNKNOWN = "unknown"


#: The default budget of one Z3 query, in Z3 resource units (its ``rlimit``).  The most any query
#: of the current obligations needs is under a tenth of the first seed's share of it (see
#: ``txnmodel prove``'s rlimit column and docs/contributing.md); a diverging query stops after
#: about ten seconds of work on an idle core.
RLIMIT = 150_000_000


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    counterexample: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Obligation:
    name: str
    rules: tuple[str, ...]
    bound: str
    check: Callable[[int], Outcome]  # the argument is the budget of each Z3 query, in rlimit units


@dataclass
class Usage:
    """The resources one obligation's Z3 queries used (a query's figure sums its seeds' attempts)."""

    queries: int = 0
    most: int = 0  # the largest one query used
    total: int = 0

    def add(self, used: int) -> None:
        self.queries += 1
        self.most = max(self.most, used)
        self.total += used


_USAGE: contextvars.ContextVar[Usage | None] = contextvars.ContextVar("proof_usage", default=None)


@dataclass(frozen=True)
class Row:
    machine: str
    name: str
    rules: tuple[str, ...]
    verdict: Verdict
    bound: str
    seconds: float
    counterexample: str | None = None
    reason: str | None = None
    rlimit: int = 0  # the budget of each query
    rlimit_used: int = 0  # the most one query used (all its seeds' attempts)
    rlimit_total: int = 0  # every query together
    queries: int = 0

    @property
    def margin(self) -> float | None:
        """How many times over the first seed's share of the budget covers the largest query."""
        return _first_share(self.rlimit) / self.rlimit_used if self.rlimit_used else None

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "property": self.name,
            "rules": list(self.rules),
            "verdict": self.verdict.value,
            "bound": self.bound,
            "seconds": round(self.seconds, 4),
            "rlimit": self.rlimit,
            "rlimit_used": self.rlimit_used,
            "rlimit_total": self.rlimit_total,
            "queries": self.queries,
            "counterexample": self.counterexample,
            "reason": self.reason,
        }


def prove_valid(
    claim: z3.BoolRef,
    *,
    rlimit: int,
    describe: Callable[[z3.ModelRef], str] | None = None,
    assumptions: Sequence[z3.BoolRef] = (),
) -> Outcome:
    """Is ``assumptions => claim`` valid, within ``rlimit`` Z3 resource units?

    Quantified queries can diverge under one search order and finish at once under another, so the
    budget is split over a few random seeds: the first gets most of it (a slow but converging proof
    needs it), the others a share each.  The verdict does not depend on the seed: ``unsat`` under any
    seed is a proof and ``sat`` under any seed is a real counterexample.  Each attempt runs in a
    fresh context (see the module docstring), so earlier proofs' terms do not enter its search.
    """
    reasons: list[str] = []
    spent = 0
    try:
        for seed, budget in enumerate(_shares(rlimit)):
            answer, used, model, why = _solve(claim, assumptions, seed, budget)
            spent += used
            if answer == z3.unsat:
                return Outcome(Verdict.PROVED)
            if answer == z3.sat:
                assert model is not None
                text = describe(model) if describe is not None else str(model)
                return Outcome(Verdict.COUNTEREXAMPLE, counterexample=text)
            reasons.append(f"seed {seed}: {why} after {used:,} of {budget:,} rlimit")
        return Outcome(Verdict.UNKNOWN, reason="; ".join(reasons))
    finally:
        usage = _USAGE.get()
        if usage is not None:
            usage.add(spent)


_SEEDS = 3


def _shares(rlimit: int) -> list[int]:
    """The seeds' budgets: 3/5 of ``rlimit`` for the first, 1/5 for each of the other two."""
    rest = rlimit // (5 * (_SEEDS - 1)) * 2
    return [max(1, _first_share(rlimit))] + [max(1, rest)] * (_SEEDS - 1)


def _first_share(rlimit: int) -> int:
    return rlimit * 3 // 5


def _solve(
    claim: z3.BoolRef, assumptions: Sequence[z3.BoolRef], seed: int, rlimit: int
) -> tuple[z3.CheckSatResult, int, z3.ModelRef | None, str]:
    """One attempt: (answer, resources used, model in the caller's context, reason if unknown)."""
    home = claim.ctx
    ctx = z3.Context()
    solver = z3.Solver(ctx=ctx)
    solver.set("random_seed", seed)
    solver.set("smt.random_seed", seed)
    solver.set("rlimit", rlimit)
    for fact in assumptions:
        solver.add(fact.translate(ctx))
    solver.add(z3.Not(claim).translate(ctx))
    answer = solver.check()
    stats = solver.statistics()
    used = int(stats.get_key_value("rlimit count")) if "rlimit count" in stats.keys() else 0  # noqa: SIM118 (no __contains__)
    model = solver.model().translate(home) if answer == z3.sat else None
    why = solver.reason_unknown() if answer == z3.unknown else ""
    return answer, used, model, why


def prove_each(
    claims: Sequence[z3.BoolRef],
    *,
    rlimit: int,
    describe: Callable[[z3.ModelRef], str] | None = None,
    assumptions: Sequence[z3.BoolRef] = (),
) -> Outcome:
    """Is each of ``claims`` valid (under ``assumptions``)?  One query per claim, the first that is
    not proved reported: the same verdict as their conjunction, but a conjunction of quantified
    claims makes Z3 search all of them at once, and that search's cost swings with things no
    formula states (the same five sequence lemmas took 0.5 M resource units or 90 M depending on
    which proofs the process ran before), while each claim alone takes a few thousand."""
    for claim in claims:
        outcome = prove_valid(claim, rlimit=rlimit, describe=describe, assumptions=assumptions)
        if outcome.verdict is not Verdict.PROVED:
            return outcome
    return Outcome(Verdict.PROVED)


def prove_inductive(
    *,
    init: z3.BoolRef,
    inv: z3.BoolRef,
    trans: z3.BoolRef,
    inv_next: z3.BoolRef,
    rlimit: int,
    describe: Callable[[z3.ModelRef], str] | None = None,
    background: Sequence[z3.BoolRef] = (),
) -> Outcome:
    """``init => inv`` and ``inv /\\ trans => inv'``; the first failure is reported."""
    base = prove_valid(z3.Implies(init, inv), rlimit=rlimit, describe=describe, assumptions=background)
    if base.verdict is not Verdict.PROVED:
        return base
    return prove_valid(
        z3.Implies(z3.And(inv, trans), inv_next), rlimit=rlimit, describe=describe, assumptions=background
    )


def _obligations(machine: str) -> tuple[Obligation, ...] | None:
    info = machine_info(machine)
    try:
        module = importlib.import_module(f"proofs.{info.module}")
    except ModuleNotFoundError as exc:
        if exc.name == f"proofs.{info.module}":
            return None
        raise
    obligations = getattr(module, "OBLIGATIONS", None)
    return tuple(obligations) if obligations is not None else None


def available_machines() -> list[str]:
    """Machines whose proofs module exists, in registry order (a module shared by two machine
    names is listed once)."""
    names: list[str] = []
    seen_modules: set[str] = set()
    for info in MACHINES:
        if info.module in seen_modules:
            continue
        if _obligations(info.name) is not None:
            names.append(info.name)
            seen_modules.add(info.module)
    return names


def obligations_of(machine: str, only: str | None = None) -> tuple[Obligation, ...]:
    """The obligations of ``machine`` (those whose name contains ``only``); ``KeyError`` for an
    unknown machine or one without proofs."""
    obligations = _obligations(machine)
    if obligations is None:
        raise KeyError(f"machine {machine!r} has no proofs yet (proofs/{machine_info(machine).module}.py)")
    return tuple(ob for ob in obligations if only is None or only in ob.name)


def count_obligations(machine: str, only: str | None = None) -> int:
    """How many properties :func:`prove_machine` will check (for progress)."""
    return sum(1 for ob in _obligations(machine) or () if only is None or only in ob.name)


def prove_machine(
    machine: str,
    *,
    rlimit: int = RLIMIT,
    only: str | None = None,
    on_row: Callable[[Row], None] | None = None,
) -> list[Row]:
    """Every obligation of ``machine`` (or those whose name contains ``only``), each query within
    ``rlimit`` Z3 resource units; ``on_row`` hears each row as it is decided (progress)."""
    rows: list[Row] = []
    for ob in obligations_of(machine, only):
        started = time.perf_counter()
        usage = Usage()
        token = _USAGE.set(usage)
        try:
            outcome = ob.check(rlimit)
        except z3.Z3Exception as exc:
            outcome = Outcome(Verdict.UNKNOWN, reason=f"z3 error: {exc}")
        finally:
            _USAGE.reset(token)
        rows.append(
            Row(
                machine=machine,
                name=ob.name,
                rules=ob.rules,
                verdict=outcome.verdict,
                bound=ob.bound,
                seconds=time.perf_counter() - started,
                counterexample=outcome.counterexample,
                reason=outcome.reason,
                rlimit=rlimit,
                rlimit_used=usage.most,
                rlimit_total=usage.total,
                queries=usage.queries,
            )
        )
        if on_row is not None:
            on_row(rows[-1])
    return rows


def format_table(rows: Sequence[Row]) -> str:
    headers = ("machine", "property", "rules", "verdict", "bound", "rlimit used", "margin", "seconds")
    body = [
        (
            r.machine,
            r.name,
            ",".join(r.rules),
            r.verdict.value,
            r.bound,
            f"{r.rlimit_used:,}",
            f"{r.margin:.0f}x" if r.margin is not None else "-",
            f"{r.seconds:.3f}",
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(line[i]) for line in body)) if body else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for line in body:
        lines.append("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)))
    for r in rows:
        if r.counterexample:
            lines.append(f"\ncounterexample for {r.machine}/{r.name}:\n{r.counterexample}")
        elif r.reason:
            lines.append(f"\n{r.machine}/{r.name}: {r.verdict.value} ({r.reason})")
    return "\n".join(lines)
