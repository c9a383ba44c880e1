"""Sequential models for :mod:`invariants.linearizability`.

* :class:`CasRegister` — Knossos' ``cas-register`` / Porcupine's etcd model: ``read``, ``write``,
  ``cas [from, to]`` on one register whose initial value is nil.  Reads Jepsen's etcd histories.
* :class:`KeyValue` — Porcupine's key-value model: ``get``, ``put``, ``append`` on string values,
  one register per key (partitioned per key: each key is an object).
* :class:`MachineModel` — the adapter from a reference machine's pure
  ``step(state, command) -> (state, Ok | Err)`` to a model: an operation's recorded result must be
  what ``step`` returns.  This is how the engine's per-object histories are checked against
  ``reference.coordinator`` / ``buffer`` / ``pending_ack`` / ``delayed``.

:func:`random_register_history` simulates concurrent clients of a true register, so it produces
linearizable histories of any size and concurrency (benchmarks and property tests).

Outputs use three markers besides values: :data:`~invariants.linearizability.UNKNOWN` (the outcome
is unknown: accept anything), :data:`NO_EFFECT` (the op failed without reaching the object: it did
nothing and checks nothing).
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from invariants.linearizability import NOT_A_READ, UNKNOWN, Model, partition_by_object
from reference.conformance import REFUSED, refusal
from spec.history import (
    EFFECTS,
    ORDERED,
    RAISED,
    RECOVER,
    BadHistory,
    Operation,
    OpType,
    effects_digest,
    is_machine_operation,
    is_query,
    make_operation,
    object_id,
)

__all__ = [
    "MODELS",
    "NO_EFFECT",
    "CasRegister",
    "KeyValue",
    "MachineModel",
    "model_by_name",
    "random_register_history",
]


class _NoEffect:
    def __repr__(self) -> str:
        return "NO_EFFECT"

    def __reduce__(self) -> str:
        return "NO_EFFECT"


NO_EFFECT: Any = _NoEffect()
_NIL = "nil"
_READ = ("read",)


def _bad(op: Operation, column: str, message: str) -> BadHistory:
    return BadHistory(f"history {op.history!r} op {op.index}: {message}", row=op.index, column=column)


class CasRegister:
    """A register with read, write and compare-and-set; initial value nil (JSON null).

    Inputs ``("read",)``, ``("write", v)``, ``("cas", from, to)``.  Outputs: the value read; None
    for a write; ``True``/``False`` for a cas (``fail`` means the compare failed, as in Jepsen's
    etcd test, and is checked: the register must then hold something other than ``from``).
    """

    name = "cas-register"

    def init(self) -> Hashable:
        return None

    def step(self, state: Any, op_input: Any, op_output: Any) -> tuple[bool, Any]:
        kind = op_input[0]
        if kind == "read":
            return op_output is UNKNOWN or op_output == state, state
        if kind == "write":
            if op_output is NO_EFFECT:
                return True, state
            return True, op_input[1]
        if op_output is NO_EFFECT:
            return True, state
        matches = state == op_input[1]
        new_state = op_input[2] if matches else state
        return op_output is UNKNOWN or op_output == matches, new_state

    def decode(self, op: Operation) -> tuple[Any, Any]:
        f, kind = op.f, op.type
        if f == "read":
            op_input: tuple[Any, ...] = _READ
        elif f == "write":
            op_input = ("write", op.args)
            _check_hashable(op, op_input)
        elif f == "cas":
            args = op.args
            if not (isinstance(args, list) and len(args) == 2):
                raise _bad(op, "value", f"a cas takes [from, to], got {op.value}")
            op_input = ("cas", args[0], args[1])
            _check_hashable(op, op_input)
        else:
            raise _bad(op, "f", f"the {self.name} model knows read, write and cas, not {f!r}")
        if kind is OpType.OK:
            return op_input, op.returned if f == "read" else True if f == "cas" else None
        if kind is OpType.FAIL:
            if f == "cas" and op.error is None:
                return op_input, False
            return op_input, UNKNOWN if f == "read" else NO_EFFECT
        return op_input, UNKNOWN  # info or invoke: indeterminate

    def partition(self, ops: Sequence[Operation]) -> list[list[Operation]]:
        return partition_by_object(ops)

    def may_skip(self, decoded: Sequence[tuple[Any, Any]]) -> list[bool]:
        """An operation of unknown outcome is accepted in every state: it may be left for last."""
        return [op_output is UNKNOWN for _, op_output in decoded]

    def read_state(self, op_input: Any, op_output: Any) -> Any:
        """A read changes nothing and is accepted in the state it read (any state when its output
        is unknown): the search places it as soon as that is the state."""
        if op_input[0] != "read":
            return NOT_A_READ
        return op_output

    def describe_op(self, op_input: Any, op_output: Any) -> str:
        shown = "?" if op_output is UNKNOWN else "failed" if op_output is NO_EFFECT else _show(op_output)
        if op_input[0] == "read":
            return f"read -> {shown}"
        if op_input[0] == "write":
            return f"write({_show(op_input[1])}) -> {shown if op_output is not None else 'ok'}"
        return f"cas({_show(op_input[1])} -> {_show(op_input[2])}) -> {shown}"

    def describe_state(self, state: Any) -> str:
        return _show(state)


class KeyValue:
    """Porcupine's key-value model: per key a string, initially empty; get, put and append."""

    name = "kv"

    def init(self) -> Hashable:
        return ""

    def step(self, state: Any, op_input: Any, op_output: Any) -> tuple[bool, Any]:
        kind = op_input[0]
        if kind == "get":
            return op_output is UNKNOWN or op_output == state, state
        if op_output is NO_EFFECT:
            return True, state
        if kind == "put":
            return True, op_input[1]
        return True, state + op_input[1]

    def decode(self, op: Operation) -> tuple[Any, Any]:
        args = op.args
        if op.f not in ("get", "put", "append"):
            raise _bad(op, "f", f"the kv model knows get, put and append, not {op.f!r}")
        if op.f != "get" and not isinstance(args, str):
            raise _bad(op, "value", f"{op.f} takes a string, got {op.value}")
        op_input = ("get",) if op.f == "get" else (op.f, args)
        if op.type.indeterminate:
            return op_input, UNKNOWN
        if op.type is OpType.FAIL:
            return op_input, UNKNOWN if op.f == "get" else NO_EFFECT
        if op.f == "get":
            value = op.returned
            return op_input, "" if value is None else value
        return op_input, None

    def partition(self, ops: Sequence[Operation]) -> list[list[Operation]]:
        return partition_by_object(ops)

    def may_skip(self, decoded: Sequence[tuple[Any, Any]]) -> list[bool]:
        """An operation of unknown outcome is accepted in every state: it may be left for last."""
        return [op_output is UNKNOWN for _, op_output in decoded]

    def read_state(self, op_input: Any, op_output: Any) -> Any:
        """A get changes nothing and is accepted in the state it read (any state when unknown)."""
        if op_input[0] != "get":
            return NOT_A_READ
        return op_output

    def describe_op(self, op_input: Any, op_output: Any) -> str:
        if op_input[0] == "get":
            return f"get -> {'?' if op_output is UNKNOWN else _show(op_output)}"
        return f"{op_input[0]}({_show(op_input[1])})"

    def describe_state(self, state: Any) -> str:
        return _show(state)


@dataclass(frozen=True, slots=True)
class _Step:
    """A command to step, in the component epoch it was recorded in (None: any epoch)."""

    epoch: int | None
    command: Any


@dataclass(frozen=True, slots=True)
class _Raised:
    """A ``raised`` row: the component raised outside any step.  No machine raises, so no state
    accepts it (:data:`spec.history.RAISED`)."""

    epoch: int | None
    text: str = ""


@dataclass(frozen=True, slots=True)
class _Query:
    """A query row (:data:`spec.history.QUERY`): the observer ``name`` asked with ``args`` in the
    component epoch it was recorded in; it answers in the state and leaves it as it was."""

    epoch: int | None
    name: str
    observe: Callable[..., Any] = field(compare=False)
    args: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class _Recover:
    """A ``recover`` row: the component restarts from ``state`` (already built from its inputs).
    ``diverged`` says how the engine's recovery disagrees with the machine's own recovery of the
    row's durable inputs (format version 3), with the rule it breaks: no state accepts such a row."""

    epoch: int | None
    state: Any = field(compare=False)
    text: str = ""
    diverged: str | None = None


class MachineModel:
    """A reference machine as a model: ``step(state, command) -> (state, Ok | Err)``.

    Decoding an operation: ``f`` names the command (``commands[f]``, the machine's ``VECTORS``
    table), ``value`` holds its fields in :mod:`spec.jsonvalues` spellings.  Checking: an ``ok``
    operation must get ``Ok`` whose value, spelled in JSON, equals ``result`` (a null ``result``
    accepts any ``Ok`` value: the engine had nothing to record); a ``fail`` with an ``error`` must
    get ``Err`` of that name (a rejected command leaves the state unchanged, by the machines'
    contract); a ``fail`` without ``error`` never reached the machine and does nothing; an
    ``info``/``invoke`` is stepped and its result ignored.

    A ``raised`` row (:data:`spec.history.RAISED`: the component raised outside any step) is
    accepted in no state: a correct machine and its shell never raise.

    Crashes (``recover`` rows, :data:`spec.history.RECOVER`): the model's state is ``(epoch,
    machine state)``.  A ``recover`` row replaces the machine state by what the machine's
    ``VECTORS.recover`` builds from the row's durable inputs (with the row's ``config``) and starts
    the next epoch.  Every other operation belongs to the epoch of the last ``recover`` row before
    it in index order (:meth:`decode_all`) and can only be linearized in that epoch: an operation a
    crash left open (``info``) may have taken effect before the crash, never after the recovery.
    """

    def __init__(
        self,
        name: str,
        initial_state: Hashable,
        step: Callable[[Any, Any], tuple[Any, Any]],
        commands: Mapping[str, type],
        *,
        describe_state: Callable[[Any], str] | None = None,
        vectors: Any = None,
    ) -> None:
        self.name = name
        self._initial = initial_state
        self._step = step
        self._commands = dict(commands)
        self._describe_state = describe_state
        self._vectors = vectors
        # recover row's value -> the state it builds, and how the engine's recovery diverged from it
        self._recovered: dict[str, tuple[Any, str | None]] = {}

    @classmethod
    def from_vectors(cls, vectors: Any, config: Any = None, init: Mapping[str, Any] | None = None) -> MachineModel:
        """Build from a reference module's ``VECTORS`` (:class:`reference.conformance.MachineVectors`)."""
        from spec.config import Config

        return cls(
            vectors.name,
            vectors.initial(config if config is not None else Config(), dict(init or {})),
            vectors.step,
            vectors.commands,
            vectors=vectors,
        )

    def init(self) -> Hashable:
        return (0, self._initial)

    def decode(self, op: Operation) -> tuple[Any, Any]:
        return self._decode(op, None)

    def decode_all(self, ops: Sequence[Operation]) -> list[tuple[Any, Any]]:
        """Decode one object's operations, each tagged with its epoch: the number of ``recover``
        rows before it in index order (index order is the order the engine stepped in)."""
        epochs = [0] * len(ops)
        count = 0
        for i in sorted(range(len(ops)), key=lambda i: ops[i].index):
            epochs[i] = count
            if ops[i].f == RECOVER and is_machine_operation(ops[i]):
                count += 1
        return [self._decode(op, epoch) for op, epoch in zip(ops, epochs, strict=True)]

    def _decode(self, op: Operation, epoch: int | None) -> tuple[Any, Any]:
        from spec.jsonvalues import JsonError, from_json

        if op.f == RECOVER and is_machine_operation(op):
            state, diverged = self._recovery(op)
            return _Recover(epoch, state, op.value, diverged), None
        if op.f == RAISED and is_machine_operation(op):
            return _Raised(epoch, op.value), ("err", op.error)
        if is_query(op):
            return self._query(op, epoch)
        command_type = self._commands.get(op.f)
        if command_type is None:
            raise _bad(
                op,
                "f",
                f"machine {self.name!r} has no command {op.f!r}; commands are {', '.join(sorted(self._commands))}",
            )
        args = op.args
        effects = None
        if isinstance(args, dict) and EFFECTS in args:  # format version 4 (spec.history.EFFECTS)
            args = dict(args)
            effects = args.pop(EFFECTS)
            if not _is_digest(effects):
                raise _bad(op, "value", f"{EFFECTS} is the step's effects' digest, 16 hex digits, not {effects!r}")
        try:
            command = from_json({} if args is None else args, command_type)
        except JsonError as exc:
            raise _bad(op, "value", f"not a {command_type.__name__}: {exc}") from None
        if op.type.indeterminate:
            # The client never learned the answer, but the row is a step the machine made: the work
            # it asked for is known, and holds wherever the step is placed (it is then no longer
            # accepted in every state, so never left for last: may_skip).
            return _Step(epoch, command), UNKNOWN if effects is None else (_UNANSWERED, None, effects)
        if op.type is OpType.FAIL:
            return _Step(epoch, command), NO_EFFECT if op.error is None else ("err", op.error, effects)
        return _Step(epoch, command), ("ok", None if op.result is None else _canonical(op.returned), effects)

    def _query(self, op: Operation, epoch: int | None) -> tuple[_Query, tuple[str, Any, None]]:
        """A query row: the observer it names (the machine's ``VECTORS.observers``), its arguments
        decoded as the observer's parameters, and the answer it recorded."""
        from reference.conformance import decode_args
        from spec.jsonvalues import JsonError

        observers = {} if self._vectors is None else self._vectors.observers
        observe = observers.get(op.f)
        if observe is None:
            known = ", ".join(sorted(observers)) or "none"
            raise _bad(op, "f", f"machine {self.name!r} has no observer {op.f!r} to query; observers are {known}")
        args = dict(op.args)
        args.pop("@type")
        machine = args.pop("machine", self.name)
        if machine != self.name:
            raise _bad(op, "value", f"a query of machine {machine!r} on an object checked against {self.name!r}")
        if op.type is not OpType.OK:
            raise _bad(op, "type", f"a query row is ok (the broker answered it at once), not {op.type.value}")
        try:
            decoded = decode_args(observe, args, "$.value")
        except JsonError as exc:
            raise _bad(op, "value", f"not the arguments of {op.f}: {exc}") from None
        query = _Query(epoch, op.f, observe, tuple(sorted(decoded.items())))
        try:
            hash(query)  # the search remembers the configurations it saw
        except TypeError:
            raise _bad(op, "value", f"the arguments of {op.f} are not values a query takes: {op.value}") from None
        return query, ("ok", _canonical(op.returned), None)

    def _answer(self, machine: Any, query: _Query) -> str:
        """What ``query``'s observer answers in ``machine`` (JSON, canonical); a question outside the
        machine's domain (:data:`reference.conformance.REFUSED`) is answered by no state."""
        from spec.jsonvalues import to_json

        try:
            return _canonical(to_json(query.observe(machine, **dict(query.args))))
        except REFUSED as exc:
            return f"refused: {refusal(exc)}"

    def _recovery(self, op: Operation) -> tuple[Any, str | None]:
        """The machine state a ``recover`` row restarts from, and how the engine's recovery
        diverged from it (None: it did not, or the row carries nothing to tell).

        Format version 3: the machine's ``VECTORS.recover`` decodes the row's durable ``log`` with
        the reference's own reader and checks the ``records`` the engine decoded against it
        (:class:`~reference.conformance.RecoveryDiverged`); the state it recovers from them must
        have the digest the engine's recovered state had (``recovered``, :func:`spec.history.state_digest`).
        The checker runs the unmodified reference, so an engine whose recovery misreads or misreplays
        its log is caught here even when no later step shows it."""
        from reference.conformance import RecoveryDiverged
        from spec.errors import BadConfig
        from spec.history import state_digest
        from spec.jsonvalues import JsonError

        known = self._recovered.get(op.value)
        if known is not None:
            return known
        if self._vectors is None:
            raise _bad(op, "f", f"machine model {self.name!r} was built without VECTORS: it cannot recover")
        inputs = dict(op.args)
        inputs.pop("@type", None)
        if type(inputs.pop(ORDERED, True)) is not bool:
            raise _bad(op, "value", f"{ORDERED} says whether the rows are in the order they took effect: true or false")
        machine = inputs.pop("machine", self.name)
        if machine != self.name:
            raise _bad(op, "value", f"a recovery of machine {machine!r} on an object checked against {self.name!r}")
        claimed = inputs.pop("recovered", None)
        if claimed is not None and not isinstance(claimed, str):
            raise _bad(op, "value", f"recovered is the recovered state's digest, a string, not {claimed!r}")
        diverged: str | None = None
        try:
            config = _config(inputs.pop("config", {}) or {})
            build = self._vectors.recover if self._vectors.recover is not None else self._vectors.initial
            state = build(config, inputs)
        except RecoveryDiverged as exc:
            state, diverged = None, f"the engine misread its durable log ({exc.rule}): {exc.detail}"
        except (BadConfig, JsonError, KeyError, TypeError, ValueError) as exc:
            raise _bad(op, "value", f"not the recovery inputs of {self.name}: {exc}") from None
        if diverged is None and claimed is not None:
            mine = state_digest(state)
            if mine != claimed:
                rule = self._vectors.recovery_rule or "recovery"
                diverged = (
                    f"the engine recovered another state than its durable inputs give ({rule}): "
                    f"digest {claimed}, the machine's recovery of them {mine}"
                )
        if diverged is None:
            diverged = _durable_layout(self._vectors, config, inputs)
        self._recovered[op.value] = (state, diverged)
        return state, diverged

    def step(self, state: Any, op_input: Any, op_output: Any) -> tuple[bool, Any]:
        epoch, machine = state
        if isinstance(op_input, _Recover):
            if op_input.diverged is not None or (op_input.epoch is not None and op_input.epoch != epoch):
                return False, state
            return True, (epoch + 1, op_input.state)
        if isinstance(op_input, _Raised):
            return False, state
        if isinstance(op_input, _Query):
            if op_input.epoch is not None and op_input.epoch != epoch:
                return False, state
            return op_output is UNKNOWN or self._answer(machine, op_input) == op_output[1], state
        if op_output is NO_EFFECT:
            return True, state
        if op_input.epoch is not None and op_input.epoch != epoch:
            return False, state
        try:
            new_machine, result = self._step(machine, op_input.command)
        except REFUSED:
            return False, state  # a command outside the machine's domain in this state (a search's try)
        new_state = (epoch, new_machine)
        if op_output is UNKNOWN:
            return True, new_state
        return _mismatch(result, op_output, words=False) is None, new_state

    def refusal(self, state: Any, op_input: Any, op_output: Any) -> str | None:
        """Why :meth:`step` refuses a step's row in ``state``, in words (None: it does not, or the
        row is not a step's): what the machine returns there, or the effects it asks for."""
        if isinstance(op_input, _Query) and op_output is not UNKNOWN:
            epoch, machine = state
            if op_input.epoch is not None and op_input.epoch != epoch:
                return f"the row is of component epoch {op_input.epoch}, the state of epoch {epoch}"
            answer = self._answer(machine, op_input)
            return None if answer == op_output[1] else f"the machine answers {answer} here, the row {op_output[1]}"
        if not isinstance(op_input, _Step) or op_output is UNKNOWN or op_output is NO_EFFECT:
            return None
        epoch, machine = state
        if op_input.epoch is not None and op_input.epoch != epoch:
            return f"the row is of component epoch {op_input.epoch}, the state of epoch {epoch}"
        try:
            result = self._step(machine, op_input.command)[1]
        except REFUSED as exc:
            return f"the machine refuses the command here: {refusal(exc)}"
        return _mismatch(result, op_output)

    def may_skip(self, decoded: Sequence[tuple[Any, Any]]) -> list[bool]:
        """An operation of unknown outcome is accepted in any state of its own crash epoch, so it
        may be left for last only when that is the part's last epoch (a part of
        :meth:`partition` has one); one of an earlier epoch must be placed before the recovery."""
        last = sum(isinstance(op_input, _Recover) for op_input, _ in decoded)
        return [
            op_output is UNKNOWN and isinstance(op_input, _Step) and (op_input.epoch is None or op_input.epoch == last)
            for op_input, op_output in decoded
        ]

    def witness_binding(self, ops: Sequence[Operation]) -> bool:
        """Whether the part's index order is the order its steps took effect in, each at its place
        (format version 5): its first row is a ``recover`` row that says so (:data:`spec.history.ORDERED`).
        Then that order is the check, not a hint: a step the machine rejects at its own place is
        illegal even when another order of the rows would fit their windows (an unanswered request
        the engine never served can be placed anywhere, and a window hides which step came first)."""
        if not ops:
            return False
        first = min(ops, key=lambda o: o.index)
        return first.f == RECOVER and is_machine_operation(first) and first.args.get(ORDERED) is True

    def witness_order(self, ops: Sequence[Operation]) -> list[int]:
        """The order to replay before any search: index order, the order the engine stepped the
        machine in (as :meth:`decode_all` reads epochs).  A correct engine's part is accepted in
        that order at once; the search is left for a part it does not fit."""
        return sorted(range(len(ops)), key=lambda i: ops[i].index)

    def partition(self, ops: Sequence[Operation]) -> list[list[Operation]]:
        """Per object, then per epoch: a ``recover`` row is a barrier nothing crosses (an op of an
        earlier epoch stepped before the crash, one of a later epoch after the load) and the state
        after it depends on its inputs alone, so each epoch is checked on its own from its recovery.
        Exact, and it keeps the search of an illegal history from backtracking across crashes."""
        parts: list[list[Operation]] = []
        for part in partition_by_object(ops):
            current: list[Operation] = []
            for op in sorted(part, key=lambda o: o.index):
                if op.f == RECOVER and is_machine_operation(op) and current:
                    parts.append(current)
                    current = []
                current.append(op)
            parts.append(current)
        return parts

    def describe_op(self, op_input: Any, op_output: Any) -> str:
        if isinstance(op_input, _Recover):
            text = "recover" + ("" if op_input.epoch is None else f" (epoch {op_input.epoch + 1})")
            return text if op_input.diverged is None else f"{text}: {op_input.diverged}"
        if isinstance(op_input, _Raised):
            return f"raised {op_input.text} (a correct component never raises)"
        if isinstance(op_input, _Query):
            from invariants.readable import short

            asked = ", ".join(f"{key}={short(value)}" for key, value in op_input.args)
            return f"query {op_input.name}({asked}) -> {'?' if op_output is UNKNOWN else op_output[1]}"
        if op_output is UNKNOWN:
            shown = "?"
        elif op_output is NO_EFFECT:
            shown = "not sent"
        else:
            kind = op_output[0]
            shown = "?" if kind == _UNANSWERED else op_output[1] if kind == "err" else (op_output[1] or "ok")
            if op_output[2] is not None:
                shown += f" (effects {op_output[2]})"
        from invariants.readable import short

        command = op_input.command if isinstance(op_input, _Step) else op_input
        return f"{short(command)} -> {shown}"

    def describe_state(self, state: Any) -> str:
        from invariants.readable import short

        epoch, machine = state if isinstance(state, tuple) and len(state) == 2 else (None, state)
        text = self._describe_state(machine) if self._describe_state is not None else short(machine, limit=400)
        return text if not epoch else f"[epoch {epoch}] {text}"

    def state_rows(self, state: Any, *, max_rows: int = 400) -> tuple[list[tuple[str, str]], int]:
        """The state flattened for the counterexample viewer: its crash epoch, then the machine's
        fields (:func:`invariants.readable.rows`)."""
        from invariants.readable import rows

        epoch, machine = state
        found, left = rows(machine, max_rows=max_rows - 1)
        return [("epoch", str(epoch)), *found], left


def _durable_layout(vectors: Any, config: Any, inputs: Mapping[str, Any]) -> str | None:
    """What a ``recover`` row's durable inputs show of writes their component could not have
    made, though they recover correctly, or None: a PIP-160 log's entries against its writer's
    thresholds and switch (:func:`invariants.batched_log.log_layout_problem`), a buffer's snapshot segment
    sealed before it was full (:func:`invariants.buffer.snapshot_records_problem`)."""
    log_kind = getattr(vectors, "log_kind", None)
    if log_kind is not None and "log" in inputs:
        from invariants.batched_log import log_layout_problem
        from reference.batched_log import logged_entries, writer_config

        switch = inputs.get("batched_write")  # the writer's BW-22 switch, when the row states it
        known = isinstance(switch, bool)
        cfg = writer_config(config, log_kind, enabled=switch if known else None)
        problem = log_layout_problem(cfg, logged_entries(inputs["log"]), switch_known=known)
        if problem is not None:
            return f"the engine's durable log holds an entry its PIP-160 writer could not have written: {problem}"
    if getattr(vectors, "name", None) == "buffer" and inputs.get("snapshot_records"):
        from invariants.buffer import snapshot_records_problem
        from reference.buffer import DEFAULT_TOPIC, decode_snapshot_records

        records = decode_snapshot_records(inputs["snapshot_records"])
        problem = snapshot_records_problem(config, str(inputs.get("topic", DEFAULT_TOPIC)), records)
        if problem is not None:
            return f"the engine's snapshot topics hold a write its buffer could not have made: {problem}"
    return None


def _mismatch(result: Any, op_output: tuple[str, Any, str | None], *, words: bool = True) -> str | None:
    """How the machine's ``result`` differs from a step row's decoded output (None: it does not):
    the answer first, then the effects' digest when the row carries one (format version 4).
    ``words=False``: only whether it does (the search asks that at every step it tries, and the
    effects are spelled out only for a counterexample)."""
    kind, expected, effects = op_output
    if kind == _UNANSWERED:
        pass  # no answer to compare, only the effects
    elif result.ok:
        if kind != "ok":
            return f"the machine returns ok here, the row failed with {expected}"
        if expected is not None:
            from spec.jsonvalues import to_json

            returned = _canonical(to_json(result.value))
            if returned != expected:
                return f"the machine returns {returned} here, the row {expected}"
    elif kind != "err" or result.error.name != expected:
        row = "ok" if kind == "ok" else f"failed with {expected}"
        return f"the machine fails with {result.error.name} here, the row {row}"
    if effects is not None:
        mine = effects_digest(result.effects)
        if mine != effects:
            if not words:
                return "other effects"
            from invariants.readable import short

            return (
                f"the machine asks for other effects here: {short(list(result.effects), limit=300)} "
                f"(digest {mine}), the row's digest {effects}"
            )
    return None


# The kind of a decoded step row whose answer never reached the client (``info``, ``invoke``) but
# whose effects' digest it states.
_UNANSWERED = "?"


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 16 and _HEX_DIGITS.issuperset(value)


_HEX_DIGITS: frozenset[str] = frozenset("0123456789abcdef")


def _config(overrides: Any) -> Any:
    """The configuration a ``recover`` row states (its broker.conf overrides): a history's recoveries
    state the same few, and building one checks every key, so each is built once per spelling."""
    if not isinstance(overrides, dict):
        return _config_of(overrides)  # not a mapping: with_overrides says what is wrong
    return _configs(json.dumps(overrides, sort_keys=True))


def _config_of(overrides: Any) -> Any:
    from spec.config import Config

    return Config().with_overrides(overrides)


@functools.lru_cache(maxsize=64)
def _configs(spelling: str) -> Any:
    return _config_of(json.loads(spelling))


def _canonical(value: Any) -> str:
    return _CANONICAL(value)


# json.dumps(value, sort_keys=True, separators=(",", ":")) without building an encoder every call
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def _check_hashable(op: Operation, value: Any) -> None:
    try:
        hash(value)
    except TypeError:
        raise _bad(op, "value", f"register values must be scalars, got {op.value}") from None


def _show(value: Any) -> str:
    return _NIL if value is None else json.dumps(value)


MODELS: Mapping[str, Callable[[], Model]] = {
    "cas-register": CasRegister,
    "register": CasRegister,
    "kv": KeyValue,
}


def model_by_name(name: str) -> Model:
    """A model by its ``--model`` name: a generic model, or a reference machine that has ``VECTORS``."""
    if name in MODELS:
        return MODELS[name]()
    import importlib

    try:
        module = importlib.import_module(f"reference.{name}")
    except ModuleNotFoundError:
        module = None
    vectors = getattr(module, "VECTORS", None) if module is not None else None
    if vectors is None:
        known = ", ".join(sorted(MODELS))
        raise KeyError(f"unknown model {name!r}: not one of {known} nor a reference machine with VECTORS")
    return MachineModel.from_vectors(vectors)


def random_register_history(
    seed: int,
    *,
    ops: int,
    clients: int,
    keys: int = 1,
    crash: float = 0.0,
    max_latency: int = 20,
    values: int = 5,
    history: str | None = None,
) -> list[Operation]:
    """A linearizable cas-register history of ``ops`` operations by ``clients`` concurrent clients.

    Each client loops: invoke, wait, take effect at a random instant inside its interval on a true
    register per key, return.  With probability ``crash`` an operation ends ``info`` (it took effect
    or not, at random) and its client is replaced by a fresh process, as Jepsen does.
    """
    rng = random.Random(seed)
    name = history if history is not None else f"register-{seed}"
    registers: dict[int, Any] = {}
    # Every op is planned as (invoke time, effect time, return time); then applied in effect order.
    plans: list[dict[str, Any]] = []
    clock = [0] * clients
    process_of = list(range(clients))
    next_process = clients
    for _ in range(ops):
        c = rng.randrange(clients)
        start = clock[c] + rng.randrange(0, 3)
        end = start + rng.randrange(0, max_latency + 1)
        effect = rng.uniform(start, end)
        kind = rng.choice(("read", "write", "cas"))
        key = rng.randrange(keys)
        arg: Any = (
            None
            if kind == "read"
            else rng.randrange(values)
            if kind == "write"
            else [rng.randrange(values), rng.randrange(values)]
        )
        crashed = rng.random() < crash
        plans.append(
            {
                "process": process_of[c],
                "start": start,
                "end": end,
                "effect": effect,
                "f": kind,
                "key": key,
                "arg": arg,
                "crashed": crashed,
                "applies": not crashed or rng.random() < 0.5,
            }
        )
        clock[c] = end + 1
        if crashed:
            process_of[c] = next_process
            next_process += 1
    for plan in sorted(plans, key=lambda p: p["effect"]):
        if not plan["applies"]:
            continue
        current = registers.get(plan["key"])
        if plan["f"] == "read":
            plan["result"] = current
        elif plan["f"] == "write":
            registers[plan["key"]] = plan["arg"]
        else:
            plan["result"] = current == plan["arg"][0]
            if plan["result"]:
                registers[plan["key"]] = plan["arg"][1]
    out = []
    for index, plan in enumerate(sorted(plans, key=lambda p: (p["start"], p["process"]))):
        obj = object_id("register", str(plan["key"]))
        if plan["crashed"]:
            op_type, result, completed = OpType.INFO, None, plan["end"]
        elif plan["f"] == "cas" and not plan["result"]:
            op_type, result, completed = OpType.FAIL, None, plan["end"]
        else:
            op_type, result, completed = OpType.OK, plan.get("result"), plan["end"]
            if plan["f"] == "cas":
                result = None
        out.append(
            make_operation(
                name,
                index,
                plan["process"],
                op_type,
                plan["f"],
                obj,
                plan["arg"],
                result,
                invoked_at=plan["start"],
                completed_at=completed,
                seed=seed,
            )
        )
    return out
