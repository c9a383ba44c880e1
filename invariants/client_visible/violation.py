"""What a delivery check reports: a :class:`Violation` (the check, the rules it states, the
operations that prove it and why, in words), the :class:`Collector` every check adds to, and the
:class:`OracleResult` of a whole history.  Data only: :mod:`views.report` renders it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from invariants.client_visible.view import View
from spec.history import Operation

__all__ = ["Check", "Collector", "OracleResult", "Violation"]


@dataclass(frozen=True)
class Violation:
    name: str
    rules: tuple[str, ...]
    history: str
    ops: tuple[int, ...]
    explanation: str
    where: str | None = None  # the object it is about, as reports name it (:class:`invariants.words.Words`)
    # A liveness miss: how far past its bound (None with a bound: it never happened) and the bound (ms).
    late_ms: int | None = None
    bound_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "rules": list(self.rules),
            "ops": list(self.ops),
            "explanation": self.explanation,
        }
        if self.where is not None:
            out["object"] = self.where
        if self.bound_ms is not None:
            out["late_ms"] = self.late_ms
            out["bound_ms"] = self.bound_ms
        return out

    def __str__(self) -> str:
        return f"{self.name} ({', '.join(self.rules)}) ops {list(self.ops)}: {self.explanation}"


@dataclass(frozen=True)
class OracleResult:
    history: str
    violations: tuple[Violation, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)  # per check, including those cut by the cap
    judged: dict[str, int] = field(default_factory=dict)  # per check, how many cases it judged
    legend: str = ""  # what the explanations' times and names leave out (:meth:`invariants.words.Words.legend`)

    @property
    def ok(self) -> bool:
        return not self.counts


class Collector:
    """The violations of one history: ``cap`` of each check kept in full, all of them counted, and
    how many cases each check judged.  ``rules`` names every check (the table of
    :mod:`invariants.client_visible.checks`) with the rule ids it states."""

    def __init__(self, history: str, cap: int, rules: Mapping[str, tuple[str, ...]]) -> None:
        self.history = history
        self.cap = cap
        self.rules = rules
        self.found: list[Violation] = []
        self.counts: dict[str, int] = defaultdict(int)
        self.judged: dict[str, int] = dict.fromkeys(rules, 0)

    def add(
        self,
        name: str,
        ops: Iterable[Operation],
        explanation: str,
        *,
        where: str | None = None,
        late_ms: int | None = None,
        bound_ms: int | None = None,
    ) -> None:
        self.counts[name] += 1
        if self.counts[name] <= self.cap:
            index = tuple(sorted({op.index for op in ops}))
            self.found.append(
                Violation(name, self.rules[name], self.history, index, explanation, where, late_ms, bound_ms)
            )


# One check: it reads the view of a history and adds what it finds.
Check = Callable[[View, Collector], None]
