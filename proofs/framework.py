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

A proof that is never refuted can be vacuous, so every machine also keeps a *mutant*: a broken
transition that must produce a counterexample (``tests/<machine>/test_proofs.py``).
"""

from __future__ import annotations

import enum
import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from spec.machines import MACHINES, machine_info

__all__ = [
    "Obligation",
    "Outcome",
    "Row",
    "Verdict",
    "format_table",
    "prove_inductive",
    "prove_machine",
    "prove_valid",
]


class Verdict(enum.Enum):
    PROVED = "proved"
    COUNTEREXAMPLE = "counterexample"
    UNKNOWN = "unknown"


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
    check: Callable[[int], Outcome]  # the argument is the Z3 timeout in milliseconds


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

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "property": self.name,
            "rules": list(self.rules),
            "verdict": self.verdict.value,
            "bound": self.bound,
            "seconds": round(self.seconds, 4),
            "counterexample": self.counterexample,
            "reason": self.reason,
        }


def prove_valid(
    claim: z3.BoolRef,
    *,
    timeout_ms: int,
    describe: Callable[[z3.ModelRef], str] | None = None,
    assumptions: Sequence[z3.BoolRef] = (),
) -> Outcome:
    """Is ``assumptions => claim`` valid?

    Quantified queries can diverge under one search order and finish at once under another (seen
    here: 0.02 s on its own, over 30 s after other proofs had filled the same Z3 context), so the
    budget is split over a few random seeds.  The verdict does not depend on the seed: ``unsat``
    under any seed is a proof and ``sat`` under any seed is a real counterexample.
    """
    reasons: list[str] = []
    # The first seed gets most of the budget (a slow but converging proof needs it); a diverging one
    # is then retried briefly under other seeds, where it typically finishes in milliseconds.
    budgets = [timeout_ms * 3 // 5] + [timeout_ms // (5 * (_SEEDS - 1)) * 2] * (_SEEDS - 1)
    for seed, budget in enumerate(budgets):
        solver = z3.Solver()
        solver.set("timeout", max(1, budget))
        solver.set("random_seed", seed)
        solver.set("smt.random_seed", seed)
        solver.add(*assumptions)
        solver.add(z3.Not(claim))
        answer = solver.check()
        if answer == z3.unsat:
            return Outcome(Verdict.PROVED)
        if answer == z3.sat:
            model = solver.model()
            text = describe(model) if describe is not None else str(model)
            return Outcome(Verdict.COUNTEREXAMPLE, counterexample=text)
        reasons.append(f"seed {seed}: {solver.reason_unknown()}")
    return Outcome(Verdict.UNKNOWN, reason="; ".join(reasons))


_SEEDS = 3


def prove_inductive(
    *,
    init: z3.BoolRef,
    inv: z3.BoolRef,
    trans: z3.BoolRef,
    inv_next: z3.BoolRef,
    timeout_ms: int,
    describe: Callable[[z3.ModelRef], str] | None = None,
    background: Sequence[z3.BoolRef] = (),
) -> Outcome:
    """``init => inv`` and ``inv /\\ trans => inv'``; the first failure is reported."""
    base = prove_valid(z3.Implies(init, inv), timeout_ms=timeout_ms, describe=describe, assumptions=background)
    if base.verdict is not Verdict.PROVED:
        return base
    return prove_valid(
        z3.Implies(z3.And(inv, trans), inv_next), timeout_ms=timeout_ms, describe=describe, assumptions=background
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


def count_obligations(machine: str, only: str | None = None) -> int:
    """How many properties :func:`prove_machine` will check (for progress)."""
    return sum(1 for ob in _obligations(machine) or () if only is None or only in ob.name)


def prove_machine(
    machine: str,
    *,
    timeout_ms: int = 30_000,
    only: str | None = None,
    on_row: Callable[[Row], None] | None = None,
) -> list[Row]:
    """Every obligation of ``machine`` (those whose name contains ``only``); ``on_row`` hears each
    row as it is decided (progress)."""
    obligations = _obligations(machine)
    if obligations is None:
        raise KeyError(f"machine {machine!r} has no proofs yet (proofs/{machine_info(machine).module}.py)")
    rows: list[Row] = []
    for ob in obligations:
        if only is not None and only not in ob.name:
            continue
        started = time.perf_counter()
        try:
            outcome = ob.check(timeout_ms)
        except z3.Z3Exception as exc:
            outcome = Outcome(Verdict.UNKNOWN, reason=f"z3 error: {exc}")
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
            )
        )
        if on_row is not None:
            on_row(rows[-1])
    return rows


def format_table(rows: Sequence[Row]) -> str:
    headers = ("machine", "property", "rules", "verdict", "bound", "seconds")
    body = [(r.machine, r.name, ",".join(r.rules), r.verdict.value, r.bound, f"{r.seconds:.3f}") for r in rows]
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
