"""A model checker's counterexample trace, as the viewer reads it: the JSON shape and a typed loader.

The shape (``docs/viewer.md`` has it with an example), version 1::

    {
      "format": "txnmodel-trace",
      "version": 1,
      "model": "ctp",                                  # the composed model's name
      "property": "an aborted message is never dispatched",
      "kind": "safety",                                # or "liveness" (then loop_from is set)
      "message": "...",                                # optional: the checker's words
      "bounds": {"clients": 2, "partitions": 1},       # optional: the bounds explored
      "initial": {"coordinator": STATE, "buffer t0": STATE, ...},
      "steps": [
        {"actor": "client 0", "action": "commit txn (0,1)", "states": {"coordinator": STATE}},
        ...
      ],
      "loop_from": null                                # liveness: the step index the lasso loops back to
    }

``initial`` names every component (its keys, in order, are the components shown); a step's
``states`` holds the components it changed, or all of them: a component a step leaves out keeps its
state.  A STATE is any JSON value, normally a reference machine's state in the
:mod:`spec.jsonvalues` spelling (``{"@type": "CoordinatorState", ...}``).  ``loop_from`` is the
0-based index of the first step of the loop of a liveness counterexample (a lasso): after the last
step the trace returns to the state before step ``loop_from``.

:meth:`Trace.from_json` checks the shape and raises :class:`BadTrace` naming the JSON path of the
first problem.  Pure: reading the file is the command line's job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spec.errors import InputError

__all__ = ["FORMAT", "VERSION", "BadTrace", "Trace", "TraceStep"]

FORMAT = "txnmodel-trace"
VERSION = 1


class BadTrace(InputError):
    """A trace that does not have the shape above; names the JSON path."""

    def __init__(self, path: str, message: str, *, where: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}", where=where)


@dataclass(frozen=True)
class TraceStep:
    actor: str
    action: str
    states: Mapping[str, Any]  # every component's state after the step


@dataclass(frozen=True)
class Trace:
    model: str
    property_name: str  # the property the trace violates ("property" in the JSON)
    kind: str
    components: tuple[str, ...]
    initial: Mapping[str, Any]
    steps: tuple[TraceStep, ...]
    message: str = ""
    bounds: Mapping[str, Any] = field(default_factory=dict)
    loop_from: int | None = None

    @property
    def verdict_text(self) -> str:
        kind = "LIVENESS VIOLATION" if self.kind == "liveness" else "SAFETY VIOLATION"
        return f"{kind}: {self.property_name}"

    def states_before(self, step: int) -> Mapping[str, Any]:
        """Every component's state before step ``step`` (0: the initial state)."""
        return self.initial if step == 0 else self.steps[step - 1].states

    @classmethod
    def from_json(cls, data: Any, *, where: str | None = None) -> Trace:
        def bad(path: str, message: str) -> BadTrace:
            return BadTrace(path, message, where=where)

        if not isinstance(data, dict):
            raise bad("$", f"a trace is a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise bad("$.format", f"expected {FORMAT!r}, got {data.get('format')!r}")
        if data.get("version") != VERSION:
            raise bad("$.version", f"this viewer reads version {VERSION}, got {data.get('version')!r}")
        texts = {}
        for key in ("model", "property"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise bad(f"$.{key}", f"expected a non-empty string, got {data.get(key)!r}")
            texts[key] = data[key]
        kind = data.get("kind", "safety")
        if kind not in ("safety", "liveness"):
            raise bad("$.kind", f"expected 'safety' or 'liveness', got {kind!r}")
        message = data.get("message", "")
        if not isinstance(message, str):
            raise bad("$.message", f"expected a string, got {message!r}")
        bounds = data.get("bounds", {})
        if not isinstance(bounds, dict):
            raise bad("$.bounds", f"expected an object, got {bounds!r}")
        initial = data.get("initial")
        if not isinstance(initial, dict) or not initial:
            raise bad("$.initial", "expected an object naming every component's initial state")
        components = tuple(initial)
        raw_steps = data.get("steps")
        if not isinstance(raw_steps, list):
            raise bad("$.steps", f"expected an array, got {type(raw_steps).__name__}")
        steps = []
        current = dict(initial)
        for index, raw in enumerate(raw_steps):
            path = f"$.steps[{index}]"
            if not isinstance(raw, dict):
                raise bad(path, f"expected an object, got {type(raw).__name__}")
            for key in ("actor", "action"):
                if not isinstance(raw.get(key), str):
                    raise bad(f"{path}.{key}", f"expected a string, got {raw.get(key)!r}")
            states = raw.get("states", {})
            if not isinstance(states, dict):
                raise bad(f"{path}.states", f"expected an object, got {type(states).__name__}")
            unknown = [name for name in states if name not in current]
            if unknown:
                raise bad(
                    f"{path}.states.{unknown[0]}",
                    f"not a component of $.initial (components: {', '.join(components)})",
                )
            current = {**current, **states}
            steps.append(TraceStep(raw["actor"], raw["action"], current))
        loop_from = data.get("loop_from")
        if loop_from is not None and (
            not isinstance(loop_from, int) or isinstance(loop_from, bool) or not 0 <= loop_from < max(len(steps), 1)
        ):
            raise bad("$.loop_from", f"expected null or a step index in [0, {len(steps)}), got {loop_from!r}")
        if kind == "liveness" and loop_from is None:
            raise bad("$.loop_from", "a liveness counterexample is a lasso: say where its loop starts")
        return cls(
            model=texts["model"],
            property_name=texts["property"],
            kind=kind,
            components=components,
            initial=dict(initial),
            steps=tuple(steps),
            message=message,
            bounds=dict(bounds),
            loop_from=loop_from,
        )
