"""Recording client operations as a history in the contract of :mod:`spec.history`.

Every client operation is an invocation (``begin``) and one completion (``ok``, ``fail`` or
``info``).  The operation's index is its invocation order; its times are the simulation's logical
clock.  Values and results are JSON in the spellings of :mod:`spec.jsonvalues` (TxnID and
Position as ``[a, b]`` pairs).  Rendering is canonical (sorted keys, no spaces), so the same run
gives the same bytes.

:class:`MachineObserver` records, into the same history, every step of a reference machine inside
the broker as a machine-level operation on its object (``f`` = the machine's ``VECTORS`` command
name, ``value`` = the command's JSON with its ``@type``), and every load as a ``recover``
operation carrying the durable inputs the component restarted from.  A step done while the broker
handles a client's request is an operation whose window is the request's: invoked when the client
sent it, completed when the answer reaches the client (``ok`` / ``fail`` by the machine's result,
``info`` when the answer is an engine error), open when no answer comes.  Everything else the
broker does on its own is an atomic operation at the instant of the step.  ``docs/checkers.md``
says how these histories are checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spec.config import Config
from spec.history import EFFECTS, ORDERED, QUERY, RAISED, RECOVER, Operation, OpType, effects_digest, make_operation
from spec.jsonvalues import to_json
from spec.result import Err, Ok

__all__ = [
    "STEP_RAISED",
    "HistoryRecorder",
    "MachineObserver",
    "OpenOp",
    "RequestContext",
    "config_overrides",
    "is_recorded",
    "mark_recorded",
]

# What a broker answers a request whose handler threw (ServerCnx: ServerError.UnknownError); the
# machine-level history records a step that raised as failed with it (MachineObserver.failed).  No
# machine returns it, so the per-object check flags such a step against the reference.
STEP_RAISED = "UnknownError"


def mark_recorded(exc: BaseException) -> None:
    """``exc`` was raised by a machine step that the history already records as failed; the broker
    records every other exception it contains as a ``raised`` operation (:meth:`Broker.contain`)."""
    exc.txnmodel_recorded = True  # type: ignore[attr-defined]


def is_recorded(exc: BaseException) -> bool:
    return getattr(exc, "txnmodel_recorded", False) is True


@dataclass(slots=True)
class OpenOp:
    index: int
    process: int
    f: str
    obj: str
    value: Any
    invoked_at: int
    done: bool = False


class HistoryRecorder:
    """Collects the operations of one run.  ``clock`` is the simulation's logical clock."""

    def __init__(self, history: str, seed: int | None, clock: Callable[[], int]) -> None:
        self.history = history
        self.seed = seed
        self._clock = clock
        self._open: dict[int, OpenOp] = {}
        self._ops: dict[int, Operation] = {}
        self._next = 0
        self._busy: dict[int, int] = {}  # process -> index of its open operation
        self._crashed: set[int] = set()

    def begin(self, process: int, f: str, obj: str, value: Any, *, invoked_at: int | None = None) -> OpenOp:
        """Open an operation; ``invoked_at`` back-dates it (a machine step inside a request's window)."""
        if process in self._busy:
            raise RuntimeError(f"process {process} invoked {f} while op {self._busy[process]} is open")
        if process in self._crashed:
            raise RuntimeError(f"process {process} got 'info' and may not invoke again")
        op = OpenOp(self._next, process, f, obj, value, self._clock() if invoked_at is None else invoked_at)
        self._next += 1
        self._open[op.index] = op
        self._busy[process] = op.index
        return op

    def _close(self, op: OpenOp, op_type: OpType, result: Any, error: str | None, *, null: bool = False) -> None:
        if op.done:
            raise RuntimeError(f"op {op.index} ({op.f}) completed twice")
        op.done = True
        del self._open[op.index]
        del self._busy[op.process]
        if op_type is OpType.INFO:
            self._crashed.add(op.process)
        done = make_operation(
            self.history,
            op.index,
            op.process,
            op_type,
            op.f,
            op.obj,
            op.value,
            result,
            invoked_at=op.invoked_at,
            completed_at=self._clock(),
            error=error,
            seed=self.seed,
            null_result=null,  # a returned JSON null is checked (None: nothing recorded)
        )
        self._ops[op.index] = done

    def ok(self, op: OpenOp, result: Any = None, *, null: bool = False) -> None:
        """``null``: a None ``result`` is the value returned (JSON null), not "nothing recorded"."""
        self._close(op, OpType.OK, result, None, null=null)

    def fail(self, op: OpenOp, error: str | None) -> None:
        self._close(op, OpType.FAIL, None, error)

    def info(self, op: OpenOp, error: str | None = None) -> None:
        self._close(op, OpType.INFO, None, error)

    def crashed(self, process: int) -> bool:
        return process in self._crashed

    def operations(self) -> list[Operation]:
        """Every operation so far, in index order; still-open ones as ``invoke`` rows."""
        out = dict(self._ops)
        for op in self._open.values():
            out[op.index] = make_operation(
                self.history,
                op.index,
                op.process,
                OpType.INVOKE,
                op.f,
                op.obj,
                op.value,
                None,
                invoked_at=op.invoked_at,
                completed_at=None,
                seed=self.seed,
            )
        return [out[i] for i in sorted(out)]

    def __len__(self) -> int:
        return self._next


def config_overrides(config: Config) -> dict[str, Any]:
    """The broker.conf keys whose value differs from Pulsar's default: enough to rebuild ``config``."""
    defaults = Config.defaults()
    return {key: to_json(value) for key, value in config.items() if value != defaults.get(key)}


@dataclass(eq=False, slots=True)
class _MachineOp:
    op: OpenOp
    result: Ok[Any] | Err


@dataclass(slots=True)
class RequestContext:
    """One delivery of a client's request to the broker: the machine steps its handler made.

    The steps on the first object the handler stepped share the request's window; steps on other
    objects (a publish that dispatches to subscriptions, say) are the broker's own, atomic."""

    sent_at: int
    target: str | None = None
    steps: list[_MachineOp] = field(default_factory=list)


class MachineObserver:
    """Records machine-level operations (see the module docstring) into ``recorder``'s history.

    ``new_process`` is the cluster's process counter: every machine operation is its own process, so
    a machine operation open across a client's retry never collides with anything.  ``config``
    travels in every ``recover`` operation, so a checker elsewhere rebuilds the machines' behaviour.
    """

    def __init__(self, recorder: HistoryRecorder, new_process: Callable[[], int], config: Config) -> None:
        self.recorder = recorder
        self._new_process = new_process
        self._config = config_overrides(config)
        self.context: RequestContext | None = None
        self._open: dict[str, list[_MachineOp]] = {}  # object -> its operations still open

    # -- the API the broker calls ---------------------------------------------------------------

    def stepped(
        self, obj: str, machine: str, command: object, result: Ok[object] | Err, *, atomic: bool = False
    ) -> None:
        """A machine stepped ``command`` on ``obj`` and returned ``result``.  ``atomic``: a step of a
        machine the request does not address (a component's PIP-160 writer), an instant whatever
        request it serves."""
        f = _command_name(machine, command)
        value = to_json(command)
        assert isinstance(value, dict)  # a command is a dataclass, spelled as an object
        value[EFFECTS] = effects_digest(result.effects)  # format version 4: the step's effects too
        if atomic:
            self._complete(_MachineOp(self.recorder.begin(self._new_process(), f, obj, value), result))
            return
        context = self.context
        if context is not None and context.target is None:
            context.target = obj
        if context is None or context.target != obj:
            op = self.recorder.begin(self._new_process(), f, obj, value)
            self._complete(_MachineOp(op, result))
            return
        op = self.recorder.begin(self._new_process(), f, obj, value, invoked_at=context.sent_at)
        step = _MachineOp(op, result)
        context.steps.append(step)
        self._open.setdefault(obj, []).append(step)

    def failed(self, obj: str, machine: str, command: object, error: str) -> None:
        """Stepping ``command`` on ``obj`` raised: an operation completed ``fail`` with ``error`` at
        once (the component crashes next, and no answer comes for the request that stepped it)."""
        op = self.recorder.begin(self._new_process(), _command_name(machine, command), obj, to_json(command))
        self.recorder.fail(op, error)

    def raised(self, obj: str, machine: str, error: str, where: str) -> None:
        """``obj`` raised outside any step of its machine (``error``: the exception's type; ``where``:
        its innermost frame): an atomic ``raised`` operation completed ``fail`` with ``UnknownError``
        (:data:`spec.history.RAISED`; the component crashes next)."""
        value = {"@type": "Raised", "machine": machine, "error": error, "where": where}
        op = self.recorder.begin(self._new_process(), RAISED, obj, value)
        self.recorder.fail(op, STEP_RAISED)

    def queried(self, obj: str, machine: str, name: str, args: Mapping[str, object], answer: object) -> None:
        """The broker answered ``name`` (a ``VECTORS`` observer of ``machine``) from ``obj``'s state:
        an atomic query row completed ``ok`` with the answer (:data:`spec.history.QUERY`); ``args``
        and ``answer`` are JSON."""
        value = {"@type": QUERY, "machine": machine, **args}
        op = self.recorder.begin(self._new_process(), name, obj, value)
        self.recorder.ok(op, answer, null=True)

    def recovered(self, obj: str, machine: str, inputs: Mapping[str, object]) -> None:
        """``obj`` was loaded from its durable state; ``inputs`` (JSON) is what its recovery read."""
        # ``ordered``: every row of this object is numbered as its machine steps (format version 5)
        value = {"@type": "Recover", "machine": machine, "config": self._config, ORDERED: True, **inputs}
        op = self.recorder.begin(self._new_process(), RECOVER, obj, value)
        self.recorder.ok(op)

    def crashed(self, obj: str) -> None:
        """``obj`` lost its memory: its open operations stepped before the crash and their answers
        never come; they end ``info`` now (the model confines them to the epoch before the crash)."""
        for step in self._open.pop(obj, []):
            if not step.op.done:
                self.recorder.info(step.op, "Crashed")

    # -- the request path -----------------------------------------------------------------------

    def begin_request(self, sent_at: int) -> RequestContext:
        """A request sent at ``sent_at`` reaches the broker; its handler runs now."""
        self.context = RequestContext(sent_at)
        return self.context

    def end_request(self) -> None:
        self.context = None

    def answered(self, context: RequestContext, success: bool) -> None:
        """The answer to ``context``'s delivery reached the client's connection.

        A duplicated request's second answer reaches it too (the client library then drops it), so
        its steps complete by the same rule rather than staying unknown: an unknown step may be
        linearized anywhere until the next crash, and a few of them make proving a bad history
        illegal exponential (the search must try every place for each)."""
        for step in context.steps:
            if step.op.done:
                continue
            if isinstance(step.result, Err) or success:
                # A rejected step changed nothing whatever the answer; an accepted one is known
                # to have taken effect once the client saw success.
                self._complete(step)
            else:
                # An engine error (a write failed, the component reloads) or a later step's error:
                # the step may or may not have taken effect.
                self.recorder.info(step.op)
            self._forget(step)
        context.steps.clear()

    def _complete(self, step: _MachineOp) -> None:
        if isinstance(step.result, Err):
            self.recorder.fail(step.op, step.result.error.name)
        else:
            self.recorder.ok(step.op, to_json(step.result.value), null=True)

    def _forget(self, step: _MachineOp) -> None:
        mine = self._open.get(step.op.obj)
        if mine is not None and step in mine:
            mine.remove(step)


def _command_name(machine: str, command: object) -> str:
    """The ``VECTORS`` name of ``command``'s class (the history's ``f``)."""
    names = _COMMAND_NAMES.get(machine)
    if names is None:
        import importlib

        from spec.machines import machine_info

        vectors = importlib.import_module(f"reference.{machine_info(machine).module}").VECTORS
        names = _COMMAND_NAMES[machine] = {cls: name for name, cls in vectors.commands.items()}
    name = names.get(type(command))
    if name is None:
        raise KeyError(f"{type(command).__name__} is not a command of {machine}'s VECTORS")
    return name


_COMMAND_NAMES: dict[str, dict[type, str]] = {}
