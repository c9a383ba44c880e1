"""What an invariant is, so tests, proofs and the bulk checker can all enumerate them.

Each ``invariants/<machine>.py`` exports ``INVARIANTS``: a tuple of :class:`Invariant`, each a
pure predicate over one state of the machine naming the rule ids it states.  Properties over a
*sequence* of states or results (monotonicity, "never returned twice") are :class:`StepProperty`
values over ``(before, command, result, after)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["Invariant", "StepProperty", "violated", "violated_steps"]

S = TypeVar("S")


@dataclass(frozen=True)
class Invariant(Generic[S]):
    name: str
    rules: tuple[str, ...]
    holds: Callable[[S], bool]
    doc: str = ""


@dataclass(frozen=True)
class StepProperty(Generic[S]):
    name: str
    rules: tuple[str, ...]
    holds: Callable[[S, Any, Any, S], bool]  # (before, command, result, after)
    doc: str = ""


def violated(invariants: Iterable[Invariant[S]], state: S) -> list[str]:
    """Names of the invariants ``state`` breaks (empty when all hold)."""
    return [inv.name for inv in invariants if not inv.holds(state)]


def violated_steps(properties: Iterable[StepProperty[S]], before: S, command: Any, result: Any, after: S) -> list[str]:
    return [p.name for p in properties if not p.holds(before, command, result, after)]
