"""Linearizability of a history against a model: Wing-Gong-Lowe search, memoized, split per object.

The search is Lowe's refinement of Wing and Gong's backtracking algorithm as Porcupine implements
it (Horn and Kroening, "Faster linearizability checking via P-compositionality"), with reductions
for operations of unknown outcome and for reads (the loop is :mod:`invariants._wgl`):

* Calls and returns of one object's operations form a doubly linked list in time order (a call
  sorts before a return at the same instant: operations are *closed* intervals).
* The search walks the list.  At a call it tries to linearize that operation next: if the model
  accepts it, and the pair (set of linearized operations, new state) was never reached before, the
  call and its return are *lifted* out of the list and the walk restarts at the head.  At a return
  it has reached an operation that had to be linearized already: it backtracks (pops the last
  linearized operation, puts it back, and tries the next call after it).
* The set of linearized operations is a bitset (a Python int) and the memo is a set of
  (bitset, state) pairs; states must therefore be hashable, and cheap hashes are what make the
  memo pay (the reference machines' states are frozen values of persistent maps).
* Operations whose outcome is unknown (``info``, ``invoke``) never return: they may be linearized
  anywhere after their call.  Their output is :data:`UNKNOWN`.  Where the model says such an
  operation is accepted in every state reachable after its call (``Model.may_skip``: the register
  and kv models always, a machine's within its last crash epoch), placing it last is the same as
  never, so it is optional: kept out of the list, tried only where the search is stuck at a return
  (just in time), the earliest of identical ones first, and a configuration that used a superset of
  them to reach the same required operations and state is dominated and pruned.
* A read (``Model.read_state``, optional: the one state a read accepts, :data:`UNKNOWN` for any,
  :data:`NOT_A_READ` for an operation that may change the state) is never tried call by call: at
  each configuration a read called by then that the current state satisfies is looked up and
  placed at once, and nowhere later (it changes nothing, so a linearization placing it later can
  place it there).

* A witness (``Model.witness_order``, optional): an order of the part's operations the recorder
  vouches for, such as the order an engine stepped its machine in.  It is replayed first; when it
  respects real time (no operation placed after one that was called only after it returned) and
  the model accepts every step, it is a linearization and the part is ``ok`` in one pass.  Anything
  else is left to the search, so a witness can only shorten the search, never change a verdict;
  unless the model says the witness is binding for the part (``Model.witness_binding(ops)``,
  optional: the recorder states that this is the order its operations took effect in, each at its
  place).  Then the replay is the check: the part is ``illegal`` at the first operation the replay
  cannot place, whatever other order would fit, and no search runs (linear in the part).

Linearizability is local (Herlihy and Wing), so a history is linearizable iff each object's
sub-history is: :func:`check_history` splits first (``Model.partition``), lets the parts take
turns (smallest first), gives each part a step budget (and the history wall-clock and memory
budgets) whose exhaustion gives ``unknown`` instead of hanging, and stops at the first ``illegal``
part (the others are reported ``skipped``).
"""

from __future__ import annotations

import enum
import importlib.util
import math
import time
from collections.abc import Callable, Generator, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from invariants import _wgl as _compiled_or_not
from spec.history import Operation

__all__ = [
    "DEFAULT_STEP_BUDGET",
    "NOT_A_READ",
    "UNKNOWN",
    "HistoryResult",
    "MemoryBudget",
    "Model",
    "ModelContractError",
    "ObjectResult",
    "Verdict",
    "check_history",
    "check_object",
    "partition_by_object",
    "resident_bytes",
]

DEFAULT_STEP_BUDGET = 2_000_000


class _Unknown:
    """The output of an operation whose outcome is unknown; a model must accept any output then."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:  # survives pickling to Spark executors as the same singleton
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


class _NotARead:
    def __repr__(self) -> str:
        return "NOT_A_READ"

    def __reduce__(self) -> str:
        return "NOT_A_READ"


NOT_A_READ: Any = _NotARead()
"""What a model's ``read_state`` says of an operation that may change the state."""


class Verdict(enum.Enum):
    OK = "ok"
    ILLEGAL = "illegal"
    UNKNOWN = "unknown"
    SKIPPED = "skipped"  # not checked: another object of the history was already illegal


@runtime_checkable
class Model(Protocol):
    """What the checker needs of a sequential specification (Porcupine's ``Model``).

    ``step`` must be pure: it returns a new state and never mutates the one it is given.  It
    receives :data:`UNKNOWN` as the output of an indeterminate operation and must then accept.
    """

    name: str

    def init(self) -> Hashable: ...

    def step(self, state: Any, op_input: Any, op_output: Any) -> tuple[bool, Any]: ...

    def decode(self, op: Operation) -> tuple[Any, Any]:
        """The (input, output) the model's ``step`` takes for this operation."""
        ...

    def partition(self, ops: Sequence[Operation]) -> list[list[Operation]]: ...

    # Optional: ``read_state(op_input, op_output)``, for an operation that never changes the state,
    # the one state in which it is accepted (UNKNOWN: every state); NOT_A_READ for any other.
    # Optional: ``may_skip(decoded)``, per operation of a part, whether it is accepted in every state
    # reachable after its call when its output is UNKNOWN (then the search may leave it for last).
    # Optional: ``witness_order(ops)``, positions in the part of an order to try first (see above).
    # Optional: ``witness_binding(ops)``, whether that order is the one the part's operations took
    # effect in (then it is the only order tried, see above).

    def describe_op(self, op_input: Any, op_output: Any) -> str: ...

    def describe_state(self, state: Any) -> str: ...


def partition_by_object(ops: Sequence[Operation]) -> list[list[Operation]]:
    """The default partition: one part per ``object``."""
    parts: dict[str, list[Operation]] = {}
    for op in ops:
        parts.setdefault(op.object, []).append(op)
    return list(parts.values())


@dataclass(frozen=True)
class ObjectResult:
    """The verdict of one part (normally one object) of a history."""

    object: str
    verdict: Verdict
    ops: int
    steps: int = 0
    seconds: float = 0.0
    # ok: a linearization (history indexes in linearization order).  illegal: the longest
    # linearizable prefix the search found, then ``blocked``: the op whose return the search
    # reached without being able to place it.  unknown: the longest prefix so far.
    linearization: tuple[int, ...] = ()
    blocked: int | None = None
    reason: str = ""
    # The model's state after the linearization (or the prefix), and how the model describes it:
    # described only when asked (a verification asks only of the parts that are not ok).
    state: Any = field(default=None, compare=False, repr=False)
    describe_state: Callable[[Any], str] | None = field(default=None, compare=False, repr=False)

    @property
    def state_after(self) -> str:
        """The state after the linearization (or the prefix), as the model describes it."""
        return "" if self.describe_state is None else self.describe_state(self.state)

    def to_json(self) -> dict[str, Any]:
        return {
            "object": self.object,
            "verdict": self.verdict.value,
            "ops": self.ops,
            "steps": self.steps,
            "seconds": round(self.seconds, 6),
            "linearization": list(self.linearization),
            "blocked": self.blocked,
            "state_after": self.state_after,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class HistoryResult:
    history: str
    verdict: Verdict
    objects: tuple[ObjectResult, ...] = field(default=())

    @property
    def steps(self) -> int:
        return sum(o.steps for o in self.objects)

    @property
    def ops(self) -> int:
        return sum(o.ops for o in self.objects)

    def failing(self) -> ObjectResult | None:
        return next((o for o in self.objects if o.verdict is Verdict.ILLEGAL), None)


class MemoryBudget:
    """How much the process may grow while one history is checked: its resident memory when the
    budget is made plus ``limit`` bytes.  The search's memo table is what grows (tens of MB a second
    on a hard history); past the budget the verdict is ``unknown``, as past the step and time
    budgets.  Resident memory is read from ``/proc/self/statm`` where there is one, else the peak
    from ``getrusage`` (which never shrinks, so the budget errs on the side of stopping)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.base = resident_bytes()

    def used(self) -> int:
        return resident_bytes() - self.base

    def exhausted(self) -> bool:
        return self.used() > self.limit


def resident_bytes() -> int:
    """This process's resident memory, in bytes."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, kB on Linux


def _page_size() -> int:
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4096


_PAGE = _page_size()


class ModelContractError(Exception):
    """A model rejected an operation of unknown outcome: every model must accept one (the
    :class:`Model` contract), which is what lets the search leave it for last."""


@dataclass(frozen=True)
class _Found:
    """What one search ends with: the verdict, the steps it took, a linearization (ok) or the longest
    linearizable prefix it found (illegal, unknown: positions in the part), the operation that could
    not be placed (illegal) and the model state after the linearization or prefix."""

    verdict: Verdict
    steps: int
    order: list[int]
    blocked: int | None
    state: Any
    in_order: bool = False  # illegal in the binding witness order (no search ran)


def _search_module() -> ModuleType:
    """:mod:`invariants._wgl`, compiled if it was built from the current source; a compiled module
    older than its source is ignored (the source is loaded as plain Python instead), so an edit is
    never shadowed by a stale build."""
    module = _compiled_or_not
    source = Path(__file__).with_name("_wgl.py")
    if not module.compiled() or not source.exists():
        return module
    try:
        stale = Path(module.__file__ or "").stat().st_mtime < source.stat().st_mtime
    except OSError:
        stale = False
    if not stale:
        return module
    spec = importlib.util.spec_from_file_location("invariants._wgl_source", source)
    assert spec is not None and spec.loader is not None
    plain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plain)
    return plain


_wgl = _search_module()
SLICE = _wgl.SLICE  # search steps between two yields of a search
FIRST_TURN, TURN = 128, 16  # slices a part runs for in its first turn and in each later one


def check_object(
    model: Model,
    ops: Sequence[Operation],
    *,
    step_budget: int = DEFAULT_STEP_BUDGET,
    deadline: float | None = None,
    name: str | None = None,
    ignore_outputs: frozenset[int] = frozenset(),
    memory: MemoryBudget | None = None,
) -> ObjectResult:
    """The search over one part; ``deadline`` is a ``time.monotonic()`` instant, ``memory`` the
    history's memory budget.

    ``ignore_outputs`` (history indexes) makes those operations' outputs :data:`UNKNOWN` while
    keeping their intervals: a weakening the counterexample shrinker uses.
    """
    part = _Part(model, ops, step_budget, name=name, ignore_outputs=ignore_outputs)
    while not part.advance(deadline, memory=memory):
        pass
    return part.result()


class _Part:
    """One part's search, resumable: :meth:`advance` runs it a slice at a time, so the parts of a
    history can take turns (see :func:`check_history`)."""

    def __init__(
        self,
        model: Model,
        ops: Sequence[Operation],
        step_budget: int,
        *,
        name: str | None = None,
        ignore_outputs: frozenset[int] = frozenset(),
    ) -> None:
        self.model, self.ops = model, ops
        self.label = name if name is not None else (ops[0].object if ops else "")
        self.seconds = 0.0
        self._slices = 0
        self._exhausted = "step budget"  # which budget an unknown verdict ran out of
        self.found: _Found | None = None
        self.decoded: list[tuple[Any, Any]] = []
        self._search: Generator[None, None, _Found] | None = None
        if not ops:
            self.found = _Found(Verdict.OK, 0, [], None, model.init())
            return
        # A model may decode a part as a whole (the machine models number crash epochs across it).
        decode_all = getattr(model, "decode_all", None)
        decoded = list(decode_all(ops)) if decode_all is not None else [model.decode(op) for op in ops]
        if ignore_outputs:
            decoded = [(d[0], UNKNOWN) if op.index in ignore_outputs else d for op, d in zip(ops, decoded, strict=True)]
        self.decoded = decoded
        calls = [op.invoked_at for op in ops]
        infinity = math.inf
        returns = [
            infinity if op.completed_at is None or op.type.indeterminate else float(op.completed_at) for op in ops
        ]
        read_state = getattr(model, "read_state", None)
        may_skip = getattr(model, "may_skip", None)
        witness_order = getattr(model, "witness_order", None)
        witness = None if witness_order is None else list(witness_order(ops))
        witness_binding = getattr(model, "witness_binding", None)
        binding = witness is not None and witness_binding is not None and bool(witness_binding(ops))
        self._search = _search(
            model.init(), model.step, decoded, calls, returns, step_budget, read_state, may_skip, witness, binding
        )

    @property
    def done(self) -> bool:
        return self.found is not None

    @property
    def illegal(self) -> bool:
        return self.found is not None and self.found.verdict is Verdict.ILLEGAL

    def advance(self, deadline: float | None, slices: int | None = None, memory: MemoryBudget | None = None) -> bool:
        """Run up to ``slices`` slices (all, when None); True once the search has a verdict.  The
        time and memory budgets are looked at between two slices (every :data:`SLICE` steps)."""
        if self.found is not None or self._search is None:
            return True
        started = time.perf_counter()
        try:
            count = 0
            while slices is None or count < slices:
                next(self._search)
                count += 1
                self._slices += 1
                over_time = deadline is not None and time.monotonic() > deadline
                if over_time or (memory is not None and memory.exhausted()):
                    self._search.close()
                    self._exhausted = "time budget" if over_time else "memory budget"
                    self.found = _Found(Verdict.UNKNOWN, self._slices * SLICE, [], None, self.model.init())
                    break
        except StopIteration as stop:
            self.found = stop.value
        finally:
            self.seconds += time.perf_counter() - started
        return self.found is not None

    def skip(self) -> ObjectResult:
        if self._search is not None:
            self._search.close()
        return ObjectResult(
            self.label, Verdict.SKIPPED, len(self.ops), reason="not checked: another object of this history is illegal"
        )

    def result(self) -> ObjectResult:
        found = self.found
        assert found is not None
        ops, model = self.ops, self.model
        indexes = tuple(ops[i].index for i in found.order)
        blocked_index = ops[found.blocked].index if found.blocked is not None else None
        reason = ""
        if found.verdict is Verdict.ILLEGAL and found.blocked is not None and found.in_order:
            inp, out = self.decoded[found.blocked]
            reason = (
                f"after {len(found.order)} operations in the order they took effect (the recorder vouches for "
                f"it) the state is {model.describe_state(found.state)}; op {blocked_index} "
                f"({model.describe_op(inp, out)}) cannot be placed there: the model rejects it (or it returned "
                f"before one placed ahead of it was called)"
            )
        elif found.verdict is Verdict.ILLEGAL and found.blocked is not None:
            inp, out = self.decoded[found.blocked]
            reason = (
                f"after {len(found.order)} linearized operations the state is {model.describe_state(found.state)}; "
                f"op {blocked_index} ({model.describe_op(inp, out)}) cannot be placed: every order that "
                f"fits it before its return is rejected by the model"
            )
        elif found.verdict is Verdict.UNKNOWN:
            reason = f"{self._exhausted} exhausted after {found.steps} search steps"
        return ObjectResult(
            self.label,
            found.verdict,
            len(ops),
            found.steps,
            self.seconds,
            indexes,
            blocked_index,
            reason,
            found.state,
            model.describe_state,
        )


def check_history(
    model: Model,
    ops: Sequence[Operation],
    *,
    step_budget: int = DEFAULT_STEP_BUDGET,
    seconds: float | None = None,
    memory_bytes: int | None = None,
) -> HistoryResult:
    """Split ``ops`` (one history) with the model's partition and check each part.

    ``step_budget`` applies per part; ``seconds`` is a wall-clock budget for the whole history and
    ``memory_bytes`` a memory budget for it (the process's growth while checking it).
    Parts are ordered by difficulty as far as it can be told beforehand (fewest operations
    first), each gets a first turn of :data:`FIRST_TURN` search steps in that order, and the
    parts still undecided then take turns of :data:`TURN` steps (as Porcupine's goroutines share a
    core): one hard part never holds up the others, and the first ``illegal`` part found stops
    the rest (``skipped``).
    """
    history = ops[0].history if ops else ""
    parts = [_Part(model, part, step_budget) for part in sorted(model.partition(ops), key=len)]
    deadline = time.monotonic() + seconds if seconds is not None else None
    memory = MemoryBudget(memory_bytes) if memory_bytes is not None else None
    live = [part for part in parts if not part.done]
    turn = FIRST_TURN
    while live and not any(part.illegal for part in parts):
        for part in live:
            if part.advance(deadline, slices=turn, memory=memory) and part.illegal:
                break
        live = [part for part in live if not part.done]
        turn = TURN
    results = tuple(part.result() if part.done else part.skip() for part in parts)
    verdicts = {r.verdict for r in results}
    overall = (
        Verdict.ILLEGAL
        if Verdict.ILLEGAL in verdicts
        else Verdict.UNKNOWN
        if Verdict.UNKNOWN in verdicts
        else Verdict.OK
    )
    return HistoryResult(history, overall, results)


def _search(
    init: Any,
    step: Callable[[Any, Any, Any], tuple[bool, Any]],
    decoded: Sequence[tuple[Any, Any]],
    calls: Sequence[int],
    returns: Sequence[float],
    budget: int,
    read_state: Callable[[Any, Any], Any] | None = None,
    may_skip: Callable[[Sequence[tuple[Any, Any]]], Sequence[bool]] | None = None,
    witness: Sequence[int] | None = None,
    binding: bool = False,
) -> Generator[None, None, _Found]:
    """The search of one part (:func:`invariants._wgl.search`, compiled when it could be built),
    then the optional operations it left out placed last: a linearization of every operation.

    An operation is optional when it never returned and the model's ``may_skip`` says it is
    accepted in every state reachable after its call (so leaving it for last is always possible);
    without ``may_skip`` none is, and each must be placed before the end like any other.  A
    ``witness`` order that :func:`_replay` accepts is the linearization, without a search; a
    ``binding`` one that it does not accept makes the part illegal at the operation it stopped at."""
    inputs = [d[0] for d in decoded]
    outputs = [d[1] for d in decoded]
    if witness is not None and sorted(witness) == list(range(len(decoded))):
        stepped, after = _replay(init, step, inputs, outputs, calls, returns, witness)
        if len(stepped) == len(witness):
            return _Found(Verdict.OK, len(witness), list(witness), None, after)
        if binding:
            return _Found(Verdict.ILLEGAL, len(stepped) + 1, stepped, witness[len(stepped)], after, in_order=True)
    skippable = [False] * len(decoded) if may_skip is None else list(may_skip(decoded))
    optional = [skippable[i] and returns[i] == math.inf for i in range(len(decoded))]
    if read_state is None:
        witnesses = [NOT_A_READ] * len(decoded)
    else:
        witnesses = [read_state(op_input, op_output) for op_input, op_output in zip(inputs, outputs, strict=True)]
    code, steps, order, blocked, state = yield from _wgl.search(
        init, step, inputs, outputs, calls, returns, optional, witnesses, NOT_A_READ, UNKNOWN, budget
    )
    if code == _wgl.UNKNOWN_VERDICT:
        return _Found(Verdict.UNKNOWN, steps, order, None, state)
    if code == _wgl.ILLEGAL:
        return _Found(Verdict.ILLEGAL, steps, order, blocked, state)
    # Every required op is placed; the optional ones left take effect last (or never: the same).
    placed = set(order)
    order = list(order)
    for i in sorted((i for i in range(len(decoded)) if i not in placed), key=lambda i: (calls[i], i)):
        accepted, state = step(state, inputs[i], outputs[i])
        if not accepted:
            raise ModelContractError(f"the model rejected an operation of unknown outcome ({inputs[i]!r})")
        order.append(i)
    return _Found(Verdict.OK, steps, order, None, state)


def _replay(
    init: Any,
    step: Callable[[Any, Any, Any], tuple[bool, Any]],
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    calls: Sequence[int],
    returns: Sequence[float],
    order: Sequence[int],
) -> tuple[list[int], Any]:
    """The operations of ``order`` stepped, up to the first that makes it no linearization (one
    placed after an operation that was called only after it returned, or that the model rejects),
    and the state after them: all of ``order`` when it is a linearization."""
    state = init
    latest_call = -math.inf
    placed: list[int] = []
    for i in order:
        if returns[i] < latest_call:
            break
        accepted, after = step(state, inputs[i], outputs[i])
        if not accepted:
            break
        latest_call = max(latest_call, calls[i])
        state = after
        placed.append(i)
    return placed, state
