"""Small drivers shared by the delayed-delivery tests."""

from __future__ import annotations

from typing import Any

from invariants.base import violated, violated_steps
from invariants.delayed import INVARIANTS, STEP_PROPERTIES
from reference import delayed as d
from spec.config import Config
from spec.result import Err, Ok


def config(**overrides: Any) -> Config:
    return Config().with_overrides(overrides)


def bucket(**overrides: Any) -> d.BucketTracker:
    state = d.initial(config(**overrides))
    assert isinstance(state, d.BucketTracker)
    return state


def run(state: d.Tracker, command: Any) -> tuple[Any, Ok[Any] | Err]:
    """Step and check every invariant and step property."""
    after, result = d.step(state, command)
    assert violated(INVARIANTS, after) == [], (command, violated(INVARIANTS, after))
    assert violated_steps(STEP_PROPERTIES, state, command, result, after) == [], command
    return after, result


def add(state: Any, ledger: int, entry: int, deliver_at: int, now: int = 0) -> tuple[Any, bool]:
    state, result = run(state, d.AddMessage(ledger, entry, deliver_at, now))
    assert isinstance(result, Ok)
    return state, bool(result.value)


def get(state: Any, max_messages: int, now: int) -> tuple[Any, list[tuple[int, int]]]:
    state, result = run(state, d.GetScheduledMessages(max_messages, now))
    assert isinstance(result, Ok)
    return state, [(p.ledger_id, p.entry_id) for p in result.value]
