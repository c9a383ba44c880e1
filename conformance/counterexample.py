"""A run on which the implementation differs from the reference, as a vector file and a viewer page.

The vector holds the run's setup and steps with **the reference's answers as the expectations**
(error names without their messages, as :func:`spec.conform.expected` compares them) and, at the
step where the implementation differs, a check of each observation it got wrong: the reference
passes it, the implementation fails it, and once the implementation is fixed it is a regression
vector (``docs/conform.md``).  A crash is two vector steps, ``crash`` then ``recover``.

The page is a model-checking trace page (:func:`views.trace.trace_page`) with two components, the
reference and the implementation: after each step, each side's answer and observations, so the
step where they part is one click away.  Its data is also written as a ``txnmodel-trace`` JSON
document.  Pure: documents in, documents out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.differential import Exchange
from conformance.strategies.base import Setup
from reference.conformance import matches
from spec import conform

__all__ = ["ConformTrace", "trace_document", "vector_document"]


def _expect(answer: Mapping[str, Any]) -> dict[str, Any]:
    return conform.expected(answer)


def vector_document(
    machine: str,
    setup: Setup,
    steps: Sequence[Exchange],
    *,
    vector_id: str,
    description: str,
    source: str,
) -> dict[str, Any]:
    """The run as a vector (``spec/vectors.schema.json``)."""
    out: list[dict[str, Any]] = []
    for index, exchange in enumerate(steps):
        last = index == len(steps) - 1
        if exchange.is_crash:
            out.append({"command": "crash", "expect": "ok"})
            step: dict[str, Any] = {"command": "recover", "args": dict(exchange.args)}
        else:
            step = {"command": exchange.name, "args": dict(exchange.args)}
        step["expect"] = _expect(exchange.reference)
        checks = _differing_checks(exchange) if last else []
        if checks:
            step["check"] = checks
        out.append(step)
    document: dict[str, Any] = {
        "id": vector_id,
        "machine": machine,
        "description": description,
        "source": source,
    }
    if setup.config:
        document["config"] = dict(setup.config)
    if setup.init:
        document["init"] = dict(setup.init)
    document["steps"] = out
    return document


def _differing_checks(exchange: Exchange) -> list[dict[str, Any]]:
    checks = []
    for (observer, args), mine, theirs in zip(
        exchange.observations, exchange.reference_observed, exchange.implementation_observed, strict=False
    ):
        want = conform.expected_value(mine)
        if not matches(want, theirs):
            check: dict[str, Any] = {"observe": observer, "equals": want}
            if args:
                check = {"observe": observer, "args": dict(args), "equals": want}
            checks.append(check)
    return checks


# --- the page ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Step:
    actor: str
    action: str
    states: Mapping[str, Any]


@dataclass(frozen=True)
class ConformTrace:
    """What :func:`views.trace.trace_page` reads of a trace (the ``txnmodel-trace`` shape)."""

    model: str
    property_name: str
    message: str
    steps: tuple[_Step, ...]
    components: tuple[str, ...] = ("reference", "implementation")
    initial: Mapping[str, Any] = field(default_factory=lambda: {"reference": {}, "implementation": {}})
    bounds: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "safety"
    loop_from: int | None = None

    @property
    def verdict_text(self) -> str:
        return f"THE IMPLEMENTATION DIFFERS: {self.property_name}"

    def states_before(self, step: int) -> Mapping[str, Any]:
        return self.initial if step == 0 else self.steps[step - 1].states

    @classmethod
    def of(
        cls,
        machine: str,
        steps: Sequence[Exchange],
        verdict: str,
        message: str,
        bounds: Mapping[str, Any],
        setup: Setup | None = None,
    ) -> ConformTrace:
        """The page's trace of ``steps``; before the first step each side shows the ``setup``."""
        shown = []
        for exchange in steps:
            action = "crash, then recover" if exchange.is_crash else exchange.name
            if exchange.args:
                action += " " + json.dumps(exchange.args, separators=(",", ":"))
            states = {
                "reference": _side(exchange, exchange.reference, exchange.reference_observed),
                "implementation": _side(exchange, exchange.implementation, exchange.implementation_observed),
            }
            shown.append(_Step("harness", action, states))
        started = {"config": dict(setup.config), "init": dict(setup.init)} if setup is not None else {}
        initial = {"reference": started, "implementation": started}
        return cls(f"conform {machine}", verdict, message, tuple(shown), initial=initial, bounds=dict(bounds))

    def to_json(self) -> dict[str, Any]:
        """The ``txnmodel-trace`` document (version 1) of this trace."""
        return {
            "format": "txnmodel-trace",
            "version": 1,
            "model": self.model,
            "property": self.property_name,
            "kind": self.kind,
            "message": self.message,
            "bounds": dict(self.bounds),
            "initial": dict(self.initial),
            "steps": [{"actor": s.actor, "action": s.action, "states": dict(s.states)} for s in self.steps],
            "loop_from": None,
        }


def _side(exchange: Exchange, answer: Mapping[str, Any], observed: Sequence[Any]) -> dict[str, Any]:
    side: dict[str, Any] = {"answer": dict(answer) if answer else "no answer"}
    for (observer, args), value in zip(exchange.observations, observed, strict=False):
        label = observer + (json.dumps(list(args.values()), separators=(",", ":")) if args else "")
        side[label] = value
    return side


def trace_document(trace: ConformTrace) -> dict[str, Any]:
    return trace.to_json()
