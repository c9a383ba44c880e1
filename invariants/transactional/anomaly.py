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
    # The informational anomalies (invariants.queue): reported, never failing the history; their counts.
    informational: tuple[Anomaly, ...] = ()
    notes: dict[str, int] = field(default_factory=dict)
    statements: tuple[Statement, ...] = ()  # what each check of invariants.queue had to judge

    @property
    def ok(self) -> bool:
        return not self.counts


class Collector:
    """The anomalies of one history: ``cap`` of each kind kept in full, all of them counted.
    ``adya`` names every anomaly a check may add (the taxonomy), with its Adya class."""

    def __init__(self, history: str, cap: int, adya: Mapping[str, str | None]) -> None:
        self.history = history
        self.cap = cap
        self.adya = adya
        self.found: list[Anomaly] = []
        self.counts: dict[str, int] = defaultdict(int)

    def add(
        self, name: str, ops: Iterable[Operation], explanation: str, cycle: tuple[tuple[str, str, str], ...] = ()
    ) -> None:
        assert name in self.adya, name
        self.counts[name] += 1
        if self.counts[name] <= self.cap:
            index = tuple(sorted({o.index for o in ops}))
            self.found.append(Anomaly(name, self.history, index, explanation, cycle, self.adya[name]))


# One anomaly's check: it reads the analysis and adds what it finds.
Check = Callable[[TxnAnalysis, Collector], None]


def fmt_txn(txn: tuple[int, int] | None) -> str:
    return "no txn" if txn is None else f"txn ({txn[0]},{txn[1]})"


def fmt_pos(pos: tuple[int, ...] | None) -> str:
    if pos is None:
        return "?"
    return f"{pos[0]}:{pos[1]}" if len(pos) < 3 or pos[2] == WHOLE else f"{pos[0]}:{pos[1]}#{pos[2]}"
