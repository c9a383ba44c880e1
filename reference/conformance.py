"""Run conformance vectors against the reference machines: the pure part.

Each reference module that has vectors exports ``VECTORS``, a :class:`MachineVectors` naming its
command classes and observers.  What running a vector needs and is the same for every machine
lives here: decoding arguments through the command class's type hints (``spec.jsonvalues``), the
JSON spelling of a step's result, the partial-match rule and a step's outcome.  The stepping loop
is :func:`reference.sessions.iter_vector`, on a :class:`reference.sessions.Machine` that can also
crash and recover; :func:`reference.sessions.run_vector` compares each step with what the vector
expects and :func:`reference.sessions.replay_vector` returns everything each step did (what a
transcript, :mod:`reference.transcripts`, shows).  It takes an already parsed, schema-checked
vector; reading and validating files is the command line's job (``runners/vectors.py``), so
nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from spec.config import Config
from spec.envelope import LogKind
from spec.jsonvalues import JsonError, from_json, to_json
from spec.machines import machine_info
from spec.result import Err, Ok

__all__ = [
    "REFUSED",
    "MachineVectors",
    "Mismatch",
    "Observation",
    "RecoveryDiverged",
    "StepOutcome",
    "VectorResult",
    "decode_args",
    "decoded_log_records",
    "describe_result",
    "expectation_mismatch",
    "machine_vectors",
    "matches",
    "refusal",
]


@dataclass(frozen=True)
class MachineVectors:
    """What a reference module tells the runner about itself."""

    name: str
    initial: Callable[[Config, Mapping[str, Any]], Any]
    step: Callable[[Any, Any], tuple[Any, Ok[Any] | Err]]
    commands: Mapping[str, type]
    observers: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    # The state a component restarts from, built from the durable inputs the engine's load read
    # (JSON in spec.jsonvalues spellings): what a history's ``recover`` operation resets the model to.
    # None: the machine has no durable state, and a restart is ``initial(config, inputs)``.
    recover: Callable[[Config, Mapping[str, Any]], Any] | None = None
    # The rule a recovery that disagrees with the machine's own recovery of the durable inputs
    # breaks (a history's ``recover`` row, format version 3): TC-21 for the coordinator, PA-18 for
    # the pending ack; empty when the machine's recover rows carry no durable log.
    recovery_rule: str = ""
    # The PIP-160 log whose durable entries the machine's recover rows carry (``log``): a checker
    # reads in them what the writer's thresholds allowed it to write (BW-5, BW-8..BW-10).
    log_kind: LogKind | None = None


class RecoveryDiverged(ValueError):
    """A ``recover`` row whose engine-decoded ``records`` are not what the reference's own reader
    decodes from the row's durable ``log``: the engine's recovery misread its log.  ``rule`` is the
    rule it breaks; the message says which record differs and how."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"({rule}) {detail}")
        self.rule = rule
        self.detail = detail


def decoded_log_records(
    inputs: Mapping[str, Any],
    read: Callable[[Any], Sequence[Any]],
    record_type: type,
    rule: str,
) -> tuple[tuple[int, Any], ...] | None:
    """The ``(record_id, record)`` pairs a ``recover`` row's durable ``log`` holds, as ``read`` (the
    machine's reader: :func:`reference.batched_log.replay` of the entries, then the record's
    ``from_pb``) decodes them, numbered in log order as the engine numbers them; None when the row
    has no ``log`` (format version 1 or 2).  When the row also carries the ``records`` the engine
    decoded, they must be the same: otherwise :class:`RecoveryDiverged` names the first record
    that differs (``rule``, and BW-23: a reader accepts batched and plain entries alike)."""
    if "log" not in inputs:
        return None
    decoded = tuple(enumerate(read(inputs["log"])))
    if "records" not in inputs:
        return decoded
    # Compared as JSON, the spelling the row holds: cheaper than decoding the engine's records,
    # which are decoded (and so checked for their types) only when they differ.
    if inputs["records"] == [[rid, to_json(record)] for rid, record in decoded]:
        return decoded
    claimed = from_json(inputs["records"], tuple[tuple[int, record_type], ...], "$.records")  # type: ignore[valid-type]
    if claimed == decoded:
        return decoded
    for i, (mine, theirs) in enumerate(zip(decoded, claimed, strict=False)):
        if mine != theirs:
            raise RecoveryDiverged(
                f"{rule}, BW-23",
                f"record {i} of the durable log decodes to {_spell(mine[1])}, but the engine recovered "
                f"from {_spell(theirs[1])} (record id {theirs[0]})",
            )
    raise RecoveryDiverged(
        f"{rule}, BW-23",
        f"the durable log decodes to {len(decoded)} live records, but the engine recovered from {len(claimed)}",
    )


def _spell(value: Any) -> str:
    text = json.dumps(to_json(value), sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 300 else text[:297] + "..."


@dataclass(frozen=True)
class Mismatch:
    step: int
    command: str
    what: str
    expected: Any
    actual: Any

    def __str__(self) -> str:
        return (
            f"step {self.step} ({self.command}): {self.what} expected {json.dumps(self.expected)}, "
            f"actual {json.dumps(self.actual)}"
        )


@dataclass(frozen=True)
class VectorResult:
    path: str
    vector_id: str
    machine: str
    steps: int
    passed: bool
    mismatch: Mismatch | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "id": self.vector_id,
            "machine": self.machine,
            "steps": self.steps,
            "passed": self.passed,
        }
        if self.mismatch is not None:
            out["mismatch"] = dataclasses.asdict(self.mismatch)
        return out


def _machine_vectors(machine: str) -> MachineVectors | None:
    info = machine_info(machine)
    try:
        module = importlib.import_module(f"reference.{info.module}")
    except ModuleNotFoundError as exc:
        if exc.name == f"reference.{info.module}":
            return None
        raise
    vectors = getattr(module, "VECTORS", None)
    return vectors if isinstance(vectors, MachineVectors) else None


def machine_vectors(machine: str) -> MachineVectors | None:
    """The ``VECTORS`` adapter of ``machine``'s reference module, None when it has none."""
    return _machine_vectors(machine)


def describe_result(result: Ok[Any] | Err) -> dict[str, Any]:
    """The JSON spelling of a step's result that vectors compare against."""
    if isinstance(result, Ok):
        return {"ok": to_json(result.value), "effects": [to_json(e) for e in result.effects]}
    return {
        "error": result.error.name,
        "message": result.error.message,
        "effects": [to_json(e) for e in result.effects],
    }


def matches(expected: Any, actual: Any) -> bool:
    """Partial match: objects compare only the expected keys; arrays element-wise, same length."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and matches(value, actual[key]) for key, value in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(matches(e, a) for e, a in zip(expected, actual, strict=True))
        )
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    return bool(expected == actual)


def decode_args(fn: Callable[..., Any], args: Mapping[str, Any], where: str) -> dict[str, Any]:
    hints = get_type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())[1:]
    names = {p.name for p in params}
    unknown = set(args) - names
    if unknown:
        raise JsonError(where, f"unknown argument(s) {', '.join(sorted(unknown))}; takes {', '.join(names) or 'none'}")
    out: dict[str, Any] = {}
    for p in params:
        if p.name in args:
            out[p.name] = from_json(args[p.name], hints.get(p.name, Any), f"{where}.{p.name}")
        elif p.default is inspect.Parameter.empty:
            raise JsonError(where, f"missing argument {p.name!r}")
    return out


# A machine raises only on a command or query outside its domain (a position no ledger can hold, a
# count past what Pulsar's 64-bit fields store, an unknown error name): the vector asked for
# something its schema cannot rule out, so these are the vector's fault, not a mismatch.
REFUSED = (ValueError, OverflowError, KeyError, struct.error)


def refusal(exc: Exception) -> str:
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def _compare_expect(index: int, name: str, expect: Any, actual: dict[str, Any]) -> Mismatch | None:
    if expect == "ok":
        if "ok" in actual:
            return None
        return Mismatch(index, name, "result", "ok", actual)
    if "error" in expect:
        if actual.get("error") != expect["error"]:
            return Mismatch(index, name, "result", {"error": expect["error"]}, actual)
        contains = expect.get("message_contains")
        if contains is not None and contains not in actual.get("message", ""):
            return Mismatch(index, name, "error message", contains, actual.get("message"))
    elif "ok" not in actual or not matches(expect["ok"], actual["ok"]):
        return Mismatch(index, name, "result", {"ok": expect["ok"]}, actual)
    if "effects" in expect and not matches(expect["effects"], actual["effects"]):
        return Mismatch(index, name, "effects", expect["effects"], actual["effects"])
    return None


# -- What a step did, in full (run, replayed, transcribed) -------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """One observer check of a step and what the observer returned (JSON), whatever the vector
    expected of it."""

    observe: str
    args: Mapping[str, Any]
    observed: Any


@dataclass(frozen=True)
class StepOutcome:
    """Everything one step of a vector did: the command as the vector wrote it, the full result
    (:func:`describe_result`'s spelling) and every observer check after it."""

    index: int
    command: str
    args: Mapping[str, Any]
    comment: str | None
    result: Mapping[str, Any]
    observations: tuple[Observation, ...]


def expectation_mismatch(index: int, name: str, expect: Any, actual: Mapping[str, Any]) -> Mismatch | None:
    """How a step's ``expect`` (``"ok"``, ``{"ok": ...}`` or ``{"error": ...}``, with optional
    ``effects``) disagrees with a result spelled as :func:`describe_result` spells it, by the
    vectors' partial-match rule; None when it holds."""
    return _compare_expect(index, name, expect, dict(actual))
