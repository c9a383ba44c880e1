"""The conformance protocol: one machine under test, driven over a line protocol (version 1).

``txnmodel conform`` runs an implementation as a child process and talks to it over its standard
input and output: one JSON object per line each way, a request, then its answer, in order.  The
shapes are ``spec/conform.schema.json``; ``docs/spec/conform.md`` is the prose.  Requests::

    {"op": "hello", "protocol": 1, "machine": "coordinator"}
    {"op": "init", "config": {"maxActiveTransactionsPerCoordinator": 2}, "init": {"coordinator_id": 0}}
    {"op": "step", "command": "new_txn", "args": {"timeout_ms": 60000, "now_ms": 0}}
    {"op": "observe", "observer": "txn_status", "args": {"txn_id": [0, 0]}}
    {"op": "crash"}
    {"op": "recover", "args": {}}
    {"op": "close"}

Answers: ``{"ok": VALUE, "effects": [...]}`` or ``{"error": "Name", "message": "...", "effects":
[...]}`` (``effects`` may be left out when there are none; ``hello``, ``init``, ``observe``,
``crash`` and ``close`` answer ``ok`` alone), or ``{"fail": "text"}``: the implementation could
not carry out the request (it threw, or it does not know the command).  Values and effects are
spelled as in the vectors (:mod:`spec.jsonvalues`).  The answer to ``hello`` may name the
commands and observers the implementation supports; the harness then sends no others.

This module is pure: the request builders and the check of an answer's shape, which raises
:class:`ProtocolError` with what is wrong.  Reading lines, time limits and processes are the
harness's (``conformance/``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from spec.config import Config
from spec.errors import error_by_name
from spec.jsonvalues import to_json

__all__ = [
    "OPS",
    "PROTOCOL",
    "VERSION",
    "Answer",
    "Hello",
    "ProtocolError",
    "check_answer",
    "check_hello",
    "close",
    "crash",
    "expected",
    "expected_value",
    "first_difference",
    "hello",
    "init",
    "observe",
    "recover",
    "step",
    "typed_config",
]

PROTOCOL: Final = "txnmodel-conform"
VERSION: Final = 1
OPS: Final = ("hello", "init", "step", "observe", "crash", "recover", "close")


class ProtocolError(ValueError):
    """An answer that is not what the protocol allows; the message says what is wrong."""


# --- requests ---------------------------------------------------------------------------------------


def hello(machine: str) -> dict[str, Any]:
    return {"op": "hello", "protocol": VERSION, "machine": machine}


def init(config: Mapping[str, Any], initial: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` is sent typed (:func:`typed_config`): a vector may spell a value as broker.conf does."""
    return {"op": "init", "config": typed_config(config), "init": dict(initial)}


def typed_config(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """broker.conf overrides with every value typed as the key's value is: a boolean, a whole
    number, a string, an array of strings for a list (``"superUserRoles": "a,b"`` becomes
    ``["a", "b"]``).  A key or value broker.conf would refuse raises :class:`spec.errors.BadConfig`."""
    config = Config().with_overrides(overrides)
    return {key: to_json(config.get(key)) for key in overrides}


def step(command: str, args: Mapping[str, Any]) -> dict[str, Any]:
    return {"op": "step", "command": command, "args": dict(args)}


def observe(observer: str, args: Mapping[str, Any]) -> dict[str, Any]:
    return {"op": "observe", "observer": observer, "args": dict(args)}


def crash() -> dict[str, Any]:
    return {"op": "crash"}


def recover(args: Mapping[str, Any]) -> dict[str, Any]:
    return {"op": "recover", "args": dict(args)}


def close() -> dict[str, Any]:
    return {"op": "close"}


# --- answers ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One answer, its shape checked.  ``kind`` is ``ok``, ``error`` or ``fail``; ``value`` is the
    ok value, the error name or the failure's text."""

    kind: str
    value: Any
    effects: tuple[Any, ...] = ()
    message: str = ""

    def spelled(self) -> dict[str, Any]:
        """The answer as the vectors spell a step's result (``describe_result``'s keys)."""
        if self.kind == "ok":
            return {"ok": self.value, "effects": list(self.effects)}
        if self.kind == "error":
            return {"error": self.value, "message": self.message, "effects": list(self.effects)}
        return {"fail": self.value}


_WITH_EFFECTS: Final = frozenset({"step", "recover"})


def check_answer(answer: Any, op: str) -> Answer:
    """The answer to a request ``op``, its shape checked (:class:`ProtocolError` otherwise)."""
    if not isinstance(answer, dict):
        raise ProtocolError(f"an answer is a JSON object, not {_kind(answer)}")
    kinds = [k for k in ("ok", "error", "fail") if k in answer]
    if len(kinds) != 1:
        raise ProtocolError('an answer has exactly one of "ok", "error" and "fail"')
    kind = kinds[0]
    allowed = {kind}
    if kind == "error":
        allowed.add("message")
    if op in _WITH_EFFECTS and kind != "fail":
        allowed.add("effects")
    extra = sorted(set(answer) - allowed)
    if extra:
        raise ProtocolError(f"the answer to {op} has unexpected key(s) {', '.join(map(repr, extra))}")
    if kind == "fail":
        if not isinstance(answer["fail"], str):
            raise ProtocolError('"fail" is a string saying what went wrong')
        return Answer("fail", answer["fail"])
    if kind == "error" and op not in _WITH_EFFECTS:
        raise ProtocolError(f'{op} is answered "ok" or "fail", not "error"')
    effects = answer.get("effects", [])
    if not isinstance(effects, list):
        raise ProtocolError('"effects" is an array')
    if kind == "error":
        name, message = answer["error"], answer.get("message", "")
        if not isinstance(name, str) or not name:
            raise ProtocolError('"error" is an error name (a string)')
        if not isinstance(message, str):
            raise ProtocolError('"message" is a string')
        return Answer("error", name, tuple(effects), message)
    return Answer("ok", answer["ok"], tuple(effects))


@dataclass(frozen=True)
class Hello:
    """What an implementation said of itself: the machine, and what it supports (None: all)."""

    machine: str
    implementation: str
    commands: frozenset[str] | None
    observers: frozenset[str] | None
    crash: bool = True  # False: the implementation has no crash and recover (a machine without durable state)


def check_hello(answer: Answer, machine: str) -> Hello:
    """The ``ok`` value of the answer to ``hello``: the protocol and machine must be ours."""
    if answer.kind != "ok":
        raise ProtocolError(f"hello was answered {answer.kind} {answer.value!r}")
    value = answer.value
    if not isinstance(value, dict):
        raise ProtocolError(f"hello's ok value is an object, not {_kind(value)}")
    if value.get("protocol") != VERSION:
        raise ProtocolError(
            f"the implementation speaks protocol {value.get('protocol')!r}; this harness speaks {VERSION}"
        )
    if value.get("machine") != machine:
        raise ProtocolError(f"the implementation is for machine {value.get('machine')!r}, not {machine!r}")
    name = value.get("implementation", "")
    if not isinstance(name, str):
        raise ProtocolError('"implementation" is a string')
    crash = value.get("crash", True)
    if not isinstance(crash, bool):
        raise ProtocolError('"crash" is true or false')
    return Hello(machine, name, _names(value, "commands"), _names(value, "observers"), crash)


def _names(value: Mapping[str, Any], key: str) -> frozenset[str] | None:
    names = value.get(key)
    if names is None:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ProtocolError(f'"{key}" is an array of names')
    return frozenset(names)


def _kind(value: Any) -> str:
    kinds: Sequence[tuple[type, str]] = ((bool, "a boolean"), (int, "a number"), (float, "a number"))
    for cls, name in kinds:
        if isinstance(value, cls):
            return name
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


# --- comparing with the reference -------------------------------------------------------------------


def expected(spelled: Mapping[str, Any]) -> dict[str, Any]:
    """The reference's answer (``describe_result``'s spelling) as an implementation's must match it
    (:func:`reference.conformance.matches`): the error's name, not its message.  Messages are
    Pulsar's wording and an implementation has its own; the same goes for the message of an error
    inside a value or an effect (a failed write's ``AddFailed``).  A vector's ``message_contains``
    is still checked where a vector asks for it."""
    return {k: expected_value(v) for k, v in spelled.items() if k != "message"}


def expected_value(value: Any) -> Any:
    """An observed value as an implementation's must match it: errors inside it by name only."""
    if isinstance(value, list):
        return [expected_value(v) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get("@type")
    drop = isinstance(kind, str) and _is_error(kind)
    return {k: expected_value(v) for k, v in value.items() if not (drop and k == "message")}


def _is_error(name: str) -> bool:
    try:
        error_by_name(name)
    except KeyError:
        return False
    return True


def first_difference(expected: Any, actual: Any, path: str = "$") -> tuple[str, Any, Any] | None:
    """Where ``actual`` first fails to match ``expected`` under the vectors' partial-match rule
    (:func:`reference.conformance.matches`): the JSON path and the two values there, or None."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return path, expected, actual
        for key, value in expected.items():
            if key not in actual:
                return f"{path}.{key}", value, "(missing)"
            found = first_difference(value, actual[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(expected) != len(actual):
            return path, expected, actual
        for i, (mine, theirs) in enumerate(zip(expected, actual, strict=True)):
            found = first_difference(mine, theirs, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(expected, bool) or isinstance(actual, bool):
        return None if expected is actual else (path, expected, actual)
    return None if expected == actual else (path, expected, actual)
