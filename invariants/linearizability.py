"""Linearizability of a history against a model: Wing-Gong-Lowe search, memoized, split per object.

The search is Lowe's refinement of Wing and Gong's backtracking algorithm as Porcupine implements
it (Horn and Kroening, "Faster linearizability checking via P-compositionality"):

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
* Operations whose outcome is unknown (``info``, ``invoke``) return at +infinity: they may be
  linearized anywhere after their call, including after everything else, which is the same as
  never taking effect.  Their output is :data:`UNKNOWN`, which every model must accept.

Linearizability is local (Herlihy and Wing), so a history is linearizable iff each object's
sub-history is: :func:`check_history` splits first (``Model.partition``), checks the small parts
first, gives each part a step budget (and optionally a wall-clock budget) whose exhaustion gives
``unknown`` instead of hanging, and stops at the first ``illegal`` part (the other parts are
reported ``skipped``).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from spec.history import Operation

__all__ = [
    "DEFAULT_STEP_BUDGET",
    "UNKNOWN",
    "HistoryResult",
    "MemoryBudget",
    "Model",
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
    state_after: str = ""
    reason: str = ""

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
    """Wing-Gong-Lowe search over one part; ``deadline`` is a ``time.monotonic()`` instant,
    ``memory`` the history's memory budget.

    ``ignore_outputs`` (history indexes) makes those operations' outputs :data:`UNKNOWN` while
    keeping their intervals: a weakening the counterexample shrinker uses.
    """
    started = time.perf_counter()
    label = name if name is not None else (ops[0].object if ops else "")
    if not ops:
        return ObjectResult(label, Verdict.OK, 0)
    # A model may decode a part as a whole (the machine models number crash epochs across it).
    decode_all = getattr(model, "decode_all", None)
    decoded = list(decode_all(ops)) if decode_all is not None else [model.decode(op) for op in ops]
    if ignore_outputs:
        decoded = [(d[0], UNKNOWN) if op.index in ignore_outputs else d for op, d in zip(ops, decoded, strict=True)]
    verdict, steps, order, blocked, state = _search(
        model.init(),
        model.step,
        decoded,
        [op.invoked_at for op in ops],
        [op.return_time for op in ops],
        step_budget,
        deadline,
        memory,
    )
    indexes = tuple(ops[i].index for i in order)
    blocked_index = ops[blocked].index if blocked is not None else None
    reason = ""
    if verdict is Verdict.ILLEGAL and blocked is not None:
        inp, out = decoded[blocked]
        reason = (
            f"after {len(order)} linearized operations the state is {model.describe_state(state)}; "
            f"op {blocked_index} ({model.describe_op(inp, out)}) cannot be placed: every order that "
            f"fits it before its return is rejected by the model"
        )
    elif verdict is Verdict.UNKNOWN:
        which = (
            "step budget"
            if steps > step_budget
            else "memory budget"
            if memory is not None and memory.exhausted()
            else "time budget"
        )
        reason = f"{which} exhausted after {steps} search steps"
    return ObjectResult(
        label,
        verdict,
        len(ops),
        steps,
        time.perf_counter() - started,
        indexes,
        blocked_index,
        model.describe_state(state),
        reason,
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
    Parts are checked smallest first and the first ``illegal`` stops the rest (``skipped``).
    """
    history = ops[0].history if ops else ""
    parts = sorted(model.partition(ops), key=len)
    deadline = time.monotonic() + seconds if seconds is not None else None
    memory = MemoryBudget(memory_bytes) if memory_bytes is not None else None
    results: list[ObjectResult] = []
    illegal = False
    for part in parts:
        if illegal:
            results.append(
                ObjectResult(
                    part[0].object,
                    Verdict.SKIPPED,
                    len(part),
                    reason="not checked: another object of this history is illegal",
                )
            )
            continue
        result = check_object(model, part, step_budget=step_budget, deadline=deadline, memory=memory)
        results.append(result)
        illegal = result.verdict is Verdict.ILLEGAL
    verdicts = {r.verdict for r in results}
    overall = (
        Verdict.ILLEGAL
        if Verdict.ILLEGAL in verdicts
        else Verdict.UNKNOWN
        if Verdict.UNKNOWN in verdicts
        else Verdict.OK
    )
    return HistoryResult(history, overall, tuple(results))


def _search(
    init: Any,
    step: Callable[[Any, Any, Any], tuple[bool, Any]],
    decoded: Sequence[tuple[Any, Any]],
    calls: Sequence[int],
    returns: Sequence[float],
    budget: int,
    deadline: float | None,
    memory: MemoryBudget | None = None,
) -> tuple[Verdict, int, list[int], int | None, Any]:
    """The search loop.  Returns (verdict, steps, linearization or longest prefix, blocked op, state).

    Entries are numbered 1..2n (0 is the head sentinel, 2n+1 the tail); entry ``2i+1`` is op i's
    call and ``2i+2`` its return.
    """
    n = len(decoded)
    events = sorted([(calls[i], 0, 2 * i + 1) for i in range(n)] + [(returns[i], 1, 2 * i + 2) for i in range(n)])
    end = 2 * n + 1
    nxt = [0] * (end + 1)
    prv = [0] * (end + 1)
    previous = 0
    for _, _, entry in events:
        nxt[previous] = entry
        prv[entry] = previous
        previous = entry
    nxt[previous] = end
    prv[end] = previous

    inputs = [d[0] for d in decoded]
    outputs = [d[1] for d in decoded]
    cache: set[tuple[int, Any]] = set()
    stack: list[tuple[int, Any]] = []  # (call entry, state before it)
    state = init
    linearized = 0
    entry = nxt[0]
    steps = 0
    best: list[int] = []
    best_state = init
    blocked: int | None = None
    while nxt[0] != end:
        steps += 1
        if steps > budget or (
            not steps & 1023
            and ((deadline is not None and time.monotonic() > deadline) or (memory is not None and memory.exhausted()))
        ):
            return Verdict.UNKNOWN, steps, best, None, best_state
        if entry & 1:  # a call
            i = entry >> 1
            accepted, new_state = step(state, inputs[i], outputs[i])
            if accepted:
                key = (linearized | (1 << i), new_state)
                if key not in cache:
                    cache.add(key)
                    stack.append((entry, state))
                    state = new_state
                    linearized = key[0]
                    ret = entry + 1
                    # lift the call and its return out of the list
                    nxt[prv[entry]] = nxt[entry]
                    prv[nxt[entry]] = prv[entry]
                    nxt[prv[ret]] = nxt[ret]
                    prv[nxt[ret]] = prv[ret]
                    entry = nxt[0]
                    continue
            entry = nxt[entry]
        else:  # a return: its op had to be linearized by now; backtrack
            if len(stack) > len(best) or blocked is None:
                best = [e >> 1 for e, _ in stack]
                best_state = state
                blocked = (entry - 1) >> 1
            if not stack:
                return Verdict.ILLEGAL, steps, best, blocked, best_state
            entry, state = stack.pop()
            linearized &= ~(1 << (entry >> 1))
            ret = entry + 1
            # unlift: the return first, then the call (the reverse of lifting)
            nxt[prv[ret]] = ret
            prv[nxt[ret]] = ret
            nxt[prv[entry]] = entry
            prv[nxt[entry]] = entry
            entry = nxt[entry]
    return Verdict.OK, steps, [e >> 1 for e, _ in stack], None, state
