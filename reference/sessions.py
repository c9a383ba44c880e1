"""One reference machine driven by names and JSON: the vectors' runner and the conformance protocol.

:class:`Machine` is a machine instance as a vector or the conformance harness sees it: started
from broker.conf overrides and ``init`` values, stepped by a command name with JSON arguments,
observed by an observer name with JSON arguments, crashed and recovered
(:mod:`reference.restarts`).  Everything that arrives as JSON is decoded through the command
classes' type hints (:mod:`spec.jsonvalues`); anything the machine cannot take (an unknown name,
a bad argument, a command the reference refuses as outside its domain, a step after a crash) is
:class:`Refused`, whose message starts with the JSON path of what is wrong.

:class:`Session` answers the requests of the conformance protocol (:mod:`spec.conform`) with a
:class:`Machine`: ``txnmodel conform --serve-reference`` is this over standard input and output.

:func:`iter_vector` steps one vector on a :class:`Machine` and yields everything each step did, the
one stepping loop behind :func:`run_vector` (``txnmodel vectors run``, and the check ``conform``
makes of a vector file before it sends it to an implementation), which compares each step with the
vector's expectations, and :func:`replay_vector` (what a transcript shows).

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from reference.conformance import (
    REFUSED,
    MachineVectors,
    Mismatch,
    Observation,
    StepOutcome,
    VectorResult,
    decode_args,
    describe_result,
    expectation_mismatch,
    machine_vectors,
    matches,
    refusal,
)
from reference.restarts import Durable, NoCrash, durable_for
from spec import conform
from spec.config import Config
from spec.errors import BadConfig, BadVector
from spec.jsonvalues import JsonError, from_json, to_json
from spec.machines import machine_info
from spec.result import Err, Ok

__all__ = [
    "CRASH",
    "RECOVER",
    "Machine",
    "Refused",
    "Session",
    "command_name",
    "iter_vector",
    "replay_vector",
    "run_vector",
]

Result = Ok[Any] | Err


class Refused(ValueError):
    """A request the machine cannot take; the message starts with the JSON path of the problem."""


class Machine:
    """One instance of a reference machine, driven by names and JSON values."""

    def __init__(self, adapter: MachineVectors, config: Config, state: Any) -> None:
        self.adapter = adapter
        self.config = config
        self.state = state
        self.crashed: Any = None  # the state the machine crashed in, until it recovers
        self._durable: Durable | None
        try:
            self._durable = durable_for(adapter.name)
        except NoCrash:
            self._durable = None

    @classmethod
    def start(cls, machine: str, config: Mapping[str, Any], init: Mapping[str, Any], where: str = "$") -> Machine:
        """A fresh instance: ``config`` overrides broker.conf keys, ``init`` is the machine's own."""
        adapter = machine_vectors(machine)
        if adapter is None:
            raise Refused(f"{where}.machine: reference.{machine_info(machine).module} has no VECTORS")
        try:
            settings = Config().with_overrides(config)
        except BadConfig as exc:
            raise Refused(f"{where}.config: {exc}") from None
        try:
            state = adapter.initial(settings, init)
        except (JsonError, ValueError, TypeError, KeyError) as exc:
            raise Refused(f"{where}.init: {exc}") from None
        return cls(adapter, settings, state)

    @property
    def name(self) -> str:
        return self.adapter.name

    @property
    def can_crash(self) -> bool:
        return self._durable is not None

    def command(self, name: str, args: Mapping[str, Any], where: str) -> object:
        """The command ``name`` with ``args`` decoded (``where`` is the step's JSON path)."""
        command_type = self.adapter.commands.get(name)
        if command_type is None:
            known = ", ".join(sorted(self.adapter.commands))
            raise Refused(f"{where}.command: {self.name} has no command {name!r}; known: {known}")
        try:
            return from_json(dict(args), command_type, f"{where}.args")
        except JsonError as exc:
            raise Refused(str(exc)) from None

    def step(self, command: object, where: str) -> Result:
        """Step the machine (the step's result); the durable bookkeeping follows it."""
        self._not_crashed(where)
        try:
            state, result = self.adapter.step(self.state, command)
        except REFUSED as exc:
            name = command_name(self.adapter, command)
            raise Refused(f"{where}.args: {name} refused by the reference: {refusal(exc)}") from None
        self.state = state
        if self._durable is not None:
            self._durable = self._durable.noted(command, result)
        return result

    def observe(self, name: str, args: Mapping[str, Any], where: str) -> Any:
        """The JSON spelling of observer ``name`` with ``args`` (``where`` is the check's JSON path)."""
        observer = self.adapter.observers.get(name)
        if observer is None:
            known = ", ".join(sorted(self.adapter.observers))
            raise Refused(f"{where}.observe: {self.name} has no observer {name!r}; known: {known}")
        self._not_crashed(where)
        try:
            kwargs = decode_args(observer, args, f"{where}.args")
        except JsonError as exc:
            raise Refused(str(exc)) from None
        try:
            return to_json(observer(self.state, **kwargs))
        except REFUSED as exc:
            raise Refused(f"{where}.args: {name} refused by the reference: {refusal(exc)}") from None

    def crash(self, where: str) -> None:
        """The process dies: only what the machine made durable is left."""
        if self._durable is None:
            raise Refused(f"{where}.command: {self.name} has no durable state, so it has no crash")
        self._not_crashed(where)
        self.crashed, self.state = self.state, None

    def recover(self, args: Mapping[str, Any], where: str) -> Result:
        """Load the machine again from what it made durable; the recovery's answer."""
        if self._durable is None:
            raise Refused(f"{where}.command: {self.name} has no durable state, so it has no recover")
        if self.crashed is None:
            raise Refused(f"{where}.command: recover follows a crash, and the machine has not crashed")
        try:
            decoded = from_json(dict(args), self._durable.args, f"{where}.args")
        except JsonError as exc:
            raise Refused(str(exc)) from None
        try:
            self._durable, state, result = self._durable.recovered(self.config, self.crashed, decoded)
        except REFUSED as exc:
            raise Refused(f"{where}.args: recover refused by the reference: {refusal(exc)}") from None
        self.state, self.crashed = state, None
        return result

    def _not_crashed(self, where: str) -> None:
        if self.crashed is not None:
            raise Refused(f"{where}: the machine has crashed; only recover may follow a crash")


def command_name(adapter: MachineVectors, command: object) -> str:
    """The vectors' name of ``command`` (its class's snake_case name in the adapter)."""
    for name, cls in adapter.commands.items():
        if type(command) is cls:
            return name
    return type(command).__name__


def run_vector(path: Path, data: Mapping[str, Any], *, where: str | None = None) -> VectorResult:
    """Run one (schema-valid) vector: its steps as :func:`iter_vector` takes them, each compared with
    the vector's expectations by the partial-match rule, stopping at the first mismatch.  Input
    problems raise :class:`BadVector`.

    Besides the machine's commands a step may be ``crash`` (the process dies; only what the machine
    made durable is left) or ``recover`` (it loads again from that, :mod:`reference.restarts`)."""
    label = where or str(path)
    machine = data["machine"]
    steps: Sequence[Mapping[str, Any]] = data["steps"]
    if machine_vectors(machine) is None:
        return VectorResult(
            label,
            data["id"],
            machine,
            len(steps),
            False,
            Mismatch(0, "-", "machine", f"reference.{machine_info(machine).module} with VECTORS", "not implemented"),
        )
    for outcome in iter_vector(data, where=label):
        step = steps[outcome.index]
        expect = step.get("expect")
        mismatch = (
            None if expect is None else expectation_mismatch(outcome.index, outcome.command, expect, outcome.result)
        )
        for check, seen in zip(step.get("check", []), outcome.observations, strict=True):
            if mismatch is None and not matches(check["equals"], seen.observed):
                what = f"observe {check['observe']}({json.dumps(check.get('args', {}))})"
                mismatch = Mismatch(outcome.index, outcome.command, what, check["equals"], seen.observed)
        if mismatch is not None:
            return VectorResult(label, data["id"], machine, len(steps), False, mismatch)
    return VectorResult(label, data["id"], machine, len(steps), True)


def replay_vector(data: Mapping[str, Any], *, where: str) -> tuple[StepOutcome, ...]:
    """Step a (schema-valid) vector's machine through every step and observe every check, without
    comparing anything with the vector's expectations: what a transcript shows.  Input the
    reference refuses raises :class:`BadVector`."""
    return tuple(iter_vector(data, where=where))


def iter_vector(data: Mapping[str, Any], *, where: str) -> Iterator[StepOutcome]:
    """A vector's steps, one at a time, each with its full result and every observer check after it:
    the one stepping loop that running a vector (:func:`run_vector`, which stops at the first
    mismatch) and replaying it (:func:`replay_vector`) share."""
    try:
        instance = Machine.start(data["machine"], data.get("config", {}), data.get("init", {}))
        for index, step in enumerate(data["steps"]):
            yield _step_outcome(instance, index, step)
    except Refused as exc:
        raise BadVector(str(exc), where=where) from None


#: The step names that are not commands of a machine: its crash and its recovery.
CRASH, RECOVER = "crash", "recover"


def _step_outcome(instance: Machine, index: int, step: Mapping[str, Any]) -> StepOutcome:
    """One step of a vector on ``instance``, and every observer check after it."""
    name = step["command"]
    args = step.get("args", {})
    where = f"$.steps[{index}]"
    result: Result
    if name == CRASH:
        instance.crash(where)
        result = Ok(None)
    elif name == RECOVER:
        result = instance.recover(args, where)
    else:
        result = instance.step(instance.command(name, args, where), where)
    observations = tuple(
        Observation(
            check["observe"],
            check.get("args", {}),
            instance.observe(check["observe"], check.get("args", {}), f"{where}.check[{i}]"),
        )
        for i, check in enumerate(step.get("check", []))
    )
    return StepOutcome(index, name, args, step.get("comment"), describe_result(result), observations)


class Session:
    """The reference behind the conformance protocol: each request in, its answer out (JSON)."""

    IMPLEMENTATION = "txnmodel reference"

    def __init__(self, machine: str) -> None:
        machine_info(machine)  # an unknown machine is a KeyError naming the known ones
        self.machine_name = machine
        self.machine: Machine | None = None

    def handle(self, request: Any) -> dict[str, Any]:
        """The answer to one request; a request the reference cannot take is answered ``fail``."""
        try:
            return self._handle(request)
        except Refused as exc:
            return {"fail": str(exc)}

    def _handle(self, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict):
            raise Refused("$: a request is a JSON object")
        op = request.get("op")
        if op == "hello":
            return {"ok": self.hello()}
        if op == "init":
            config, init = request.get("config", {}), request.get("init", {})
            if not isinstance(config, dict) or not isinstance(init, dict):
                raise Refused("$: init's config and init are objects")
            self.machine = Machine.start(self.machine_name, config, init)
            return {"ok": None}
        if op == "close":
            return {"ok": None}
        machine = self.machine
        if machine is None:
            raise Refused(f"$.op: {op!r} before init")
        args = request.get("args", {})
        if not isinstance(args, dict):
            raise Refused("$.args: the arguments are an object")
        if op == "step":
            command = machine.command(str(request.get("command")), args, "$")
            return _answer(machine.step(command, "$"))
        if op == "observe":
            return {"ok": machine.observe(str(request.get("observer")), args, "$")}
        if op == "crash":
            machine.crash("$")
            return {"ok": None}
        if op == "recover":
            return _answer(machine.recover(args, "$"))
        raise Refused(f"$.op: unknown op {op!r}; known: {', '.join(conform.OPS)}")

    def hello(self) -> dict[str, Any]:
        adapter = machine_vectors(self.machine_name)
        assert adapter is not None
        try:
            durable_for(self.machine_name)
            crashes = True
        except NoCrash:
            crashes = False
        return {
            "protocol": conform.VERSION,
            "machine": self.machine_name,
            "implementation": self.IMPLEMENTATION,
            "commands": sorted(adapter.commands),
            "observers": sorted(adapter.observers),
            "crash": crashes,
        }


def _answer(result: Result) -> dict[str, Any]:
    return describe_result(result)
