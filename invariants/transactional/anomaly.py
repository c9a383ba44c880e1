"""What a transactional check reports: an :class:`Anomaly` (its name, its Adya class where there is
one, the operations that prove it and why, in words), the :class:`Collector` every check adds to,
and the :class:`TxnResult` of a whole history.  Data only: :mod:`views.report` renders it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from invariants.analysis import WHOLE, TxnAnalysis
from invariants.queue.taxonomy import Statement
from spec.history import Operation

__all__ = ["Anomaly", "Check", "Collector", "TxnResult", "fmt_pos", "fmt_txn"]


@dataclass(frozen=True)
class Anomaly:
    name: str
    history: str
    ops: tuple[int, ...]
    explanation: str
    # The dependency cycle, for the anomalies that are one (G1c): (from, to, why) per edge, in order.
    cycle: tuple[tuple[str, str, str], ...] = ()
    adya: str | None = None  # the Adya class it is the Pulsar analogue of, where there is one
    where: str | None = None  # the object it is about, as reports name it (:class:`invariants.words.Words`)
    # How far off, as numbers (ms): past its bound (a liveness miss; None with a bound: it never
    # came), before its time (an early delivery), and the bound or allowance it was judged against.
    late_ms: int | None = None
    early_ms: int | None = None
    bound_ms: int | None = None
    informational: bool = False  # reported, but the history does not fail for it (invariants.queue)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "adya": self.adya,
            "ops": list(self.ops),
            "explanation": self.explanation,
        }
        if self.cycle:
            out["cycle"] = [list(edge) for edge in self.cycle]
        if self.where is not None:
            out["object"] = self.where
        if self.bound_ms is not None or self.late_ms is not None:
            out["late_ms"] = self.late_ms
        if self.early_ms is not None:
            out["early_ms"] = self.early_ms
        if self.bound_ms is not None:
            out["bound_ms"] = self.bound_ms
        if self.informational:
            out["informational"] = True
        return out

    def __str__(self) -> str:
        tag = f" ({self.adya})" if self.adya else ""
        note = " [informational]" if self.informational else ""
        return f"{self.name}{tag}{note} ops {list(self.ops)}: {self.explanation}"


@dataclass(frozen=True)
class TxnResult:
    history: str
    anomalies: tuple[Anomaly, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)  # per anomaly name, including ones cut by the cap
    txns: int = 0
    messages: int = 0
    ops: int = 0
    # Per check that counts what it judged (the liveness and timing checks): the cases it judged,
    # and for the cases it could not, why (reason -> how many), so that a check that judged nothing
    # says why instead of passing (:mod:`invariants.applicability`).
    judged: dict[str, int] = field(default_factory=dict)
    unjudged: dict[str, dict[str, int]] = field(default_factory=dict)
    legend: str = ""  # what the explanations' times and names leave out (:meth:`invariants.words.Words.legend`)
    # The informational anomalies (invariants.queue): reported, never failing the history; their counts.
    informational: tuple[Anomaly, ...] = ()
    notes: dict[str, int] = field(default_factory=dict)
    statements: tuple[Statement, ...] = ()  # what each check of invariants.queue had to judge

    @property
    def ok(self) -> bool:
        return not self.counts


class Collector:
    """The anomalies of one history: ``cap`` of each kind kept in full, all of them counted.
    ``adya`` names every anomaly a check may add (the taxonomy), with its Adya class.  A check
    that can say which cases it judged counts them (:meth:`judge`, :meth:`cannot_judge`)."""

    def __init__(self, history: str, cap: int, adya: Mapping[str, str | None]) -> None:
        self.history = history
        self.cap = cap
        self.adya = adya
        self.found: list[Anomaly] = []
        self.counts: dict[str, int] = defaultdict(int)
        self.judged: dict[str, int] = defaultdict(int)
        self.unjudged: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def add(
        self,
        name: str,
        ops: Iterable[Operation],
        explanation: str,
        cycle: tuple[tuple[str, str, str], ...] = (),
        *,
        where: str | None = None,
        late_ms: int | None = None,
        early_ms: int | None = None,
        bound_ms: int | None = None,
    ) -> None:
        assert name in self.adya, name
        self.counts[name] += 1
        if self.counts[name] <= self.cap:
            index = tuple(sorted({o.index for o in ops}))
            self.found.append(
                Anomaly(
                    name, self.history, index, explanation, cycle, self.adya[name], where, late_ms, early_ms, bound_ms
                )
            )

    def counts_cases(self, name: str) -> None:
        """``name`` counts the cases it judges: if it judges none, it cannot judge the history
        (:func:`invariants.applicability.applicability_of`), whatever the history holds."""
        self.judged[name] += 0

    def judge(self, name: str) -> None:
        """One case ``name`` judged (whatever it found)."""
        self.judged[name] += 1

    def cannot_judge(self, name: str, why: str) -> None:
        """One case ``name`` could not judge, and why (one short clause: it is counted by its words)."""
        self.unjudged[name][why] += 1


# One anomaly's check: it reads the analysis and adds what it finds.
Check = Callable[[TxnAnalysis, Collector], None]


def fmt_txn(txn: tuple[int, int] | None) -> str:
    return "no txn" if txn is None else f"txn ({txn[0]},{txn[1]})"


def fmt_pos(pos: tuple[int, ...] | None) -> str:
    if pos is None:
        return "?"
    return f"{pos[0]}:{pos[1]}" if len(pos) < 3 or pos[2] == WHOLE else f"{pos[0]}:{pos[1]}#{pos[2]}"
